"""``endpoint: real`` through the recording proxy, on loopback: the same batch proxied and direct, compared.

The run stage starts ``kit.provider.proxy`` in front of ``upstream_url`` and gives every trial the proxy's trial
URL; the proxy logs where the embedded provider logs, so parse, the cache model and the warmth sweep read the
proxied batch as they read a simulated one. Here the upstream is the embedded provider serving as the direct
batch's run stage serves it (``run.provider_settings``; from the command line ``python -m kit provider serve -f
params/demo.yaml -p salt S``). The proxy forwards each request's bytes, not the kit's ``/t/<trial_id>`` prefix nor
the placeholder key (the agent sends the user's key): the scripted model knows a trial by the nonce inside the
request (``Conversation.identity``) and its response ids ignore the key, so nothing is restored between proxy and
upstream, and the tables must come out equal.

The real key is a planted fake in the environment; no byte of the batch folder may hold it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pandas as pd
import pytest

from kit.agents import cli_common
from kit.cli import pipeline
from kit.experiment import design
from kit.experiment.backends import BACKENDS as BACKENDS_BY_NAME
from kit.provider import serve
from kit.stages import analyze, parse, run
from tests.support import ROOT, serve_cli

SALT = "realproxy01"
PLANTED = {"OPENAI_API_KEY": "sk-proj-KITPLANTEDopenai7f3a9c", "ANTHROPIC_API_KEY": "sk-ant-KITPLANTEDanthropic51e2"}
BACKENDS = ["sdk-openai", "sdk-anthropic", "codex", "claude"]
# Codex sends its thread id (new every run) as prompt_cache_key, which routes each trial's first request to a random
# one of the profile's machines: which trial reads the shared hidden prefix (1,152 tokens) varies run to run, direct
# or proxied, and with it cache reads and the warmth sweep's middle levels (drawn by the prompts' digests). The CLI
# batches are held to the same requests (trial, cycle), token counts, total-token ratios and warmth-curve ends
# within 2%; the SDK agents' to exact equality.
CLI_TOLERANCE = {"check_exact": False, "rtol": 0.02}
CLI_RATIOS = ("total_tokens", "output_tokens", "input_tokens")


class AnalysisOptions(TypedDict):
    """The analyze stage's options every batch here is analysed with (keyword arguments of ``analyze_batches``)."""

    n_resamples: int
    seed: int
    warmth_levels: int


ANALYSIS: AnalysisOptions = {"n_resamples": 1000, "seed": 0, "warmth_levels": 5}


def _values(out: Path, backend: str, batch: str, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch=batch, backend=backend, runs_per_arm=2, concurrency=1, salt=SALT)
    params.update(profile=None, timeout_s=90.0, **over)
    return params


@contextlib.contextmanager
def batch_upstream(cfg: run.RunConfig) -> Iterator[str]:
    """The embedded provider as the run stage of ``cfg`` with the test's salt runs it (pack, profile, seed)."""
    with serve(**vars(run.provider_settings(cfg, SALT))) as upstream:
        yield upstream.base_url


def _batch(cfg: run.RunConfig) -> Path:
    folder = run.run_batch(cfg, progress=False)
    parse.parse_batch(folder)
    analyze.analyze_batches([folder], baseline="placebo", **ANALYSIS)
    return folder


def _skip_without(backend: str) -> None:
    if BACKENDS_BY_NAME[backend].is_cli and not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} binary absent from {cli_common.TOOLS_BIN} (run `make e2e-tools`)")


def _tables(folder: Path) -> dict[str, pd.DataFrame]:
    """What must match: every token column of each request, the ratios, the warmth curve (batch names apart)."""
    requests = pd.read_parquet(folder / "tables/requests.parquet")
    tokens = [c for c in requests.columns if c.endswith("_tokens")]
    keys = ["trial_id", "cycle"]
    ratios = pd.read_csv(folder / "analysis/ratios.csv").drop(columns=["batches", "simulated"], errors="ignore")
    return {
        "requests": requests.sort_values(keys)[keys + tokens].reset_index(drop=True),
        "ratios": ratios,
        "warmth": pd.read_csv(folder / "analysis/warmth.csv"),
    }


