"""The records the stages hand each other: what a file or a stage's result holds, one field per fact.

Why records and not dicts: a dict's keys are spelled wherever it is read, so one fact grew several
spellings (``n_per_arm``, ``n``, ``runs_per_arm``) and a typo read ``None`` silently. Each record here
names its fields once, with a one-line description (``msgspec.Meta``) a reader and the docs can use;
files decode into them with validation, and the old spellings of files already on disk are mapped in
the one function that reads each file (``decode_design``, ``decode_manifest``, ``decode_trial_meta``),
so every other module sees one name per fact. ``kit.experiment.layout`` writes them (``write_record``,
``write_design``): the JSON keeps today's keys and values, and a key written only once known (``UNSET`` until then)
stays absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import pandas as pd

from kit.experiment.design import SETTINGS, Arm, Slot
from kit.params import RunParams

__all__ = [
    "ARM",
    "Analysis",
    "AnalysisFiles",
    "ArmRecord",
    "Decision",
    "Design",
    "FirstRequests",
    "Manifest",
    "Published",
    "StopRule",
    "TrialMeta",
    "UnableArm",
    "decode_design",
    "decode_manifest",
    "decode_trial_meta",
    "docs",
    "field_doc",
]

UNSET = msgspec.UNSET  # a key the file leaves out (written only once known), not a null value


def field_doc(meaning: str, unit: str = "") -> msgspec.Meta:
    """A field's one-line description (``Annotated[type, field_doc(...)]``), with the unit of its values where the
    field is also a table column: ``kit.cli.columns`` builds docs/tables.md from it, so the meaning is written once."""
    return msgspec.Meta(description=meaning, extra={"unit": unit} if unit else None)


_d = field_doc


def docs(record: type[msgspec.Struct]) -> dict[str, tuple[str, str]]:
    """(meaning, unit) of each field of a record (a frozen ``msgspec.Struct`` whose fields are annotated with
    :func:`field_doc`), in field order, "" where it has none: the docs' text for them. A record becomes a table
    row through ``msgspec.structs.asdict`` (field name to value, in field order, shallow)."""
    out = {}
    for f in msgspec.structs.fields(record):
        meta = [m for m in getattr(f.type, "__metadata__", ()) if isinstance(m, msgspec.Meta)]
        meaning = meta[0].description if meta and meta[0].description else ""
        out[f.name] = (meaning, str((meta[0].extra or {}).get("unit", "")) if meta else "")
    return out


# Facts several records hold, described once.
# ARM is public: kit.stats.records describes the arm of its records with it too.
ARM = field_doc("arm (configuration under test)", "id")
_BATCH = field_doc("batch id: the batch folder's name under `outputs/`", "id")
_SIMULATED = field_doc("the embedded provider's scripted model produced the numbers", "boolean")


class FirstRequests(msgspec.Struct, frozen=True, kw_only=True):
    """One arm's first requests: what they read from the provider cache before the trial itself wrote anything,
    so what came from other trials (docs/method.md#controls). A control's figure is the contamination isolation
    removed; an isolated arm's should be 0."""

    arm: Annotated[str, ARM]
    control: Annotated[bool, _d("the arm ran without isolation, as the control")]
    trials: Annotated[int, _d("finished trials whose first request's usage is known")]
    cached_mean: Annotated[float | None, _d("mean cache-read tokens of those first requests (null without one)")]
    reading: Annotated[int, _d("trials whose first request read any cached token")]


class UnableArm(msgspec.Struct, frozen=True, kw_only=True):
    """An arm whose trials show it could not do the task (``kit.analysis.metrics.unable_arms``): every finished trial
    graded 0, or none called a tool while the other arms did. Its ratios compare a failure, whatever it costs."""

    arm: Annotated[str, ARM]
    trials: Annotated[int, _d("the arm's finished trials")]
    graded_zero: Annotated[bool, _d("every graded finished trial of the arm graded 0")]
    no_tool: Annotated[bool, _d("no finished trial of the arm called a tool, while another arm's did")]
    reason: Annotated[str, _d("what the trials show, as the report's first lines say it")]


class Design(msgspec.Struct, frozen=True, kw_only=True):
    """The design facts every figure and the report state; ``analysis/design.json`` (with its warnings)."""

    batch: Annotated[str | list[str], _d("batch id, or the ids of every batch analysed together")]
    task: Annotated[str, _d("the task pack the trials ran")]
    arms: Annotated[list[str], _d("the arms compared, in the batch's order")]
    runs_per_arm: Annotated[int, _d("runs per arm as the batch grew (a stop rule may add blocks)")]
    order: Annotated[str, _d("the schedule parameter: how trials of the arms were ordered")]
    schedule: Annotated[str, _d("the schedule as the report states it (order, and whether arms were blocked)")]
    isolation: Annotated[str, _d("the isolation parameter (docs/method.md#isolation)")]
    isolation_parts: Annotated[list[str], _d("the isolation mechanisms the trials used")] = []
    backend: Annotated[str, _d("what ran the trials: `sdk-openai`, `sdk-anthropic`, `codex`, `claude`")]
    endpoint: Annotated[str, _d("`embedded` (the kit's provider) or `real`")]
    model: Annotated[str, _d("the batch's model parameter")]
    profile: Annotated[str | None, _d("the cache profile of the provider (kit/data/cache_profiles/)")] = None
    simulated: Annotated[bool, _SIMULATED]
    true_effect: Annotated[str | None, _d("the effect a simulated task pack builds in, as it states it")] = None
    versions: Annotated[dict[str, str | None], _d("package and kit versions the run stage recorded")] = {}
    salts: Annotated[list[str], _d("each batch's salt (the seed of its nonces and schedule)")] = []
    arm_settings: Annotated[
        list[dict[str, str | None]], _d("one row per arm as it ran: model, effort, binary, version (and batch)")
    ] = []
    run_warnings: Annotated[list[str], _d("what the run stage warned of before any trial, once each")] = []
    stop_rule: Annotated[
        str | msgspec.UnsetType, _d("why the stop rule stopped the batch; absent without a stop rule")
    ] = UNSET
    shared_first_prefix_tokens: Annotated[
        int | None, _d("tokens at the head of every isolated trial's first request (docs/method.md#isolation)")
    ] = None
    baseline: Annotated[str | None, _d("the arm every ratio divides by")] = None
    # Written by every analysis since they were added; absent (UNSET) from an older design.json, which stays as it was.
    controls: Annotated[
        list[str] | msgspec.UnsetType,
        _d("the arms that ran without isolation, as controls: compared, never headlined"),
    ] = UNSET
    first_requests: Annotated[
        list[FirstRequests] | msgspec.UnsetType,
        _d("per arm, what the trials' first requests read from other trials' cache"),
    ] = UNSET
    unable_arms: Annotated[
        list[UnableArm] | msgspec.UnsetType,
        _d("the arms that could not do the task: no efficiency headline for the batch (docs/method.md#grading)"),
    ] = UNSET
    comparisons: Annotated[
        list[list[str]] | msgspec.UnsetType,
        _d("the [arm, baseline] pairs compared, the report leading with the first; reused by a later analysis"),
    ] = UNSET
    comparisons_from: Annotated[
        str | msgspec.UnsetType,
        _d(
            "where baseline and comparisons came from: `given`, `analysis/design.json` (the last analysis), "
            "`manifest.json` (the run's parameters) or `default`"
        ),
    ] = UNSET

    @property
    def control_arms(self) -> list[str]:
        """``controls``; none where an older analysis did not record them."""
        return [] if isinstance(self.controls, msgspec.UnsetType) else self.controls

    @property
    def unable(self) -> list[UnableArm]:
        """``unable_arms``; none where an older analysis did not look."""
        return [] if isinstance(self.unable_arms, msgspec.UnsetType) else self.unable_arms

    @property
    def first_request_reads(self) -> list[FirstRequests]:
        """``first_requests``; none where an older analysis did not record them."""
        return [] if isinstance(self.first_requests, msgspec.UnsetType) else self.first_requests


# design.json keys of older kits, mapped at the one reading function
_OLD_DESIGN_KEYS = {"n_per_arm": "runs_per_arm", "n": "runs_per_arm"}


def decode_design(data: bytes) -> tuple[Design, list[str]]:
    """A ``design.json`` as a ``Design`` and its warnings; older spellings of a key read as today's."""
    raw = msgspec.json.decode(data)
    for old, new in _OLD_DESIGN_KEYS.items():
        if old in raw:
            value = raw.pop(old)
            raw.setdefault(new, value)
    warnings = list(raw.pop("warnings", []) or [])
    return msgspec.convert(raw, Design), warnings


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """One look of the stop rule at one comparison (``kit.stats.should_continue``, docs/method.md#planning)."""

    scheduled_runs: Annotated[int, _d("runs per arm scheduled when the rule looked")]
    arm: Annotated[str, _d("the arm compared")]
    baseline: Annotated[str, _d("the arm it is compared against")]
    runs_per_arm: Annotated[int, _d("runs per arm the rule estimates the comparison needs")]
    lower: Annotated[float | None, _d("the interval's lower bound so far (null when not finite)")]
    upper: Annotated[float | None, _d("the interval's upper bound so far (null when not finite)")]
    add_block: Annotated[bool, _d("whether the rule asks for another block of runs")]
    reason: Annotated[str, _d("the rule's reason, as the run stage prints it")]
    confidence: Annotated[
        float | None, _d("level of that interval (anytime-valid with exclude_one); null before the first look")
    ] = None
    look: Annotated[int, _d("the rule's look (1 at its first; 0 before it): the anytime level's k")] = 0


class StopRule(msgspec.Struct, frozen=True, kw_only=True):
    """The manifest's stop-rule record: each look's decisions and where the batch got to."""

    decisions: Annotated[list[Decision], _d("every look's decisions, in order")] = []
    runs_per_arm: Annotated[int, _d("runs per arm the batch has reached so far")]
    reason: Annotated[str | msgspec.UnsetType, _d("why the batch stopped; absent while it grows")] = UNSET


class ArmRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An arm as the manifest records it (``kit.experiment.design.Arm``, its environment's names only: values may be
    secrets); the fields a later kit added have their defaults, so an older manifest reads."""

    name: Annotated[str, ARM]
    instruction: Annotated[str, _d("the instruction the arm adds")] = ""
    placement: Annotated[str, _d("where the instruction goes (system, developer_instructions, agents_file, …)")] = (
        "system"
    )
    flags: Annotated[list[str], _d("extra command-line flags of the arm's CLI")] = []
    env: Annotated[list[str], _d("the names of the environment variables the arm sets (never their values)")] = []
    session: Annotated[str, _d("`resume` (one session across turns) or `fresh` (a session per turn)")] = "resume"
    control: Annotated[bool, _d("whether the arm runs without isolation, as the control")] = False
    description: Annotated[str, _d("what the arm is, in the task pack's words")] = ""
    tools: Annotated[list[str], _d("extra tools the arm offers beyond the backend's own")] = []
    model: Annotated[str | None, _d("the arm's own model (None: the batch's)")] = None
    effort: Annotated[str | None, _d("the arm's own reasoning effort (None: the batch's)")] = None
    codex_bin: Annotated[str | None, _d("the arm's own Codex binary (None: the batch's)")] = None
    claude_bin: Annotated[str | None, _d("the arm's own Claude Code binary (None: the batch's)")] = None

    @classmethod
    def of(cls, arm: Arm) -> ArmRecord:
        """The record of ``arm`` (``Arm.to_dict``: lists for tuples, the environment's names)."""
        return msgspec.convert(arm.to_dict(), cls)

    def settings(self) -> dict[str, str | None]:
        """The per-arm settings as ``Arm.settings`` gives them: what a resumed batch must keep."""
        return {key: getattr(self, key) for key in SETTINGS}


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """A batch's ``manifest.json``: its parameters, schedule and provenance, written by the run stage."""

    kit_manifest: Annotated[int, _d("manifest format version")] = 1
    batch: Annotated[str, _BATCH]
    salt: Annotated[str, _d("the batch's salt: seeds its nonces and schedule")]
    params: Annotated[RunParams, _d("the run parameters as validated (kit.params.RunParams)")]
    simulated: Annotated[bool, _SIMULATED]
    blocked: Annotated[bool, _d("arms ran in separate time blocks (order: blocked)")] = False
    task: Annotated[dict[str, Any], _d("the task pack's description of itself (name, preset, true effect, …)")] = {}
    arms: Annotated[dict[str, ArmRecord], _d("each arm's definition, by name")] = {}
    arm_settings: Annotated[
        dict[str, dict[str, str | None]], _d("per arm, what it ran with: model, effort, binary, version")
    ] = {}
    warnings: Annotated[list[str], _d("what a reader must know before the batch runs")] = []
    isolation_parts: Annotated[list[str], _d("the isolation mechanisms the trials use")] = []
    schedule: Annotated[list[Slot], _d("every trial in the order it starts")] = []
    same_arm_predecessors: Annotated[dict[str, int], _d("per arm, trials that followed a trial of the same arm")] = {}
    started_at: Annotated[str, _d("when the batch started (ISO-8601 time)")]
    stop_rule: Annotated[StopRule | msgspec.UnsetType, _d("the stop rule's record; absent without one")] = UNSET
    status: Annotated[
        str,
        _d(
            "`running`, `complete`, `incomplete` (a trial failed), or `failed` (an arm without a successful "
            "trial, or a stage that stopped)"
        ),
    ]
    versions: Annotated[dict[str, str | None], _d("package and kit versions at the last (re)start")] = {}
    resumed_at: Annotated[list[str] | msgspec.UnsetType, _d("when the batch was resumed; absent if never")] = UNSET
    ended_at: Annotated[str | msgspec.UnsetType, _d("when the batch ended; absent while it runs")] = UNSET
    trial_errors: Annotated[
        dict[str, str] | msgspec.UnsetType, _d("trials that could not be recorded, with the error; set at the end")
    ] = UNSET
    raw_sha256: Annotated[
        dict[str, str] | msgspec.UnsetType, _d("sha256 of every raw file, by path under raw/; set at the end")
    ] = UNSET
    backend_versions: Annotated[
        list[dict[str, str]] | msgspec.UnsetType, _d("every distinct version set the trials report; set at the end")
    ] = UNSET

    @property
    def n_prompts(self) -> int:
        """The task pack's number of distinct prompts (1 when it does not say): >1 pairs runs by index."""
        return int(self.task.get("n_prompts") or 1)


def decode_manifest(data: bytes) -> Manifest:
    """A ``manifest.json`` as a ``Manifest`` (every manifest written so far uses today's keys)."""
    return msgspec.json.decode(data, type=Manifest)


class TrialMeta(msgspec.Struct, frozen=True, kw_only=True):
    """A trial's ``raw/<trial_id>/meta.json``: what ran, how it ended, its grade and its tokens (written last)."""

    kit_trial: Annotated[int, _d("trial record format version")] = 1
    batch: Annotated[str, _BATCH]
    trial_id: Annotated[str, _d("trial id, `r<run>-<arm>`", "id")]
    arm: Annotated[str, ARM]
    run: Annotated[int, _d("run index within the batch; the same index pairs the arms' trials", "index from 0")]
    order_index: Annotated[
        int, _d("position of the trial in the batch's schedule (docs/method.md#interleaving)", "index from 0")
    ]
    nonce: Annotated[str, _d("the trial's nonce (docs/method.md#isolation)")]
    isolation: Annotated[list[str], _d("isolation mechanisms the trial used (none for the control)")] = []
    control: Annotated[bool, _d("the arm is the non-isolated control (docs/method.md#replication)", "boolean")] = False
    prompt_cache_key: Annotated[str | None, _d("the prompt_cache_key the client really sent")] = None
    cache_bust_tool: Annotated[str | None, _d("name of the trial's cache-busting tool")] = None
    backend: Annotated[
        str, _d("what ran the trial: `sdk-openai`, `sdk-anthropic`, `codex`, `claude`, `snapshot`", "text")
    ]
    endpoint: Annotated[str, _d("`embedded` (the kit's provider) or `real`")]
    model: Annotated[str, _d("the model the trial asked for")]
    effort: Annotated[str | None, _d("reasoning effort the trial asked for")] = None
    retention: Annotated[str | None, _d("prompt-cache retention the trial asked for")] = None
    simulated: Annotated[bool, _SIMULATED]
    workdir: Annotated[str, _d("the folder the agent worked in")] = ""
    command: Annotated[list[str], _d("the command line that ran the agent (empty on the SDK backends)")] = []
    versions: Annotated[dict[str, str], _d("the backend's versions (CLI or SDK package)")] = {}
    started_at: Annotated[str, _d("when the trial started (ISO-8601 time)")]
    ended_at: Annotated[str, _d("when the trial ended (ISO-8601 time)")]
    wall_s: Annotated[float, _d("wall-clock duration, seconds")]
    status: Annotated[str, _d("`ok` or `failed`; failed trials are counted, never averaged in", "text")]
    reason: Annotated[str, _d("why the trial failed (empty when it finished)", "text")] = ""
    turns: Annotated[int, _d("user turns the trial sent")] = 0
    cycles: Annotated[int, _d("model responses in the trial", "count")] = 0
    grade: Annotated[
        float | None, _d("answer quality against the task's ground truth (docs/method.md#grading)", "fraction 0–1")
    ] = None
    grade_detail: Annotated[str, _d("what the grader counted", "text")] = ""
    transcripts: Annotated[list[str], _d("the trial's transcript files, primary first")] = []
    total_tokens: Annotated[int, _d("input + output tokens the provider log counts for the trial")] = 0


def decode_trial_meta(data: bytes) -> TrialMeta:
    """A trial's ``meta.json`` as a ``TrialMeta`` (every meta.json written so far uses today's keys)."""
    return msgspec.json.decode(data, type=TrialMeta)


class Analysis(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """What the analyze stage computed (and wrote under ``analysis/``): the analyze notebook shows it."""

    design: Annotated[Design, _d("the design facts, as analysis/design.json holds them")]
    trials: Annotated[pd.DataFrame, _d("analysis/trials.csv: one row per trial, priced and structural")]
    ratios: Annotated[pd.DataFrame, _d("analysis/ratios.csv: every arm against the baseline, per metric")]
    arms: Annotated[pd.DataFrame, _d("analysis/arms.csv: each arm's means with intervals")]
    headline: Annotated[pd.DataFrame, _d("analysis/headline.csv: the report's headline table")]
    warmth: Annotated[pd.DataFrame, _d("analysis/warmth.csv: the uncached ratio across cache warmth")]
    observed: Annotated[pd.DataFrame, _d("analysis/observed.csv: each batch's hit rates and ratios")]
    occupancy: Annotated[pd.DataFrame, _d("analysis/occupancy.csv: residual context occupancy per arm")]
    occupancy_trials: Annotated[pd.DataFrame, _d("analysis/occupancy_trials.csv: occupancy per trial")]
    occupancy_comparison: Annotated[
        pd.DataFrame, _d("analysis/occupancy_comparison.csv: explore residual against file access")
    ]
    savings: Annotated[pd.DataFrame, _d("analysis/savings.csv: per-prompt savings (docs/method.md#savings)")]
    warmth_invariance: Annotated[
        pd.DataFrame, _d("analysis/warmth_invariance.csv: does the uncached ratio move with hit rates")
    ]
    quality: Annotated[pd.DataFrame, _d("analysis/quality.csv: the grade's non-inferiority gate per comparison")]
    warnings: Annotated[list[str], _d("every warning of the analysis, as design.json and the report list them")]
    window_tokens: Annotated[int, _d("the context window occupancy is measured against")]
    occupancy_block: Annotated[str, _d("the printed occupancy block, quoting the tables' own numbers")]

    def table(self, name: str) -> pd.DataFrame:
        """The table written as ``analysis/<name>.csv``."""
        table: pd.DataFrame = getattr(self, name)
        return table


class AnalysisFiles(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """What the analyze stage wrote, read back (``BatchDir.read_analysis``): what the plot stage draws and reports
    from, with the parse stage's requests. A table analyze writes only for some batches is empty when absent."""

    design: Annotated[Design, _d("analysis/design.json's design facts")]
    warnings: Annotated[list[str], _d("analysis/design.json's warnings")]
    trials: Annotated[pd.DataFrame, _d("analysis/trials.csv")]
    ratios: Annotated[pd.DataFrame, _d("analysis/ratios.csv, its columns' types as written")]
    headline: Annotated[pd.DataFrame, _d("analysis/headline.csv")]
    warmth: Annotated[pd.DataFrame, _d("analysis/warmth.csv")]
    observed: Annotated[pd.DataFrame, _d("analysis/observed.csv")]
    arms: Annotated[pd.DataFrame, _d("analysis/arms.csv, or empty")]
    savings: Annotated[pd.DataFrame, _d("analysis/savings.csv, or empty")]
    occupancy: Annotated[pd.DataFrame, _d("analysis/occupancy.csv, or empty")]
    occupancy_comparison: Annotated[pd.DataFrame, _d("analysis/occupancy_comparison.csv, or empty")]
    quality: Annotated[pd.DataFrame, _d("analysis/quality.csv, or empty (an analysis older than the gate)")]
    requests: Annotated[pd.DataFrame, _d("tables/requests.parquet: the cycle-growth figure's rows")]


class Published(msgspec.Struct, frozen=True, kw_only=True):
    """What the plot stage wrote: the report, each figure's PNG, and the headline text."""

    report: Annotated[Path, _d("the report's markdown file, as the caller gave the batch folder")]
    figures: Annotated[dict[str, Path], _d("figure name -> its PNG, for the figures this batch shows")]
    headline: Annotated[str, _d("the headline sentences the report opens with")]
