"""``python -m kit``: the kit's command line (batch, provider, parse, ping, snapshot; docs/design.md).

Every command answers ``--help``. A mistake is one line on stderr starting ``error:`` and exit code 1;
a command line argparse cannot read is its usage message and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from kit.errors import InputError, KitError

INTERRUPTED = "interrupted; run the same command again to resume"


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when below it (``outputs/<batch>``), else absolute."""
    return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)


def _batch(argv: list[str]) -> int:
    from kit import pipeline
    from kit.params import add_parameter_options

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
    from kit.layout import BatchDir

    report = BatchDir(folder).report_html
    if BatchDir(folder).design.exists():
        from kit.stages import plot

        # headline_for is the headline's sentences, a blank line, then its table: the sentences are the news.
        print(plot.headline_for(folder).split("\n\n", 1)[0])
    if report.exists():
        print(f"report: {_shown(report)}")
    return 0


def _provider(argv: list[str]) -> int:
    from kit.provider import cli

    usage = "usage: python -m kit provider {serve,proxy} [options]  (python -m kit provider serve --help: options)"
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if argv[:1] not in (["serve"], ["proxy"]):
        print(usage, file=sys.stderr)
        return 2
    return cli.main(argv, batch_settings=_served_batch) or 0  # it reads the word serve or proxy itself


def _served_batch(file: str | None, yaml_texts: list[str], pairs: list[tuple[str, str]]) -> dict:
    """``provider serve -f …``: the settings the run stage's provider would use for this batch and salt."""
    from kit import pipeline
    from kit.stages import run

    params = pipeline.load_params(file, yaml_texts, pairs)
    if params.get("salt") is None:
        raise InputError("serving as a batch needs the batch's salt: -p salt S (the manifest's salt)")
    return vars(run.provider_settings(run.configure(params), params["salt"]))


def _parse(argv: list[str]) -> int:
    from kit.transcripts import cli

    return cli.main(argv) or 0


def _ping(argv: list[str]) -> int:
    from kit import ping

    return ping.main(argv)


def _occupancy(argv: list[str]) -> int:
    from kit import occupancy_block

    return occupancy_block.main(argv)


def _history(argv: list[str]) -> int:
    from kit.stages import history

    return history.main(argv)


def _snapshot(argv: list[str]) -> int:
    from kit import snapshot

    return snapshot.main(argv)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "batch": (_batch, "run the stage notebooks into outputs/<batch>/ (params/*.yaml, -p, -y, --stages)"),
    "provider": (
        _provider,
        "provider serve: the embedded (simulated) provider on 127.0.0.1; provider proxy: a "
        "recording proxy in front of a real endpoint",
    ),
    "parse": (_parse, "any agent transcript -> canonical request rows (one per model response)"),
    "occupancy": (_occupancy, "residual context occupancy of session files, as docs/method.md#occupancy prints it"),
    "history": (_history, "your own Claude Code and Codex sessions: usage views, cost, occupancy, cache, before/after"),
    "ping": (_ping, "one short request through a backend's whole path"),
    "snapshot": (_snapshot, "recount a published three-arm snapshot (results.json) with a bootstrap interval"),
}


def parser() -> argparse.ArgumentParser:
    """The top level: which command, and the list of commands for ``--help``."""
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    ap = argparse.ArgumentParser(
        prog="python -m kit",
        description="Measure the token cost of LLM agent configurations (see README.md).",
        epilog=f"commands:\n{listing}\n\npython -m kit COMMAND --help shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return COMMANDS[args.command][0](args.args)


if __name__ == "__main__":
    sys.exit(main())
