"""The real Codex CLI and Claude Code as kit backends, end to end against the embedded provider.

Each CLI drives the batch-read task's scripted model through a multi-step tool session and a resumed
second turn; what the CLI wrote down (rollout / session file) must equal, request by request, what
the provider logged that it sent. The tests marked e2e skip only when the pinned binaries are absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from kit import tasks, transcripts
from kit.agents import claude, cli_common, codex, filetools, mcp_server, sessions
from kit.agents.base import TrialSpec
from kit.experiment.design import Arm
from kit.experiment.layout import BatchDir
from kit.provider import Conversation, Reply, serve
from kit.provider.log import read as read_log
from kit.stages import run
from kit.tasks.batch_read import BATCHING, PROMPT
from kit.transcripts import collect, sources

PLANTED_OPENAI = "sk-proj-PLANTEDfakeOpenAIkey0123456789abcdef"
PLANTED_ANTHROPIC = "sk-ant-api03-PLANTEDfakeAnthropicKey0123456789"
SECOND = "Thanks. Give me the same table and unused keys once more, exactly as before."
USAGE = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"]
PROFILES = {"codex": "openai-implicit", "claude": "anthropic"}
BINARIES = {name: cli_common.TOOLS_BIN / name for name in PROFILES}
MISSING = [str(p) for p in BINARIES.values() if not p.exists()]
if MISSING:
    print(f"\ntest_cli_backends: e2e tests skip, binaries absent: {MISSING} (run `make e2e-tools`)", file=sys.stderr)
needs_clis = pytest.mark.skipif(bool(MISSING), reason=f"CLI binaries absent: {MISSING} (run `make e2e-tools`)")
RUNNERS = {"codex": codex.run_trial, "claude": claude.run_trial}


class Recorder:
    """The batch-read policy, keeping every conversation it answered (what the CLI really sent)."""

    name = "batch-read"

    def __init__(self, stall_after: int | None = None):
        self.inner = tasks.get("batch-read").policy()
        self.convs: list[Conversation] = []
        self.stall_after = stall_after
        self.release = threading.Event()

    def reply(self, conv: Conversation) -> Reply:
        self.convs.append(conv)
        if self.stall_after is not None and conv.cycle >= self.stall_after:
            self.release.wait()  # a model that stops answering until the test says so: only the kit's kill ends it
        return self.inner.reply(conv)

    def of(self, trial_id: str) -> list[Conversation]:
        return [c for c in self.convs if c.trial_id == trial_id]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    wd = tmp_path_factory.mktemp("batch") / "work" / "repo_a"
    wd.mkdir(parents=True)
    tasks.get("batch-read").prepare(wd)
    return wd


@pytest.fixture(scope="module")
def providers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    recorders = {name: Recorder() for name in PROFILES}
    with (
        serve(profile=PROFILES["codex"], policy=recorders["codex"], log_path=logs / "codex.jsonl") as p_codex,
        serve(profile=PROFILES["claude"], policy=recorders["claude"], log_path=logs / "claude.jsonl") as p_claude,
    ):
        yield {"codex": (p_codex, recorders["codex"]), "claude": (p_claude, recorders["claude"])}


def make_spec(backend, provider, workdir, out_root, trial_id, **overrides) -> TrialSpec:
    out = out_root / trial_id
    out.mkdir(parents=True)
    values = dict(
        batch="t", trial_id=trial_id, arm=Arm("a"), run=0, order_index=0, nonce=f"n{trial_id}x",
        isolation=frozenset({"nonce", "cache_bust_tool", "prompt_cache_key"}), prompt_cache_key="kit-key",
        prompts=(PROMPT,), workdir=workdir, out_dir=out, base_url=provider.trial_base_url(trial_id),
        api_key=run.EMBEDDED_KEY, model="sim-model", timeout_s=60,
    )  # fmt: skip
    values.update(overrides)
    return TrialSpec(**values)


def logged(provider, trial_id: str) -> list[dict]:
    return [r for r in read_log(provider.log_path) if r["trial_id"] == trial_id]


def usage_rows(df) -> list[dict]:
    return [{c: int(r[c]) for c in USAGE} for r in df[USAGE].to_dict("records")]


def session(backend: str, providers, workdir, tmp_path_factory, arm: Arm):
    provider, recorder = providers[backend]
    trial_id = f"{backend}-session"
    spec = make_spec(
        backend, provider, workdir, tmp_path_factory.mktemp("out"), trial_id, arm=arm, prompts=(PROMPT, SECOND)
    )
    outcome = RUNNERS[backend](backend, spec)
    return spec, outcome, logged(provider, trial_id), recorder.of(trial_id)


@pytest.fixture(scope="module")
def codex_session(providers, workdir, tmp_path_factory):
    if MISSING:
        pytest.skip(f"CLI binaries absent: {MISSING}")
    return session("codex", providers, workdir, tmp_path_factory, Arm("sys", "ARM-SYSTEM-TEXT " + BATCHING, "system"))


@pytest.fixture(scope="module")
def claude_session(providers, workdir, tmp_path_factory):
    if MISSING:
        pytest.skip(f"CLI binaries absent: {MISSING}")
    arm = Arm("app", "ARM-APPENDED-TEXT " + BATCHING, "append_system")
    return session("claude", providers, workdir, tmp_path_factory, arm)


# ------------------------------------------------------------------ both CLIs: the session contract


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_multi_step_session_and_resumed_turn_complete_and_grade(backend, request):
    _, outcome, log, convs = request.getfixturevalue(f"{backend}_session")
    assert outcome.status == "ok", outcome.reason
    assert outcome.turns == 2
    assert tasks.get("batch-read").grade(outcome.final_answer).score == 1.0
    # a multi-step tool session: the manifest read, then the file reads, then the answer
    first_tool_calls = [c.name for m in convs[1].messages for c in m.tool_calls]
    assert first_tool_calls in (["exec_command"], ["Read"])
    assert max(len(c.results()) for c in convs) >= 14
    # the resumed turn carries the first turn's history: every tool result and the first answer
    second = [c for c in convs if SECOND in c.last_user_text()]
    assert second, "no request of the second turn reached the provider"
    last_of_first = [c for c in convs if SECOND not in c.last_user_text()][-1]
    assert len(second[0].results()) == len(last_of_first.results())
    assert any(m.role == "assistant" and "Unused config keys" in m.text for m in second[0].messages)
    assert len(second[0].messages) > len(last_of_first.messages)
    assert outcome.cycles == len(log) == len(convs)


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_every_request_is_logged_with_the_trial_id(backend, request, providers):
    _, _, log, convs = request.getfixturevalue(f"{backend}_session")
    provider = providers[backend][0]
    everything = read_log(provider.log_path)
    assert all(r["trial_id"] is not None for r in everything)
    assert len(log) == len(convs) >= 4
    assert {r["status"] for r in log} == {200}
    assert {r["endpoint"] for r in log} == {"/v1/responses" if backend == "codex" else "/v1/messages"}


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_copied_transcript_parses_to_exactly_the_logged_usage(backend, request):
    spec, outcome, log, _ = request.getfixturevalue(f"{backend}_session")
    primary, stdout = outcome.transcripts[0], outcome.transcripts[-1]
    assert primary.startswith("rollout-") if backend == "codex" else primary.endswith(".jsonl")
    assert stdout == f"{backend}_stdout.jsonl"
    rows = transcripts.read(spec.out_dir / primary)
    assert rows.attrs["issues"] == []
    assert usage_rows(rows) == [{c: r["usage"][c] for c in USAGE} for r in log]
    # stdout has per-turn totals only (Codex: one row per turn; Claude: per-event output is partial)
    stream = transcripts.read(spec.out_dir / stdout)
    assert stream.attrs["issues"] == []
    # both number the turns (the resumed turn is in the same file); the stream's totals are per turn
    turn = rows["turn"].astype(int)
    assert sorted(set(turn)) == [1, 2] and list(turn) == sorted(turn)
    if backend == "claude":  # the stream's rows are the same responses in order
        assert list(turn) == list(stream["turn"].astype(int))
    by_turn = rows.groupby(turn.to_numpy())[USAGE].sum()
    if backend == "claude":  # every request the CLI says it sent (api-request lines) has its response
        assert [(c["field"], c["agree"]) for c in rows.attrs["crosscheck"]] == [("requests", True)]
    per_turn = stream.groupby(stream["turn"].astype(int).to_numpy())[USAGE].sum()
    assert per_turn.astype(int).to_dict() == by_turn.astype(int).to_dict()


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_records_command_versions_and_runs_without_the_key(backend, request):
    spec, outcome, _, _ = request.getfixturevalue(f"{backend}_session")
    assert re.fullmatch(r"\d+\.\d+\.\d+", outcome.versions[backend])
    assert outcome.command[outcome.command.index(str(BINARIES[backend])) + 1] in ("exec", "-p")
    assert not any(run.EMBEDDED_KEY in word for word in outcome.command)
    runs = json.loads((spec.out_dir / cli_common.RUNS_FILE).read_text())
    assert [r["returncode"] for r in runs] == [0, 0]
    assert ("resume" in runs[1]["command"]) if backend == "codex" else ("--resume" in runs[1]["command"])
    assert not (spec.workdir.parent / ".homes" / f"{spec.trial_id}-{backend}").exists()


# ------------------------------------------------------------------ placement and isolation, as sent


@pytest.mark.e2e
@needs_clis
def test_codex_system_placement_nonce_and_prompt_cache_key_reach_the_request(codex_session):
    spec, outcome, log, convs = codex_session
    system = convs[0].system
    assert system.startswith("ARM-SYSTEM-TEXT")  # model_instructions_file replaced the base instructions
    assert "running in the Codex CLI" not in system
    assert spec.nonce_line in system
    thread = re.search(r"thread id (\S+)", outcome.versions["prompt_cache_key"]).group(1)
    assert {r["prompt_cache_key"] for r in log} == {thread}
    assert "mcp__cachebust" in convs[0].tool_names()
    assert outcome.versions["isolation_applied"] == "nonce,prompt_cache_key,cache_bust_tool"


@pytest.mark.e2e
@needs_clis
def test_codex_cache_bust_tool_makes_trials_diverge_inside_the_tools(codex_session, providers, workdir, tmp_path):
    """Two trials differing only in the bust tool's id share no prefix past the built-in tools before it."""
    spec, _, log, convs = codex_session
    provider = providers["codex"][0]
    other = make_spec(
        "codex", provider, workdir, tmp_path, "codex-bust", arm=spec.arm, isolation=frozenset({"cache_bust_tool"})
    )
    assert codex.run_trial("codex", other).status == "ok"
    mine, theirs = log[0]["segments"], logged(provider, "codex-bust")[0]["segments"]
    first_diff = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a[0] != b[0])
    tools = [t.name for t in convs[0].tools]
    assert first_diff == tools.index("mcp__cachebust")


