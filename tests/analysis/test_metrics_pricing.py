"""kit.analysis.metrics (trial sums, NA propagation, failed trials, arm and headline tables), kit.analysis.pricing."""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

from kit import stats
from kit.analysis import metrics, pricing
from kit.schema import requests_frame


def request(trial: str, cycle: int, **usage) -> dict:
    """A canonical request row; ``known=False`` leaves usage missing, as a reader does."""
    batch, arm, run = usage.pop("batch", "b1"), usage.pop("arm", "a"), usage.pop("run", 0)
    known = usage.pop("known", True)
    row = {
        "batch": batch,
        "arm": arm,
        "run": run,
        "trial_id": trial,
        "turn": 1,
        "cycle": cycle,
        "backend": "sdk",
        "model": usage.pop("model", "gpt-5.5"),
        "source_format": "test",
        "source_path": f"raw/{trial}/log.jsonl",
        "source_line": cycle,
        "tool_calls": usage.pop("tool_calls", 0),
        "usage_known": known,
    }
    if known:
        row |= {
            "input_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cache_write_1h_tokens": 0,
            "output_tokens": 0,
            "reasoning_tokens": 0,
        } | usage
    return row


META = pd.DataFrame(
    {
        "batch": ["b1", "b1", "b1", "b1"],
        "arm": ["a", "b", "a", "b"],
        "run": [0, 0, 1, 1],
        "trial_id": ["t1", "t2", "t3", "t4"],
        "order_index": [0, 1, 2, 3],
        "status": ["ok", "ok", "failed", "ok"],
        "reason": ["", "", "timeout", ""],
        "model": ["gpt-5.5"] * 4,
        "simulated": [False] * 4,
    }
)


@pytest.fixture
def requests() -> pd.DataFrame:
    return requests_frame(
        [
            request(
                "t1", 1, input_tokens=1000, cache_read_tokens=800, output_tokens=50, reasoning_tokens=10, tool_calls=3
            ),
            request("t1", 2, input_tokens=1500, cache_read_tokens=1200, output_tokens=70, tool_calls=1),
            request("t1", 3, input_tokens=1600, cache_read_tokens=1500, output_tokens=200, tool_calls=0),
            request("t2", 1, arm="b", input_tokens=900, output_tokens=40, tool_calls=1),
            request("t2", 2, arm="b", known=False, tool_calls=1),
            request("t3", 1, run=1, input_tokens=700, output_tokens=30, tool_calls=2),
        ]
    )


def test_trial_sums_and_derived_columns(requests):
    trials = metrics.trial_table(requests, META).set_index("trial_id")
    t1 = trials.loc["t1"]
    assert t1["input_tokens"] == 4100
    assert t1["cache_read_tokens"] == 3500
    assert t1["uncached_input_tokens"] == 600
    assert t1["output_tokens"] == 320
    assert t1["reasoning_tokens"] == 10
    assert t1["total_tokens"] == 4420
    assert t1["cycles"] == 3
    assert t1["tool_calls"] == 4
    assert t1["hit_rate"] == pytest.approx(3500 / 4100)
    assert t1["calls_per_response"] == pytest.approx(4 / 2)  # two responses called tools
    assert t1["multi_call_share"] == pytest.approx(1 / 2)
    assert bool(t1["usage_known"]) is True
    assert list(trials.columns[: len(META.columns) - 1]) == [c for c in META.columns if c != "trial_id"]


def test_missing_usage_is_never_zero(requests):
    trials = metrics.trial_table(requests, META).set_index("trial_id")
    t2 = trials.loc["t2"]
    assert pd.isna(t2["input_tokens"]) and pd.isna(t2["total_tokens"]) and pd.isna(t2["hit_rate"])
    assert bool(t2["usage_known"]) is False
    assert t2["cycles"] == 2
    assert t2["tool_calls"] == 2


def test_failed_and_empty_trials_stay(requests):
    trials = metrics.trial_table(requests, META).set_index("trial_id")
    assert list(trials.index) == ["t1", "t2", "t3", "t4"]
    assert trials.loc["t3", "status"] == "failed"
    assert trials.loc["t3", "input_tokens"] == 700
    t4 = trials.loc["t4"]  # no request rows at all
    assert t4["cycles"] == 0
    assert pd.isna(t4["input_tokens"]) and pd.isna(t4["tool_calls"])
    assert bool(t4["usage_known"]) is False
    assert str(trials["input_tokens"].dtype) == "Int64"


def test_bad_input_is_located(requests):
    stray = pd.concat([requests, requests_frame([request("t9", 4, input_tokens=1)])], ignore_index=True)
    with pytest.raises(ValueError, match=r"raw/t9/log.jsonl:4: trial_id 't9' has no meta row"):
        metrics.trial_table(stray, META)
    wrong_arm = requests.copy()
    wrong_arm.loc[0, "arm"] = "b"
    with pytest.raises(ValueError, match=r"raw/t1/log.jsonl:1: trial t1: arm is 'b' in requests but 'a' in meta"):
        metrics.trial_table(wrong_arm, META)
    with pytest.raises(ValueError, match=r"trial t3: status 'crashed'"):
        metrics.trial_table(requests, META.assign(status=["ok", "ok", "crashed", "ok"]))


def five_runs() -> pd.DataFrame:
    rows = []
    for run in range(5):
        rows.append({"batch": "b1", "arm": "a", "run": run, "status": "ok", "total_tokens": 1000 + 10 * run})
        rows.append({"batch": "b1", "arm": "b", "run": run, "status": "ok", "total_tokens": 2000 + 30 * run})
    rows.append({"batch": "b1", "arm": "a", "run": 5, "status": "failed", "total_tokens": 99_999})
    rows.append({"batch": "b1", "arm": "b", "run": 5, "status": "ok", "total_tokens": None})
    frame = pd.DataFrame(rows)
    return frame.assign(simulated=True, uncached_input_tokens=frame["total_tokens"] / 10)


