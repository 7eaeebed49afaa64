"""Planning and stopping (docs/method.md#planning): runs per arm for a target, and the run stage's stop rule.

:func:`plan` turns a coefficient of variation (stated, or measured on a pilot batch) and a target precision
or effect into runs per arm; :func:`should_continue` decides after each balanced block whether to add another.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.errors import InputError
from kit.experiment.design import ParamError
from kit.stats.compare import ratio
from kit.stats.intervals import MIN_RUNS, check_confidence
from kit.stats.records import Comparison, Plan, StopDecision, finished, require_columns

# The stop rule's first look (runs per arm), and the earliest the run stage accepts (``min_runs_per_arm``):
# bench/known_truth.md#stopping-rules. Stopping on width picks batches whose spread happened to look small; from
# 10 runs per arm the precision stop covered 94.6% on the batch-read pack's arms at upper/lower 2 (about three
# standard errors above 93%; 93.6% with another seed), from 15 95.5%, and 95.5-97.4% in every studied shape.
STOP_FIRST_LOOK = 15
# A precision stop reads and publishes the interval at 1 - STOP_MISS_SHARE * (1 - confidence): 97% for 95%.
# With the fixed-n 95% interval the batches that stopped on width covered 92.7% on heavy tails at upper/lower
# 1.5 and 93.1% on the pack's arms; with 97%, 94.2% or more wherever 100 of 2,000 sequences stopped on the target.
STOP_MISS_SHARE = 0.6
# The metric the stop rule reads, and whose analysis/ratios.csv rows carry the rule's interval.
STOP_METRIC = "total_tokens"


# The level of the upper confidence bound a pilot's CVs are planned at (see _pilot_cvs): the known-truth planner
# table's pilot rows are the share of 5-run pilots whose plan met the runs the target needs.
PILOT_CV_BOUND = 0.8


def _pilot_cvs(
    pilot: pd.DataFrame, arm: str | None, baseline: str | None, metric: str, level: float
) -> tuple[float, float, str]:
    """Each arm's CV of ``metric`` in a pilot batch's finished trials, raised to a ``level`` upper confidence bound.

    Token counts are right-skewed, and the plain sample CV of a few runs is mostly below the arm's (five
    lognormal CV 1.0 runs: median 0.69), so planning from it under-planned about 2x. Each arm's CV is read
    from the variance of its log runs (a lognormal's CV is sqrt(exp(var) - 1)), and the sum of the two
    variances, which sets the log ratio's standard error, is bounded by chi-square with Satterthwaite df
    (n - 1 per arm when one dominates, 2(n - 1) when they are equal); both arms are scaled by that bound.
    Bounding each arm at ``level`` alone planned about 40% more (a sweep of 300 pilots: met in 92-95% on lognormal).
    """
    require_columns(pilot, ["arm", metric], "plan(pilot)")
    ok = finished(pilot)
    names = list(dict.fromkeys(ok["arm"]))
    if arm is None or baseline is None:
        if len(names) != 2:
            raise ParamError("arm", f"the pilot has arms {names}; name the two to compare", "arm= and baseline=")
        baseline, arm = names if baseline is None and arm is None else (baseline or names[0], arm or names[1])
    var, runs = [], []
    for name in (arm, baseline):
        x = ok.loc[ok["arm"] == name, metric].dropna().to_numpy(dtype=float)
        if len(x) < 2 or not (x > 0).all():
            raise ParamError(
                "pilot", f"arm {name!r} has {len(x)} usable runs of {metric}", ">= 2 runs, every value positive"
            )
        var.append(float(np.log(x).var(ddof=1)))
        runs.append(len(x))
    total = var[0] + var[1]
    df = total**2 / (var[0] ** 2 / (runs[0] - 1) + var[1] ** 2 / (runs[1] - 1)) if total > 0 else runs[0] - 1.0
    scale = df / float(sps.chi2.ppf(1 - level, df))
    point = [math.sqrt(math.expm1(v)) for v in var]
    sizes = f"{runs[0]}" if runs[0] == runs[1] else f"{runs[0]} and {runs[1]}"
    source = (
        f"from a pilot of {sizes} runs per arm: CVs {point[0]:.2f} and {point[1]:.2f} raised to their "
        f"{level:.0%} upper confidence bound"
    )
    return math.sqrt(math.expm1(var[0] * scale)), math.sqrt(math.expm1(var[1] * scale)), source


def _runs_needed(
    cva: float, cvb: float, *, precision: float | None, effect: float | None, assurance: float, confidence: float
) -> int:
    """Smallest n >= MIN_RUNS per arm meeting the target under the default interval's normal-theory model.

    The log ratio's standard error is sqrt((cv_a^2 + cv_b^2) / n) with Welch df; for a precision target the
    estimated standard error is taken at its ``assurance`` quantile (chi-square), for an effect the estimate
    must clear the interval's half-width with probability ``assurance``. Searched up to 1,000 first, then
    to 100,000 (the pilot rows of the study plan thousands of times).
    """
    if precision is None and effect is None:
        raise InputError("_runs_needed: give precision or effect")
    target = math.log(precision) if precision is not None else abs(math.log(effect or 1.0))
    var = cva**2 + cvb**2
    for top in (1_000, 100_000):
        n = np.arange(MIN_RUNS, top + 1, dtype=float)
        df = (n - 1) * var**2 / (cva**4 + cvb**4)
        q = sps.t.ppf((1 + confidence) / 2, df)
        se = np.sqrt(var / n)
        if precision is not None:
            ok = 2 * q * se * np.sqrt(sps.chi2.ppf(assurance, df) / df) <= target
        else:
            ok = (q + sps.norm.ppf(assurance)) * se <= target
        if ok.any():
            return int(n[np.argmax(ok)])
    raise ParamError(
        "precision" if precision is not None else "effect",
        "needs more than 100,000 runs per arm",
        "a looser target",
    )


def _real(name: str, value: object) -> float | None:
    """A number (a numpy scalar too) as a float; None stays None; anything else is refused by name."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParamError(name, f"got {value!r}", "a number")
    return float(value)


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
    cv_bound: float = PILOT_CV_BOUND,
) -> Plan:
    """Runs per arm needed for an interval of upper/lower ``precision``, or to tell ``effect`` from 1.

    The spread comes from ``cv`` (one value for both arms, or (arm, baseline)) or from a ``pilot`` trials
    table, whose CVs are taken at their ``cv_bound`` upper confidence bound (so the plan is at least the
    runs the target needs in about that share of pilots; the study measures it). ``assurance`` is the
    probability that a batch of the planned size reaches the target (0.5: the median batch reaches it).
    Numbers may be numpy scalars. Validated against simulation in the known-truth study
    (``bench/known_truth.md#planner``).
    """
    check_confidence(confidence)
    precision, effect = _real("precision", precision), _real("effect", effect)
    assurance, cv_bound = float(_real("assurance", assurance) or 0), float(_real("cv_bound", cv_bound) or 0)
    confidence = float(confidence)
    if not 0 < assurance < 1:
        raise ParamError("assurance", f"got {assurance!r}", "a probability strictly between 0 and 1, e.g. 0.5 or 0.8")
    if not 0 < cv_bound < 1:
        raise ParamError("cv_bound", f"got {cv_bound!r}", "a confidence level strictly between 0 and 1, e.g. 0.8")
    if (precision is None) == (effect is None):
        raise ParamError("precision/effect", "give exactly one target", "precision=1.5 (upper/lower) or effect=0.8")
    if precision is not None and not precision > 1:
        raise ParamError("precision", f"got {precision!r}", "an upper/lower ratio > 1, e.g. 1.5")
    if effect is not None and not (effect > 0 and effect != 1):
        raise ParamError("effect", f"got {effect!r}", "a ratio > 0 other than 1, e.g. 0.8 or 1.3")
    if pilot is not None:
        cva, cvb, source = _pilot_cvs(pilot, arm, baseline, metric, cv_bound)
    elif cv is not None:
        pair = (cv, cv) if isinstance(cv, int | float | np.number) else tuple(cv)
        if len(pair) != 2:
            raise ParamError("cv", f"got {cv!r}", "one CV, or (arm, baseline)")
        cva, cvb = (float(_real("cv", c) or 0) for c in pair)
        source = "stated"
    else:
        raise ParamError("cv", "neither a cv nor a pilot", "cv=0.5 or pilot=<trials table>")
    if not (cva >= 0 and cvb >= 0 and cva + cvb > 0 and math.isfinite(cva + cvb)):
        raise ParamError("cv", f"got {cva!r}, {cvb!r}", "coefficients of variation >= 0, not both 0")
    n = _runs_needed(cva, cvb, precision=precision, effect=effect, assurance=assurance, confidence=confidence)
    return Plan(n, "precision" if precision else "effect", precision, effect, cva, cvb, assurance, confidence, source)


