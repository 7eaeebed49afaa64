"""What the known-truth study measured for one batch's ratio interval, by how the batch's two arms look.

Why a table in code: the default interval holds 93–97% when both arms' runs share a shape, and no candidate
holds it when they do not (a tight arm against a noisy one, a near-constant arm against a long-tailed one:
``bench/known_truth.md``, *Arms of different shape*). What a batch can show of that is the spread of each
arm's runs: :func:`spread_ratio`, the larger sample CV over the smaller. From ``SPREAD_RATIO`` the arms
"differ in spread" (``kit.stats.ratio`` names the noisier arm, ``interval_rests_on``); the study measured
the coverage of such batches from arms of different shape, and of the other batches from arms of one
shape, at 5, 10 and 20 runs per arm. ``STUDY_COVERAGE`` holds those rows (``tests/test_known_truth.py``
checks them against the committed table) so that every interval can print the coverage measured for its
case beside it.
"""

from __future__ import annotations

import msgspec
import numpy as np

from kit.stats.intervals import MIN_RUNS

# From this ratio of the arms' sample CVs the batch's arms differ in spread: the study's choice (at 2 the flag
# held 85-100% of batches from arms of different shape at 5-20 runs per arm, and 27%, 12%, 5% of same-shape ones).
SPREAD_RATIO = 2.0
# The study's acceptance band for a 95% interval starts here: below it the report says the interval fell short.
BAND_LOW = 0.93


class StudyCoverage(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the study's coverage by the arms' look: what 95% intervals covered in batches like it."""

    runs: int  # runs per arm the study drew; the row stands for min(n_arm, n_baseline) from here to the next row's
    differ: bool  # the arms' runs differ in spread (>= SPREAD_RATIO) and the study's arms differ in shape
    coverage: float  # share of such batches whose interval held the truth, pooled over the study's cells
    lowest: float  # the lowest coverage of one of those cells (data shape)
    highest: float  # the highest


# bench/known_truth.md, *Arms of different shape* (2,000 batches per cell): flagged batches of the cells whose
# arms differ in shape; unflagged batches of the cells whose arms share one.
STUDY_COVERAGE: tuple[StudyCoverage, ...] = (
    StudyCoverage(runs=5, differ=True, coverage=0.903, lowest=0.846, highest=0.952),
    StudyCoverage(runs=5, differ=False, coverage=0.96, lowest=0.94, highest=0.998),
    StudyCoverage(runs=10, differ=True, coverage=0.932, lowest=0.908, highest=0.961),
    StudyCoverage(runs=10, differ=False, coverage=0.958, lowest=0.948, highest=0.983),
    StudyCoverage(runs=20, differ=True, coverage=0.935, lowest=0.918, highest=0.951),
    StudyCoverage(runs=20, differ=False, coverage=0.951, lowest=0.942, highest=0.965),
)


def spread_ratio(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(larger sample CV / smaller, index of the noisier arm: 0 ``a``, 1 ``b``) along the last axis.

    Why the CVs and not the variance share of the log ratio: the study's failures are batches whose noisy arm
    drew few long runs; they fall between a ratio of 1.5 and 3, where a share of 0.9 (a ratio near 3) flagged
    only the batches that covered well. NaN where an arm's mean is not positive or both arms are constant.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ma, mb = a.mean(axis=-1), b.mean(axis=-1)
        cva = np.where(ma > 0, a.std(axis=-1, ddof=1) / ma, np.nan)
        cvb = np.where(mb > 0, b.std(axis=-1, ddof=1) / mb, np.nan)
        return np.maximum(cva, cvb) / np.minimum(cva, cvb), (cvb > cva).astype(int)


def study_coverage(runs: int, differ: bool) -> StudyCoverage | None:
    """The study's row for a batch of ``runs`` runs per arm (the smaller arm's) whose arms differ or not; None
    below ``MIN_RUNS`` (no interval) or before the table is filled."""
    rows = [r for r in STUDY_COVERAGE if r.differ == differ and r.runs <= runs]
    return max(rows, key=lambda r: r.runs) if runs >= MIN_RUNS and rows else None
