"""kit.stats's rules from issue #16: validated inputs, no interval below 5 runs, bounds the data support,
a warmth slope that three batches can resolve, the run planner and the stop rule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from msgspec.structs import asdict

from kit import stats
from kit.experiment.design import ParamError
from kit.records import Manifest
from kit.report import batch as report
from kit.stages.analyze import matched_runs
from kit.stats import planning
from kit.stats.coverage import SPREAD_RATIO, spread_ratio, study_coverage
from kit.stats.intervals import jackknife_var
from tests.report_tables import DESIGN
from tests.support import ROOT, run_params, warmth_batches

EXAMPLE = ROOT / "outputs" / "examples" / "batch-read" / "analysis" / "trials.csv"


def batch(n: int, *, seed: int = 0, ratio: float = 0.5, cv: float = 0.3, name: str = "b0") -> pd.DataFrame:
    """``n`` independent lognormal runs per arm (one prompt repeated): arm ``a`` is ``ratio`` times ``b``."""
    rng = np.random.default_rng(seed)
    s = math.sqrt(math.log1p(cv**2))
    rows = [
        {"batch": name, "arm": arm, "run": run, "status": "ok", "total_tokens": scale * rng.lognormal(10, s)}
        for arm, scale in (("a", ratio), ("b", 1.0))
        for run in range(n)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"confidence": 1.5}, "confidence"),
        ({"confidence": 0}, "confidence"),
        ({"n_resamples": 0, "method": "bootstrap-t"}, "n_resamples"),  # the analytic default never resamples
        ({"n_resamples": 500, "method": "BCa"}, "n_resamples"),
    ],
)
def test_bad_options_name_the_parameter(options, name):
    with pytest.raises(ParamError, match=f"parameter '{name}'"):
        stats.ratio(batch(6), "total_tokens", "a", "b", **options)


@pytest.mark.parametrize("bad", [-5.0, math.inf])
def test_negative_or_infinite_totals_are_refused(bad):
    trials = batch(6)
    trials.loc[0, "total_tokens"] = bad
    with pytest.raises(ParamError, match="negative or infinite"):
        stats.ratio(trials, "total_tokens", "a", "b")


def test_no_interval_below_five_runs_and_a_warning_below_ten():
    two = stats.ratio(batch(2), "total_tokens", "a", "b")
    assert math.isnan(two.lower) and math.isnan(two.upper) and two.small_n
    assert "too few runs" in two.note and np.isfinite(two.estimate)
    five = stats.ratio(batch(5), "total_tokens", "a", "b")
    assert np.isfinite(five.lower) and "fewer than 10 runs" in five.note
    ten = stats.ratio(batch(10), "total_tokens", "a", "b")
    assert "fewer than 10" not in ten.note
    assert math.isnan(stats.mean_interval([1.0, 2.0, 3.0]).lower)


def test_one_huge_outlier_gives_a_bound_the_data_support():
    trials = batch(8, seed=3)
    trials.loc[trials.index[0], "total_tokens"] *= 1_000  # one runaway trial in arm a
    row = stats.ratio(trials, "total_tokens", "a", "b")
    assert row.lower >= row.resample_min and row.upper <= row.resample_max
    assert row.upper < 1e4  # was 2.1e7 before the cap


def test_batch_read_example_headline_stays_within_its_data():
    """The committed example's '3.11x fewer (95% CI 1.45-76.63)' reached 11x past its runs' 6.8x."""
    trials = pd.read_csv(EXAMPLE)
    row = stats.ratio(trials, "total_tokens", "batching", "placebo")
    a = trials.loc[trials["arm"] == "batching", "total_tokens"]
    b = trials.loc[trials["arm"] == "placebo", "total_tokens"]
    assert row.resample_min == pytest.approx(a.min() / b.max())
    assert row.resample_max == pytest.approx(a.max() / b.min())
    assert row.resample_min <= row.lower < row.estimate < row.upper <= row.resample_max
    assert 1 / row.lower < 7  # at most the 6.8x fewer any resample of these runs gives
    assert row.paired is False  # one prompt repeated: run indexes match nothing


def _manifest(task: dict) -> Manifest:
    return Manifest(
        batch="b", salt="s", params=run_params(), simulated=True, task=task, started_at="", status="complete"
    )


def test_pairing_needs_a_matched_design():
    assert matched_runs([_manifest({"task": "terse", "n_prompts": 12})])
    assert not matched_runs([_manifest({"task": "batch-read"})])
    assert not matched_runs([_manifest({"n_prompts": 12}), _manifest({"n_prompts": 1})])


def warmth(ratios: list[float], hits: list[float], runs: int = 5, spread: float = 0.1) -> pd.DataFrame:
    """Batches whose uncached ratio is ``ratios[i]`` at hit rate ``hits[i]``, runs spread by ``spread`` around their
    mean exactly (so each batch's ratio is exact), a control."""

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        noise = rng.normal(0, spread, n)
        return 1 + noise - noise.mean()

    return warmth_batches(ratios, hits, draw, seed=4, runs=runs)


def test_three_batches_falling_with_warmth_are_warmth_dependent():
    """Issue #16: 0.73 -> 0.58 -> 0.47 as the hit rate rose 3% -> 26% -> 67% read 'no detectable dependence'."""
    out = stats.warmth_invariance(warmth([0.73, 0.58, 0.47], [0.03, 0.26, 0.67]), "a", "b")
    assert out.n_batches == 3 and out.claim_ok
    assert out.dependence == "dependent" and out.verdict.startswith("warmth-dependent")
    assert out.slope_upper < 0
    assert out.per_batch["hit_rate"].round(2).tolist() == [0.03, 0.26, 0.67]


def test_flat_ratios_are_invariant_only_when_the_slope_is_pinned_down():
    flat = stats.warmth_invariance(warmth([0.6, 0.6, 0.6], [0.1, 0.5, 0.9], spread=0.01), "a", "b")
    assert flat.dependence == "invariant"
    assert flat.slope_lower > -stats.MATERIAL_SLOPE and flat.slope_upper < stats.MATERIAL_SLOPE
    noisy = stats.warmth_invariance(warmth([0.6, 0.6, 0.6], [0.1, 0.15, 0.2], spread=0.5), "a", "b")
    assert noisy.dependence == "undetermined"


@pytest.mark.parametrize("hits", [[0.5, 0.5, 0.5], [0.5, 0.5 + 1e-12, 0.5 - 1e-12], [0.5, 0.5 + 1e-7, 0.5 + 2e-7]])
@pytest.mark.parametrize("ratios", [[0.6, 0.6, 0.6], [0.73, 0.58, 0.47]])
def test_near_equal_hit_rates_cannot_tell_instead_of_crashing(hits, ratios):
    """Issue #30 item 5: hit rates equal to ~1e-12 raised LinAlgError, ~1e-7 apart OverflowError (or a slope of
    -2e6 per 100% called 'dependent' at hit rates 50.0%-50.0%), which would abort the analyze stage."""
    out = stats.warmth_invariance(warmth(ratios, hits), "a", "b")
    assert out.n_batches == 3 and out.claim_ok
    assert out.dependence == "not judged" and math.isnan(out.slope)
    assert out.verdict.startswith("cannot tell warmth dependence with these batches")
    assert "hit rates span 0.00%" in out.verdict


def test_plan_matches_the_simulated_runs():
    """bench/known_truth.md#planner: 48 runs per arm for CV 0.5 at upper/lower 1.5 (simulation: 46-48)."""
    p = stats.plan(cv=0.5, precision=1.5)
    assert 43 <= p.runs_per_arm <= 50
    assert stats.plan(cv=0.5, precision=1.5, assurance=0.8).runs_per_arm > p.runs_per_arm
    assert stats.plan(cv=0.5, effect=1.3, assurance=0.8).runs_per_arm == pytest.approx(57, rel=0.15)
    with pytest.raises(AttributeError):
        p.runs_per_arm = 3  # a frozen record
    assert "you need about" in p.sentence() and "x/÷1.22" in p.sentence()


def test_plan_from_a_pilot_and_for_params():
    pilot = batch(40, cv=0.5)
    p = stats.plan(pilot=pilot, precision=2.0, arm="a", baseline="b")
    assert 0.35 < p.cv_arm < 0.65 and "pilot of 40" in p.source
    line = stats.plan_for_params(5, cv=0.5, precision=1.5)
    assert line.startswith("to resolve a ratio to x/÷1.22") and "this batch plans 5 runs per arm" in line
    with pytest.raises(ParamError, match="precision/effect"):
        stats.plan(cv=0.5)
    with pytest.raises(ParamError, match="'cv'"):
        stats.plan(precision=1.5)


def test_stop_rule():
    """Looks from 15 runs per arm: from 10, stopping on width covered 91.8% on the batch-read pack's arms."""
    rule = {"precision": 2.0, "max_runs_per_arm": 40}
    assert stats.STOP_FIRST_LOOK == 15
    early = stats.should_continue(batch(12, cv=0.1), "a", "b", rule)
    assert early.add_block and "looks from 15" in early.reason
    tight = stats.should_continue(batch(15, cv=0.1), "a", "b", rule)
    assert not tight.add_block and tight.reason.startswith("precision reached")
    wide = stats.should_continue(batch(15, cv=1.0, seed=2), "a", "b", rule)
    assert wide.add_block
    capped = stats.should_continue(batch(40, cv=3.0, seed=2), "a", "b", {"precision": 1.01, "max_runs_per_arm": 40})
    assert not capped.add_block and "max_runs_per_arm" in capped.reason
    clear = stats.should_continue(batch(15, ratio=0.3), "a", "b", {"exclude_one": True, "max_runs_per_arm": 40})
    assert not clear.add_block and "anytime-valid" in clear.reason
    sooner = stats.should_continue(batch(10, ratio=0.3), "a", "b", {"exclude_one": True, "max_runs_per_arm": 40,
                                                                     "min_runs_per_arm": 10})  # fmt: skip
    assert not sooner.add_block and sooner.runs_per_arm == 10  # a stated first look overrides the default
    with pytest.raises(ParamError, match="'stop'"):
        stats.should_continue(batch(10), "a", "b", {"precision": 2.0})


def test_look_confidence_spends_alpha_once():
    levels = [stats.look_confidence(k) for k in range(1, 10_000)]
    assert levels[0] > 0.95 and sum(1 - c for c in levels) < 0.05


def test_a_stop_decision_carries_the_level_it_read_and_its_look():
    """A precision stop reads (and the analysis publishes) the 97% interval: with the fixed-n 95% one the batches
    that stopped on width undercovered (bench/known_truth.md#stopping-rules); an 'excludes 1' rule the anytime one."""
    precision = {"precision": 2.0, "max_runs_per_arm": 40}
    assert planning.stop_confidence(precision, 3) == pytest.approx(0.97)
    tight = stats.should_continue(batch(16, cv=0.1), "a", "b", precision)
    assert tight.look == 2 and tight.confidence == pytest.approx(0.97) and "(97% interval)" in tight.reason
    row = stats.ratio(batch(16, cv=0.1), "total_tokens", "a", "b", confidence=0.97)
    assert (tight.lower, tight.upper) == (row.lower, row.upper)
    both = {**precision, "exclude_one": True}
    assert planning.stop_confidence(both, 3) == stats.look_confidence(3)
    assert planning.stop_confidence(both, 3, precision_stop=True) == pytest.approx(0.97)
    waiting = stats.should_continue(batch(16, cv=2.0, seed=3), "a", "b", {**both, "precision": 1.01})
    assert waiting.add_block and waiting.confidence == stats.look_confidence(2)
    early = stats.should_continue(batch(12), "a", "b", precision)
    assert early.look == 0 and math.isnan(early.confidence)


def pack_like(n: int, *, seed: int = 0) -> pd.DataFrame:
    """The batch-read pack's shape: arm ``a`` near-constant, baseline ``b`` with long runs (a path of 2-7x)."""
    rng = np.random.default_rng(seed)
    a = 11_300 * rng.lognormal(0, 0.02, n)
    b = 11_300 * np.array([1.0, 1.2, 1.7, 2.4, 6.8] * (n // 5 + 1))[:n] * rng.lognormal(0, 0.02, n)
    rows = [
        {"batch": "p0", "arm": arm, "run": run, "status": "ok", "total_tokens": float(v)}
        for arm, values in (("a", a), ("b", b))
        for run, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


def _two_arms(a: list[float], b: list[float]) -> pd.DataFrame:
    rows = [
        {"batch": "p0", "arm": arm, "run": run, "status": "ok", "total_tokens": v}
        for arm, values in (("a", a), ("b", b))
        for run, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_arms_of_different_shape_are_flagged_with_the_coverage_the_study_measured():
    """bench/known_truth.md#arms-of-different-shape: arms whose runs differ >= 2x in CV name the noisier one and quote
    what such batches covered at that many runs; other rows carry the same-shape coverage."""
    row = stats.ratio(pack_like(5), "total_tokens", "a", "b")
    five = study_coverage(5, True)
    assert row.interval_rests_on == "b" and np.isfinite(row.lower) and row.cv_ratio >= SPREAD_RATIO
    assert row.study_coverage == five.coverage < 0.93 and f"covered {five.coverage:.0%} at 5 runs" in row.note
    assert stats.ONE_ARM_NOTE  # the report's sentence for such rows
    twenty = stats.ratio(pack_like(20), "total_tokens", "a", "b")  # no cut-off: at 20 such batches still cover < 93%
    assert twenty.interval_rests_on == "b" and twenty.study_coverage == study_coverage(20, True).coverage
    alike = stats.ratio(batch(12, cv=0.5, seed=1), "total_tokens", "a", "b")
    assert alike.interval_rests_on == "" and "different shape" not in alike.note
    assert alike.study_coverage == study_coverage(10, False).coverage and alike.cv_ratio < SPREAD_RATIO
    paired = stats.ratio(pack_like(5), "total_tokens", "a", "b", paired=True)
    assert paired.interval_rests_on == "" and math.isnan(paired.study_coverage)  # the study has no such cell
    other = stats.ratio(pack_like(5), "total_tokens", "a", "b", method="jackknife-t")
    assert other.interval_rests_on == "b" and math.isnan(other.study_coverage)  # measured for the default only
    few = stats.ratio(pack_like(4), "total_tokens", "a", "b")
    assert few.interval_rests_on == "" and math.isnan(few.lower) and math.isnan(few.study_coverage)
    assert study_coverage(4, True) is None and study_coverage(7, True) == five


def test_a_tight_arm_against_a_noisy_one_is_flagged_where_the_variance_share_was_not():
    """A tight arm (CV 0.13) against a baseline whose five runs drew none of its long ones (CV 0.34): the CVs differ
    2.5x, so it is flagged; the old flag (one arm holding >= 90% of the log ratio's jackknife variance) missed it."""
    a, b = [10_000.0, 11_800, 8_600, 10_900, 8_900], [8_000.0, 12_500, 6_400, 9_000, 14_800]
    va, vb = (jackknife_var(np.array(x), np.log) for x in (a, b))
    assert 0.8 < vb / (va + vb) < 0.9  # below the old flag's 0.9
    row = stats.ratio(_two_arms(a, b), "total_tokens", "a", "b")
    assert row.interval_rests_on == "b" and row.cv_ratio == pytest.approx(2.53, abs=0.01)
    assert row.study_coverage == study_coverage(5, True).coverage
    (spread, which), expected = spread_ratio(np.array([a, a]), np.array([b, a])), np.array([2.53, 1.0])
    assert np.allclose(spread, expected, atol=0.01) and list(which) == [1, 0]


def test_a_per_arm_interval_from_few_runs_says_what_it_cannot_see():
    """Five runs that look symmetric may be an arm that missed its long runs: the note quotes the study's 85%."""
    five = stats.mean_interval([1.0, 1.1, 0.9, 1.05, 0.95])
    assert np.isfinite(five.lower) and stats.FEW_RUNS_MEAN_NOTE in five.note and "covered 85%" in five.note
    skewed = stats.mean_interval(np.exp(np.linspace(0, 1.6, stats.WARN_RUNS)) ** 2)  # sample skewness 1-2
    assert "blind to long runs" not in skewed.note  # such intervals held 95% from 10 runs


def test_the_report_warns_of_an_interval_resting_on_one_arm():
    rows = pd.DataFrame([asdict(stats.ratio(pack_like(5), m, "a", "b")) for m in ("total_tokens",)])
    (warning,) = [w for w in report.derived_warnings(rows, pack_like(5), DESIGN) if w.startswith("one-arm interval")]
    row = rows.iloc[0]
    assert "a vs b (total_tokens) rests on b's runs alone" in warning
    assert f"vary {row['cv_ratio']:.1f}× as much" in warning  # the row's own numbers, not a fixed sentence
    assert f"such 95% intervals covered about {row['study_coverage']:.0%}" in warning
    plain = pd.DataFrame([asdict(stats.ratio(batch(5, cv=0.5, seed=1), "total_tokens", "a", "b"))])
    assert not any(w.startswith("one-arm") for w in report.derived_warnings(plain, batch(5), DESIGN))
    older = rows.drop(columns="interval_rests_on")  # a ratios.csv written before the column existed
    assert not any(w.startswith("one-arm") for w in report.derived_warnings(older, pack_like(5), DESIGN))
