"""The run stage: turn arms into interleaved, isolated trials and record everything raw.

``run_batch`` is what ``notebooks/run.ipynb`` calls. It is resumable: re-running a batch skips
trials whose ``meta.json`` exists (a trial writes it last), moves an interrupted trial's partial
folder aside untouched and runs it again, and reruns failed trials only with ``retry_failed``.
A failed trial is recorded with its reason, never dropped.

Faults a trial's backend meets (a CLI killed, a dropped connection, a hang past ``timeout_s``) make
the trial ``failed`` in its ``meta.json``. A trial that cannot even be recorded (its folder became
read-only, the disk filled) is listed under ``trial_errors`` in the manifest; the other trials go on,
and the stage then raises ``RunIncomplete`` naming it, so the notebook stops with the reason and a
re-run (once the cause is fixed) runs exactly the trials still missing. An interrupt (Ctrl-C, a
papermill timeout) lets running trials finish and starts no new one.

With a stop rule (``stop``, docs/method.md#planning) the batch grows until the answer is known: it runs
``runs_per_arm`` runs per arm, or up to the rule's first look if that is later, then after every balanced
block of one run per arm asks ``kit.stats.should_continue`` for each arm against the baseline and adds a
block while any comparison says so, up to ``max_runs_per_arm``. A block is the next run of
``design.schedule``'s run-major order, so the first runs' schedule never changes as the batch grows: a
resume finds every recorded trial where it was. The manifest keeps each look's decisions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import importlib
import importlib.metadata
import math
import os
import shutil
import string
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pandas as pd
from tqdm import tqdm

from kit import tasks
from kit.agents import login
from kit.agents.base import TrialOutcome, TrialSpec
from kit.agents.cli_common import homes_root, reap, resolve_binary, stop_all, version
from kit.errors import KitError, NoTrialSucceeded
from kit.experiment import design, offered, provenance
from kit.experiment.backends import BACKENDS
from kit.experiment.design import Arm, ParamError, Slot
from kit.experiment.layout import PROVIDER_LOG, BatchDir, from_root, new_batch_id, shown, write_record
from kit.experiment.lock import batch_lock
from kit.experiment.redact import redact
from kit.files import atomic_write, sha256_tree, write_text
from kit.params import STOP_RULE, RunParams, check_baseline, did_you_mean, run_params
from kit.provider.policy import Policy
from kit.provider.service import trial_base_url
from kit.records import UNSET, ArmRecord, Decision, Manifest, StopRule, TrialMeta

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "EMBEDDED_KEY",
    "IDENTITY",
    "CopiedLog",
    "DiskFull",
    "NoTrialSucceeded",
    "ProviderSettings",
    "RunConfig",
    "RunIncomplete",
    "arm_settings",
    "check_resume",
    "configure",
    "failure_summary",
    "mark_failed",
    "planning",
    "provider_settings",
    "run_batch",
    "runner",
    "schedule_table",
    "shown",
    "work_root",
]

EMBEDDED_KEY = "kit-embedded-placeholder"  # not a secret: the embedded provider ignores it
# Parameters that define a batch: a resumed batch must match them exactly.
IDENTITY = (
    "task",
    "arms",
    "runs_per_arm",
    "order",
    "backend",
    "endpoint",
    "upstream_url",
    "model",
    "retention",
    "isolation",
    "seed",
    "task_options",
    "stop",
)


def runner(backend: str) -> Callable[[str, TrialSpec], TrialOutcome]:
    """The function that runs one trial on ``backend`` (a key of ``kit.experiment.backends.BACKENDS``)."""
    return BACKENDS[backend].runner()


class RunIncomplete(KitError, RuntimeError):
    """Some trials could not be recorded; ``errors`` maps each trial id to its reason."""

    def __init__(self, batch_dir: Path, errors: dict[str, str]) -> None:
        listed = "; ".join(f"{t}: {why}" for t, why in sorted(errors.items()))
        super().__init__(
            f"{len(errors)} trial(s) of {batch_dir} could not be recorded ({listed}); fix the cause and run the "
            "batch again: the missing trials run, the recorded ones are kept"
        )
        self.batch_dir, self.errors = batch_dir, errors


@dataclass(frozen=True)
class RunConfig:
    params: RunParams
    pack: tasks.TaskPack
    arms: dict[str, Arm]
    warnings: tuple[str, ...] = ()  # what a reader must know before the batch runs (the manifest keeps them)

    @property
    def batch(self) -> str:
        """The batch id: ``configure`` names a new batch, so it is never None here."""
        assert self.params.batch is not None, "RunConfig is made by configure"
        return self.params.batch

    @property
    def profile(self) -> str:
        """The provider's cache profile: ``configure`` takes the backend's default for None."""
        assert self.params.profile is not None, "RunConfig is made by configure"
        return self.params.profile

    @property
    def batch_dir(self) -> BatchDir:
        return BatchDir(from_root(self.params.outputs_dir) / self.batch)


def _check_backend_options(params: RunParams) -> None:
    accepted = BACKENDS[params.backend].options
    unknown = sorted(set(params.backend_options) - accepted)
    if unknown:
        hint = did_you_mean(unknown[0], accepted)
        reason = f"unknown option(s) {unknown} for backend {params.backend!r} (they would be ignored){hint}"
        raise ParamError("backend_options", reason, sorted(accepted))


def configure(values: Mapping[str, Any]) -> RunConfig:
    """Validate the run notebook's parameters; fail fast, naming the parameter and what it accepts."""
    params = run_params(values)
    if params.backend not in BACKENDS:
        raise ParamError("backend", f"{params.backend!r} is not available in this version", sorted(BACKENDS))
    _check_backend_options(params)
    params = login.check(params)  # auth: login, the user's own login (kit/agents/login.py)
    pack = tasks.get(params.task, **params.task_options)
    arms = dict(pack.arms())
    for name, spec in params.arm_defs.items():
        base = arms.get(name)
        merged = {**(base.to_dict() if base else {}), **spec}
        merged.pop("name", None)
        merged["env"] = {**(dict(base.env) if base else {}), **spec.get("env", {})}
        arms[name] = Arm.from_dict(name, merged)
    unknown = [a for a in params.arms if a not in arms]
    if unknown:
        problem = f"unknown arm {unknown[0]!r} for task {params.task!r}{did_you_mean(unknown[0], arms)}"
        raise ParamError("arms", problem, sorted(arms))
    design.schedule(params.arms, 1, params.order, "check", params.seed, params.allow_blocked)
    if params.stop is not None:
        _check_stop(params, params.stop)
    params = _check_endpoint(params)
    for name in params.arms:
        _check_arm_settings(params, arms[name])
        _check_user_files_kept(params, arms[name])
    profile = params.profile or BACKENDS[params.backend].default_profile
    params = msgspec.structs.replace(params, batch=params.batch or new_batch_id(params.task), profile=profile)
    models = [arms[name].model or params.model for name in params.arms]
    warnings = design.retention_warnings(profile, models, params.retention) + _question_warnings(params, pack)
    caveat = getattr(pack, "caveat", None)  # what the pack's own result cannot say (batch-read's upper bound)
    warnings += [caveat] if isinstance(caveat, str) else []
    return RunConfig(params, pack, arms, tuple(warnings))