@pytest.mark.e2e
@needs_clis
def test_claude_append_placement_nonce_ttl_and_deferred_bust_tool(claude_session, providers):
    spec, outcome, log, convs = claude_session
    system = convs[0].system
    assert system.index("ARM-APPENDED-TEXT") < system.index(spec.nonce_line)
    assert "You are Claude Code" in system  # appended, not replaced
    marks = {s[2] for r in log for s in r["segments"]} - {None}
    assert marks == {"5m"}  # the pinned cache lifetime, on every breakpoint
    # Claude Code defers MCP tools behind ToolSearch: only named in its environment message (a
    # role:"system" message after the system prompt, which the provider folds into ``system``)
    bust = f"mcp__cachebust__{spec.cache_bust_tool}"
    assert not any(bust in name for name in convs[0].tool_names())
    assert system.index(spec.nonce_line) < system.index(bust)
    assert "deferred" in outcome.versions["isolation.cache_bust_tool"]


@pytest.mark.e2e
@needs_clis
def test_claude_cache_ttl_option_pins_one_hour(providers, workdir, tmp_path):
    provider = providers["claude"][0]
    spec = make_spec("claude", provider, workdir, tmp_path, "claude-1h", options={"claude_cache_ttl": "1h"})
    outcome = claude.run_trial("claude", spec)
    assert outcome.status == "ok", outcome.reason
    marks = {s[2] for r in logged(provider, "claude-1h") for s in r["segments"]} - {None}
    assert marks == {"1h"}
    assert outcome.versions["claude_cache_ttl"] == "1h"


