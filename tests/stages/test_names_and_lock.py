"""Names that become paths, and one writer per batch (kit.names, kit.experiment.lock).

An arm or batch name is a folder name: ``/../../tmp/victim`` once deleted ``/tmp/victim-codex`` through the
CLI home a trial clears, ``a/b`` nested a trial where no table looked, a newline recorded 0 tokens for a trial
that ran. Each such name is refused by ``python -m kit batch`` before anything is written, on the SDK backend
and on Codex, and no file outside the outputs folder is created or removed. Two runs of one batch at once
corrupted it; the second is now refused in one line naming the first, which completes whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from kit.agents import cli_common
from kit.agents.base import TrialSpec
from kit.experiment.design import Arm, ParamError, trial_id
from kit.experiment.layout import BatchDir
from kit.experiment.lock import LOCK, BatchBusy, batch_lock
from kit.names import OutsideRoot, is_name
from kit.stages import run
from tests.support import ROOT, cli_env

DEMO = ["-f", "params/demo.yaml"]


def _hostile_arms(tmp: Path) -> list[str]:
    return [
        f"/../../../../../../../../../..{tmp}/victim",
        "../../../../x",
        "a/b",
        "a\nb",
        "x" * 300,
        ".hidden",
        "..",
        "caf\u00e9",
    ]


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("backend", ["sdk-openai", "codex"])
def test_each_hostile_arm_name_is_refused_before_anything_is_written(tmp_path, backend):
    """All cases start together (each is mostly imports); a victim folder named as the CLI home of the first case
    would be (``<name>-codex``) and a file beside the outputs folder must be there, untouched, afterwards."""
    victim = tmp_path / "victim-codex"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    out = tmp_path / "outputs"
    out.mkdir()
    before = _listing(tmp_path)
    procs = []
    for arm in _hostile_arms(tmp_path):
        arms = {"arm_defs": {arm: {"instruction": "Answer."}}, "arms": ["placebo", arm]}
        argv = ["batch", *DEMO, "-y", json.dumps(arms), "-p", "backend", backend, "-p", "outputs_dir", str(out)]
        argv += ["-p", "runs_per_arm", "1"]
        procs.append((arm, subprocess.Popen([sys.executable, "-m", "kit", *argv], cwd=ROOT, env=cli_env(),
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))  # fmt: skip
    for arm, proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 1, (arm, stdout, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: parameter 'arms': got"), (arm, stderr)
        assert "ASCII letters, digits" in lines[0]
    assert _listing(tmp_path) == before
    assert (victim / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("123", "wrong type int (123): a name, not a number"),
        ("x" * 300, "is not a folder name"),
        (".hidden", "is not a folder name"),
        ("../x", "is not a folder name"),
        ("a/b", "is not a folder name"),
    ],
)
def test_a_batch_name_that_is_not_one_folder_is_refused_in_one_line(tmp_path, value, problem):
    argv = [sys.executable, "-m", "kit", "batch", *DEMO, "-p", "batch", value, "-p", "outputs_dir", str(tmp_path)]
    proc = subprocess.run(argv, cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: parameter 'batch': ") and problem in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_run_notebooks_own_check_refuses_them_too():
    """The papermill route reaches ``run.configure`` without ``kit batch``: the same rule there."""
    values = {**run_defaults(), "arm_defs": {"../x": {"instruction": "Answer."}}, "arms": ["placebo", "../x"]}
    with pytest.raises(ParamError, match="parameter 'arms'"):
        run.configure(values)
    with pytest.raises(ParamError, match="parameter 'arm_defs'"):
        run.configure({**run_defaults(), "arm_defs": {"a/b": {"instruction": "Answer."}}})


def run_defaults() -> dict:
    from kit.cli.pipeline import defaults

    return defaults("run")


def test_names_paths_and_homes_stay_inside_their_roots(tmp_path):
    assert is_name("placebo") and is_name("r00-placebo") and is_name("v1.2_x-y")
    for bad in [*_hostile_arms(tmp_path), "", "a b", "-x", 12]:
        assert not is_name(bad), bad
    with pytest.raises(ParamError):
        trial_id("../x", 0)
    bd = BatchDir(tmp_path / "b")
    assert bd.trial("r00-a") == tmp_path / "b" / "raw" / "r00-a"
    for bad in ("../r00-a", "r00-a/../../x", "/etc"):
        with pytest.raises(OutsideRoot):
            bd.trial(bad)
    # a trial id that is a link out of raw/ is refused too, links followed
    bd.raw.mkdir(parents=True)
    (bd.raw / "r00-link").symlink_to(tmp_path)
    with pytest.raises(OutsideRoot):
        bd.trial("r00-link")
    # the CLI home a trial clears: built from the trial id, never outside its root
    victim = tmp_path / "victim-codex"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    work = tmp_path / "work" / "repo_a"
    work.mkdir(parents=True)
    spec = TrialSpec(
        batch="b", trial_id=f"/../../../../../..{tmp_path}/victim", arm=Arm("x"), run=0, order_index=0,
        nonce="n", isolation=frozenset(), prompt_cache_key=None, prompts=("hi",), workdir=work,
        out_dir=tmp_path / "o", base_url="http://127.0.0.1:1", api_key="k", model="m", max_cycles=1, timeout_s=1.0,
        effort=None, retention=None, options={},
    )  # fmt: skip
    with pytest.raises(OutsideRoot):
        cli_common.trial_home(spec, "codex")
    assert (victim / "keep.txt").read_text() == "mine"


def test_a_trials_log_lines_are_matched_on_the_parsed_trial_id(tmp_path):
    """A line of another trial that holds this trial's id in its text (an error message, say) is not this
    trial's: the old byte needle took it, and its tokens."""
    log = tmp_path / "log.jsonl"
    lines = [
        {"trial_id": "r00-a", "usage": {"input_tokens": 10, "output_tokens": 1}},
        {"trial_id": "r00-b", "error": 'saw "trial_id":"r00-a" in a body', "usage": {"input_tokens": 500}},
        {"trial_id": "r00-a", "usage": {"input_tokens": 20, "output_tokens": 2}},
    ]
    log.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    copied = run._copy_log_lines(log, 0, "r00-a", tmp_path / "mine.jsonl")
    assert copied.total_tokens == 33
    kept = [orjson.loads(x) for x in (tmp_path / "mine.jsonl").read_bytes().splitlines()]
    assert [k["trial_id"] for k in kept] == ["r00-a", "r00-a"]