def _question_warnings(params: RunParams, pack: tasks.TaskPack) -> list[str]:
    """A pack that asks question ``run % N`` (its facts' ``n_prompts``): the runs cover its questions unevenly
    unless they are a multiple of N, and some never, with fewer runs than questions."""
    n = pack.describe().get("n_prompts")
    runs = params.runs_per_arm
    if not isinstance(n, int) or n <= 1 or runs % n == 0 or params.stop is not None:
        return []
    if runs < n:
        return [
            f"questions: runs_per_arm {runs} asks only the first {runs} of the pack's {n} questions (run i asks "
            f"question i mod {n}); the others are never asked"
        ]
    return [
        f"questions: runs_per_arm {runs} is not a multiple of the pack's {n} questions, so the first {runs % n} are "
        "asked once more than the rest"
    ]


# The stop rule (docs/method.md#planning). kit.stats is imported where a rule is used: it takes most of a
# second to import, and checking a batch without one (kit batch, before anything is written) needs none of it.
_STOP_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_runs_per_arm": (lambda v: type(v) is int and v >= 1, "an integer >= runs_per_arm"),
    "min_runs_per_arm": (lambda v: type(v) is int and v >= 1, "an integer, the first look (the default is the floor)"),
    "precision": (lambda v: type(v) in (int, float) and v > 1, "an interval upper/lower > 1, e.g. 1.5"),
    "exclude_one": (lambda v: type(v) is bool, "true or false"),
}


def _check_stop(params: RunParams, stop: Mapping[str, Any]) -> None:
    """Refuse a stop rule the run stage could not follow, before anything is written: the values of its keys
    here, its keys by ``kit.stats.should_continue`` itself on no trials (so the words are the ones a look
    would use), then what the batch needs: a run-major order to grow in blocks, and a first look the cap allows
    and no earlier than ``kit.stats.STOP_FIRST_LOOK``, the floor the known-truth stop table supports (an earlier
    one is refused, not raised: a batch that asked for 5 and silently ran 15 would surprise its budget)."""
    from kit import stats

    arms = params.arms
    for key, (valid, accepted) in _STOP_VALUES.items():
        if key in stop and not valid(stop[key]):
            raise ParamError("stop", f"{key}: got {stop[key]!r}", f"{STOP_RULE}, {key} {accepted}")
    stats.should_continue(pd.DataFrame({"arm": [], "status": []}), arms[1], arms[0], stop)
    if not (stop.get("precision") or stop.get("exclude_one")):  # the rule would never stop before the cap
        raise ParamError("stop", "exclude_one: false and no precision: no target", STOP_RULE)
    cap = stop["max_runs_per_arm"]
    if cap < params.runs_per_arm:
        raise ParamError("stop", f"max_runs_per_arm {cap} is below runs_per_arm {params.runs_per_arm}", STOP_RULE)
    floor = stats.STOP_FIRST_LOOK
    if stop.get("min_runs_per_arm", floor) < floor:
        problem = (
            f"min_runs_per_arm {stop['min_runs_per_arm']} is below the first look the known-truth study supports, "
            f"{floor} runs per arm (bench/known_truth.md#stopping-rules: from fewer, batches stopped on a narrow "
            "interval undercover)"
        )
        raise ParamError("stop", problem, f"{STOP_RULE}, with min_runs_per_arm >= {floor} or left out")
    if cap < _first_look(stop):
        problem = f"max_runs_per_arm {cap} comes before the rule's first look at {_first_look(stop)} runs per arm"
        raise ParamError("stop", problem, f"{STOP_RULE}, with min_runs_per_arm <= max_runs_per_arm")
    if params.order == "blocked":
        accepted = f"{STOP_RULE} with order alternate or random (None with blocked)"
        raise ParamError("stop", "a blocked order cannot grow in balanced blocks", accepted)
    check_baseline(params.baseline, arms)