# ------------------------------------------------------------------ failures

# The stall test's deadline: it only has to come after the CLI's second request, which Claude Code sent 1.6 s after
# its start alone and 2.2 s after with 16 stress-ng CPU workers beside it on 2 cores (Codex 0.6 s and 1.3 s).
STALL_DEADLINE_S = 20.0


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_timeout_kills_the_cli_and_keeps_partial_stdout(backend, workdir, tmp_path):
    """The model answers once, then stalls until the trial is over: only the kit's deadline can end the CLI. The
    deadline has to outlast the CLI's start and its first response alone, which it does many times over on a
    busy machine (STALL_DEADLINE_S); nothing bounds how late the kill may come, only that it came."""
    recorder = Recorder(stall_after=1)
    with serve(profile=PROFILES[backend], policy=recorder, log_path=tmp_path / "log.jsonl") as provider:
        spec = make_spec(backend, provider, workdir, tmp_path, f"{backend}-stall", timeout_s=STALL_DEADLINE_S)
        try:
            outcome = RUNNERS[backend](backend, spec)
        finally:
            recorder.release.set()
    assert outcome.status == "failed"
    assert "timeout_s" in outcome.reason and outcome.reason.startswith("turn 1:")
    assert [c.cycle for c in recorder.of(spec.trial_id)] == [0, 1]  # killed waiting for the stalled answer
    events = cli_common.read_jsonl(spec.out_dir / f"{backend}_stdout.jsonl")
    kinds = {e.get("type") for e in events}
    assert {"thread.started", "item.completed"} <= kinds if backend == "codex" else {"system", "assistant"} <= kinds
    assert f"{backend}_stdout.jsonl" in outcome.transcripts
    runs = json.loads((spec.out_dir / cli_common.RUNS_FILE).read_text())
    assert runs[0]["timed_out"] is True and runs[0]["wall_s"] >= STALL_DEADLINE_S  # ended by the deadline, not before
    if backend == "claude":  # the session file names the request that never got its response
        session = next(spec.out_dir / n for n in outcome.transcripts if n.endswith(".jsonl") and "stdout" not in n)
        (check,) = transcripts.read(session).attrs["crosscheck"]
        assert (check["field"], check["rows_sum"], check["reported"], check["agree"]) == ("requests", 1, 2, False)


