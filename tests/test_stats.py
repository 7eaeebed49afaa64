"""kit.stats: the stitch guard (docs/method.md#stitch), bootstrap coverage, pairing, two levels, degenerate data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from msgspec.structs import asdict
from scipy import stats as sps

from kit import stats
from kit.stats import StitchError
from kit.stats.intervals import two_level_interval

SPREAD = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])  # sums to zero: the per-run values keep the quoted mean


def runs(batch: str, arm: str, mean: float, hit: float, *, total: float | None = None) -> list[dict]:
    """Five trials whose uncached mean is ``mean`` at cache hit rate ``hit`` (and total mean ``total``)."""
    rows = []
    for run, d in enumerate(SPREAD):
        uncached = mean + d * mean / 100
        inp = uncached / (1 - hit)
        rows.append(
            {
                "batch": batch,
                "arm": arm,
                "run": run,
                "status": "ok",
                "input_tokens": inp,
                "cache_read_tokens": inp - uncached,
                "uncached_input_tokens": uncached,
                "total_tokens": (total if total is not None else inp) + d * 1000,
                "simulated": False,
            }
        )
    return rows


@pytest.fixture(scope="module")
def seed000() -> pd.DataFrame:
    """PromptPilot's published runs: v1 holds builtin and with_session interleaved; v2fix holds only with_session."""
    return pd.DataFrame(
        runs("v1", "builtin", 317_079, 0.932, total=4_664_958)
        + runs("v1", "with_session", 170_264, 0.861, total=1_224_729)
        + runs("v2fix", "with_session", 118_610, 0.891)
    )


def test_cross_run_uncached_ratio_is_a_stitch(seed000):
    stitched = seed000[(seed000["arm"] == "builtin") | (seed000["batch"] == "v2fix")]
    with pytest.raises(StitchError, match=r"v1.*v2fix"):
        stats.ratio(stitched, "uncached_input_tokens", "builtin", "with_session")


def test_allow_stitch_labels_the_row(seed000):
    stitched = seed000[(seed000["arm"] == "builtin") | (seed000["batch"] == "v2fix")]
    row = stats.ratio(stitched, "uncached_input_tokens", "builtin", "with_session", allow_stitch=True)
    assert row.label == "cross-run stitch"
    assert row.estimate == pytest.approx(317_079 / 118_610)
    assert round(row.estimate, 2) == 2.67
    assert row.paired is False
    assert row.batches == 2


def test_same_run_ratios_are_not_stitches(seed000):
    table = stats.ratios(seed000, "with_session", ["builtin"], ["total_tokens"])
    assert list(table["metric"]) == ["total_tokens", "uncached_input_tokens"]
    total, uncached = table.iloc[0], table.iloc[1]
    assert round(uncached["estimate"], 2) == 1.86
    assert round(total["estimate"], 2) == 3.81
    assert (table["label"] == "").all()
    assert not table["paired"].any()  # one prompt repeated: runs are independent, never paired by index
    assert (table["batches"] == 1).all()
    assert total["lower"] < total["estimate"] < total["upper"]
    assert uncached["hit_rate_arm"] == pytest.approx(0.932)
    assert uncached["hit_rate_baseline"] == pytest.approx(0.861)
    assert "93.2%" in uncached["note"]
    assert total["hit_rate_arm"] == pytest.approx(0.932)


def test_partial_overlap_uses_only_shared_batches(seed000):
    row = stats.ratio(seed000, "uncached_input_tokens", "builtin", "with_session")
    assert row.label == ""
    assert row.batches == 1
    assert row.estimate == pytest.approx(317_079 / 170_264)
    assert "v2fix" in row.note


def paired_batch(
    rng: np.random.Generator, batch: str, n: int, ratio: float, sigma: float, base_sd: float = 0.5
) -> list[dict]:
    rows = []
    for run in range(n):
        base = rng.lognormal(10, base_sd)
        rows.append({"batch": batch, "arm": "b", "run": run, "status": "ok", "total_tokens": base})
        arm = base * ratio * rng.lognormal(0, sigma)
        rows.append({"batch": batch, "arm": "a", "run": run, "status": "ok", "total_tokens": arm})
    return rows


