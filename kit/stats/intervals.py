"""The interval methods and the intervals built from them (docs/method.md#intervals).

Each method works along the last axis and broadcasts over leading ones, so the known-truth study
(``bench/known_truth.py``) scores the very code the analyze stage runs, on thousands of simulated batches at
once. :func:`interval` is one batch's ratio (or difference) of means; :func:`mean_interval` one arm's mean;
:func:`two_level_interval` the t-interval across batches; :func:`data_range` and :func:`bounded` what any
resample of the data can produce.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, TypeGuard, get_args

import numpy as np
from scipy import stats as sps

from kit.errors import InputError
from kit.experiment.design import ParamError
from kit.stats.records import Interval

MIN_RUNS = 5  # below this many runs per arm there is no interval (docs/method.md#intervals)
WARN_RUNS = 10  # below this many the interval is honest but wide: the row's note says so
MIN_RESAMPLES = 1_000
_CELLS_PER_CHUNK = 2_000_000  # bounds the memory of one vectorised resampling step (~16 MB of float64)
DEFAULT_METHOD = "skew-t"
ANALYTIC_METHODS = ("skew-t", "jackknife-t", "delta-t")
ScipyMethod = Literal["BCa", "percentile", "basic"]
SCIPY_METHODS: tuple[ScipyMethod, ...] = get_args(ScipyMethod)  # scipy.stats.bootstrap's, kept for comparison
METHODS = (*ANALYTIC_METHODS, "bootstrap-t", *SCIPY_METHODS)
MEAN_METHODS = ("bootstrap-t", "log-t", "t", "BCa", "percentile")
DEFAULT_MEAN_METHOD = "log-t"  # the known-truth per-arm table's choice (bench/known_truth.md#per-arm-intervals)
# A bootstrap-t resample's standard error is floored at this share of the sample's (see _bootstrap_t).
SE_FLOOR = 0.2
# The per-run CV below which a per-arm interval does not trust the runs' own spread (see mean_bounds): the
# smallest of 0.02 / 0.05 / 0.1 that held the batch-read pack's batching arm >= 93% at 5, 10 and 20 runs.
MEAN_CV_FLOOR = 0.05
MEAN_GOOD = 0.93  # a shape class whose intervals covered less in the study gets a note quoting the coverage
# What no per-arm interval from a few runs can see, the head of the coverage note (see _coverage_note).
FEW_RUNS_MEAN_NOTE = "blind to long runs the arm did not draw"
# Shape classes of one arm's runs, from the runs themselves (mean_shape): CV below MEAN_CV_FLOOR, else
# sample skewness below / between / above MEAN_SKEW_BANDS.
MEAN_SHAPES = ("near-constant", "near-symmetric", "skewed", "long-tailed")
MEAN_SKEW_BANDS = (1.0, 2.0)
SKEW_SHRINK = 0.25  # share of the estimated skewness correction skew-t applies (see _skew_t)

Statistic = Callable[..., np.ndarray]
Bounds = tuple[np.ndarray, np.ndarray, np.ndarray]  # estimate, lower, upper on the statistic's scale


def _mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def check_confidence(confidence: float) -> None:
    """Refuse a confidence outside (0, 1), naming the parameter (numpy would fail later, about quantiles).

    Any real number qualifies, numpy scalars too (``np.float32(0.9)``); a bool does not.
    """
    if isinstance(confidence, bool) or not (isinstance(confidence, numbers.Real) and 0 < confidence < 1):
        raise ParamError("confidence", f"got {confidence!r}", "a number strictly between 0 and 1, e.g. 0.95")


def _check_resamples(n_resamples: int) -> None:
    """Refuse fewer than ``MIN_RESAMPLES`` resamples where an interval resamples (a 2.5% tail of 200 is 5 values).

    Checked by the resampling methods themselves: the analytic default never reads ``n_resamples``.
    """
    whole = isinstance(n_resamples, numbers.Integral) and not isinstance(n_resamples, bool)
    if not (whole and n_resamples >= MIN_RESAMPLES):
        raise ParamError("n_resamples", f"got {n_resamples!r}", f"an integer >= {MIN_RESAMPLES:,}")


def _transform(log_ratio: bool) -> Callable[[np.ndarray], np.ndarray]:
    return np.log if log_ratio else (lambda m: m)


def jackknife_var(x: np.ndarray, g: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
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
        va, vb = jackknife_var(a, g), jackknife_var(b, g)
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


def is_scipy_method(method: str) -> TypeGuard[ScipyMethod]:
    """Whether ``method`` is one of scipy.stats.bootstrap's (``SCIPY_METHODS``), run by :func:`interval_scipy`."""
    return method in SCIPY_METHODS