def test_missing_binary_is_a_failed_trial_not_an_exception(tmp_path):
    spec = TrialSpec(
        batch="t", trial_id="x", arm=Arm("a"), run=0, order_index=0, nonce="n", isolation=frozenset(),
        prompt_cache_key=None, prompts=("hi",), workdir=tmp_path, out_dir=tmp_path, base_url="http://127.0.0.1:9",
        api_key="k", model="m", options={"codex_bin": str(tmp_path / "nope"), "claude_bin": str(tmp_path / "nope")},
    )  # fmt: skip
    for backend, runner in RUNNERS.items():
        outcome = runner(backend, spec)
        assert outcome.status == "failed" and "binary not found" in outcome.reason


# ------------------------------------------------------------------ small batches through the run stage


@pytest.mark.e2e
@needs_clis
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_small_batch_runs_through_the_run_stage_without_the_key(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_OPENAI)
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED_ANTHROPIC)
    params = {
        "batch": f"mini-{backend}", "task": "batch-read", "arms": ["placebo", "batching"], "runs_per_arm": 2,
        "order": "alternate", "allow_blocked": False, "backend": backend, "endpoint": "embedded", "model": "sim-model",
        "isolation": "all", "seed": 0, "concurrency": 2, "outputs_dir": str(tmp_path), "task_options": {},
        "arm_defs": {}, "backend_options": {}, "retry_failed": False, "profile": None, "survival": 1.0,
        "timeout_s": 60.0, "max_cycles": 40,
    }  # fmt: skip
    folder = run.run_batch(run.configure(params), progress=False)
    metas = [json.loads(p.read_text()) for p in sorted((folder / "raw").glob("*/meta.json"))]
    assert len(metas) == 4
    for meta in metas:
        assert meta["status"] == "ok", meta["reason"]
        assert meta["grade"] == 1.0
        tdir = folder / "raw" / meta["trial_id"]
        assert all((tdir / name).is_file() for name in meta["transcripts"])
        # what ``python -m kit parse`` reads of the folder: the rollout or session file, once; the stdout
        # stream and the provider log only cross-check it, and agree
        rows, issues = collect.trial_rows(sources.trial(tdir))
        assert issues == [] and set(rows["source_path"]) == {str(tdir / meta["transcripts"][0])}
        log = [orjson.loads(line) for line in (tdir / "provider_log.jsonl").read_bytes().splitlines()]
        assert usage_rows(rows) == [{c: r["usage"][c] for c in USAGE} for r in log]
        assert meta["cycles"] == len(log)
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"PLANTED" not in data, path
    assert not any((run.work_root(BatchDir(folder)) / ".homes").iterdir())