def _first_look(stop: Mapping[str, Any]) -> int:
    """Runs per arm at the rule's first look, as ``kit.stats.should_continue`` counts them: before it every
    look would only say "add a block", so the batch runs that far at once, all arms in parallel."""
    from kit import stats

    return max(int(stop.get("min_runs_per_arm", stats.STOP_FIRST_LOOK)), stats.MIN_RUNS)


def planning(cfg: RunConfig) -> str:
    """What the run notebook says before the batch starts: the runs a ratio needs at a typical spread
    (``kit.stats.plan_for_params``, docs/method.md#planning) and, with a stop rule, how the batch will grow."""
    from kit import stats

    p = cfg.params
    line = stats.plan_for_params(p.runs_per_arm)
    if p.stop is None:
        return line
    return (
        f"{line} Stop rule {p.stop}: the batch runs {max(p.runs_per_arm, _first_look(p.stop))} runs per "
        f"arm, then adds one run per arm at a time until every comparison with {p.baseline_arm!r} meets the rule, "
        f"up to {p.stop['max_runs_per_arm']} runs per arm."
    )


def _check_user_files_kept(params: RunParams, arm: Arm) -> None:
    """On a user's repository an instruction written as AGENTS.md / CLAUDE.md would replace the repository's own
    files in the working copy, so the arm must inject it instead (docs/method.md#controls)."""
    if params.task_options.get("repo") and arm.placement == "agents_file" and arm.instruction:
        problem = f"arm {arm.name!r} would overwrite the repository's own AGENTS.md / CLAUDE.md (placement agents_file)"
        raise ParamError(f"arm_defs.{arm.name}.placement", problem, "developer_instructions on a user repository")


def _check_endpoint(params: RunParams) -> RunParams:
    """``upstream_url`` only where a proxy forwards to it, ``retention`` only where a request carries it; the URL
    is kept as the proxy's origin: every client adds ``/v1`` itself, so a trailing ``/v1`` (as OPENAI_BASE_URL
    names it) is dropped and ANTHROPIC_BASE_URL's form (no ``/v1``) is the same URL. Returns the parameters
    with that URL."""
    if params.upstream_url is not None:
        if params.endpoint != "real":
            raise ParamError("upstream_url", "set, but endpoint is 'embedded' (nothing is forwarded)", "None")
        url = params.upstream_url.rstrip("/")
        params = msgspec.structs.replace(params, upstream_url=url[: -len("/v1")] if url.endswith("/v1") else url)
    if params.retention is not None and params.backend != "sdk-openai":
        raise ParamError(
            "retention",
            f"backend {params.backend!r} does not send prompt_cache_retention (its client decides)",
            "None, or backend sdk-openai",
        )
    return params


def _check_arm_settings(params: RunParams, arm: Arm) -> None:
    """An arm's binary must exist and belong to the batch's backend (another backend would ignore it)."""
    cli = BACKENDS[params.backend].cli
    for key in ("codex_bin", "claude_bin"):
        value = getattr(arm, key)
        if value is None:
            continue
        if cli is None or key != cli.option:
            problem = f"arm {arm.name!r} sets {key}, which backend {params.backend!r} does not run"
            raise ParamError(f"arm_defs.{arm.name}.{key}", problem, f"{cli.option} or nothing" if cli else "nothing")
        if resolve_binary(value, cli.program) is None:
            problem = f"arm {arm.name!r}: binary {value!r} does not exist (not a file, not on PATH)"
            raise ParamError(f"arm_defs.{arm.name}.{key}", problem, "an executable path or a name on PATH")


def run_batch(cfg: RunConfig, progress: bool = True) -> Path:
    """Run (or resume) the batch; returns its folder. With a stop rule, block after block until it says stop.
    Holds the batch's lock (``kit.experiment.lock``): a second run of the same batch is refused, not interleaved."""
    with batch_lock(cfg.batch_dir.root):
        try:
            return _run_batch(cfg, progress)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            mark_failed(cfg.batch_dir)
            where = f" ({exc.filename})" if exc.filename else ""
            raise DiskFull(
                f"the disk is full{where}: free space and run the same command again (recorded trials are kept)"
            ) from None


class DiskFull(KitError, OSError):
    """A write of the run stage met a full disk (ENOSPC): one line, and the manifest no longer says running."""


def mark_failed(bd: BatchDir) -> None:
    """On a full disk: the manifest says the run failed, not that it is running. Rewritten whole if a new file still
    fits, else in place: ``"running"`` becomes ``"failed" `` (as many bytes, so no block is allocated)."""
    if not bd.manifest.exists():
        return
    try:
        _write_manifest(bd, msgspec.structs.replace(bd.read_manifest(), status="failed", ended_at=_now()))
        return
    except OSError:
        pass
    with contextlib.suppress(OSError), bd.manifest.open("r+b") as fh:
        data = fh.read()
        at = data.find(b'"status": "running"')
        if at >= 0:
            fh.seek(at)
            fh.write(b'"status": "failed" ')


