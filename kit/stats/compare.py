"""Arm comparisons with honest intervals, run planning, and the method's rules enforced in code.

Why this module refuses things (docs/method.md#stitch): a published "2.67x fewer uncached tokens"
headline was two arms from two different runs divided by each other (a cross-run stitch), under
different cache warmth. So a ratio comes from batches that hold both arms; dividing arms that never
shared a batch raises :class:`StitchError` unless the caller asks for it, and then the row says
"cross-run stitch". Uncached tokens ride the provider's cache, so their rows always carry the observed
hit rates (docs/method.md#totals), and a claim that depends on the cache needs >= 3 batches plus a
non-isolated control (:func:`warmth_invariance`, docs/method.md#replication).

Intervals (docs/method.md#intervals): the default for one batch is ``skew-t``, a jackknife t-interval of
the log ratio of means (Welch degrees of freedom) moved by a shrunk skewness correction. The known-truth
study (``bench/known_truth.md``: lognormal, bimodal, heavy-tailed and batch-read-shaped runs, 5 to 20 runs
per arm, true ratios 1, 1.3 and 3) chose it: the only candidate whose coverage stayed within 93-97% in
every cell with >= 5 runs per arm; the old default (studentized bootstrap paired by run index) was 1.7x
wider at 5 runs of CV 0.5 and fell to 91% on heavy tails. Runs pair only when the design matched them
(``matched=True``: the same question in the same run of every arm, a pack's prompt bank); a run index
alone pairs nothing. Below ``MIN_RUNS`` runs per arm there is no interval; a bound beyond what any
resample of the runs can produce is flagged (and capped, unpaired). Across batches, a two-level bootstrap
resamples batches, then runs. Resampling intervals are seeded; degenerate data give the estimate with
NaN bounds and a note. Five runs cannot show a long path an arm did not take, and no interval can cover
what they do not show: a ratio whose interval rests on one arm's runs names that arm
(``interval_rests_on``) and says what such intervals covered in the study; so does a per-arm interval
from few runs.

Planning (docs/method.md#planning): :func:`plan` turns a coefficient of variation (stated, or measured
on a pilot batch) and a target precision or effect into runs per arm; :func:`should_continue` is the
run stage's stop rule.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypeGuard, get_args

import msgspec
import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.errors import InputError, KitError
from kit.experiment.design import ParamError
from kit.records import _ARM, field_doc

STITCH_LABEL = "cross-run stitch"
MIN_RUNS = 5  # below this many runs per arm there is no interval (docs/method.md#intervals)
WARN_RUNS = 10  # below this many the interval is honest but wide: the row's note says so
MIN_RESAMPLES = 1_000
MIN_BATCHES_FOR_CACHE_CLAIM = 3
# A warmth slope smaller than this (log ratio per unit hit rate: the ratio moves by less than 1.1x between a
# cold and a fully warm cache) is immaterial (docs/method.md#warmth).
MATERIAL_SLOPE = math.log(1.1)
DIFFERENCE_METRICS = frozenset({"grade"})  # bounded scores compare by difference, token counts by ratio
HEADLINE_METRICS = ("total_tokens", "uncached_input_tokens")
_CELLS_PER_CHUNK = 2_000_000  # bounds the memory of one vectorised resampling step (~16 MB of float64)
DEFAULT_METHOD = "skew-t"
ANALYTIC_METHODS = ("skew-t", "jackknife-t", "delta-t")
ScipyMethod = Literal["BCa", "percentile", "basic"]
SCIPY_METHODS: tuple[ScipyMethod, ...] = get_args(ScipyMethod)  # scipy.stats.bootstrap's, kept for comparison
METHODS = (*ANALYTIC_METHODS, "bootstrap-t", *SCIPY_METHODS)
MEAN_METHODS = ("log-t", "t", "BCa", "percentile")
# A bootstrap-t resample's standard error is floored at this share of the sample's (see _bootstrap_t).
SE_FLOOR = 0.2
# The stop rule's first look (runs per arm): the known-truth study's stop table. From 10, stopping on width
# covered 91.8% on the batch-read pack's arms (the fixed-n interval there covers 93% at 10 runs, 95% at 15).
STOP_FIRST_LOOK = 15
# A one-batch ratio whose log variance is this share or more from one arm rests on that arm's runs alone: its
# coverage is that arm's mean interval's, blind to long runs the arm did not draw (bench/known_truth.md).
ONE_ARM_SHARE = 0.9
ONE_ARM_RUNS = 20  # from this many runs per arm the study found such intervals in band (95% on the pack's arms)
ONE_ARM_NOTE = "on the batch-read pack's arms such intervals covered 87% at 5 runs per arm, 95% at 20"
# What a per-arm interval from fewer than WARN_RUNS runs cannot do (the study's per-arm table at 5 runs).
FEW_RUNS_MEAN_NOTE = (
    "blind to long runs the arm did not draw: at 5 runs such intervals covered 75% of a bimodal arm "
    "(a 4x longer path in 1 run of 4) and 81% of a heavy-tailed one (bench/known_truth.md)"
)
SKEW_SHRINK = 0.25  # share of the estimated skewness correction skew-t applies (see _skew_t)

Statistic = Callable[..., np.ndarray]
Bounds = tuple[np.ndarray, np.ndarray, np.ndarray]  # estimate, lower, upper on the statistic's scale


class StitchError(KitError, ValueError):
    """Two arms were compared across batches that never ran them together (docs/method.md#stitch)."""


# ---------------------------------------------------------------- records: what the public functions return


_doc = field_doc


# Meanings shared by several records' fields (and, through kit.cli.columns, by other tables' columns of the same name).
_BASELINE = _doc("the arm compared against", "id")
_METRIC = _doc("the trials-table column compared", "column name")
_LOWER = _doc("lower bound of the bootstrap interval", "as the estimate")
_UPPER = _doc("upper bound of the bootstrap interval", "as the estimate")
_CONFIDENCE = _doc("level of the interval (docs/method.md#intervals)", "fraction 0–1")
_METHOD = _doc("how the interval was computed", "text")
_NOTE = _doc("what a reader must know about the row (left-out data, degenerate intervals)", "text")


def _saving(stat: str) -> msgspec.Meta:
    return _doc(f"{stat} of the per-prompt savings `1 − arm/control`", "fraction")


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """Arm against baseline on one metric (:func:`ratio`): one ``analysis/ratios.csv`` row."""

    comparison: Annotated[str, _doc("`<arm> vs <baseline>`", "text")]
    arm: Annotated[str, _ARM]
    baseline: Annotated[str, _BASELINE]
    metric: Annotated[str, _METRIC]
    estimate: Annotated[
        float, _doc("mean of the arm / mean of the baseline (a difference of means for `grade`)", "ratio")
    ]
    lower: Annotated[float, _LOWER]
    upper: Annotated[float, _UPPER]
    confidence: Annotated[float, _CONFIDENCE]
    n_arm: Annotated[int, _doc("finished trials of the arm with a value", "count")]
    n_baseline: Annotated[int, _doc("finished trials of the baseline with a value", "count")]
    paired: Annotated[
        bool, _doc("trials were paired by (batch, run): only when the design matched runs (a prompt bank)", "boolean")
    ]
    batches: Annotated[int, _doc("batches the comparison used", "count")]
    method: Annotated[str, _METHOD]
    label: Annotated[
        str, _doc("`cross-run stitch` when the arms never shared a batch (docs/method.md#stitch), else empty", "text")
    ]
    small_n: Annotated[bool, _doc("fewer than 5 trials in an arm: no interval (docs/method.md#intervals)", "boolean")]
    resample_min: Annotated[
        float, _doc("smallest estimate any resample of one batch's runs can produce", "ratio (difference)")
    ]
    resample_max: Annotated[
        float, _doc("largest estimate any resample of one batch's runs can produce", "ratio (difference)")
    ]
    bound_beyond_data: Annotated[
        bool, _doc("the interval reached beyond resample_min–max (capped there unless runs were paired)", "boolean")
    ]
    interval_rests_on: Annotated[
        str,
        _doc(
            "the arm holding >= 90% of a one-batch ratio's variance below 20 runs per arm: the interval is that "
            "arm's mean interval, blind to long runs it did not draw (docs/method.md#intervals); empty otherwise",
            "text",
        ),
    ]
    hit_rate_arm: Annotated[float, _doc("observed cache hit rate of the arm's trials", "fraction 0–1")]
    hit_rate_baseline: Annotated[float, _doc("observed cache hit rate of the baseline's trials", "fraction 0–1")]
    simulated: Annotated[bool, _doc("any compared trial ran on the embedded provider", "boolean")]
    note: Annotated[str, _NOTE]


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """One arm's mean with its interval (:func:`mean_interval`); NaN bounds, an empty method and a note when none."""

    mean: Annotated[float, _doc("mean of the values", "as the values")]
    lower: Annotated[float, _LOWER]
    upper: Annotated[float, _UPPER]
    method: Annotated[str, _METHOD]
    note: Annotated[str, _NOTE]


class Savings(msgspec.Struct, frozen=True, kw_only=True):
    """Per-prompt savings of an arm over a control, summarised across prompts (:func:`per_prompt_savings`)."""

    arm: Annotated[str, _ARM]
    control: Annotated[str, _doc("the arm savings are measured against", "id")]
    n: Annotated[int, _doc("prompts with both arms and a non-zero control", "count")]
    median: Annotated[float, _saving("median")]
    mean: Annotated[float, _saving("mean")]
    min: Annotated[float, _saving("min")]
    max: Annotated[float, _saving("max")]
    stdev: Annotated[float, _saving("stdev")]
    lower: Annotated[float, _doc("lower bound of the interval on the mean saving", "fraction")]
    upper: Annotated[float, _doc("upper bound of the interval on the mean saving", "fraction")]
    confidence: Annotated[float, _CONFIDENCE]
    method: Annotated[str, _METHOD]
    per_prompt: Annotated[dict[str, float], _doc("saving per prompt (run index)", "mapping")]
    note: Annotated[str, _NOTE]


class WarmthInvariance(msgspec.Struct, frozen=True, kw_only=True, eq=False):  # a table field has no ==
    """Whether an arm's ratio to the baseline moves with cache warmth across batches (:func:`warmth_invariance`)."""

    arm: Annotated[str, _ARM]
    baseline: Annotated[str, _BASELINE]
    metric: Annotated[str, _METRIC]
    n_batches: Annotated[int, _doc("batches holding both arms", "count")]
    per_batch: Annotated[
        pd.DataFrame,
        _doc(
            "per batch holding both arms: the ratio, its log's jackknife variance (`log_ratio_var`), the hit rates "
            "(`hit_rate_arm`, `hit_rate_baseline`, `hit_rate` of both) and the runs (`n_arm`, `n_baseline`)",
            "table",
        ),
    ]
    slope: Annotated[
        float, _doc("change of the log ratio per unit hit rate across batches (random-effects fit)", "log ratio")
    ]
    slope_lower: Annotated[float, _doc("lower bound of the slope's interval", "log ratio")]
    slope_upper: Annotated[float, _doc("upper bound of the slope's interval", "log ratio")]
    dependence: Annotated[
        str,
        _doc("`dependent` (interval excludes 0), `invariant` (within ±log 1.1), `undetermined`, `not judged`", "text"),
    ]
    has_control: Annotated[bool, _doc("a non-isolated control ran in those batches", "boolean")]
    control_hit_rate: Annotated[float, _doc("hit rate of the control trials", "fraction 0–1")]
    isolated_hit_rate: Annotated[float, _doc("hit rate of the isolated trials of both arms", "fraction 0–1")]
    claim_ok: Annotated[bool, _doc("≥ 3 batches and a control: a cache-dependent claim may be made", "boolean")]
    reason: Annotated[str, _doc("why a claim may not be made", "text")]
    verdict: Annotated[str, _doc("the sentence the report prints", "text")]


def _ratio_stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)