def plan_for_params(runs_per_arm: int, *, cv: float = 0.5, precision: float = 1.5, assurance: float = 0.5) -> str:
    """The run notebook's line before a batch starts: the runs a ratio needs at a stated CV, against the
    ``runs_per_arm`` the batch plans (``RunParams.runs_per_arm``)."""
    p = plan(cv, precision=precision, assurance=assurance)
    planned = int(runs_per_arm)
    verdict = "enough" if planned >= p.runs_per_arm else f"expect an interval wider than upper/lower {precision:g}"
    return f"{p.sentence()}; this batch plans {planned} runs per arm ({verdict})."


def look_confidence(look: int, confidence: float = 0.95) -> float:
    """Confidence of the interval at look ``look`` (1, 2, …) for an anytime-valid 'excludes 1' stop.

    The miss probability alpha is spent as alpha * 6 / (pi^2 k^2) at look k; these sum to alpha, so by the
    union bound the intervals hold the truth at every look at once with probability >= ``confidence``:
    stopping whenever one excludes 1 keeps the error rate (a confidence sequence by Bonferroni).
    """
    return 1 - (1 - confidence) * 6 / (math.pi**2 * look**2)


def stop_confidence(stop: Mapping, look: int, confidence: float = 0.95, *, precision_stop: bool = False) -> float:
    """Level of the interval the stop rule reads at look ``look`` and the analysis publishes for the batch.

    A rule with ``exclude_one`` publishes its anytime-valid interval (:func:`look_confidence`) unless it stopped
    because the precision was reached (``precision_stop``); a precision stop publishes the interval whose width it
    read, at ``1 - STOP_MISS_SHARE * (1 - confidence)``: stopping when the 95% interval is narrow selects
    batches that undercover (the known-truth stop table), and the wider level restores 93-97%.
    """
    if stop.get("exclude_one") and not precision_stop:
        return look_confidence(look, confidence)
    return 1 - STOP_MISS_SHARE * (1 - confidence)


