"""``python -m kit history [PATH…] [--out DIR]``: the history notebook (``kit.stages.history``) over a user's own
sessions, executed into a folder laid out as a batch's, with what the parse cache said on the terminal."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pandas as pd

from kit.analysis.occupancy import WINDOW_TOKENS
from kit.cli import pipeline
from kit.experiment.layout import BatchDir
from kit.files import read_csv_as_written
from kit.stages import history
from kit.transcripts.cache import NOTE_PREFIX


def main(argv: list[str] | None = None) -> int:
    """``python -m kit history [PATH…] [--out DIR]``: execute notebooks/history.ipynb into DIR."""
    ap = argparse.ArgumentParser(prog="python -m kit history", description=history.__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="transcript files or folders (default: Claude Code's and Codex's own)")
    ap.add_argument("--out", type=Path, help="output folder (default: outputs/history-<UTC time>)")
    ap.add_argument("--since", help="first day, YYYY-MM-DD (UTC)")
    ap.add_argument("--until", help="last day, YYYY-MM-DD (UTC)")
    ap.add_argument("--compare", help='two groups as JSON, e.g. {"by": "period", "a": [null, "2026-05-01"], '
                    '"b": ["2026-05-02", null]} or {"by": "project", "a": "x", "b": "y"}')  # fmt: skip
    ap.add_argument("--window-tokens", type=int, default=WINDOW_TOKENS)
    args = ap.parse_args(argv)
    paths = [str(Path(p).expanduser().resolve()) for p in args.paths] or [str(p) for p in history.default_paths()]
    if not paths:
        print("error: no transcript folder found; pass PATH", file=sys.stderr)
        return 1
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    try:
        spec = orjson.loads(args.compare) if args.compare else None
    except orjson.JSONDecodeError as exc:
        print(f"error: --compare is not JSON: {exc}", file=sys.stderr)
        return 1
    out = (args.out or Path("outputs") / f"history-{datetime.now(UTC):%Y%m%dT%H%M%SZ}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    parameters = {"paths": paths, "since": args.since, "until": args.until, "group_by": list(history.VIEWS)}
    parameters |= {"compare": spec, "window_tokens": args.window_tokens, "outputs_dir": str(out)}
    try:
        pipeline.run_stage("history", out, parameters)
    except pipeline.StageFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for note in _cache_notes(out):
        print(f"note: {note}", file=sys.stderr)
    print(f"history folder: {out}")
    print(f"report: {out / 'report.html'}")
    return 0


def _cache_notes(folder: Path) -> list[str]:
    """What the parse cache told this run (a folder it would not trust, and why): the notebook keeps it among
    the parse issues, and the terminal says it too, since a refused cache is the user's to look at."""
    path = BatchDir(folder).tables / "parse_issues.csv"
    issues = read_csv_as_written(path) if path.is_file() else pd.DataFrame(columns=["reason"])
    told = issues[issues["reason"].astype(str).str.startswith(NOTE_PREFIX)]
    return [f"{row.source_path}: {row.reason}" for row in told.itertuples()]
