"""The ratio forest: every (comparison, metric) estimate with its interval, in the headline's direction.

Its row and axis helpers are public because the quality-parity figure draws its ratios form with them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from kit.charts.style import (
    ARM_PALETTE,
    METRIC_LABELS,
    REFERENCE_COLOR,
    arm_colors,
    empty_axes,
    figure,
    figure_arms,
    finish,
    require_columns,
)
from kit.records import Design

FOREST_SPREAD = 4.0  # a ratio forest spans its estimates ×/÷ this (bounds beyond it become arrows)


def ratios_n(ratios: pd.DataFrame) -> dict[str, int] | None:
    """n per arm as the ratio rows report it (the n behind the estimates), if they carry it."""
    if ratios.empty or not {"arm", "baseline", "n_arm", "n_baseline"} <= set(ratios.columns):
        return None
    n: dict[str, int] = {}
    for _, row in ratios.iterrows():
        n.setdefault(str(row["baseline"]), int(row["n_baseline"]))
        n.setdefault(str(row["arm"]), int(row["n_arm"]))
    return dict(sorted(n.items()))


def _row_label(row: pd.Series, with_metric: bool = True) -> tuple[str, bool]:
    """Label of one ratio row and whether it must be drawn hollow (stitch or small n)."""
    label = str(row.get("comparison", ""))
    if with_metric:
        label += f" · {METRIC_LABELS.get(row['metric'], row['metric'])}"
    if row["metric"] == "uncached_input_tokens":
        ha, hb = row.get("hit_rate_arm"), row.get("hit_rate_baseline")
        hits = "/".join("?" if pd.isna(h) else f"{h:.0%}" for h in (ha, hb))
        label += f" (hit {hits})"
    hollow = False
    if str(row.get("label") or "") == "cross-run stitch":
        label += " (stitch)"
        hollow = True
    if bool(row.get("small_n")) if pd.notna(row.get("small_n")) else False:
        label += " (n<5)"
        hollow = True
    return label, hollow


def forest_axis(
    ax: Axes,
    rows: pd.DataFrame,
    colors: dict[str, str],
    reference: float,
    with_metric: bool = True,
    limits: tuple[float, float] | None = None,
) -> None:
    """One row per estimate: point, CI line and end ticks; a bound beyond ``limits`` ends in an arrow
    at the axis edge labelled with its value ("→ 76.6"), so one absurd bound cannot squash the rest."""
    labels = []
    for i, (_, row) in enumerate(rows.iterrows()):
        label, hollow = _row_label(row, with_metric)
        labels.append(label)
        color = colors.get(str(row.get("arm")), ARM_PALETTE[0])
        est, lo, hi = (float(row[c]) if pd.notna(row[c]) else np.nan for c in ("estimate", "lower", "upper"))
        ax.plot([est], [i], "o", color=color, ms=7, mfc="white" if hollow else color, mec=color, mew=1.6, zorder=3)
        if np.isnan(lo) or np.isnan(hi):
            continue
        ends: list[tuple[float, bool, float]] = []  # (where drawn, beyond the axis, the bound)
        for bound, side in ((lo, 0), (hi, 1)):
            edge = None if limits is None else limits[side]
            if edge is not None and (bound < edge if side == 0 else bound > edge):
                ends.append((edge, True, bound))
            else:
                ends.append((bound, False, bound))
        ax.plot([ends[0][0], ends[1][0]], [i, i], color=color, lw=1.5, zorder=2)
        for side, (x, beyond, bound) in enumerate(ends):
            if not beyond:
                ax.plot([x], [i], "|", color=color, ms=8, mew=1.5)
                continue
            ax.plot([x], [i], ">" if side else "<", color=color, ms=7, clip_on=False)
            ax.annotate(
                f"→ {bound:.3g}" if side else f"{bound:.3g} ←",
                (x, i),
                xytext=(-5 if side else 5, 6),
                textcoords="offset points",
                ha="right" if side else "left",
                fontsize=7.5,
                color=color,
            )
    ax.axvline(reference, color=REFERENCE_COLOR, lw=1, ls="--")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="x", alpha=0.3)


def reads_fewer(rows: pd.DataFrame) -> bool:
    """Whether the headline reads "arm feeds N× fewer": its total-token ratio (else the median ratio) is < 1.

    The report phrases a ratio below 1 as "N× fewer" with N = 1/ratio; figures follow the same direction.
    """
    totals = rows.loc[rows["metric"] == "total_tokens", "estimate"] if "metric" in rows.columns else rows["estimate"]
    estimates = pd.to_numeric(totals if totals.notna().any() else rows["estimate"], errors="coerce")
    return bool(estimates.median() < 1) if estimates.notna().any() else False


def oriented(rows: pd.DataFrame, fewer: bool) -> pd.DataFrame:
    """Ratio rows as "times fewer" (baseline / arm: estimate and bounds inverted, bounds swapped) or as given."""
    if not fewer:
        return rows
    with np.errstate(divide="ignore"):
        inverse = {c: 1 / pd.to_numeric(rows[c], errors="coerce").astype(float) for c in ("estimate", "lower", "upper")}
    return rows.assign(estimate=inverse["estimate"], lower=inverse["upper"], upper=inverse["lower"])


def ratio_axis_label(fewer: bool) -> str:
    """The ratio axis's label in the direction :func:`reads_fewer` chose, so a reader knows which side is cheaper."""
    if fewer:
        return "times fewer = mean(baseline) / mean(arm), 95% CI\nright of 1: the arm uses less"
    return "times more = mean(arm) / mean(baseline), 95% CI\nright of 1: the arm uses more"


