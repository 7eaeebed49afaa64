"""kit.analysis.occupancy (docs/method.md#occupancy): calibration, error bar, compaction, FIFO eviction, a session."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kit import charts, transcripts
from kit.analysis import occupancy as occ
from tests.support import FIXTURES as TEST_FIXTURES
from tests.support import design

FIXTURES = TEST_FIXTURES / "transcripts"
TOOL_HEAVY = FIXTURES / "claude-session_spotter_tool_heavy.jsonl"


def session(ctx: list[float], out_chars: list[float] | None = None, trial: str = "t1", arm: str = "a", **cols):
    """Request rows of one trial: cycle k has prompt ``ctx[k]``; response k's output is ``out_chars[k]``."""
    n = len(ctx)
    frame = pd.DataFrame(
        {
            "batch": "b1",
            "arm": arm,
            "trial_id": trial,
            "cycle": range(n),
            "input_tokens": ctx,
            "output_tokens": [50] * n,
            "reasoning_tokens": [0] * n,
            "output_chars": out_chars if out_chars is not None else [100] * n,
            **cols,
        }
    )
    return frame.astype({"output_tokens": "Int64", "reasoning_tokens": "Int64"})


def results(rows: list[tuple[int, str, int]], trial: str = "t1") -> pd.DataFrame:
    """Tool results as (cycle of the first request carrying it, kit.transcripts category, chars)."""
    return pd.DataFrame(
        [
            {"batch": "b1", "trial_id": trial, "cycle": c, "tool": cat, "category": cat, "chars": n}
            for c, cat, n in rows
        ],
        columns=["batch", "trial_id", "cycle", "tool", "category", "chars"],
    )


def by_category(frame: pd.DataFrame, trial: str = "t1") -> pd.Series:
    return frame[frame["trial_id"] == trial].set_index("category")["tokens"]


# Four gaps, each request carrying one tool result plus the previous response's 100 characters:
# gap chars 2000, 2500, 2600 over 1000 tokens each (ratios 2.0, 2.5, 2.6; each >= 80% one result), then a
# gap that is only 60% tool result (1200 + 800 of user text), which must not calibrate anything.
CALIBRATION_CTX = [1000, 2000, 3000, 4000, 4000 + 2000 * 3000 / 7100]


def calibration_session() -> tuple[pd.DataFrame, pd.DataFrame]:
    requests = session(CALIBRATION_CTX, user_chars=[0, 0, 0, 0, 700])
    tools = results([(1, "read", 1900), (2, "grep", 2400), (3, "bash", 2500), (4, "other", 1200)])
    return requests, tools


def test_calibration_on_tool_heavy_gaps_and_exact_attribution():
    requests, tools = calibration_session()
    out = occ.measure(requests, tools)
    cpt = 7100 / 3000  # the three >= 80% gaps pooled; the 60% gap (ratio 4.0) is left out
    row = out.iloc[0]
    assert row["chars_per_token"] == pytest.approx(cpt)
    assert row["calibration"] == "measured"
    assert row["output_measure"] == "chars"
    tokens = by_category(out)
    assert tokens["Read"] == pytest.approx(1900 / cpt)
    assert tokens["Grep/Glob"] == pytest.approx(2400 / cpt)
    assert tokens["Bash/exec"] == pytest.approx(2500 / cpt)
    assert tokens["other tools"] == pytest.approx(1200 / cpt)
    assert tokens["explore tool"] == 0
    assert tokens["file access"] == pytest.approx((1900 + 2400 + 2500) / cpt)
    assert tokens["final context"] == pytest.approx(CALIBRATION_CTX[-1])
    assert tokens["fixed base"] == 1000
    assert tokens["base"] == pytest.approx(CALIBRATION_CTX[-1] - 8000 / cpt)
    parts = tokens[list(occ.PARTS)].sum()
    assert parts == pytest.approx(tokens["final context"])  # the disjoint parts fill the context exactly
    read = out[out["category"] == "Read"].iloc[0]
    assert (read["chars"], read["results"], read["evicted_tokens"]) == (1900, 1, 0)
    assert read["share_of_context"] == pytest.approx((1900 / cpt) / CALIBRATION_CTX[-1])
    assert read["share_of_window"] == pytest.approx((1900 / cpt) / 200_000)


