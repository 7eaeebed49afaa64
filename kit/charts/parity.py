"""Quality parity: grade beside total tokens, so a cheaper but worse arm cannot hide.

The intervals are arms.csv's (:func:`kit.analysis.metrics.arm_summary`), so the figure and the report quote
the same numbers; :func:`grade_summary` is the report's grade table too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kit.analysis.metrics import arm_summary
from kit.charts.forest import (
    forest_axis,
    grade_limits,
    marker_notes,
    oriented,
    ratio_axis_label,
    ratios_n,
    reads_fewer,
    with_bound_flags,
)
from kit.charts.style import (
    arm_colors,
    data_n,
    empty_axes,
    figure,
    figure_arms,
    finish,
    require_columns,
    thousands,
    truthy,
)
from kit.records import Design
from kit.stats import finished


def _arm_intervals(trials: pd.DataFrame, metrics: Iterable[str], arms: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm and metric: mean and 95% interval as ``analysis/arms.csv`` holds them.

    Why one source: the figure, the report and arms.csv must quote the same interval. Given the analysis'
    ``arms`` table its rows are used; otherwise they are computed by :func:`kit.analysis.metrics.arm_summary`, the
    function that writes arms.csv (with its defaults, which are the analyze stage's).
    """
    wanted = [m for m in metrics if m in trials.columns]
    if arms is None or arms.empty:
        if trials.empty or not wanted:
            return pd.DataFrame(columns=["arm", "metric", "n", "mean", "lower", "upper"])
        arms = arm_summary(trials.assign(**{m: pd.to_numeric(trials[m], errors="coerce") for m in wanted}), wanted)
    arms = arms.assign(arm=arms["arm"].astype(str))
    return arms[arms["metric"].isin(wanted)].reset_index(drop=True)


