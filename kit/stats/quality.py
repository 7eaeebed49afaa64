"""Quality before economy (docs/method.md#grading): is the cheaper arm shown to answer as well as the baseline?

A token saving is a claim only beside the answers' grades: a skill that replies "k" to everything spends
almost nothing. The gate is a non-inferiority test of the mean grade (scores in [0, 1]): the arm's grade may be
below the baseline's by at most ``margin``, and that is shown only when the whole interval of the difference
lies above ``-margin``. The interval is Newcombe's hybrid score interval for a difference of two proportions
(his method 11: each arm's continuity-corrected Wilson interval, combined), with each arm's mean grade as the
proportion. A score in
[0, 1] with mean p has variance at most p (1 - p), the Bernoulli's, so the interval is conservative for partial
scores and exact in spirit for pass/fail ones; unlike a t-interval it exists when every grade is equal (five
perfect answers per arm do not show parity within 0.1: their Wilson intervals reach down to 0.46). The
known-truth study measures how often a batch whose arm truly loses ``margin`` passes (bench/known_truth.md).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd
from scipy import stats as sps

from kit.experiment.design import ParamError
from kit.stats.intervals import check_confidence
from kit.stats.records import QualityGate, finished, require_columns

QUALITY_MARGIN = 0.1  # the default non-inferiority margin: 10 points of grade on the 0–1 scale (docs/method.md#grading)
PARITY_SHOWN, PARITY_NOT_SHOWN, WORSE, NOT_GRADED = (
    "parity shown",
    "parity not shown",
    "worse beyond margin",
    "not graded",
)
_MAX_PARITY_RUNS = 100_000


def check_margin(margin: object) -> float:
    """The margin as a float strictly between 0 and 1 (a numpy scalar too), or a ParamError naming it."""
    value = float(margin) if isinstance(margin, numbers.Real) and not isinstance(margin, bool) else math.nan
    if not 0 < value < 1:
        raise ParamError("quality_margin", f"got {margin!r}", "a grade difference strictly between 0 and 1, e.g. 0.1")
    return value


def wilson(p: np.ndarray | float, n: np.ndarray | float, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval of a proportion ``p`` from ``n`` observations, with continuity correction (elementwise).

    The correction is what keeps the gate's false-parity rate within 2.5% on pass/fail grades: without it
    Newcombe's interval let 2.8-3.0% of batches whose arm truly lost the margin pass at 10-50 graded runs
    (bench/known_truth.md#quality-gate measures both).
    """
    p, n = np.asarray(p, dtype=float), np.asarray(n, dtype=float)
    a = 2 * n * p + z**2
    with np.errstate(invalid="ignore"):
        lower = (a - 1 - z * np.sqrt(np.maximum(z**2 - 2 - 1 / n + 4 * p * (n * (1 - p) + 1), 0))) / (2 * (n + z**2))
        upper = (a + 1 + z * np.sqrt(np.maximum(z**2 + 2 - 1 / n + 4 * p * (n * (1 - p) - 1), 0))) / (2 * (n + z**2))
    return np.clip(np.where(p <= 0, 0, lower), 0, 1), np.clip(np.where(p >= 1, 1, upper), 0, 1)


def newcombe(
    p_arm: np.ndarray | float, n_arm: np.ndarray | float, p_base: np.ndarray | float, n_base: np.ndarray | float,
    confidence: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Newcombe's hybrid score interval of ``p_arm - p_base`` with continuity correction (his method 11),
    elementwise: vectorised for the study."""
    z = float(sps.norm.ppf((1 + confidence) / 2))
    la, ua = wilson(p_arm, n_arm, z)
    lb, ub = wilson(p_base, n_base, z)
    d = np.asarray(p_arm, dtype=float) - np.asarray(p_base, dtype=float)
    return d - np.sqrt((p_arm - la) ** 2 + (ub - p_base) ** 2), d + np.sqrt((ua - p_arm) ** 2 + (p_base - lb) ** 2)


def runs_for_parity(p: float, margin: float, confidence: float) -> int | None:
    """Graded runs per arm at which two arms both scoring ``p`` would show parity (lower bound above -margin)."""
    n = np.arange(2, _MAX_PARITY_RUNS + 1, dtype=float)
    lower, _ = newcombe(p, n, p, n, confidence)
    ok = lower > -margin
    return int(n[np.argmax(ok)]) if ok.any() else None


def _grades(ok: pd.DataFrame, arm: str) -> np.ndarray:
    values = pd.to_numeric(ok.loc[ok["arm"] == arm, "grade"], errors="coerce").dropna().to_numpy(dtype=float)
    if ((values < 0) | (values > 1)).any():
        raise ParamError(
            "grade", f"arm {arm!r} has grades outside [0, 1]: {sorted(set(values))[:5]}", "scores in [0, 1]"
        )
    return values


def quality_gate(
    trials: pd.DataFrame, arm: str, baseline: str, *, margin: float = QUALITY_MARGIN, confidence: float = 0.95
) -> QualityGate:
    """The non-inferiority verdict on ``arm``'s grade against ``baseline``'s (finished, graded trials only)."""
    require_columns(trials, ["arm", "grade"], "quality_gate()")
    margin = check_margin(margin)
    check_confidence(confidence)
    ok = finished(trials)
    ga, gb = _grades(ok, arm), _grades(ok, baseline)
    nan, needed = math.nan, None
    pa = float(ga.mean()) if len(ga) else nan
    pb = float(gb.mean()) if len(gb) else nan
    if not (len(ga) and len(gb)):
        missing = " and ".join(name for name, g in ((arm, ga), (baseline, gb)) if not len(g))
        lower = upper = nan
        verdict, note = (
            NOT_GRADED,
            f"no graded trial of {missing}: a cheaper arm could be a worse one, and this batch cannot tell",
        )
    else:
        lower, upper = (float(v) for v in newcombe(pa, len(ga), pb, len(gb), confidence))
        if lower > -margin:
            verdict, note = PARITY_SHOWN, ""
        elif upper < -margin:
            verdict, note = WORSE, f"{arm}'s grade is below {baseline}'s by more than the margin {margin:g}"
        else:
            verdict, note = (
                PARITY_NOT_SHOWN,
                f"the interval reaches a loss of {-lower:.2f}, beyond the margin {margin:g}",
            )
            needed = runs_for_parity((pa * len(ga) + pb * len(gb)) / (len(ga) + len(gb)), margin, confidence)
    return QualityGate(
        arm=arm, baseline=baseline, n_arm=len(ga), n_baseline=len(gb), mean_arm=pa, mean_baseline=pb,
        difference=pa - pb, lower=lower, upper=upper, confidence=confidence, margin=margin, verdict=verdict,
        runs_for_parity=needed, method="Newcombe hybrid score, continuity-corrected (Wilson per arm)", note=note,
    )  # fmt: skip
