"""Arm comparisons: one ``analysis/ratios.csv`` row per arm, metric and baseline; savings per prompt.

A ratio comes from batches that hold both arms (docs/method.md#stitch): :func:`ratio` selects them, pairs
runs only when the design matched them, takes one batch's interval (``kit.stats.intervals``) or two levels
across batches, caps a bound beyond the data's range, names the noisier arm of arms of different shape with
the coverage the known-truth study measured for such batches (``kit.stats.coverage``), and carries the
observed hit rates (docs/method.md#totals).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import pandas as pd

from kit.errors import InputError
from kit.experiment.design import ParamError
from kit.stats.coverage import SPREAD_RATIO, spread_ratio, study_coverage
from kit.stats.intervals import (
    DEFAULT_METHOD,
    METHODS,
    MIN_RUNS,
    SCIPY_METHODS,
    WARN_RUNS,
    bounded,
    check_confidence,
    data_range,
    interval,
    interval_scipy,
    is_scipy_method,
    mean_interval,
    two_level_interval,
)
from kit.stats.records import Comparison, Savings, StitchError, finished, require_columns

STITCH_LABEL = "cross-run stitch"
DIFFERENCE_METRICS = frozenset({"grade"})  # bounded scores compare by difference, token counts by ratio
HEADLINE_METRICS = ("total_tokens", "uncached_input_tokens")
# What a ratio flagged for arms of different shape (``interval_rests_on``) must say wherever it is printed.
ONE_ARM_NOTE = (
    "arms of different shape, where the study's 95% intervals covered less than 95% "
    "(the row's study_coverage is what it measured for such batches)"
)


def _ratio_stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)


def _difference_stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


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


def hit_rate(trials: pd.DataFrame) -> float:
    """Observed cache hit rate, sum(cache_read) / sum(input), over trials where both are known."""
    if not {"cache_read_tokens", "input_tokens"} <= set(trials.columns):
        return float("nan")
    known = trials[["cache_read_tokens", "input_tokens"]].dropna()
    total = float(known["input_tokens"].sum())
    return float(known["cache_read_tokens"].sum()) / total if total > 0 else float("nan")


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
    """Across batches: a t-interval from the batches' spread, batches - 1 df (:func:`two_level_interval`).

    Paired runs use the same matched runs as the estimate; pairing adds nothing beyond that, since each
    batch's totals of both arms carry their shared noise into the spread between batches.
    """
    groups = []
    for batch in sel.used:
        ga, gb = sel.fa[sel.fa["batch"] == batch], sel.fb[sel.fb["batch"] == batch]
        if paired:
            groups.append(_paired_arrays(ga, gb, metric))
        else:
            groups.append((ga[metric].to_numpy(dtype=float), gb[metric].to_numpy(dtype=float)))
    lower, upper = two_level_interval(groups, confidence=confidence, log=not difference)
    kind = "paired" if paired else "unpaired"
    scale = ")" if difference else ", log ratio)"
    return lower, upper, f"two-level {kind} t over {len(groups)} batches ({len(groups) - 1} df{scale}"


def _one_batch(a: np.ndarray, b: np.ndarray, *, method: str, paired: bool, difference: bool, **opts) -> tuple:
    """One batch (or a labelled stitch): the chosen interval method on the pooled runs."""
    kind = "paired" if paired else "unpaired"
    if is_scipy_method(method):
        statistic = _difference_stat if difference else _ratio_stat
        lower, upper = interval_scipy((a, b), statistic, paired=paired, method=method, **opts)
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


def _shape(
    va: np.ndarray, vb: np.ndarray, a: str, b: str, sel: _Selection, *, unpaired_log: bool, method: str
) -> tuple[str, float, float]:
    """(noisier arm or '', CV ratio, study coverage) of a one-batch unpaired ratio (docs/method.md#intervals).

    Arms whose runs differ ``SPREAD_RATIO``-fold or more in CV are arms of different shape, where no interval
    held 93-97% in the study; the note says so with the coverage it measured for such batches at this many
    runs (``kit.stats.coverage``). Other rows carry the coverage of same-shape arms; NaN where the study has
    no such cell (paired, across batches, a difference, another method, too few runs).
    """
    nan = float("nan")
    n = min(len(va), len(vb))
    if not unpaired_log or n < MIN_RUNS or (len(sel.used) >= 2 and not sel.label):
        return "", nan, nan
    spread, which = (float(v) for v in spread_ratio(va, vb))
    differ = spread >= SPREAD_RATIO
    found = study_coverage(n, differ) if method == DEFAULT_METHOD else None
    if not differ:
        return "", spread, found.coverage if found else nan
    arm, other = (a, b) if which == 0 else (b, a)
    measured = (
        f": in the study such batches' 95% intervals covered {found.coverage:.0%} at {found.runs} runs per arm "
        f"({found.lowest:.0%}-{found.highest:.0%} by shape; bench/known_truth.md)"
        if found
        else ""
    )
    sel.notes.append(
        f"{arm}'s runs vary {spread:.1f}x as much as {other}'s (sample CV): arms of different shape, whose interval "
        f"overstates the ratio's precision when {arm} drew few of its long runs{measured}"
    )
    return arm, spread, found.coverage if found else nan


def _checked(trials: pd.DataFrame, metric: str, a: str, b: str, method: str, confidence: float) -> pd.DataFrame:
    """The finished trials, once the columns, the method, the confidence, both arms and (for a ratio) the
    values are known good; each problem is a named error."""
    require_columns(trials, ["batch", "arm", "run", metric], "ratio()")
    if method not in METHODS:
        raise ParamError("method", f"got {method!r}", list(METHODS))
    check_confidence(confidence)
    for name in (a, b):
        if not (trials["arm"] == name).any():
            raise InputError(
                f"ratio(): no trials of arm {name!r}; arms present: {sorted(trials['arm'].dropna().unique())}"
            )
    ok = finished(trials)
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
    ``method`` is the one-batch interval (``METHODS``; across batches, a t over the batches' means), and a bound
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
    unpaired_log = np.isfinite(lower) and not (use_paired or difference)
    shape = _shape(va, vb, a, b, sel, unpaired_log=unpaired_log, method=method)
    return _row(
        sel, ok, metric, a, b,
        estimate=estimate, lower=lower, upper=upper, span=span, beyond=beyond, confidence=confidence,
        n=(len(va), len(vb)), paired=use_paired, how=how, difference=difference, shape=shape,
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
        interval_rests_on=f["shape"][0],
        cv_ratio=f["shape"][1],
        study_coverage=f["shape"][2],
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
