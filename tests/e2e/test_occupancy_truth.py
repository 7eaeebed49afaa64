"""Occupancy attribution against the truth (issue #15): an occupancy batch on each real CLI against the
embedded provider, whose log holds every tool result's own prompt segment with its exact token count.

The truth of a result is its segment (for each request, the last n new segments, n = the tool results the
log lists for it). The kit prices each result (``occupancy.result_prices``: its block's ``o200k_base``
tokens, the trial's characters shared out by them, at the trial's calibrated ratio; docs/method.md#calibration),
so the comparison is per result, as the error bar the kit reports (``rel_err``) is per result: the median of
|price - truth| / truth, against the bar each result carries (its trial's), as a median over the results.
"Agrees" means within a factor of 3 or within 1.5 percentage points: the bar is measured on the large results
that fill a gap alone and reads low where short results err more (per result over 8 large batches of each:
Codex ±0.9-1.8% against 1.2-2.1%, worst 0.48x; Claude Code ±0.2-0.6% against 0.9-1.2%, worst 0.86 points
apart; OpenAI SDK agent ±0.1-0.6% against 0.4-0.6%; Anthropic ±0.3-0.5% against 0.0-0.2%). Within a factor
of 2 or 1 point, which every one of those met, left Codex 0.01 points of margin and failed a CI run when the
bar was a median over the trials (docs/method.md#calibration). With each response's blocks counted (3 large
batches each): Claude Code ±0.15-0.17% against 0.17-0.20%, Codex ±0.27-0.32% against 0.01-0.23%.

The truth is the right one for "what the result occupies": the log counts each content block whole, so a
result's segment is its own block as the client sent it: the message's role line where the block opens
the message, the block's keys and call id, and the content. The framing of its own block belongs to it and
is in the truth; the blocks beside it (the response's thinking, text, reasoning and call blocks) are not.

Measured (median per result; explore / files arm), fresh batches of this commit's code:

- preset large, the pack's own, 2 runs per arm (this test's target, one median over both batches' results):
  0.12-0.17% over 3 pairs; Claude Code 0.17-0.20% (explore 0.78-0.87 / files 0.12-0.15), Codex 0.01-0.23%
  (explore 0.81-0.95 / files 0.01-0.05), each response's blocks counted by ``o200k_base``
  (``output_o200k_tokens``) and Codex's read without the metadata its CLI keeps and does not send. Before:
  1.37-1.46% over both (Claude Code 0.9-1.1%, Codex 1.6-1.8%, its explore arm 5.0-5.9%);
- preset small (results a third the size), one run per arm: 0.52-0.63% over both (3 pairs); Claude Code
  0.63-0.71%, Codex 0.31-0.44% (before: 3.2-3.7% over both).

Caveat, said in docs/method.md#calibration: the provider counts Anthropic requests with ``o200k_base`` too
(Claude's tokenizer is not public), so on Claude Code this checks the framing and the calibration, not how
well ``o200k_base`` follows Claude's own tokenizer; on Codex ``o200k_base`` is the models' own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest

from kit.agents import cli_common
from kit.analysis import occupancy
from kit.stages import parse
from tests.support import small_batch

pytestmark = pytest.mark.e2e
BACKENDS = ("claude", "codex")
PRESETS = ("large", "small")
TARGET = 0.02  # preset large, the pack's own: one median over both CLIs' batches
NEAR = 0.03  # each CLI alone, preset large: Claude Code 0.9-1.1%, Codex 1.6-1.8% measured (2 runs per arm)
SMALL_CEILING = 0.07  # preset small, each CLI: 2.0-5.1% measured
# each CLI, its responses' blocks counted (docs/method.md#calibration): Claude Code 0.17-0.20% large and
# 0.63-0.71% small, Codex 0.01-0.23% and 0.31-0.44% (3 batches each)
COUNTED = {"large": 0.005, "small": 0.015}


def truth(folder: Path) -> pd.DataFrame:
    """Every tool result the provider saw, in order: its characters and its own segment's tokens.

    (No result leaves the window in these sessions, so every one is resident at the end.)"""
    rows = []
    for log in sorted((folder / "raw").glob("*/provider_log.jsonl")):
        for line in log.read_bytes().splitlines():
            rec = orjson.loads(line)
            results, segments = rec["tool_results"], rec["segments"]
            for result, (_, tokens, _) in zip(results, segments[len(segments) - len(results) :], strict=True):
                rows.append({"trial_id": rec["trial_id"], "chars": result["chars"], "tokens": tokens} | {
                    "framing_chars": result["framing_chars"], "o200k_tokens": result["o200k_tokens"],  # as sent
                })  # fmt: skip
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
    price = occupancy.result_prices(results, trials.reset_index())
    return true.assign(price=price, error=(price - true["tokens"]).abs() / true["tokens"]), trials


def by_arm(results: pd.DataFrame) -> str:
    """The median error per arm, for a failure message (the docstring's numbers are read this way)."""
    arms = results["trial_id"].str.split("-", n=1).str[1]
    return ", ".join(f"{arm} {err:.1%}" for arm, err in results.groupby(arms)["error"].median().items())


def bar(results: pd.DataFrame, trials: pd.DataFrame) -> float:
    """The error bar a result carries (its trial's ``rel_err``), as a median over the results, the way the
    measured error is: a median over the trials' bars would weigh a trial of 3 results as one of 14 and, on
    two arms a tenfold apart, land on whichever trial sits in the middle."""
    return float(np.nanmedian(results["trial_id"].map(trials["rel_err"].astype(float))))


def agrees(reported: float, measured: float) -> bool:
    """Within a factor of 3, or within 1.5 percentage points (the module's docstring says why)."""
    return abs(reported - measured) <= 0.015 or 1 / 3 <= reported / measured <= 3


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> dict[tuple[str, str], tuple[pd.DataFrame, pd.DataFrame, Path]]:
    """(backend, preset) -> results beside the truth, trials' rows, the batch folder; one batch each (5-10 s),
    each CLI's batches only where it is installed."""
    out = {}
    for backend in BACKENDS:
        if not (cli_common.TOOLS_BIN / backend).exists():
            continue
        for preset in PRESETS:
            folder = tmp_path_factory.mktemp(f"{backend}-{preset}")
            runs = 2 if preset == "large" else 1  # the target's: the median over one run per arm ranges wider
            found = small_batch(folder, "occupancy", backend, runs=runs, preset=preset)
            metas = [orjson.loads(m.read_bytes()) for m in found.glob("raw/*/meta.json")]
            failed = {m["trial_id"]: m["reason"] for m in metas if m["status"] != "ok"}
            assert not failed, f"{backend} {preset}: a cut trial is not what the medians measure: {failed}"
            out[backend, preset] = (*attributed(found), found)
    return out


def batch(batches: dict, backend: str, preset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    if (backend, preset) not in batches:
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    results, trials, _ = batches[backend, preset]
    return results, trials


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_the_logs_results_are_the_tables_and_every_one_is_priced(batches, backend, preset):
    results, trials = batch(batches, backend, preset)
    assert len(results) and results["price"].notna().all()
    assert set(trials["calibration"]) == {"measured"} and set(trials["priced_by"]) == {"o200k"}


def test_the_median_error_over_a_claude_code_and_a_codex_batch_is_within_two_percent(batches):
    """The issue's target, on the pack's own preset: one median over both batches' results."""
    both = [batch(batches, backend, "large")[0] for backend in BACKENDS]
    measured = float(pd.concat(both)["error"].median())
    assert measured <= TARGET, f"median attribution error {measured:.1%} > {TARGET:.0%} ({[by_arm(r) for r in both]})"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_cli_stays_near_the_target_and_its_error_bar_agrees(batches, backend):
    results, trials = batch(batches, backend, "large")
    measured = float(results["error"].median())
    reported = bar(results, trials)
    assert measured <= NEAR, f"median attribution error {measured:.1%} ({by_arm(results)}) > {NEAR:.1%}"
    assert agrees(reported, measured), f"reported ±{reported:.1%}, measured {measured:.1%}"


@pytest.mark.parametrize("backend", ["sdk-openai", "sdk-anthropic"])
def test_the_kits_own_agents_are_priced_as_sent(tmp_path, backend):
    """The SDK agents keep no transcript of their tool results: the provider log's blocks as sent and the
    response records' blocks price them (0.01-0.05% / 0.21-0.22% measured, 2 runs per arm)."""
    results, trials = attributed(small_batch(tmp_path, "occupancy", backend, runs=2, preset="large"))
    measured = float(results["error"].median())
    reported = bar(results, trials)
    assert set(trials["priced_by"]) == {"o200k"} and measured <= TARGET, f"{measured:.1%} ({by_arm(results)})"
    assert agrees(reported, measured), f"reported ±{reported:.1%}, measured {measured:.1%}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_results_stay_under_their_ceiling(batches, backend):
    results, _ = batch(batches, backend, "small")
    measured = float(results["error"].median())
    assert measured <= SMALL_CEILING, f"median attribution error {measured:.1%} ({by_arm(results)})"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_each_clis_responses_are_priced_by_their_blocks_count(batches, backend, preset):
    """Every response's blocks have their ``o200k_base`` count (a session file holds them whole, a rollout its
    items): the whole gap is priced in one measure, and the results land within a fraction of a percent."""
    results, trials = batch(batches, backend, preset)
    measured = float(results["error"].median())
    assert set(trials["output_measure"]) == {"o200k"}
    assert measured <= COUNTED[preset], f"median attribution error {measured:.2%} ({by_arm(results)})"


@pytest.mark.parametrize("preset", PRESETS)
def test_a_codex_rollouts_results_are_framed_and_counted_as_the_cli_sent_them(batches, preset):
    """The provider measures each result block as the request carried it; the rollout's, read without the
    metadata the CLI keeps and does not send, gives the same framing and count, result by result."""
    if ("codex", preset) not in batches:
        pytest.skip(f"codex CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    sent, _, folder = batches["codex", preset]  # the log's results, in the tables' order (``attributed``)
    tables = parse.parse_batch(folder)
    read = tables["tool_results"].sort_values(["trial_id", "cycle"], kind="stable").reset_index(drop=True)
    assert list(read["framing_chars"]) == list(sent["framing_chars"])
    assert list(read["o200k_tokens"]) == list(sent["o200k_tokens"])