def grade_summary(trials: pd.DataFrame, arms: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-arm grade: graded n, ungraded n, mean and its 95% interval from arms.csv (ok trials only)."""
    ok = finished(trials)
    intervals = _arm_intervals(trials, ["grade"], arms).set_index("arm")
    rows = []
    for arm, group in ok.groupby(ok["arm"].astype(str), sort=True):
        grades = pd.to_numeric(group.get("grade", pd.Series(dtype=float)), errors="coerce")
        graded = int(grades.notna().sum())
        found = intervals.loc[arm] if arm in intervals.index and graded else None
        mean, lower, upper = (np.nan,) * 3 if found is None else (found["mean"], found["lower"], found["upper"])
        rows.append({"arm": arm, "graded": graded, "ungraded": len(group) - graded, "mean": mean, "lower": lower,
                     "upper": upper})  # fmt: skip
    return pd.DataFrame(rows, columns=["arm", "graded", "ungraded", "mean", "lower", "upper"])


def _interval(ax: Axes, y: int, est: float, lo: float, hi: float, color: str, flagged: bool) -> None:
    """The mean's dot and its interval's whisker, dashed where arms.csv flags the interval (:func:`_flagged`)."""
    xerr = [[max(est - lo, 0)], [max(hi - est, 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
    bars = ax.errorbar([est], [y], xerr=xerr, fmt="o", color=color, capsize=3, ms=7)
    if flagged:
        for whisker in bars.lines[2]:
            whisker.set_linestyle("--")


def _flagged(interval: pd.Series) -> bool:
    """Whether arms.csv flags the arm's interval as reaching past what any mean of its runs can be.

    The ``bound_beyond_data`` column is read where the analysis wrote one; an older arms.csv has none, and
    then no interval is drawn as flagged.
    """
    return bool(np.isfinite(float(interval.get("lower", np.nan)))) and truthy(interval.get("bound_beyond_data"))


FLAGGED_NOTE = (
    "dashed whisker: arms.csv flags the interval (bound_beyond_data): it reached past what any mean of the "
    "arm's runs can be, so that bound is not a confidence bound"
)


def quality_parity(ratios_or_trials: pd.DataFrame, design: Design, arms: pd.DataFrame | None = None) -> Figure:
    """Grade beside total tokens, so a cheaper but worse arm cannot hide.

    Given trials: grade per arm (points + mean with 95% CI) next to mean total tokens per arm with the
    ratio vs ``design.baseline`` when named; the intervals are arms.csv's (``arms``, else computed the
    same way: :func:`_arm_intervals`), so the figure quotes what the report quotes. Given ratios: the grade
    difference next to the total-token ratio, the latter in the headline's direction (× fewer or × more).
    """
    data = ratios_or_trials
    fig = figure(figsize=(10, 4.8))
    left, right = fig.subplots(1, 2)
    if "metric" in data.columns:
        notes = _parity_of_ratios(left, right, data, design)
        return finish(fig, "Quality parity: grade next to total tokens", design, n=ratios_n(data), notes=notes)
    require_columns(data, ["arm", "total_tokens"], "trials")
    ok = finished(data)
    names = sorted(ok["arm"].astype(str).unique())
    colors = arm_colors(figure_arms(design, data["arm"]))
    summary = grade_summary(data, arms).set_index("arm")
    grades_ci = _arm_intervals(data, ["grade"], arms).set_index("arm")
    totals_ci = _arm_intervals(data, ["total_tokens"], arms).set_index("arm")
    left.set_xlim(-0.05, 1.05)  # before the rows: a row's note picks its side on the final limits
    flagged = False
    for i, arm in enumerate(names):
        rows = ok[ok["arm"].astype(str) == arm]
        grades = pd.to_numeric(rows.get("grade", pd.Series(dtype=float)), errors="coerce").astype(float).dropna()
        grade = summary.loc[arm].astype(object)  # a copy that can hold the flag
        grade["bound_beyond_data"] = grades_ci.get("bound_beyond_data", pd.Series(dtype=object)).get(arm)
        flagged |= _points_and_interval(left, i, grades.to_numpy(), grade, colors[arm])
        if len(grades) and np.ptp(grades.to_numpy()) == 0:  # every grade equal: no interval, and the row says why
            _above_row(left, i, float(grades.iloc[0]), f"no variation: all {len(grades)} graded {grades.iloc[0]:.2f}")
        totals = pd.to_numeric(rows["total_tokens"], errors="coerce").astype(float).to_numpy()
        t = totals_ci.loc[arm] if arm in totals_ci.index else pd.Series({"mean": np.nan})
        flagged |= _points_and_interval(right, i, totals, t, colors[arm])
    for ax in (left, right):
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.grid(axis="x", alpha=0.3)
    left.set_xlabel("grade per trial and mean (95% CI)")
    right.set_xlabel("total tokens per trial and mean (95% CI)")
    right.set_xlim(left=0)  # token counts from zero, as in every figure
    thousands(right, "x")
    if design.baseline is not None and design.baseline in names:
        _annotate_against_baseline(right, ok, names, design.baseline)
    notes = [f"ungraded trials: {int(summary['ungraded'].sum())}"] if summary["ungraded"].sum() else []
    notes += [FLAGGED_NOTE] if flagged else []
    batches = ok["batch"] if "batch" in ok.columns else None
    return finish(
        fig, "Quality parity: grade next to total tokens", design, n=data_n(ok), data_batches=batches, notes=notes
    )


def _parity_of_ratios(left: Axes, right: Axes, data: pd.DataFrame, design: Design) -> list[str]:
    """The ratios form: grade differences (left) and total-token ratios in the headline's direction (right);
    the footnotes for the markers drawn (:func:`kit.charts.forest.marker_notes`)."""
    colors = arm_colors(figure_arms(design, *(data[c] for c in ("arm", "baseline") if c in data.columns)))
    grades = data[(data["metric"] == "grade") & data["estimate"].notna()]
    totals = data[(data["metric"] == "total_tokens") & data["estimate"].notna()]
    fewer = reads_fewer(totals) if not totals.empty else False
    drawn: set[str] = set()
    for ax, rows, ref, xlabel in (
        (left, grades, 0.0, "grade difference (arm − baseline), 95% CI"),
        (right, oriented(with_bound_flags(totals), fewer), 1.0, f"total tokens, {ratio_axis_label(fewer)}"),
    ):
        if rows.empty:
            empty_axes(ax, "no estimate")
            continue
        limits = grade_limits(rows) if ax is left else None
        drawn |= forest_axis(ax, rows, colors, ref, with_metric=False, limits=limits)
        if limits is not None:
            ax.set_xlim(*limits)
        ax.set_xlabel(xlabel)
    return marker_notes(drawn)


def _points_and_interval(ax: Axes, i: int, values: np.ndarray, interval: pd.Series, color: Any) -> bool:
    """One arm's row: its trials as points just below the line, its mean and 95% CI on it; whether the
    interval was drawn as flagged."""
    ax.scatter(values, np.full(len(values), i + 0.18), color=color, alpha=0.5, s=18)
    if pd.isna(interval["mean"]):
        return False
    flagged = _flagged(interval)
    _interval(ax, i, float(interval["mean"]), float(interval["lower"]), float(interval["upper"]), color, flagged)
    return flagged


# Where in its row an arm's label sits: above the row's line (the trials' points sit below it, at +0.18), in the
# upper half of the row's band, so it is nearer its own tick than any other.
LABEL_OFFSET = -0.27


def _above_row(ax: Axes, i: int, x: float, text: str) -> None:
    """``text`` in row ``i``'s band just above its line, starting at ``x`` and running towards the side with room.

    The axis limits must be final: the side is chosen by where ``x`` lies on them.
    """
    low, high = ax.get_xlim()
    right = x <= (low + high) / 2
    ax.annotate(
        text,
        (x, i + LABEL_OFFSET),
        xytext=(-4 if right else 4, 0),
        textcoords="offset points",
        ha="left" if right else "right",
        va="center",
        fontsize=8,
    )


def _annotate_against_baseline(ax: Axes, ok: pd.DataFrame, names: list[str], baseline: str) -> None:
    """Each other arm's mean total as "mean N× fewer/more than <baseline>" in that arm's own row, above its line."""
    means = {
        arm: pd.to_numeric(ok.loc[ok["arm"].astype(str) == arm, "total_tokens"], errors="coerce").mean()
        for arm in names
    }
    base_mean = means[baseline]
    for i, arm in enumerate(names):
        arm_mean = means[arm]
        if arm != baseline and base_mean and arm_mean:
            r = arm_mean / base_mean
            factor = f"{1 / r:.2f}× fewer than" if r < 1 else f"{r:.2f}× more than"
            _above_row(ax, i, arm_mean, f"mean {factor} {baseline}")
