"""Whether an arm's ratio moves with cache warmth across batches (docs/method.md#warmth, #replication).

Even an interleaved uncached ratio slides with warmth, so a cache-dependent claim needs >= 3 batches (to
see the slope) and a non-isolated control (to measure what isolation removed): :func:`warmth_invariance`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.stats.compare import hit_rate
from kit.stats.intervals import check_confidence, jackknife_var
from kit.stats.records import WarmthInvariance, finished, require_columns

MIN_BATCHES_FOR_CACHE_CLAIM = 3
# The slope is quoted per SLOPE_UNIT of hit rate (10 percentage points): batches' hit rates differ by tens of
# points, so a slope per 100% would extrapolate over a range no batch pair spans.
SLOPE_UNIT = 0.10
# A slope smaller than this (the ratio moving by less than 3% per 10 points of hit rate, 1.34x between a cold
# and a fully warm cache) is immaterial (docs/method.md#replication); the audit's slide 0.73 -> 0.58 -> 0.47 over
# hit rates 3% -> 67% is 2.3 times as steep.
MATERIAL_SLOPE = math.log(1.03)
# Batches whose hit rates span less than this (one percentage point) cannot tell a slope: it is quoted per 10
# points of hit rate, so it would extrapolate over 10x the range seen, and hit rates equal to ~1e-12 made the
# regression singular (LinAlgError) or its slope overflow exp() (issue #30 item 5).
MIN_HIT_RATE_SPAN = 0.01


class WarmthSlope(NamedTuple):
    """The slope of the log ratio per 10 points of hit rate, its interval, standard error, degrees of freedom and
    the between-batch variance beyond the runs' (``tau2``); arrays over any leading axes."""

    slope: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    se: np.ndarray
    df: np.ndarray
    tau2: np.ndarray


def _batch_points(ok: pd.DataFrame, a: str, b: str, metric: str) -> list[dict]:
    """Per batch holding both arms: the ratio, its log's jackknife variance per arm, and the hit rates."""
    rows = []
    for batch, group in ok.groupby("batch", sort=True):
        ga = group[(group["arm"] == a) & group[metric].notna()]
        gb = group[(group["arm"] == b) & group[metric].notna()]
        if ga.empty or gb.empty or gb[metric].mean() <= 0 or ga[metric].mean() <= 0:
            continue
        xa, xb = ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)
        va = float(jackknife_var(xa, np.log)) if len(xa) >= 2 else np.nan
        vb = float(jackknife_var(xb, np.log)) if len(xb) >= 2 else np.nan
        rows.append(
            {
                "batch": batch,
                "ratio": float(xa.mean() / xb.mean()),
                "log_ratio_var": va + vb,
                "log_var_arm": va,
                "log_var_baseline": vb,
                "hit_rate_arm": hit_rate(ga),
                "hit_rate_baseline": hit_rate(gb),
                "hit_rate": hit_rate(pd.concat([ga, gb])),
                "n_arm": len(ga),
                "n_baseline": len(gb),
            }
        )
    return rows


