"""The canonical frames are built a column at a time (``schema.frame``): the same tables as building an
object frame from the row dicts and casting it, which is what they replaced."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kit import schema

ROWS = {
    "none": [],
    "one": [{"cycle": 1, "model": "gpt", "sidechain": False, "quota_primary_used": 12.5}],
    "missing keys and NA": [
        {"cycle": None, "model": None, "sidechain": None, "quota_primary_used": None},
        {"cycle": pd.NA, "model": pd.NA, "sidechain": pd.NA, "quota_primary_used": pd.NA},
        {},
    ],
    "numpy and float forms": [
        {"cycle": np.int64(4), "input_tokens": 3.0, "quota_primary_used": 2, "sidechain": np.nan},
        {"cycle": np.nan, "input_tokens": 2**60, "quota_primary_used": float("nan"), "sidechain": True},
    ],
    "derived columns filled": [
        {"cycle": 2, "input_tokens": 100, "cache_read_tokens": 60, "output_tokens": 5},
        {"cycle": 3, "file_cycle": 1, "input_tokens": 10, "uncached_input_tokens": 7, "total_tokens": 99},
    ],
}


def reference(rows: list[dict]) -> pd.DataFrame:
    """``requests_frame`` as it was: ``from_records``, then ``astype``, then the derived columns."""
    df = pd.DataFrame.from_records(rows, columns=schema.REQUEST_COLUMNS).astype(schema.REQUEST_DTYPES)
    df["file_cycle"] = df["file_cycle"].fillna(df["cycle"])
    df["uncached_input_tokens"] = df["uncached_input_tokens"].fillna(df["input_tokens"] - df["cache_read_tokens"])
    df["total_tokens"] = df["total_tokens"].fillna(df["input_tokens"] + df["output_tokens"])
    return df


@pytest.mark.parametrize("rows", ROWS.values(), ids=ROWS.keys())
def test_requests_frame_equals_the_cast_object_frame(rows: list[dict]) -> None:
    pd.testing.assert_frame_equal(schema.requests_frame(rows), reference(rows))


def test_tool_frame_equals_the_cast_object_frame() -> None:
    rows: list[dict[str, object]] = [{"tool": "Bash", "chars": 10, "is_error": False}, {"cycle": 2, "category": None}]
    want = pd.DataFrame.from_records(rows, columns=schema.TOOL_RESULT_COLUMNS).astype(schema.TOOL_RESULT_DTYPES)
    got = schema.frame(rows, schema.TOOL_RESULT_COLUMNS, schema.TOOL_RESULT_DTYPES)
    pd.testing.assert_frame_equal(got, want)