def should_continue(
    trials: pd.DataFrame,
    arm: str,
    baseline: str,
    stop: Mapping,
    *,
    metric: str = STOP_METRIC,
    confidence: float = 0.95,
    matched: bool = False,
) -> StopDecision:
    """Should the run stage add another balanced block (one run per arm)? ``stop`` holds the rule.

    ``stop``: ``max_runs_per_arm`` (required), ``precision`` (stop once the upper/lower of the interval at
    :func:`stop_confidence` is at most this) and/or ``exclude_one`` (stop once the anytime-valid interval of
    :func:`look_confidence` excludes 1); looks start at ``min_runs_per_arm`` (default ``STOP_FIRST_LOOK``;
    the run stage refuses an earlier one, this function follows what it is given). Stopping on "excludes 1"
    with the fixed-n interval would inflate false claims; stopping on the fixed-n interval's width picks
    batches whose spread happened to look small (91-93% on heavy tails and the batch-read pack's arms),
    hence the wider level. The decision carries the level and the look, so the analysis publishes the
    interval the rule stopped on.
    """
    known = {"precision", "exclude_one", "max_runs_per_arm", "min_runs_per_arm"}
    if set(stop) - known or "max_runs_per_arm" not in stop or not ({"precision", "exclude_one"} & set(stop)):
        raise ParamError(
            "stop", f"got {dict(stop)!r}", "{max_runs_per_arm: N, precision: 1.5 and/or exclude_one: true}"
        )
    first = max(int(stop.get("min_runs_per_arm", STOP_FIRST_LOOK)), MIN_RUNS)
    ok = finished(trials)
    n = int(min((ok["arm"] == arm).sum(), (ok["arm"] == baseline).sum()))
    nan = float("nan")
    if n < first:
        return StopDecision(True, f"{n} runs per arm; the rule looks from {first}", n, nan, nan)
    look = n - first + 1
    decision = _stop_reason(trials, arm, baseline, stop, look, metric, confidence, matched)
    if decision is not None:
        why, row = decision
        return StopDecision(False, why, n, row.lower, row.upper, confidence=row.confidence, look=look)
    level = stop_confidence(stop, look, confidence)
    row = ratio(trials, metric, arm, baseline, confidence=level, matched=matched)
    if n >= int(stop["max_runs_per_arm"]):
        why = f"max_runs_per_arm {stop['max_runs_per_arm']} reached"
        return StopDecision(False, why, n, row.lower, row.upper, confidence=level, look=look)
    return StopDecision(True, "target not reached", n, row.lower, row.upper, confidence=level, look=look)


def _stop_reason(
    trials: pd.DataFrame,
    arm: str,
    baseline: str,
    stop: Mapping,
    look: int,
    metric: str,
    confidence: float,
    matched: bool,
) -> tuple[str, Comparison] | None:
    """(why, the interval's row) when a stop target is met at this look, else None."""
    if stop.get("precision"):
        level = stop_confidence(stop, look, confidence, precision_stop=True)
        row = ratio(trials, metric, arm, baseline, confidence=level, matched=matched)
        if np.isfinite(row.lower) and row.upper / row.lower <= float(stop["precision"]):
            return f"precision reached: upper/lower {row.upper / row.lower:.2f} ({level:.0%} interval)", row
    if stop.get("exclude_one"):
        level = look_confidence(look, confidence)
        row = ratio(trials, metric, arm, baseline, confidence=level, matched=matched)
        if row.lower > 1 or row.upper < 1:
            return f"anytime-valid {level:.2%} interval excludes 1 at look {look}", row
    return None
