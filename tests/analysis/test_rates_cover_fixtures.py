"""Every model the kit's readers meet in the fixture transcripts has a USD rate (issue 31: ``claude-sonnet-4-6``,
45 responses and 1.93 M tokens of the audit's set, priced as NA). A fixture added with a new model fails here,
naming it, until its card row is written with its source and date (kit/data/rates/, docs/method.md#conventions).

Claude Code's ``<synthetic>`` is not a model: it is the name the CLI gives a message it wrote itself (a
client-side error such as ``authentication_failed``) with no request behind it, so it has no price and no card
row should give it one; it is left out only while its usage is zero, since a stand-in that reports tokens is a
response after all. A row with no model name (a ``codex exec --json`` stream names none) has no model to price.
"""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from kit import transcripts
from kit.analysis import pricing
from tests.support import FIXTURES

TRANSCRIPTS = FIXTURES / "transcripts"
STAND_IN = "<synthetic>"  # Claude Code's name for a message no request produced
TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"]


def fixture_files() -> list:
    return sorted(p for p in TRANSCRIPTS.rglob("*") if p.is_file() and p.suffix != ".md")


def responses(path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transcripts.read([path])


def models_met() -> dict[str, list[str]]:
    """Each model with responses in the fixture transcripts, and the files it is in."""
    found: dict[str, list[str]] = {}
    for path in fixture_files():
        rows = responses(path)
        if rows.empty or "model" not in rows:
            continue
        for model, group in rows.groupby(rows["model"].astype("string"), dropna=True):
            if model == STAND_IN:
                spent = group[[c for c in TOKENS if c in group]].astype("Float64").fillna(0).to_numpy().sum()
                assert spent == 0, f"{path.name}: a {STAND_IN} stand-in reports {spent} tokens: it is a response"
                continue
            found.setdefault(str(model), []).append(path.name)
    return found


def usd_rate(model: str) -> bool:
    """Whether ``pricing.price`` prices a request of ``model`` (NA and a warning when no card row matches)."""
    row = pd.DataFrame(
        {"model": [model], "input_tokens": [1000], "cache_read_tokens": [0], "cache_write_tokens": [0]}
    ).assign(output_tokens=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(pricing.price(row).notna().all())


def test_every_model_in_the_fixtures_has_a_usd_rate():
    met = models_met()
    assert met, "no model read from tests/fixtures/transcripts"
    unpriced = {model: files for model, files in met.items() if not usd_rate(model)}
    assert not unpriced, "no USD rate (kit/data/rates/) for: " + "; ".join(
        f"{model} (in {', '.join(files)})" for model, files in sorted(unpriced.items())
    )


@pytest.mark.parametrize(
    ("model", "rates"),
    [  # USD per 1M: input, cached input, output; each row's source is in its card
        ("claude-sonnet-4-6", (3.00, 0.30, 15.00)),
        ("claude-opus-4-5-20251101", (5.00, 0.50, 25.00)),  # a dated snapshot: the row's prefix
        ("gpt-5.6-luna", (0.20, 0.02, 1.20)),
    ],
)
def test_the_fixtures_models_price_at_their_card_rows(model, rates):
    # 1,000 fresh input + 4,000 read + 100 output tokens, by hand at the card's rates
    row = pd.DataFrame(
        {"model": [model], "input_tokens": [5000], "cache_read_tokens": [4000], "cache_write_tokens": [0]}
    ).assign(output_tokens=100)
    fresh, read, out = rates
    assert float(pricing.price(row).iloc[0]) == pytest.approx((1000 * fresh + 4000 * read + 100 * out) / 1e6)


def test_the_check_fails_on_a_model_no_card_knows():
    assert not usd_rate("claude-sonnet-9-9") and not usd_rate(STAND_IN)