def _forest_limits(rows: pd.DataFrame, spread: float = FOREST_SPREAD) -> tuple[float, float]:
    """Log-axis range of a ratio forest: every bound and 1, but no further than ``spread`` ×/÷ the estimates.

    Why: a bootstrap bound of a five-run arm can sit 50× away from its estimate; drawn to scale it leaves
    the estimates in a corner of the axis. Bounds beyond the range are drawn as labelled arrows instead.
    """
    estimates = pd.to_numeric(rows["estimate"], errors="coerce").astype(float).to_numpy()
    estimates = np.append(estimates[np.isfinite(estimates) & (estimates > 0)], 1.0)
    bounds = rows[["lower", "upper"]].apply(pd.to_numeric, errors="coerce").astype(float).to_numpy().ravel()
    everything = np.append(estimates, bounds[np.isfinite(bounds) & (bounds > 0)])
    pad = 1.12
    low = max(everything.min() / pad, estimates.min() / spread)
    high = min(everything.max() * pad, estimates.max() * spread)
    return float(low), float(high)


def ratio_forest(ratios: pd.DataFrame, design: Design) -> Figure:
    """Every (comparison, metric) ratio with its CI; grades (differences) on their own axis.

    The ratio axis runs the way the headline reads: when the headline says "arm feeds N× fewer total
    tokens", every ratio is drawn as N = mean(baseline) / mean(arm), right of 1 meaning the arm uses less.
    The log axis spans the estimates (see :func:`_forest_limits`); a bound beyond it is an arrow with its
    value. Hollow markers flag what a reader must discount: cross-run stitches and n < 5.
    """
    require_columns(ratios, ["metric", "estimate", "lower", "upper"], "ratios")
    usable = ratios[ratios["estimate"].notna()]
    skipped = sorted(set(ratios.loc[ratios["estimate"].isna(), "metric"].astype(str)))
    ratio_rows = usable[usable["metric"] != "grade"]
    grade_rows = usable[usable["metric"] == "grade"]
    n_axes = 1 + (not grade_rows.empty)
    heights = [max(len(ratio_rows), 1)] + ([max(len(grade_rows), 1)] if n_axes == 2 else [])
    fig = figure(figsize=(9, 1.6 + 0.42 * sum(heights) + 0.6 * n_axes))
    axes = fig.subplots(n_axes, 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    colors = arm_colors(figure_arms(design, *(ratios[c] for c in ("arm", "baseline") if c in ratios.columns)))
    fewer = reads_fewer(ratio_rows) if not ratio_rows.empty else False
    if ratio_rows.empty:
        empty_axes(axes[0], "no ratio estimates")
    else:
        shown = oriented(ratio_rows, fewer)
        values = shown[["estimate", "lower", "upper"]].to_numpy(float)
        limits = _forest_limits(shown) if np.nanmin(values) > 0 else None  # a log axis where every value is > 0
        forest_axis(axes[0], shown, colors, 1.0, limits=limits)
        if limits is not None:
            axes[0].set_xscale("log")
            axes[0].set_xlim(*limits)
            # Within a decade, 1-2-5 ticks leave one or two labels: use a finer set there.
            subs = (1.0, 2.0, 5.0) if limits[1] / limits[0] > 10 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
            axes[0].xaxis.set_major_locator(LogLocator(subs=subs))
            axes[0].xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}×"))
            axes[0].xaxis.set_minor_formatter(NullFormatter())
        axes[0].set_xlabel(ratio_axis_label(fewer))
    if n_axes == 2:
        forest_axis(axes[1], grade_rows, colors, 0.0)
        axes[1].set_xlabel("grade difference mean(arm) − mean(baseline), 95% CI")
    notes = ["hollow marker: cross-run stitch (not one interleaved batch) or n < 5 in an arm"]
    if skipped:
        notes.append(f"no estimate (not drawn): {', '.join(skipped)}")
    title = f"Arm vs baseline: times {'fewer' if fewer else 'more'}, with 95% CIs"
    return finish(fig, title, design, n=ratios_n(ratios), notes=notes)
