"""Occupancy attribution against the truth (issue #15): a small occupancy batch on each real CLI against the
embedded provider, whose log holds every tool result's own prompt segment with its exact token count.

The truth of a result is its segment (for each request, the last n new segments, n = the tool results the
log lists for it). The kit prices each result at its trial's chars/token (docs/method.md#calibration), so
the comparison is per result, as the error bar the kit reports (``rel_err``) is per result: the median of
|price - truth| / truth. "Agrees" means within a factor of 2 or within 1 percentage point.

The target (a median error <= 2% and a reported error bar that agrees) is not met yet and is marked as
such (strict xfail, so meeting it fails the mark and the mark is removed): usage data fix each gap's
growth exactly, but not how a gap's per-block framing (ids and keys of each call and result block, and
the response's own blocks; ~35-60 tokens per block on these clients) splits between a small result and
the assistant blocks beside it, and the pack's explore results (~1-2k characters) are small enough for
that split to matter by 10-30%. What holds is asserted: the log's results are the table's, one to one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from test_packs_on_cli import small_batch

from kit import occupancy
from kit.agents import cli_common
from kit.stages import parse

pytestmark = pytest.mark.e2e
BACKENDS = ("claude", "codex")
TARGET = 0.02


def truth(folder: Path) -> pd.DataFrame:
    """Every tool result the provider saw, in order: its characters and its own segment's tokens.

    (No result leaves the window in these sessions, so every one is resident at the end.)"""
    rows = []
    for log in sorted((folder / "raw").glob("*/provider_log.jsonl")):
        for line in log.read_bytes().splitlines():
            rec = orjson.loads(line)
            results, segments = rec["tool_results"], rec["segments"]
            for result, (_, tokens, _) in zip(results, segments[len(segments) - len(results) :], strict=True):
                rows.append({"trial_id": rec["trial_id"], "chars": result["chars"], "tokens": tokens})
    return pd.DataFrame(rows)


def attributed(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per result, the kit's price (characters at the trial's chars/token) beside the truth; the trials' rows."""
    tables = parse.parse_batch(folder)
    results = tables["tool_results"].sort_values(["trial_id", "cycle"], kind="stable").reset_index(drop=True)
    trials = occupancy.measure(tables["requests"], results, events=tables.get("events"))
    trials = trials[trials["category"] == occupancy.CONTEXT].set_index("trial_id")
    true = truth(folder).sort_values("trial_id", kind="stable").reset_index(drop=True)
    assert list(true["trial_id"]) == list(results["trial_id"]), "the log's tool results are the table's"
    assert list(true["chars"]) == list(results["chars"]), "the log's characters are the table's"
    price = results["chars"] / results["trial_id"].map(trials["chars_per_token"])
    return true.assign(price=price, error=(price - true["tokens"]).abs() / true["tokens"]), trials


def agrees(reported: float, measured: float) -> bool:
    """Within a factor of 2, or within 1 percentage point."""
    return abs(reported - measured) <= 0.01 or 0.5 <= reported / measured <= 2


@pytest.fixture(scope="module", params=BACKENDS)
def batch(request, tmp_path_factory) -> tuple[pd.DataFrame, pd.DataFrame]:
    backend = request.param
    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    return attributed(small_batch(tmp_path_factory.mktemp(backend), "occupancy", backend))


def test_the_logs_results_are_the_tables_and_every_one_is_priced(batch):
    results, trials = batch
    assert len(results) and results["price"].notna().all()
    assert set(trials["calibration"]) <= {"measured", "arm", "default"}


@pytest.mark.xfail(
    strict=True,
    reason="issue #15 open: framing split between small results and assistant blocks (see module docstring)",
)
def test_attribution_error_is_within_two_percent_and_the_error_bar_agrees(batch):
    results, trials = batch
    measured = float(results["error"].median())
    reported = float(np.nanmedian(trials["rel_err"].astype(float))) if trials["rel_err"].notna().any() else np.nan
    assert measured <= TARGET, f"median attribution error {measured:.1%} > {TARGET:.0%}"
    assert agrees(reported, measured), f"reported ±{reported:.1%}, measured {measured:.1%}"
