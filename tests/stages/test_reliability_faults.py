"""Faults during a batch, each injected for real (no mocks where the real part runs): a dropped connection and a
hang from the embedded provider, a CLI killed with SIGKILL, a trial folder made read-only, the notebook's kernel
killed under papermill, the whole run killed at random points. Each must leave the raw files written so far
untouched, the trial recorded as failed with its reason (or the stage stopped with it), and a re-run that
completes exactly the missing trials: no duplicate, no loss (the trial sets are compared).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.agents import cli_common
from kit.cli import pipeline
from kit.experiment.layout import BatchDir
from kit.files import atomic_write, sha256_tree, write_json, write_table
from kit.stages import parse, run
from tests.support import ROOT

TESTS = Path(__file__).resolve().parent
MISSING = [name for name in ("codex", "claude") if not (cli_common.TOOLS_BIN / name).exists()]
needs_clis = pytest.mark.skipif(bool(MISSING), reason=f"CLI binaries absent: {MISSING} (run `make e2e-tools`)")


# ------------------------------------------------------------------ injecting a fault into a real batch


class Trigger:
    """The task's scripted model, plus one event at one (trial, cycle): a faulty reply and/or a side effect."""

    def __init__(self, inner, trial_id: str, cycle: int, fault: str | None = None, action: Callable | None = None):
        self.inner, self.trial_id, self.cycle, self.fault, self.action = inner, trial_id, cycle, fault, action
        self.name = inner.name
        self.fired = 0

    def reply(self, conv):
        reply = self.inner.reply(conv)
        if conv.trial_id == self.trial_id and conv.cycle == self.cycle and not self.fired:
            self.fired += 1
            if self.action:
                self.action(conv)
            if self.fault:
                return dataclasses.replace(reply, fault=self.fault)
        return reply


class FaultPack:
    """The task pack as the run stage sees it, except that its policy is wrapped in a ``Trigger``."""

    def __init__(self, pack, **trigger):
        self._pack, self._trigger = pack, trigger

    def policy(self) -> Trigger:
        return Trigger(self._pack.policy(), **self._trigger)

    def __getattr__(self, name: str):
        return getattr(self._pack, name)


LONG_DEADLINE_S = 1800.0  # for the trials that must finish: none that works comes near it, however busy the machine


