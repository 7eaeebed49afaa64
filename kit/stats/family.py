"""The family of comparisons a report calls decisive, judged together by Holm's step-down (docs/method.md#family).

A report with two treatments on total and uncached tokens states four comparisons; at 95% each, the chance that
at least one excludes no difference by luck alone is up to 19%. Holm's procedure keeps that chance at 5% and is
uniformly more powerful than Bonferroni's. It is run on intervals, not p-values, so the interval method, its cap
and its two-level form across batches stay the ones every other row uses: with k rows left undecided, a row is
decisive when its interval at level ``1 - alpha / k`` excludes no difference; those rows leave, k shrinks, and the
rest are judged again at the looser level, until a step decides nothing. Each row keeps the interval of the step it
was last judged at (its Holm-adjusted interval). The known-truth study measures the family-wise error rate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from kit.stats.compare import DIFFERENCE_METRICS
from kit.stats.records import Comparison

Recompute = Callable[[Comparison, float], Comparison]


def _excludes_null(row: Comparison) -> bool:
    """Whether the row's interval excludes no difference (1 for a ratio, 0 for a difference), on unrounded bounds."""
    null = 0.0 if row.metric in DIFFERENCE_METRICS else 1.0
    return bool(np.isfinite(row.lower) and np.isfinite(row.upper) and (row.lower > null or row.upper < null))


def holm(rows: Sequence[Comparison], recompute: Recompute, *, confidence: float = 0.95) -> list[Comparison]:
    """``rows`` with their family fields set: Holm's step-down over all of them at family-wise ``confidence``.

    ``recompute(row, level)`` is the same comparison at another confidence level. A row without an interval stays
    in the family (it counts in k) and is never decisive: leaving it out would loosen the others' levels.
    """
    alpha, size = 1 - confidence, len(rows)
    judged: dict[int, tuple[Comparison, bool]] = {}
    left, k = list(range(size)), size
    while left:
        level = 1 - alpha / k
        at = {i: rows[i] if k == 1 and level == rows[i].confidence else recompute(rows[i], level) for i in left}
        decided = [i for i in left if _excludes_null(at[i])]
        for i in left:
            judged[i] = (at[i], i in decided)
        if not decided:
            break
        left = [i for i in left if i not in decided]
        k -= len(decided)
    return [
        msgspec.structs.replace(
            row,
            family_size=size,
            family_level=judged[i][0].confidence,
            family_lower=judged[i][0].lower,
            family_upper=judged[i][0].upper,
            decisive=judged[i][1],
        )
        for i, row in enumerate(rows)
    ]
