"""An analysed batch written as a caveman-style snapshot, ``results.json`` (``python -m kit snapshot --export``).

caveman's evals (docs/method.md#controls and #sources) commit ``{"metadata", "prompts", "arms": {arm: [one
output per prompt]}}`` so anyone recounts them without a model (``kit.analysis.snapshot`` reads that shape).
The export writes a kit batch in the same shape, so the same recount (``python -m kit snapshot``, or caveman's
``measure.py`` itself) reads it, and adds what the kit measured beside the text:

- ``prompts[i]`` is run *i*'s question (the pack's ``prompts_for(i)``, turns joined by a blank line) and
  ``arms[key][i]`` the final answer (``answer.md``) of that arm's trial in run *i*: runs are what pair in a
  batch, so a run is one "prompt" of the snapshot even where two runs ask the same question;
- a terse batch's reference arms take caveman's names, ``baseline`` -> ``__baseline__`` and ``terse`` ->
  ``__terse__``, so the recount finds its control; every other arm keeps its name (``metadata.arm_keys``);
- ``trials[key][i]``: the numbers of the batch's own ``analysis/trials.csv`` for that trial, not recounted
  (the provider's output, total, input, cache-read and uncached input tokens, the grade), and the answer's
  length in characters;
- ``metadata``: the batch's provenance (batch, salt, task and its fixture digest, backend and its version,
  endpoint, model, kit version and commit, when it ran, each arm's instruction) and ``simulated``: true on the
  embedded provider, with the pack's true effect beside it, since a simulation must not be quoted as a model.

The questions come from the task pack the manifest names, rebuilt with its ``task_options``; a pack whose
``fixture_sha256`` differs from the manifest's (its prompts file edited since the batch ran) is refused,
as its questions would not be the ones answered. Only runs in which every arm finished are exported:
caveman's shape has no place for a failed trial, and an empty output would recount as a 100% saving. The
runs left out are listed in ``metadata.excluded_runs``, each failed trial with its status and reason.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from kit import tasks
from kit.analysis.snapshot import BASELINE, EXPORTED, TERSE, SnapshotError
from kit.errors import KitError
from kit.experiment.layout import BatchDir, TrialDir
from kit.files import write_json
from kit.records import Design, Manifest

TOKENS = ("output_tokens", "total_tokens", "input_tokens", "cache_read_tokens", "uncached_input_tokens")
REFERENCE = {"baseline": BASELINE, "terse": TERSE}  # a terse batch's arms under caveman's names
TOKENS_NOTE = (
    "trials.*: the provider's token counts from the batch's analysis/trials.csv; python -m kit snapshot "
    "recounts arms.* with tiktoken o200k_base"
)


class ExportedTrial(msgspec.Struct, frozen=True, kw_only=True):
    """One trial's numbers as the batch's analysis/trials.csv holds them, and its answer's length."""

    trial_id: str
    run: int
    output_tokens: int | None
    total_tokens: int | None
    input_tokens: int | None
    cache_read_tokens: int | None
    uncached_input_tokens: int | None
    answer_chars: int
    grade: float | None
    grade_detail: str


class UnfinishedTrial(msgspec.Struct, frozen=True, kw_only=True):
    """A trial that did not finish with an answer, so its run is left out of the snapshot; and why."""

    trial_id: str
    arm: str
    run: int
    status: str
    reason: str


class ExportMetadata(msgspec.Struct, frozen=True, kw_only=True):
    """caveman's metadata keys (generated_at, model, n_prompts, terse_prefix, claude_cli_version) and the
    batch's provenance."""

    generated_at: str
    exported_at: str
    source: str = EXPORTED
    model: str
    n_prompts: int
    simulated: bool
    true_effect: str | None
    batch: str
    salt: str
    task: str
    fixture_sha256: str | None
    backend: str
    backend_version: str | None
    endpoint: str
    profile: str | None
    kit_version: str | None
    kit_commit: str | None
    started_at: str
    ended_at: str | None
    status: str
    runs_per_arm: int
    baseline: str | None
    arm_keys: dict[str, str]
    instructions: dict[str, str]
    excluded_runs: list[int]
    unfinished_trials: list[UnfinishedTrial]
    tokens_note: str = TOKENS_NOTE
    terse_prefix: str | msgspec.UnsetType = msgspec.UNSET
    claude_cli_version: str | msgspec.UnsetType = msgspec.UNSET


class ExportedSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """``results.json``: caveman's three keys, and ``trials`` aligned with ``prompts`` like ``arms``."""

    metadata: ExportMetadata
    prompts: list[str]
    arms: dict[str, list[str]]
    trials: dict[str, list[ExportedTrial]]


def _fail(batch: BatchDir, problem: str) -> SnapshotError:
    return SnapshotError(f"{batch.root}: {problem}")