def interval_scipy(
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


class BatchMeans(NamedTuple):
    """Each sample's mean pooled over all its runs, and their covariance estimated from the batches' spread."""

    means: np.ndarray  # (samples,)
    cov: np.ndarray  # (samples, samples)
    df: int  # batches - 1: what the spread between that many batches can tell


def two_level_means(groups: Sequence[Sequence[np.ndarray]]) -> BatchMeans:
    """Each sample's pooled mean and the covariance of those means over batches (runs nested in batches).

    ``groups[k][j]`` holds sample ``j``'s values in batch ``k`` (sample 0 = arm, 1 = baseline). A batch is
    the unit that varies (its salt, its hour, its warmth), so the covariance comes from how the batches'
    totals scatter around the pooled means (the cluster-robust linearisation of a ratio-of-totals mean, scaled
    by batches / (batches - 1)); each batch's total already carries its runs' noise. The bootstrap it replaced
    resampled batches and then runs within them, counting the runs' noise twice: its intervals over 5 batches
    of 5 runs covered 0.99.
    """
    k = len(groups)
    sums = np.array([[float(np.sum(v)) for v in g] for g in groups])
    counts = np.array([[len(v) for v in g] for g in groups], dtype=float)
    means = sums.sum(axis=0) / counts.sum(axis=0)
    z = (sums - means * counts) / counts.sum(axis=0)
    return BatchMeans(means=means, cov=k / (k - 1) * z.T @ z, df=k - 1)


def two_level_interval(
    groups: Sequence[Sequence[np.ndarray]], *, confidence: float, log: bool = True
) -> tuple[float, float]:
    """A t-interval with batches - 1 degrees of freedom: of one sample's pooled mean, or of the first sample's
    over the second's (ratio when ``log``, else difference), from :func:`two_level_means`.

    ``log`` puts the interval on the log scale (a mean or ratio of token counts stays positive and follows
    their right skew). NaN bounds when the batches do not vary (nothing to estimate the spread from) or a
    logged mean is not positive.
    """
    fit = two_level_means(groups)
    m, cov = fit.means, fit.cov
    nan = float("nan")
    if log and not (m > 0).all():
        return nan, nan
    if len(m) == 1:
        grad, theta = np.array([1 / m[0] if log else 1.0]), math.log(m[0]) if log else m[0]
    else:
        grad = np.array([1 / m[0], -1 / m[1]]) if log else np.array([1.0, -1.0])
        theta = math.log(m[0] / m[1]) if log else m[0] - m[1]
    var = float(grad @ cov[: len(grad), : len(grad)] @ grad)
    if not var > 1e-12 * float(grad**2 @ np.diag(cov)[: len(grad)]):  # rounding, not spread: nothing varies
        return nan, nan
    half = float(sps.t.ppf((1 + confidence) / 2, fit.df)) * math.sqrt(var)
    lo, hi = float(theta - half), float(theta + half)
    return (math.exp(lo), math.exp(hi)) if log else (lo, hi)


def _log_mean_se(x: np.ndarray) -> np.ndarray:
    """The delta method's standard error of log(mean(x)): the runs' CV over sqrt(n)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return x.std(axis=-1, ddof=1) / (x.mean(axis=-1) * math.sqrt(x.shape[-1]))


def _mean_bootstrap_t(
    x: np.ndarray, se: np.ndarray, confidence: float, n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The studentized bootstrap's quantiles of (log mean* - log mean) / se*, per leading row.

    A resample of a few near-identical runs has a standard error near zero and a huge t: resample
    standard errors are floored at ``SE_FLOOR`` times the sample's, as in the ratio's bootstrap-t.
    """
    n = x.shape[-1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    chunk = max(1, _CELLS_PER_CHUNK // (n * max(rows, 1)))
    log_m = np.log(x.mean(axis=-1))[..., None]
    t_values = []
    for start in range(0, n_resamples, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_resamples - start), n))
        xb = x[..., idx]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_values.append((np.log(xb.mean(axis=-1)) - log_m) / np.maximum(_log_mean_se(xb), SE_FLOOR * se[..., None]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(np.concatenate(t_values, axis=-1), [(1 - confidence) / 2, (1 + confidence) / 2], -1)
    return low, high


def mean_bounds(
    x: np.ndarray,
    method: str = DEFAULT_MEAN_METHOD,
    confidence: float = 0.95,
    *,
    cv_floor: float = MEAN_CV_FLOOR,
    n_resamples: int = MIN_RESAMPLES,
    seed: int | np.random.Generator = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """One arm's interval along the last axis, before :func:`within_data`: ``bootstrap-t``, ``log-t`` or ``t``.

    ``log-t`` is a t-interval on the log of the mean with a jackknife standard error; ``bootstrap-t`` takes
    the t quantiles from resamples studentized by their own standard error instead, so the interval
    follows the skew the runs show. Both floor the log mean's standard error at ``cv_floor / sqrt(n)``: the
    runs of an agent arm that takes one path nine times in ten agree to a fraction of a percent, and an
    interval from their spread excludes the mean the rare longer paths add (0.35 coverage at 5 runs on the
    batch-read pack's batching arm without the floor; see ``MEAN_CV_FLOOR``). ``t`` (for values that can be
    negative, like savings) has no floor.
    """
    n = x.shape[-1]
    m = x.mean(axis=-1)
    if method == "t":
        q = sps.t.ppf((1 + confidence) / 2, n - 1)
        se = x.std(axis=-1, ddof=1) / math.sqrt(n)
        return m - q * se, m + q * se
    floor = cv_floor / math.sqrt(n)
    if method == "log-t":
        with np.errstate(divide="ignore", invalid="ignore"):
            se = np.sqrt(jackknife_var(x, np.log))
        q = sps.t.ppf((1 + confidence) / 2, n - 1)
        t_low, t_high = -q, q
    elif method == "bootstrap-t":
        _check_resamples(n_resamples)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        se = _log_mean_se(x)
        t_low, t_high = _mean_bootstrap_t(x, se, confidence, n_resamples, rng)
    else:
        raise ParamError("method", f"got {method!r}", ["bootstrap-t", "log-t", "t"])
    se = np.maximum(se, floor)
    ok = (m > 0) & np.isfinite(se) & np.isfinite(t_low) & np.isfinite(t_high)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(ok, m * np.exp(-t_high * se), np.nan), np.where(ok, m * np.exp(-t_low * se), np.nan)


def within_data(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A token-count interval as the kit prints it: the lower bound raised to the smallest run, and where a
    bound lay beyond the runs (below the smallest or above the largest).

    Only the lower bound is capped: the known-truth per-arm table scores both caps, and capping the upper
    bound at the largest run cost up to 4 points at 5 runs (a right-skewed arm's five runs often all fall
    below its mean, and an upper bound above them is what covers it), while the lower cap cost under one.
    """
    beyond = np.isfinite(lo) & ((lo < x.min(axis=-1)) | (hi > x.max(axis=-1)))
    return np.maximum(lo, x.min(axis=-1)), hi, beyond


class MeanCoverage(NamedTuple):
    """One row of the per-arm table's shape classes: what intervals of such runs covered in the study."""

    method: str
    shape: str  # a MEAN_SHAPES class, decided by the runs themselves (mean_shape)
    runs: int  # the study's n; a batch uses the largest row at or below its own runs
    coverage: float


# The per-arm table's shape-class rows (bench/known_truth.md#per-arm-intervals; tests/test_known_truth.py
# checks they match), for the methods mean_interval floors and caps.
MEAN_COVERAGE: tuple[MeanCoverage, ...] = (
    MeanCoverage("bootstrap-t", "near-constant", 5, 0.956),
    MeanCoverage("bootstrap-t", "near-constant", 10, 0.999),
    MeanCoverage("bootstrap-t", "near-constant", 20, 0.924),
    MeanCoverage("bootstrap-t", "near-symmetric", 5, 0.858),
    MeanCoverage("bootstrap-t", "near-symmetric", 10, 0.887),
    MeanCoverage("bootstrap-t", "near-symmetric", 20, 0.924),
    MeanCoverage("bootstrap-t", "skewed", 5, 0.942),
    MeanCoverage("bootstrap-t", "skewed", 10, 0.971),
    MeanCoverage("bootstrap-t", "skewed", 20, 0.956),
    MeanCoverage("bootstrap-t", "long-tailed", 5, 0.992),
    MeanCoverage("bootstrap-t", "long-tailed", 10, 0.995),
    MeanCoverage("bootstrap-t", "long-tailed", 20, 0.983),
    MeanCoverage("log-t", "near-constant", 5, 0.958),
    MeanCoverage("log-t", "near-constant", 10, 0.999),
    MeanCoverage("log-t", "near-constant", 20, 0.990),
    MeanCoverage("log-t", "near-symmetric", 5, 0.849),
    MeanCoverage("log-t", "near-symmetric", 10, 0.871),
    MeanCoverage("log-t", "near-symmetric", 20, 0.919),
    MeanCoverage("log-t", "skewed", 5, 0.903),
    MeanCoverage("log-t", "skewed", 10, 0.950),
    MeanCoverage("log-t", "skewed", 20, 0.942),
    MeanCoverage("log-t", "long-tailed", 5, 0.980),
    MeanCoverage("log-t", "long-tailed", 10, 0.973),
    MeanCoverage("log-t", "long-tailed", 20, 0.945),
)


def mean_shape(x: np.ndarray) -> np.ndarray:
    """Each row's shape class (``MEAN_SHAPES``) from what the runs show: their CV and sample skewness."""
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = x.std(axis=-1, ddof=1) / x.mean(axis=-1)
        skew = np.nan_to_num(sps.skew(x, axis=-1, bias=False))
    out = np.full(x.shape[:-1], MEAN_SHAPES[1], dtype=object)
    out[skew >= MEAN_SKEW_BANDS[0]] = MEAN_SHAPES[2]
    out[skew >= MEAN_SKEW_BANDS[1]] = MEAN_SHAPES[3]
    out[cv < MEAN_CV_FLOOR] = MEAN_SHAPES[0]
    return out


def _coverage_note(x: np.ndarray, method: str) -> str:
    """What intervals of runs shaped like these covered in the study, where that is below ``MEAN_GOOD``."""
    shape = str(mean_shape(x))
    rows = [r for r in MEAN_COVERAGE if r.shape == shape and r.runs <= len(x) and r.method == method]
    if not rows:
        return ""
    row = max(rows, key=lambda r: r.runs)
    if row.coverage >= MEAN_GOOD:
        return ""
    return (
        f"{FEW_RUNS_MEAN_NOTE}: from {row.runs} runs, {method} intervals of arms whose runs look {shape} "
        f"covered {row.coverage:.0%} in the study (bench/known_truth.md#per-arm-intervals)"
    )


def _check_values(x: np.ndarray, method: str) -> None:
    """Refuse values no interval should be built from: non-finite ones, and negative ones for a token count."""
    if not np.isfinite(x).all():
        raise InputError(f"mean_interval: {int((~np.isfinite(x)).sum())} values are not finite numbers")
    if method != "t" and (x < 0).any():
        raise InputError(
            f"mean_interval(method={method!r}): {int((x < 0).sum())} negative values (smallest {x.min():g}); "
            "a count of tokens cannot be negative. method='t' is for values that can be (savings)"
        )


def _within_data_noted(x: np.ndarray, lo: float, hi: float) -> tuple[float, float, bool, list[str]]:
    """:func:`within_data` for one arm, with the notes that say what it did and why the bounds lie where."""
    raw_lo = lo
    lo, hi, flag = (float(v) for v in within_data(x, np.asarray(lo), np.asarray(hi)))
    notes = []
    if raw_lo < lo:
        given = f"{raw_lo:,.0f}" if abs(raw_lo) >= 100 else f"{raw_lo:.3g}"
        notes.append(f"lower bound raised to the smallest run (the interval model gave {given})")
    if str(mean_shape(x)) == MEAN_SHAPES[0]:
        notes.append(
            f"the runs agree closer than a CV of {MEAN_CV_FLOOR:g}: the interval assumes that much spread, "
            "for the longer paths such runs did not take"
        )
    elif hi > x.max():
        notes.append("upper bound above the largest run: the interval allows for longer runs than these")
    return lo, hi, bool(flag), notes


_MEAN_HOW = {
    "bootstrap-t": f"bootstrap-t on the log mean (CV floor {MEAN_CV_FLOOR:g})",
    "log-t": f"t on the log mean (jackknife SE, CV floor {MEAN_CV_FLOOR:g})",
    "t": "t-interval",
}


def mean_interval(
    values: Sequence[float] | np.ndarray,
    batches: Sequence | None = None,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    method: str = DEFAULT_MEAN_METHOD,
) -> Interval:
    """Mean of one arm with an interval (a t over the batches' means when the values span several batches).

    The default suits token counts (positive, right-skewed): the known-truth per-arm table chose it
    (bench/known_truth.md#per-arm-intervals). Where no candidate reached 93% for runs shaped like these
    (``MEAN_COVERAGE``, classed by :func:`mean_shape`), the note quotes what the study measured; the lower
    bound is raised to the smallest run and an upper bound above the largest is kept, both flagged
    (``bound_beyond_data``, :func:`within_data`). ``t`` suits values that can be negative (savings): it
    is neither floored nor capped, and the other methods refuse negative values. No interval below
    ``MIN_RUNS`` values.
    """
    if method not in MEAN_METHODS:
        raise ParamError("method", f"got {method!r}", list(MEAN_METHODS))
    check_confidence(confidence)
    confidence = float(confidence)
    x = np.asarray(values, dtype=float)
    _check_values(x, method)
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
        lo, hi = two_level_interval(groups, confidence=confidence, log=method != "t")
        how = f"t over {len(levels)} batches ({len(levels) - 1} df)" + (" on the log mean" if method != "t" else "")
    elif method in _MEAN_HOW:
        resamples = max(int(n_resamples), MIN_RESAMPLES)
        lo, hi = (float(v) for v in mean_bounds(x, method, confidence, n_resamples=resamples, seed=seed))
        how = _MEAN_HOW[method]
    elif is_scipy_method(method):
        lo, hi = interval_scipy(
            (x,), _mean_stat, paired=False, confidence=confidence, n_resamples=n_resamples, seed=seed, method=method
        )
        how = f"{method} bootstrap"
    else:
        raise AssertionError(f"mean: method {method!r} is in MEAN_METHODS but has no interval")
    notes = [] if np.isfinite(lo) else ["degenerate data: no interval"]
    beyond = False
    if method != "t" and np.isfinite(lo):
        lo, hi, beyond, said = _within_data_noted(x, lo, hi)
        notes += said
    if len(levels) < 2 and np.isfinite(lo) and (coverage := _coverage_note(x, method)):
        notes.append(coverage)
    return Interval(mean=mean, lower=lo, upper=hi, method=how, note="; ".join(notes), bound_beyond_data=beyond)
