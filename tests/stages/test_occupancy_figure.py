"""The comparison figure (kit.charts.occupancy_comparison): the bars are analysis/occupancy_comparison.csv's
residuals, the interval drawn is its interval, the dashed line its fixed overhead; drawn only where
occupancy is the question (kit.stages.plot)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.container import BarContainer, ErrorbarContainer

from kit import charts
from kit.analysis import occupancy_block
from kit.stages import plot
from tests.support import design

DESIGN = design(task="occupancy", arms=["explore", "files"])


def comparison() -> pd.DataFrame:
    row = {
        "with_arm": "explore",
        "without_arm": "files",
        "with_category": "explore tool",
        "without_category": "file access",
        "with_tokens": 1_769.6,
        "without_tokens": 15_965.4,
        "ratio": 0.1108,
        "ci_low": 0.081,
        "ci_high": 0.152,
        "confidence": 0.95,
        "n_with": 5,
        "n_without": 5,
        "fixed_overhead_tokens": 412.0,
        "note": "",
    }
    return pd.DataFrame([row], columns=occupancy_block.COMPARISON_COLUMNS)


def test_bars_interval_and_fixed_overhead_are_the_tables():
    table = comparison()
    bars_ax, ratio_ax = charts.occupancy_comparison(table, DESIGN).axes
    (bars,) = [c for c in bars_ax.containers if isinstance(c, BarContainer)]
    np.testing.assert_allclose([b.get_height() for b in bars], [1_769.6, 15_965.4])
    (fixed,) = bars_ax.collections
    (segment,) = fixed.get_segments()
    np.testing.assert_allclose(segment[:, 1], [412.0, 412.0])
    assert segment[:, 0].max() < 0.5  # over the with-arm's bar only
    (interval,) = [c for c in ratio_ax.containers if isinstance(c, ErrorbarContainer)]
    point, _, (xerr,) = interval.lines
    np.testing.assert_allclose(point.get_xdata(), [0.1108])
    np.testing.assert_allclose(xerr.get_segments()[0][:, 0], [0.081, 0.152])
    assert "0.11x (95% CI 0.08–0.15)" in ratio_ax.get_title()


def test_no_interval_is_said_and_an_empty_table_is_drawn_empty():
    table = comparison().assign(ci_low=np.nan, ci_high=np.nan, note="too few runs")
    ratio_ax = charts.occupancy_comparison(table, DESIGN).axes[1]
    assert "no interval: too few runs" in ratio_ax.get_title().replace("\n", " ")
    empty = charts.occupancy_comparison(table.iloc[0:0], DESIGN).axes[0]
    assert empty.texts[0].get_text() == "no arm left explore output resident"


def test_drawn_only_where_occupancy_is_the_question():
    occupancy = pd.DataFrame({"arm": ["explore"], "category": ["explore tool"], "tokens": [10.0]})
    assert "occupancy_comparison" in plot.figures_for(design(task="occupancy"), occupancy)
    assert "occupancy_comparison" in plot.figures_for(design(task="mine"), occupancy)
    assert "occupancy_comparison" not in plot.figures_for(design(task="terse"), occupancy.iloc[0:0])
