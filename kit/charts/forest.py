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
    truthy,
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


def _row_label(row: pd.Series, with_metric: bool = True) -> tuple[str, set[str]]:
    """Label of one ratio row and why its dot must be drawn hollow (``stitch``, ``small_n``; empty: filled)."""
    label = str(row.get("comparison", ""))
    if with_metric:
        label += f" · {METRIC_LABELS.get(row['metric'], row['metric'])}"
    if row["metric"] == "uncached_input_tokens":
        ha, hb = row.get("hit_rate_arm"), row.get("hit_rate_baseline")
        hits = "/".join("?" if pd.isna(h) else f"{h:.0%}" for h in (ha, hb))
        label += f" (hit {hits})"
    hollow = set()
    if str(row.get("label") or "") == "cross-run stitch":
        label += " (stitch)"
        hollow.add("stitch")
    if truthy(row.get("small_n")):
        label += " (n<5)"
        hollow.add("small_n")
    return label, hollow


def with_bound_flags(rows: pd.DataFrame) -> pd.DataFrame:
    """Ratio rows with ``lower_flag`` / ``upper_flag``: "capped", "beyond" or "" for each bound.

    Why: a bound of a row flagged ``bound_beyond_data`` is not a confidence bound. Unpaired, the analysis capped
    it at the most extreme ratio any resample of the runs gives ("capped": the bound sits on ``resample_min`` /
    ``resample_max``); paired, it is left where the interval put it, past every per-pair ratio ("beyond"). Which
    bound it was is read off the resample range; a flagged row without that range marks both bounds, by its
    pairing.
    """
    if rows.empty:
        return rows.assign(lower_flag=pd.Series(dtype=str), upper_flag=pd.Series(dtype=str))
    flagged = rows.get("bound_beyond_data", pd.Series(False, index=rows.index)).map(truthy).to_numpy(bool)
    paired = rows.get("paired", pd.Series(False, index=rows.index)).map(truthy).to_numpy(bool)
    unknown = np.where(paired, "beyond", "capped")
    flags = {}
    for side, edge, sign in (("lower", "resample_min", 1.0), ("upper", "resample_max", -1.0)):
        bound = pd.to_numeric(rows[side], errors="coerce").astype(float).to_numpy()
        limit = pd.to_numeric(rows.get(edge, pd.Series(np.nan, index=rows.index)), errors="coerce")
        limit = limit.astype(float).to_numpy()
        with np.errstate(invalid="ignore"):
            inside = sign * (bound - limit)  # > 0: within the runs' range, 0: on its end, < 0: past it
            tolerance = 1e-9 * np.abs(limit)
            kind = np.select(
                [np.isnan(limit), inside < -tolerance, inside <= tolerance], [unknown, "beyond", "capped"], ""
            )
        flags[f"{side}_flag"] = np.where(flagged & np.isfinite(bound), kind, "")
    return rows.assign(**flags)