def test_arm_summary_counts_and_intervals():
    summary = metrics.arm_summary(five_runs(), ["total_tokens"], n_resamples=2_000).set_index("arm")
    a, b = summary.loc["a"], summary.loc["b"]
    assert (a["n"], a["failed"], a["missing"]) == (5, 1, 0)
    assert (b["n"], b["failed"], b["missing"]) == (5, 0, 1)
    assert a["mean"] == 1020 and a["median"] == 1020
    assert a["lower"] < 1020 < a["upper"]
    assert a["batches"] == "b1"


def test_headline_table():
    trials = five_runs()
    ratios = stats.ratios(trials, "b", ["a"], ["total_tokens"], n_resamples=2_000)
    table = metrics.headline(trials, "b", ratios)
    assert list(table["arm"]) == ["b", "a"]
    assert math.isnan(table.loc[0, "ratio"])
    assert table.loc[1, "ratio"] == pytest.approx(1020 / 2060)
    assert table.loc[1, "ratio_lower"] < table.loc[1, "ratio"] < table.loc[1, "ratio_upper"]
    assert table.loc[1, "total_tokens_mean"] == 1020
    assert table["simulated"].all()


def priced(model: str, card: pricing.Card = "usd", **usage) -> float:
    row = requests_frame([request("t1", 1, model=model, **usage)])
    return float(pricing.price(row, card).astype("float64").iloc[0])


def test_anthropic_probe_is_additive():
    # Claude probe: input 306 (after the breakpoint) + write 6006 + read 30000 on top; canonical input holds all
    usage = {"input_tokens": 306 + 6006 + 30000, "cache_write_tokens": 6006, "cache_read_tokens": 30000}
    # 306 x $4 + 6006 x $5 + 30000 x $0.20 + 141 x $20 per 1M
    assert priced("claude-opus-5-5", output_tokens=141, **usage) == pytest.approx(0.040074)
    assert priced("claude-opus-5-5-20260901", output_tokens=141, **usage) == pytest.approx(0.040074)
    # the same writes with a 1-hour lifetime bill at $8
    one_hour = priced("claude-opus-5-5", output_tokens=141, cache_write_1h_tokens=6006, **usage)
    assert one_hour == pytest.approx((306 * 4 + 6006 * 8 + 30000 * 0.2 + 141 * 20) / 1e6)


def test_openai_write_billing():
    usage = {"input_tokens": 10_000, "cache_read_tokens": 6_000, "cache_write_tokens": 2_000, "output_tokens": 500}
    # gpt-5.6-sol: fresh 2000 x $4 + read 6000 x $0.40 + write 2000 x $5 + out 500 x $20
    assert priced("gpt-5.6-sol", **usage) == pytest.approx(0.0304)
    # gpt-5.5 bills no write surcharge: the 2000 written tokens are ordinary input at $5
    assert priced("gpt-5.5", **usage) == pytest.approx((4000 * 5 + 6000 * 0.5 + 500 * 30) / 1e6)
    # one request above 272K input: input x2, output x1.5
    assert priced("gpt-5.6-sol", input_tokens=300_000, output_tokens=1_000) == pytest.approx(2.4 + 0.03)


def test_codex_credits_card():
    usage = {"input_tokens": 1_000_000, "cache_read_tokens": 900_000, "output_tokens": 10_000}
    # codex-batch-bench's card: 125 / 12.5 / 750 credits per 1M uncached-in / cached-in / out
    assert priced("gpt-5.6-sol", "credits", **usage) == pytest.approx(12.5 + 11.25 + 7.5)
    assert priced("gpt-5.5", "credits", **usage) == pytest.approx(31.25)
    # the card has no write column: writes bill as uncached input
    assert priced("gpt-5.6-sol", "credits", cache_write_tokens=100_000, **usage) == pytest.approx(31.25)


def test_unknown_model_is_na_with_a_warning():
    with pytest.warns(UserWarning, match="sim-echo"):
        assert math.isnan(priced("sim-echo", input_tokens=1000, output_tokens=10))
    with pytest.warns(UserWarning, match="claude-opus-5-7"):  # a newer version never inherits an older price
        assert math.isnan(priced("claude-opus-5-7", input_tokens=1000))


def test_unknown_usage_prices_na_and_trials_sum_exactly(requests):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        per_request = pricing.price(requests)
        by_trial = pricing.price_by_trial(requests)
    assert pd.isna(per_request.iloc[4])
    assert by_trial["t1"] == pytest.approx(per_request.iloc[:3].sum())
    assert pd.isna(by_trial["t2"])
    trials = metrics.trial_table(requests, META).set_index("trial_id")
    assert pricing.price(trials)["t1"] == pytest.approx(by_trial["t1"])


def test_inconsistent_counts_raise():
    with pytest.raises(ValueError, match="exceed input_tokens"):
        priced("gpt-5.5", input_tokens=100, cache_read_tokens=200)


def test_rate_cards_are_dated_data():
    for card in ("usd", "credits"):
        table = pricing.rate_card(card)
        assert table["source_url"].str.startswith("https://").all()
        assert table["checked"].str.match(r"\d{4}-\d{2}-\d{2}$").all()
        assert not table.duplicated(["model", "from"]).any()  # a model has a row per day it changed
    usd = pricing.rate_card("usd").set_index("model")
    assert set(usd["unit"]) == {"usd_per_1m"}
    assert usd.loc["claude-opus-5-5", ["write_5m", "write_1h"]].tolist() == [5.0, 8.0]
    assert set(pricing.rate_card("credits")["unit"]) == {"credits_per_1m"}
