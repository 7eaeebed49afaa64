"""Backend ``codex``: the real Codex CLI (``codex exec --json``), one process per turn.

Every trial gets its own absolute ``CODEX_HOME`` and a pinned configuration given entirely on the
command line (as codex-batch-bench pins it, docs/method.md#sources): memories, plugins, multi-agent and
analytics off, no MCP servers but the kit's own, read-only sandbox, the model and effort, and
``project_root_markers=[]`` so Codex reads the work dir's AGENTS.md and no AGENTS.md of a folder above
it (measured: without it, an AGENTS.md in any parent up to the git root joins the prompt). The model
provider is the embedded one by default (retries off, so a failure is seen, not hidden) or the real
endpoint, whose key travels only in the child's environment (``env_key``). Later turns use ``exec resume
<thread>``, which appends to the same rollout; the rollout, stdout and stderr are copied into the trial
folder.

Arm placement on Codex (measured on 0.169.0 against the embedded provider's requests):

- ``system``: ``-c base_instructions=…`` is ignored ("session-flags: `base_instructions` is
  ignored"), but ``model_instructions_file`` replaces Codex's base instructions, so the arm's text is
  written to a file in the trial home and used instead of the built-in prompt.
- ``developer_instructions`` (and ``append_system``, which Codex has no other place for): the
  developer message after the base instructions.
- ``user_prefix``: the first prompt starts with the instruction. ``agents_file``: the run stage wrote
  AGENTS.md into the work dir.

Isolation: the nonce line ends the developer instructions (the system → task boundary); Codex always
sends its thread id as ``prompt_cache_key`` (constant for the trial, unique across trials), which is
recorded; the cache-bust tool comes from ``kit/agents/mcp_server.py`` and reaches the request as a
``namespace`` tool ``mcp__cachebust`` holding the ``cache_bust_<id>`` function, after Codex's
built-in tools (so only the built-in tool definitions before it can be shared across trials).

An arm's kit tools (``Arm.tools``, e.g. ``explore``) come from the same script as MCP server ``kit``
(namespace ``mcp__kit``). Both servers get ``default_tools_approval_mode="approve"``: ``codex exec``
cannot ask, and without it every call is refused ("MCP tool call requires approval, but approval policy
is never", measured on 0.169 for the cache-bust tool too, where isolation needs ``{"success": true}``).

``backend_options``: ``codex_bin`` (a patched build for codex-batch-bench's binary-vs-binary comparison;
default the pinned ``.tools`` CLI, else PATH), ``effort`` (``model_reasoning_effort``), ``code_mode``,
``home_root`` and ``keep_home`` (where per-trial homes go, and keeping them for debugging), ``auth``
(``login``: the user's ChatGPT login, kit/agents/login.py).

``code_mode: true`` sets ``features.code_mode=true`` (Codex's ``Feature::CodeMode``, "under development"
and off by default in 0.169.0's ``codex features list``; codex-rs/core/src/tools/code_mode/mod.rs starts
the cell runtime only when it is on, whatever the model). The request then offers the custom tool
``exec`` (a JavaScript cell calling Codex's tools as ``tools.<name>(…)``) and ``wait`` next to the direct
tools; Codex runs a cell's calls itself and answers with one ``custom_tool_call_output`` (measured
against the embedded provider). Give it to every arm of a batch, or the arms differ in their tools.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kit.agents import cli_common as cli
from kit.agents import login, mcp_server, sessions
from kit.agents.base import TrialOutcome, TrialSpec
from kit.errors import InputError

NAME = "codex"
EMBEDDED_KEY_ENV = "KIT_EMBEDDED_API_KEY"
REAL_KEY_ENV = "OPENAI_API_KEY"
STDOUT, STDERR = "codex_stdout.jsonl", "codex_stderr.log"
SYSTEM_FILE = "kit_model_instructions.md"
PINNED = (
    "features.memories=false",
    "features.plugins=false",
    "features.multi_agent=false",
    "analytics.enabled=false",
    "project_root_markers=[]",
)
CODE_MODE = "features.code_mode=true"  # Feature::CodeMode: the ``exec`` tool, next to the direct tools


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML; non-ASCII stays literal)."""
    return json.dumps(value, ensure_ascii=False)


def code_mode(spec: TrialSpec) -> bool:
    """``backend_options.code_mode``; anything but a boolean is refused, since "false" would read as on."""
    value = spec.options.get("code_mode", False)
    if not isinstance(value, bool):
        raise InputError(f"backend_options.code_mode: got {value!r}; accepted: true or false")
    return value


