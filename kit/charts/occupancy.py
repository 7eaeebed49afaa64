"""Occupancy figures: what each arm left resident in the context window, and explore residual vs file access.

Every number drawn is a value of ``analysis/occupancy.csv`` or ``analysis/occupancy_comparison.csv``
(docs/method.md#occupancy); the figures compute nothing of their own.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kit.analysis.occupancy_block import COMPARISON_COLUMNS
from kit.charts.style import (
    CATEGORY_PALETTE,
    arm_colors,
    empty_axes,
    figure,
    figure_arms,
    finish,
    hash_colors,
    require_columns,
    thousands,
)
from kit.records import Design


def occupancy_bars(occupancy: pd.DataFrame, design: Design) -> Figure:
    """Residual context occupancy per arm, stacked by tool category, with each part's error bar.

    Why (docs/method.md#occupancy): occupancy is a stock that the following turns pay for; a cheaper
    single answer can leave a fuller window. An empty frame means the batch had no multi-turn sessions,
    and the figure says so. Categories with no resident tokens in any arm are left out, bars and legend
    alike. Whether a batch gets this figure at all is :func:`kit.stages.plot.occupancy_is_the_question`'s call.
    """
    fig = figure(figsize=(8, 5.2))
    ax = fig.add_subplot()
    if occupancy.empty:
        empty_axes(ax, "no multi-turn data")
        return finish(fig, "Residual context occupancy by tool category", design)
    require_columns(occupancy, ["arm", "category", "tokens", "share_of_window", "err"], "occupancy")
    arms = sorted(occupancy["arm"].astype(str).unique())
    frame = occupancy.assign(arm=occupancy["arm"].astype(str), category=occupancy["category"].astype(str))
    resident = pd.to_numeric(frame["tokens"], errors="coerce").fillna(0).groupby(frame["category"]).sum()
    categories = sorted(resident.index[resident > 0])  # the legend names only what this batch left resident
    cat_colors = hash_colors(categories, CATEGORY_PALETTE)
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
    colors = arm_colors(figure_arms(design, arms))
    for tick, arm in zip(ax.get_xticklabels(), arms, strict=True):
        tick.set_color(colors[arm])
        tick.set_fontweight("bold")
    ax.set_xlabel("arm")
    ax.set_ylabel("tokens resident at end of session")
    thousands(ax)
    ax.legend(title="tool category", fontsize=8, title_fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    notes = ["error bars: attribution error of each category's tokens (chars/token calibration)"]
    return finish(fig, "Residual context occupancy by tool category", design, notes=notes)


def occupancy_comparison(comparison: pd.DataFrame, design: Design) -> Figure:
    """The with-arm's explore residual beside the without-arm's file access, their ratio with its interval,
    and the fixed overhead the tool costs before it is called.

    Why (docs/method.md#occupancy): the two bars are the two ways an agent gets the same bytes into its
    head; the ratio's interval says whether the difference outlives run-to-run noise, and the fixed
    overhead (with-arm minus without-arm median fixed base: the tool's schema and instruction) is paid
    whether or not the tool is called. Every number is a value of ``analysis/occupancy_comparison.csv``.
    """
    fig = figure(figsize=(9, 4.6))
    bars, ratio = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    title = "Explore residual vs file access"
    if comparison.empty:
        empty_axes(bars, "no arm left explore output resident")
        empty_axes(ratio, "no ratio")
        return finish(fig, title, design)
    require_columns(comparison, COMPARISON_COLUMNS, "occupancy_comparison")
    rows = comparison.reset_index(drop=True)
    colors = arm_colors(figure_arms(design, rows["with_arm"], rows["without_arm"]))
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
    thousands(bars)
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
    return finish(fig, title, design, notes=notes)
