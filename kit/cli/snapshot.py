"""``python -m kit snapshot PATH``: a published three-arm snapshot recounted (``kit.analysis.snapshot``), with a
t-interval over prompts (docs/method.md#savings); ``--export BATCH``: an analysed batch written in that shape
first (``kit.analysis.snapshot_export``), then recounted the same way."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kit.analysis.snapshot import TERSE, load_snapshot, snapshot_markdown, snapshot_table
from kit.analysis.snapshot_export import ExportedSnapshot, export_batch, write_export
from kit.errors import KitError


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a confidence between 0 and 1, got {text}")
    return value


def _export(batch: str, out: str | None) -> tuple[Path, ExportedSnapshot]:
    """Write the batch's snapshot; say where, how much, and what it is (a simulation, runs left out)."""
    snapshot = export_batch(batch)
    meta = snapshot.metadata
    path = write_export(snapshot, Path(out) if out else Path(batch) / "results.json")
    what = "SIMULATED (embedded provider), not a model's cost" if meta.simulated else f"endpoint {meta.endpoint}"
    print(f"wrote {path}: {meta.n_prompts} runs x {len(snapshot.arms)} arms of batch {meta.batch} ({what})")
    if meta.excluded_runs:
        left = "; ".join(f"{t.trial_id or t.arm} {t.status}: {t.reason}" for t in meta.unfinished_trials)
        print(f"left out runs {meta.excluded_runs}: not every arm finished ({left})")
    return path, snapshot


def main(argv: list[str] | None = None) -> int:
    """``python -m kit snapshot PATH`` or ``--export BATCH``: print a snapshot's savings table with its interval.

    A file that cannot be read or is not a snapshot, or a batch that cannot be exported, gives one line on stderr
    naming the place, and exit 1.
    """
    ap = argparse.ArgumentParser(
        prog="python -m kit snapshot",
        description="Recount a committed three-arm snapshot (results.json) and add a confidence interval; "
        "or export an analysed batch as such a snapshot first.",
    )
    ap.add_argument("path", nargs="?", help="the snapshot file, e.g. tests/fixtures/caveman/results.json")
    ap.add_argument("--export", metavar="BATCH", help="write the analysed batch folder BATCH as a snapshot")
    ap.add_argument("-o", "--out", help="where --export writes (default BATCH/results.json)")
    ap.add_argument("--control", help=f"the arm savings are measured against (default {TERSE}, or the batch's)")
    ap.add_argument("--confidence", type=_fraction, default=0.95, help="interval level (default 0.95)")
    args = ap.parse_args(argv)
    if (args.path is None) == (args.export is None):
        ap.error("give a snapshot PATH or --export BATCH (one of them)")
    if args.out and not args.export:
        ap.error("--out goes with --export")
    try:
        path, control = Path(args.path or ""), args.control or TERSE
        if args.export:
            path, exported = _export(args.export, args.out)
            control = args.control or exported.metadata.baseline or TERSE
        snapshot = load_snapshot(path)
        table = snapshot_table(snapshot, control=control, confidence=args.confidence)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(snapshot_markdown(table), end="")
    return 0