def _run_batch(cfg: RunConfig, progress: bool) -> Path:
    bd = cfg.batch_dir
    bd.raw.mkdir(parents=True, exist_ok=True)
    manifest = _open_manifest(cfg, bd)
    workdirs = _prepare_workdirs(cfg, bd)
    errors: dict[str, str] = {}
    with _provider(cfg, bd, manifest.salt) as (base_url, log_path):
        while True:
            slots = list(manifest.schedule)
            todo = [s for s in slots if _needs_run(bd, s, cfg.params.retry_failed)]
            _run_slots(cfg, bd, (slots, todo), workdirs, (base_url, log_path), errors, progress)
            if errors or cfg.params.stop is None:
                break
            if not todo and _stopped(manifest):
                break  # a stopped batch resumed with nothing to run: nothing new to look at
            manifest, grew = _look(cfg, bd, manifest, progress)
            if not grew:
                break
    trials = _trial_table(bd.root, ["simulated", "arm", "status", "reason"])
    summary = failure_summary(bd.root)
    if summary:
        print(summary, flush=True)
    hopeless = None if errors else _no_success(trials, cfg.params.arms)
    manifest = msgspec.structs.replace(
        manifest,
        # endpoint real, but the upstream was the kit's own provider: the batch measured the simulation
        simulated=bool(manifest.simulated or trials["simulated"].fillna(False).astype(bool).any()),
        ended_at=_now(),
        status="incomplete" if errors else "failed" if hopeless else "complete",
        trial_errors=errors,
        raw_sha256=sha256_tree(bd.raw),
        backend_versions=_backend_versions(bd),
        warnings=list(dict.fromkeys([*manifest.warnings, *_offered_warnings(bd)])),
    )
    _write_manifest(bd, manifest)
    if errors:
        raise RunIncomplete(bd.root, errors)
    if hopeless:
        raise hopeless
    return bd.root


def _reasons(reasons: pd.Series, shown: int = 3) -> str:
    """The most common distinct reasons, each with its count: ``2 × turn 1: …; 1 × …``."""
    counts = reasons.fillna("").replace("", "no reason recorded").value_counts()
    listed = [f"{n} × {why}" for why, n in counts.head(shown).items()]
    more = len(counts) - shown
    return "; ".join(listed) + (f"; and {more} other reason(s)" if more > 0 else "")


def failure_summary(batch_dir: Path) -> str:
    """One line when trials of the batch failed: how many, and their commonest reasons (empty when none did).
    The run notebook and ``kit batch`` print it as the run stage ends, before any later stage can hide it."""
    trials = _trial_table(batch_dir, ["status", "reason"])
    failed = trials[trials["status"] != "ok"]
    if failed.empty:
        return ""
    return f"{len(failed)} of {len(trials)} trial(s) failed: {_reasons(failed['reason'])}"


def _no_success(trials: pd.DataFrame, arms: list[str]) -> NoTrialSucceeded | None:
    """The error for a batch, or an arm, without one successful trial; None when every arm has one."""
    from kit import stats

    ok = stats.finished(trials)
    if ok.empty:
        return NoTrialSucceeded(f"no trial succeeded ({len(trials)} failed): {_reasons(trials['reason'])}")
    for arm in arms:
        mine = trials[trials["arm"] == arm]
        if not mine.empty and (mine["status"] != "ok").all():
            reasons = _reasons(mine["reason"])
            return NoTrialSucceeded(f"no trial of arm {arm!r} succeeded ({len(mine)} failed): {reasons}")
    return None


def _run_slots(
    cfg: RunConfig,
    bd: BatchDir,
    schedule: tuple[list[Slot], list[Slot]],
    workdirs: dict[str, Path],
    endpoint: tuple[str, Path],
    errors: dict[str, str],
    progress: bool,
) -> None:
    """Run the trials still to do of the schedule (all slots, those to do), adding any that could not be
    recorded to ``errors``."""
    slots, todo = schedule
    counters = {"failed": 0, "tokens": 0, "done": 0}
    # A bar on a terminal; in a notebook (stderr is no terminal) a bar's redraws become a stderr box in
    # JupyterLab and one saved line per redraw, so there each finished trial prints one line instead.
    lines = progress and not sys.stderr.isatty()
    bar = tqdm(
        total=len(slots),
        initial=len(slots) - len(todo),
        desc=cfg.batch,
        unit="trial",
        disable=not progress or lines,
    )
    lock = threading.Lock()

    stopping = threading.Event()

    def one(slot: Slot) -> None:
        try:
            meta = _run_trial(cfg, bd, slot, workdirs[slot.arm], *endpoint, stopping)
            status, tokens = meta.status, meta.total_tokens
        except _Interrupted:
            return  # left unrecorded: a resume sets it aside and runs it again
        except Exception as exc:  # the trial could not be recorded in its folder: say so, go on
            status, tokens = "error", 0
            errors[slot.trial_id] = redact(f"{type(exc).__name__}: {exc}")
        with lock:
            counters["failed"] += status != "ok"
            counters["tokens"] += tokens or 0
            bar.set_postfix(failed=counters["failed"], tokens=counters["tokens"])
            bar.update(1)
            counters["done"] += 1
            if lines:
                print(f"trial {counters['done']}/{len(todo)} {slot.trial_id}: {status}, "
                      f"{tokens or 0} tokens", flush=True)  # fmt: skip

    pool = ThreadPoolExecutor(max_workers=cfg.params.concurrency)
    try:
        for future in [pool.submit(one, s) for s in todo]:  # submitted (and started) in schedule order
            future.result()
    except BaseException:  # an interrupt: no new trial starts; a running CLI is ended, an SDK trial finishes
        stopping.set()
        stop_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()