def config_args(spec: TrialSpec, home: Path) -> tuple[list[str], dict[str, str]]:
    """The ``-c``/``-m``/``-s`` options shared by every turn, and the environment the kit sets. On the user's login
    (``auth: login``, kit/agents/login.py) the provider takes the login's token and no key is in the environment."""
    loopback = cli.is_loopback(spec.base_url)
    key_env = EMBEDDED_KEY_ENV if loopback else REAL_KEY_ENV
    retries = ",request_max_retries=0,stream_max_retries=0" if loopback else ""
    signed_in = login.mode(spec.options) == login.LOGIN
    base_url = spec.base_url.rstrip("/") + ("" if signed_in else "/v1")  # the ChatGPT backend's paths have no /v1
    auth = "requires_openai_auth=true" if signed_in else f'env_key="{key_env}"'
    provider = f'{{name="kit",base_url={_toml(base_url)},wire_api="responses",{auth}{retries}}}'
    args = ["--skip-git-repo-check", "--json", "-C", str(spec.workdir.resolve()), "-s", "read-only", "-m", spec.model]
    args += ["-c", "model_provider=kit", "-c", f"model_providers.kit={provider}"]
    for setting in PINNED + (login.LOGIN_PINNED if signed_in else ()):
        args += ["-c", setting]
    servers = []
    for name, argv in mcp_server.servers(spec).items():  # TOML inline tables, every tool approved
        command = f"command={_toml(sys.executable)},args=[{','.join(map(_toml, argv))}]"
        servers.append(f'{name}={{{command},default_tools_approval_mode="approve"}}')
    args += ["-c", f"mcp_servers={{{','.join(servers)}}}"]
    if code_mode(spec):
        args += ["-c", CODE_MODE]
    effort = cli.effort(spec)
    if effort:
        args += ["-c", f"model_reasoning_effort={_toml(effort)}"]
    developer = spec.system_addition()
    if developer:
        args += ["-c", f"developer_instructions={_toml(developer)}"]
    if spec.arm.instruction and spec.arm.placement == "system":
        path = home / ".codex" / SYSTEM_FILE
        path.write_text(spec.arm.instruction + "\n")
        args += ["-c", f"model_instructions_file={_toml(str(path))}"]
    args += list(spec.arm.flags)
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    return args, env if signed_in else {**env, key_env: spec.api_key}


def applied(spec: TrialSpec, thread_id: str | None, signed_in: login.Login | None = None) -> dict[str, str]:
    """What the trial really did with the arm, the isolation parts and the login (goes to meta's ``versions``)."""
    placement = {
        "system": "model_instructions_file (replaces Codex's base instructions)",
        "developer_instructions": "developer_instructions",
        "append_system": "developer_instructions (Codex cannot append to its base instructions)",
        "user_prefix": "first prompt prefix",
        "agents_file": "AGENTS.md in the work dir",
    }
    key_env = EMBEDDED_KEY_ENV if cli.is_loopback(spec.base_url) else REAL_KEY_ENV
    out = {
        "placement": placement[spec.arm.placement] if spec.arm.instruction else "none (no instruction)",
        "prompt_cache_key": f"codex thread id {thread_id} (sent as prompt_cache_key on every request)",
        "auth": signed_in.describe() if signed_in else f"api_key ({key_env}, the kit's model provider env_key)",
    }
    done = []
    if "nonce" in spec.isolation:
        done.append("nonce")
        out["isolation.nonce"] = "last line of developer_instructions"
    if "prompt_cache_key" in spec.isolation:
        done.append("prompt_cache_key")
        out["isolation.prompt_cache_key"] = "codex thread id (Codex sends its own; the kit's key is not used)"
    if spec.cache_bust_tool:
        done.append("cache_bust_tool")
        out["isolation.cache_bust_tool"] = (
            f"MCP namespace tool mcp__cachebust holding {spec.cache_bust_tool} (approved), after Codex's built-in tools"
        )
    if spec.arm.tools:
        namespace = f"mcp__{mcp_server.KIT_SERVER}"
        out["tools"] = ", ".join(f"{t} in MCP namespace {namespace} (approved)" for t in spec.arm.tools)
    if code_mode(spec):
        out["code_mode"] = f"{CODE_MODE} (the exec tool runs JavaScript cells calling tools.*)"
    out["isolation_applied"] = ",".join(done) or "none"
    return out