def values(tmp: Path, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(
        outputs_dir=str(tmp), batch="b", runs_per_arm=2, concurrency=1, salt="fault-salt", timeout_s=LONG_DEADLINE_S
    )
    params.update(over)
    return params


def faulty(params: dict, **trigger) -> run.RunConfig:
    cfg = run.configure(params)
    return dataclasses.replace(cfg, pack=FaultPack(cfg.pack, **trigger))


def metas(folder: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (folder / "raw").glob("*/meta.json")}


PROVIDER_LOG = "raw/_provider/requests.jsonl"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every raw file's sha256 (the shared provider log apart: it is appended to, by design)."""
    out = {}
    for path in sorted((folder / "raw").rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_file() and rel != PROVIDER_LOG:
            out[rel] = hashlib.sha256(path.read_bytes()).digest()
    return out


def check_resumed(folder: Path, before: dict[str, bytes], log_before: bytes, rerun: set[str], aside: str) -> None:
    """The batch is whole: one finished trial per schedule slot; nothing recorded before was changed or lost."""
    manifest = json.loads((folder / "manifest.json").read_text())
    schedule = {s["trial_id"] for s in manifest["schedule"]}
    folders = {p.name for p in (folder / "raw").iterdir() if p.is_dir() and not p.name.startswith("_")}
    done = metas(folder)
    assert folders == set(done) == schedule, (folders, set(done), schedule)  # no loss, no duplicate, no stray
    assert {m["status"] for m in done.values()} == {"ok"}, {t: m["reason"] for t, m in done.items()}
    assert manifest["status"] == "complete" and manifest["trial_errors"] == {}
    after = snapshot(folder)
    for rel, digest in before.items():
        trial = rel.split("/")[1]
        moved = rel.replace(f"raw/{trial}/", f"raw/_{aside}/{trial}.1/") if trial in rerun else rel
        assert after.get(moved) == digest, rel  # untouched, where it was or where it was set aside
    log_after = (folder / PROVIDER_LOG).read_bytes()
    assert log_after.startswith(log_before)
    assert {orjson.loads(x)["trial_id"] for x in log_after[len(log_before) :].splitlines()} == rerun
    tables = parse.parse_batch(folder)
    assert sorted(tables["trials"]["trial_id"]) == sorted(schedule)
    per_trial = tables["requests"].groupby("trial_id")["cycle"].count().to_dict()
    assert per_trial == {t: m["cycles"] for t, m in done.items()}  # no response counted twice or missed


def resume(params: dict, **over) -> tuple[dict[str, bytes], bytes, Path]:
    folder = Path(params["outputs_dir"]) / params["batch"]
    before, log_before = snapshot(folder), (folder / PROVIDER_LOG).read_bytes()
    run.run_batch(run.configure({**params, **over}), progress=False)
    return before, log_before, folder


# ------------------------------------------------------------------ the SDK backends on the embedded provider


@pytest.mark.parametrize("backend", ["sdk-openai", "sdk-anthropic"])
def test_dropped_connection_fails_the_trial_and_a_rerun_completes_it(tmp_path, backend):
    params = values(tmp_path, backend=backend, profile=None)
    folder = run.run_batch(faulty(params, trial_id="r00-batching", cycle=2, fault="drop"), progress=False)
    done = metas(folder)
    failed = done.pop("r00-batching")
    assert failed["status"] == "failed" and "APIConnectionError" in failed["reason"], failed["reason"]
    assert failed["cycles"] == 2 and "sdk_responses.jsonl" in failed["transcripts"]
    kept = (folder / "raw/r00-batching/sdk_responses.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["cycle"] for x in kept] == [0, 1]  # the responses before the drop are kept
    assert {m["status"] for m in done.values()} == {"ok"}
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r00-batching"}, "failed")


def _short_deadline(monkeypatch: pytest.MonkeyPatch, trial_id: str, seconds: float) -> None:
    """Give one trial (the hung one) a deadline of its own; the rest keep the batch's ``timeout_s``. A hang never
    ends by itself, so the short deadline alone ends that trial, whether it had reached the hang or was still
    starting on a busy machine; the trials that must finish are not raced against it."""
    real = run.runner

    def one_short(backend: str) -> Callable:
        trial = real(backend)
        return lambda name, spec: trial(
            name, dataclasses.replace(spec, timeout_s=seconds) if spec.trial_id == trial_id else spec
        )

    monkeypatch.setattr(run, "runner", one_short)


def test_a_hang_past_timeout_s_fails_only_that_trial(tmp_path, monkeypatch):
    params = values(tmp_path, concurrency=2, timeout_s=LONG_DEADLINE_S)
    _short_deadline(monkeypatch, "r00-placebo", 3.0)
    folder = run.run_batch(faulty(params, trial_id="r00-placebo", cycle=1, fault="hang"), progress=False)
    monkeypatch.undo()
    done = metas(folder)
    hung = done.pop("r00-placebo")
    assert hung["status"] == "failed" and "timeout_s 3 reached" in hung["reason"], hung["reason"]
    assert {m["status"] for m in done.values()} == {"ok"}  # the server kept serving the concurrent trial
    logged = [orjson.loads(x) for x in (folder / "raw/r00-placebo/provider_log.jsonl").read_bytes().splitlines()]
    assert "hang" in logged[-1]["error"] and logged[-1]["status"] is None
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r00-placebo"}, "failed")


def test_a_backend_exception_is_a_failed_trial_with_its_traceback(tmp_path):
    def boom(conv):
        raise RuntimeError("scripted model crashed")

    params = values(tmp_path)
    folder = run.run_batch(faulty(params, trial_id="r01-placebo", cycle=0, action=boom), progress=False)
    failed = metas(folder)["r01-placebo"]
    assert failed["status"] == "failed" and "InternalServerError" in failed["reason"]
    assert "scripted model crashed" in failed["reason"]
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r01-placebo"}, "failed")


def _interrupted_child(params: dict, conn) -> None:
    """In a forked child: Ctrl-C (a real SIGINT) arrives while r00-batching is running."""

    def sigint(conv):
        os.kill(os.getpid(), signal.SIGINT)

    try:
        run.run_batch(faulty(params, trial_id="r00-batching", cycle=1, action=sigint), progress=False)
        conn.send("finished")
    except KeyboardInterrupt:
        conn.send("interrupted")
    os._exit(0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_ctrl_c_lets_the_running_trial_finish_and_starts_no_other(tmp_path):
    params = values(tmp_path)
    parent, child_end = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_interrupted_child, args=(params, child_end))
    child.start()
    child.join(60)
    assert parent.recv() == "interrupted"
    folder = tmp_path / "b"
    assert set(metas(folder)) == {"r00-placebo", "r00-batching"}  # the running trial was recorded
    assert not (folder / "raw/r01-batching").exists()  # the queued ones never started
    assert json.loads((folder / "manifest.json").read_text())["status"] == "running"
    before, log_before, _ = resume(params)
    check_resumed(folder, before, log_before, {"r01-batching", "r01-placebo"}, "incomplete")


# ------------------------------------------------------------------ a trial folder made read-only

# As root, permission bits bind nobody: the batch then runs in a child without CAP_DAC_OVERRIDE.
NO_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
read_only_binds = pytest.mark.skipif(
    os.geteuid() == 0 and not shutil.which("setpriv"), reason="running as root and setpriv is absent"
)


def readonly_child(outputs_dir: str, make_read_only: bool) -> None:
    """In the child: run the batch; at cycle 2 of r00-batching, its folder is made read-only (mode 555)."""

    def lock(conv):
        os.chmod(Path(outputs_dir) / "b" / "raw" / conv.trial_id, 0o555)

    params = values(Path(outputs_dir))
    cfg = faulty(params, trial_id="r00-batching", cycle=2, action=lock) if make_read_only else run.configure(params)
    try:
        run.run_batch(cfg, progress=False)
        print(json.dumps({"errors": {}}))
    except run.RunIncomplete as exc:
        print(json.dumps({"errors": exc.errors, "message": str(exc)}))


def _child(outputs_dir: Path, make_read_only: bool) -> dict:
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_reliability_faults as t; "
    code += f"t.readonly_child({str(outputs_dir)!r}, {make_read_only})"
    done = subprocess.run([*NO_OVERRIDE, sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@read_only_binds
def test_a_read_only_trial_folder_stops_the_stage_with_the_reason_and_a_rerun_completes(tmp_path):
    folder = tmp_path / "b"
    result = _child(tmp_path, make_read_only=True)
    assert list(result["errors"]) == ["r00-batching"] and "PermissionError" in result["errors"]["r00-batching"]
    assert "r00-batching" in result["message"] and "run the batch again" in result["message"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and list(manifest["trial_errors"]) == ["r00-batching"]
    assert set(metas(folder)) == {"r00-placebo", "r01-batching", "r01-placebo"}  # the others went on
    locked = folder / "raw/r00-batching"
    assert not (locked / "meta.json").exists() and (locked / "sdk_responses.jsonl").stat().st_size > 0
    before = snapshot(folder)
    again = _child(tmp_path, make_read_only=False)  # still read-only: refused again, nothing moved or lost
    assert list(again["errors"]) == ["r00-batching"] and snapshot(folder) == before
    os.chmod(locked, 0o755)  # the cause fixed
    before, log_before, _ = resume(values(tmp_path))
    check_resumed(folder, before, log_before, {"r00-batching"}, "incomplete")


# ------------------------------------------------------------------ papermill: the kernel dies mid-batch


def _kernel_pids() -> list[int]:
    """Processes of ours running an IPython kernel (papermill's kernel of the stage being executed)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields["PPid"]) == os.getpid() and b"ipykernel_launcher" in cmdline:
            found.append(int(status.parent.name))
    return found


def _kill_kernel_after(log: Path, requests: int, killed: list[int]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.exists() and log.read_bytes().count(b"\n") >= requests:
            for pid in _kernel_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return
        time.sleep(0.05)


def test_kernel_killed_mid_run_saves_the_notebook_with_its_error_and_a_rerun_completes(tmp_path):
    params = values(tmp_path, batch="nb", runs_per_arm=3)
    folder = tmp_path / "nb"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_kernel_after, args=(folder / PROVIDER_LOG, 10, killed))
    killer.start()
    with pytest.raises(pipeline.StageFailed) as caught:
        pipeline.execute(params, stages=("run",), progress=False)
    killer.join()
    assert killed and caught.value.stage == "run"
    assert caught.value.notebook == folder / "run.failed.ipynb" and not (folder / "run.ipynb").exists()
    nb = nbformat.read(folder / "run.failed.ipynb", as_version=4)  # papermill saves a dead kernel's notebook bare
    failed = [c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and "run_batch" in failed[0].source  # the error sits in the cell that was running
    assert failed[0].outputs[-1]["ename"] == "DeadKernelError" and nb.metadata.papermill.exception is True
    assert "DeadKernelError" in (folder / "run.failed.html").read_text()
    done = metas(folder)
    assert 1 <= len(done) < 6  # killed mid-batch: some trials recorded, not all
    partial = {p.name for p in (folder / "raw").iterdir() if p.is_dir() and not p.name.startswith("_")} - set(done)
    assert len(partial) <= 1  # at most the one trial that was running
    before, log_before = snapshot(folder), (folder / PROVIDER_LOG).read_bytes()
    pipeline.execute(params, stages=("run",), progress=False)
    check_resumed(folder, before, log_before, set(_schedule(folder)) - set(done), "incomplete")


def _schedule(folder: Path) -> list[str]:
    return [s["trial_id"] for s in json.loads((folder / "manifest.json").read_text())["schedule"]]


@pytest.mark.slow
def test_a_stage_raising_saves_its_notebook_and_the_stage_reruns_alone(tmp_path):
    """Analyze over a damaged table (a bad baseline is refused before any stage now): the stage raises, its
    failed notebook keeps the error, the tables it read are untouched and no half-written analysis is left;
    with the table restored the stage then runs alone."""
    params = values(tmp_path, batch="an", n_resamples=1_000, warmth_levels=3)
    folder = pipeline.execute(params, stages=("run", "parse"), progress=False)
    good = (folder / "tables/trials.parquet").read_bytes()
    (folder / "tables/trials.parquet").write_bytes(b"not a parquet file")
    tables = {p.name: p.read_bytes() for p in (folder / "tables").iterdir()}
    with pytest.raises(pipeline.StageFailed):
        pipeline.execute(params, stages=("analyze",), progress=False)
    nb = nbformat.read(folder / "analyze.failed.ipynb", as_version=4)
    assert any(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    assert "trials.parquet" in (folder / "analyze.failed.html").read_text()
    assert {p.name: p.read_bytes() for p in (folder / "tables").iterdir()} == tables
    assert not (folder / "analysis").exists()
    (folder / "tables/trials.parquet").write_bytes(good)
    pipeline.execute(params, stages=("analyze",), progress=False)
    assert pd.read_csv(folder / "analysis/ratios.csv")["arm"].tolist()


# ------------------------------------------------------------------ the real CLIs


def _cli_groups(trial_id: str, cli: str) -> set[int]:
    """The process groups of the CLI running ``trial_id`` and of what it started (its per-trial HOME names them all).

    Every one, not the first found: a command or server the CLI started may run in a group of its own, and once
    process ids wrap around it can come first in /proc; killing only its group left the CLI running (a CI run).
    """
    needle = f"/.homes/{trial_id}-{cli}\0".encode()  # the end of HOME=… (cli_common.trial_home)
    groups = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            data = environ.read_bytes()
            if needle in data:
                groups.add(os.getpgid(int(environ.parent.name)))
        except OSError:  # the process ended meanwhile
            continue
    return groups - {os.getpgrp()}


def _sigkill(cli: str, killed: list[int]) -> Callable:
    def action(conv):
        groups = _cli_groups(conv.trial_id, cli)
        assert groups, f"no {cli} process found for {conv.trial_id}"
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        killed.extend(groups)

    return action


def _one_run_per_arm_failed(cfg: run.RunConfig) -> Path:
    """Run a batch of one run per arm whose faulty trial fails: that arm then has no successful trial, which the
    run stage says as it ends (``NoTrialSucceeded``), every trial recorded."""
    with pytest.raises(run.NoTrialSucceeded):
        run.run_batch(cfg, progress=False)
    return cfg.batch_dir.root


def cli_values(tmp: Path, backend: str, **over) -> dict:
    return values(tmp, backend=backend, profile=None, model="sim-model", runs_per_arm=1, **over)


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_cli_killed_with_sigkill_mid_trial(tmp_path, backend):
    params = cli_values(tmp_path, backend)
    killed: list[int] = []
    cfg = faulty(params, trial_id="r00-batching", cycle=2, action=_sigkill(backend, killed))
    folder = _one_run_per_arm_failed(cfg)
    assert killed
    failed = metas(folder)["r00-batching"]
    assert failed["status"] == "failed" and failed["reason"] == f"turn 1: {backend} killed by signal 9"
    tdir = folder / "raw/r00-batching"
    assert (tdir / f"{backend}_stdout.jsonl").stat().st_size > 0  # what the CLI printed before it died is kept
    assert json.loads((tdir / cli_common.RUNS_FILE).read_text())[0]["returncode"] == -9
    assert metas(folder)["r00-placebo"]["status"] == "ok"
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r00-batching"}, "failed")


@pytest.mark.e2e
@needs_clis
def test_codex_dropped_stream_fails_the_trial(tmp_path):
    params = cli_values(tmp_path, "codex")
    folder = _one_run_per_arm_failed(faulty(params, trial_id="r00-placebo", cycle=2, fault="drop"))
    failed = metas(folder)["r00-placebo"]
    assert failed["status"] == "failed" and failed["reason"].startswith("turn 1: codex exited with code")
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r00-placebo"}, "failed")


@pytest.mark.e2e
@needs_clis
def test_claude_dropped_stream_is_caught_by_the_parse_crosscheck(tmp_path):
    """Claude Code keeps a cut stream's partial message as the response and goes on: the trial ends "ok", but
    its session file undercounts that response; the provider log keeps the truth and parse reports the gap."""
    params = cli_values(tmp_path, "claude")
    folder = run.run_batch(faulty(params, trial_id="r00-placebo", cycle=2, fault="drop"), progress=False)
    assert metas(folder)["r00-placebo"]["status"] == "ok"
    issues = parse.parse_batch(folder)["parse_issues"]
    located = issues[issues["source_path"].str.contains("r00-placebo")]
    assert located["reason"].str.startswith("cross-check:").any(), issues.to_dict("records")


@pytest.mark.e2e
@needs_clis
def test_claude_hang_is_killed_at_the_trial_deadline(tmp_path, monkeypatch):
    """Only the hung trial has a short deadline (``_short_deadline``); the other trial and the re-run cannot be
    failed by a busy machine."""
    params = cli_values(tmp_path, "claude", timeout_s=LONG_DEADLINE_S)
    _short_deadline(monkeypatch, "r00-batching", 5.0)
    folder = _one_run_per_arm_failed(faulty(params, trial_id="r00-batching", cycle=1, fault="hang"))
    monkeypatch.undo()
    failed = metas(folder)["r00-batching"]
    assert failed["status"] == "failed" and "killed at the trial deadline" in failed["reason"], failed["reason"]
    assert metas(folder)["r00-placebo"]["status"] == "ok"
    before, log_before, _ = resume(params, retry_failed=True)
    check_resumed(folder, before, log_before, {"r00-batching"}, "failed")


# ------------------------------------------------------------------ killed at random points (property)


def _run_child(params: dict) -> None:
    run.run_batch(run.configure(params), progress=False)
    os._exit(0)


def _kill_at(params: dict, requests: int) -> bool:
    """Run the batch in a forked child and SIGKILL it once ``requests`` more lines reach the provider log;
    False if the child finished first."""
    log = Path(params["outputs_dir"]) / params["batch"] / PROVIDER_LOG
    start = log.read_bytes().count(b"\n") if log.exists() else 0
    child = multiprocessing.get_context("fork").Process(target=_run_child, args=(params,))
    child.start()
    assert child.pid is not None  # started
    deadline = time.monotonic() + 60
    while child.is_alive() and time.monotonic() < deadline:
        if log.exists() and log.read_bytes().count(b"\n") - start >= requests:
            os.kill(child.pid, signal.SIGKILL)
            child.join()
            return True
        time.sleep(0.002)
    child.join(5)
    assert child.exitcode == 0, "the batch child hung or failed"
    return False


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict[str, dict], int]:
    """The uninterrupted batch: its trials (the comparison) and how many requests it made (the kill range)."""
    out = tmp_path_factory.mktemp("ref")
    folder = run.run_batch(run.configure(values(out, batch="p", salt="prop-salt")), progress=False)
    return metas(folder), (folder / PROVIDER_LOG).read_bytes().count(b"\n")


SAME = ("arm", "run", "order_index", "nonce", "status", "grade", "cycles", "total_tokens", "prompt_cache_key")


def _interrupted_batches_resume_to_the_reference(tmp_path_factory, reference, cuts: list[float]) -> None:
    ref, total = reference
    out = tmp_path_factory.mktemp("cut")
    params = values(out, batch="p", salt="prop-salt")
    for cut in cuts:
        _kill_at(params, max(1, int(cut * total)))
        folder = out / "p"
        json.loads((folder / "manifest.json").read_text())  # atomic writes: never half a manifest or meta
        for meta in (folder / "raw").glob("*/meta.json"):
            json.loads(meta.read_text())
    run.run_batch(run.configure(params), progress=False)
    got = metas(out / "p")
    assert set(got) == set(ref)
    for trial, meta in got.items():
        assert {k: meta[k] for k in SAME} == {k: ref[trial][k] for k in SAME}, trial
    aside = out / "p/raw/_incomplete"
    assert len(list(aside.iterdir()) if aside.exists() else []) <= len(cuts)  # at most one partial per kill


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads (the provider's) is intended here
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(cuts=st.lists(st.floats(0.02, 0.98), min_size=1, max_size=2))
def test_interrupted_at_random_points_resumes_to_the_same_trials(tmp_path_factory, reference, cuts):
    _interrupted_batches_resume_to_the_reference(tmp_path_factory, reference, cuts)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(cuts=st.lists(st.floats(0.01, 0.99), min_size=1, max_size=4))
def test_interrupted_at_many_random_points_resumes_to_the_same_trials(tmp_path_factory, reference, cuts):
    _interrupted_batches_resume_to_the_reference(tmp_path_factory, reference, cuts)


# ------------------------------------------------------------------ atomic writes


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    target = write_json(tmp_path / "manifest.json", {"version": 1})

    def half(tmp: Path) -> None:
        tmp.write_bytes(b'{"version": 2, "trunc')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half)
    assert json.loads(target.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def _rewrite_forever(folder: str) -> None:
    n = 0
    big = "x" * 200_000
    while True:
        n += 1
        write_json(Path(folder) / "manifest.json", {"version": n, "pad": big})
        write_table(Path(folder) / "requests.parquet", pd.DataFrame({"version": [n] * 20_000, "v": range(20_000)}))
        write_table(Path(folder) / "ratios.csv", pd.DataFrame({"version": [n] * 20_000}))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_no_half_written_table_or_manifest_survives_a_kill(tmp_path):
    written = [tmp_path / n for n in ("manifest.json", "requests.parquet", "ratios.csv")]
    for delay in (0.3, 0.45, 0.6, 0.75):
        child = multiprocessing.get_context("fork").Process(target=_rewrite_forever, args=(str(tmp_path),))
        child.start()
        _wait_for(lambda: all(p.exists() for p in written), 600)  # a busy machine may take longer than delay
        time.sleep(delay)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        parquet = pd.read_parquet(tmp_path / "requests.parquet")
        csv = pd.read_csv(tmp_path / "ratios.csv")
        assert manifest["version"] >= 1 and len(manifest["pad"]) == 200_000
        assert len(parquet) == 20_000 and parquet["version"].nunique() == 1
        assert len(csv) == 20_000 and csv["version"].nunique() == 1
        assert abs(int(parquet["version"][0]) - manifest["version"]) <= 1


def test_figures_and_report_are_written_atomically(tmp_path, monkeypatch):
    """A figure whose rendering fails midway (a full disk, a kill) leaves the previous PNG/SVG and no temporary."""
    from matplotlib.figure import Figure

    from kit import charts
    from kit.report import batch as report

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 2])
    png, svg = charts.save(fig, tmp_path, "ratio")
    before = png.read_bytes(), svg.read_bytes()

    def broken_savefig(self, target, **kwargs):
        Path(target).write_bytes(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        charts.save(fig, tmp_path, "ratio")
    assert (png.read_bytes(), svg.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratio.png", "ratio.svg"]
    assert report.write_text.__module__ == "kit.files"  # report.md / report.html go through the same rename


# ------------------------------------------------------------------ nothing the kit starts outlives it


def _kit_processes(work: Path) -> list[int]:
    """Live processes whose working folder or environment lies under ``work`` (a batch's work root: the CLIs, their
    MCP servers and commands all run there, with their home under it); zombies run nothing and are not counted."""
    needle, found = str(work).encode(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if entry.name == str(os.getpid()) or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if os.readlink(entry / "cwd").startswith(str(work)) or needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return found


def _wait_for(check: Callable[[], object], seconds: float = 120) -> object:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not seen within {seconds} s: {check}")


def _cli_started(work: Path, cli: str) -> Callable[[], list[int]]:
    """The pids of a running ``cli`` (its trial home lies under the work root)."""

    def check() -> list[int]:
        pids = []
        for pid in _kit_processes(work):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(cli.encode()) or (
                    cli.encode() in Path(f"/proc/{pid}/comm").read_bytes()
                ):
                    pids.append(pid)
        return pids

    return check


@pytest.mark.e2e
@needs_clis
def test_a_batch_killed_with_sigkill_leaves_no_process_and_its_resume_hashes_the_files(tmp_path):
    """kill -9 on the kit's process group mid-trial: the CLI dies with the kit (its parent-death signal), and the
    resume reaps whatever the trial's recorded group and home still hold before setting the attempt aside, so no
    orphan appends to it after ``raw_sha256`` is computed. Before, ``codex exec`` and its MCP server lived on for
    minutes and appended to the set-aside attempt."""
    params = values(tmp_path, backend="codex", profile=None, model="sim-model")
    folder = tmp_path / "b"
    work = run.work_root(BatchDir(folder))
    code = "import json, sys; from kit.stages import run; run.run_batch(run.configure(json.loads(sys.argv[1])))"
    kit = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(params)], cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_for(lambda: (folder / PROVIDER_LOG).exists() and _cli_started(work, "codex")())
        time.sleep(0.5)  # mid-trial
    finally:
        os.killpg(kit.pid, signal.SIGKILL)
        kit.wait()
    incomplete = [p for p in (folder / "raw").iterdir() if p.is_dir() and not (p / "meta.json").exists()]
    assert any((p / cli_common.GROUP_FILE).exists() for p in incomplete), incomplete  # the running CLI's group
    run.run_batch(run.configure(params), progress=False)
    assert _kit_processes(work) == []
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "complete" and (folder / "raw/_incomplete").is_dir()
    assert manifest["raw_sha256"] == sha256_tree(folder / "raw")  # nothing wrote into raw/ after the hash
    time.sleep(1.0)
    assert manifest["raw_sha256"] == sha256_tree(folder / "raw")  # and nothing does later


@pytest.mark.e2e
@needs_clis
def test_ctrl_c_in_kit_batch_ends_the_clis_with_one_line(tmp_path):
    """SIGINT to ``python -m kit batch`` (as a terminal sends it to its foreground group) while Claude Code runs a
    trial: one line, exit 130, no traceback, and no process of the batch left running (before: a 45-line
    traceback, and a Claude CLI writing into its trial folder for minutes)."""
    folder = tmp_path / "b"
    work = run.work_root(BatchDir(folder))
    argv = [sys.executable, "-m", "kit", "batch", "-f", "params/demo.yaml", "-p", "backend", "claude"]
    for key, value in {"outputs_dir": tmp_path, "batch": "b", "model": "sim-model", "runs_per_arm": 2}.items():
        argv += ["-p", key, str(value)]
    kit = subprocess.Popen(argv, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(_cli_started(work, "claude"))
        os.killpg(kit.pid, signal.SIGINT)
        out, err = kit.communicate(timeout=600)
    finally:
        if kit.poll() is None:
            os.killpg(kit.pid, signal.SIGKILL)
    lines = err.decode().strip().splitlines()
    assert kit.returncode == 130, err.decode()[-3000:]
    assert lines[-1] == "interrupted; run the same command again to resume"
    assert "Traceback" not in err.decode() + out.decode() and err.decode().count("interrupted") == 1
    assert _kit_processes(work) == []
    assert json.loads((folder / "manifest.json").read_text())["status"] == "running"  # a resume completes it
