"""The warmth figure: the uncached ratio as a function of cache warmth, each observed batch a point on it.

Why a figure of its own: one uncached ratio is one point on a curve that warmth moves (docs/method.md#warmth),
so uncached tokens are drawn only here or beside their observed hit rates, never blended with total tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from kit.charts.style import ARM_PALETTE, REFERENCE_COLOR, arm_colors, figure, figure_arms, finish, require_columns
from kit.records import Design

# The sweep's total_ratio is mean input tokens a / b: what the uncached ratio equals with no cache read.
INPUT_LABEL = "input-token ratio = the cold end"
TOTAL_LABEL = "total-token ratio, observed"
# A replayed pair whose hit rates span less than this (half a point) has no warmth range: it is drawn as one point.
FLAT_WARMTH = 0.005


def _pair_text(pairs: list[tuple[str, str]]) -> str:
    """'batching / placebo' for one replayed pair; several pairs are named in the legend instead."""
    return f"{pairs[0][0]} / {pairs[0][1]}" if len(pairs) == 1 else "arm / baseline (legend)"


def warmth_vs_ratio(
    warmth: pd.DataFrame, observed: pd.DataFrame, design: Design, n: dict[str, int] | None = None
) -> Figure:
    """The uncached ratio as a function of cache warmth, with each observed batch as one point on it.

    Why: the same code gives different uncached ratios at different warmth (docs/method.md#warmth). The
    replayed curve shows the whole line and the observed batches show where on it this experiment sampled.
    Two references are drawn apart because they differ: the sweep's cold end is the *input*-token ratio
    (no cache read, so uncached = input), while the headline's total-token ratio also counts output.
    The x axis spans the hit rates actually replayed: the sweep's levels are cache *survival* 0–100 %,
    and full survival reaches only the hit rate the batch's prompts allow (often far below 100 %).
    """
    fig = figure(figsize=(8, 5.4))
    ax = fig.add_subplot()
    arms = figure_arms(
        design,
        *(frame[c] for frame in (warmth, observed) for c in ("arm_a", "arm_b") if c in frame.columns),
    )
    notes = ["x = mean of the two arms' cache hit rates"]
    xs: list[float] = []
    pairs: list[tuple[str, str]] = []
    drawn = Drawn()
    if not warmth.empty:
        pairs = _replayed_curves(ax, warmth, arm_colors(arms), xs, notes, drawn)
    if not observed.empty:
        named = _observed_batches(ax, observed, xs)
        pairs = pairs or named
    intervals = ["band"] * bool(drawn.band) + ["bar on a replayed point"] * bool(drawn.points)
    if intervals:
        notes[0] += f"; {' and '.join(intervals)} = bootstrap CI of the replayed ratio"
    why = _why_no_curve(warmth, drawn)
    if why:
        ax.text(0.5, 0.5, f"no warmth curve: {why}", transform=ax.transAxes, ha="center", va="center", fontsize=10,
                color="#666666", wrap=True)  # fmt: skip
    finite = [v for v in xs if np.isfinite(v)]
    reach = max(finite, default=1.0)
    ax.set_xlim(0, max(reach * 1.08, 0.05))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("cache hit rate (warmth)")
    pair = _pair_text(pairs) if pairs else "a / b"
    ax.set_ylabel(f"uncached-token ratio {pair}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return finish(fig, f"Uncached-token ratio {pair} vs cache warmth", design, n=n, notes=notes)


@dataclass
class Drawn:
    """What :func:`_replayed_curves` drew: how many curves with a band, and the hit rate of each pair drawn as a
    single point (a pair without a warmth range)."""

    band: int = 0
    points: list[float] = field(default_factory=list)


def _why_no_curve(warmth: pd.DataFrame, drawn: Drawn) -> str:
    """Why the figure holds no replayed curve, said inside the axis; empty when some curve is drawn."""
    if drawn.band:
        return ""
    if warmth.empty:
        return "this analysis has no warmth sweep"
    rate = max(drawn.points, default=0.0)
    if rate == 0:
        return "no cache hit at any replayed warmth, so the replayed ratio is one point"
    return f"every replayed warmth gives the same {rate:.0%} hit rate, so the replayed ratio is one point"


def _replayed_curves(
    ax: Axes, warmth: pd.DataFrame, colors: dict, xs: list[float], notes: list[str], drawn: Drawn
) -> list[tuple[str, str]]:
    """Each arm pair's replayed curve with its band and its cold end (the input-token ratio); the pairs drawn.

    A pair whose replayed hit rates do not move (no cache hit at any survival, say) has no curve to draw: it is
    one point with its interval as a bar, and ``drawn`` records which it was, so that the legend and the notes
    name only what is on the axis. Appends the hit rates to ``xs`` and, where full survival stops short of
    100 %, a note.
    """
    # docs/tables.md names the band lower/upper; kit.analysis.cachemodel.warmth_sweep writes ratio_lower/ratio_upper.
    warmth = warmth.rename(columns={"ratio_lower": "lower", "ratio_upper": "upper"})
    require_columns(warmth, ["hit_rate_a", "hit_rate_b", "ratio", "lower", "upper", "total_ratio"], "warmth")
    groups = warmth.groupby(["arm_a", "arm_b"], sort=True) if "arm_a" in warmth.columns else [(("a", "b"), warmth)]
    pairs = []
    for (arm_a, arm_b), curve in groups:
        pairs.append((str(arm_a), str(arm_b)))
        curve = curve.assign(x=(curve["hit_rate_a"] + curve["hit_rate_b"]) / 2).sort_values("x")
        color = colors.get(str(arm_a), ARM_PALETTE[0])
        x = curve["x"].to_numpy(float)
        xs += list(x)
        ratio, lower, upper = (curve[c].to_numpy(float) for c in ("ratio", "lower", "upper"))
        if np.nanmax(x) - np.nanmin(x) < FLAT_WARMTH:
            _replayed_point(ax, float(np.nanmedian(x)), ratio, lower, upper, color, f"{arm_a} / {arm_b}")
            drawn.points.append(float(np.nanmedian(x)))
        else:
            ax.fill_between(x, lower, upper, color=color, alpha=0.25, lw=0)
            ax.plot(x, ratio, color=color, lw=2, label=f"replayed {arm_a} / {arm_b}")
            drawn.band += 1
        cold = float(np.nanmedian(curve["total_ratio"].to_numpy(float)))
        which = f" {arm_a} / {arm_b}" if len(groups) > 1 else ""
        line_color = color if which else REFERENCE_COLOR  # several pairs: each reference line in its pair's colour
        ax.axhline(cold, color=line_color, ls="--", lw=1.2, label=f"{INPUT_LABEL}{which} ({cold:.2f})")
        if len(x) and 0 < np.nanmax(x) < 0.995:
            notes.append(
                f"full cache survival ({arm_a} / {arm_b}) reaches a {np.nanmax(x):.0%} mean hit rate: "
                "what each request appends is not yet cached"
            )
    return pairs


def _replayed_point(
    ax: Axes, x: float, ratio: np.ndarray, lower: np.ndarray, upper: np.ndarray, color: str, pair: str
) -> None:
    """A replayed pair without a warmth range: its ratio at its one hit rate, the bootstrap interval as a bar."""
    y, lo, hi = (float(np.nanmedian(v)) for v in (ratio, lower, upper))
    yerr = [[max(y - lo, 0)], [max(hi - y, 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
    bars = ax.errorbar([x], [y], yerr=yerr, fmt="s", color=color, ms=13, mfc="none", mew=2, capsize=5, zorder=5,
                       label=f"replayed {pair}: one point (no warmth range)")  # fmt: skip  # hollow: rings a diamond
    for artist in (bars.lines[0], *bars.lines[1], *bars.lines[2]):
        artist.set_clip_on(False)  # at a 0 % hit rate the point sits on the axis's edge


def _observed_batches(ax: Axes, observed: pd.DataFrame, xs: list[float]) -> list[tuple[str, str]]:
    """Each observed batch as a labelled diamond, and the headline's total-token ratio as a dotted line; the
    arm pairs the batches name. Appends their hit rates to ``xs``."""
    require_columns(observed, ["batch", "hit_rate_a", "hit_rate_b", "uncached_ratio"], "observed")
    x = ((observed["hit_rate_a"] + observed["hit_rate_b"]) / 2).to_numpy(float)
    xs += list(x)
    y = observed["uncached_ratio"].to_numpy(float)
    if "total_ratio" in observed.columns and observed["total_ratio"].notna().any():
        keys = ["arm_a", "arm_b"] if {"arm_a", "arm_b"} <= set(observed.columns) else []
        per_pair = list(observed.groupby(keys, sort=True)) if keys else [(("a", "b"), observed)]
        for (arm_a, arm_b), rows in per_pair:  # one line per pair: a median over pairs is no ratio of anything
            total = float(np.nanmedian(rows["total_ratio"].to_numpy(float)))
            n = int(rows["total_ratio"].notna().sum())
            several = f", median of {n} batches" if n > 1 else ""
            which = f" {arm_a} / {arm_b}" if len(per_pair) > 1 else ""
            label = f"{TOTAL_LABEL}{which}{several} ({total:.2f})"
            ax.axhline(total, color=REFERENCE_COLOR, ls=":", lw=1.6, label=label)
    ax.scatter(x, y, marker="D", s=46, color="black", zorder=4, label="observed batches", clip_on=False)
    for xi, yi, batch in zip(x, y, observed["batch"].astype(str), strict=True):
        ax.annotate(batch, (xi, yi), xytext=(5, 5), textcoords="offset points", fontsize=8)
    if not {"arm_a", "arm_b"} <= set(observed.columns):
        return []
    return [(str(a), str(b)) for a, b in observed[["arm_a", "arm_b"]].drop_duplicates().itertuples(index=False)]