def run_trial(backend: str, spec: TrialSpec) -> TrialOutcome:
    """Run every prompt of the trial through ``codex exec`` (resuming the thread unless the arm is fresh)."""
    binary = cli.find_binary(spec, "codex_bin", "codex")
    if binary is None:
        return TrialOutcome(status="failed", reason="codex binary not found (backend_options.codex_bin, .tools, PATH)")
    outcome = TrialOutcome(status="ok", versions={"codex": cli.version(binary), "codex_bin": binary})
    signed_in = login.read(NAME) if login.mode(spec.options) == login.LOGIN else None
    home = cli.trial_home(spec, cli.home_name(spec, NAME))
    (home / ".codex").mkdir()
    runs: list[cli.Completed] = []
    thread_id: str | None = None

    def argv(turn: int) -> list[str]:
        resume = ["resume", thread_id] if thread_id and spec.arm.session == "resume" else []
        return [binary, "exec", *options, *resume, "--", sessions.turn_prompt(spec, turn, outcome.answers)]

    def events(found: list[dict]) -> tuple[str, str]:
        nonlocal thread_id
        thread_id = next((e["thread_id"] for e in found if e.get("type") == "thread.started"), thread_id)
        return _turn_failure(found), _last_message(found)

    try:
        if signed_in:
            login.install(signed_in, home)
        options, kit_env = config_args(spec, home)
        env = cli.child_env(spec, kit_env)
        turns = cli.Turns("codex", argv, events, env, kit_env, spec.out_dir / STDOUT, spec.out_dir / STDERR)
        cli.run_turns(spec, outcome, turns, runs)
    finally:
        login.remove(signed_in, home)
        outcome.transcripts = _copy(home, spec.out_dir)
        outcome.cycles = _cycles(spec.out_dir, outcome.transcripts)
        outcome.command = runs[0].command if runs else []
        cli.write_runs(spec.out_dir, runs)
        cli.remove_home(spec, home)
    outcome.versions.update(applied(spec, thread_id, signed_in))
    if spec.cache_bust_tool:
        outcome.versions.update(mcp_server.calls_record(_dummy_answers(spec.out_dir, outcome.transcripts, spec)))
    return outcome


def _turn_failure(events: list[dict]) -> str:
    for event in events:
        if event.get("type") == "turn.failed":
            return f"turn.failed: {(event.get('error') or {}).get('message', '')}"[:500]
    if not any(e.get("type") == "turn.completed" for e in events):
        return "no turn.completed event in codex's output"
    return ""


def _last_message(events: list[dict]) -> str:
    texts = [
        e["item"].get("text", "")
        for e in events
        if e.get("type") == "item.completed" and (e.get("item") or {}).get("type") == "agent_message"
    ]
    return texts[-1] if texts else ""


def _copy(home: Path, out_dir: Path) -> list[str]:
    """Rollouts in the order they were started, then stdout; every rollout keeps its own file name.

    A rollout's name is its start time and its UUIDv7 thread id, so name order is start order: a
    trial with fresh sessions (one thread per turn) is read back turn by turn.
    """
    rollouts = sorted((home / ".codex" / "sessions").rglob("rollout-*.jsonl"), key=lambda p: p.name)
    names = cli.copy_transcripts([(p, p.name) for p in rollouts], out_dir)
    return names + ([STDOUT] if (out_dir / STDOUT).exists() else [])


def _dummy_answers(out_dir: Path, names: list[str], spec: TrialSpec) -> list[str]:
    """What each call of the trial's dummy tool answered the model: the rollouts' ``function_call_output`` of
    each call of ``mcp__cachebust``'s tool, without the "Wall time: … Output:" item Codex puts first."""
    tool = (f"mcp__{mcp_server.CACHE_BUST_SERVER}", spec.cache_bust_tool)
    calls: set[str] = set()
    answers: dict[str, str] = {}  # by call id: a resumed turn's rollout lines are read once
    for name in names:
        for line in cli.read_jsonl(out_dir / name) if name.startswith("rollout-") else []:
            item = line.get("payload") if line.get("type") == "response_item" else None
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call" and (item.get("namespace"), item.get("name")) == tool:
                calls.add(str(item.get("call_id")))
            elif item.get("type") == "function_call_output" and str(item.get("call_id")) in calls:
                output = item.get("output")
                if isinstance(output, list) and mcp_server.result_text(output[:1]).startswith("Wall time:"):
                    output = output[1:]
                answers[str(item.get("call_id"))] = mcp_server.result_text(output)
    return list(answers.values())


def _cycles(out_dir: Path, names: list[str]) -> int:
    """Model responses: one ``token_usage_record`` per response in the rollouts."""
    return sum(
        1
        for name in names
        if name.startswith("rollout-")
        for line in cli.read_jsonl(out_dir / name)
        if line.get("type") == "token_usage_record"
    )