def test_error_bar_prices_each_single_result_gap_at_the_other_gaps_ratio():
    requests, tools = calibration_session()
    out = occ.measure(requests, tools, window_tokens=100_000)
    # each >= 80% one-result calibration gap's result priced at the other two gaps' ratio (leave one out)
    # against its growth (the gap's growth less the response's 100 characters at that ratio)
    errors = []
    for result in (1900, 2400, 2500):
        cpt = (7100 - result - 100) / 2000
        growth = 1000 - 100 / cpt
        errors.append(abs(result / cpt - growth) / growth)
    rel = float(np.median(errors))
    assert rel == pytest.approx(0.162791, abs=1e-6)  # in-sample (each gap in its own ratio) read 0.102941
    cpt = 7100 / 3000  # the run's ratio prices the results
    tokens, err = by_category(out), out.set_index("category")["err"]
    assert out["rel_err"].iloc[0] == pytest.approx(rel)
    assert err["Read"] == pytest.approx(rel * tokens["Read"])
    assert err["base"] == pytest.approx(rel * 8000 * 3000 / 7100)  # base absorbs every priced result's error
    assert err["fixed base"] == 0 and err["final context"] == 0 and err["explore tool"] == 0
    assert out.set_index("category").loc["Read", "share_of_window"] == pytest.approx(tokens["Read"] / 100_000)


def test_outlier_gap_is_dropped_from_calibration():
    # ratios 2.0, 2.5, 2.6 and 4.5 (> 1.5 x the lower median 2.5): the dense one is shedding, not density
    ctx = [1000, 2000, 3000, 4000, 5000]
    tools = results([(1, "read", 1900), (2, "grep", 2400), (3, "bash", 2500), (4, "explore", 4400)])
    out = occ.measure(session(ctx), tools)
    assert out["chars_per_token"].iloc[0] == pytest.approx(7100 / 3000)


def test_compact_boundary_clears_what_is_resident():
    ctx = [1000, 1800, 2600, 1500, 2300]
    tools = results([(1, "read", 1900), (2, "grep", 1900), (4, "bash", 1900)])
    events = pd.DataFrame(
        {"batch": "b1", "trial_id": "t1", "cycle": [3, 2], "kind": ["system:compact_boundary", "system:local_command"]}
    )
    out = occ.measure(session(ctx), tools, events=events)
    cpt = 2000 / 800  # every growing gap is one 1,900-char result plus 100 characters of output
    tokens = by_category(out)
    assert out["chars_per_token"].iloc[0] == pytest.approx(cpt)
    assert tokens["Read"] == 0 and tokens["Grep/Glob"] == 0  # before the boundary: summarised away
    assert tokens["Bash/exec"] == pytest.approx(1900 / cpt)
    assert tokens["base"] == pytest.approx(2300 - 1900 / cpt)
    row = out.iloc[0]
    assert row["compactions"] == 1
    assert row["evicted_tokens"] == pytest.approx(2 * 1900 / cpt)
    contributed = out.set_index("category")["contributed_tokens"]
    assert contributed["Read"] == pytest.approx(1900 / cpt)  # contributed is not residual


def fifo_session(shrink: float) -> pd.DataFrame:
    """Three 800-token read gaps, then a gap with a 400-token grep result that grew ``shrink`` less than expected."""
    ctx: list[float] = [1000, 1800, 2600, 3400]
    ctx.append(ctx[-1] + 400 - shrink)
    return session(ctx, out_chars=[0] * 5)


FIFO_TOOLS = results([(1, "read", 2000), (2, "explore", 2000), (3, "bash", 2000), (4, "grep", 1000)])


def test_micro_compaction_evicts_oldest_results_first():
    out = occ.measure(fifo_session(shrink=1000), FIFO_TOOLS)  # chars/token 2.5: each read 800 tokens
    tokens = by_category(out)
    assert out["chars_per_token"].iloc[0] == pytest.approx(2.5)
    assert tokens["Read"] == 0  # oldest: gone
    assert tokens["explore tool"] == pytest.approx(600)  # next: partly (200 of 800 evicted)
    assert tokens["Bash/exec"] == pytest.approx(800)
    assert tokens["Grep/Glob"] == pytest.approx(400)
    assert out["evicted_tokens"].iloc[0] == pytest.approx(1000)
    explore = out.set_index("category").loc["explore tool"]
    assert explore["results"] == 1 and explore["chars"] == pytest.approx(1500)
    assert tokens["base"] == pytest.approx(3400 + 400 - 1000 - 1800)


