"""Whether an arm's ratio moves with cache warmth across batches (docs/method.md#warmth, #replication).

Even an interleaved uncached ratio slides with warmth, so a cache-dependent claim needs >= 3 batches (to
see the slope) and a non-isolated control (to measure what isolation removed): :func:`warmth_invariance`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.stats.compare import hit_rate
from kit.stats.intervals import check_confidence, jackknife_var
from kit.stats.records import WarmthInvariance, finished, require_columns

MIN_BATCHES_FOR_CACHE_CLAIM = 3
# A warmth slope smaller than this (log ratio per unit hit rate: the ratio moves by less than 1.1x between a
# cold and a fully warm cache) is immaterial (docs/method.md#warmth).
MATERIAL_SLOPE = math.log(1.1)
# Batches whose hit rates span less than this (one percentage point) cannot tell a slope: it is quoted per 100%
# of hit rate, so it would extrapolate over 100x the range seen, and hit rates equal to ~1e-12 made the
# regression singular (LinAlgError) or its slope overflow exp() (issue #30 item 5).
MIN_HIT_RATE_SPAN = 0.01


def _batch_points(ok: pd.DataFrame, a: str, b: str, metric: str) -> list[dict]:
    """Per batch holding both arms: the ratio, its log's jackknife variance, and the hit rates."""
    rows = []
    for batch, group in ok.groupby("batch", sort=True):
        ga = group[(group["arm"] == a) & group[metric].notna()]
        gb = group[(group["arm"] == b) & group[metric].notna()]
        if ga.empty or gb.empty or gb[metric].mean() <= 0 or ga[metric].mean() <= 0:
            continue
        xa, xb = ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)
        var = jackknife_var(xa, np.log) + jackknife_var(xb, np.log) if min(len(xa), len(xb)) >= 2 else np.nan
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
        span = np.nanmax(hits) - np.nanmin(hits) if np.isfinite(hits).any() else 0.0
        return "not judged", (
            f"cannot tell warmth dependence with these batches: their hit rates span {span:.2%} "
            f"(a slope needs >= {MIN_HIT_RATE_SPAN:.0%}); batches at more different hit rates would tell"
        )
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
    nan = float("nan")
    slope = (nan, nan, nan)
    points = [r for r in rows if np.isfinite(r["hit_rate"])]
    if len(points) >= MIN_BATCHES_FOR_CACHE_CLAIM and np.ptp([r["hit_rate"] for r in points]) >= MIN_HIT_RATE_SPAN:
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
