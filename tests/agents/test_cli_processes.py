"""The CLI backends' processes: the version probe's home, the recorded process group and its reaping.

Real processes throughout: the pinned CLIs for the version probe, a shell standing in for a CLI that outlived the
kit (its group recorded as a trial records it), so the reaping is checked against the kernel's own view in /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import orjson
import pytest

from kit.agents import cli_common


@pytest.mark.e2e
@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_the_version_probe_leaves_the_users_home_alone(tmp_path, monkeypatch, cli):
    """``--version`` runs in a throwaway home: Codex 0.169 writes helper binaries into ``$HOME/.codex/tmp`` just to
    print its version (measured), which was the user's own ``~/.codex``."""
    binary = cli_common.TOOLS_BIN / cli
    if not binary.exists():
        pytest.skip(f"{cli} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("HOME", str(home))  # a home outside the temp folder, as a user's is
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    cli_common._version.cache_clear()
    try:
        found = cli_common.version(str(binary))
    finally:
        cli_common._version.cache_clear()
    assert found[0].isdigit() and "." in found, found
    assert list(home.rglob("*")) == []
    assert list(tmp.iterdir()) == []  # the throwaway home is gone too


def _stand_in(home: Path) -> subprocess.Popen:
    """A process group as a CLI's: a leader and a child, both with the trial's HOME, in a session of their own."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    return subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], env=env, start_new_session=True)


def _group(pgid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def test_reap_kills_a_recorded_group_and_removes_its_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _stand_in(home)
    try:
        while len(_group(proc.pid)) < 3:  # sh and its two sleeps
            time.sleep(0.01)
        cli_common._record_group(tmp_path / cli_common.GROUP_FILE, proc.pid, str(home))
        cli_common.reap(tmp_path, tmp_path)
        assert _group(proc.pid) == [] and not home.exists()
    finally:
        if _group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_reap_leaves_a_group_whose_leader_is_another_process(tmp_path):
    """A recorded pid now leading an unrelated group (pid reuse) differs in start time: it is not killed."""
    home = tmp_path / "home"
    home.mkdir()
    proc = _stand_in(tmp_path / "elsewhere")
    try:
        while len(_group(proc.pid)) < 3:  # sh and its two sleeps
            time.sleep(0.01)
        members = sorted(_group(proc.pid))
        cli_common._record_group(tmp_path / cli_common.GROUP_FILE, proc.pid, str(home))
        record = orjson.loads((tmp_path / cli_common.GROUP_FILE).read_bytes())
        record["start_time"] -= 1  # the recorded leader started earlier than the process now holding its pid
        (tmp_path / cli_common.GROUP_FILE).write_bytes(orjson.dumps(record))
        cli_common.reap(tmp_path, tmp_path)
        assert sorted(_group(proc.pid)) == members
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_reap_trusts_no_home_outside_the_homes_root(tmp_path):
    """A record read from a batch folder names a home elsewhere (copied from another machine, or edited): the
    processes that hold that home are not killed and the folder is not removed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    proc = _stand_in(victim)
    trial = tmp_path / "trial"
    trial.mkdir()
    try:
        while len(_group(proc.pid)) < 3:  # sh and its two sleeps
            time.sleep(0.01)
        members = sorted(_group(proc.pid))
        record = {"pgid": 1 << 22, "start_time": 0, "boot_id": cli_common._boot_id(), "home": str(victim)}
        (trial / cli_common.GROUP_FILE).write_bytes(orjson.dumps(record))
        cli_common.reap(trial, tmp_path / "homes")
        assert sorted(_group(proc.pid)) == members and (victim / "keep.txt").read_text() == "mine"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
