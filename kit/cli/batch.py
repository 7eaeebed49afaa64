"""``python -m kit batch -f params/X.yaml [-p KEY VALUE]… [-y YAML] [--stages …]``: the four stage notebooks into
``outputs/<batch>/`` (``kit.cli.pipeline``), then the folder, the headline and the report printed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kit.cli import pipeline
from kit.errors import KitError
from kit.experiment.layout import BatchDir
from kit.params import add_parameter_options

INTERRUPTED = "interrupted; run the same command again to resume"


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when below it (``outputs/<batch>``), else absolute."""
    return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kit batch",
        description="Run the stage notebooks (run, parse, analyze, plot) into outputs/<batch>/. Every parameter "
        "is checked first; a mistake is one line and writes nothing.",
    )
    add_parameter_options(ap)
    ap.add_argument(
        "--stages",
        default=",".join(pipeline.STAGES),
        help="comma-separated subset, in order; without run, -p batch NAME or -p batch_dir PATH picks the batch "
        "(default: the latest)",
    )
    args = ap.parse_args(argv)
    try:
        params = pipeline.load_params(args.file, args.yaml, [tuple(p) for p in args.pairs])
        folder = pipeline.execute(params, stages=[s for s in args.stages.split(",") if s])
    except KitError as exc:  # a named, located mistake (ParamError, StageFailed …); a bug keeps its traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the run stage ended its CLIs; the trials it left unrecorded run on a resume
        print(INTERRUPTED, file=sys.stderr)
        return 130
    print(f"batch folder: {_shown(folder)}")
    report = BatchDir(folder).report_html
    if BatchDir(folder).design.exists():
        from kit.stages import plot

        # headline_for is the headline's sentences, a blank line, then its table: the sentences are the news.
        print(plot.headline_for(folder).split("\n\n", 1)[0])
    if report.exists():
        print(f"report: {_shown(report)}")
    return 0