def warmth_slope(
    log_ratio: np.ndarray,
    hit: np.ndarray,
    var_arm: np.ndarray,
    var_base: np.ndarray,
    n_arm: np.ndarray,
    n_base: np.ndarray,
    confidence: float = 0.95,
) -> WarmthSlope:
    """Slope of the per-batch log ratio on the hit rate (per ``SLOPE_UNIT``), with a t-interval, along the last axis.

    The fit weighs batches by their run counts only (``1 / (1/n_arm + 1/n_base)``), never by estimated
    variances: five runs estimate a variance too poorly to weigh by, and noisy weights made the old
    inverse-variance fit claim a slope 4.8-11% of the time when there was none. The slope is then a fixed
    contrast of the batches' log ratios, so its variance is the sum of each batch's own run-to-run variance
    (the jackknife variance of each arm's log mean) times the contrast's weight squared, plus the between-batch
    variance ``tau2`` the points scatter by beyond what their runs explain (a moment estimate from the
    residuals, truncated at 0). Its t quantile takes Welch-Satterthwaite degrees of freedom: each arm's
    variance in each batch counts with ``n - 1``, ``tau2`` with ``batches - 2``. A batch whose runs are
    identical adds no variance; when nothing varies the interval is the point itself.
    """
    y = np.asarray(log_ratio, dtype=float)
    x = np.asarray(hit, dtype=float) / SLOPE_UNIT
    va, vb = np.asarray(var_arm, dtype=float), np.asarray(var_base, dtype=float)
    na, nb = np.asarray(n_arm, dtype=float), np.asarray(n_base, dtype=float)
    k = y.shape[-1]
    w = np.broadcast_to(1 / (1 / na + 1 / nb), y.shape)
    sw = w.sum(axis=-1, keepdims=True)
    dx = x - (w * x).sum(axis=-1, keepdims=True) / sw
    sxx = (w * dx**2).sum(axis=-1, keepdims=True)
    c = w * dx / sxx
    slope = (c * y).sum(axis=-1)
    intercept = (w * y).sum(axis=-1) / sw[..., 0] - slope * (w * x).sum(axis=-1) / sw[..., 0]
    resid = y - intercept[..., None] - slope[..., None] * x
    # residual = M y with M = I - H, H the hat of the weighted fit: E[sum w r^2] = sum_ij w_i M_ij^2 (v_j + tau2)
    hat = w[..., None, :] * (1 / sw[..., None] + dx[..., :, None] * dx[..., None, :] / sxx[..., None])
    m2 = (np.eye(k) - hat) ** 2
    v = va + vb
    expected_q = (w[..., :, None] * m2 * v[..., None, :]).sum(axis=(-2, -1))
    per_tau2 = (w[..., :, None] * m2).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        tau2 = np.maximum(0.0, ((w * resid**2).sum(axis=-1) - expected_q) / per_tau2)
        c2 = c**2
        tau_part = tau2 * c2.sum(axis=-1)
        var = (c2 * v).sum(axis=-1) + tau_part
        terms = ((c2 * va) ** 2 / (na - 1) + (c2 * vb) ** 2 / (nb - 1)).sum(axis=-1) + tau_part**2 / max(k - 2, 1)
        df = np.where(terms > 0, var**2 / terms, np.inf)
        se = np.sqrt(var)
    q = sps.t.ppf((1 + confidence) / 2, df)
    half = np.where(se > 0, q * se, np.where(se == 0, 0.0, np.nan))  # NaN: a batch's runs give no variance
    return WarmthSlope(slope, slope - half, slope + half, se, df, tau2)


def batches_to_tell(fit: WarmthSlope, n_batches: int, confidence: float = 0.95) -> float:
    """Batches (at hit rates spread like these, runs as noisy) whose interval answers whatever the slope is.

    An interval narrower than ``MATERIAL_SLOPE`` either excludes 0 or lies within +-``MATERIAL_SLOPE``, so
    once its half-width is below half of it the check must answer "dependent" or "invariant". The slope's
    standard error shrinks as 1/sqrt(batches), so the count follows from the spread these batches show,
    not from their slope: a projection from a noisy slope promised answers the study did not see
    (bench/known_truth.md#warmth-check). It is as good as that spread's estimate, itself from few runs.
    """
    z = sps.norm.ppf((1 + confidence) / 2)
    return float(max(n_batches + 1, math.ceil(n_batches * (z * float(fit.se) / (MATERIAL_SLOPE / 2)) ** 2)))


def dependence_of(lower: np.ndarray | float, upper: np.ndarray | float) -> np.ndarray:
    """``invariant`` when the slope's interval lies within +-``MATERIAL_SLOPE``, else ``dependent`` when it
    excludes 0, else ``undetermined``: the verdict's rule, elementwise (the known-truth study scores it)."""
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    dependent = np.where((lo > 0) | (hi < 0), "dependent", "undetermined")
    return np.where((lo > -MATERIAL_SLOPE) & (hi < MATERIAL_SLOPE), "invariant", dependent)


def _per_ten(log_slope: float) -> str:
    """A log slope per 10 points of hit rate as the percent change of the ratio: -6.7%, +0.4%."""
    return f"{math.expm1(log_slope):+.1%}"


