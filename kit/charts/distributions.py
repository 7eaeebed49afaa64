"""Per-trial figures: tokens per trial by arm in schedule order, and cumulative prompt tokens over cycles.

Why together: both draw every trial of every arm (nothing averaged away first), so a drift over the batch
or one runaway trial shows beside its arm's summary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kit.charts.style import (
    arm_colors,
    data_n,
    empty_axes,
    figure,
    figure_arms,
    finish,
    require_columns,
    thousands,
)
from kit.records import Design
from kit.stats import finished

_BATCH_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def arm_distributions(trials: pd.DataFrame, design: Design) -> Figure:
    """Total and uncached tokens per trial, per arm; points sit left→right in schedule order.

    Why the order: a drift over the batch (cache warming up, provider load) shows as a slope inside an
    arm's points, which a box alone would hide. Each point is labelled with its schedule position.
    """
    require_columns(trials, ["arm", "total_tokens", "uncached_input_tokens"], "trials")
    ok = finished(trials)
    order_col = "order_index" if "order_index" in ok.columns else "run"
    batches = sorted(ok["batch"].astype(str).unique()) if "batch" in ok.columns else []
    orders = pd.to_numeric(ok[order_col], errors="coerce").astype(float)
    panel = _DistributionPanel(
        arms=sorted(ok["arm"].astype(str).unique()),
        colors=arm_colors(figure_arms(design, trials["arm"])),
        markers={b: _BATCH_MARKERS[i % len(_BATCH_MARKERS)] for i, b in enumerate(batches)},
        order_col=order_col,
        max_order=max(float(orders.max()), 1.0) if orders.notna().any() else 1.0,
    )
    fig = figure(figsize=(10, 5.2))
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
    return finish(fig, title, design, n=data_n(ok), data_batches=batches, notes=notes)


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
            empty_axes(ax, f"no known {title}")
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
        thousands(ax)
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
    require_columns(requests, ["arm", "trial_id", "cycle", "input_tokens"], "requests")
    colors = arm_colors(figure_arms(design, requests["arm"]))
    fig = figure(figsize=(8.5, 5.2))
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
        empty_axes(ax, "no requests")
    else:
        ax.legend(fontsize=8, loc="upper left")
        ax.set_ylim(bottom=0)
        thousands(ax)
    ax.set_xlabel("cycle (model response within the trial)")
    ax.set_ylabel("cumulative prompt (input) tokens")
    ax.grid(alpha=0.3)
    notes = ["thin lines: one trial each; bold: the arm's mean (a finished trial counts at its final total)"]
    if stopped:
        notes.append(f"{stopped} trial line(s) stop at the first response with unknown usage")
    batches = requests["batch"] if "batch" in requests.columns else None
    n = {arm: len(trials) for arm, trials in sorted(curves.items())}
    return finish(fig, "Cumulative prompt tokens over cycles", design, n=n, data_batches=batches, notes=notes)
