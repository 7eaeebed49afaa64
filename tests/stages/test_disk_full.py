"""A full disk during ``kit batch``: one line, the stage's notebook kept as ``.failed.ipynb``, the manifest not left
``running``. The disk is real: a 300 KB tmpfs the run stage fills (mounting needs root, as CI runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_is_one_line_and_leaves_no_running_manifest(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        argv = [sys.executable, "-m", "kit", "batch", "-f", "params/demo.yaml", "-p", "outputs_dir", str(disk)]
        done = subprocess.run([*argv, "-p", "batch", "b"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        folder = disk / "b"
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("error: stage 'run' failed: the disk is full (No space left on device)"), last
        assert (folder / "run.failed.ipynb").exists() and not (folder / "run.running.ipynb").exists()
        assert json.loads((folder / "manifest.json").read_text())["status"] == "failed"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
