"""Arm comparisons with seeded bootstrap intervals, and the method's rules enforced in code.

Why this module refuses things (docs/method.md#stitch): a published "2.67x fewer uncached tokens"
headline was two arms from two different runs divided by each other (a cross-run stitch), under
different cache warmth. So a ratio comes from batches that hold both arms; dividing arms that never
shared a batch raises :class:`StitchError` unless the caller asks for it, and then the row says
"cross-run stitch". Uncached tokens ride the provider's cache, so their rows always carry the observed
hit rates (docs/method.md#totals), and a claim that depends on the cache needs >= 3 batches plus a
non-isolated control (:func:`warmth_invariance`, docs/method.md#replication).

Intervals: inside one interleaved batch, trials are paired by run and resampled together. The default
is the studentized bootstrap (bootstrap-t) of the log ratio: in the known-truth study
(``bench/known_truth.md``, 1,000 batches of 5 runs per arm) scipy's BCa interval held the true ratio
in 83% of batches, bootstrap-t in 94.6%, at about twice the width; BCa, percentile and basic
(``scipy.stats.bootstrap``) remain available through ``method``. Across batches, a two-level bootstrap
resamples batches, then runs within each chosen batch (numpy, percentile interval; scipy has no nested
bootstrap). Every interval is seeded and reproducible; degenerate data give the estimate with NaN
bounds and a note, not a crash (docs/method.md#intervals).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

STITCH_LABEL = "cross-run stitch"
SMALL_N = 5
MIN_BATCHES_FOR_CACHE_CLAIM = 3
DIFFERENCE_METRICS = frozenset({"grade"})  # bounded scores compare by difference, token counts by ratio
HEADLINE_METRICS = ("total_tokens", "uncached_input_tokens")
_CELLS_PER_CHUNK = 2_000_000  # bounds the memory of one vectorised resampling step (~16 MB of float64)
DEFAULT_METHOD = "bootstrap-t"
METHODS = ("bootstrap-t", "BCa", "percentile", "basic")  # the last three are scipy.stats.bootstrap's
# A resample's standard error is floored at this share of the sample's (see _studentized).
SE_FLOOR = 0.2

Statistic = Callable[..., np.ndarray]


class StitchError(ValueError):
    """Two arms were compared across batches that never ran them together (docs/method.md#stitch)."""


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
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, frame.columns))}")


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


def _interval_scipy(
    samples: tuple[np.ndarray, ...],
    statistic: Statistic,
    *,
    paired: bool,
    confidence: float,
    n_resamples: int,
    seed: int,
    method: str,
) -> tuple[float, float]:
    """scipy's bootstrap, vectorised and chunked; NaN bounds when the bootstrap distribution degenerates."""
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


