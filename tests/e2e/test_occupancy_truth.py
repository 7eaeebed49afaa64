"""Occupancy attribution against the truth (issue #15): a small occupancy batch on each real CLI against the
embedded provider, whose log holds every tool result's own prompt segment with its exact token count.

The truth of a result is its segment (for each request, the last n new segments, n = the tool results the
log lists for it). The kit prices each result at its trial's chars/token (docs/method.md#calibration), so
the comparison is per result, as the error bar the kit reports (``rel_err``) is per result: the median of
|price - truth| / truth. "Agrees" means within a factor of 2 or within 1 percentage point.

The truth is the right one for "what the result occupies": the log counts each content block whole, so a
result's segment is its own block as the client sent it: the message's role line where the block opens
the message, the block's keys and call id, and the content (33-44 tokens besides the content per Claude
``tool_result``, 55-61 per Codex ``function_call_output`` of a shell command, 74-79 of an MCP call).
The framing of its own block belongs to it and is in the truth; the blocks beside it (the response's
thinking, text, reasoning and call blocks) are not.

The target (a median error <= 2% and a reported error bar that agrees) is not met and is marked as such
(strict xfail, so meeting it fails the mark and the mark is removed). Measured (median per result; explore
/ files arm; prices err high):

- preset small, 1 run per arm (this test; 3 runs of it and the issue's): Claude Code 8-9% (8-14 / 5-9),
  Codex 21% (30 / 17-18);
- preset small, 3 runs per arm: Claude Code 10.2% (16.3 / 7.1), Codex 20.2% (30.1 / 17.9);
- preset large, 2 runs per arm: Claude Code 2.1% (11.3 / 1.5), Codex 6.2% (31.0 / 3.2).

Two causes, docs/method.md#calibration: every gap also carries the response's own blocks, ~70 tokens per
call on Claude Code and ~185 on Codex for 60-150 characters (mostly framing), which deflates the ratio;
usage cannot tell that framing from the result's (each call brings one result), and a per-block term fitted
beside the ratio trades framing for slope, because on this pack larger results are denser. And results
differ in density (3.3-4.3 chars/token net of framing), which no single ratio follows: even the best ratio
per trial in hindsight leaves a median error of ~6% on the small preset (~2.6% large), ~3% (1.6-1.8%) with
each result's exact framing added. So <= 2% per result is out of reach on the small preset for any per-trial
proportional price. Calibrating on each block's characters as the client wrote it (JSON with keys and ids,
from the transcripts; not supplied by the readers yet) instead of content characters was prototyped on the
same batches: 5.2% / 6.8% (small), 1.7% / 2.4% (large), Claude Code / Codex. What holds is asserted: the
log's results are the table's, one to one, and the error stays under the ceiling measured today (a
regression guard, not the target).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from kit import occupancy
from kit.agents import cli_common
from kit.stages import parse
from tests.support import small_batch

pytestmark = pytest.mark.e2e
BACKENDS = ("claude", "codex")
TARGET = 0.02
CEILING = 0.30  # median error measured today: <= 10% Claude Code, <= 21% Codex (preset small)


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
    priced = results["chars"] + results["framing_chars"].fillna(0)
    price = priced / results["trial_id"].map(trials["chars_per_token"])
    return true.assign(price=price, error=(price - true["tokens"]).abs() / true["tokens"]), trials


def by_arm(results: pd.DataFrame) -> str:
    """The median error per arm, for a failure message (the docstring's numbers are read this way)."""
    arms = results["trial_id"].str.split("-", n=1).str[1]
    return ", ".join(f"{arm} {err:.1%}" for arm, err in results.groupby(arms)["error"].median().items())


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


def test_attribution_error_stays_under_todays_ceiling(batch):
    results, _ = batch
    measured = float(results["error"].median())
    assert measured <= CEILING, f"median attribution error {measured:.1%} ({by_arm(results)}) > {CEILING:.0%}"


@pytest.mark.xfail(
    strict=True,
    reason="issue #15 open: response-block framing deflates the ratio and result densities differ by "
    "+-10% (module docstring); <= 2% per result is out of reach on the small preset",
)
def test_attribution_error_is_within_two_percent_and_the_error_bar_agrees(batch):
    results, trials = batch
    measured = float(results["error"].median())
    reported = float(np.nanmedian(trials["rel_err"].astype(float))) if trials["rel_err"].notna().any() else np.nan
    assert measured <= TARGET, f"median attribution error {measured:.1%} ({by_arm(results)}) > {TARGET:.0%}"
    assert agrees(reported, measured), f"reported ±{reported:.1%}, measured {measured:.1%}"
