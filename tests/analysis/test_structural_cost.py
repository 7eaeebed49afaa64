"""The structural-cache cost in dollars (docs/method.md#structural-cache): each trial's requests billed as an ideal
per-trial prefix cache bills them, checked against the embedded provider's log (its prompt segments and output
counts) and the dated rate card; and the report's per-arm comparison of structural and observed cache."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit.analysis import pricing
from kit.experiment.layout import BatchDir
from kit.report import batch as report
from kit.stages import analyze, parse
from tests.support import pack_batch


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch-read batch under a model the USD card prices (gpt-5.4), on the embedded provider."""
    folder = pack_batch("demo", tmp_path_factory.mktemp("priced"), batch="priced", runs_per_arm=2, model="gpt-5.4")
    parse.parse_batch(folder)
    return folder


def _truth(folder: Path, rates: pd.Series) -> dict[str, float]:
    """Per trial, from the provider log alone: each request's longest segment-boundary prefix shared with an
    earlier request of the trial at the cached rate, the rest at the input rate (gpt-5.4 has no write surcharge),
    its output at the output rate."""
    bd, out = BatchDir(folder), {}
    for tdir in bd.trial_dirs():
        lines = [orjson.loads(x) for x in (tdir / "provider_log.jsonl").read_bytes().splitlines()]
        seen: list[list[str]] = []
        usd = 0.0
        for line in lines:
            digests = [seg[0] for seg in line["segments"]]
            sizes = [seg[1] for seg in line["segments"]]
            shared = 0
            for earlier in seen:
                k = 0
                while k < min(len(earlier), len(digests)) and earlier[k] == digests[k]:
                    k += 1
                shared = max(shared, sum(sizes[:k]))
            seen.append(digests)
            fresh = sum(sizes) - shared
            usd += (
                fresh * rates["input"]
                + shared * rates["cached_input"]
                + line["usage"]["output_tokens"] * rates["output"]
            )
        out[tdir.name] = usd / 1e6
    return out


def test_the_structural_cost_is_the_logs_prompts_at_the_cards_rates(priced: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([priced], n_resamples=1_000, out_dir=tmp_path)
    card = pricing.rate_card("usd").set_index("model")
    truth = _truth(priced, card.loc["gpt-5.4"])
    got = result.trials.set_index("trial_id")["structural_cost_usd"]
    assert set(got.index) == set(truth)
    for trial, usd in truth.items():
        assert got[trial] == pytest.approx(usd, rel=1e-9)
    observed = result.trials.set_index("trial_id")["cost_usd"]
    assert all(observed[t] > 0 and got[t] > 0 for t in truth)  # both priced: same card, two caches
    assert (result.ratios["metric"] == "structural_cost_usd").any()
    sentences = report.uncached_sentences(result.ratios, result.design)
    (structural,) = [s for s in sentences if s.startswith("structural (modelled)")]
    assert "its structural-cache cost at the dated USD rates: ratio" in structural


def test_the_report_compares_structural_and_observed_cache_per_arm(priced: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([priced], n_resamples=1_000, out_dir=tmp_path)
    table = report.structural_vs_observed(result.trials).set_index("arm")
    for arm, trials in result.trials.groupby("arm"):
        observed = trials["cache_read_tokens"].sum() / trials["input_tokens"].sum()
        ideal = 1 - trials["structural_uncached"].sum() / trials["input_tokens"].sum()
        assert table.loc[arm, "observed / structural"] == pytest.approx(observed / ideal)
        assert table.loc[arm, "USD per trial: structural"] == f"${trials['structural_cost_usd'].mean():.4f}"
    section = "\n".join(report.cache_section(result.design, result.trials))
    assert report.STRUCTURAL_VS_OBSERVED in section and "| batching |" in section


def test_anthropic_writes_are_billed_at_the_write_rate() -> None:
    card = pricing.rate_card("usd")
    row = card[card["provider"] == "anthropic"].iloc[0]
    requests = pd.DataFrame(
        {"trial_id": ["t", "t"], "model": [row["model"]] * 2, "input_tokens": [1_000, 1_500],
         "structural_cached": [0, 1_000], "output_tokens": [100, 50]}
    )  # fmt: skip
    want = (1_000 * row["write_5m"] + 1_000 * row["cached_input"] + 500 * row["write_5m"] + 150 * row["output"]) / 1e6
    assert pricing.structural_price_by_trial(requests)["t"] == pytest.approx(want)
    unknown = requests.assign(model="sim-agent")
    with pytest.warns(UserWarning, match="no usd rate for model"):
        assert pd.isna(pricing.structural_price_by_trial(unknown)["t"])