def _cli_comparable(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """What a CLI batch repeats run to run (see ``CLI_TOLERANCE``): no cache reads, only token-count ratios, and
    the warmth curve's cold and warm ends (its levels between draw survival by the prompts' digests, which hold
    the CLI's ids)."""
    keep = ["trial_id", "cycle", "input_tokens", "output_tokens", "reasoning_tokens"]
    ratios = tables["ratios"]
    ratios = ratios[ratios["metric"].isin(CLI_RATIOS)][["arm", "baseline", "metric", "estimate"]]
    warmth = tables["warmth"]
    return {
        "requests": tables["requests"][keep],
        "ratios": ratios.reset_index(drop=True),
        # the band's bounds are left out: from 2 runs per arm a resample takes one of a few values, so a few
        # tokens' difference can move a quantile from one of them to the next (seen: ratio_lower on codex)
        "warmth": warmth[warmth["survival"].isin([0.0, 1.0])]
        .drop(columns=["ratio_lower", "ratio_upper"])
        .reset_index(drop=True),
    }


def _no_planted_key(folder: Path) -> None:
    for path in (p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for key in PLANTED.values():
            assert key.encode() not in data, f"{path} holds the planted key"


@pytest.mark.parametrize("backend", BACKENDS)
def test_proxied_batch_equals_the_direct_one_and_holds_no_key(tmp_path, monkeypatch, backend):
    _skip_without(backend)
    for name, key in PLANTED.items():
        monkeypatch.setenv(name, key)
    # Both batches in one folder, one after the other: the agents' work dirs derive from it (run.work_root), and
    # the CLIs put those paths into their prompts and tool calls.
    direct = _batch(run.configure(_values(tmp_path, backend, "b"))).rename(tmp_path / "direct")
    cfg = run.configure(_values(tmp_path, backend, "b", endpoint="real", upstream_url="http://127.0.0.1:1/v1"))
    with batch_upstream(cfg) as upstream:
        # OPENAI_BASE_URL's form (with /v1) for the OpenAI family, ANTHROPIC_BASE_URL's (without) otherwise
        url = f"{upstream}/v1" if backend in ("sdk-openai", "codex") else upstream
        proxied = _batch(run.configure(_values(tmp_path, backend, "b", endpoint="real", upstream_url=url)))
    manifest = json.loads((proxied / "manifest.json").read_text())
    # the upstream is the kit's own provider (its x-kit-simulated header): the batch is labelled a simulation
    assert manifest["simulated"] is True and manifest["params"]["endpoint"] == "real"
    assert manifest["params"]["upstream_url"] == upstream
    assert set(run.schedule_table(proxied)["status"]) == {"ok"}
    mine, theirs = _tables(proxied), _tables(direct)
    assert len(mine["requests"]) > 4 and mine["requests"]["input_tokens"].notna().all()
    if BACKENDS_BY_NAME[backend].is_cli:
        mine, theirs = _cli_comparable(mine), _cli_comparable(theirs)
    tolerance = CLI_TOLERANCE if BACKENDS_BY_NAME[backend].is_cli else {}
    for name in mine:
        pd.testing.assert_frame_equal(mine[name], theirs[name], check_dtype=False, obj=f"{backend} {name}", **tolerance)
    _no_planted_key(proxied)


def test_kit_batch_through_the_proxy_to_kit_provider_serve_equals_the_direct_batch(tmp_path, monkeypatch):
    """As a user does it: ``python -m kit provider serve -f params/demo.yaml -p salt S`` in its own process, the
    four notebooks (papermill, HTML) of the batch with ``-p endpoint real -p upstream_url <it>/v1``; the tables
    equal the direct batch's, and the key, inherited by the kernels, is never written."""
    for name, key in PLANTED.items():
        monkeypatch.setenv(name, key)
    direct = _batch(run.configure(_values(tmp_path, "sdk-openai", "nb"))).rename(tmp_path / "direct")
    with serve_cli("-f", "params/demo.yaml", "-p", "salt", SALT) as banner:
        url = f"{banner[0]}/v1"
        values = _values(tmp_path, "sdk-openai", "nb", endpoint="real", upstream_url=url, **ANALYSIS)
        folder = pipeline.execute(values, progress=False, timeout_s=300)
    assert (folder / "analysis/warmth.csv").is_file() and (folder / "plot.html").is_file()
    assert (folder / "report.md").read_text().startswith("SIMULATION")  # the upstream was the kit's provider
    mine, theirs = _tables(folder), _tables(direct)
    for name in mine:
        pd.testing.assert_frame_equal(mine[name], theirs[name], check_dtype=False, obj=name)
    _no_planted_key(folder)


def test_real_endpoint_parameters_are_checked_before_anything_is_written(tmp_path):
    with pytest.raises(design.ParamError, match="upstream_url"):
        run.configure(_values(tmp_path, "sdk-openai", "x", upstream_url="http://127.0.0.1:9/v1"))  # embedded
    for bad in ("ftp://host", "http://user:secret@host", "http://host/v1?key=sk-1", "localhost:8000"):
        with pytest.raises(design.ParamError, match="upstream_url"):
            run.configure(_values(tmp_path, "sdk-openai", "x", endpoint="real", upstream_url=bad))
    assert not any(tmp_path.iterdir())


def test_resume_refuses_a_changed_upstream(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED["OPENAI_API_KEY"])
    cfg = run.configure(_values(tmp_path, "sdk-openai", "b", endpoint="real", upstream_url="http://127.0.0.1:1"))
    with batch_upstream(cfg) as upstream:
        first = run.configure(_values(tmp_path, "sdk-openai", "b", endpoint="real", upstream_url=upstream))
        folder = run.run_batch(first, progress=False)
    moved = run.configure(_values(tmp_path, "sdk-openai", "b", endpoint="real", upstream_url="http://127.0.0.1:2"))
    with pytest.raises(design.ParamError, match="upstream_url"):
        run.run_batch(moved, progress=False)
    with pytest.raises(design.ParamError, match="endpoint"):
        run.run_batch(run.configure(_values(tmp_path, "sdk-openai", "b")), progress=False)
    assert folder.is_dir()


@pytest.mark.parametrize("backend", ["sdk-openai", "claude"])
def test_an_unreachable_upstream_is_the_last_line_and_fails_each_trial_at_once(tmp_path, backend):
    """``kit batch`` with ``endpoint: real`` and an upstream that refuses every connection (a loopback port bound but
    not listening): each trial fails on the proxy's first 502 with its reason, not at its deadline (Claude Code
    retries 5xx answers; the trial runner ends it on the proxy's log line), and the command's last line says so,
    the run stage being where it stops. Before, the batch went on to analyze and ended with "no trials of arm"."""
    _skip_without(backend)
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{dead.getsockname()[1]}"
        argv = [sys.executable, "-m", "kit", "batch", "-f", "params/demo.yaml", "-p", "backend", backend]
        over = {"outputs_dir": tmp_path, "batch": "b", "endpoint": "real", "upstream_url": upstream, "timeout_s": 900.0}
        for key, value in {**over, "model": "sim-model", "runs_per_arm": 1}.items():
            argv += ["-p", key, str(value)]
        env = {**os.environ, **PLANTED}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    reason = f"the kit's proxy could not reach the upstream {upstream}: ConnectError"
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("error: stage 'run' failed: NoTrialSucceeded: no trial"), last
    assert reason in last
    metas = [json.loads(p.read_text()) for p in (tmp_path / "b/raw").glob("*/meta.json")]
    assert len(metas) == 2 and all(m["status"] == "failed" and reason in m["reason"] for m in metas), metas
    assert not any("deadline" in m["reason"] or "timeout_s" in m["reason"] for m in metas)
    assert json.loads((tmp_path / "b/manifest.json").read_text())["status"] == "failed"
    assert not (tmp_path / "b/tables").exists()  # parse never ran