def test_shortfall_within_tolerance_is_noise():
    # 199 tokens short: under max(200 tokens, 5% of 400) -> nothing evicted
    out = occ.measure(fifo_session(shrink=199), FIFO_TOOLS)
    tokens = by_category(out)
    assert out["evicted_tokens"].iloc[0] == 0
    assert tokens["Read"] == pytest.approx(800) and tokens["explore tool"] == pytest.approx(800)
    assert tokens["base"] == pytest.approx(3400 + 400 - 199 - 2800)
    # just past the tolerance: the whole shortfall goes, oldest first
    out = occ.measure(fifo_session(shrink=201), FIFO_TOOLS)
    assert out["evicted_tokens"].iloc[0] == pytest.approx(201)
    assert by_category(out)["Read"] == pytest.approx(800 - 201)


def test_output_tokens_stand_in_when_output_chars_are_unknown():
    # no output characters: the previous response's visible output (output - reasoning) is known in tokens
    requests = session([1000, 1850, 2700], out_chars=[np.nan, np.nan, np.nan])
    requests["output_tokens"] = pd.array([80, 80, 80], dtype="Int64")
    requests["reasoning_tokens"] = pd.array([30, 30, 30], dtype="Int64")
    out = occ.measure(requests, results([(1, "read", 2000), (2, "read", 2000)]))
    assert out["chars_per_token"].iloc[0] == pytest.approx(2000 / 800)  # 850 - 50 visible output tokens
    assert out["output_measure"].iloc[0] == "tokens"
    assert by_category(out)["Read"] == pytest.approx(1600)


def test_fallbacks_are_named_and_never_the_all_gap_pool():
    small = occ.measure(session([1000, 1100]), results([(1, "read", 300)]))
    row = small.iloc[0]  # a 400-character gap: too small to calibrate on, and no other trial of the arm
    assert (row["calibration"], row["chars_per_token"]) == ("default", occ.DEFAULT_CHARS_PER_TOKEN)
    assert "no gap of 500+ characters" in row["calibration_note"] and "3 chars/token assumed" in row["calibration_note"]
    assert math.isnan(row["rel_err"]) and math.isnan(small.set_index("category").loc["Read", "err"])
    # a second trial of the same arm measures 2.5: the small trial borrows it, and says so
    measured = occ.measure(
        session([1000, 2000, 3000], trial="t2"), results([(1, "read", 2400), (2, "read", 2400)], "t2")
    )
    both = occ.measure(
        pd.concat([session([1000, 1100]), session([1000, 2000, 3000], trial="t2")]),
        pd.concat([results([(1, "read", 300)]), results([(1, "read", 2400), (2, "read", 2400)], "t2")]),
    )
    t1 = both[both["trial_id"] == "t1"].iloc[0]
    assert (t1["calibration"], t1["chars_per_token"]) == ("arm", pytest.approx(2.5))
    assert t1["chars_per_token"] == pytest.approx(measured["chars_per_token"].iloc[0])
    assert "the arm's ratio over its 1 measured trial(s)" in t1["calibration_note"]
    none = occ.measure(session([1000, 1100]), results([]))
    assert none["calibration"].iloc[0] == "none" and none["calibration_note"].iloc[0] == "no tool result to price"


def test_a_measured_ratio_outside_dense_source_is_flagged():
    out = occ.measure(session([1000, 2000, 3000], [0, 0, 0]), results([(1, "read", 4500), (2, "read", 4500)]))
    assert out["calibration"].iloc[0] == "measured" and out["chars_per_token"].iloc[0] == pytest.approx(4.5)
    assert out["calibration_note"].iloc[0] == "4.50 chars/token is outside the 2-4 of dense source"


def test_new_turn_of_unknown_length_does_not_calibrate():
    # gap 2 is a new user turn (turn 1 -> 2) whose text was not recorded: 1,000 characters over 1000/3.5 tokens
    ctx = [1000, 1800, 1800 + 1000 / 3.5]
    ctx.append(ctx[-1] + 800)
    requests = session(ctx, turn=[1, 1, 2, 2])
    tools = results([(1, "read", 1900), (2, "read", 900), (3, "read", 1900)])
    out = occ.measure(requests, tools)
    assert out["chars_per_token"].iloc[0] == pytest.approx(2.5)
    with_text = occ.measure(requests.assign(user_chars=[0, 0, 0, 0]), tools)  # known: no user text
    assert with_text["chars_per_token"].iloc[0] == pytest.approx(5000 / (1600 + 1000 / 3.5))