def _estimate_and_se(a: np.ndarray, b: np.ndarray, *, paired: bool, log_ratio: bool) -> tuple[np.ndarray, np.ndarray]:
    """The statistic (log of the ratio of means, or difference of means) and its standard error, along the last axis.

    The log ratio's standard error is the delta method's: per run, ``a_i/mean(a) - b_i/mean(b)`` when paired
    (so the covariance of the two arms counts), each arm's relative variance otherwise.
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


def _studentized(
    samples: tuple[np.ndarray, np.ndarray],
    *,
    paired: bool,
    log_ratio: bool,
    confidence: float,
    n_resamples: int,
    seed: int,
) -> tuple[float, float]:
    """Bootstrap-t interval of mean(a)/mean(b) (on the log scale) or of mean(a) - mean(b).

    Each resample's statistic is studentized by its own standard error, so the interval follows the way
    the spread grows with the estimate (skewed token counts: a batch whose placebo runs happened to be
    short has both a high ratio and a small spread, which percentile and BCa intervals take at face
    value). A resample built from a couple of near-identical runs has a standard error near zero and a
    meaningless, huge t; such standard errors are floored at ``SE_FLOOR`` times the sample's, which kept
    every bound finite in the known-truth study and moved coverage by under a point at 5 runs or more.
    NaN bounds when the sample's own standard error is zero or not finite (nothing to studentize by).
    """
    a, b = samples
    theta, se = (float(v) for v in _estimate_and_se(a, b, paired=paired, log_ratio=log_ratio))
    nan = float("nan")
    if not (np.isfinite(theta) and np.isfinite(se)) or se == 0:
        return nan, nan
    rng = np.random.default_rng(seed)
    chunk = max(1, _CELLS_PER_CHUNK // max(len(a), len(b)))
    t_values = []
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        ia = rng.integers(0, len(a), size=(r, len(a)))
        ib = ia if paired else rng.integers(0, len(b), size=(r, len(b)))
        th, s = _estimate_and_se(a[ia], b[ib], paired=paired, log_ratio=log_ratio)
        with np.errstate(invalid="ignore"):
            t = (th - theta) / np.maximum(s, SE_FLOOR * se)
        t_values.append(t[np.isfinite(t)])
    t_all = np.concatenate(t_values)
    if len(t_all) == 0 or np.ptp(t_all) == 0:
        return nan, nan
    t_low, t_high = np.quantile(t_all, [(1 - confidence) / 2, (1 + confidence) / 2])
    lo, hi = theta - t_high * se, theta - t_low * se
    return (float(np.exp(lo)), float(np.exp(hi))) if log_ratio else (lo, hi)


def two_level_means(
    groups: Sequence[Sequence[np.ndarray]], *, paired: bool, n_resamples: int, seed: int
) -> list[np.ndarray]:
    """Bootstrap replicates of each sample's pooled mean: resample batches, then runs within each batch.

    ``groups[k][j]`` holds sample ``j``'s values in batch ``k`` (sample 0 = arm, 1 = baseline). Batches
    are drawn with replacement, shared by all samples (a batch is the unit that holds both arms); runs
    are then drawn within each chosen batch, jointly across samples when ``paired`` (aligned arrays).
    Vectorised over resamples in chunks, so memory stays bounded for any size.
    """
    k, n_samples = len(groups), len(groups[0])
    lens = np.array([[len(g[j]) for j in range(n_samples)] for g in groups], dtype=np.int64)
    if paired and not (lens == lens[:, :1]).all():
        raise ValueError("two_level_means(paired=True): samples must have equal lengths in every batch")
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


def mean_interval(
    values: Sequence[float] | np.ndarray,
    batches: Sequence | None = None,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    method: str = "BCa",
) -> dict:
    """Mean of one arm with a bootstrap interval (two-level when the values span several batches)."""
    x = np.asarray(values, dtype=float)
    keys = list(batches) if batches is not None else [None] * len(x)
    levels = list(dict.fromkeys(keys))
    nan = float("nan")
    if len(x) == 0:
        return {"mean": nan, "lower": nan, "upper": nan, "method": "", "note": "no values"}
    mean = float(x.mean())
    if len(x) < 2 or np.ptp(x) == 0:
        why = "n < 2" if len(x) < 2 else "zero variance"
        return {"mean": mean, "lower": nan, "upper": nan, "method": "", "note": f"{why}: no interval"}
    if len(levels) >= 2:
        groups = [[x[[i for i, key in enumerate(keys) if key == level]]] for level in levels]
        (reps,) = two_level_means(groups, paired=False, n_resamples=n_resamples, seed=seed)
        lo, hi = _percentile(reps, confidence)
        how = "two-level percentile bootstrap (batches, then runs)"
    else:
        opts = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed, "method": method}
        lo, hi = _interval_scipy((x,), _mean_stat, paired=False, **opts)
        how = f"{method} bootstrap"
    note = "" if np.isfinite(lo) else "degenerate bootstrap distribution: no interval"
    return {"mean": mean, "lower": lo, "upper": hi, "method": how, "note": note}


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


def ratio(
    trials: pd.DataFrame,
    metric: str,
    a: str,
    b: str,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    allow_stitch: bool = False,
    paired: bool | None = None,
    method: str = DEFAULT_METHOD,
) -> dict:
    """Compare arm ``a`` with baseline ``b`` on ``metric``: mean(a) / mean(b) (a difference for grades).

    Only batches that ran both arms count; arms that never shared a batch raise :class:`StitchError`
    (``allow_stitch=True`` computes an unpaired interval labelled "cross-run stitch"). ``paired=None``
    pairs by (batch, run) when every run appears once in each arm; ``paired=True`` insists on it.
    ``method`` picks the one-batch interval (``METHODS``; default bootstrap-t, the one whose coverage the
    known-truth study found honest at 5 runs per arm); across batches the interval is two-level percentile.
    Returns one ``analysis/ratios.csv`` row as a dict.
    """
    require_columns(trials, ["batch", "arm", "run", metric], "ratio()")
    if method not in METHODS:
        raise ValueError(f"ratio(): method {method!r}; accepted: {', '.join(METHODS)}")
    for name in (a, b):
        if not (trials["arm"] == name).any():
            raise ValueError(
                f"ratio(): no trials of arm {name!r}; arms present: {sorted(trials['arm'].dropna().unique())}"
            )
    ok = _ok(trials)
    fa, missing_a = _arm_rows(ok, a, metric)
    fb, missing_b = _arm_rows(ok, b, metric)
    notes = [
        f"{m} finished trial(s) of {arm} have no {metric} (usage unknown)"
        for arm, m in ((a, missing_a), (b, missing_b))
        if m
    ]
    batches_a, batches_b = set(fa["batch"]), set(fb["batch"])
    shared = sorted(batches_a & batches_b)
    label = ""
    if shared:
        dropped = sorted((batches_a | batches_b) - set(shared))
        if dropped:
            notes.append(f"batches without both arms left out: {', '.join(map(str, dropped))}")
        fa, fb = fa[fa["batch"].isin(shared)], fb[fb["batch"].isin(shared)]
        used = shared
    elif not fa.empty and not fb.empty:
        if not allow_stitch:
            raise StitchError(
                f"arm {a!r} ran in batch(es) {sorted(batches_a)} and baseline {b!r} in {sorted(batches_b)}: "
                "no batch holds both, so their ratio is a cross-run stitch under different cache warmth "
                "(docs/method.md#stitch); run them interleaved, or pass allow_stitch=True to label it"
            )
        if paired:
            raise ValueError("ratio(): a cross-run stitch cannot be paired (no batch holds both arms)")
        label = STITCH_LABEL
        used = sorted(batches_a | batches_b)
    else:
        used = sorted(batches_a | batches_b)

    kind_is_difference = metric in DIFFERENCE_METRICS
    statistic = _difference_stat if kind_is_difference else _ratio_stat
    va, vb = fa[metric].to_numpy(dtype=float), fb[metric].to_numpy(dtype=float)
    nan = float("nan")
    estimate = float(statistic(va, vb)) if len(va) and len(vb) else nan
    if not np.isfinite(estimate):
        estimate = nan  # a zero baseline has no ratio; inf would read as a number

    problems = _runs_match(fa, fb, used) if not label else ["cross-run stitch"]
    if paired and problems:
        raise ValueError(f"ratio(paired=True): runs must match one to one in every batch; {'; '.join(problems)}")
    use_paired = not problems if paired is None else bool(paired)
    if paired is None and problems and not label and len(va) and len(vb):
        notes.append("runs do not pair one to one (failed or missing trials): unpaired bootstrap")

    lower = upper = nan
    pairing = "paired" if use_paired else "unpaired"
    how = ""
    if len(va) < 2 or len(vb) < 2:
        notes.append("n < 2 in an arm: no interval")
    elif not kind_is_difference and vb.mean() == 0:
        notes.append(f"baseline mean of {metric} is zero: no ratio")
    elif np.ptp(va) == 0 and np.ptp(vb) == 0:
        notes.append("zero variance in both arms: no interval")
    elif len(used) >= 2 and not label:
        groups = []
        for batch in used:
            ga, gb = fa[fa["batch"] == batch], fb[fb["batch"] == batch]
            if use_paired:
                groups.append(_paired_arrays(ga, gb, metric))
            else:
                groups.append((ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)))
        reps_a, reps_b = two_level_means(groups, paired=use_paired, n_resamples=n_resamples, seed=seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            combined = reps_a - reps_b if kind_is_difference else reps_a / reps_b
        lower, upper = _percentile(combined, confidence)
        how = f"two-level {pairing} percentile bootstrap (batches, then runs)"
    elif method == "bootstrap-t" and not kind_is_difference and (va.mean() <= 0 or vb.mean() <= 0):
        notes.append(f"bootstrap-t of the log ratio needs positive means of {metric}: no interval")
    else:
        samples = _paired_arrays(fa, fb, metric) if use_paired else (va, vb)
        opts = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
        if method == "bootstrap-t":
            lower, upper = _studentized(samples, paired=use_paired, log_ratio=not kind_is_difference, **opts)
            how = f"{pairing} bootstrap-t" + ("" if kind_is_difference else " (log ratio)")
        else:
            lower, upper = _interval_scipy(samples, statistic, paired=use_paired, method=method, **opts)
            how = f"{pairing} {method} bootstrap"
    if how and not np.isfinite(lower):
        notes.append("degenerate bootstrap distribution: no interval")

    rows_a, rows_b = ok[(ok["arm"] == a) & ok["batch"].isin(used)], ok[(ok["arm"] == b) & ok["batch"].isin(used)]
    hr_a, hr_b = hit_rate(rows_a), hit_rate(rows_b)
    if metric == "uncached_input_tokens":
        notes.append(
            f"cache-warmth sensitive: observed hit rate {hr_a:.1%} ({a}) vs {hr_b:.1%} ({b}); "
            "report next to total tokens, never blended"
        )
    if kind_is_difference:
        how = f"{how} (difference of means)" if how else "difference of means"
    return {
        "comparison": f"{a} vs {b}",
        "arm": a,
        "baseline": b,
        "metric": metric,
        "estimate": estimate,
        "lower": lower,
        "upper": upper,
        "confidence": confidence,
        "n_arm": len(va),
        "n_baseline": len(vb),
        "paired": use_paired,
        "batches": len(used),
        "method": how,
        "label": label,
        "small_n": len(va) < SMALL_N or len(vb) < SMALL_N,
        "hit_rate_arm": hr_a,
        "hit_rate_baseline": hr_b,
        "simulated": any_simulated(pd.concat([rows_a, rows_b])),
        "note": "; ".join(notes),
    }


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
    rows = [ratio(trials, m, arm, baseline, **options) for arm in arms if arm != baseline for m in wanted]
    return pd.DataFrame(rows)


def per_prompt_savings(
    values: pd.DataFrame,
    arm: str,
    control: str,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
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
            raise ValueError(f"per_prompt_savings(): no values for arm {name!r}; have {sorted(table.columns)}")
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
    ci = mean_interval(s, confidence=confidence, n_resamples=n_resamples, seed=seed)
    if ci["note"]:
        notes.append(ci["note"])
    return {
        "arm": arm,
        "control": control,
        "n": len(s),
        "median": float(np.median(s)) if len(s) else nan,
        "mean": ci["mean"],
        "min": float(s.min()) if len(s) else nan,
        "max": float(s.max()) if len(s) else nan,
        "stdev": statistics.stdev(s) if len(s) >= 2 else nan,
        "lower": ci["lower"],
        "upper": ci["upper"],
        "confidence": confidence,
        "method": ci["method"],
        "per_prompt": {str(k): float(v) for k, v in savings.items()},
        "note": "; ".join(notes),
    }


def _rank_correlation_test(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float]:
    """Spearman's rho with a permutation p-value (exact for few batches; the t approximation is not)."""
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return float("nan"), float("nan")

    def rho(xs: np.ndarray, axis: int = -1) -> np.ndarray:
        xc = xs - xs.mean(axis=axis, keepdims=True)
        yc = ry - ry.mean()
        return (xc * yc).sum(axis=axis) / np.sqrt((xc**2).sum(axis=axis) * (yc**2).sum())

    res = sps.permutation_test(
        (rx,), rho, permutation_type="pairings", vectorized=True, n_resamples=9_999, rng=np.random.default_rng(seed)
    )
    return float(res.statistic), float(res.pvalue)