def _difference_stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, frame.columns))}")


def _check_options(confidence: float) -> None:
    """Refuse a confidence outside (0, 1), naming the parameter (numpy would fail later, about quantiles)."""
    if not (isinstance(confidence, int | float) and 0 < confidence < 1):
        raise ParamError("confidence", f"got {confidence!r}", "a number strictly between 0 and 1, e.g. 0.95")


def _check_resamples(n_resamples: int) -> None:
    """Refuse fewer than ``MIN_RESAMPLES`` resamples where an interval resamples (a 2.5% tail of 200 is 5 values).

    Checked by the resampling methods themselves: the analytic default never reads ``n_resamples``.
    """
    if not (isinstance(n_resamples, int) and n_resamples >= MIN_RESAMPLES):
        raise ParamError("n_resamples", f"got {n_resamples!r}", f"an integer >= {MIN_RESAMPLES:,}")


def _check_values(values: pd.Series | np.ndarray, metric: str) -> None:
    """Refuse infinite values, and negative token counts: a bad parse, not data (NaN stays: usage unknown).

    Only token counts (``*tokens``, ``*uncached``) must be >= 0; other metrics (a residual) may go below zero.
    """
    x = np.asarray(values, dtype=float)
    counts = metric.endswith(("tokens", "uncached"))
    bad = np.isinf(x) | ((x < 0) if counts else False)
    if bad.any():
        shown = ", ".join(f"{v:g}" for v in x[bad][:3])
        accepted = "finite counts >= 0" if counts else "finite values"
        raise ParamError(metric, f"{int(bad.sum())} negative or infinite value(s) ({shown})", accepted)


def any_simulated(trials: pd.DataFrame) -> bool:
    """Whether any of these trials ran against the embedded (simulated) provider."""
    return bool(trials["simulated"].fillna(False).astype(bool).any()) if "simulated" in trials.columns else False


