"""``endpoint: real`` through the recording proxy, on loopback: the same batch proxied and direct, compared.

The run stage starts ``kit.provider.proxy`` in front of ``upstream_url`` and gives every trial the proxy's trial
URL; the proxy logs where the embedded provider logs, so parse, the cache model and the warmth sweep read the
proxied batch as they read a simulated one. Here the upstream is the embedded provider itself, with the direct
batch's task policy, seed and cache profile. Two things the direct batch's provider sees are, by design, not
forwarded: the trial id (the proxy strips ``/t/<trial_id>``) and the kit's placeholder key (the agent sends the
real key). The scripted model draws its choices from the trial id and the response ids from the key's cache
domain, so the upstream here is given both back by ``DirectView``: the trial from the nonce in the prompt (one
per trial, docs/method.md#isolation), the placeholder key in place of the real one. Everything else (each
request's bytes, the token counts, the cache) goes through the proxy unchanged and must come out equal.

The real key is a planted fake in the environment; no byte of the batch folder may hold it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kit import analyze, design, parse, pipeline, run
from kit.agents import cli_common
from kit.provider import serve

ROOT = Path(__file__).resolve().parent.parent
SALT = "realproxy01"
PLANTED = {"OPENAI_API_KEY": "sk-proj-KITPLANTEDopenai7f3a9c", "ANTHROPIC_API_KEY": "sk-ant-KITPLANTEDanthropic51e2"}
NONCE = re.compile(rb"Trial nonce: ([0-9a-f]{16})")
BACKENDS = ["sdk-openai", "sdk-anthropic", "codex", "claude"]
# Codex sends its thread id (new every run) as prompt_cache_key, which routes each trial's first request to a random
# one of the profile's machines: which trial reads the shared hidden prefix (1,152 tokens) varies run to run, direct
# or proxied, and with it cache reads and the warmth sweep's middle levels (drawn by the prompts' digests). The CLI
# batches are held to the same requests (trial, cycle), token counts, total-token ratios and warmth-curve ends
# within 2%; the SDK agents' to exact equality.
CLI_TOLERANCE = {"check_exact": False, "rtol": 0.02}
CLI_RATIOS = ("total_tokens", "output_tokens", "input_tokens")
ANALYSIS = {"n_resamples": 1000, "seed": 0, "warmth_levels": 5}


class DirectView:
    """ASGI middleware before the upstream provider: the trial id (from the prompt's nonce) and the placeholder
    key, as the direct batch's provider received them; the body is passed on as it came."""

    def __init__(self, app: ASGIApp, trials: dict[bytes, str]) -> None:
        self.app, self.trials = app, trials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        found = NONCE.search(body)
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"authorization", b"x-api-key")]
        headers.append((b"authorization", f"Bearer {run.EMBEDDED_KEY}".encode()))
        scope = {**scope, "headers": headers, "kit_trial_id": self.trials.get(found.group(1)) if found else None}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _values(out: Path, backend: str, batch: str, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch=batch, backend=backend, runs_per_arm=2, concurrency=1, salt=SALT)
    params.update(profile=None, timeout_s=90.0, **over)
    return params


@contextlib.contextmanager
def direct_view_upstream(cfg: run.RunConfig) -> Iterator[str]:
    """The embedded provider as the direct batch of ``cfg`` runs it (policy, seed, profile), behind ``DirectView``."""
    p = cfg.params
    slots = design.schedule(p["arms"], p["runs_per_arm"], p["order"], SALT, p["seed"])
    trials = {s.nonce.encode(): s.trial_id for s in slots}
    with serve(
        profile=p["profile"], policy=cfg.pack.policy(), seed=run.policy_seed(p["seed"], SALT), survival=p["survival"]
    ) as upstream:
        upstream._app.app.user_middleware.insert(0, Middleware(DirectView, trials=trials))  # before any request
        yield upstream.base_url


def _batch(cfg: run.RunConfig) -> Path:
    folder = run.run_batch(cfg, progress=False)
    parse.parse_batch(folder)
    analyze.analyze_batches([folder], baseline="placebo", **ANALYSIS)
    return folder


def _skip_without(backend: str) -> None:
    if backend in run.BINARIES and not (cli_common.TOOLS_BIN / backend).exists():
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
    with direct_view_upstream(cfg) as upstream:
        # OPENAI_BASE_URL's form (with /v1) for the OpenAI family, ANTHROPIC_BASE_URL's (without) otherwise
        url = f"{upstream}/v1" if backend in ("sdk-openai", "codex") else upstream
        proxied = _batch(run.configure(_values(tmp_path, backend, "b", endpoint="real", upstream_url=url)))
    manifest = json.loads((proxied / "manifest.json").read_text())
    assert manifest["simulated"] is False
    assert manifest["params"]["upstream_url"] == upstream
    assert set(run.summary(proxied)["status"]) == {"ok"}
    mine, theirs = _tables(proxied), _tables(direct)
    assert len(mine["requests"]) > 4 and mine["requests"]["input_tokens"].notna().all()
    if backend in run.BINARIES:
        mine, theirs = _cli_comparable(mine), _cli_comparable(theirs)
    tolerance = CLI_TOLERANCE if backend in run.BINARIES else {}
    for name in mine:
        pd.testing.assert_frame_equal(mine[name], theirs[name], check_dtype=False, obj=f"{backend} {name}", **tolerance)
    _no_planted_key(proxied)


def test_kit_batch_real_endpoint_writes_no_key_in_notebooks_or_html(tmp_path, monkeypatch):
    """The four notebooks (papermill, HTML) of a proxied batch: the key is inherited by the kernels, never written."""
    for name, key in PLANTED.items():
        monkeypatch.setenv(name, key)
    cfg = run.configure(_values(tmp_path, "sdk-openai", "nb", endpoint="real", upstream_url="http://127.0.0.1:1"))
    with direct_view_upstream(cfg) as upstream:
        values = _values(tmp_path, "sdk-openai", "nb", endpoint="real", upstream_url=upstream, **ANALYSIS)
        folder = pipeline.execute(values, progress=False, timeout_s=300)
    assert (folder / "analysis/warmth.csv").is_file() and (folder / "plot.html").is_file()
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
    with direct_view_upstream(cfg) as upstream:
        first = run.configure(_values(tmp_path, "sdk-openai", "b", endpoint="real", upstream_url=upstream))
        folder = run.run_batch(first, progress=False)
    moved = run.configure(_values(tmp_path, "sdk-openai", "b", endpoint="real", upstream_url="http://127.0.0.1:2"))
    with pytest.raises(design.ParamError, match="upstream_url"):
        run.run_batch(moved, progress=False)
    with pytest.raises(design.ParamError, match="endpoint"):
        run.run_batch(run.configure(_values(tmp_path, "sdk-openai", "b")), progress=False)
    assert folder.is_dir()