def _stopped(manifest: Manifest) -> bool:
    """Whether the stop rule has recorded why the batch stopped (it leaves no reason while the batch grows)."""
    return isinstance(manifest.stop_rule, StopRule) and manifest.stop_rule.reason is not UNSET


def _look(cfg: RunConfig, bd: BatchDir, manifest: Manifest, progress: bool) -> tuple[Manifest, bool]:
    """One look of the stop rule at the trials so far (docs/method.md#planning): record every comparison's
    decision, then extend the schedule by one balanced block (grew: True) or record why the batch stops."""
    p, record, stop = cfg.params, manifest.stop_rule, cfg.params.stop
    if not isinstance(record, StopRule) or stop is None:
        raise ValueError(f"{shown(bd.manifest)}: no stop rule or no stop_rule record, yet the stop rule looks")
    runs = max(s.run for s in manifest.schedule) + 1
    decisions = _decisions(p, stop, bd, manifest, runs)
    if progress:
        for d in decisions:
            print(f"look at {runs} runs per arm, {d.arm} vs {d.baseline}: {d.reason}", flush=True)
    cap = stop["max_runs_per_arm"]
    wanted = any(d.add_block for d in decisions)
    grow = wanted and runs < cap
    reason: str | msgspec.UnsetType = UNSET
    if grow:
        slots = design.schedule(p.arms, runs + 1, p.order, manifest.salt, p.seed, p.allow_blocked)
        manifest = msgspec.structs.replace(
            manifest, schedule=slots, same_arm_predecessors=design.same_arm_predecessors(slots)
        )
    elif wanted:  # the rule's target is not met (or it has not looked yet) but the cap is
        reason = f"max_runs_per_arm {cap} reached"
    else:
        reason = "; ".join(f"{d.arm}: {d.reason}" for d in decisions)
    record = StopRule(decisions=[*record.decisions, *decisions], runs_per_arm=runs + grow, reason=reason)
    manifest = msgspec.structs.replace(manifest, stop_rule=record)
    _write_manifest(bd, manifest)
    return manifest, grow


def _decisions(p: RunParams, stop: Mapping[str, Any], bd: BatchDir, manifest: Manifest, runs: int) -> list[Decision]:
    """``kit.stats.should_continue`` for every arm against the baseline, as manifest records.

    The trials so far are their ``meta.json`` records: ``total_tokens`` there is the provider's count of the
    same responses the parse stage reads from the transcripts (it reports any disagreement), so a look
    needs no parse of the batch and writes no tables before the parse stage does."""
    from kit import stats

    baseline = p.baseline_arm  # as analyze chooses it
    matched = manifest.n_prompts > 1  # as analyze.matched_runs pairs runs
    trials = _trial_table(bd.root, ["batch", "arm", "run", "status", "total_tokens"])
    out = []
    for arm in p.arms:
        if arm != baseline:
            d = stats.should_continue(trials, arm, baseline, stop, matched=matched)
            lower, upper, level = (v if math.isfinite(v) else None for v in (d.lower, d.upper, d.confidence))
            out.append(  # None for NaN: JSON has none
                Decision(scheduled_runs=runs, arm=arm, baseline=baseline, runs_per_arm=d.runs_per_arm,
                         lower=lower, upper=upper, add_block=d.add_block, reason=d.reason, confidence=level,
                         look=d.look)
            )  # fmt: skip
    return out


def _write_manifest(bd: BatchDir, manifest: Manifest) -> None:
    """``manifest.json``, secrets masked: written at the start, at every look and at the end."""
    write_record(bd.manifest, manifest, mask=redact)


def _open_manifest(cfg: RunConfig, bd: BatchDir) -> Manifest:
    """The batch's manifest: the recorded one on a resume (checked against the parameters), else a new one."""
    if bd.manifest.exists():
        manifest = bd.read_manifest()
        check_resume(cfg.params, manifest, cfg.arms)
        resumed = manifest.resumed_at if isinstance(manifest.resumed_at, list) else []
        manifest = msgspec.structs.replace(manifest, resumed_at=[*resumed, _now()])
    else:
        manifest = _new_manifest(cfg)
    manifest = msgspec.structs.replace(manifest, status="running", versions=provenance.versions())
    _write_manifest(bd, manifest)
    return manifest


def _new_manifest(cfg: RunConfig) -> Manifest:
    """A new batch's manifest: its salt, schedule and what it runs; with a stop rule, the first look's runs."""
    p = cfg.params
    salt = p.salt or design.new_salt()
    runs = p.runs_per_arm if p.stop is None else max(p.runs_per_arm, _first_look(p.stop))
    slots = design.schedule(p.arms, runs, p.order, salt, p.seed, p.allow_blocked)
    return Manifest(
        batch=cfg.batch,
        salt=salt,
        params=p,
        simulated=p.endpoint == "embedded",
        blocked=p.order == "blocked",
        task=cfg.pack.describe(),
        arms={a: ArmRecord.of(cfg.arms[a]) for a in p.arms},
        arm_settings=arm_settings(cfg),
        warnings=list(cfg.warnings),
        isolation_parts=sorted(design.isolation_parts(p.isolation)),
        schedule=slots,
        same_arm_predecessors=design.same_arm_predecessors(slots),
        started_at=_now(),
        # each look's decisions, and the runs per arm the batch has reached so far
        stop_rule=UNSET if p.stop is None else StopRule(runs_per_arm=runs),
        status="running",
    )