def _count(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def _questions(batch: BatchDir, manifest: Manifest, runs: list[int]) -> dict[int, str]:
    """Run index -> the question the pack asked in that run (module docstring: the digest check)."""
    params = manifest.params
    try:
        pack = tasks.get(params.task, **params.task_options)
    except KitError as exc:
        raise _fail(batch, f"cannot rebuild task {params.task!r} to name the runs' questions ({exc})") from None
    then, now = manifest.task.get("fixture_sha256"), pack.describe().get("fixture_sha256")
    if then != now:
        problem = f"task {params.task!r} changed since the batch ran (fixture_sha256 {then} then, {now} now)"
        raise _fail(batch, f"{problem}: its questions would not be the ones answered")
    return {run: "\n\n".join(pack.prompts_for(run)) for run in runs}


def _trials(batch: BatchDir, manifest: Manifest) -> pd.DataFrame:
    path = batch.analysis_csv("trials")
    if not path.exists():
        raise _fail(batch, f"{path.name} missing: run the analyze stage first (python -m kit pipeline)")
    trials = pd.read_csv(path, keep_default_na=False, na_values=[""])
    trials = trials[trials["batch"].astype(str) == manifest.batch]
    if trials.empty:
        raise _fail(batch, f"analysis/trials.csv has no trial of batch {manifest.batch!r}")
    return trials


def _answer(batch: BatchDir, trial_id: str) -> str | None:
    path = TrialDir(batch.trial(trial_id)).answer
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _exported(row: Any, answer: str) -> ExportedTrial:
    grade = None if pd.isna(row.grade) else float(row.grade)
    detail = "" if pd.isna(row.grade_detail) else str(row.grade_detail)
    counts = {c: _count(getattr(row, c)) for c in TOKENS}
    return ExportedTrial(
        trial_id=row.trial_id, run=int(row.run), **counts, answer_chars=len(answer), grade=grade, grade_detail=detail
    )


def _metadata(
    manifest: Manifest, design: Design, keys: dict[str, str], runs: list[int], unfinished: list[UnfinishedTrial]
) -> ExportMetadata:
    settings = {s["arm"]: s for s in design.arm_settings}
    first = settings.get(design.arms[0], {})
    optional: dict[str, Any] = {}
    if design.task == "terse" and "terse" in manifest.arms:
        optional["terse_prefix"] = manifest.arms["terse"].instruction
    if design.backend == "claude" and first.get("version"):
        optional["claude_cli_version"] = first["version"]
    return ExportMetadata(
        generated_at=manifest.ended_at if isinstance(manifest.ended_at, str) else manifest.started_at,
        exported_at=datetime.now(UTC).isoformat(),
        model=design.model,
        n_prompts=len(runs),
        simulated=design.simulated,
        true_effect=design.true_effect if design.simulated else None,
        batch=manifest.batch,
        salt=manifest.salt,
        task=design.task,
        fixture_sha256=manifest.task.get("fixture_sha256"),
        backend=design.backend,
        backend_version=first.get("version"),
        endpoint=design.endpoint,
        profile=design.profile,
        kit_version=design.versions.get("kit"),
        kit_commit=design.versions.get("kit_commit"),
        started_at=manifest.started_at,
        ended_at=manifest.ended_at if isinstance(manifest.ended_at, str) else None,
        status=manifest.status,
        runs_per_arm=design.runs_per_arm,
        baseline=keys.get(design.baseline or "", design.baseline),
        arm_keys=keys,
        instructions={keys[a]: manifest.arms[a].instruction for a in keys if a in manifest.arms},
        excluded_runs=sorted({t.run for t in unfinished}),
        unfinished_trials=unfinished,
        **optional,
    )


def export_batch(batch_dir: str | Path) -> ExportedSnapshot:
    """The snapshot of the analysed batch in ``batch_dir`` (module docstring: what each key holds)."""
    batch = BatchDir(Path(batch_dir))
    if not batch.is_batch():
        raise SnapshotError(f"{batch.root}: not a batch folder (no manifest.json)")
    if not batch.design.exists():
        raise _fail(batch, "analysis/design.json missing: run the analyze stage first (python -m kit pipeline)")
    manifest, (design, _) = batch.read_manifest(), batch.read_design()
    trials = _trials(batch, manifest)
    arms = [a for a in design.arms if a in set(trials["arm"])]
    keys = {a: REFERENCE.get(a, a) if design.task == "terse" else a for a in arms}
    unfinished: list[UnfinishedTrial] = []
    rows: dict[int, dict[str, tuple[Any, str]]] = {}
    for run, group in trials.groupby("run", sort=True):
        by_arm = {r.arm: r for r in group.itertuples(index=False)}
        kept = {}
        for arm in arms:
            row = by_arm.get(arm)
            answer = _answer(batch, row.trial_id) if row is not None and row.status == "ok" else None
            if answer is not None:
                kept[arm] = (row, answer)
            else:
                unfinished.append(_unfinished(arm, int(run), row))
        if len(kept) == len(arms):
            rows[int(run)] = kept
    if not rows:
        raise _fail(batch, f"no run in which every arm finished ({len(unfinished)} trial(s) failed or missing)")
    runs = sorted(rows)
    questions = _questions(batch, manifest, runs)
    return ExportedSnapshot(
        metadata=_metadata(manifest, design, keys, runs, unfinished),
        prompts=[questions[r] for r in runs],
        arms={keys[a]: [rows[r][a][1] for r in runs] for a in arms},
        trials={keys[a]: [_exported(*rows[r][a]) for r in runs] for a in arms},
    )


def _unfinished(arm: str, run: int, row: Any) -> UnfinishedTrial:
    if row is None:
        return UnfinishedTrial(
            trial_id="", arm=arm, run=run, status="missing", reason="no trial in analysis/trials.csv"
        )
    failed = row.status != "ok" and not pd.isna(row.reason)
    reason = str(row.reason) if failed else "no answer.md"
    return UnfinishedTrial(trial_id=row.trial_id, arm=arm, run=run, status=str(row.status), reason=reason)


def write_export(snapshot: ExportedSnapshot, path: str | Path) -> Path:
    """``snapshot`` as JSON at ``path`` (written whole or not at all); the path."""
    return write_json(Path(path), msgspec.to_builtins(snapshot))
