"""The canonical tables every stage shares (docs/tables.md, docs/design.md).

One row per model API response in ``requests``; parse writes it, analysis and figures read it.
Token columns are nullable integers: where a source gave no usage the row says
``usage_known=False`` and the counts are missing (``<NA>``), never zero.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; builds the columns (_array)

IDENTITY = ["batch", "arm", "run", "trial_id", "turn", "cycle"]
# Where a response sits among its trial's transcript files (docs/method.md#transcripts).
FILES = [
    "file_cycle",  # the response's cycle within its own transcript file (``cycle`` counts across the trial)
    "file_role",  # main, subagent or compaction: whose context window the file's responses fill
    "sidechain",  # the response belongs to a subagent or a compaction request, not the main conversation
    "side_request",  # compaction or unrecorded: a request the client made besides the conversation's (method.md#totals)
]
PROVENANCE = ["backend", "model", "source_format", "source_path", "source_line"]
TOKENS = [
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "uncached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
]
# What the response itself wrote, from the transcript's content (docs/method.md#transcripts); NA where unknown.
OUTPUT = [
    "output_chars",  # characters of the response's text, visible reasoning and tool-call inputs
    "output_framing_chars",  # characters of its blocks besides what the model wrote in them (``kit.framing``)
    "output_o200k_tokens",  # ``o200k_base`` tokens of those blocks whole, counted with the tool results (tables)
]
# Codex Code Mode: how the response called tools (docs/method.md#transcripts); NA outside Codex rollouts.
CODE_MODE = [
    "exec_cells",  # ``custom_tool_call`` items named ``exec``: Code Mode cells
    "exec_tool_calls",  # ``tools.<name>(`` calls written in those cells
    "exec_multi_call_cells",  # cells with two or more such calls
    "exec_promise_all_cells",  # cells using ``Promise.all`` or ``Promise.allSettled``
    "function_calls",  # plain ``function_call`` items (tools called without a cell)
]
# Codex ``rate_limits`` seen with the response's ``token_count`` event: share of the plan's window used.
QUOTA = [
    "quota_primary_used",  # the primary window's ``used_percent``
    "quota_secondary_used",  # the secondary window's ``used_percent``
]
REQUEST_COLUMNS = [
    *IDENTITY,
    *FILES,
    *PROVENANCE,
    *TOKENS,
    "tool_calls",
    *OUTPUT,
    *CODE_MODE,
    *QUOTA,
    "usage_known",
    "started_at",
    "wall_s",
]

REQUEST_DTYPES: dict[str, str] = {
    "batch": "string",
    "arm": "string",
    "run": "Int64",
    "trial_id": "string",
    "turn": "Int64",
    "cycle": "Int64",
    "file_cycle": "Int64",
    "file_role": "string",
    "sidechain": "boolean",
    "side_request": "string",
    "backend": "string",
    "model": "string",
    "source_format": "string",
    "source_path": "string",
    "source_line": "Int64",
    **{c: "Int64" for c in TOKENS},
    "tool_calls": "Int64",
    **{c: "Int64" for c in [*OUTPUT, *CODE_MODE]},
    **{c: "Float64" for c in QUOTA},
    "usage_known": "boolean",
    "started_at": "string",
    "wall_s": "Float64",
}

TOOL_RESULT_COLUMNS = [
    "batch",
    "arm",
    "run",
    "trial_id",
    "cycle",
    "tool",
    "category",
    "chars",
    "framing_chars",
    "o200k_tokens",
    "is_error",
]
TOOL_RESULT_DTYPES: dict[str, str] = {
    "batch": "string",
    "arm": "string",
    "run": "Int64",
    "trial_id": "string",
    "cycle": "Int64",
    "tool": "string",
    "category": "string",
    "chars": "Int64",
    "framing_chars": "Int64",
    "o200k_tokens": "Int64",
    "is_error": "boolean",
}

ISSUE_COLUMNS = ["source_path", "source_line", "reason"]


def frame(rows: list[dict], columns: list[str], dtypes: dict[str, str]) -> pd.DataFrame:
    """A DataFrame with exactly ``columns`` in order, each of its dtype in ``dtypes`` (a missing key is NA)."""
    return pd.DataFrame(_cells(rows, columns, dtypes), columns=columns, copy=False)


def _cells(rows: list[dict], columns: list[str], dtypes: dict[str, str]) -> dict[str, Any]:
    """``frame``'s columns as arrays, each made straight in its dtype from the rows' values.

    ``from_records`` and then ``astype`` cost more for any number of rows (an object frame first, then each
    column inferred and cast: bench/parse.md), which a warm re-read of a few changed transcripts pays
    on every call.
    """
    return {c: _array([row.get(c) for row in rows], dtypes[c]) for c in columns}


ARROW_TYPES = {"Int64": pa.int64(), "Float64": pa.float64(), "boolean": pa.bool_(), "string": pa.large_string()}
PANDAS_TYPES = {name: pd.api.types.pandas_dtype(name) for name in ARROW_TYPES}  # parsed once (bench/parse.md)


def _array(values: list, dtype: str) -> Any:
    """``pd.array(values, dtype=dtype)``, made through Arrow where Arrow takes the values as they are: a
    fifth of the time (bench/parse.md), for each of a cold read's columns. Values
    Arrow refuses (a bool among counts, which pandas takes as 1) go pandas' own way, so the result and
    its errors are pandas'. The dtypes are parsed once (``PANDAS_TYPES``): parsing each column's name
    was a fifth of a frame of a few hundred rows, which a warm re-read makes on every call."""
    try:
        return PANDAS_TYPES[dtype].__from_arrow__(pa.array(values, type=ARROW_TYPES[dtype]))
    except (pa.ArrowException, TypeError, ValueError, OverflowError, KeyError):
        return pd.array(values, dtype=dtype)


def requests_frame(rows: list[dict]) -> pd.DataFrame:
    """Canonical request rows; derived columns are filled where the parts are known (on the arrays, before
    the frame is made: a frame's column assignment costs ten times as much)."""
    cells = _cells(rows, REQUEST_COLUMNS, REQUEST_DTYPES)
    cells["file_cycle"] = cells["file_cycle"].fillna(cells["cycle"])  # one file read alone: its cycles are the file's
    cells["uncached_input_tokens"] = cells["uncached_input_tokens"].fillna(
        cells["input_tokens"] - cells["cache_read_tokens"]
    )
    cells["total_tokens"] = cells["total_tokens"].fillna(cells["input_tokens"] + cells["output_tokens"])
    return pd.DataFrame(cells, columns=REQUEST_COLUMNS, copy=False)