def test_trials_batches_unknown_usage_and_summary():
    a = session([1000, 1800, 2600], trial="r00-a", arm="a")
    b = session([1000, 1400, 1800], trial="r00-b", arm="b")
    a2 = a.assign(batch="b2")
    requests = pd.concat([a, b, a2], ignore_index=True)
    requests.loc[(requests["batch"] == "b2") & (requests["cycle"] == 1), "input_tokens"] = pd.NA  # usage unknown
    tools = pd.concat(
        [
            results([(1, "read", 1900), (2, "read", 1900)], trial="r00-a"),
            results([(1, "explore", 900), (2, "explore", 900)], trial="r00-b"),
            results([(1, "read", 1900)], trial="r00-a").assign(batch="b2"),
        ]
    )
    out = occ.measure(requests, tools)
    assert len(out) == 3 * len(occ.CATEGORIES)
    unknown = out[out["batch"] == "b2"]
    assert unknown["tokens"].isna().all() and (unknown["calibration"] == "usage unknown").all()
    summ = occ.arm_means(out)
    assert list(summ.columns) == occ.SUMMARY_COLUMNS
    assert set(summ["category"]) == set(occ.PARTS)
    per_arm = summ.groupby("arm")["tokens"].sum()
    assert per_arm["a"] == pytest.approx(2600) and per_arm["b"] == pytest.approx(1800)
    assert summ.set_index(["arm", "category"]).loc[("a", "Read"), "trials"] == 1  # the unknown trial is not a zero
    assert summ.set_index(["arm", "category"]).loc[("b", "explore tool"), "tokens"] == pytest.approx(720)
    full = occ.arm_means(out, parts_only=False)
    assert set(full["category"]) == set(occ.CATEGORIES)
    fig = charts.occupancy_bars(summ, design(task="occupancy", arms=["a", "b"]))
    assert fig.axes[0].get_ylabel() == "tokens resident at end of session"


def test_bad_input_is_located():
    requests = session([1000, 1800])
    with pytest.raises(ValueError, match=r"measure\(requests\): missing column\(s\) input_tokens"):
        occ.measure(requests.drop(columns="input_tokens"), results([]))
    twice = pd.concat([requests, requests.iloc[[1]]], ignore_index=True)
    with pytest.raises(ValueError, match="trial t1 has cycle 1 twice"):
        occ.measure(twice, results([]))
    with pytest.raises(ValueError, match=r"measure\(tool_results\): row 0: chars"):
        occ.measure(requests, results([(1, "read", -5)]))
    with pytest.raises(ValueError, match="no trial_id or cycle"):
        occ.measure(requests.assign(trial_id=pd.NA), results([]))


def test_claude_tool_heavy_session():
    """spotter's tool_heavy.jsonl through kit.transcripts: four requests, six results (two never sent).

    Checked by hand: only gap 3 (27,666 - 26,507 = 1,159 tokens; Glob 45 + WebSearch 3,061 characters,
    plus the response before it: its 264 characters and its blocks' 296 framing characters) is big enough to
    calibrate. Each result is priced by its block's ``o200k_base`` tokens, the trial's characters (content
    and framing) shared out by them (docs/method.md#calibration). The Read and WebFetch results would enter
    a fifth request that the session never made.
    """
    requests = transcripts.read(TOOL_HEAVY).assign(trial_id="tool_heavy", arm="claude")
    tools = transcripts.tool_results(TOOL_HEAVY).assign(trial_id="tool_heavy")
    events = pd.DataFrame(requests.attrs["events"]).assign(trial_id="tool_heavy")
    out = occ.measure(requests, tools, events=events)
    assert list(tools["framing_chars"]) == [99, 99, 82, 82, 82, 82]
    assert list(tools["o200k_tokens"]) == [78, 90, 44, 738, 990, 251]
    assert (requests["output_chars"].iloc[2], requests["output_framing_chars"].iloc[2]) == (264, 296)
    per_o200k = (142 + 155 + 45 + 3061 + 2984 + 1146 + 2 * 99 + 4 * 82) / (78 + 90 + 44 + 738 + 990 + 251)
    cpt, measure = ((44 + 738) * per_o200k + 264 + 296) / 1159, "chars"
    row = out.iloc[0]
    assert row["chars_per_token"] == pytest.approx(cpt) and 2 <= cpt <= 4 and row["calibration_note"] == ""
    assert (row["calibration"], row["output_measure"], row["requests"], row["compactions"]) == (
        "measured",
        measure,
        4,
        0,
    )
    assert math.isnan(row["rel_err"])  # one calibration gap: no other gap to price it against
    tokens = by_category(out, "tool_heavy")
    assert row["priced_by"] == "o200k"
    assert tokens["Bash/exec"] == pytest.approx((78 + 90) * per_o200k / cpt)
    assert tokens["Grep/Glob"] == pytest.approx(44 * per_o200k / cpt)
    assert tokens["other tools"] == pytest.approx(738 * per_o200k / cpt)
    assert tokens["Read"] == 0
    assert tokens["final context"] == 27_666 and tokens["fixed base"] == 25_801
    assert tokens["base"] == pytest.approx(27_666 - (78 + 90 + 44 + 738) * per_o200k / cpt)
    shares = out.set_index("category")["share_of_window"]
    assert shares["final context"] == pytest.approx(0.13833)
    assert 0 < tokens["file access"] < tokens["other tools"] < tokens["base"]