def test_default_interval_covers_the_true_ratio():
    """200 simulated batches: the default 95% interval holds the true ratio of means about 95% of the time."""
    rng = np.random.default_rng(20260616)
    sigma, ratio_ = 0.2, 0.5
    truth = ratio_ * math.exp(sigma**2 / 2)  # E[a]/E[b] for a = b x ratio x lognormal(0, sigma)
    hits = 0
    for i in range(200):
        trials = pd.DataFrame(paired_batch(rng, f"b{i}", 20, ratio_, sigma, base_sd=0.3))
        row = stats.ratio(trials, "total_tokens", "a", "b", n_resamples=1_000, seed=i, matched=True)  # shared base
        hits += row.lower <= truth <= row.upper
    assert 0.88 <= hits / 200 <= 0.99


def test_pairing_narrows_the_interval():
    trials = pd.DataFrame(paired_batch(np.random.default_rng(3), "b0", 20, 0.5, 0.05))
    paired = stats.ratio(trials, "total_tokens", "a", "b", matched=True)  # run i: the same question in both arms
    unpaired = stats.ratio(trials, "total_tokens", "a", "b")
    assert paired.paired and not unpaired.paired
    assert paired.estimate == unpaired.estimate
    assert paired.method == "paired skew-t (log ratio)"
    assert unpaired.method == "unpaired skew-t (log ratio)"
    assert (paired.upper - paired.lower) < 0.3 * (unpaired.upper - unpaired.lower)


def test_unmatched_runs():
    trials = pd.DataFrame(paired_batch(np.random.default_rng(4), "b0", 8, 0.5, 0.1))
    trials = trials[~((trials["arm"] == "a") & (trials["run"] == 3))]
    with pytest.raises(ValueError, match=r"runs only in .*baseline \[3\]"):
        stats.ratio(trials, "total_tokens", "a", "b", paired=True)
    row = stats.ratio(trials, "total_tokens", "a", "b", matched=True)
    assert row.paired is False
    assert "unpaired" in row.note
    assert (row.n_arm, row.n_baseline) == (7, 8)


def test_failed_trials_are_left_out():
    trials = pd.DataFrame(paired_batch(np.random.default_rng(5), "b0", 6, 0.5, 0.1))
    trials.loc[(trials["arm"] == "a") & (trials["run"] == 0), ["status", "total_tokens"]] = ["failed", 1e12]
    row = stats.ratio(trials, "total_tokens", "a", "b")
    ok = trials[trials["status"] == "ok"]
    expected = ok.loc[ok["arm"] == "a", "total_tokens"].mean() / ok.loc[ok["arm"] == "b", "total_tokens"].mean()
    assert row.estimate == pytest.approx(expected)
    assert row.n_arm == 5


