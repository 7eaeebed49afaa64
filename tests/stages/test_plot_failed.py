"""The plot stage on a batch with nothing to compare: every trial failed (an unreachable ``endpoint: real`` upstream
on loopback, a cycle limit no trial can meet), or every trial of one arm. It writes the report whose first lines say
so, draws no figure, and ends with the run stage's ``NoTrialSucceeded``; ``kit batch`` leaves that report too and
exits 1, as for any batch whose run stage fails. Before, the plot stage stopped on a missing analysis/design.json."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli import pipeline
from kit.errors import NoTrialSucceeded
from kit.stages import plot, run
from tests.support import ROOT

PLANTED = "sk-proj-KITPLANTEDopenai7f3a9c"  # endpoint real needs a key in the environment; the proxy never sends it


def _values(out: Path, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch="b", backend="sdk-openai", runs_per_arm=2, concurrency=1)
    params.update(profile=None, timeout_s=300.0, **over)
    return params


def _report_head(folder: Path, n: int = 3) -> list[str]:
    return (folder / "report.md").read_text().splitlines()[:n]


def test_an_all_failed_batch_gets_a_report_saying_so_and_no_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    with socket.socket() as dead:  # a loopback port bound but not listening: every connection refused
        dead.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{dead.getsockname()[1]}"
        cfg = run.configure(_values(tmp_path, endpoint="real", upstream_url=upstream, model="sim-model"))
        with pytest.raises(NoTrialSucceeded) as ran:
            run.run_batch(cfg, progress=False)
    folder = cfg.batch_dir.root
    stale = folder / "figures" / "ratio_forest.png"  # as if an earlier plot had drawn one
    stale.parent.mkdir()
    stale.write_bytes(b"old")
    with pytest.raises(NoTrialSucceeded) as plotted:
        plot.publish(folder)
    reason = (
        f"4 × turn 1: InternalServerError: Error code: 502 - the kit's proxy could not reach the upstream {upstream}"
    )
    assert str(ran.value).startswith(f"no trial succeeded (4 failed): {reason}")
    assert str(plotted.value) == f"{ran.value}; the report says so: {folder / 'report.md'}"  # the run stage's error
    head = _report_head(folder)
    assert head[0] == "# Token-cost report: b: no trial succeeded"
    assert head[2].startswith(f"**4 of 4 trials failed: {reason}: ConnectError")
    assert not list((folder / "figures").iterdir())  # no figure: each needs finished trials
    text = (folder / "report.md").read_text()
    assert "SIMULATION" not in text and f"| upstream_url | {upstream} |" in text  # a real endpoint, named
    assert text.count("| failed | turn 1: InternalServerError") == 4 and (folder / "report.html").is_file()
    assert PLANTED not in text


def test_an_arm_without_a_finished_trial_is_reported_with_its_reason(tmp_path):
    cfg = run.configure(_values(tmp_path, arm_defs={"batching": {"tools": ["nope"]}}))
    with pytest.raises(NoTrialSucceeded):
        run.run_batch(cfg, progress=False)
    folder = cfg.batch_dir.root
    with pytest.raises(NoTrialSucceeded, match=r"^no trial of arm 'batching' succeeded \(2 failed\): 2 × InputError"):
        plot.publish(folder)
    head = _report_head(folder, 5)
    assert head[0] == "# Token-cost report: b: no trial of arm 'batching' succeeded"
    assert head[2] == "**2 of 4 trials failed: 2 × InputError: unknown extra tools ['nope']; accepted: ['explore'].**"
    assert "\nSIMULATION: measured on the kit's embedded provider" in (folder / "report.md").read_text()
    assert not (folder / "figures").exists()


def test_a_batch_with_finished_trials_is_left_to_the_normal_report(tmp_path):
    cfg = run.configure(_values(tmp_path, runs_per_arm=1))
    folder = run.run_batch(cfg, progress=False)
    assert plot.failure_report(folder) is None and not (folder / "report.md").exists()


def test_kit_batch_on_an_all_failed_batch_leaves_the_report_and_exits_1(tmp_path):
    argv = [sys.executable, "-m", "kit", "batch", "-f", "params/demo.yaml", "-p", "outputs_dir", str(tmp_path)]
    argv += ["-p", "batch", "b", "-p", "runs_per_arm", "1", "-p", "max_cycles", "2"]  # too few cycles: all fail
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr
    assert last.startswith("error: stage 'run' failed: NoTrialSucceeded: no trial succeeded (2 failed): 2 × max_cycles")
    folder = tmp_path / "b"
    assert done.stdout.strip().splitlines()[-1] == f"report: {folder / 'report.md'}"  # said before the error
    assert _report_head(folder)[2].startswith("**2 of 2 trials failed: 2 × max_cycles 2 reached")
    assert json.loads((folder / "manifest.json").read_text())["status"] == "failed"
    assert not (folder / "tables").exists() and not (folder / "figures").exists()  # parse never ran, nothing drawn
    # the plot stage alone, as a notebook: the same report, and the stage fails with the run stage's error
    (folder / "report.md").unlink()
    argv = [sys.executable, "-m", "kit", "batch", "--stages", "plot", "-p", "batch_dir", str(folder)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("error: stage 'plot' failed: NoTrialSucceeded: no trial succeeded")
    assert _report_head(folder)[0] == "# Token-cost report: b: no trial succeeded"
    assert (folder / "plot.failed.ipynb").is_file()
