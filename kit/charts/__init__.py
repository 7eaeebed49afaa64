"""Figures of a batch, drawn from the analysis tables (docs/tables.md) and nothing else.

Why this shape: every figure has to carry its own context, because figures travel alone (pasted into
an issue, a slide, a PR). So each one states the batch id(s), the schedule, the isolation and n per
arm, carries its uncertainty, and says "SIMULATION" when the embedded provider produced the numbers.
Total tokens and uncached tokens are never blended: uncached appears only with its observed hit rates
or on the warmth curve that shows why one uncached ratio is just one point (docs/method.md#warmth).

One module per figure family (``warmth``, ``forest``, ``distributions``, ``occupancy``, ``parity``,
``codemode``) over the shared ``style``: colours, labels, captions, :func:`figure` (where a backend
is chosen, never on import) and :func:`save`. Callers import from here, ``kit.charts.<name>``.
"""

from kit.charts.codemode import CODE_MODE_COLUMNS, code_mode_cells
from kit.charts.distributions import arm_distributions, cycle_growth
from kit.charts.forest import FOREST_SPREAD, ratio_forest
from kit.charts.occupancy import occupancy_bars, occupancy_comparison
from kit.charts.parity import grade_summary, quality_parity
from kit.charts.style import (
    ARM_PALETTE,
    CATEGORY_PALETTE,
    METRIC_LABELS,
    REFERENCE_COLOR,
    SIMULATION_CAPTION,
    arm_colors,
    design_line,
    empty_axes,
    figure,
    save,
    thousands,
)
from kit.charts.warmth import INPUT_LABEL, TOTAL_LABEL, warmth_vs_ratio

__all__ = [
    "ARM_PALETTE",
    "CATEGORY_PALETTE",
    "CODE_MODE_COLUMNS",
    "FOREST_SPREAD",
    "INPUT_LABEL",
    "METRIC_LABELS",
    "REFERENCE_COLOR",
    "SIMULATION_CAPTION",
    "TOTAL_LABEL",
    "arm_colors",
    "arm_distributions",
    "code_mode_cells",
    "cycle_growth",
    "design_line",
    "empty_axes",
    "figure",
    "grade_summary",
    "occupancy_bars",
    "occupancy_comparison",
    "quality_parity",
    "ratio_forest",
    "save",
    "thousands",
    "warmth_vs_ratio",
]
