"""What the tests share: where the repository and its fixtures are, the records a stub batch needs, the task
packs' fixture files, a pack's batch, and the provider CLI as a child process.

A fresh clone has nothing beside it, so every file a test reads is committed under ``tests/fixtures/`` with its
source and license (``tests/fixtures/SOURCES.md``); nothing points outside the repository.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kit.cli import pipeline
from kit.params import RunParams
from kit.records import Design
from kit.stages import run

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TRANSCRIPTS = FIXTURES / "transcripts"
# The public transcripts the readers are checked on (tests/fixtures/SOURCES.md), named by what each is.
SESSION = TRANSCRIPTS / "claude-session_ccb_harbor_paired.jsonl"
STREAM = TRANSCRIPTS / "claude-streamjson_ccb_harbor_claude-code.txt"
HARBOR = TRANSCRIPTS / "harbor-result_ccb_paired.json"
TOOL_HEAVY = TRANSCRIPTS / "claude-session_spotter_tool_heavy.jsonl"
ACOMPACT = TRANSCRIPTS / "claude-session_spotter_subagent_acompact.jsonl"
NEWEST = TRANSCRIPTS / "claude-session_agent-history_v2.1.152.jsonl"
ROLLOUT = TRANSCRIPTS / "codex-rollout_agent-history_codex_exec_0.135.0.jsonl"
CODE_MODE = TRANSCRIPTS / "codex-rollout_yepanywhere_codemode_0.154.0.jsonl"


# ---------------------------------------------------------------- records a stub batch needs


def design(**fields: Any) -> Design:
    """A ``Design`` for a figure or a report drawn without a batch: these fields, the rest of a small SDK batch."""
    base: dict[str, Any] = {
        "batch": "b1", "task": "batch-read", "arms": [], "runs_per_arm": 5, "order": "alternate",
        "schedule": "alternate", "isolation": "all", "backend": "sdk-openai", "endpoint": "embedded",
        "model": "sim-agent", "simulated": True,
    }  # fmt: skip
    return Design(**(base | fields))


def run_params(**fields: Any) -> RunParams:
    """The run parameters of a manifest made without a batch: these fields, the rest the run notebook's defaults
    (not checked: a stub may name a design no pack runs)."""
    return RunParams(**(pipeline.defaults("run") | fields))


def trial_meta(**fields: Any) -> dict[str, Any]:
    """A ``meta.json``'s content for a stub trial: these fields, the rest as the run stage writes a finished trial."""
    base: dict[str, Any] = {
        "batch": "b1", "trial_id": "r00-a", "arm": "a", "run": 0, "order_index": 0, "nonce": "n0",
        "backend": "claude", "endpoint": "embedded", "model": "sim-agent", "simulated": True,
        "started_at": "2026-01-01T00:00:00+00:00", "ended_at": "2026-01-01T00:01:00+00:00", "wall_s": 60.0,
        "status": "ok",
    }  # fmt: skip
    return base | fields


# ---------------------------------------------------------------- task packs' fixture files