def _warmth_verdict(rows: list[dict], fit: WarmthSlope | None, confidence: float) -> tuple[str, str, float]:
    """(dependence, sentence, batches to tell) by the slope's interval per 10 points (docs/method.md#replication)."""
    nan = float("nan")
    if len(rows) < MIN_BATCHES_FOR_CACHE_CLAIM:
        return (
            "not judged",
            f"not enough batches to judge warmth dependence ({len(rows)} of {MIN_BATCHES_FOR_CACHE_CLAIM})",
            nan,
        )
    ratios_ = np.array([r["ratio"] for r in rows])
    hits = np.array([r["hit_rate"] for r in rows])
    if fit is None or not (np.isfinite(fit.lower) and np.isfinite(fit.upper)):
        span = np.nanmax(hits) - np.nanmin(hits) if np.isfinite(hits).any() else float("nan")
        if fit is not None:
            why = "a batch has a single run of an arm, so its run-to-run noise is unknown"
        elif np.isfinite(span):
            why = (
                f"their hit rates span {span:.2%} (a slope needs >= {MIN_HIT_RATE_SPAN:.0%}); batches at more "
                "different hit rates would tell"
            )
        else:
            why = "their hit rates are unknown (no cache_read_tokens and input_tokens)"
        return "not judged", f"cannot tell warmth dependence with these batches: {why}", nan
    est, lo, hi = float(fit.slope), float(fit.lower), float(fit.upper)
    seen = (
        f"ratio {ratios_.min():.3g}-{ratios_.max():.3g} at hit rates {np.nanmin(hits):.1%}-{np.nanmax(hits):.1%} "
        f"over {len(rows)} batches: it changes {_per_ten(est)} per 10 points of hit rate "
        f"({confidence:.0%} CI {_per_ten(lo)} to {_per_ten(hi)})"
    )
    material = f"±{math.expm1(MATERIAL_SLOPE):.0%}"
    dependence = str(dependence_of(lo, hi))
    if dependence == "invariant":
        within = max(-math.expm1(lo), math.expm1(hi))
        return (
            "invariant",
            f"warmth-invariant within ±{within:.1%} per 10 points of hit rate: {seen}, inside the material {material}",
            nan,
        )
    if dependence == "dependent":
        return "dependent", f"warmth-dependent: {seen}; quote the uncached ratio with its hit rate", nan
    needed = batches_to_tell(fit, len(rows), confidence)
    return (
        "undetermined",
        f"cannot tell warmth dependence with these batches: {seen} holds both no change and a material one "
        f"({material} per 10 points); about {needed:.0f} batches at hit rates spread like these would tell "
        "(fewer with more runs each)",
        needed,
    )


def _fit(rows: list[dict], confidence: float) -> WarmthSlope | None:
    """:func:`warmth_slope` over the batches with a hit rate, or None when too few or their hit rates too alike."""
    points = pd.DataFrame([r for r in rows if np.isfinite(r["hit_rate"])])
    if len(points) < MIN_BATCHES_FOR_CACHE_CLAIM or np.ptp(points["hit_rate"]) < MIN_HIT_RATE_SPAN:
        return None
    hit, va, vb, na, nb = (
        points[c].to_numpy() for c in ("hit_rate", "log_var_arm", "log_var_baseline", "n_arm", "n_baseline")
    )
    return warmth_slope(np.log(points["ratio"].to_numpy()), hit, va, vb, na, nb, confidence)


def warmth_invariance(
    trials: pd.DataFrame, a: str, b: str, metric: str = "uncached_input_tokens", *, confidence: float = 0.95
) -> WarmthInvariance:
    """Does the ``a``/``b`` ratio move with cache warmth? The slope of per-batch log ratios on hit rates.

    Even an interleaved uncached ratio slides with warmth (docs/method.md#warmth), so a cache-dependent
    claim needs >= 3 batches (to see the slope; docs/method.md#replication) and a non-isolated control
    (``control`` True, to measure the contamination that isolation removed). The slope per 10 points of hit
    rate comes from :func:`warmth_slope`. ``dependence`` is ``invariant`` when its interval lies within
    +-``MATERIAL_SLOPE``, else ``dependent`` when it excludes 0, else ``undetermined`` (with the batches that
    would tell); ``claim_ok`` says whether batches and control suffice; ``reason`` says why not.
    """
    require_columns(trials, ["batch", "arm", metric], "warmth_invariance()")
    check_confidence(confidence)
    ok = finished(trials)
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
    fit = _fit(rows, confidence)
    dependence, verdict, needed = _warmth_verdict(rows, fit, confidence)
    if reasons:
        verdict = f"{verdict}; not a cache-dependent claim: {'; '.join(reasons)}"
    nan = float("nan")
    return WarmthInvariance(
        arm=a,
        baseline=b,
        metric=metric,
        n_batches=len(rows),
        per_batch=pd.DataFrame(rows),
        slope=nan if fit is None else float(fit.slope),
        slope_lower=nan if fit is None else float(fit.lower),
        slope_upper=nan if fit is None else float(fit.upper),
        slope_df=nan if fit is None else float(fit.df),
        dependence=dependence,
        batches_to_tell=needed,
        has_control=not controls.empty,
        control_hit_rate=hit_rate(controls),
        isolated_hit_rate=hit_rate(isolated),
        claim_ok=not reasons,
        reason="; ".join(reasons),
        verdict=verdict,
    )
