"""``python -m kit parse PATH… [--format auto] [--out FILE] [--strict]``: transcripts to a table, with totals.

Prints one line of token totals per file and overall (a file with responses of unknown usage says how
many, because its sums are then partial), then every issue as ``file:line: reason``. Exit status 1
when ``--strict`` meets a problem, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from kit.layout import write_table
from kit.transcripts import FORMATS, TranscriptError, read

TOTALS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "uncached_input_tokens", "output_tokens"]
TOTALS += ["total_tokens"]


def totals(df: pd.DataFrame) -> pd.DataFrame:
    """Per-file and overall sums of the token columns, with counts of responses and unknown usage."""
    grouped = df.groupby("source_path", sort=False)
    table = grouped[TOTALS].sum(min_count=1)
    table.insert(0, "unknown", grouped["usage_known"].apply(lambda s: int((~s.fillna(False)).sum())))
    table.insert(0, "rows", grouped.size())
    table.insert(0, "format", grouped["source_format"].first())
    overall = ["", len(df), int((~df["usage_known"].fillna(False)).sum()), *df[TOTALS].sum(min_count=1)]
    table.loc["TOTAL"] = overall
    return table


def write(df: pd.DataFrame, out: Path) -> None:
    if out.suffix not in (".parquet", ".csv"):
        raise ValueError(f"--out {out}: expected a .parquet or .csv file name")
    write_table(out, df)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit parse", description="Read agent transcripts into rows.")
    parser.add_argument("paths", nargs="+", type=Path, help="transcript files, or folders of *.jsonl / *.txt")
    parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    parser.add_argument("--out", type=Path, help="write the rows to FILE (.parquet or .csv)")
    parser.add_argument("--strict", action="store_true", help="stop at the first unreadable line")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.suffix not in (".parquet", ".csv"):
        parser.error(f"--out {args.out}: expected a .parquet or .csv file name")
    try:
        df = read(args.paths, format=args.format, strict=args.strict)
    except TranscriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if df.empty:
        print("no API responses found")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 80):
            print(totals(df).to_string())
    if args.out is not None:
        write(df, args.out)
        print(f"wrote {len(df)} rows to {args.out}")
    for issue in df.attrs["issues"]:
        print(f"{issue['source_path']}:{issue['source_line']}: {issue['reason']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