def batches_with_drift(ratios: list[float], n: int = 6, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame([r for i, q in enumerate(ratios) for r in paired_batch(rng, f"b{i}", n, q, 0.05)])


def test_two_level_bootstrap_across_batches():
    trials = batches_with_drift([0.4, 0.5, 0.6, 0.7])
    row = stats.ratio(trials, "total_tokens", "a", "b", matched=True)
    assert row.batches == 4
    assert row.paired is True
    assert row.method == "two-level paired t over 4 batches (3 df, log ratio)"
    assert row.lower < row.estimate < row.upper
    pooled = trials.assign(batch="all", run=trials["batch"].str[1:].astype(int) * 6 + trials["run"])
    one_batch = stats.ratio(pooled, "total_tokens", "a", "b", matched=True)
    assert one_batch.paired is True and one_batch.batches == 1
    # batch-to-batch drift is extra uncertainty that a one-level interval over pooled runs ignores
    assert (row.upper - row.lower) > 1.5 * (one_batch.upper - one_batch.lower)
    assert pd.Series(asdict(stats.ratio(trials, "total_tokens", "a", "b", matched=True))).equals(pd.Series(asdict(row)))


def test_two_level_means_take_their_spread_from_the_batches():
    """Pooled means (2 + 9) / 5 = 2.2 and 4.4; batch residuals (2 - 2.2 x 2) / 5 = -0.48 and +0.48, so the
    mean's variance is 2 / 1 x 2 x 0.48^2 = 0.9216 on 1 df; both batches hold the ratio 2, so it has none."""
    groups = [(np.array([1.0, 1.0]), np.array([2.0, 2.0])), (np.array([3.0, 3.0, 3.0]), np.array([6.0, 6.0, 6.0]))]
    fit = stats.two_level_means(groups)
    assert fit.means == pytest.approx([2.2, 4.4]) and fit.df == 1
    assert fit.cov == pytest.approx(np.array([[0.9216, 1.8432], [1.8432, 3.6864]]))
    assert all(math.isnan(v) for v in two_level_interval(groups, confidence=0.95))  # the ratio does not vary
    lo, hi = two_level_interval([g[:1] for g in groups], confidence=0.95, log=False)
    assert (lo, hi) == pytest.approx(2.2 + np.array([-1, 1]) * sps.t.ppf(0.975, 1) * math.sqrt(0.9216))


def test_small_n_flag():
    few = pd.DataFrame(paired_batch(np.random.default_rng(8), "b0", 3, 0.5, 0.1))
    enough = pd.DataFrame(paired_batch(np.random.default_rng(8), "b0", 5, 0.5, 0.1))
    assert stats.ratio(few, "total_tokens", "a", "b").small_n is True
    assert stats.ratio(enough, "total_tokens", "a", "b").small_n is False


def test_degenerate_input_gives_nan_bounds_and_a_note():
    one = pd.DataFrame(paired_batch(np.random.default_rng(9), "b0", 1, 0.5, 0.1))
    row = stats.ratio(one, "total_tokens", "a", "b")
    assert row.estimate == pytest.approx(one["total_tokens"].iloc[1] / one["total_tokens"].iloc[0])
    assert math.isnan(row.lower) and math.isnan(row.upper)
    assert "too few runs" in row.note

    flat = pd.DataFrame(
        [
            {"batch": "b", "arm": arm, "run": r, "status": "ok", "total_tokens": v}
            for arm, v in (("a", 5.0), ("b", 10.0))
            for r in range(5)
        ]
    )
    row = stats.ratio(flat, "total_tokens", "a", "b")
    assert row.estimate == 0.5
    assert math.isnan(row.lower) and "zero variance" in row.note

    proportional = flat.copy()
    proportional["total_tokens"] = proportional["run"] + 1.0
    proportional.loc[proportional["arm"] == "a", "total_tokens"] *= 2
    row = stats.ratio(proportional, "total_tokens", "a", "b", paired=True)  # every pair has ratio 2 exactly
    assert row.estimate == pytest.approx(2.0)
    assert row.lower == pytest.approx(2.0) and row.upper == pytest.approx(2.0)  # all the data can give

    zero = flat.assign(total_tokens=np.where(flat["arm"] == "b", 0.0, flat["run"] + 1.0))
    row = stats.ratio(zero, "total_tokens", "a", "b")
    assert math.isnan(row.estimate) and "zero" in row.note


def test_grade_is_a_difference():
    rows = [
        {"batch": "b", "arm": "a", "run": r, "status": "ok", "grade": g} for r, g in enumerate([1.0, 0.5, 1.0, 1.0])
    ]
    rows += [
        {"batch": "b", "arm": "b", "run": r, "status": "ok", "grade": g} for r, g in enumerate([0.5, 0.5, 1.0, 0.0])
    ]
    row = stats.ratio(pd.DataFrame(rows), "grade", "a", "b")
    assert row.estimate == pytest.approx(0.875 - 0.5)
    assert "difference" in row.method


def test_seeded_reproducibility():
    trials = pd.DataFrame(paired_batch(np.random.default_rng(10), "b0", 10, 0.5, 0.2))
    opts = {"method": "bootstrap-t"}  # the default is analytic; the seed matters to the bootstrap methods
    first = stats.ratio(trials, "total_tokens", "a", "b", seed=11, **opts)
    assert pd.Series(asdict(stats.ratio(trials, "total_tokens", "a", "b", seed=11, **opts))).equals(
        pd.Series(asdict(first))
    )
    assert stats.ratio(trials, "total_tokens", "a", "b", seed=12, **opts).lower != first.lower


def test_per_prompt_savings_by_hand():
    values = pd.DataFrame(
        [
            ("p1", "__terse__", 100), ("p1", "skill", 60), ("p1", "__baseline__", 300),
            ("p2", "__terse__", 200), ("p2", "skill", 140), ("p2", "skill", 160),  # replicates average to 150
            ("p3", "__terse__", 50), ("p3", "skill", 50),
            ("p4", "__terse__", 80), ("p4", "skill", 40),
            ("p5", "skill", 10),  # no control: left out
        ],
        columns=["prompt", "arm", "value"],
    )  # fmt: skip
    out = stats.per_prompt_savings(values, "skill", "__terse__", n_resamples=2_000)
    # savings 1 - skill/terse: p1 0.40, p2 0.25, p3 0.00, p4 0.50
    assert out.per_prompt == pytest.approx({"p1": 0.4, "p2": 0.25, "p3": 0.0, "p4": 0.5})
    assert out.n == 4
    assert out.median == pytest.approx(0.325)
    assert out.mean == pytest.approx(0.2875)
    assert (out.min, out.max) == (0.0, 0.5)
    # squared deviations from 0.2875: 0.01265625 + 0.00140625 + 0.08265625 + 0.04515625 = 0.141875
    assert out.stdev == pytest.approx(math.sqrt(0.141875 / 3))
    assert math.isnan(out.lower) and "too few runs (4 < 5)" in out.note  # four prompts: no interval
    assert "lack one" in out.note


def warmth_batches(hits: list[float], ratios: list[float], control: bool) -> pd.DataFrame:
    rows = []
    for i, (hit, q) in enumerate(zip(hits, ratios, strict=True)):
        for arm, mean, h in (("a", 1000 * q, hit), ("b", 1000.0, hit)):
            for run in range(3):
                inp = mean / (1 - h)
                rows.append(
                    {
                        "batch": f"w{i}",
                        "arm": arm,
                        "run": run,
                        "status": "ok",
                        "control": False,
                        "input_tokens": inp,
                        "cache_read_tokens": inp - mean,
                        "uncached_input_tokens": mean,
                    }
                )
        if control:
            rows.append(
                {
                    "batch": f"w{i}",
                    "arm": "c",
                    "run": 0,
                    "status": "ok",
                    "control": True,
                    "input_tokens": 10_000,
                    "cache_read_tokens": 9_500,
                    "uncached_input_tokens": 500,
                }
            )
    return pd.DataFrame(rows)


def test_warmth_invariance_needs_batches_and_a_control():
    trials = warmth_batches([0.5, 0.6, 0.7, 0.8, 0.9], [0.9, 0.8, 0.7, 0.6, 0.5], control=True)
    out = stats.warmth_invariance(trials, "a", "b")
    assert out.n_batches == 5
    assert out.slope < 0 and out.slope_upper < 0
    assert out.dependence == "dependent"
    assert out.claim_ok is True and out.reason == ""
    assert out.verdict.startswith("warmth-dependent")
    assert out.control_hit_rate == pytest.approx(0.95)
    assert list(out.per_batch["ratio"]) == pytest.approx([0.9, 0.8, 0.7, 0.6, 0.5])

    flat = stats.warmth_invariance(warmth_batches([0.5, 0.6, 0.7], [0.8, 0.8, 0.8], control=False), "a", "b")
    assert flat.claim_ok is False
    assert "control" in flat.reason
    assert flat.dependence == "invariant" and flat.verdict.startswith("warmth-invariant within ±0.0% per 10 points")

    two = stats.warmth_invariance(warmth_batches([0.5, 0.6], [0.9, 0.8], control=True), "a", "b")
    assert two.claim_ok is False
    assert ">= 3" in two.reason
    assert "not enough batches" in two.verdict and two.dependence == "not judged"
