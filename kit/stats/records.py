"""What kit.stats returns, and what it reads: the records, the columns a table must have, the finished trials.

The records are msgspec Structs whose fields carry their meaning and unit (``kit.records.field_doc``):
``docs/tables.md`` documents ``analysis/ratios.csv``, ``savings.csv`` and ``warmth_invariance.csv`` from
them (``kit.cli.columns``). Every statistic of the package is taken over :func:`finished` trials only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import msgspec
import pandas as pd

from kit.errors import InputError, KitError
from kit.records import ARM, field_doc


class StitchError(KitError, ValueError):
    """Two arms were compared across batches that never ran them together (docs/method.md#stitch)."""


_doc = field_doc


# Meanings shared by several records' fields (and, through kit.cli.columns, by other tables' columns of the same name).
_BASELINE = _doc("the arm compared against", "id")
_METRIC = _doc("the trials-table column compared", "column name")
_LOWER = _doc("lower bound of the bootstrap interval", "as the estimate")
_UPPER = _doc("upper bound of the bootstrap interval", "as the estimate")
_CONFIDENCE = _doc("level of the interval (docs/method.md#intervals)", "fraction 0–1")
_METHOD = _doc("how the interval was computed", "text")
_NOTE = _doc("what a reader must know about the row (left-out data, degenerate intervals)", "text")


def _saving(stat: str) -> msgspec.Meta:
    return _doc(f"{stat} of the per-prompt savings `1 − arm/control`", "fraction")


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """Arm against baseline on one metric (:func:`ratio`): one ``analysis/ratios.csv`` row."""

    comparison: Annotated[str, _doc("`<arm> vs <baseline>`", "text")]
    arm: Annotated[str, ARM]
    baseline: Annotated[str, _BASELINE]
    metric: Annotated[str, _METRIC]
    estimate: Annotated[
        float, _doc("mean of the arm / mean of the baseline (a difference of means for `grade`)", "ratio")
    ]
    lower: Annotated[float, _LOWER]
    upper: Annotated[float, _UPPER]
    confidence: Annotated[float, _CONFIDENCE]
    looks: Annotated[
        int,
        _doc(
            "looks of the stop rule the batch grew under (docs/method.md#planning): on its `total_tokens` rows the "
            "interval is the one the rule read at its last look, at its level (anytime-valid for `exclude_one`); "
            "0 without a stop rule",
            "count",
        ),
    ] = 0
    n_arm: Annotated[int, _doc("finished trials of the arm with a value", "count")]
    n_baseline: Annotated[int, _doc("finished trials of the baseline with a value", "count")]
    paired: Annotated[
        bool, _doc("trials were paired by (batch, run): only when the design matched runs (a prompt bank)", "boolean")
    ]
    batches: Annotated[int, _doc("batches the comparison used", "count")]
    from_batch: Annotated[
        str,
        _doc(
            "the one batch a cache-dependent row of several batches comes from (docs/method.md#warmth: it stays at "
            "its batch's warmth); empty where the row pools `batches`",
            "id",
        ),
    ] = ""
    method: Annotated[str, _METHOD]
    label: Annotated[
        str, _doc("`cross-run stitch` when the arms never shared a batch (docs/method.md#stitch), else empty", "text")
    ]
    small_n: Annotated[bool, _doc("fewer than 5 trials in an arm: no interval (docs/method.md#intervals)", "boolean")]
    resample_min: Annotated[
        float, _doc("smallest estimate any resample of one batch's runs can produce", "ratio (difference)")
    ]
    resample_max: Annotated[
        float, _doc("largest estimate any resample of one batch's runs can produce", "ratio (difference)")
    ]
    bound_beyond_data: Annotated[
        bool, _doc("the interval reached beyond resample_min–max (capped there unless runs were paired)", "boolean")
    ]
    interval_rests_on: Annotated[
        str,
        _doc(
            "the noisier arm when a one-batch ratio's arms differ >= 2x in the CV of their runs (`cv_ratio`): arms "
            "of different shape, where no interval held 93–97% in the study (docs/method.md#intervals); empty "
            "otherwise",
            "text",
        ),
    ]
    cv_ratio: Annotated[
        float,
        _doc(
            "larger over smaller sample CV of the two arms' runs in a one-batch unpaired ratio (NaN otherwise)", "ratio"
        ),
    ] = math.nan
    study_coverage: Annotated[
        float,
        _doc(
            "what the known-truth study's 95% intervals covered in batches like this one (arms flagged or not, "
            "this many runs per arm: bench/known_truth.md#arms-of-different-shape); NaN where it has no such cell",
            "fraction 0–1",
        ),
    ] = math.nan
    hit_rate_arm: Annotated[float, _doc("observed cache hit rate of the arm's trials", "fraction 0–1")]
    hit_rate_baseline: Annotated[float, _doc("observed cache hit rate of the baseline's trials", "fraction 0–1")]
    simulated: Annotated[bool, _doc("any compared trial ran on the embedded provider", "boolean")]
    note: Annotated[str, _NOTE]
    family_size: Annotated[
        int,
        _doc(
            "comparisons in the family this row was judged in (every treatment against its baseline on total and "
            "uncached tokens, docs/method.md#family); 0 outside it",
            "count",
        ),
    ] = 0
    family_level: Annotated[
        float, _doc("level of the Holm step-down interval the row was last judged at", "fraction 0–1")
    ] = math.nan
    family_lower: Annotated[float, _doc("lower bound of the interval at `family_level`", "as the estimate")] = math.nan
    family_upper: Annotated[float, _doc("upper bound of the interval at `family_level`", "as the estimate")] = math.nan
    decisive: Annotated[
        bool, _doc("the family's Holm procedure tells this row from no difference (at `family_level`)", "boolean")
    ] = False


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """One arm's mean with its interval (:func:`mean_interval`); NaN bounds, an empty method and a note when none."""

    mean: Annotated[float, _doc("mean of the values", "as the values")]
    lower: Annotated[float, _LOWER]
    upper: Annotated[float, _UPPER]
    method: Annotated[str, _METHOD]
    note: Annotated[str, _NOTE]
    bound_beyond_data: Annotated[
        bool,
        _doc(
            "the interval model put a bound beyond the runs (below the smallest: raised to it; above the largest: "
            "kept, see the note; docs/method.md#intervals)",
            "boolean",
        ),
    ] = False


class Savings(msgspec.Struct, frozen=True, kw_only=True):
    """Per-prompt savings of an arm over a control, summarised across prompts (:func:`per_prompt_savings`)."""

    arm: Annotated[str, ARM]
    control: Annotated[str, _doc("the arm savings are measured against", "id")]
    n: Annotated[int, _doc("prompts with both arms and a non-zero control", "count")]
    median: Annotated[float, _saving("median")]
    mean: Annotated[float, _saving("mean")]
    min: Annotated[float, _saving("min")]
    max: Annotated[float, _saving("max")]
    stdev: Annotated[float, _saving("stdev")]
    lower: Annotated[float, _doc("lower bound of the interval on the mean saving", "fraction")]
    upper: Annotated[float, _doc("upper bound of the interval on the mean saving", "fraction")]
    confidence: Annotated[float, _CONFIDENCE]
    method: Annotated[str, _METHOD]
    per_prompt: Annotated[dict[str, float], _doc("saving per prompt (run index)", "mapping")]
    note: Annotated[str, _NOTE]


class WarmthInvariance(msgspec.Struct, frozen=True, kw_only=True, eq=False):  # a table field has no ==
    """Whether an arm's ratio to the baseline moves with cache warmth across batches (:func:`warmth_invariance`)."""

    arm: Annotated[str, ARM]
    baseline: Annotated[str, _BASELINE]
    metric: Annotated[str, _METRIC]
    n_batches: Annotated[int, _doc("batches holding both arms", "count")]
    per_batch: Annotated[
        pd.DataFrame,
        _doc(
            "per batch holding both arms: the ratio, its log's jackknife variance (`log_ratio_var`, of which "
            "`log_var_arm` and `log_var_baseline`), the hit rates (`hit_rate_arm`, `hit_rate_baseline`, `hit_rate` "
            "of both) and the runs (`n_arm`, `n_baseline`)",
            "table",
        ),
    ]
    slope: Annotated[
        float,
        _doc(
            "change of the log ratio per 10 points of hit rate across batches (fit weighed by runs; variance from "
            "each batch's runs plus the scatter between batches)",
            "log ratio",
        ),
    ]
    slope_lower: Annotated[float, _doc("lower bound of the slope's t-interval", "log ratio")]
    slope_upper: Annotated[float, _doc("upper bound of the slope's t-interval", "log ratio")]
    slope_df: Annotated[float, _doc("degrees of freedom of that interval (Welch-Satterthwaite)", "count")]
    dependence: Annotated[
        str,
        _doc(
            "`invariant` (interval within ±log 1.03 per 10 points), `dependent` (else excludes 0), "
            "`undetermined` (neither), `not judged` (fewer than 3 batches, or hit rates within 1 point)",
            "text",
        ),
    ]
    batches_to_tell: Annotated[
        float,
        _doc(
            "when `undetermined`: batches at hit rates spread like these whose interval would be narrow enough to "
            "answer either way, projected from the observed spread",
            "count",
        ),
    ]
    has_control: Annotated[bool, _doc("a non-isolated control ran in those batches", "boolean")]
    control_hit_rate: Annotated[float, _doc("hit rate of the control trials", "fraction 0–1")]
    isolated_hit_rate: Annotated[float, _doc("hit rate of the isolated trials of both arms", "fraction 0–1")]
    claim_ok: Annotated[bool, _doc("≥ 3 batches and a control: a cache-dependent claim may be made", "boolean")]
    reason: Annotated[str, _doc("why a claim may not be made", "text")]
    verdict: Annotated[str, _doc("the sentence the report prints", "text")]


class QualityGate(msgspec.Struct, frozen=True, kw_only=True):
    """Is the arm shown to answer as well as the baseline (:func:`quality_gate`)? One ``analysis/quality.csv`` row."""

    arm: Annotated[str, ARM]
    baseline: Annotated[str, _BASELINE]
    n_arm: Annotated[int, _doc("finished trials of the arm with a grade", "count")]
    n_baseline: Annotated[int, _doc("finished trials of the baseline with a grade", "count")]
    mean_arm: Annotated[float, _doc("the arm's mean grade", "score 0–1")]
    mean_baseline: Annotated[float, _doc("the baseline's mean grade", "score 0–1")]
    difference: Annotated[float, _doc("mean grade of the arm − of the baseline", "score difference")]
    lower: Annotated[float, _doc("lower bound of the difference's interval (Newcombe)", "score difference")]
    upper: Annotated[float, _doc("upper bound of the difference's interval (Newcombe)", "score difference")]
    confidence: Annotated[float, _CONFIDENCE]
    margin: Annotated[
        float, _doc("the non-inferiority margin: the loss of grade that still counts as parity", "score difference")
    ]
    verdict: Annotated[
        str,
        _doc(
            "`parity shown` (lower > −margin), `worse beyond margin` (upper < −margin), `parity not shown`, "
            "`not graded`",
            "text",
        ),
    ]
    runs_for_parity: Annotated[
        int | None,
        _doc(
            "graded runs per arm that would show parity if both arms scored the pooled mean; parity not shown only",
            "count",
        ),
    ]
    method: Annotated[str, _METHOD]
    note: Annotated[str, _NOTE]


def require_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}; have {', '.join(map(str, frame.columns))}")


