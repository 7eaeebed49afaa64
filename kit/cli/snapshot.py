"""``python -m kit snapshot PATH``: a published three-arm snapshot recounted (``kit.analysis.snapshot``), with a
t-interval over prompts (docs/method.md#savings)."""

from __future__ import annotations

import argparse
import sys

from kit.analysis.snapshot import TERSE, SnapshotError, load_snapshot, snapshot_markdown, snapshot_table


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a confidence between 0 and 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """``python -m kit snapshot PATH``: print a snapshot's savings table with its confidence interval.

    A file that cannot be read or is not a snapshot gives one line on stderr naming the place, and exit 1.
    """
    ap = argparse.ArgumentParser(
        prog="python -m kit snapshot",
        description="Recount a committed three-arm snapshot (results.json) and add a confidence interval.",
    )
    ap.add_argument("path", help="the snapshot file, e.g. tests/fixtures/caveman/results.json")
    ap.add_argument("--control", default=TERSE, help=f"the arm savings are measured against (default {TERSE})")
    ap.add_argument("--confidence", type=_fraction, default=0.95, help="interval level (default 0.95)")
    args = ap.parse_args(argv)
    try:
        snapshot = load_snapshot(args.path)
        table = snapshot_table(snapshot, control=args.control, confidence=args.confidence)
    except SnapshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(snapshot_markdown(table), end="")
    return 0