# ------------------------------------------------------------------ one writer per batch

_HOLD = """
import sys, time
from pathlib import Path
from kit.experiment.lock import batch_lock
with batch_lock(Path(sys.argv[1])):
    print("held", flush=True)
    if len(sys.argv) > 2:  # a child of the holder: runs a stage under the holder's lock
        import subprocess
        child = "from kit.experiment.lock import batch_lock; from pathlib import Path; import sys\\n"
        child += "with batch_lock(Path(sys.argv[1])): print('child ran', flush=True)"
        subprocess.run([sys.executable, "-c", child, sys.argv[1]], check=True)
    time.sleep(600)
"""


def _holder(folder: Path, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder), *extra], cwd=ROOT, env=cli_env(),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_batch_is_refused_naming_its_holder_and_a_dead_holders_lock_is_taken_over(tmp_path, capsys):
    folder = tmp_path / "b"
    proc = _holder(folder)
    try:
        with pytest.raises(BatchBusy, match=rf"is in use by process {proc.pid} \(.*python"), batch_lock(folder):
            pytest.fail("entered a held batch")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with batch_lock(folder):  # its holder is gone: the lock is taken over, with a note
        assert json.loads((folder / LOCK).read_text())["pid"] == os.getpid()
    assert f"process {proc.pid} that held it is gone; taking it over" in capsys.readouterr().err
    assert (folder / LOCK).read_text() == ""  # released cleanly: nothing left to take over
    with batch_lock(folder), batch_lock(folder):  # the holder itself may enter again (a stage inside kit batch)
        pass


def test_a_child_of_the_holder_runs_under_its_lock(tmp_path):
    """A stage's notebook kernel is a child of ``kit batch``, which holds the lock."""
    proc = _holder(tmp_path / "b", "child")
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "child ran"
    finally:
        proc.kill()
        proc.wait()


def test_the_same_batch_started_twice_at_once_runs_once_whole(tmp_path):
    """As a user would: ``kit batch`` in a terminal, and the same name again while it runs. The second is
    refused in one line naming the first; the first completes every trial, none set aside."""
    argv = [sys.executable, "-m", "kit", "batch", *DEMO, "--stages", "run", "-p", "batch", "twin",
            "-p", "outputs_dir", str(tmp_path), "-p", "runs_per_arm", "2", "-p", "concurrency", "1"]  # fmt: skip
    first = subprocess.Popen(argv, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / "twin" / LOCK
    while first.poll() is None and not (lock.exists() and lock.read_text()):
        time.sleep(0.05)
    assert first.poll() is None, first.communicate()
    second = subprocess.run(argv, cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300)
    _, err = first.communicate(timeout=600)
    assert second.returncode == 1
    assert second.stderr.strip().splitlines() == [
        line for line in second.stderr.strip().splitlines() if line.startswith("error: batch ")
    ]
    assert f"is in use by process {first.pid}" in second.stderr
    assert first.returncode == 0, err
    bd = BatchDir(tmp_path / "twin")
    manifest = bd.read_manifest()
    assert manifest.status == "complete"
    assert sorted(p.name for p in bd.trial_dirs()) == ["r00-batching", "r00-placebo", "r01-batching", "r01-placebo"]
    assert not [p for p in bd.raw.iterdir() if p.name in ("_failed", "_incomplete")]  # nothing set aside