def forest_axis(
    ax: Axes,
    rows: pd.DataFrame,
    colors: dict[str, str],
    reference: float,
    with_metric: bool = True,
    limits: tuple[float, float] | None = None,
) -> set[str]:
    """One row per estimate: point, CI line and end ticks; what it drew that a footnote must explain.

    A bound beyond ``limits`` ends in an arrow at the axis edge labelled with its value ("→ 76.6"), so one
    absurd bound cannot squash the rest. A bound that is not a confidence bound (:func:`with_bound_flags`)
    ends in a hollow square (capped) or a cross (beyond the paired runs) instead of a tick. A row with an
    estimate but no interval says why beside its dot. The returned kinds (``stitch``, ``small_n``,
    ``capped``, ``beyond``) are exactly the markers drawn, so :func:`marker_notes` explains no marker the
    plot lacks.
    """
    rows = rows if {"lower_flag", "upper_flag"} <= set(rows.columns) else with_bound_flags(rows)
    labels = []
    drawn: set[str] = set()
    for i, (_, row) in enumerate(rows.iterrows()):
        label, hollow = _row_label(row, with_metric)
        labels.append(label)
        drawn |= hollow
        color = colors.get(str(row.get("arm")), ARM_PALETTE[0])
        est, lo, hi = (float(row[c]) if pd.notna(row[c]) else np.nan for c in ("estimate", "lower", "upper"))
        ax.plot([est], [i], "o", color=color, ms=7, mfc="white" if hollow else color, mec=color, mew=1.6, zorder=3)
        if np.isnan(lo) or np.isnan(hi):
            _no_interval(ax, i, est, row, limits)
            continue
        ends = []  # (where drawn, beyond the axis, the bound, its flag)
        for bound, side in ((lo, 0), (hi, 1)):
            flag = str(row[("lower_flag", "upper_flag")[side]])
            drawn |= {flag} - {""}
            edge = None if limits is None else limits[side]
            if edge is not None and (bound < edge if side == 0 else bound > edge):
                ends.append((edge, True, bound, flag))
            else:
                ends.append((bound, False, bound, flag))
        ax.plot([ends[0][0], ends[1][0]], [i, i], color=color, lw=1.5, zorder=2)
        for side, (x, beyond, bound, flag) in enumerate(ends):
            if not beyond:
                _bound_end(ax, x, i, flag, color)
                continue
            ax.plot([x], [i], ">" if side else "<", color=color, ms=7, clip_on=False)
            flagged = f" ({_FLAG_WORDS[flag]})" if flag else ""
            ax.annotate(
                f"→ {bound:.3g}{flagged}" if side else f"{bound:.3g}{flagged} ←",
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
    return drawn


_FLAG_WORDS = {"capped": "capped", "beyond": "beyond the runs"}
# The end of each kind of bound: a confidence bound's tick, a capped bound's hollow square, a flagged one's cross.
_END_MARKERS = {"": ("|", 8), "capped": ("s", 6), "beyond": ("x", 7)}


def _bound_end(ax: Axes, x: float, y: int, flag: str, color: str) -> None:
    marker, size = _END_MARKERS[flag]
    face = "white" if flag == "capped" else color
    ax.plot([x], [y], ls="", marker=marker, ms=size, color=color, mec=color, mfc=face, mew=1.5, zorder=3)


def _no_interval(ax: Axes, y: int, est: float, row: pd.Series, limits: tuple[float, float] | None) -> None:
    """Beside a dot without an interval, why it has none ("no variation in either arm"), on the side with room."""
    if not np.isfinite(est):
        return
    note = str(row.get("note") or "")
    if "zero variance in both arms" in note:
        text = "no variation in either arm"
    elif "too few runs" in note or truthy(row.get("small_n")):
        text = "too few runs: no interval"
    else:
        text = "no interval"
    middle = reference_middle(limits) if limits is not None else est
    right = est <= middle
    ax.annotate(
        text,
        (est, y),
        xytext=(8 if right else -8, 0),
        textcoords="offset points",
        ha="left" if right else "right",
        va="center",
        fontsize=8,
        color="#444444",
    )


def reference_middle(limits: tuple[float, float]) -> float:
    """The middle of an axis range: geometric on a ratio (log) axis, where every limit is positive."""
    low, high = limits
    return float(np.sqrt(low * high)) if low > 0 else (low + high) / 2


def grade_limits(rows: pd.DataFrame) -> tuple[float, float]:
    """A grade-difference axis centred on 0: its estimates and bounds with room, never narrower than ±0.25.

    Why a floor: grades are fractions 0–1, so a difference lies within ±1; an autoscaled axis around a lone
    0 (every grade equal) reads ±0.04 and suggests a precision nobody measured.
    """
    values = rows[["estimate", "lower", "upper"]].apply(pd.to_numeric, errors="coerce").astype(float).to_numpy()
    finite = np.abs(values[np.isfinite(values)])
    half = min(max(0.25, 1.2 * float(finite.max(initial=0.0))), 1.05)
    return -half, half


def marker_notes(drawn: set[str]) -> list[str]:
    """Footnotes for the markers a forest drew (:func:`forest_axis`'s kinds), and for no other."""
    hollow = [why for kind, why in (("stitch", "a cross-run stitch (not one interleaved batch)"),
                                    ("small_n", "n < 5 in an arm")) if kind in drawn]  # fmt: skip
    notes = [f"hollow dot: {' or '.join(hollow)}"] if hollow else []
    if "capped" in drawn:
        notes.append(
            "hollow square at a bound: capped where these runs end, the most extreme ratio any resample of them "
            "gives, not a confidence bound"
        )
    if "beyond" in drawn:
        notes.append("cross at a bound: beyond every ratio any resample of these runs gives (flagged, not capped)")
    return notes


def reads_fewer(rows: pd.DataFrame) -> bool:
    """Whether the headline reads "arm feeds N× fewer": its total-token ratio (else the median ratio) is < 1.

    The report phrases a ratio below 1 as "N× fewer" with N = 1/ratio; figures follow the same direction.
    """
    totals = rows.loc[rows["metric"] == "total_tokens", "estimate"] if "metric" in rows.columns else rows["estimate"]
    estimates = pd.to_numeric(totals if totals.notna().any() else rows["estimate"], errors="coerce")
    return bool(estimates.median() < 1) if estimates.notna().any() else False


def oriented(rows: pd.DataFrame, fewer: bool) -> pd.DataFrame:
    """Ratio rows as "times fewer" (baseline / arm: estimate and bounds inverted, bounds and their flags swapped)
    or as given."""
    if not fewer:
        return rows
    with np.errstate(divide="ignore"):
        inverse = {c: 1 / pd.to_numeric(rows[c], errors="coerce").astype(float) for c in ("estimate", "lower", "upper")}
    shown = rows.assign(estimate=inverse["estimate"], lower=inverse["upper"], upper=inverse["lower"])
    if {"lower_flag", "upper_flag"} <= set(rows.columns):  # a flag stays with its bound
        shown = shown.assign(lower_flag=rows["upper_flag"], upper_flag=rows["lower_flag"])
    return shown


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
    value. Hollow dots flag what a reader must discount (cross-run stitches, n < 5), hollow squares and crosses
    the bounds that are not confidence bounds (:func:`with_bound_flags`); the footnote explains the markers drawn
    and no other. The grade panel keeps a ±0.25 axis at least (:func:`grade_limits`), and a row without an
    interval says why beside its dot ("no variation in either arm").
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
    drawn: set[str] = set()
    if ratio_rows.empty:
        empty_axes(axes[0], "no ratio estimates")
    else:
        shown = oriented(with_bound_flags(ratio_rows), fewer)
        values = shown[["estimate", "lower", "upper"]].to_numpy(float)
        limits = _forest_limits(shown) if np.nanmin(values) > 0 else None  # a log axis where every value is > 0
        drawn |= forest_axis(axes[0], shown, colors, 1.0, limits=limits)
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
        limits = grade_limits(grade_rows)
        drawn |= forest_axis(axes[1], grade_rows, colors, 0.0, limits=limits)
        axes[1].set_xlim(*limits)
        axes[1].set_xlabel("grade difference mean(arm) − mean(baseline), 95% CI")
    notes = marker_notes(drawn)
    if skipped:
        notes.append(f"no estimate (not drawn): {', '.join(skipped)}")
    title = f"Arm vs baseline: times {'fewer' if fewer else 'more'}, with 95% CIs"
    return finish(fig, title, design, n=ratios_n(ratios), notes=notes)