def test_a_responses_blocks_are_priced_by_their_count_where_the_results_are():
    """The results of the test below, each gap grown besides by its response's blocks (100 and 200 ``o200k_base``
    tokens, as ``output_o200k_tokens``), which hold 50 characters and 100 of framing each. Priced by their count,
    at the results' characters per such token, every gap measures that one ratio and each result its growth;
    priced by their 150 characters at that ratio they would read as 34 tokens, the 66 and 166 left over landing on
    the results. A response without its count puts the trial's responses back on characters
    (docs/method.md#calibration)."""
    requests = session(
        [1000, 1700, 2200, 2300],
        out_chars=[50] * 4,
        output_framing_chars=[100] * 4,
        output_o200k_tokens=[100, 200, 0, 0],
    )
    tools = results([(1, "read", 2000), (2, "grep", 2000)]).assign(framing_chars=[0, 0], o200k_tokens=[600, 300])
    out = occ.measure(requests, tools)
    tokens = by_category(out)
    row = out.iloc[0]
    assert (row["priced_by"], row["output_measure"]) == ("o200k", "o200k")
    assert row["chars_per_token"] == pytest.approx(4000 / 900)
    assert (tokens["Read"], tokens["Grep/Glob"]) == (pytest.approx(600), pytest.approx(300))
    counted = requests["output_o200k_tokens"].astype("Int64")
    by_chars = occ.measure(requests.assign(output_o200k_tokens=counted.where(counted.index != 1)), tools)
    assert (by_chars["priced_by"].iloc[0], by_chars["output_measure"].iloc[0]) == ("o200k", "chars")
    assert by_category(by_chars)["Read"] > 600 * 1.05


def test_a_trials_characters_are_shared_out_by_the_results_token_counts():
    """Two results of 2,000 characters, one twice as dense by ``o200k_base`` (600 tokens against 300) and
    growing the prompt by 600 and 300: the trial's 4,000 characters are shared out as 2,667 and 1,333, which
    prices each at its growth (docs/method.md#calibration); characters alone cannot tell the two apart. Framing
    counts with its result; one result without a count, or responses without their framing, put the whole trial
    back on characters."""
    requests = session([1000, 1600, 1900, 2000], out_chars=[0] * 4, output_framing_chars=[0] * 4)
    tools = results([(1, "read", 2000), (2, "grep", 2000)]).assign(framing_chars=[0, 0], o200k_tokens=[600, 300])
    out = occ.measure(requests, tools)
    tokens = by_category(out)
    assert out["priced_by"].iloc[0] == "o200k" and out["chars_per_token"].iloc[0] == pytest.approx(4000 / 900)
    assert (tokens["Read"], tokens["Grep/Glob"]) == (pytest.approx(600), pytest.approx(300))
    assert list(occ.result_prices(tools, out)) == [pytest.approx(600), pytest.approx(300)]
    by_chars = occ.measure(requests, tools.assign(o200k_tokens=[600, None]))
    assert by_chars["priced_by"].iloc[0] == "chars"
    unframed = occ.measure(requests.drop(columns="output_framing_chars"), tools)  # an SDK record: no framing
    assert unframed["priced_by"].iloc[0] == "chars"
    assert by_chars["chars_per_token"].iloc[0] == pytest.approx(2000 / 600)  # the sparse gap looks like shedding
    framed = occ.measure(requests, tools.assign(framing_chars=[250, 250], o200k_tokens=[None, None]))
    assert framed["chars_per_token"].iloc[0] == pytest.approx((2000 + 250) / 600)


def test_kit_occupancy_is_the_public_path_of_the_analysis_module():
    """``kit.occupancy`` (the path users import) hands out the same objects as ``kit.analysis.occupancy``."""
    import kit.occupancy as public

    assert public.__all__ and all(getattr(public, name) is getattr(occ, name) for name in public.__all__)
    assert {"measure", "arm_means", "Calibration", "WINDOW_TOKENS"} <= set(public.__all__)