# ------------------------------------------------------------------ pieces that need no CLI


def _spec(tmp_path: Path, **overrides: Any) -> TrialSpec:
    values: dict[str, Any] = dict(
        batch="t", trial_id="t1", arm=Arm("a"), run=0, order_index=0, nonce="abc", isolation=frozenset({"nonce"}),
        prompt_cache_key=None, prompts=("first", "second"), workdir=tmp_path / "work" / "repo_a", out_dir=tmp_path,
        base_url="http://127.0.0.1:8000/t/t1", api_key=run.EMBEDDED_KEY, model="sim-model",
    )  # fmt: skip
    values.update(overrides)
    return TrialSpec(**values)


def _value(args: list[str], key: str) -> str | None:
    """The value of ``-c key=…`` in codex options."""
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")), None)


def test_codex_placements_map_to_the_documented_settings(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    args, _ = codex.config_args(_spec(tmp_path, arm=Arm("a", "DEV", "developer_instructions")), home)
    assert _value(args, "developer_instructions") == json.dumps("DEV\n\nTrial nonce: abc")
    args, _ = codex.config_args(_spec(tmp_path, arm=Arm("a", "SYS", "system"), isolation=frozenset()), home)
    assert _value(args, "developer_instructions") is None
    assert (home / ".codex" / codex.SYSTEM_FILE).read_text() == "SYS\n"
    args, _ = codex.config_args(_spec(tmp_path, arm=Arm("a", "X", "agents_file"), effort="xhigh"), home)
    assert _value(args, "model_reasoning_effort") == '"xhigh"' and _value(args, "mcp_servers") == "{}"
    assert _value(args, "project_root_markers") == "[]" and _value(args, "features.memories") == "false"
    prefixed = _spec(tmp_path, arm=Arm("a", "PRE", "user_prefix"))
    assert sessions.turn_prompt(prefixed, 0, []) == "PRE\n\nfirst"
    assert sessions.turn_prompt(prefixed, 1, ["a"]) == "second"


def test_claude_placements_ttl_and_claude_md_excludes(tmp_path):
    home = tmp_path / "home"
    args, env = claude.options(_spec(tmp_path, arm=Arm("a", "SYS", "system")), home)
    assert args[args.index("--system-prompt") + 1] == "SYS"
    assert args[args.index("--append-system-prompt") + 1] == "Trial nonce: abc"
    assert env["CLAUDE_CODE_PROMPT_CACHE_TTL"] == "5m" and env["FORCE_PROMPT_CACHING_5M"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["HOME"] == str(home)
    args, _ = claude.options(_spec(tmp_path, arm=Arm("a", "APP", "append_system"), isolation=frozenset()), home)
    assert "--system-prompt" not in args and args[args.index("--append-system-prompt") + 1] == "APP"
    excludes = json.loads(args[args.index("--settings") + 1])["claudeMdExcludes"]
    assert str(tmp_path / "work" / "CLAUDE.md") in excludes and "/CLAUDE.md" in excludes
    assert not any(e.startswith(str(tmp_path / "work" / "repo_a") + "/") for e in excludes)
    with pytest.raises(ValueError, match="claude_cache_ttl"):
        claude.cache_env("10m")


def test_real_endpoint_key_goes_only_to_the_child_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_OPENAI)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    real = _spec(tmp_path, base_url="https://api.openai.com", api_key=PLANTED_OPENAI)
    args, kit_env = codex.config_args(real, tmp_path)
    assert 'env_key="OPENAI_API_KEY"' in _value(args, "model_providers.kit") and "retries" not in str(args)
    env = cli_common.child_env(real, kit_env)
    assert env["OPENAI_API_KEY"] == PLANTED_OPENAI and env["HTTPS_PROXY"]
    shown = cli_common.shown_command(["codex", "exec", *args], kit_env, {})
    assert "PLANTED" not in " ".join(shown) and "OPENAI_API_KEY=[REDACTED]" in shown
    embedded = _spec(tmp_path)
    env = cli_common.child_env(embedded, codex.config_args(embedded, tmp_path)[1])
    assert "OPENAI_API_KEY" not in env and "HTTPS_PROXY" not in env  # a user's key never reaches the CLI


def test_mcp_cache_bust_server_speaks_stdio_json_rpc():
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "cache_bust_abc", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "resources/list"},
    ]
    done = subprocess.run(
        [sys.executable, mcp_server.__file__, "cache-bust", "cache_bust_abc"],
        input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ.get("PATH", "")},
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3, 4]  # the notification got no answer
    assert replies[0]["result"]["protocolVersion"] == "2025-03-26"
    assert replies[1]["result"]["tools"] == [
        {
            "name": "cache_bust_abc",
            "description": "Never call this tool.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        }
    ]
    assert json.loads(replies[2]["result"]["content"][0]["text"]) == {"success": True}
    assert replies[3]["error"]["code"] == -32601


def test_mcp_kit_tools_server_offers_the_sdk_agents_explore(tmp_path):
    """Claude Code's explore arm gets the SDK agents' explore (same spec and output) over MCP stdio."""
    tasks.get("occupancy").prepare(tmp_path)
    calls = [("explore", {"query": "run"}), ("explore", {"q": "run"}), ("read_file", {})]
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        *(
            {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
            for n, (name, arguments) in enumerate(calls, start=3)
        ),
    ]
    done = subprocess.run(
        [sys.executable, mcp_server.__file__, "kit-tools", str(tmp_path), "explore"],
        input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True,
        text=True,
        timeout=120,
    )
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    spec = filetools.EXTRA_SPECS["explore"]
    assert replies[2]["result"]["tools"] == [
        {"name": "explore", "description": spec["description"], "inputSchema": spec["parameters"]}
    ]
    found = replies[3]["result"]
    assert found["isError"] is False
    assert found["content"][0]["text"] == filetools.FileTools(tmp_path, ("explore",)).explore("run")
    assert replies[4]["result"]["isError"] is True and "bad arguments" in replies[4]["result"]["content"][0]["text"]
    assert replies[5]["error"]["code"] == -32602  # only the arm's tools are served