def _ok(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials that finished: failed trials are counted elsewhere, never averaged in."""
    return trials[trials["status"] == "ok"] if "status" in trials.columns else trials


def hit_rate(trials: pd.DataFrame) -> float:
    """Observed cache hit rate, sum(cache_read) / sum(input), over trials where both are known."""
    if not {"cache_read_tokens", "input_tokens"} <= set(trials.columns):
        return float("nan")
    known = trials[["cache_read_tokens", "input_tokens"]].dropna()
    total = float(known["input_tokens"].sum())
    return float(known["cache_read_tokens"].sum()) / total if total > 0 else float("nan")


# ---------------------------------------------------------------- interval methods
# Each works along the last axis and broadcasts over leading ones, so the known-truth study scores the
# very code the analyze stage runs, on thousands of simulated batches at once.


def _transform(log_ratio: bool) -> Callable[[np.ndarray], np.ndarray]:
    return np.log if log_ratio else (lambda m: m)


def _jackknife_var(x: np.ndarray, g: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Jackknife variance of g(mean(x)): leave one run out at a time.

    For the log of a mean it is larger than the delta method's exactly when one run dominates the mean
    (leaving it out moves the log mean a lot), which is the skewed case where the delta method undercovers.
    """
    n = x.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        loo = g((x.sum(axis=-1, keepdims=True) - x) / (n - 1))
    return (n - 1) / n * ((loo - loo.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)


def _welch_df(va: np.ndarray, vb: np.ndarray, na: int, nb: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))


def _t_bounds(theta: np.ndarray, se: np.ndarray, df: np.ndarray | float, confidence: float) -> Bounds:
    q = sps.t.ppf((1 + confidence) / 2, df)
    ok = np.isfinite(se) & (se > 0) & np.isfinite(q)
    lo = np.where(ok, theta - q * se, np.nan)
    hi = np.where(ok, theta + q * se, np.nan)
    return theta, lo, hi


def _jackknife_se(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool) -> Bounds:
    """The statistic, its jackknife standard error and degrees of freedom (Welch per arm; n - 1 per pair)."""
    g = _transform(log_ratio)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = g(a.mean(axis=-1)) - g(b.mean(axis=-1))
        if paired:
            n = a.shape[-1]
            loo = g((a.sum(-1, keepdims=True) - a) / (n - 1)) - g((b.sum(-1, keepdims=True) - b) / (n - 1))
            var = (n - 1) / n * ((loo - loo.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
            return theta, np.sqrt(var), np.full_like(theta, n - 1.0)
        va, vb = _jackknife_var(a, g), _jackknife_var(b, g)
        return theta, np.sqrt(va + vb), _welch_df(va, vb, a.shape[-1], b.shape[-1])


def _jackknife_t(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool, confidence: float, **_) -> Bounds:
    """t-interval with a jackknife standard error: per arm (Welch df), or per matched pair (n - 1 df)."""
    theta, se, df = _jackknife_se(a, b, paired=paired, log_ratio=log_ratio)
    return _t_bounds(theta, se, df, confidence)


def _estimate_and_se(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool) -> tuple[np.ndarray, np.ndarray]:
    """The statistic (log of the ratio of means, or difference of means) and its delta-method standard error.

    Per run, ``a_i/mean(a) - b_i/mean(b)`` when paired (so the covariance of the two arms counts), each
    arm's relative variance otherwise.
    """
    ma, mb = a.mean(axis=-1), b.mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if log_ratio:
            theta = np.log(ma) - np.log(mb)
            ua, ub = a / ma[..., None], b / mb[..., None]
        else:
            theta = ma - mb
            ua, ub = a, b
        if paired:
            se = np.std(ua - ub, axis=-1, ddof=1) / np.sqrt(a.shape[-1])
        else:
            se = np.sqrt(np.var(ua, axis=-1, ddof=1) / a.shape[-1] + np.var(ub, axis=-1, ddof=1) / b.shape[-1])
    return theta, se


def _delta_t(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool, confidence: float, **_) -> Bounds:
    """t-interval with the delta method's standard error (Welch df unpaired, n - 1 paired)."""
    theta, se = _estimate_and_se(a, b, paired=paired, log_ratio=log_ratio)
    if paired:
        return _t_bounds(theta, se, a.shape[-1] - 1, confidence)
    na, nb = a.shape[-1], b.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ua, ub = (a / a.mean(-1, keepdims=True), b / b.mean(-1, keepdims=True)) if log_ratio else (a, b)
        va, vb = ua.var(axis=-1, ddof=1) / na, ub.var(axis=-1, ddof=1) / nb
    return _t_bounds(theta, se, _welch_df(va, vb, na, nb), confidence)


def _bootstrap_t(
    a: np.ndarray,
    b: np.ndarray,
    *,
    paired: bool,
    log_ratio: bool,
    confidence: float,
    n_resamples: int,
    rng: np.random.Generator,
    **_,
) -> Bounds:
    """Studentized bootstrap: each resample's statistic divided by its own delta-method standard error.

    A resample built from a couple of near-identical runs has a standard error near zero and a huge t;
    such standard errors are floored at ``SE_FLOOR`` times the sample's. One set of resample indices
    serves every leading row (the rows are independent samples, so sharing the indices costs nothing).
    """
    _check_resamples(n_resamples)
    theta, se = _estimate_and_se(a, b, paired=paired, log_ratio=log_ratio)
    na, nb = a.shape[-1], b.shape[-1]
    rows = int(np.prod(a.shape[:-1], dtype=np.int64))
    chunk = max(1, _CELLS_PER_CHUNK // (max(na, nb) * max(rows, 1)))
    t_values = []
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        ia = rng.integers(0, na, size=(r, na))
        ib = ia if paired else rng.integers(0, nb, size=(r, nb))
        th, s = _estimate_and_se(a[..., ia], b[..., ib], paired=paired, log_ratio=log_ratio)
        with np.errstate(invalid="ignore"):
            t_values.append((th - theta[..., None]) / np.maximum(s, SE_FLOOR * se[..., None]))
    t_all = np.concatenate(t_values, axis=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t_low, t_high = np.nanquantile(t_all, [(1 - confidence) / 2, (1 + confidence) / 2], axis=-1)
    ok = np.isfinite(se) & (se > 0) & (np.ptp(np.nan_to_num(t_all), axis=-1) > 0)
    return theta, np.where(ok, theta - t_high * se, np.nan), np.where(ok, theta - t_low * se, np.nan)


def _skew_t(
    a: np.ndarray,
    b: np.ndarray,
    *,
    paired: bool,
    log_ratio: bool,
    confidence: float,
    skew_shrink: float = SKEW_SHRINK,
    **_,
) -> Bounds:
    """The jackknife t-interval moved toward the estimator's skew: Hall's Edgeworth correction, shrunk.

    When the two arms' runs are skewed differently (a near-constant arm against a long-tailed one), the
    log ratio's sampling distribution is skewed and a symmetric interval misses on one side. The
    second-order correction moves both bounds by ``gamma (2 q^2 + 1) / 6`` standard errors, gamma being the
    estimator's skewness (per-arm third moments of the runs relative to their mean, plus the log's own
    term). gamma from 5 runs is noisy, so it is shrunk by ``skew_shrink``; the known-truth grid chose
    ``SKEW_SHRINK`` (bench/known_truth.md): no correction (the jackknife-t) undercovered on the batch-read
    mixture at 5 runs, the full one undercovered at 5 lognormal CV 1.0 runs, half overcovered heavy tails;
    a quarter held 93-97% in every cell. The width is the jackknife-t's.
    """
    theta, se, df = _jackknife_se(a, b, paired=paired, log_ratio=log_ratio)
    na, nb = a.shape[-1], b.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ma, mb = a.mean(axis=-1, keepdims=True), b.mean(axis=-1, keepdims=True)
        ua, ub = ((a - ma) / ma, (b - mb) / mb) if log_ratio else (a - ma, b - mb)
        va, vb = ua.var(axis=-1, ddof=1) / na, ub.var(axis=-1, ddof=1) / nb
        if paired:
            k3 = ((ua - ub) ** 3).mean(axis=-1) / na**2
        else:
            k3 = (ua**3).mean(axis=-1) / na**2 - (ub**3).mean(axis=-1) / nb**2
        if log_ratio:
            k3 = k3 - 3 * (va**2 - vb**2)  # log(mean) is less right-skewed than the mean
        gamma = skew_shrink * k3 / (va + vb) ** 1.5
    q = sps.t.ppf((1 + confidence) / 2, df)
    shift = np.nan_to_num(gamma * (2 * q**2 + 1) / 6) * se
    _theta, lo, hi = _t_bounds(theta, se, df, confidence)
    return theta, lo + shift, hi + shift


_INTERVALS: dict[str, Callable[..., Bounds]] = {
    "skew-t": _skew_t,
    "jackknife-t": _jackknife_t,
    "delta-t": _delta_t,
    "bootstrap-t": _bootstrap_t,
}


def interval(
    a: np.ndarray,
    b: np.ndarray,
    *,
    method: str = DEFAULT_METHOD,
    paired: bool = False,
    log_ratio: bool = True,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator = 0,
    skew_shrink: float = SKEW_SHRINK,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval of mean(a)/mean(b) (``log_ratio``) or mean(a) - mean(b), row by row along the last axis.

    ``a`` and ``b`` may carry leading axes (many batches at once). Bounds are on the ratio's own scale;
    NaN where the data give nothing to estimate a spread from. ``skew_shrink`` is skew-t's (the study
    sweeps it).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    _, lo, hi = _INTERVALS[method](
        np.asarray(a, dtype=float),
        np.asarray(b, dtype=float),
        paired=paired,
        log_ratio=log_ratio,
        confidence=confidence,
        n_resamples=n_resamples,
        rng=rng,
        skew_shrink=skew_shrink,
    )
    return (np.exp(lo), np.exp(hi)) if log_ratio else (lo, hi)


def data_range(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest statistic any resample of the data can produce, along the last axis.

    Unpaired, a resample's mean lies between an arm's smallest and largest run, so the ratio lies
    between min(a)/max(b) and max(a)/min(b); paired, a ratio of sums of pairs lies between the smallest
    and largest per-pair ratio. A bound beyond this is the interval model's extrapolation, not the data's.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            per = a / b if log_ratio else a - b
            return np.min(per, axis=-1), np.max(per, axis=-1)
        if log_ratio:
            return a.min(axis=-1) / b.max(axis=-1), a.max(axis=-1) / b.min(axis=-1)
        return a.min(axis=-1) - b.max(axis=-1), a.max(axis=-1) - b.min(axis=-1)


def bounded(
    lo: np.ndarray | np.floating, hi: np.ndarray | np.floating, span: tuple[np.ndarray | float, np.ndarray | float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bounds capped at the data's range (:func:`data_range`), and where a cap applied.

    The known-truth study scores the capped interval: capping moved coverage by under half a point in
    every cell and removed bounds like the 76x of a batch whose runs allow at most 6.8x.
    """
    beyond = np.isfinite(lo) & ((lo < span[0] * (1 - 1e-12)) | (hi > span[1] * (1 + 1e-12)))
    return np.maximum(lo, span[0]), np.minimum(hi, span[1]), beyond


def _is_scipy_method(method: str) -> TypeGuard[ScipyMethod]:
    return method in SCIPY_METHODS


def _interval_scipy(
    samples: tuple[np.ndarray, ...],
    statistic: Statistic,
    *,
    paired: bool,
    confidence: float,
    n_resamples: int,
    seed: int,
    method: ScipyMethod,
) -> tuple[float, float]:
    """scipy's bootstrap, vectorised and chunked; NaN bounds when the bootstrap distribution degenerates."""
    _check_resamples(n_resamples)
    batch = max(1, min(n_resamples, _CELLS_PER_CHUNK // max(len(s) for s in samples)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap(
            samples,
            statistic,
            n_resamples=n_resamples,
            batch=batch,
            vectorized=True,
            paired=paired,
            confidence_level=confidence,
            method=method,
            rng=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if np.ptp(res.bootstrap_distribution) == 0 or not (np.isfinite(lo) and np.isfinite(hi)):
        return float("nan"), float("nan")
    return lo, hi


def two_level_means(
    groups: Sequence[Sequence[np.ndarray]], *, paired: bool, n_resamples: int, seed: int
) -> list[np.ndarray]:
    """Bootstrap replicates of each sample's pooled mean: resample batches, then runs within each batch.

    ``groups[k][j]`` holds sample ``j``'s values in batch ``k`` (sample 0 = arm, 1 = baseline). Batches
    are drawn with replacement, shared by all samples (a batch is the unit that holds both arms); runs
    are then drawn within each chosen batch, jointly across samples when ``paired`` (aligned arrays).
    Vectorised over resamples in chunks, so memory stays bounded for any size.
    """
    _check_resamples(n_resamples)
    k, n_samples = len(groups), len(groups[0])
    lens = np.array([[len(g[j]) for j in range(n_samples)] for g in groups], dtype=np.int64)
    if paired and not (lens == lens[:, :1]).all():
        raise InputError("two_level_means(paired=True): samples must have equal lengths in every batch")
    widths = lens.max(axis=0)
    padded = []
    for j in range(n_samples):
        block = np.zeros((k, widths[j]))
        for b, g in enumerate(groups):
            block[b, : lens[b, j]] = g[j]
        padded.append(block)
    rng = np.random.default_rng(seed)
    out = [np.empty(n_resamples) for _ in range(n_samples)]
    chunk = max(1, _CELLS_PER_CHUNK // (k * int(widths.max())))
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        pick = rng.integers(0, k, size=(r, k))
        shared = rng.random((r, k, widths[0])) if paired else None
        for j in range(n_samples):
            u = shared if paired else rng.random((r, k, widths[j]))
            chosen = lens[pick, j]
            idx = (u * chosen[..., None]).astype(np.int64)
            valid = np.arange(widths[j]) < chosen[..., None]
            values = padded[j][pick[..., None], idx]
            out[j][start : start + r] = np.where(valid, values, 0.0).sum(axis=(1, 2)) / chosen.sum(axis=1)
    return out


def _percentile(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = replicates[np.isfinite(replicates)]
    if len(finite) < len(replicates) or np.ptp(finite) == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(finite, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def mean_bounds(x: np.ndarray, method: str = "log-t", confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """One arm's interval along the last axis: ``log-t`` (t on the log of the mean, jackknife SE) or ``t``."""
    n = x.shape[-1]
    q = sps.t.ppf((1 + confidence) / 2, n - 1)
    m = x.mean(axis=-1)
    if method == "t":
        se = x.std(axis=-1, ddof=1) / math.sqrt(n)
        return m - q * se, m + q * se
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(_jackknife_var(x, np.log))
    ok = (m > 0) & np.isfinite(se)
    return np.where(ok, m * np.exp(-q * se), np.nan), np.where(ok, m * np.exp(q * se), np.nan)


def mean_interval(
    values: Sequence[float] | np.ndarray,
    batches: Sequence | None = None,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    method: str = "log-t",
) -> Interval:
    """Mean of one arm with an interval (two-level bootstrap when the values span several batches).

    ``log-t``, the default for token counts, is a t-interval on the log of the mean with a jackknife
    standard error: it stays positive and follows the right skew of token counts, and covered best of the
    per-arm candidates in the known-truth study. No method reaches 93% at 5 runs on heavy-tailed or bimodal
    arms: a quarter of five-run samples of the bimodal arm hold none of its long runs and look like a tight
    unimodal arm, so covering them would need intervals far wider than a tight arm's; below ``WARN_RUNS``
    the note says so. ``t`` suits values that can be negative (savings). No interval below ``MIN_RUNS`` values.
    """
    if method not in MEAN_METHODS:
        raise ParamError("method", f"got {method!r}", list(MEAN_METHODS))
    _check_options(confidence)
    x = np.asarray(values, dtype=float)
    keys = list(batches) if batches is not None else [None] * len(x)
    levels = list(dict.fromkeys(keys))
    nan = float("nan")
    if len(x) == 0:
        return Interval(mean=nan, lower=nan, upper=nan, method="", note="no values")
    mean = float(x.mean())
    if len(x) < MIN_RUNS or np.ptp(x) == 0:
        why = f"too few runs ({len(x)} < {MIN_RUNS})" if len(x) < MIN_RUNS else "zero variance"
        return Interval(mean=mean, lower=nan, upper=nan, method="", note=f"{why}: no interval")
    if len(levels) >= 2:
        groups = [[x[[i for i, key in enumerate(keys) if key == level]]] for level in levels]
        (reps,) = two_level_means(groups, paired=False, n_resamples=n_resamples, seed=seed)
        lo, hi = _percentile(reps, confidence)
        how = "two-level percentile bootstrap (batches, then runs)"
    elif method in ("log-t", "t"):
        lo, hi = (float(v) for v in mean_bounds(x, method, confidence))
        how = {"log-t": "t on the log mean (jackknife SE)", "t": "t-interval"}[method]
    elif _is_scipy_method(method):
        lo, hi = _interval_scipy(
            (x,), _mean_stat, paired=False, confidence=confidence, n_resamples=n_resamples, seed=seed, method=method
        )
        how = f"{method} bootstrap"
    else:
        raise AssertionError(f"mean: method {method!r} is in MEAN_METHODS but has no interval")
    notes = [] if np.isfinite(lo) else ["degenerate data: no interval"]
    if len(x) < WARN_RUNS:
        notes.append(f"only {len(x)} runs: a wide interval, {FEW_RUNS_MEAN_NOTE}")
    return Interval(mean=mean, lower=lo, upper=hi, method=how, note="; ".join(notes))


def _arm_rows(ok: pd.DataFrame, arm: str, metric: str) -> tuple[pd.DataFrame, int]:
    """The arm's finished trials with a value for ``metric``, and how many had none (usage unknown)."""
    rows = ok[ok["arm"] == arm]
    known = rows[rows[metric].notna()]
    return known, len(rows) - len(known)


def _runs_match(fa: pd.DataFrame, fb: pd.DataFrame, batches: Sequence) -> list[str]:
    """Why (batch, run) pairing is impossible, per batch; empty when every run appears once in each arm."""
    problems = []
    for batch in batches:
        ra = fa.loc[fa["batch"] == batch, "run"].tolist()
        rb = fb.loc[fb["batch"] == batch, "run"].tolist()
        if len(set(ra)) < len(ra) or len(set(rb)) < len(rb):
            problems.append(f"batch {batch}: a run appears twice in one arm")
        elif set(ra) != set(rb):
            only_a, only_b = sorted(set(ra) - set(rb)), sorted(set(rb) - set(ra))
            problems.append(f"batch {batch}: runs only in arm {only_a}, only in baseline {only_b}")
    return problems


def _paired_arrays(fa: pd.DataFrame, fb: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    a = fa.sort_values("run")[metric].to_numpy(dtype=float)
    b = fb.sort_values("run")[metric].to_numpy(dtype=float)
    return a, b


@dataclass
class _Selection:
    """The trials a comparison uses: both arms' rows from the batches it may draw on."""

    fa: pd.DataFrame
    fb: pd.DataFrame
    used: list
    label: str
    notes: list[str]


def _select_batches(ok: pd.DataFrame, metric: str, a: str, b: str, *, allow_stitch: bool) -> _Selection:
    """Batches holding both arms; arms that never shared one raise :class:`StitchError` unless allowed."""
    fa, missing_a = _arm_rows(ok, a, metric)
    fb, missing_b = _arm_rows(ok, b, metric)
    notes = [
        f"{m} finished trial(s) of {arm} have no {metric} (usage unknown)"
        for arm, m in ((a, missing_a), (b, missing_b))
        if m
    ]
    batches_a, batches_b = set(fa["batch"]), set(fb["batch"])
    shared = sorted(batches_a & batches_b)
    if shared:
        dropped = sorted((batches_a | batches_b) - set(shared))
        if dropped:
            notes.append(f"batches without both arms left out: {', '.join(map(str, dropped))}")
        return _Selection(fa[fa["batch"].isin(shared)], fb[fb["batch"].isin(shared)], shared, "", notes)
    if not fa.empty and not fb.empty:
        if not allow_stitch:
            raise StitchError(
                f"arm {a!r} ran in batch(es) {sorted(batches_a)} and baseline {b!r} in {sorted(batches_b)}: "
                "no batch holds both, so their ratio is a cross-run stitch under different cache warmth "
                "(docs/method.md#stitch); run them interleaved, or pass allow_stitch=True to label it"
            )
        return _Selection(fa, fb, sorted(batches_a | batches_b), STITCH_LABEL, notes)
    return _Selection(fa, fb, sorted(batches_a | batches_b), "", notes)


def _pairing(sel: _Selection, *, paired: bool | None, matched: bool) -> bool:
    """Whether to pair runs: only when the design matched them (the same question in the same run index).

    Independent runs of one prompt share nothing but their index, and pairing them widened the interval
    with no gain in coverage in the known-truth study. ``paired=True`` insists (and fails if runs do not
    line up one to one); ``paired=False`` never pairs; ``None`` pairs exactly when ``matched`` and the runs
    line up.
    """
    if sel.label:
        if paired:
            raise InputError("ratio(): a cross-run stitch cannot be paired (no batch holds both arms)")
        return False
    problems = _runs_match(sel.fa, sel.fb, sel.used)
    if paired and problems:
        raise InputError(f"ratio(paired=True): runs must match one to one in every batch; {'; '.join(problems)}")
    if paired is not None:
        return paired
    if matched and problems:
        sel.notes.append("runs do not pair one to one (failed or missing trials): unpaired interval")
    return matched and not problems


def _no_interval_reason(va: np.ndarray, vb: np.ndarray, metric: str, difference: bool, method: str) -> str:
    """Why the data cannot carry an interval, or '' when they can."""
    n = min(len(va), len(vb))
    if n < MIN_RUNS:
        return f"too few runs ({len(va)} and {len(vb)}; an interval needs >= {MIN_RUNS} per arm): no interval"
    if not difference and vb.mean() == 0:
        return f"baseline mean of {metric} is zero: no ratio"
    if np.ptp(va) == 0 and np.ptp(vb) == 0:
        return "zero variance in both arms: no interval"
    if not difference and method not in SCIPY_METHODS and (va.mean() <= 0 or vb.mean() <= 0):
        return f"the log ratio needs positive means of {metric}: no interval"
    return ""


def _two_level(sel: _Selection, metric: str, *, paired: bool, difference: bool, confidence: float, **opts) -> tuple:
    """Across batches: resample batches, then runs within each (percentile of the replicated statistic)."""
    groups = []
    for batch in sel.used:
        ga, gb = sel.fa[sel.fa["batch"] == batch], sel.fb[sel.fb["batch"] == batch]
        if paired:
            groups.append(_paired_arrays(ga, gb, metric))
        else:
            groups.append((ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)))
    reps_a, reps_b = two_level_means(groups, paired=paired, **opts)
    with np.errstate(divide="ignore", invalid="ignore"):
        combined = reps_a - reps_b if difference else reps_a / reps_b
    lower, upper = _percentile(combined, confidence)
    kind = "paired" if paired else "unpaired"
    return lower, upper, f"two-level {kind} percentile bootstrap (batches, then runs)"


def _one_batch(a: np.ndarray, b: np.ndarray, *, method: str, paired: bool, difference: bool, **opts) -> tuple:
    """One batch (or a labelled stitch): the chosen interval method on the pooled runs."""
    kind = "paired" if paired else "unpaired"
    if _is_scipy_method(method):
        statistic = _difference_stat if difference else _ratio_stat
        lower, upper = _interval_scipy((a, b), statistic, paired=paired, method=method, **opts)
        return lower, upper, f"{kind} {method} bootstrap"
    lo, hi = interval(a, b, method=method, paired=paired, log_ratio=not difference, **opts)
    return float(lo), float(hi), f"{kind} {method}" + ("" if difference else " (log ratio)")


def _capped(
    lower: float, upper: float, span: tuple, method: str, notes: list[str], *, cap: bool
) -> tuple[float, float, bool]:
    """The bounds, capped at the data's range (:func:`bounded`) when ``cap``; a note says so when they reach past it.

    Paired runs are flagged, not capped: their range is the smallest to largest per-pair ratio, which
    misses the truth whenever every pair falls on one side of it (1 in 16 at 5 pairs), and capping there
    cost 3 points of coverage on the study's matched design.
    """
    lo, hi, beyond = bounded(np.float64(lower), np.float64(upper), span)
    if beyond:
        notes.append(
            f"the {method} interval ({lower:.3g}-{upper:.3g}) reached beyond what any resample of these runs "
            f"can produce ({span[0]:.3g}-{span[1]:.3g})" + (": capped there" if cap else "")
        )
    return (float(lo), float(hi), True) if cap and beyond else (lower, upper, bool(beyond))


def _comparison_interval(
    sel: _Selection, va: np.ndarray, vb: np.ndarray, metric: str, *, method: str, paired: bool, difference: bool, **opts
) -> tuple[float, float, str, tuple[float, float], bool]:
    """(lower, upper, how, data range, capped): one batch's method, or two levels across batches; notes why not."""
    nan = float("nan")
    reason = _no_interval_reason(va, vb, metric, difference, method) if len(va) and len(vb) else "an arm is empty"
    if reason:
        sel.notes.append(reason)
        return nan, nan, "", (nan, nan), False
    span, beyond = (nan, nan), False
    if len(sel.used) >= 2 and not sel.label:
        lower, upper, how = _two_level(sel, metric, paired=paired, difference=difference, **opts)
    else:
        lower, upper, how = _one_batch(va, vb, method=method, paired=paired, difference=difference, **opts)
        low, high = data_range(va, vb, paired=paired, log_ratio=not difference)
        span = (float(low), float(high))
        lower, upper, beyond = _capped(lower, upper, span, method, sel.notes, cap=not paired)
    if not np.isfinite(lower):
        sel.notes.append("degenerate data: no interval")
    if min(len(va), len(vb)) < WARN_RUNS:
        sel.notes.append(f"fewer than {WARN_RUNS} runs per arm: a wide interval (see kit.stats.plan)")
    return lower, upper, how, span, beyond


def one_arm_share(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(share, arm index) along the last axis: the larger arm's share of the log ratio's jackknife variance.

    Index 0 is ``a``, 1 is ``b``. Near 1, one arm's runs set the whole interval, so a long run that arm
    did not draw goes unseen: the other arm cannot cancel it, as it does when both arms share a shape.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        va, vb = _jackknife_var(a, np.log), _jackknife_var(b, np.log)
        return np.maximum(va, vb) / (va + vb), (vb > va).astype(int)


def _rests_on(va: np.ndarray, vb: np.ndarray, a: str, b: str, sel: _Selection, *, unpaired_log: bool) -> str:
    """The arm a one-batch unpaired ratio's interval rests on (``ONE_ARM_SHARE``), below ``ONE_ARM_RUNS``; else ''.

    A note says what that costs: the study's coverage on the pack whose arms are shaped so (one
    near-constant, one with rare long runs), where no method can see a long run none of five runs drew.
    """
    n = min(len(va), len(vb))
    if not unpaired_log or n < MIN_RUNS or n >= ONE_ARM_RUNS or (len(sel.used) >= 2 and not sel.label):
        return ""
    share, which = (float(v) for v in one_arm_share(va, vb))
    if not share >= ONE_ARM_SHARE:
        return ""
    arm = (a, b)[int(which)]
    sel.notes.append(
        f"the interval rests on {arm}'s runs ({share:.0%} of its variance): it is only as good as {arm}'s mean "
        f"from {n} runs, blind to long runs {arm} did not draw; {ONE_ARM_NOTE} (bench/known_truth.md)"
    )
    return arm


def _checked(trials: pd.DataFrame, metric: str, a: str, b: str, method: str, confidence: float) -> pd.DataFrame:
    """The finished trials, once the columns, the method, the confidence, both arms and (for a ratio) the
    values are known good; each problem is a named error."""
    require_columns(trials, ["batch", "arm", "run", metric], "ratio()")
    if method not in METHODS:
        raise ParamError("method", f"got {method!r}", list(METHODS))
    _check_options(confidence)
    for name in (a, b):
        if not (trials["arm"] == name).any():
            raise InputError(
                f"ratio(): no trials of arm {name!r}; arms present: {sorted(trials['arm'].dropna().unique())}"
            )
    ok = _ok(trials)
    if metric not in DIFFERENCE_METRICS:
        _check_values(ok.loc[ok["arm"].isin([a, b]), metric], metric)
    return ok


def _point(va: np.ndarray, vb: np.ndarray, difference: bool) -> float:
    """mean(a) / mean(b), or mean(a) - mean(b) for a grade; NaN with no runs or a zero baseline (inf would
    read as a number)."""
    if not (len(va) and len(vb)):
        return float("nan")
    estimate = float((_difference_stat if difference else _ratio_stat)(va, vb))
    return estimate if np.isfinite(estimate) else float("nan")


def ratio(
    trials: pd.DataFrame, metric: str, a: str, b: str, *, confidence: float = 0.95, n_resamples: int = 10_000,
    seed: int = 0, allow_stitch: bool = False, paired: bool | None = None, matched: bool = False,
    method: str = DEFAULT_METHOD,
) -> Comparison:  # fmt: skip
    """Arm ``a`` against baseline ``b`` on ``metric``: mean(a) / mean(b) (a difference for grades), one
    ``analysis/ratios.csv`` row. Only batches that ran both arms count (else :class:`StitchError`, or with
    ``allow_stitch`` an unpaired "cross-run stitch"); runs pair only when ``matched`` or ``paired=True``;
    ``method`` is the one-batch interval (``METHODS``; across batches, two-level percentile), and a bound
    beyond any resample of the data is flagged (:func:`data_range`)."""
    ok = _checked(trials, metric, a, b, method, confidence)
    difference = metric in DIFFERENCE_METRICS
    sel = _select_batches(ok, metric, a, b, allow_stitch=allow_stitch)
    use_paired = _pairing(sel, paired=paired, matched=matched)
    va, vb = _paired_arrays(sel.fa, sel.fb, metric) if use_paired else (
        sel.fa[metric].to_numpy(dtype=float), sel.fb[metric].to_numpy(dtype=float)
    )  # fmt: skip
    estimate = _point(va, vb, difference)
    opts = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    lower, upper, how, span, beyond = _comparison_interval(
        sel, va, vb, metric, method=method, paired=use_paired, difference=difference, **opts
    )
    rests_on = _rests_on(va, vb, a, b, sel, unpaired_log=not (use_paired or difference)) if np.isfinite(lower) else ""
    return _row(
        sel, ok, metric, a, b,
        estimate=estimate, lower=lower, upper=upper, span=span, beyond=beyond, confidence=confidence,
        n=(len(va), len(vb)), paired=use_paired, how=how, difference=difference, rests_on=rests_on,
    )  # fmt: skip


def _row(sel: _Selection, ok: pd.DataFrame, metric: str, a: str, b: str, **f) -> Comparison:
    """The ``analysis/ratios.csv`` row: the figures plus the hit rates and notes a reader needs."""
    rows_a = ok[(ok["arm"] == a) & ok["batch"].isin(sel.used)]
    rows_b = ok[(ok["arm"] == b) & ok["batch"].isin(sel.used)]
    hr_a, hr_b = hit_rate(rows_a), hit_rate(rows_b)
    if metric == "uncached_input_tokens":
        sel.notes.append(
            f"cache-warmth sensitive: observed hit rate {hr_a:.1%} ({a}) vs {hr_b:.1%} ({b}); "
            "report next to total tokens, never blended"
        )
    how = f["how"]
    if f["difference"]:
        how = f"{how} (difference of means)" if how else "difference of means"
    n_arm, n_baseline = f["n"]
    return Comparison(
        comparison=f"{a} vs {b}",
        arm=a,
        baseline=b,
        metric=metric,
        estimate=f["estimate"],
        lower=f["lower"],
        upper=f["upper"],
        confidence=f["confidence"],
        n_arm=n_arm,
        n_baseline=n_baseline,
        paired=f["paired"],
        batches=len(sel.used),
        method=how,
        label=sel.label,
        small_n=min(n_arm, n_baseline) < MIN_RUNS,
        resample_min=f["span"][0],
        resample_max=f["span"][1],
        bound_beyond_data=f["beyond"],
        interval_rests_on=f["rests_on"],
        hit_rate_arm=hr_a,
        hit_rate_baseline=hr_b,
        simulated=any_simulated(pd.concat([rows_a, rows_b])),
        note="; ".join(sel.notes),
    )


def ratios(
    trials: pd.DataFrame,
    baseline: str,
    arms: Sequence[str],
    metrics: Sequence[str] = HEADLINE_METRICS,
    **options,
) -> pd.DataFrame:
    """``analysis/ratios.csv``: every arm against ``baseline`` on every metric, one row each.

    Total tokens and uncached input tokens always get their own rows (two separate figures, never one
    blended range: docs/method.md#totals); ``options`` go to :func:`ratio`.
    """
    wanted = list(dict.fromkeys([*HEADLINE_METRICS, *metrics]))
    rows = [
        msgspec.structs.asdict(ratio(trials, m, arm, baseline, **options))
        for arm in arms
        if arm != baseline
        for m in wanted
    ]
    return pd.DataFrame(rows)


def per_prompt_savings(
    values: pd.DataFrame,
    arm: str,
    control: str,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> Savings:
    """Savings of ``arm`` over ``control`` per prompt, ``1 - arm/control``, summarised across prompts.

    The three-arm design (docs/method.md#controls) compares a skill with a terse control (not with no
    prompt at all), so the skill is not credited with the generic effect. Replicates of a (prompt, arm)
    are averaged first; prompts lacking either arm, or with a zero control, are left out with a note.
    ``stdev`` is the sample standard deviation (``statistics.stdev``).
    """
    require_columns(values, ["prompt", "arm", "value"], "per_prompt_savings()")
    table = values.dropna(subset=["value"]).groupby(["prompt", "arm"], sort=False)["value"].mean().unstack("arm")
    for name in (arm, control):
        if name not in table.columns:
            raise InputError(f"per_prompt_savings(): no values for arm {name!r}; have {sorted(table.columns)}")
    both = table[[arm, control]].dropna()
    notes = []
    if len(both) < len(table):
        notes.append(f"{len(table) - len(both)} prompt(s) lack one of the two arms")
    zero = both[control] == 0
    if zero.any():
        notes.append(f"{int(zero.sum())} prompt(s) with a zero control left out")
        both = both[~zero]
    savings = 1 - both[arm] / both[control]
    s = savings.to_numpy(dtype=float)
    nan = float("nan")
    ci = mean_interval(s, confidence=confidence, n_resamples=n_resamples, seed=seed, method="t")
    if ci.note:
        notes.append(ci.note)
    return Savings(
        arm=arm,
        control=control,
        n=len(s),
        median=float(np.median(s)) if len(s) else nan,
        mean=ci.mean,
        min=float(s.min()) if len(s) else nan,
        max=float(s.max()) if len(s) else nan,
        stdev=statistics.stdev(s) if len(s) >= 2 else nan,
        lower=ci.lower,
        upper=ci.upper,
        confidence=confidence,
        method=ci.method,
        per_prompt={str(k): float(v) for k, v in savings.items()},
        note="; ".join(notes),
    )


def _batch_points(ok: pd.DataFrame, a: str, b: str, metric: str) -> list[dict]:
    """Per batch holding both arms: the ratio, its log's jackknife variance, and the hit rates."""
    rows = []
    for batch, group in ok.groupby("batch", sort=True):
        ga = group[(group["arm"] == a) & group[metric].notna()]
        gb = group[(group["arm"] == b) & group[metric].notna()]
        if ga.empty or gb.empty or gb[metric].mean() <= 0 or ga[metric].mean() <= 0:
            continue
        xa, xb = ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)
        var = _jackknife_var(xa, np.log) + _jackknife_var(xb, np.log) if min(len(xa), len(xb)) >= 2 else np.nan
        rows.append(
            {
                "batch": batch,
                "ratio": float(xa.mean() / xb.mean()),
                "log_ratio_var": float(var),
                "hit_rate_arm": hit_rate(ga),
                "hit_rate_baseline": hit_rate(gb),
                "hit_rate": hit_rate(pd.concat([ga, gb])),
                "n_arm": len(ga),
                "n_baseline": len(gb),
            }
        )
    return rows


def _warmth_slope(
    log_ratio: np.ndarray, hit: np.ndarray, var: np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Slope of the log ratio against the hit rate across batches, with its interval (random-effects regression).

    Each batch weighs by the inverse of its log ratio's variance (its own runs' spread) plus the
    between-batch variance the points show beyond that (DerSimonian-Laird's moment estimate, extended to a
    regression), and the interval is normal: with three batches a residual t would have one degree of
    freedom and could never resolve a slope, which is what made the old rank test blind at the kit's
    own three-batch threshold. A batch whose runs are identical has no within-batch variance; it is floored
    so it cannot take all the weight.
    """
    y, x = np.asarray(log_ratio, dtype=float), np.asarray(hit, dtype=float)
    v = np.nan_to_num(np.asarray(var, dtype=float), nan=0.0)
    v = np.maximum(v, 1e-6 * max(float(v.max()), 1e-6))
    design = np.column_stack([np.ones_like(x), x])

    def fit(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xtw = design.T * weights
        cov = np.linalg.inv(xtw @ design)
        beta = cov @ xtw @ y
        return beta, cov, y - design @ beta

    w = 1 / v
    beta, cov, resid = fit(w)
    q = float((w * resid**2).sum())
    hat = (design @ cov @ design.T) * w[None, :]
    trace = float(w.sum() - np.trace(hat * w[:, None]))
    tau2 = max(0.0, (q - (len(y) - 2)) / trace) if trace > 0 else 0.0
    beta, cov, _ = fit(1 / (v + tau2))
    se = math.sqrt(cov[1, 1])
    z = sps.norm.ppf((1 + confidence) / 2)
    return float(beta[1]), float(beta[1] - z * se), float(beta[1] + z * se)


def _warmth_verdict(rows: list[dict], slope: tuple[float, float, float], confidence: float) -> tuple[str, str]:
    """(dependence, sentence): dependent, invariant or undetermined, by the slope's interval (docs/method.md#warmth)."""
    if len(rows) < MIN_BATCHES_FOR_CACHE_CLAIM:
        return (
            "not judged",
            f"not enough batches to judge warmth dependence ({len(rows)} of {MIN_BATCHES_FOR_CACHE_CLAIM})",
        )
    ratios_ = np.array([r["ratio"] for r in rows])
    hits = np.array([r["hit_rate"] for r in rows])
    if not np.isfinite(slope[0]):
        return "not judged", "the hit rate did not vary across batches: no slope to estimate"
    est, lo, hi = (math.exp(s) for s in slope)
    span = (
        f"ratio {ratios_.min():.3g}-{ratios_.max():.3g} at hit rates {np.nanmin(hits):.1%}-{np.nanmax(hits):.1%} "
        f"over {len(rows)} batches; per 100% hit rate the ratio changes x{est:.2f} "
        f"({confidence:.0%} CI x{lo:.2f}-x{hi:.2f})"
    )
    material = f"x{math.exp(MATERIAL_SLOPE):.2f}"
    if slope[1] > 0 or slope[2] < 0:
        return "dependent", f"warmth-dependent: {span}; quote the uncached ratio with its hit rate"
    if slope[1] > -MATERIAL_SLOPE and slope[2] < MATERIAL_SLOPE:
        return "invariant", f"no material warmth dependence: {span}, within {material} either way"
    return "undetermined", (
        f"warmth dependence undetermined: {span} neither excludes no change nor rules out a material one "
        f"({material} per 100% hit rate); more batches over a wider hit-rate range would tell"
    )


def warmth_invariance(
    trials: pd.DataFrame, a: str, b: str, metric: str = "uncached_input_tokens", *, confidence: float = 0.95
) -> WarmthInvariance:
    """Does the ``a``/``b`` ratio move with cache warmth? The slope of per-batch log ratios on hit rates.

    Even an interleaved uncached ratio slides with warmth (docs/method.md#warmth), so a cache-dependent
    claim needs >= 3 batches (to see the slope; docs/method.md#replication) and a non-isolated control
    (``control`` True, to measure the contamination that isolation removed). ``dependence`` is
    ``dependent`` when the slope's interval excludes 0, ``invariant`` when it lies within +-``MATERIAL_SLOPE``,
    else ``undetermined``; ``claim_ok`` says whether batches and control suffice; ``reason`` says why not.
    """
    require_columns(trials, ["batch", "arm", metric], "warmth_invariance()")
    _check_options(confidence)
    ok = _ok(trials)
    rows = _batch_points(ok, a, b, metric)
    used = [r["batch"] for r in rows]
    controls = ok[ok["control"].fillna(False).astype(bool) & ok["batch"].isin(used)] if "control" in ok else ok.iloc[:0]
    isolated = ok[ok["arm"].isin([a, b]) & ok["batch"].isin(used)]
    if "control" in isolated:
        isolated = isolated[~isolated["control"].fillna(False).astype(bool)]
    reasons = []
    if len(rows) < MIN_BATCHES_FOR_CACHE_CLAIM:
        reasons.append(
            f"{len(rows)} batch(es) hold both arms; a cache-dependent claim needs >= {MIN_BATCHES_FOR_CACHE_CLAIM}"
        )
    if controls.empty:
        reasons.append("no non-isolated control arm (control=True) in those batches")
    nan = float("nan")
    slope = (nan, nan, nan)
    points = [r for r in rows if np.isfinite(r["hit_rate"])]
    if len(points) >= MIN_BATCHES_FOR_CACHE_CLAIM and np.ptp([r["hit_rate"] for r in points]) > 0:
        slope = _warmth_slope(
            np.log([r["ratio"] for r in points]),
            np.array([r["hit_rate"] for r in points]),
            np.array([r["log_ratio_var"] for r in points]),
            confidence,
        )
    dependence, verdict = _warmth_verdict(rows, slope, confidence)
    if reasons:
        verdict = f"{verdict}; not a cache-dependent claim: {'; '.join(reasons)}"
    return WarmthInvariance(
        arm=a,
        baseline=b,
        metric=metric,
        n_batches=len(rows),
        per_batch=pd.DataFrame(rows),
        slope=slope[0],
        slope_lower=slope[1],
        slope_upper=slope[2],
        dependence=dependence,
        has_control=not controls.empty,
        control_hit_rate=hit_rate(controls),
        isolated_hit_rate=hit_rate(isolated),
        claim_ok=not reasons,
        reason="; ".join(reasons),
        verdict=verdict,
    )


# ---------------------------------------------------------------- planning and stopping (docs/method.md#planning)


@dataclass(frozen=True)
class Plan:
    """Runs per arm a batch needs to reach a target, and what the answer rests on."""

    runs_per_arm: int
    target: str  # "precision" (an interval's upper/lower) or "effect" (a ratio to tell from 1)
    precision: float | None
    effect: float | None
    cv_arm: float
    cv_baseline: float
    assurance: float
    confidence: float
    source: str

    @property
    def plus_minus(self) -> float:
        """The precision as a symmetric factor: upper/lower 1.5 is the estimate x/÷ 1.22."""
        return math.sqrt(self.precision) if self.precision else float("nan")

    def sentence(self) -> str:
        """'to resolve a ratio to ×/÷1.22 you need about 46 runs per arm (…)'."""
        if self.target == "precision":
            ci = f"{self.confidence:.0%} CI upper/lower {self.precision:g}"
            goal = f"to resolve a ratio to x/÷{self.plus_minus:.2f} ({ci})"
        else:
            goal = f"to tell a ratio of {self.effect:.2f} from no difference ({self.confidence:.0%} CI excluding 1)"
        return (
            f"{goal} you need about {self.runs_per_arm} runs per arm "
            f"(CV {self.cv_arm:.2f} and {self.cv_baseline:.2f}, {self.source}; {self.assurance:.0%} assurance)"
        )


def _pilot_cvs(pilot: pd.DataFrame, arm: str | None, baseline: str | None, metric: str) -> tuple[float, float, str]:
    """Each arm's coefficient of variation of ``metric`` in a pilot batch's finished trials."""
    require_columns(pilot, ["arm", metric], "plan(pilot)")
    ok = _ok(pilot)
    names = list(dict.fromkeys(ok["arm"]))
    if arm is None or baseline is None:
        if len(names) != 2:
            raise ParamError("arm", f"the pilot has arms {names}; name the two to compare", "arm= and baseline=")
        baseline, arm = names if baseline is None and arm is None else (baseline or names[0], arm or names[1])
    cvs = []
    for name in (arm, baseline):
        x = ok.loc[ok["arm"] == name, metric].dropna().to_numpy(dtype=float)
        if len(x) < 2 or x.mean() <= 0:
            raise ParamError(
                "pilot", f"arm {name!r} has {len(x)} usable runs of {metric}", ">= 2 runs with a positive mean"
            )
        cvs.append(float(x.std(ddof=1) / x.mean()))
    n = int((ok["arm"] == baseline).sum())
    return cvs[0], cvs[1], f"from a pilot of {n} runs per arm"


def _runs_needed(
    cva: float, cvb: float, *, precision: float | None, effect: float | None, assurance: float, confidence: float
) -> int:
    """Smallest n >= MIN_RUNS per arm meeting the target under the default interval's normal-theory model.

    The log ratio's standard error is sqrt((cv_a^2 + cv_b^2) / n) with Welch df; for a precision target the
    estimated standard error is taken at its ``assurance`` quantile (chi-square), for an effect the estimate
    must clear the interval's half-width with probability ``assurance``.
    """
    n = np.arange(MIN_RUNS, 100_001, dtype=float)
    var = cva**2 + cvb**2
    df = (n - 1) * var**2 / (cva**4 + cvb**4)
    q = sps.t.ppf((1 + confidence) / 2, df)
    se = np.sqrt(var / n)
    if precision is not None:
        spread = np.sqrt(sps.chi2.ppf(assurance, df) / df)
        ok = 2 * q * se * spread <= math.log(precision)
    elif effect is not None:
        ok = (q + sps.norm.ppf(assurance)) * se <= abs(math.log(effect))
    else:
        raise InputError("_runs_needed: give precision or effect")
    if not ok.any():
        raise ParamError(
            "precision" if precision is not None else "effect",
            "needs more than 100,000 runs per arm",
            "a looser target",
        )
    return int(n[np.argmax(ok)])


def plan(
    cv: float | tuple[float, float] | None = None,
    *,
    precision: float | None = None,
    effect: float | None = None,
    pilot: pd.DataFrame | None = None,
    arm: str | None = None,
    baseline: str | None = None,
    metric: str = "total_tokens",
    assurance: float = 0.5,
    confidence: float = 0.95,
) -> Plan:
    """Runs per arm needed for an interval of upper/lower ``precision``, or to tell ``effect`` from 1.

    The spread comes from ``cv`` (one value for both arms, or (arm, baseline)) or from a ``pilot`` trials
    table. ``assurance`` is the probability of reaching the target (0.5: the median batch reaches it).
    Validated against simulation in the known-truth study (``bench/known_truth.md#planner``).
    """
    _check_options(confidence)
    if not 0 < assurance < 1:
        raise ParamError("assurance", f"got {assurance!r}", "a probability strictly between 0 and 1, e.g. 0.5 or 0.8")
    if (precision is None) == (effect is None):
        raise ParamError("precision/effect", "give exactly one target", "precision=1.5 (upper/lower) or effect=0.8")
    if precision is not None and not precision > 1:
        raise ParamError("precision", f"got {precision!r}", "an upper/lower ratio > 1, e.g. 1.5")
    if effect is not None and not (effect > 0 and effect != 1):
        raise ParamError("effect", f"got {effect!r}", "a ratio > 0 other than 1, e.g. 0.8 or 1.3")
    if pilot is not None:
        cva, cvb, source = _pilot_cvs(pilot, arm, baseline, metric)
    elif cv is not None:
        cva, cvb = (cv, cv) if isinstance(cv, int | float) else (float(cv[0]), float(cv[1]))
        source = "stated"
    else:
        raise ParamError("cv", "neither a cv nor a pilot", "cv=0.5 or pilot=<trials table>")
    if not (cva > 0 and cvb > 0 and math.isfinite(cva + cvb)):
        raise ParamError("cv", f"got {cva!r}, {cvb!r}", "positive coefficients of variation")
    n = _runs_needed(cva, cvb, precision=precision, effect=effect, assurance=assurance, confidence=confidence)
    return Plan(n, "precision" if precision else "effect", precision, effect, cva, cvb, assurance, confidence, source)


def plan_for_params(params: Mapping, *, cv: float = 0.5, precision: float = 1.5, assurance: float = 0.5) -> str:
    """The run notebook's line before a batch starts: the runs a ratio needs at a stated CV, against the plan."""
    p = plan(cv, precision=precision, assurance=assurance)
    planned = int(params["runs_per_arm"])
    verdict = "enough" if planned >= p.runs_per_arm else f"expect an interval wider than upper/lower {precision:g}"
    return f"{p.sentence()}; this batch plans {planned} runs per arm ({verdict})."


@dataclass(frozen=True)
class StopDecision:
    """The run stage's answer after a block: add another balanced block, or stop (and why)."""

    add_block: bool
    reason: str
    runs_per_arm: int
    lower: float
    upper: float


def look_confidence(look: int, confidence: float = 0.95) -> float:
    """Confidence of the interval at look ``look`` (1, 2, …) for an anytime-valid 'excludes 1' stop.

    The miss probability alpha is spent as alpha * 6 / (pi^2 k^2) at look k; these sum to alpha, so by the
    union bound the intervals hold the truth at every look at once with probability >= ``confidence``:
    stopping whenever one excludes 1 keeps the error rate (a confidence sequence by Bonferroni).
    """
    return 1 - (1 - confidence) * 6 / (math.pi**2 * look**2)


def should_continue(
    trials: pd.DataFrame,
    arm: str,
    baseline: str,
    stop: Mapping,
    *,
    metric: str = "total_tokens",
    confidence: float = 0.95,
    matched: bool = False,
) -> StopDecision:
    """Should the run stage add another balanced block (one run per arm)? ``stop`` holds the rule.

    ``stop``: ``max_runs_per_arm`` (required), ``precision`` (stop once the fixed-n interval's
    upper/lower is at most this) and/or ``exclude_one`` (stop once the anytime-valid interval of
    :func:`look_confidence` excludes 1); looks start at ``min_runs_per_arm`` (default ``STOP_FIRST_LOOK``).
    Stopping on "excludes 1" with the fixed-n interval would inflate false claims; stopping on width
    picks batches whose spread happened to look small, which undercovered from 5 runs per arm and, on the
    batch-read pack's arms (a long-tailed arm against a near-constant one), from 10; from 15 every stop row
    of the known-truth study holds >= 93%.
    """
    known = {"precision", "exclude_one", "max_runs_per_arm", "min_runs_per_arm"}
    if set(stop) - known or "max_runs_per_arm" not in stop or not ({"precision", "exclude_one"} & set(stop)):
        raise ParamError(
            "stop", f"got {dict(stop)!r}", "{max_runs_per_arm: N, precision: 1.5 and/or exclude_one: true}"
        )
    first = max(int(stop.get("min_runs_per_arm", STOP_FIRST_LOOK)), MIN_RUNS)
    ok = _ok(trials)
    n = int(min((ok["arm"] == arm).sum(), (ok["arm"] == baseline).sum()))
    nan = float("nan")
    if n < first:
        return StopDecision(True, f"{n} runs per arm; the rule looks from {first}", n, nan, nan)
    decision = _stop_reason(trials, arm, baseline, stop, n - first + 1, metric, confidence, matched)
    if decision is not None:
        return StopDecision(False, decision[0], n, decision[1], decision[2])
    row = ratio(trials, metric, arm, baseline, confidence=confidence, matched=matched)
    if n >= int(stop["max_runs_per_arm"]):
        return StopDecision(False, f"max_runs_per_arm {stop['max_runs_per_arm']} reached", n, row.lower, row.upper)
    return StopDecision(True, "target not reached", n, row.lower, row.upper)


def _stop_reason(
    trials: pd.DataFrame,
    arm: str,
    baseline: str,
    stop: Mapping,
    look: int,
    metric: str,
    confidence: float,
    matched: bool,
) -> tuple[str, float, float] | None:
    """(why, lower, upper) when a stop target is met at this look, else None."""
    if stop.get("precision"):
        row = ratio(trials, metric, arm, baseline, confidence=confidence, matched=matched)
        if np.isfinite(row.lower) and row.upper / row.lower <= float(stop["precision"]):
            return f"precision reached: upper/lower {row.upper / row.lower:.2f}", row.lower, row.upper
    if stop.get("exclude_one"):
        level = look_confidence(look, confidence)
        row = ratio(trials, metric, arm, baseline, confidence=level, matched=matched)
        if row.lower > 1 or row.upper < 1:
            return f"anytime-valid {level:.2%} interval excludes 1 at look {look}", row.lower, row.upper
    return None
