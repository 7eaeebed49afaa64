"""The Code Mode figure: calls per exec cell and cells per trial, per arm (Codex ``exec``).

Why its own figure: with Code Mode, batching shows inside one cell (``Promise.all``), which the
response-level call counts miss; the plot stage draws it only for batches that ran Code Mode cells.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kit.charts.style import (
    REFERENCE_COLOR,
    arm_colors,
    data_n,
    figure,
    figure_arms,
    finish,
    require_columns,
)
from kit.records import Design
from kit.stats import finished

CODE_MODE_COLUMNS = ("exec_cells", "exec_tool_calls", "exec_multi_call_cells", "exec_promise_all_cells")


def code_mode_cells(trials: pd.DataFrame, design: Design) -> Figure:
    """Calls per Code Mode cell and cells per trial, per arm (Codex ``exec``; kit/transcripts/codex_rollout.py).

    Why: with Code Mode, batching shows as several ``tools.*(`` calls in one cell (``Promise.all``), not
    as several calls in one response, so the response-level call counts miss it; fewer, fuller cells are
    the mechanism behind fewer cycles. Calls per cell is per trial (calls over
    cells); a trial without a cell, or whose cells' code was not recorded, has none and is not drawn there.
    """
    require_columns(trials, ["arm", *CODE_MODE_COLUMNS], "trials")
    ok = finished(trials).assign(arm=lambda t: t["arm"].astype(str))
    counts = {c: pd.to_numeric(ok[c], errors="coerce").astype(float) for c in CODE_MODE_COLUMNS}
    cells = counts["exec_cells"]
    per_cell = (counts["exec_tool_calls"] / cells).where(cells > 0)
    arms = sorted(ok["arm"].unique())
    colors = arm_colors(figure_arms(design, trials["arm"]))
    fig = figure(figsize=(10, 5.2))
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
    return finish(fig, "Code Mode cells by arm (Codex exec)", design, n=data_n(ok), data_batches=batches, notes=notes)


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
