"""The warmth check answers both ways, and intervals over batches hold their level (issue #30 item 5).

Why: with ordinary run-to-run noise the old check said "dependent" on flat ratios 4.8-11% of the time and
never "invariant"; the two-level bootstrap over 5 batches of 5 runs covered 0.99. Seeded simulations small
enough for a unit test; bench/known_truth.md#warmth-check has the full tables.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kit import stats
from kit.stats import warmth
from kit.stats.intervals import jackknife_var, two_level_interval
from tests.support import ROOT, warmth_batches


def _lognormal(cv: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    s2 = math.log1p(cv**2)
    return np.exp(rng.normal(-s2 / 2, math.sqrt(s2), shape))


def batches(ratios: list[float], hits: list[float], cv: float, seed: int, runs: int = 5) -> pd.DataFrame:
    """Batches whose true uncached ratio is ``ratios[i]`` at hit rate ``hits[i]``, lognormal runs, one control."""
    return warmth_batches(ratios, hits, lambda rng, n: _lognormal(cv, (n,), rng), seed, runs)


def test_flat_ratios_under_run_noise_rarely_read_dependent():
    """2,000 sets of 4 flat batches at run CV 0.3: the false 'dependent' rate stays near 5% (the old fit's was
    up to 11%), and the slope's interval covers the true 0 about 95% of the time."""
    rng = np.random.default_rng(11)
    hits = np.array([0.03, 0.2, 0.4, 0.67])
    a, b = 0.58 * _lognormal(0.3, (2000, 4, 5), rng), _lognormal(0.3, (2000, 4, 5), rng)
    n = np.full(4, 5)
    fit = warmth.warmth_slope(
        np.log(a.mean(-1) / b.mean(-1)), hits, jackknife_var(a, np.log), jackknife_var(b, np.log), n, n
    )
    said = warmth.dependence_of(fit.lower, fit.upper)
    assert (said == "dependent").mean() <= 0.065
    assert 0.93 <= ((fit.lower <= 0) & (fit.upper >= 0)).mean() <= 0.98


def test_a_noisy_flat_design_cannot_tell_and_says_how_many_batches_would():
    out = stats.warmth_invariance(batches([0.58] * 3, [0.03, 0.26, 0.67], cv=0.3, seed=5), "a", "b")
    assert out.dependence == "undetermined" and out.slope_lower < 0 < out.slope_upper
    assert out.verdict.startswith("cannot tell warmth dependence with these batches")
    assert out.batches_to_tell > 3 and f"about {out.batches_to_tell:.0f} batches" in out.verdict
    assert out.slope_df > 1  # the runs give the interval degrees of freedom; a residual t of 3 points has 1


def test_a_quiet_flat_design_reads_invariant_within_a_bound():
    out = stats.warmth_invariance(batches([0.58] * 6, [0.03, 0.15, 0.3, 0.45, 0.55, 0.67], cv=0.05, seed=6), "a", "b")
    assert out.dependence == "invariant"
    assert -warmth.MATERIAL_SLOPE < out.slope_lower < 0 < out.slope_upper < warmth.MATERIAL_SLOPE
    assert out.verdict.startswith("warmth-invariant within ±") and "per 10 points of hit rate" in out.verdict
    assert math.isnan(out.batches_to_tell)


def test_a_large_slide_over_many_batches_reads_dependent():
    hits = list(np.linspace(0.05, 0.85, 8))
    ratios = list(np.exp(np.interp(hits, [0.05, 0.85], np.log([0.9, 0.4]))))
    out = stats.warmth_invariance(batches(ratios, hits, cv=0.3, seed=7), "a", "b")
    assert out.dependence == "dependent" and out.slope_upper < 0
    assert out.verdict.startswith("warmth-dependent") and out.claim_ok


def test_two_level_interval_over_five_batches_of_five_runs_is_not_too_wide():
    """The bootstrap that resampled batches then runs covered 0.99 here; the t over batches holds ~0.95."""
    rng = np.random.default_rng(12)
    a, b = 1.3 * _lognormal(0.5, (400, 5, 5), rng), _lognormal(0.5, (400, 5, 5), rng)
    bounds = np.array([two_level_interval(list(zip(a[i], b[i], strict=True)), confidence=0.95) for i in range(400)])
    covered = ((bounds[:, 0] <= 1.3) & (bounds[:, 1] >= 1.3)).mean()
    assert 0.91 <= covered < 0.985


def _study_rows(section: str) -> list[list[str]]:
    """The table rows of ``section`` in the committed bench/known_truth.md (cells as text)."""
    text = (ROOT / "bench" / "known_truth.md").read_text()
    assert f"## {section}\n" in text, f"bench/known_truth.md has no '{section}' section: regenerate it"
    body = text.split(f"## {section}\n")[1].split("\n## ")[0]
    rows = [line.strip("|").split("|") for line in body.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in r] for r in rows[1:]]  # without the header


def test_the_committed_warmth_table_keeps_false_dependence_at_most_five_percent():
    """bench/known_truth.md#warmth-check: flat truths in the model's scope ('scatter' 0) say 'dependent' <= 5%,
    and docs/method.md#replication quotes that range."""
    flat = [float(r[5]) for r in _study_rows("Warmth check") if r[0] == "flat" and r[1] == "0"]
    assert len(flat) == 9 and max(flat) <= 0.05
    method = (ROOT / "docs" / "method.md").read_text().split("## Replication\n")[1].split("\n## ")[0]
    assert f"*dependent* {min(flat):.1%}–{max(flat):.1%}".replace("%–", "–") in method


def test_the_committed_two_level_table_is_in_band():
    """bench/known_truth.md#intervals-over-batches: 3/5 batches x 5/10 runs x three drifts, ratio and arm mean."""
    rows = _study_rows("Intervals over batches")
    assert len(rows) == 12
    assert all(0.93 <= float(c) <= 0.97 for r in rows for c in r[3:5])


def test_batches_without_run_noise_or_hit_rates_are_not_judged():
    """One run of an arm leaves its batch's noise unknown: no zero-width interval pretending to certainty."""
    single = stats.warmth_invariance(batches([0.6, 0.5, 0.4], [0.1, 0.4, 0.7], cv=0.2, seed=1, runs=1), "a", "b")
    assert single.dependence == "not judged" and math.isnan(single.slope_lower)
    assert "run-to-run noise is unknown" in single.verdict
    unknown = batches([0.6, 0.5, 0.4], [0.1, 0.4, 0.7], cv=0.2, seed=1).drop(columns=["cache_read_tokens"])
    out = stats.warmth_invariance(unknown, "a", "b")
    assert out.dependence == "not judged" and "hit rates are unknown" in out.verdict