def write_files(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; returns ``root``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def files_digest(files: Mapping[str, str]) -> str:
    """One SHA-256 over every (path, text) in path order: a generated fixture's identity."""
    return hashlib.sha256("".join(f"{k}\0{v}" for k, v in sorted(files.items())).encode()).hexdigest()


def pack_batch(params_file: str, outputs_dir: Path, **overrides: Any) -> Path:
    """Run ``params/<params_file>.yaml`` with ``overrides`` into ``outputs_dir`` (no progress bar); the folder."""
    params = pipeline.load_params(str(ROOT / "params" / f"{params_file}.yaml"))
    params.update(outputs_dir=str(outputs_dir), **overrides)
    return run.run_batch(run.configure(params), progress=False)


def warmth_batches(
    ratios: list[float], hits: list[float], draw: Callable[[np.random.Generator, int], np.ndarray], seed: int,
    runs: int = 5,
) -> pd.DataFrame:  # fmt: skip
    """Batches whose true uncached ratio is ``ratios[i]`` at hit rate ``hits[i]`` (each arm's runs its mean times
    ``draw(rng, runs)``) and one non-isolated control trial each: the warmth check's input, for its tests."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (q, hit) in enumerate(zip(ratios, hits, strict=True)):
        for arm, mean in (("a", 1000 * q), ("b", 1000.0)):
            for index, uncached in enumerate(mean * draw(rng, runs)):
                inp = uncached / (1 - hit)
                rows.append(
                    {"batch": f"w{i}", "arm": arm, "run": index, "status": "ok", "control": False, "input_tokens": inp,
                     "cache_read_tokens": inp - uncached, "uncached_input_tokens": uncached}
                )  # fmt: skip
        rows.append(
            {"batch": f"w{i}", "arm": "c", "run": 0, "status": "ok", "control": True, "input_tokens": 10_000,
             "cache_read_tokens": 9_000, "uncached_input_tokens": 1_000}
        )  # fmt: skip
    return pd.DataFrame(rows)


PACK_PARAMS = {"batch-read": "demo", "terse": "terse", "occupancy": "occupancy", "session-chain": "session-chain"}
_SMALL = {"occupancy": {"preset": "small"}, "session-chain": {"preset": "small"}}  # the others are small already


def small_batch(
    tmp_path: Path, task: str, backend: str, salt: str | None = None, runs: int = 1, **options: object
) -> Path:
    """The pack's parameters for two arms, ``runs`` runs each, on ``backend``; the batch folder after the run.
    ``salt``: the batch's (a fresh one by default); ``options``: task options over the small ones
    (``preset="large"``: the occupancy pack's own)."""
    params = pipeline.load_params(str(ROOT / f"params/{PACK_PARAMS[task]}.yaml"))
    params.update(outputs_dir=str(tmp_path), batch=task, backend=backend, runs_per_arm=runs, concurrency=2)
    params.update(profile=None, timeout_s=1800.0)  # a deadline no working trial nears on a busy machine
    params.update({"salt": salt} if salt else {})
    params["arms"] = params["arms"][:2]
    params["task_options"] = {**params["task_options"], **_SMALL.get(task, {}), **options}
    return run.run_batch(run.configure(params), progress=False)


# ---------------------------------------------------------------- the provider CLI as a child process


@functools.cache
def cli_temp() -> Path:
    """The temporary folder of the ``kit provider`` commands the tests start (their ``TMPDIR``), removed when the
    tests end: a command without ``--log`` keeps the log it prints, which a test leaves unread."""
    folder = Path(tempfile.mkdtemp(prefix="kit-test-cli-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def cli_env() -> dict[str, str]:
    """This process's environment with ``cli_temp`` as the temporary folder."""
    return os.environ | {"TMPDIR": str(cli_temp())}


def start_serve_cli(*args: str) -> tuple[subprocess.Popen, list[str]]:
    """The child and the lines it prints before serving (read by a thread, so that a child that hangs before
    printing fails the test instead of blocking it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit", "provider", "serve", "--port", "0", *args],
        cwd=ROOT,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    lines: list[str] = []
    done = threading.Event()

    def read_banner() -> None:
        for line in stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("policy:"):
                break
        done.set()

    threading.Thread(target=read_banner, daemon=True).start()
    if not done.wait(60) or not lines or not lines[-1].startswith("policy:"):
        proc.kill()
        raise AssertionError(f"serve printed {lines} then stopped; stderr: {proc.communicate()[1]}")
    return proc, lines


@contextlib.contextmanager
def serve_cli(*args: str) -> Iterator[list[str]]:
    """The child serving for the ``with`` block (its banner lines), then stopped by Ctrl-C, which must exit 0."""
    proc, lines = start_serve_cli(*args)
    try:
        yield lines
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the CLI stops the server and closes the log
        try:
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def assert_requests_alone(alone: pd.DataFrame, full: pd.DataFrame) -> None:
    """A read of requests alone (``kit.transcripts.read``) gives the rows of one with the tool results (``tables``),
    but for the response blocks' ``o200k_base`` counts, which are counted with the tool results only."""
    assert alone["output_o200k_tokens"].isna().all()
    column = "output_o200k_tokens"
    pd.testing.assert_frame_equal(alone.drop(columns=column), full.drop(columns=column), check_exact=True)
    assert alone.attrs == full.attrs
