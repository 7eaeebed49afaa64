"""``python -m kit parse PATH… [--format auto] [--out FILE] [--strict]``: transcripts to a table, with totals.

What is read, and how a batch folder is read once per response, is ``kit.transcripts.collect``'s; this is its
command line. Every file read is accounted for: one line for each that gave no rows, with why
(``kit.transcripts.accounting``: client-error stand-ins, a session of local commands only, every response
counted in another named file, a reader's issue). Exit status 1 when a path does not exist, when nothing could be
read, or when ``--strict`` meets a problem; 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from kit.transcripts import FORMATS, TranscriptError
from kit.transcripts.collect import collect, totals, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit parse", description="Read agent transcripts into rows.")
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        help="transcript files, kit batch or trial folders, or folders of *.jsonl / *.txt",
    )
    parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    parser.add_argument("--out", type=Path, help="write the rows to FILE (.parquet or .csv)")
    parser.add_argument("--strict", action="store_true", help="stop at the first unreadable line")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.suffix not in (".parquet", ".csv"):
        parser.error(f"--out {args.out}: expected a .parquet or .csv file name")
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 1
    try:
        df, issues, note = collect(args.paths, format=args.format, strict=args.strict)
    except TranscriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if note:
        print(note)
    if not df.empty:
        with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 80):
            print(totals(df).to_string())
    if args.out is not None and not df.empty:
        write(df, args.out)
        print(f"wrote {len(df)} rows to {args.out}")
    accounts = df.attrs.get("accounting", [])
    empty = [account for account in accounts if not account.rows]
    if empty:
        print(f"{len(empty)} of {len(accounts)} file(s) gave no rows:")
        for account in empty:
            print(account.text())
    for issue in issues:
        print(f"{issue['source_path']}:{issue['source_line']}: {issue['reason']}", file=sys.stderr)
    if df.empty:
        print(f"error: no API responses could be read from {', '.join(map(str, args.paths))}", file=sys.stderr)
        return 1
    return 0
