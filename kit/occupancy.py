"""``kit.occupancy``: the public path of residual context occupancy (docs/design.md, "The public surface").

The code lives in ``kit.analysis.occupancy`` with the other analysis modules; this module keeps the path users
import (``kit.occupancy.measure``) working. Nothing inside the kit imports it.
"""

from kit.analysis.occupancy import (
    BASE,
    CATEGORIES,
    CLEAN_SHARE,
    COLUMNS,
    COMPACTION_KINDS,
    CONTEXT,
    DEFAULT_CHARS_PER_TOKEN,
    DENSE_RANGE,
    EVICT_MIN_TOKENS,
    EVICT_SHARE,
    FILE_ACCESS,
    FIXED_BASE,
    MIN_GAP_CHARS,
    OTHER,
    OUTLIER,
    PARTS,
    SINGLE_SHARE,
    SUMMARY_COLUMNS,
    TOOL_CATEGORIES,
    WINDOW_TOKENS,
    Calibration,
    arm_means,
    measure,
    result_prices,
)

__all__ = [
    "BASE",
    "CATEGORIES",
    "CLEAN_SHARE",
    "COLUMNS",
    "COMPACTION_KINDS",
    "CONTEXT",
    "DEFAULT_CHARS_PER_TOKEN",
    "DENSE_RANGE",
    "EVICT_MIN_TOKENS",
    "EVICT_SHARE",
    "FILE_ACCESS",
    "FIXED_BASE",
    "MIN_GAP_CHARS",
    "OTHER",
    "OUTLIER",
    "PARTS",
    "SINGLE_SHARE",
    "SUMMARY_COLUMNS",
    "TOOL_CATEGORIES",
    "WINDOW_TOKENS",
    "Calibration",
    "arm_means",
    "measure",
    "result_prices",
]
