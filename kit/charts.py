"""Figures of a batch, drawn from the analysis tables (docs/tables.md) and nothing else.

Why this shape: every figure has to carry its own context, because figures travel alone (pasted into
an issue, a slide, a PR). So each one states the batch id(s), the schedule, the isolation and n per
arm, carries its uncertainty, and says "SIMULATION" when the embedded provider produced the numbers.
Total tokens and uncached tokens are never blended: uncached appears only with its observed hit rates
or on the warmth curve that shows why one uncached ratio is just one point (docs/method.md#warmth).

Figures are built on ``matplotlib.figure.Figure`` directly, not pyplot: no global state, no backend
choice, nothing to close, and Jupyter's inline formatter still renders a returned Figure.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, PercentFormatter

from kit.analysis.metrics import arm_summary
from kit.analysis.occupancy_block import COMPARISON_COLUMNS
from kit.errors import InputError
from kit.files import atomic_write
from kit.records import Design

SIMULATION_CAPTION = "SIMULATION (embedded provider) — not a real model's cost"
# Colour-blind-safe qualitative palette without its grey, which is kept for reference lines.
ARM_PALETTE = [c for c in sns.color_palette("colorblind").as_hex() if c != "#949494"]
CATEGORY_PALETTE = sns.color_palette("Set2").as_hex()
REFERENCE_COLOR = "#555555"
METRIC_LABELS = {
    "total_tokens": "total tokens",
    "uncached_input_tokens": "uncached tokens",
    "structural_uncached": "structural uncached (modelled)",
    "cycles": "cycles",
    "output_tokens": "output tokens",
    "cost_usd": "cost (USD)",
    "credits": "credits",
    "grade": "grade",
}
_BATCH_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
# The sweep's total_ratio is mean input tokens a / b: what the uncached ratio equals with no cache read.
INPUT_LABEL = "input-token ratio = the cold end"
TOTAL_LABEL = "total-token ratio, observed"
FOREST_SPREAD = 4.0  # a ratio forest spans its estimates ×/÷ this (bounds beyond it become arrows)


# ---------------------------------------------------------------- colours and captions


def _hash_colors(names: Iterable[str], palette: list[str]) -> dict[str, str]:
    """Name -> colour from a stable hash (not Python's salted ``hash``), probing on a collision.

    Probing runs over the sorted names, so a given set of names always gets the same colours; a name
    keeps its hashed colour in every figure and batch unless another name in the same set hashed to it.
    """
    colors: dict[str, str] = {}
    for name in sorted({str(n) for n in names}):
        index = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(palette)
        taken = set(colors.values())
        for step in range(len(palette)):
            candidate = palette[(index + step) % len(palette)]
            if candidate not in taken:
                break
        colors[name] = candidate
    return colors


def arm_colors(arms: Iterable[str]) -> dict[str, str]:
    """Fixed colour per arm name, the same in every figure and every batch (hex strings)."""
    return _hash_colors(arms, ARM_PALETTE)


def _figure_arms(design: Design, *frames_columns: Iterable) -> list[str]:
    """Every arm a figure may colour: the design's arms plus those in the data, so colours agree."""
    arms = set(design.arms)
    for values in frames_columns:
        arms.update(str(v) for v in values if pd.notna(v))
    return sorted(arms)


def _batches_text(design: Design, data_batches: Iterable | None = None) -> str:
    batch: str | list[str] = design.batch
    if not batch and data_batches is not None:
        batch = sorted({str(b) for b in data_batches if pd.notna(b)})
    if isinstance(batch, list):
        return f"batches {', '.join(batch)}" if len(batch) != 1 else f"batch {batch[0]}"
    return f"batch {batch}" if batch else "batch (not given)"


def _n_text(n: dict[str, int] | int | None) -> str:
    if n is None:
        return "n per arm not given"
    if isinstance(n, dict):
        values = set(n.values())
        if len(values) == 1:
            return f"n = {values.pop()} per arm"
        return "n = " + ", ".join(f"{v} ({a})" for a, v in n.items())
    return f"n = {n} per arm"


def design_line(design: Design, n: dict[str, int] | int | None = None, data_batches: Iterable | None = None) -> str:
    """One line of design facts: batch id(s), schedule, isolation, n per arm (data's n wins over design's)."""
    schedule = design.schedule or "not given"
    isolation = design.isolation or "not given"
    n = n if n is not None else design.runs_per_arm
    return f"{_batches_text(design, data_batches)} · schedule {schedule} · isolation {isolation} · {_n_text(n)}"


def _finish(fig: Figure, title: str, design: Design, n=None, data_batches=None, notes: Iterable[str] = ()) -> Figure:
    """Title, design subtitle, notes and the simulation caption, laid out around the axes."""
    subtitle = textwrap.fill(design_line(design, n, data_batches), 120)
    footer = [textwrap.fill(note, 140) for note in notes if note]
    sim = design.simulated
    top = 1 - (0.55 + 0.28 * subtitle.count("\n")) / fig.get_figheight()
    bottom_lines = sum(f.count("\n") + 1 for f in footer) + (1 if sim else 0)
    bottom = min(0.3, (0.12 + 0.2 * bottom_lines) / fig.get_figheight())
    fig.tight_layout(rect=(0, bottom, 1, top))
    fig.suptitle(title, y=1 - 0.12 / fig.get_figheight(), va="top", fontsize=12, fontweight="bold")
    fig.text(0.5, 1 - 0.4 / fig.get_figheight(), subtitle, ha="center", va="top", fontsize=8.5, color="#333333")
    y = 0.06 / fig.get_figheight()
    if sim:
        fig.text(0.5, y, SIMULATION_CAPTION, ha="center", va="bottom", fontsize=9, color="#b00020", fontweight="bold")
        y += 0.2 / fig.get_figheight()
    for note in reversed(footer):
        fig.text(0.5, y, note, ha="center", va="bottom", fontsize=7.5, color="#444444")
        y += 0.2 * (note.count("\n") + 1) / fig.get_figheight()
    return fig


def _empty(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _thousands(ax: Axes, axis: str = "y") -> None:
    """Token axes in plain thousands (y) or compact k/M (x, where labels sit side by side)."""
    if axis == "y":
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        return
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.xaxis.set_major_formatter(
        FuncFormatter(
            lambda v, _pos: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if abs(v) >= 1e3 else f"{v:g}"
        )
    )


def _require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing columns {missing} (docs/tables.md); got {list(df.columns)}")


def _ok_trials(trials: pd.DataFrame) -> pd.DataFrame:
    if "status" not in trials.columns:
        return trials
    return trials[trials["status"].astype("string").fillna("ok") == "ok"]


def _data_n(df: pd.DataFrame) -> dict[str, int]:
    return {str(arm): len(g) for arm, g in df.groupby("arm", sort=True)}


def save(fig: Figure, folder: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``name.png`` (dpi 120) and ``name.svg`` into ``folder``; returns (png, svg).

    SVG metadata and ids are pinned so re-running the plot stage on a snapshot gives identical files.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    atomic_write(png, lambda tmp: fig.savefig(tmp, dpi=120, format="png", metadata={"Software": None}))
    with matplotlib.rc_context({"svg.hashsalt": "agent-ab-kit"}):
        atomic_write(svg, lambda tmp: fig.savefig(tmp, format="svg", metadata={"Date": None}))
    return png, svg


# ---------------------------------------------------------------- warmth


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
    fig = Figure(figsize=(8, 5.4))
    ax = fig.add_subplot()
    arms = _figure_arms(
        design,
        *(frame[c] for frame in (warmth, observed) for c in ("arm_a", "arm_b") if c in frame.columns),
    )
    notes = ["x = mean of the two arms' cache hit rates; band = bootstrap CI of the replayed ratio"]
    xs: list[float] = []
    pairs: list[tuple[str, str]] = []
    if warmth.empty:
        notes.append("no warmth sweep in this analysis")
    else:
        pairs = _replayed_curves(ax, warmth, arm_colors(arms), xs, notes)
    if not observed.empty:
        named = _observed_batches(ax, observed, xs)
        pairs = pairs or named
    finite = [v for v in xs if np.isfinite(v)]
    reach = max(finite, default=1.0)
    if finite and reach == 0:
        notes.append("no cache hit at any replayed warmth: the curve is one point")
    ax.set_xlim(0, max(reach * 1.08, 0.05))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("cache hit rate (warmth)")
    pair = _pair_text(pairs) if pairs else "a / b"
    ax.set_ylabel(f"uncached-token ratio {pair}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return _finish(fig, f"Uncached-token ratio {pair} vs cache warmth", design, n=n, notes=notes)


def _replayed_curves(
    ax: Axes, warmth: pd.DataFrame, colors: dict, xs: list[float], notes: list[str]
) -> list[tuple[str, str]]:
    """Each arm pair's replayed curve with its band and its cold end (the input-token ratio); the pairs drawn.
    Appends the curves' hit rates to ``xs`` and, where full survival stops short of 100 %, a note."""
    # docs/tables.md names the band lower/upper; kit.analysis.cachemodel.warmth_sweep writes ratio_lower/ratio_upper.
    warmth = warmth.rename(columns={"ratio_lower": "lower", "ratio_upper": "upper"})
    _require(warmth, ["hit_rate_a", "hit_rate_b", "ratio", "lower", "upper", "total_ratio"], "warmth")
    groups = warmth.groupby(["arm_a", "arm_b"], sort=True) if "arm_a" in warmth.columns else [(("a", "b"), warmth)]
    pairs = []
    for (arm_a, arm_b), curve in groups:
        pairs.append((str(arm_a), str(arm_b)))
        curve = curve.assign(x=(curve["hit_rate_a"] + curve["hit_rate_b"]) / 2).sort_values("x")
        color = colors.get(str(arm_a), ARM_PALETTE[0])
        x = curve["x"].to_numpy(float)
        xs += list(x)
        ax.fill_between(
            x, curve["lower"].to_numpy(float), curve["upper"].to_numpy(float), color=color, alpha=0.25, lw=0
        )
        ax.plot(x, curve["ratio"].to_numpy(float), color=color, lw=2, label=f"replayed {arm_a} / {arm_b}")
        cold = float(np.nanmedian(curve["total_ratio"].to_numpy(float)))
        ax.axhline(cold, color=REFERENCE_COLOR, ls="--", lw=1.2, label=f"{INPUT_LABEL} ({cold:.2f})")
        if len(x) and 0 < np.nanmax(x) < 0.995:
            notes.append(
                f"full cache survival ({arm_a} / {arm_b}) reaches a {np.nanmax(x):.0%} mean hit rate: "
                "what each request appends is not yet cached"
            )
    return pairs


def _observed_batches(ax: Axes, observed: pd.DataFrame, xs: list[float]) -> list[tuple[str, str]]:
    """Each observed batch as a labelled diamond, and the headline's total-token ratio as a dotted line; the
    arm pairs the batches name. Appends their hit rates to ``xs``."""
    _require(observed, ["batch", "hit_rate_a", "hit_rate_b", "uncached_ratio"], "observed")
    x = ((observed["hit_rate_a"] + observed["hit_rate_b"]) / 2).to_numpy(float)
    xs += list(x)
    y = observed["uncached_ratio"].to_numpy(float)
    if "total_ratio" in observed.columns and observed["total_ratio"].notna().any():
        total = float(np.nanmedian(observed["total_ratio"].to_numpy(float)))
        several = f", median of {observed['total_ratio'].notna().sum()} batches" if len(observed) > 1 else ""
        ax.axhline(total, color=REFERENCE_COLOR, ls=":", lw=1.6, label=f"{TOTAL_LABEL}{several} ({total:.2f})")
    ax.scatter(x, y, marker="D", s=46, color="black", zorder=4, label="observed batches")
    for xi, yi, batch in zip(x, y, observed["batch"].astype(str), strict=True):
        ax.annotate(batch, (xi, yi), xytext=(5, 5), textcoords="offset points", fontsize=8)
    if not {"arm_a", "arm_b"} <= set(observed.columns):
        return []
    return [(str(a), str(b)) for a, b in observed[["arm_a", "arm_b"]].drop_duplicates().itertuples(index=False)]


# ---------------------------------------------------------------- ratios


def _ratios_n(ratios: pd.DataFrame) -> dict[str, int] | None:
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


def _forest_axis(
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


def _reads_fewer(rows: pd.DataFrame) -> bool:
    """Whether the headline reads "arm feeds N× fewer": its total-token ratio (else the median ratio) is < 1.

    The report phrases a ratio below 1 as "N× fewer" with N = 1/ratio; figures follow the same direction.
    """
    totals = rows.loc[rows["metric"] == "total_tokens", "estimate"] if "metric" in rows.columns else rows["estimate"]
    estimates = pd.to_numeric(totals if totals.notna().any() else rows["estimate"], errors="coerce")
    return bool(estimates.median() < 1) if estimates.notna().any() else False


def _oriented(rows: pd.DataFrame, fewer: bool) -> pd.DataFrame:
    """Ratio rows as "times fewer" (baseline / arm: estimate and bounds inverted, bounds swapped) or as given."""
    if not fewer:
        return rows
    with np.errstate(divide="ignore"):
        inverse = {c: 1 / pd.to_numeric(rows[c], errors="coerce").astype(float) for c in ("estimate", "lower", "upper")}
    return rows.assign(estimate=inverse["estimate"], lower=inverse["upper"], upper=inverse["lower"])


def _ratio_axis_label(fewer: bool) -> str:
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
    _require(ratios, ["metric", "estimate", "lower", "upper"], "ratios")
    usable = ratios[ratios["estimate"].notna()]
    skipped = sorted(set(ratios.loc[ratios["estimate"].isna(), "metric"].astype(str)))
    ratio_rows = usable[usable["metric"] != "grade"]
    grade_rows = usable[usable["metric"] == "grade"]
    n_axes = 1 + (not grade_rows.empty)
    heights = [max(len(ratio_rows), 1)] + ([max(len(grade_rows), 1)] if n_axes == 2 else [])
    fig = Figure(figsize=(9, 1.6 + 0.42 * sum(heights) + 0.6 * n_axes))
    axes = fig.subplots(n_axes, 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    colors = arm_colors(_figure_arms(design, *(ratios[c] for c in ("arm", "baseline") if c in ratios.columns)))
    fewer = _reads_fewer(ratio_rows) if not ratio_rows.empty else False
    if ratio_rows.empty:
        _empty(axes[0], "no ratio estimates")
    else:
        shown = _oriented(ratio_rows, fewer)
        values = shown[["estimate", "lower", "upper"]].to_numpy(float)
        limits = _forest_limits(shown) if np.nanmin(values) > 0 else None  # a log axis where every value is > 0
        _forest_axis(axes[0], shown, colors, 1.0, limits=limits)
        if limits is not None:
            axes[0].set_xscale("log")
            axes[0].set_xlim(*limits)
            # Within a decade, 1-2-5 ticks leave one or two labels: use a finer set there.
            subs = (1.0, 2.0, 5.0) if limits[1] / limits[0] > 10 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
            axes[0].xaxis.set_major_locator(LogLocator(subs=subs))
            axes[0].xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}×"))
            axes[0].xaxis.set_minor_formatter(NullFormatter())
        axes[0].set_xlabel(_ratio_axis_label(fewer))
    if n_axes == 2:
        _forest_axis(axes[1], grade_rows, colors, 0.0)
        axes[1].set_xlabel("grade difference mean(arm) − mean(baseline), 95% CI")
    notes = ["hollow marker: cross-run stitch (not one interleaved batch) or n < 5 in an arm"]
    if skipped:
        notes.append(f"no estimate (not drawn): {', '.join(skipped)}")
    title = f"Arm vs baseline: times {'fewer' if fewer else 'more'}, with 95% CIs"
    return _finish(fig, title, design, n=_ratios_n(ratios), notes=notes)


# ---------------------------------------------------------------- per-trial distributions


def arm_distributions(trials: pd.DataFrame, design: Design) -> Figure:
    """Total and uncached tokens per trial, per arm; points sit left→right in schedule order.

    Why the order: a drift over the batch (cache warming up, provider load) shows as a slope inside an
    arm's points, which a box alone would hide. Each point is labelled with its schedule position.
    """
    _require(trials, ["arm", "total_tokens", "uncached_input_tokens"], "trials")
    ok = _ok_trials(trials)
    order_col = "order_index" if "order_index" in ok.columns else "run"
    batches = sorted(ok["batch"].astype(str).unique()) if "batch" in ok.columns else []
    orders = pd.to_numeric(ok[order_col], errors="coerce").astype(float)
    panel = _DistributionPanel(
        arms=sorted(ok["arm"].astype(str).unique()),
        colors=arm_colors(_figure_arms(design, trials["arm"])),
        markers={b: _BATCH_MARKERS[i % len(_BATCH_MARKERS)] for i, b in enumerate(batches)},
        order_col=order_col,
        max_order=max(float(orders.max()), 1.0) if orders.notna().any() else 1.0,
    )
    fig = Figure(figsize=(10, 5.2))
    axes = fig.subplots(1, 2)
    unknown = 0
    for ax, metric, title in zip(
        axes, ("total_tokens", "uncached_input_tokens"), ("total tokens", "uncached tokens"), strict=True
    ):
        data = ok.assign(arm=ok["arm"].astype(str), value=pd.to_numeric(ok[metric], errors="coerce").astype(float))
        unknown = max(unknown, int(data["value"].isna().sum()))
        panel.draw(ax, data[data["value"].notna()], title)
    if len(batches) > 1:
        handles = [Line2D([], [], ls="", marker=panel.markers[b], color="grey", label=b) for b in batches]
        axes[1].legend(handles=handles, title="batch", fontsize=7, title_fontsize=7)
    notes = [f"points left→right and their numbers: position in the batch schedule ({order_col})"]
    if len(trials) > len(ok):
        notes.append(f"{len(trials) - len(ok)} failed trial(s) not drawn")
    if unknown:
        notes.append(f"{unknown} trial(s) with unknown usage not drawn (missing is not zero)")
    title = "Tokens per trial by arm (uncached depends on cache warmth)"
    return _finish(fig, title, design, n=_data_n(ok), data_batches=batches, notes=notes)


@dataclass(frozen=True)
class _DistributionPanel:
    """How one panel of :func:`arm_distributions` draws: arm positions and colours, batch markers, and the
    schedule position that places each point inside its arm."""

    arms: list[str]
    colors: dict
    markers: dict[str, str]
    order_col: str
    max_order: float

    def draw(self, ax: Axes, data: pd.DataFrame, title: str) -> None:
        """A box per arm and each trial as a point numbered by its schedule position."""
        if data.empty:
            _empty(ax, f"no known {title}")
            return
        present = [a for a in self.arms if (data["arm"] == a).any()]
        boxes = ax.boxplot(
            [data.loc[data["arm"] == a, "value"].to_numpy() for a in present],
            positions=[self.arms.index(a) for a in present],
            widths=0.6,
            showfliers=False,
            patch_artist=True,
            medianprops={"color": "#333333"},
        )
        for patch, arm in zip(boxes["boxes"], present, strict=True):
            patch.set_facecolor(self.colors[arm])
            patch.set_alpha(0.35)
        for _, row in data.iterrows():
            self._point(ax, row)
        ax.set_xticks(range(len(self.arms)), self.arms)
        ax.set_xlim(-0.6, len(self.arms) - 0.4)
        ax.set_title(f"{title} per trial", fontsize=10)
        ax.set_xlabel("arm")
        ax.set_ylabel(f"{title} per trial")
        ax.set_ylim(bottom=0)  # token counts from zero: a truncated axis turns 1.08× into "several-fold"
        _thousands(ax)
        ax.grid(axis="y", alpha=0.3)

    def _point(self, ax: Axes, row: pd.Series) -> None:
        order = float(row[self.order_col]) if pd.notna(row[self.order_col]) else np.nan
        x = self.arms.index(row["arm"]) + (0.0 if np.isnan(order) else 0.5 * order / self.max_order - 0.25)
        marker = self.markers.get(str(row.get("batch")), "o")
        ax.scatter([x], [row["value"]], color=self.colors[row["arm"]], edgecolor="black", lw=0.6, marker=marker, s=36)
        label = "?" if np.isnan(order) else str(int(order))
        ax.annotate(label, (x, row["value"]), xytext=(4, 2), textcoords="offset points", fontsize=7)


def cycle_growth(requests: pd.DataFrame, design: Design) -> Figure:
    """Cumulative prompt (input) tokens over the cycles of each trial: thin lines per trial, bold mean per arm.

    Why: per-cycle prompts re-send the whole transcript, so the cumulative curve's steepness is where
    an arm's cost comes from; more cycles and fatter tool results both show here. Trial lines are thin
    and translucent so that overlapping trials stay visible; the arm's mean line is what to compare.
    A trial line stops at the first response with unknown usage rather than treating it as zero. The
    mean at a cycle counts a trial that already finished at its final total (it spent that much) and
    leaves out a trial whose usage is unknown from that cycle on.
    """
    _require(requests, ["arm", "trial_id", "cycle", "input_tokens"], "requests")
    colors = arm_colors(_figure_arms(design, requests["arm"]))
    fig = Figure(figsize=(8.5, 5.2))
    ax = fig.add_subplot()
    stopped = 0
    curves: dict[str, list[tuple[pd.Series, bool]]] = {}
    for trial_id, rows in requests.sort_values(["trial_id", "cycle"]).groupby("trial_id", sort=True):
        arm = str(rows["arm"].iloc[0])
        values = pd.to_numeric(rows["input_tokens"], errors="coerce").astype(float).to_numpy()
        known = np.cumprod(~np.isnan(values)).astype(bool)
        stopped += int(not known.all())
        cumulative = np.where(known, np.cumsum(np.nan_to_num(values)), np.nan)
        cycles = rows["cycle"].to_numpy(float)
        ax.plot(cycles, cumulative, color=colors[arm], lw=0.8, alpha=0.35, label=f"_trial {trial_id}")
        curves.setdefault(arm, []).append((pd.Series(cumulative, index=cycles), bool(known.all())))
    for arm, trials in sorted(curves.items()):
        table = pd.concat([line for line, _ in trials], axis=1).sort_index()
        complete = [i for i, (_, whole) in enumerate(trials) if whole]
        table.iloc[:, complete] = table.iloc[:, complete].ffill()
        mean = table.mean(axis=1)
        ax.plot(mean.index, mean.to_numpy(float), color=colors[arm], lw=2.6, label=f"{arm} mean ({len(trials)} trials)")
    if requests.empty:
        _empty(ax, "no requests")
    else:
        ax.legend(fontsize=8, loc="upper left")
        ax.set_ylim(bottom=0)
        _thousands(ax)
    ax.set_xlabel("cycle (model response within the trial)")
    ax.set_ylabel("cumulative prompt (input) tokens")
    ax.grid(alpha=0.3)
    notes = ["thin lines: one trial each; bold: the arm's mean (a finished trial counts at its final total)"]
    if stopped:
        notes.append(f"{stopped} trial line(s) stop at the first response with unknown usage")
    batches = requests["batch"] if "batch" in requests.columns else None
    n = {arm: len(trials) for arm, trials in sorted(curves.items())}
    return _finish(fig, "Cumulative prompt tokens over cycles", design, n=n, data_batches=batches, notes=notes)


# ---------------------------------------------------------------- occupancy


def occupancy_bars(occupancy: pd.DataFrame, design: Design) -> Figure:
    """Residual context occupancy per arm, stacked by tool category, with each part's error bar.

    Why (docs/method.md#occupancy): occupancy is a stock that the following turns pay for; a cheaper
    single answer can leave a fuller window. An empty frame means the batch had no multi-turn sessions,
    and the figure says so. Categories with no resident tokens in any arm are left out, bars and legend
    alike. Whether a batch gets this figure at all is :func:`kit.stages.plot.occupancy_is_the_question`'s call.
    """
    fig = Figure(figsize=(8, 5.2))
    ax = fig.add_subplot()
    if occupancy.empty:
        _empty(ax, "no multi-turn data")
        return _finish(fig, "Residual context occupancy by tool category", design)
    _require(occupancy, ["arm", "category", "tokens", "share_of_window", "err"], "occupancy")
    arms = sorted(occupancy["arm"].astype(str).unique())
    frame = occupancy.assign(arm=occupancy["arm"].astype(str), category=occupancy["category"].astype(str))
    resident = pd.to_numeric(frame["tokens"], errors="coerce").fillna(0).groupby(frame["category"]).sum()
    categories = sorted(resident.index[resident > 0])  # the legend names only what this batch left resident
    cat_colors = _hash_colors(categories, CATEGORY_PALETTE)
    tokens = frame.pivot_table(index="arm", columns="category", values="tokens", aggfunc="sum").reindex(arms)
    errs = frame.pivot_table(index="arm", columns="category", values="err", aggfunc="sum").reindex(arms)
    shares = frame.groupby("arm")["share_of_window"].sum().reindex(arms)
    x = np.arange(len(arms))
    bottom = np.zeros(len(arms))
    for category in categories:
        heights = tokens.get(category, pd.Series(0.0, index=arms)).fillna(0).to_numpy(float)
        err = errs.get(category, pd.Series(0.0, index=arms)).fillna(0).to_numpy(float)
        ax.bar(x, heights, bottom=bottom, color=cat_colors[category], label=category, width=0.6, edgecolor="white")
        ax.errorbar(x, bottom + heights, yerr=err, fmt="none", ecolor="black", capsize=3, lw=0.9)
        bottom += heights
    for xi, top, share in zip(x, bottom, shares.to_numpy(float), strict=True):
        ax.annotate(
            f"{share:.1%} of window", (xi, top), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=8
        )
    ax.set_xticks(x, arms)
    colors = arm_colors(_figure_arms(design, arms))
    for tick, arm in zip(ax.get_xticklabels(), arms, strict=True):
        tick.set_color(colors[arm])
        tick.set_fontweight("bold")
    ax.set_xlabel("arm")
    ax.set_ylabel("tokens resident at end of session")
    _thousands(ax)
    ax.legend(title="tool category", fontsize=8, title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    notes = ["error bars: attribution error of each category's tokens (chars/token calibration)"]
    return _finish(fig, "Residual context occupancy by tool category", design, notes=notes)


def occupancy_comparison(comparison: pd.DataFrame, design: Design) -> Figure:
    """The with-arm's explore residual beside the without-arm's file access, their ratio with its interval,
    and the fixed overhead the tool costs before it is called.

    Why (docs/method.md#occupancy): the two bars are the two ways an agent gets the same bytes into its
    head; the ratio's interval says whether the difference outlives run-to-run noise, and the fixed
    overhead (with-arm minus without-arm median fixed base: the tool's schema and instruction) is paid
    whether or not the tool is called. Every number is a value of ``analysis/occupancy_comparison.csv``.
    """
    fig = Figure(figsize=(9, 4.6))
    bars, ratio = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    title = "Explore residual vs file access"
    if comparison.empty:
        _empty(bars, "no arm left explore output resident")
        _empty(ratio, "no ratio")
        return _finish(fig, title, design)
    _require(comparison, COMPARISON_COLUMNS, "occupancy_comparison")
    rows = comparison.reset_index(drop=True)
    colors = arm_colors(_figure_arms(design, rows["with_arm"], rows["without_arm"]))
    labels, heights, edge = [], [], []
    for row in rows.itertuples():
        labels += [f"{row.with_arm}\nexplore residual", f"{row.without_arm}\nfile access"]
        heights += [row.with_tokens, row.without_tokens]
        edge += [colors[str(row.with_arm)], colors[str(row.without_arm)]]
    x = np.arange(len(heights))
    bars.bar(x, np.nan_to_num(np.asarray(heights, float)), color=edge, width=0.6)
    for i, row in enumerate(rows.itertuples()):
        if np.isfinite(row.fixed_overhead_tokens):
            bars.hlines(row.fixed_overhead_tokens, 2 * i - 0.4, 2 * i + 0.4, colors="black", linestyles="--", lw=1.2)
            bars.annotate(
                f"fixed overhead {row.fixed_overhead_tokens:+,.0f}", (2 * i, row.fixed_overhead_tokens),
                xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8,
            )  # fmt: skip
    bars.set_xticks(x, labels, fontsize=8)
    bars.set_ylabel("tokens resident at end of session")
    _thousands(bars)
    bars.grid(axis="y", alpha=0.3)
    y = np.arange(len(rows))
    low, high = rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float)
    estimate = rows["ratio"].to_numpy(float)
    ratio.errorbar(
        estimate, y, xerr=[estimate - low, high - estimate], fmt="o", color="black", capsize=4,
    )  # fmt: skip
    ratio.axvline(1.0, color="#888888", lw=1, ls=":")
    said = []
    for row in rows.itertuples():
        interval = (
            f"{row.confidence:.0%} CI {row.ci_low:.2f}–{row.ci_high:.2f}"
            if np.isfinite(row.ci_low)
            else f"no interval: {row.note}"
        )
        said.append(textwrap.fill(f"{row.with_arm} / {row.without_arm} = {row.ratio:.2f}x ({interval})", 48))
    ratio.set_title("\n".join(said), fontsize=8)
    ratio.set_yticks(y, [f"{r.with_arm} / {r.without_arm}" for r in rows.itertuples()], fontsize=8)
    ratio.set_ylim(-0.6, len(rows) - 0.4)
    ratio.set_xlabel("residual ratio (explore / file access)")
    ratio.grid(axis="x", alpha=0.3)
    notes = ["dashed: fixed overhead, with-arm minus without-arm median fixed base (paid before any tool is called)"]
    return _finish(fig, title, design, notes=notes)


# ---------------------------------------------------------------- quality parity


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
    ok = _ok_trials(trials)
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


def _interval(ax: Axes, y: int, est: float, lo: float, hi: float, color: str) -> None:
    xerr = [[max(est - lo, 0)], [max(hi - est, 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
    ax.errorbar([est], [y], xerr=xerr, fmt="o", color=color, capsize=3, ms=7)


def quality_parity(ratios_or_trials: pd.DataFrame, design: Design, arms: pd.DataFrame | None = None) -> Figure:
    """Grade beside total tokens, so a cheaper but worse arm cannot hide.

    Given trials: grade per arm (points + mean with 95% CI) next to mean total tokens per arm with the
    ratio vs ``design.baseline`` when named; the intervals are arms.csv's (``arms``, else computed the
    same way: :func:`_arm_intervals`), so the figure quotes what the report quotes. Given ratios: the grade
    difference next to the total-token ratio, the latter in the headline's direction (× fewer or × more).
    """
    data = ratios_or_trials
    fig = Figure(figsize=(10, 4.8))
    left, right = fig.subplots(1, 2)
    if "metric" in data.columns:
        _parity_of_ratios(left, right, data, design)
        return _finish(fig, "Quality parity: grade next to total tokens", design, n=_ratios_n(data))
    _require(data, ["arm", "total_tokens"], "trials")
    ok = _ok_trials(data)
    names = sorted(ok["arm"].astype(str).unique())
    colors = arm_colors(_figure_arms(design, data["arm"]))
    summary = grade_summary(data, arms).set_index("arm")
    totals_ci = _arm_intervals(data, ["total_tokens"], arms).set_index("arm")
    for i, arm in enumerate(names):
        rows = ok[ok["arm"].astype(str) == arm]
        grades = pd.to_numeric(rows.get("grade", pd.Series(dtype=float)), errors="coerce").astype(float).dropna()
        _points_and_interval(left, i, grades.to_numpy(), summary.loc[arm], colors[arm])
        totals = pd.to_numeric(rows["total_tokens"], errors="coerce").astype(float).to_numpy()
        t = totals_ci.loc[arm] if arm in totals_ci.index else pd.Series({"mean": np.nan})
        _points_and_interval(right, i, totals, t, colors[arm])
    if design.baseline is not None and design.baseline in names:
        _annotate_against_baseline(right, ok, names, design.baseline)
    for ax in (left, right):
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.grid(axis="x", alpha=0.3)
    left.set_xlim(-0.05, 1.05)
    left.set_xlabel("grade per trial and mean (95% CI)")
    right.set_xlabel("total tokens per trial and mean (95% CI)")
    right.set_xlim(left=0)  # token counts from zero, as in every figure
    _thousands(right, "x")
    notes = [f"ungraded trials: {int(summary['ungraded'].sum())}"] if summary["ungraded"].sum() else []
    batches = ok["batch"] if "batch" in ok.columns else None
    return _finish(
        fig, "Quality parity: grade next to total tokens", design, n=_data_n(ok), data_batches=batches, notes=notes
    )


def _parity_of_ratios(left: Axes, right: Axes, data: pd.DataFrame, design: Design) -> None:
    """The ratios form: grade differences (left) and total-token ratios in the headline's direction (right)."""
    colors = arm_colors(_figure_arms(design, *(data[c] for c in ("arm", "baseline") if c in data.columns)))
    grades = data[(data["metric"] == "grade") & data["estimate"].notna()]
    totals = data[(data["metric"] == "total_tokens") & data["estimate"].notna()]
    fewer = _reads_fewer(totals) if not totals.empty else False
    for ax, rows, ref, xlabel in (
        (left, grades, 0.0, "grade difference (arm − baseline), 95% CI"),
        (right, _oriented(totals, fewer), 1.0, f"total tokens, {_ratio_axis_label(fewer)}"),
    ):
        if rows.empty:
            _empty(ax, "no estimate")
            continue
        _forest_axis(ax, rows, colors, ref, with_metric=False)
        ax.set_xlabel(xlabel)


def _points_and_interval(ax: Axes, i: int, values: np.ndarray, interval: pd.Series, color: Any) -> None:
    """One arm's row: its trials as points just below the line, its mean and 95% CI on it."""
    ax.scatter(values, np.full(len(values), i + 0.18), color=color, alpha=0.5, s=18)
    if pd.notna(interval["mean"]):
        _interval(ax, i, float(interval["mean"]), float(interval["lower"]), float(interval["upper"]), color)


def _annotate_against_baseline(ax: Axes, ok: pd.DataFrame, names: list[str], baseline: str) -> None:
    """Each other arm's mean total as "N× fewer/more than <baseline>" above its row."""
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
            ax.annotate(
                f"mean {factor} {baseline}",
                (arm_mean, i),
                xytext=(0, 9),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )


# ---------------------------------------------------------------- Code Mode (Codex exec cells)
CODE_MODE_COLUMNS = ("exec_cells", "exec_tool_calls", "exec_multi_call_cells", "exec_promise_all_cells")


def code_mode_cells(trials: pd.DataFrame, design: Design) -> Figure:
    """Calls per Code Mode cell and cells per trial, per arm (Codex ``exec``; kit/transcripts/codex_rollout.py).

    Why: with Code Mode, batching shows as several ``tools.*(`` calls in one cell (``Promise.all``), not
    as several calls in one response, so the response-level call counts miss it; fewer, fuller cells are
    the mechanism behind fewer cycles. Calls per cell is per trial (calls over
    cells); a trial without a cell, or whose cells' code was not recorded, has none and is not drawn there.
    """
    _require(trials, ["arm", *CODE_MODE_COLUMNS], "trials")
    ok = _ok_trials(trials).assign(arm=lambda t: t["arm"].astype(str))
    counts = {c: pd.to_numeric(ok[c], errors="coerce").astype(float) for c in CODE_MODE_COLUMNS}
    cells = counts["exec_cells"]
    per_cell = (counts["exec_tool_calls"] / cells).where(cells > 0)
    arms = sorted(ok["arm"].unique())
    colors = arm_colors(_figure_arms(design, trials["arm"]))
    fig = Figure(figsize=(10, 5.2))
    left, right = fig.subplots(1, 2)
    for ax, values, label in ((left, per_cell, "tools.* calls per cell"), (right, cells, "exec cells per trial")):
        _arm_points(ax, ok["arm"], values, arms, colors)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel(label)
    left.axhline(1, color=REFERENCE_COLOR, lw=0.8, ls="--")
    notes = [_cell_note(arm, ok["arm"] == arm, counts) for arm in arms]
    notes.append("dashed line: one call per cell (reads serialized into separate cells)")
    if per_cell.isna().any():
        notes.append(f"{int(per_cell.isna().sum())} trial(s) without known calls per cell not drawn on the left")
    batches = ok["batch"] if "batch" in ok.columns else None
    return _finish(fig, "Code Mode cells by arm (Codex exec)", design, n=_data_n(ok), data_batches=batches, notes=notes)


def _arm_points(ax: Axes, arm: pd.Series, values: pd.Series, arms: list[str], colors: dict[str, str]) -> None:
    """One box and the trials' points per arm, on an axis from zero (counts, not differences)."""
    for i, name in enumerate(arms):
        known = values[(arm == name) & values.notna()].to_numpy(float)
        if known.size:
            box = ax.boxplot(
                [known], positions=[i], widths=0.5, showfliers=False, patch_artist=True, medianprops={"color": "#333"}
            )
            box["boxes"][0].set(facecolor=colors[name], alpha=0.35)
            ax.scatter(np.full(known.size, i), known, color=colors[name], edgecolor="black", lw=0.6, s=36, zorder=3)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_xlabel("arm")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)


def _cell_note(arm: str, rows: pd.Series, counts: dict[str, pd.Series]) -> str:
    """The arm's totals: cells, calls, cells with two or more calls, cells with ``Promise.all``."""
    total = {c: counts[c][rows].sum(min_count=1) for c in CODE_MODE_COLUMNS}
    shown = {c: "?" if pd.isna(v) else f"{int(v):,}" for c, v in total.items()}
    return (
        f"{arm}: {shown['exec_cells']} cells, {shown['exec_tool_calls']} tools.* calls, "
        f"{shown['exec_multi_call_cells']} cells with ≥ 2 calls, {shown['exec_promise_all_cells']} with Promise.all"
    )
