"""Arm comparisons with honest intervals, run planning, and the method's rules enforced in code.

Why this package refuses things (docs/method.md#stitch): a published "2.67x fewer uncached tokens"
headline was two arms from two different runs divided by each other (a cross-run stitch), under
different cache warmth. So a ratio comes from batches that hold both arms; dividing arms that never
shared a batch raises :class:`StitchError` unless the caller asks for it, and then the row says
"cross-run stitch". Uncached tokens ride the provider's cache, so their rows always carry the observed
hit rates (docs/method.md#totals), and a claim that depends on the cache needs >= 3 batches plus a
non-isolated control (:func:`warmth_invariance`, docs/method.md#replication).

Intervals (docs/method.md#intervals): the default for one batch is ``skew-t``, a jackknife t-interval of the
log ratio of means (Welch degrees of freedom) moved by a shrunk skewness correction. The known-truth study
(``bench/known_truth.md``) chose it: the only candidate in band in every cell with >= 5 runs per arm, and
narrower than the studentized bootstrap it replaced (the coverages and widths: docs/method.md#intervals).
Runs pair only when the design matched them (``matched=True``: the same question in the same run of every
arm, a pack's prompt bank); a run index alone pairs nothing. Below ``MIN_RUNS`` runs per arm there is no
interval; a bound beyond what any resample of the runs can produce is flagged (and capped, unpaired). Across
batches, a t-interval over the batches' means (batches - 1 df) takes their own scatter. Resampling intervals are
seeded; degenerate data give the estimate with NaN bounds and a note. Five runs cannot show a long path an arm did
not take, and no interval can cover what they do not show: a ratio of arms of different shape names the noisier
arm (``interval_rests_on``) and says what such intervals covered in the study; so does a per-arm interval
from few runs.

Planning (docs/method.md#planning): :func:`plan` turns a coefficient of variation (stated, or measured
on a pilot batch) and a target precision or effect into runs per arm; :func:`should_continue` is the
run stage's stop rule.

The package, floor by floor (each module imports only those before it): ``records`` (what the functions
return, the required columns, :func:`finished`), ``intervals`` (the interval methods), ``compare``
(:func:`ratio`, :func:`ratios`, :func:`per_prompt_savings`), ``warmth`` (:func:`warmth_invariance`) and
``planning`` (:func:`plan`, :func:`should_continue`), ``coverage`` (:func:`study_coverage`: what the known-truth
study measured for a batch's case, printed beside its interval), ``quality`` (:func:`quality_gate`, the
non-inferiority test of the grade, docs/method.md#grading) and ``family`` (:func:`holm`, the decisive comparisons
judged together, docs/method.md#family). Import from ``kit.stats``: these names are its surface.
"""

from __future__ import annotations

from kit.stats.compare import (
    DIFFERENCE_METRICS,
    HEADLINE_METRICS,
    ONE_ARM_NOTE,
    STITCH_LABEL,
    any_simulated,
    hit_rate,
    per_prompt_savings,
    ratio,
    ratios,
)
from kit.stats.coverage import SPREAD_RATIO, STUDY_COVERAGE, StudyCoverage, spread_ratio, study_coverage
from kit.stats.family import holm
from kit.stats.intervals import (
    ANALYTIC_METHODS,
    DEFAULT_MEAN_METHOD,
    DEFAULT_METHOD,
    FEW_RUNS_MEAN_NOTE,
    MEAN_CV_FLOOR,
    MEAN_METHODS,
    METHODS,
    MIN_RESAMPLES,
    MIN_RUNS,
    SCIPY_METHODS,
    SE_FLOOR,
    SKEW_SHRINK,
    WARN_RUNS,
    BatchMeans,
    Bounds,
    MeanCoverage,
    ScipyMethod,
    Statistic,
    bounded,
    data_range,
    interval,
    mean_bounds,
    mean_interval,
    mean_shape,
    two_level_interval,
    two_level_means,
)
from kit.stats.planning import (
    PILOT_CV_BOUND,
    STOP_FIRST_LOOK,
    STOP_METRIC,
    STOP_MISS_SHARE,
    look_confidence,
    plan,
    plan_for_params,
    should_continue,
    stop_confidence,
)
from kit.stats.quality import QUALITY_MARGIN, quality_gate
from kit.stats.records import (
    Comparison,
    Interval,
    Plan,
    QualityGate,
    Savings,
    StitchError,
    StopDecision,
    WarmthInvariance,
    finished,
    require_columns,
)
from kit.stats.warmth import (
    MATERIAL_SLOPE,
    MIN_BATCHES_FOR_CACHE_CLAIM,
    SLOPE_UNIT,
    WarmthSlope,
    batches_to_tell,
    dependence_of,
    warmth_invariance,
    warmth_slope,
)

__all__ = [
    "ANALYTIC_METHODS",
    "DEFAULT_MEAN_METHOD",
    "DEFAULT_METHOD",
    "DIFFERENCE_METRICS",
    "FEW_RUNS_MEAN_NOTE",
    "HEADLINE_METRICS",
    "MATERIAL_SLOPE",
    "MEAN_CV_FLOOR",
    "MEAN_METHODS",
    "METHODS",
    "MIN_BATCHES_FOR_CACHE_CLAIM",
    "MIN_RESAMPLES",
    "MIN_RUNS",
    "ONE_ARM_NOTE",
    "PILOT_CV_BOUND",
    "QUALITY_MARGIN",
    "SCIPY_METHODS",
    "SE_FLOOR",
    "SKEW_SHRINK",
    "SLOPE_UNIT",
    "SPREAD_RATIO",
    "STITCH_LABEL",
    "STOP_FIRST_LOOK",
    "STOP_METRIC",
    "STOP_MISS_SHARE",
    "STUDY_COVERAGE",
    "WARN_RUNS",
    "BatchMeans",
    "Bounds",
    "Comparison",
    "Interval",
    "MeanCoverage",
    "Plan",
    "QualityGate",
    "Savings",
    "ScipyMethod",
    "Statistic",
    "StitchError",
    "StopDecision",
    "StudyCoverage",
    "WarmthInvariance",
    "WarmthSlope",
    "any_simulated",
    "batches_to_tell",
    "bounded",
    "data_range",
    "dependence_of",
    "finished",
    "hit_rate",
    "holm",
    "interval",
    "look_confidence",
    "mean_bounds",
    "mean_interval",
    "mean_shape",
    "per_prompt_savings",
    "plan",
    "plan_for_params",
    "quality_gate",
    "ratio",
    "ratios",
    "require_columns",
    "should_continue",
    "spread_ratio",
    "stop_confidence",
    "study_coverage",
    "two_level_interval",
    "two_level_means",
    "warmth_invariance",
    "warmth_slope",
]