def warmth_invariance(
    trials: pd.DataFrame, a: str, b: str, metric: str = "uncached_input_tokens", *, seed: int = 0
) -> dict:
    """Does the ``a``/``b`` ratio move with cache warmth? Per-batch ratios against per-batch hit rates.

    Even an interleaved uncached ratio slides with warmth (docs/method.md#warmth), so a cache-dependent
    claim needs >= 3 batches (to see the slope; docs/method.md#replication) and a non-isolated control
    (``control`` True, to measure the contamination that isolation removed). ``claim_ok`` says whether
    both hold; ``reason`` says why not.
    """
    require_columns(trials, ["batch", "arm", metric], "warmth_invariance()")
    ok = _ok(trials)
    rows = []
    for batch, group in ok.groupby("batch", sort=True):
        ga = group[(group["arm"] == a) & group[metric].notna()]
        gb = group[(group["arm"] == b) & group[metric].notna()]
        if ga.empty or gb.empty or gb[metric].mean() == 0:
            continue
        rows.append(
            {
                "batch": batch,
                "ratio": float(ga[metric].mean() / gb[metric].mean()),
                "hit_rate_arm": hit_rate(ga),
                "hit_rate_baseline": hit_rate(gb),
                "hit_rate": hit_rate(pd.concat([ga, gb])),
                "n_arm": len(ga),
                "n_baseline": len(gb),
            }
        )
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
    rho = p = float("nan")
    ratios_ = np.array([r["ratio"] for r in rows])
    hits = np.array([r["hit_rate"] for r in rows])
    finite = np.isfinite(hits)
    if finite.sum() >= MIN_BATCHES_FOR_CACHE_CLAIM:
        rho, p = _rank_correlation_test(hits[finite], ratios_[finite], seed)
    if len(rows) < MIN_BATCHES_FOR_CACHE_CLAIM:
        verdict = f"not enough batches to judge warmth dependence ({len(rows)} of {MIN_BATCHES_FOR_CACHE_CLAIM})"
    elif not np.isfinite(rho):
        verdict = "no rank correlation: the ratio or the hit rate did not vary across batches"
    else:
        span = (
            f"ratio {ratios_.min():.3g}-{ratios_.max():.3g} at hit rates "
            f"{np.nanmin(hits):.1%}-{np.nanmax(hits):.1%} over {len(rows)} batches"
        )
        if p < 0.05:
            verdict = f"warmth-dependent: Spearman rho {rho:.2f} (p={p:.3f}); {span}; quote it with its hit rate"
        else:
            verdict = f"no detectable warmth dependence: Spearman rho {rho:.2f} (p={p:.3f}); {span}"
    if reasons:
        verdict = f"{verdict}; not a cache-dependent claim: {'; '.join(reasons)}"
    return {
        "arm": a,
        "baseline": b,
        "metric": metric,
        "n_batches": len(rows),
        "per_batch": pd.DataFrame(rows),
        "spearman_rho": rho,
        "p_value": p,
        "has_control": not controls.empty,
        "control_hit_rate": hit_rate(controls),
        "isolated_hit_rate": hit_rate(isolated),
        "claim_ok": not reasons,
        "reason": "; ".join(reasons),
        "verdict": verdict,
    }
