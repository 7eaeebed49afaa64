"""Dated rate-card rows (issue 31): per-model cache-read multipliers, a price change in force from a day, and an
announced change that a later entry cancels (kit.analysis.pricing; docs/method.md#conventions). Every expected
cost is worked by hand from the card's rates."""

from __future__ import annotations

import warnings
from importlib import resources

import pandas as pd
import pytest
import yaml

from kit.analysis import pricing
from kit.errors import InputError

# 1,000 fresh input + 100,000 cache reads + 1,000 output tokens
USAGE = {"input_tokens": 101_000, "cache_read_tokens": 100_000, "cache_write_tokens": 0, "output_tokens": 1_000}


def cost(model: str, started_at: object = None) -> float:
    row = pd.DataFrame([{"model": model, "started_at": started_at, **USAGE}])
    return float(pricing.price(row).iloc[0])


def by_hand(fresh: float, read: float, out: float) -> float:
    return (1_000 * fresh + 100_000 * read + 1_000 * out) / 1e6


def test_cache_reads_bill_at_each_models_own_multiplier():
    assert cost("claude-fable-5-1") == pytest.approx(by_hand(10, 10 * 0.025, 50))  # 0.025x
    assert cost("claude-opus-5-5") == pytest.approx(by_hand(4, 4 * 0.05, 20))  # 0.05x
    assert cost("claude-fable-5") == pytest.approx(by_hand(10, 10 * 0.1, 50))  # 0.1x
    card = pricing.rate_card()
    anthropic = card[card["provider"] == "anthropic"].astype({"input": float, "cached_input": float, "read_x": float})
    assert anthropic["cached_input"].tolist() == pytest.approx((anthropic["input"] * anthropic["read_x"]).tolist())


def test_a_change_is_in_force_from_its_utc_day():
    before, after = by_hand(2, 0.20, 10), by_hand(2, 0.10, 10)  # Sonnet 5.5's read cut on 2026-10-07
    assert cost("claude-sonnet-5-5", "2026-10-06T23:59:59Z") == pytest.approx(before)
    assert cost("claude-sonnet-5-5", "2026-10-07T00:00:00Z") == pytest.approx(after)
    assert cost("claude-sonnet-5-5-20260928", "2026-10-07T01:00:00+02:00") == pytest.approx(before)  # 10-06 UTC
    with pytest.warns(UserWarning, match="1 row.*no started_at: priced at its newest row"):
        assert cost("claude-sonnet-5-5") == pytest.approx(after)


def test_a_trial_across_the_change_sums_its_requests_at_their_own_rows():
    requests = pd.DataFrame(
        [
            {"trial_id": "t", "model": "claude-sonnet-5-5", "started_at": day, **USAGE}
            for day in ("2026-10-06T12:00:00Z", "2026-10-08T12:00:00Z")
        ]
    )
    assert float(pricing.price_by_trial(requests).iloc[0]) == pytest.approx(by_hand(2, 0.2, 10) + by_hand(2, 0.1, 10))


def test_a_cancelled_future_row_stays_in_the_card_and_prices_nothing():
    doc = yaml.safe_load((resources.files("kit") / "data" / "rates" / "anthropic.yaml").read_text(encoding="utf-8"))
    sonnet = [r for r in doc["rows"] if r["model"] == "claude-sonnet-5"]
    assert [r.get("from") for r in sonnet if "cancels" not in r] == [None, "2026-09-01"]  # announced: $3 / $15
    assert [r["cancels"] for r in sonnet if "cancels" in r] == ["2026-09-01"]  # then withdrawn, with a source
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one row in force: no warning for an unknown day either
        assert cost("claude-sonnet-5", "2026-09-15T10:00:00Z") == pytest.approx(by_hand(2, 0.2, 10))
        assert cost("claude-sonnet-5") == pytest.approx(by_hand(2, 0.2, 10))
    card = pricing.rate_card()
    assert card.loc[card["model"] == "claude-sonnet-5", "input"].tolist() == [2.0]


@pytest.fixture
def card_dir(tmp_path, monkeypatch):
    """A rates folder of the test's own, where ``pricing`` reads its cards."""
    (tmp_path / "data" / "rates").mkdir(parents=True)
    monkeypatch.setattr(pricing.resources, "files", lambda _package: tmp_path)
    return tmp_path / "data" / "rates"


ROW: dict[str, str | float] = {"model": "m", "provider": "anthropic", "unit": "usd_per_1m", "source_url": "https://x"}
ROW |= {"checked": "2026-12-02", "input": 2.0, "write_5m": 2.5, "write_1h": 4.0, "output": 10.0}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{**ROW, "cached_input": 0.2, "read_x": 0.05}], r"cached_input 0.2 is not input 2.0 x read_x 0.05"),
        ([ROW, {**ROW, "from": "2026-10-07", "cached_input": 0.1}], r"rows\[0\].*missing cached_input"),
        ([{**ROW, "read_x": 0.1}, {**ROW, "read_x": 0.1}], r"rows\[1\].*a second row of m from the start"),
        (
            [
                {**ROW, "read_x": 0.1},
                {"model": "m", "cancels": "2026-09-01", "source_url": "https://y", "checked": "x"},
            ],
            r"rows\[1\].*cancels m from 2026-09-01, which no row",
        ),
        ([{**ROW, "read_x": 0.1, "from": "next week"}], r"'next week' is not a day"),
    ],
)
def test_a_card_that_breaks_its_own_rules_fails_at_its_row(card_dir, rows, message):
    (card_dir / "bad.yaml").write_text(yaml.safe_dump({"rows": rows}), encoding="utf-8")
    with pytest.raises(InputError, match=message):
        pricing._load_file("bad.yaml")


def test_haiku_5_5_prices_a_long_prompt_at_its_upper_band():
    """The model page's two bands, by prompt length (input + reads + writes): up to 100,000 tokens $0.10 input,
    $0.125 / $0.20 writes, $0.01 reads, $0.50 output; over it $0.50, $0.625 / $1.00, $0.05, $2.50, on every token
    of the request."""

    def haiku(prompt: int) -> float:
        usage = {"input_tokens": prompt, "cache_read_tokens": prompt - 2_000, "cache_write_tokens": 1_000}
        row = pd.DataFrame([{"model": "claude-haiku-5-5", **usage, "cache_write_1h_tokens": 0, "output_tokens": 500}])
        return float(pricing.price(row).iloc[0])

    def band(prompt: int, fresh: float, write: float, read: float, out: float) -> float:
        return (1_000 * fresh + 1_000 * write + (prompt - 2_000) * read + 500 * out) / 1e6

    assert haiku(100_000) == pytest.approx(band(100_000, 0.10, 0.125, 0.01, 0.50))
    assert haiku(100_001) == pytest.approx(band(100_001, 0.50, 0.625, 0.05, 2.50))
