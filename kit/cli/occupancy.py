"""``python -m kit occupancy PATH…``: the residual-occupancy block (``kit.analysis.occupancy_block``) of session
files a user already has, each file one session (docs/method.md#occupancy)."""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import pandas as pd

from kit import transcripts
from kit.analysis import occupancy_block
from kit.analysis.occupancy import WINDOW_TOKENS, measure
from kit.errors import InputError, KitError
from kit.transcripts import codex_exec, sources


def _files(patterns: list[str]) -> list[Path]:
    """Session files named or matched (a quoted glob, or a folder's *.jsonl), in order, each once."""
    found: list[Path] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_dir():
            found += sorted(path.rglob("*.jsonl"))
        elif path.is_file():
            found.append(path)
        else:
            found += [Path(p) for p in sorted(glob.glob(pattern, recursive=True)) if Path(p).is_file()]
    return list(dict.fromkeys(found))


def session(path: Path, window_tokens: int = WINDOW_TOKENS) -> pd.DataFrame:
    """One session file's occupancy rows (trial id = the file name), as the parse stage would number it.

    Subagent responses inside it are left out (their own window); a subagent's file given alone is shown. A file of
    whole turns (``codex_exec.turn_rows``) has no block: an ``InputError`` says why."""
    req, res = transcripts.tables([path])
    if codex_exec.turn_rows(req).any():  # one file, one format: all its rows are turns
        raise InputError(
            f"its {len(req)} rows are whole turns of `codex exec --json` (no per-request usage), whose input sums "
            "the turn's prompts: occupancy needs the last request's; read the thread's rollout (~/.codex/sessions)"
        )
    req, _ = sources.number(req)
    if not (~req["sidechain"] & (req["file_role"] == "main")).any():  # a subagent's file alone: its own window
        req = req.assign(file_role="main", sidechain=False)
    ident = {"batch": "sessions", "arm": "session", "run": 0, "trial_id": path.name}
    events = pd.DataFrame(req.attrs.get("events", []), columns=["cycle", "kind"]).assign(trial_id=path.name)
    events = events.assign(batch="sessions").dropna(subset=["cycle"])
    return measure(req.assign(**ident), res.assign(**ident), events=events, window_tokens=window_tokens)


def main(argv: list[str] | None = None) -> int:
    """``python -m kit occupancy PATH…``: the block of every session file given; exit 1 if none is read."""
    ap = argparse.ArgumentParser(prog="python -m kit occupancy", description=occupancy_block.__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="session files, folders or quoted globs (Claude Code, Codex …)")
    ap.add_argument("--window-tokens", type=int, default=WINDOW_TOKENS, help="context window (default 200k)")
    args = ap.parse_args(argv)
    files = _files(args.paths)
    if not files:
        print(f"no session file found at {' '.join(args.paths)}", file=sys.stderr)
        return 1
    shown = 0
    for path in files:
        try:
            rows = session(path, args.window_tokens)
        except (KitError, OSError) as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            continue
        if rows.empty or (rows["calibration"] == "usage unknown").all():
            print(f"{path}: no response with known usage", file=sys.stderr)
            continue
        print(f"{path}\n{occupancy_block.block(rows, args.window_tokens)}\n")
        shown += 1
    return 0 if shown else 1