def check_resume(params: RunParams, manifest: Manifest, arms: Mapping[str, Arm]) -> None:
    """Refuse to resume a batch with parameters that define it changed (``IDENTITY``, and each arm's own model,
    effort and binary): its trials would mix two designs. ``kit batch`` calls this before any kernel starts,
    the run stage again."""
    old = manifest.params
    changed = [k for k in IDENTITY if getattr(old, k) != getattr(params, k)]
    if changed:
        name = changed[0]
        problem = f"batch {params.batch!r} exists with {name}={getattr(old, name)!r}"
        raise ParamError(name, problem, "the batch's own value")
    for name in params.arms:
        arm = manifest.arms.get(name)
        recorded = arm.settings() if arm else {}
        for key, value in arms[name].settings().items():
            if recorded.get(key) != value:
                problem = f"batch {params.batch!r} exists with arm {name!r} {key}={recorded.get(key)!r}"
                raise ParamError(f"arm_defs.{name}.{key}", problem, "the batch's own value")


def arm_settings(cfg: RunConfig) -> dict[str, dict[str, str | None]]:
    """Per arm, what it ran with: model, effort, binary and the binary's version (``--version``, once per
    distinct binary; the SDK package and its version on the SDK backends). The design table's rows."""
    p = cfg.params
    out = {}
    for name in p.arms:
        arm = cfg.arms[name]
        backend = BACKENDS[p.backend]
        if backend.cli is not None:
            option = backend.cli.option
            binary = resolve_binary(getattr(arm, option) or p.backend_options.get(option), backend.cli.program)
            found = version(binary) if binary else "not found"
        else:  # the family's official SDK
            binary = backend.family
            found = importlib.metadata.version(binary)
        effort = arm.effort or p.backend_options.get("effort")
        out[name] = {"model": arm.model or p.model, "effort": effort, "binary": binary, "version": found}
    return out


def _needs_run(bd: BatchDir, slot: Slot, retry_failed: bool) -> bool:
    trial = bd.trial_dir(slot.trial_id)
    if not trial.meta.exists():
        return True
    return retry_failed and trial.read_meta().status != "ok"


def _set_aside(bd: BatchDir, tdir: Path, why: str) -> None:
    """Move an earlier attempt's folder aside, unmodified (raw files are never edited or deleted)."""
    target = bd.raw / f"_{why}" / tdir.name
    n = 1
    while target.with_name(f"{tdir.name}.{n}").exists():
        n += 1
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tdir, target.with_name(f"{tdir.name}.{n}"))