def finished(trials: pd.DataFrame) -> pd.DataFrame:
    """The finished trials: ``status`` "ok" (the run stage's mark of a trial that ran to its end).

    Failed trials are counted elsewhere (the run stage's failure line, ``analysis/arms.csv``'s ``failed``) and
    never averaged in: a trial that broke off measures where it stopped, not what its arm costs. A table
    without a ``status`` column (a user's own rows) is taken as finished throughout.
    """
    return trials[trials["status"] == "ok"] if "status" in trials.columns else trials


@dataclass(frozen=True)
class Plan:
    """Runs per arm a batch needs to reach a target, and what the answer rests on."""

    runs_per_arm: int
    target: str  # "precision" (an interval's upper/lower) or "effect" (a ratio to tell from 1)
    precision: float | None
    effect: float | None
    cv_arm: float
    cv_baseline: float
    assurance: float
    confidence: float
    source: str

    @property
    def plus_minus(self) -> float:
        """The precision as a symmetric factor: upper/lower 1.5 is the estimate x/÷ 1.22."""
        return math.sqrt(self.precision) if self.precision else float("nan")

    def sentence(self) -> str:
        """'to resolve a ratio to ×/÷1.22 you need about 46 runs per arm (…)'."""
        if self.target == "precision":
            ci = f"{self.confidence:.0%} CI upper/lower {self.precision:g}"
            goal = f"to resolve a ratio to x/÷{self.plus_minus:.2f} ({ci})"
        else:
            goal = f"to tell a ratio of {self.effect:.2f} from no difference ({self.confidence:.0%} CI excluding 1)"
        return (
            f"{goal} you need about {self.runs_per_arm} runs per arm "
            f"(CV {self.cv_arm:.2f} and {self.cv_baseline:.2f}, {self.source}; {self.assurance:.0%} assurance)"
        )


@dataclass(frozen=True)
class StopDecision:
    """The run stage's answer after a block: add another balanced block, or stop (and why)."""

    add_block: bool
    reason: str
    runs_per_arm: int
    lower: float
    upper: float
    # The interval's level (NaN before the first look) and the look (1, 2, …; 0 before the first): the analysis
    # publishes the interval at this level for a batch the rule stopped (docs/method.md#planning).
    confidence: float = math.nan
    look: int = 0