def work_root(bd: BatchDir) -> Path:
    """Where the arms' fixture copies live: a neutral path outside the batch folder.

    Agents are told their absolute working directory, so it must not name the batch, the task or
    the arm (docs/method.md#controls: the model must not infer the experiment from the path). The folder is derived
    from the batch folder, so a resumed batch gets the same paths; fixtures are regenerated if gone, and
    made anew when the folder holds another batch's (``_fixture_stamp``).
    """
    tag = hashlib.sha256(str(bd.root.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"w{tag}"


FIXTURE_STAMP = ".fixture"  # in the work root: what its copies were made from (``_fixture_stamp``)


def _fixture_stamp(cfg: RunConfig) -> str:
    """What the arms' copies are made of: the pack's description (its options and its repository: the
    fixture's hash, or the user's files) and each arm's instruction file. A batch deleted and run again at the
    same folder finds the old batch's work root under the same path; if its copies came from another preset,
    seed or repository, they are not this batch's (a stale fixture reads as a different task)."""
    arms = [(a, cfg.arms[a].placement, cfg.arms[a].instruction) for a in cfg.params.arms]
    facts = orjson.dumps([cfg.pack.describe(), arms], option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(facts).hexdigest()


def _prepare_workdirs(cfg: RunConfig, bd: BatchDir) -> dict[str, Path]:
    """One fixture copy per arm at an anonymised path (repo_a, repo_b …; docs/method.md#controls)."""
    out = {}
    root, stamp = work_root(bd), _fixture_stamp(cfg)
    marker = root / FIXTURE_STAMP
    if root.exists() and not (marker.is_file() and marker.read_text() == stamp):
        shutil.rmtree(root)  # another batch's copies (and its CLI homes), left at this path
    root.mkdir(parents=True, exist_ok=True)
    marker.write_text(stamp)
    for letter, arm_name in zip(string.ascii_lowercase, cfg.params.arms, strict=False):
        wd = root / f"repo_{letter}"
        if not wd.exists():
            tmp = root / f".repo_{letter}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            cfg.pack.prepare(tmp)
            arm = cfg.arms[arm_name]
            if arm.placement == "agents_file" and arm.instruction:
                for name in ("AGENTS.md", "CLAUDE.md"):
                    (tmp / name).write_text(arm.instruction + "\n")
            os.replace(tmp, wd)
        out[arm_name] = wd
    return out


@contextlib.contextmanager
def _provider(cfg: RunConfig, bd: BatchDir, salt: str) -> Iterator[tuple[str, Path]]:
    """The endpoint every trial talks to and its request log: the embedded provider, or for ``endpoint: real``
    the recording proxy in front of ``upstream_url`` (None: each API's public endpoint), logging in the same
    format to the same place, so parse, segments, the cache model and the warmth sweep read a real batch as
    they read a simulated one. The key travels from the environment to the agent and through the proxy only."""
    p = cfg.params
    log_path = bd.request_log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if p.endpoint == "real":
        from kit.provider import proxy

        with proxy(upstream=p.upstream_url, log_path=log_path) as running:
            yield running.base_url, log_path
        return
    from kit.provider import serve

    with serve(log_path=log_path, **vars(provider_settings(cfg, salt))) as srv:
        yield srv.base_url, log_path


@dataclass(frozen=True)
class ProviderSettings:
    """What the embedded provider plays for a batch: its cache profile, the pack's scripted model, the model's
    seed and the cache survival. One definition for the run stage and ``python -m kit provider serve -f …``, so a
    provider served by hand answers a batch's trials exactly as the run stage's own would (the recording proxy's
    test upstream, docs/method.md#isolation)."""

    profile: str
    policy: Policy
    seed: int
    survival: float


def provider_settings(cfg: RunConfig, salt: str) -> ProviderSettings:
    p = cfg.params
    return ProviderSettings(cfg.profile, cfg.pack.policy(), _policy_seed(p.seed, salt), p.survival)


def _policy_seed(seed: int, salt: str) -> int:
    """The scripted model's seed: the user's seed and the batch salt, so two batches with the same
    ``seed`` are independent replications (docs/method.md#replication asks for >= 3) yet each is reproducible."""
    return int.from_bytes(hashlib.sha256(f"{seed}|{salt}".encode()).digest()[:8], "big")


def _api_key(cfg: RunConfig) -> str:
    if cfg.params.endpoint == "embedded":
        return EMBEDDED_KEY
    if login.mode(cfg.params.backend_options) == login.LOGIN:
        return login.NO_KEY  # the CLI sends the user's login; no key is needed or sent
    env = BACKENDS[cfg.params.backend].key_env
    key = os.environ.get(env)
    if not key:
        raise ParamError("endpoint", f"'real' needs {env} in the environment", ["embedded", "real (with the key set)"])
    return key


class _Interrupted(Exception):
    """The batch was interrupted while the trial ran and the trial did not finish: it is not recorded."""


def _run_trial(
    cfg: RunConfig, bd: BatchDir, slot: Slot, workdir: Path, base_url: str, log_path: Path, stopping: threading.Event
) -> TrialMeta:
    trial = bd.trial_dir(slot.trial_id)
    tdir = trial.root
    spec = _trial_spec(cfg, slot, workdir, tdir, trial_base_url(base_url, slot.trial_id))
    if tdir.exists():
        failed = trial.meta.exists()
        if not failed:  # an interrupted attempt: what it left running must not write into it once set aside
            reap(tdir, homes_root(spec))
        _set_aside(bd, tdir, "failed" if failed else "incomplete")
    tdir.mkdir(parents=True)
    attempt = 1 + sum(1 for why in ("failed", "incomplete") for _ in (bd.raw / f"_{why}").glob(f"{tdir.name}.*"))
    spec = dataclasses.replace(spec, provider_log=log_path, attempt=attempt)
    offset = log_path.stat().st_size if log_path.exists() else 0
    started, t0 = _now(), time.perf_counter()
    try:
        outcome = runner(cfg.params.backend)(cfg.params.backend, spec)
    except Exception as exc:  # a failed trial is recorded, never dropped
        outcome = TrialOutcome(status="failed", reason=f"{type(exc).__name__}: {exc}")
        write_text(trial.error, traceback.format_exc())
    if stopping.is_set() and outcome.status != "ok":
        raise _Interrupted(slot.trial_id)
    timing = {"started_at": started, "ended_at": _now(), "wall_s": round(time.perf_counter() - t0, 4)}
    copied = _copy_log_lines(log_path, offset, slot.trial_id, trial.provider_log)
    write_text(trial.answer, "\n\n---\n\n".join(outcome.answers))
    meta = _trial_meta(cfg, spec, outcome, copied, timing)
    write_record(trial.meta, meta, mask=redact)  # written last: its presence marks the trial complete
    return meta


def _trial_spec(cfg: RunConfig, slot: Slot, workdir: Path, tdir: Path, base_url: str) -> TrialSpec:
    """What the backend runs for ``slot``: the arm, its isolation (none for the non-isolated control), its
    prompts, and the batch's model, limits and options, an arm's own settings first."""
    p = cfg.params
    arm = cfg.arms[slot.arm]
    parts = set() if arm.control else design.isolation_parts(p.isolation)
    binaries = {key: getattr(arm, key) for key in ("codex_bin", "claude_bin") if getattr(arm, key)}
    cache_key = design.prompt_cache_key(cfg.batch, slot.nonce, slot.arm, slot.run)
    return TrialSpec(
        batch=cfg.batch,
        trial_id=slot.trial_id,
        arm=arm,
        run=slot.run,
        order_index=slot.order_index,
        nonce=slot.nonce,
        isolation=frozenset(parts),
        prompt_cache_key=cache_key if "prompt_cache_key" in parts else None,
        prompts=tuple(cfg.pack.prompts_for(slot.run)),
        workdir=workdir,
        out_dir=tdir,
        base_url=base_url,
        api_key=_api_key(cfg),
        model=arm.model or p.model,
        max_cycles=p.max_cycles,
        timeout_s=p.timeout_s,
        effort=arm.effort or p.backend_options.get("effort"),
        retention=p.retention,
        options={**p.backend_options, **binaries},  # an arm's own binary wins (cli_common.find_binary)
    )


def _trial_meta(
    cfg: RunConfig, spec: TrialSpec, outcome: TrialOutcome, copied: CopiedLog, timing: dict[str, Any]
) -> TrialMeta:
    """The trial's record (``meta.json``): what ran, how it ended, its grade and its tokens."""
    p = cfg.params
    grade = _grade(cfg.pack, spec.run, outcome) if outcome.status == "ok" else None
    pinned_off = "features.multi_agent=false" in outcome.command  # Codex's pin, as the command line set it
    applied = outcome.versions.get("isolation_applied")  # the CLIs say what they applied; the SDK agents all of it
    parts = [part for part in (applied or ",".join(sorted(spec.isolation))).split(",") if part not in ("", "none")]
    expected = offered.Expected(spec.cache_bust_tool, "cache_bust_tool" in parts, tuple(spec.arm.tools), pinned_off)
    facts = offered.trial_facts(copied.tools, expected)
    if "isolation.cache_bust_tool" in facts:
        parts.remove("cache_bust_tool")
    versions = {**outcome.versions, **facts, "isolation_held": ",".join(parts) or "none"}
    return TrialMeta(
        batch=cfg.batch,
        trial_id=spec.trial_id,
        arm=spec.arm.name,
        run=spec.run,
        order_index=spec.order_index,
        nonce=spec.nonce,
        isolation=sorted(spec.isolation),
        control=spec.arm.control,
        # what the client really sent: Codex sends its own thread id, not the kit's key
        prompt_cache_key=outcome.versions.get("prompt_cache_key", spec.prompt_cache_key),
        cache_bust_tool=spec.cache_bust_tool,
        backend=p.backend,
        endpoint=p.endpoint,
        model=spec.model,
        effort=spec.effort,
        retention=p.retention,
        simulated=p.endpoint == "embedded" or copied.upstream_simulated,
        workdir=str(spec.workdir),
        command=outcome.command,
        versions=versions,
        started_at=timing["started_at"],
        ended_at=timing["ended_at"],
        wall_s=timing["wall_s"],
        status=outcome.status,
        reason=outcome.reason,
        turns=outcome.turns,
        cycles=outcome.cycles,
        grade=grade.score if grade else None,
        grade_detail=grade.detail if grade else "",
        transcripts=[*outcome.transcripts, PROVIDER_LOG],
        total_tokens=copied.total_tokens,
    )


def _grade(pack: tasks.TaskPack, run: int, outcome: TrialOutcome) -> tasks.Grade:
    """Multi-turn packs grade every turn's answer (their ``grade_turns``); others the final answer."""
    grade_turns = getattr(pack, "grade_turns", None)
    if grade_turns is not None and len(outcome.answers) > 1:
        return grade_turns(outcome.answers)
    return pack.grade_for(run, outcome.final_answer)


def _backend_versions(bd: BatchDir) -> list[dict[str, str]]:
    """Every distinct backend version set the trials report (CLI versions, SDK versions, pins)."""
    seen: list[dict[str, str]] = []
    for tdir in bd.trial_dirs():
        versions = bd.read_trial_meta(tdir).versions
        if versions not in seen:
            seen.append(versions)
    return seen


def _offered_warnings(bd: BatchDir) -> list[str]:
    """What the trials' requests showed against the isolation and pins the kit set (kit.experiment.offered)."""
    metas = [bd.read_trial_meta(tdir) for tdir in bd.trial_dirs()]
    return offered.batch_warnings((m.model, m.arm, m.versions, m.cache_bust_tool is not None) for m in metas)


@dataclass(frozen=True)
class CopiedLog:
    """A trial's provider-log lines, summed: its total tokens, whether a proxied upstream was the kit's own
    simulation (then the trial is a simulation too, whatever the endpoint parameter says), and the tools its
    requests offered."""

    total_tokens: int
    upstream_simulated: bool
    tools: offered.OfferedTools


def _copy_log_lines(log_path: Path, offset: int, trial_id: str, dest: Path) -> CopiedLog:
    """Copy this trial's provider-log lines (written since ``offset``) to ``dest``: those whose decoded
    ``trial_id`` is this trial's (the needle, the id as the log's JSON encodes it, only finds candidates)."""
    needle = b'"trial_id":' + orjson.dumps(trial_id)
    total, simulated, lines, records = 0, False, [], []
    with log_path.open("rb") as fh:
        fh.seek(offset)
        for line in fh:
            if needle in line and (record := orjson.loads(line)).get("trial_id") == trial_id:
                lines.append(line)
                records.append(record)
                usage = record.get("usage") or {}
                total += (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
                simulated = simulated or record.get("upstream_simulated") is True
    atomic_write(dest, lambda tmp: tmp.write_bytes(b"".join(lines)))
    return CopiedLog(total, simulated, offered.offered_tools(records))


def _now() -> str:
    return datetime.now(UTC).isoformat()


def schedule_table(batch_dir: Path) -> pd.DataFrame:
    """One line per trial in schedule order: what the run notebook shows when it ends."""
    cols = ["order_index", "trial_id", "arm", "run", "status", "reason", "cycles", "total_tokens", "grade", "wall_s"]
    return _trial_table(batch_dir, cols).sort_values("order_index").reset_index(drop=True)


def _trial_table(batch_dir: Path, cols: list[str]) -> pd.DataFrame:
    """The ``cols`` of every recorded trial's ``meta.json``, one row per trial."""
    bd = BatchDir(Path(batch_dir))
    rows = [bd.read_trial_meta(d) for d in bd.trial_dirs()]
    return pd.DataFrame([{c: getattr(r, c) for c in cols} for r in rows], columns=cols)
