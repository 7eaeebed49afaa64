"""Backend ``claude``: the real Claude Code (``claude -p --output-format stream-json --verbose``).

Every trial gets its own ``HOME`` (so no login, memory, settings or session of the user's leaks in; the
user's login only when ``auth: login`` asks for it), ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``
(measured: the only setting that leaves nothing but the model requests on the wire) and a pinned
prompt-cache lifetime: Claude Code picks 1 h or 5 m by login type, so two arms that differ only in how
they log in would differ in cost (notes: provider-caches-and-peers). ``claude_cache_ttl`` (default
``5m``) sets ``CLAUDE_CODE_PROMPT_CACHE_TTL`` and its subagent twin, plus ``FORCE_PROMPT_CACHING_5M`` or
``ENABLE_PROMPT_CACHING_1H``.
``claudeMdExcludes`` names every CLAUDE.md location above the work dir (measured: Claude Code reads
CLAUDE.md from every parent folder, so a file above ``outputs/`` would join every arm's prompt); the
work dir's own CLAUDE.md (the ``agents_file`` arm) still loads. ``--strict-mcp-config`` keeps out any
MCP server but the kit's. Later turns use ``--resume <session>``, which appends to the same session
file; it is copied into the trial folder with stdout and stderr.

Arm placement: ``system`` → ``--system-prompt`` (replaces Claude Code's system prompt), ``append_system``
(and ``developer_instructions``, which Claude Code has no separate place for) → ``--append-system-prompt``,
``user_prefix`` → the first prompt, ``agents_file`` → the run stage's CLAUDE.md.

Isolation: the nonce line is appended to the system prompt (the system → task boundary). The
cache-bust tool is served by ``kit/agents/mcp_server.py`` through ``--mcp-config``, but Claude Code
2.1.328 defers MCP tools behind ToolSearch: the request's ``tools`` do not contain it; only Claude
Code's environment message (the ``role:"system"`` message after the system prompt, before the task)
names it. It is therefore not at the top of the prefix but after the nonce; the nonce does the
isolating, and ``versions`` says so. The Messages API has no ``prompt_cache_key``. The tool is in
``--allowedTools``, so a model that loads and calls it anyway gets ``{"success": true}``.

An arm's kit tools (``Arm.tools``, e.g. ``explore``) are served by the same script as MCP server
``kit`` and allowed with ``--allowedTools`` (``-p`` cannot ask for permission). Like any MCP tool they
are deferred behind ToolSearch, as users run Claude Code: a model loads one with a ToolSearch call
(``select:mcp__kit__explore``) before using it, one request more (the scripted policies do so,
kit/tasks/tooluse.py). ``claude_tool_search: false`` sets ``ENABLE_TOOL_SEARCH=false`` for a trial
(measured on 2.1.328: MCP tools then sit in the request's ``tools`` from the start, and Claude Code
offers ten more built-in tools); give it to every arm of a batch, or the arms differ in more than the tool.

``backend_options``: ``claude_bin`` (default the pinned ``.tools`` CLI, else PATH), ``effort``
(``--effort``), ``claude_cache_ttl`` (``5m`` or ``1h``), ``claude_tool_search``, ``home_root``,
``keep_home`` and ``auth`` (``login``: the user's subscription login, kit/agents/login.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kit.agents import cli_common as cli
from kit.agents import login, mcp_server, sessions
from kit.agents.base import TrialOutcome, TrialSpec
from kit.errors import InputError
from kit.jsontypes import JsonObject

NAME = "claude"
STDOUT, STDERR = "claude_stdout.jsonl", "claude_stderr.log"
TTLS = ("5m", "1h")
MD_NAMES = ("CLAUDE.md", "CLAUDE.local.md", ".claude/CLAUDE.md", ".claude/rules/**")


def settings(workdir: Path) -> JsonObject:
    """``--settings``: exclude the CLAUDE.md files of every folder above the work dir."""
    excludes = [f"{parent.as_posix().rstrip('/')}/{name}" for parent in workdir.parents for name in MD_NAMES]
    return {"claudeMdExcludes": excludes}


def cache_env(ttl: str) -> dict[str, str]:
    if ttl not in TTLS:
        raise InputError(f"backend_options.claude_cache_ttl: {ttl!r}; accepted: {list(TTLS)}")
    pin = {"FORCE_PROMPT_CACHING_5M": "1"} if ttl == "5m" else {"ENABLE_PROMPT_CACHING_1H": "1"}
    return {"CLAUDE_CODE_PROMPT_CACHE_TTL": ttl, "CLAUDE_CODE_SUBAGENT_PROMPT_CACHE_TTL": ttl, **pin}


def _kit_tool_names(spec: TrialSpec) -> list[str]:
    """The names Claude Code gives the arm's kit tools (``mcp__kit__<tool>``)."""
    return [mcp_server.tool_name(mcp_server.KIT_SERVER, tool) for tool in spec.arm.tools]


def allowed_tools(spec: TrialSpec) -> list[str]:
    """``--allowedTools``: every tool the kit's MCP servers offer (``-p`` cannot ask for permission; without it a
    call gets "Claude requested permissions to use …, but you haven't granted it yet", measured on 2.1.328)."""
    bust = [mcp_server.tool_name(mcp_server.CACHE_BUST_SERVER, spec.cache_bust_tool)] if spec.cache_bust_tool else []
    return bust + _kit_tool_names(spec)


def options(spec: TrialSpec, home: Path) -> tuple[list[str], dict[str, str]]:
    """The options shared by every turn, and the environment the kit sets."""
    workdir = spec.workdir.resolve()
    args = ["-p", "--output-format", "stream-json", "--verbose", "--model", spec.model]
    args += ["--max-turns", str(spec.max_cycles), "--settings", json.dumps(settings(workdir)), "--strict-mcp-config"]
    servers = {
        name: {"type": "stdio", "command": sys.executable, "args": argv}
        for name, argv in mcp_server.servers(spec).items()
    }
    if allowed_tools(spec):
        args += ["--allowedTools", ",".join(allowed_tools(spec))]
    if servers:
        args += ["--mcp-config", json.dumps({"mcpServers": servers})]
    if spec.arm.instruction and spec.arm.placement == "system":
        args += ["--system-prompt", spec.arm.instruction]
    if spec.system_addition():
        args += ["--append-system-prompt", spec.system_addition()]
    effort = cli.effort(spec)
    if effort:
        args += ["--effort", effort]
    args += list(spec.arm.flags)
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": spec.base_url.rstrip("/"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        **cache_env(str(spec.options.get("claude_cache_ttl") or "5m")),
    }
    if spec.options.get("claude_tool_search") is False:
        env["ENABLE_TOOL_SEARCH"] = "false"
    if login.mode(spec.options) == login.API_KEY:  # a key outranks the login: on a login there is none
        env["ANTHROPIC_API_KEY"] = spec.api_key
    return args, env


def applied(spec: TrialSpec, signed_in: login.Login | None = None) -> dict[str, str]:
    """What the trial really did with the arm, the isolation parts and the login (goes to meta's ``versions``)."""
    placement = {
        "system": "--system-prompt (replaces Claude Code's system prompt)",
        "append_system": "--append-system-prompt",
        "developer_instructions": "--append-system-prompt (Claude Code has no developer instructions)",
        "user_prefix": "first prompt prefix",
        "agents_file": "CLAUDE.md in the work dir",
    }
    out = {
        "placement": placement[spec.arm.placement] if spec.arm.instruction else "none (no instruction)",
        "claude_cache_ttl": str(spec.options.get("claude_cache_ttl") or "5m"),
        "auth": signed_in.describe() if signed_in else "api_key (ANTHROPIC_API_KEY)",
    }
    done = []
    if "nonce" in spec.isolation:
        done.append("nonce")
        out["isolation.nonce"] = "last line of --append-system-prompt"
    if "prompt_cache_key" in spec.isolation:
        out["isolation.prompt_cache_key"] = "not applied: the Messages API has no prompt_cache_key"
    deferred = spec.options.get("claude_tool_search") is not False
    if spec.cache_bust_tool:
        bust = mcp_server.tool_name(mcp_server.CACHE_BUST_SERVER, spec.cache_bust_tool)
        done.append("cache_bust_tool(deferred)" if deferred else "cache_bust_tool")
        out["isolation.cache_bust_tool"] = (
            f"{bust} deferred behind ToolSearch: named in the environment message after the system prompt, "
            "not in the request's tools, so not at the top of the prefix (the nonce isolates)"
            if deferred
            else f"{bust} in the request's tools (ToolSearch off), after Claude Code's built-in tools"
        )
    if spec.arm.tools:
        out["tools"] = ", ".join(_kit_tool_names(spec)) + (
            " (MCP; deferred behind ToolSearch)" if deferred else " (MCP; ToolSearch off, so in the request's tools)"
        )
    out["isolation_applied"] = ",".join(done) or "none"
    return out


def run_trial(backend: str, spec: TrialSpec) -> TrialOutcome:
    """Run every prompt of the trial through ``claude -p`` (resuming the session unless the arm is fresh)."""
    binary = cli.find_binary(spec, "claude_bin", "claude")
    if binary is None:
        return TrialOutcome(
            status="failed", reason="claude binary not found (backend_options.claude_bin, .tools, PATH)"
        )
    outcome = TrialOutcome(status="ok", versions={"claude": cli.version(binary), "claude_bin": binary})
    signed_in = login.read(NAME) if login.mode(spec.options) == login.LOGIN else None
    home = cli.trial_home(spec, cli.home_name(spec, NAME))
    runs: list[cli.Completed] = []
    session_ids: list[str] = []

    def argv(turn: int) -> list[str]:
        resume = ["--resume", session_ids[-1]] if session_ids and spec.arm.session == "resume" else []
        return [binary, *shared, *resume, "--", sessions.turn_prompt(spec, turn, outcome.answers)]

    def events(found: list[dict]) -> tuple[str, str]:
        session = next((e.get("session_id") for e in found if e.get("session_id")), None)
        if session and session not in session_ids:
            session_ids.append(session)
        answer = next((e.get("result") or "" for e in reversed(found) if e.get("type") == "result"), "")
        return _turn_failure(found), answer

    try:
        if signed_in:
            login.install(signed_in, home)
        shared, kit_env = options(spec, home)
        env = cli.child_env(spec, kit_env)
        turns = cli.Turns("claude", argv, events, env, kit_env, spec.out_dir / STDOUT, spec.out_dir / STDERR)
        cli.run_turns(spec, outcome, turns, runs)
    finally:
        login.remove(signed_in, home)
        outcome.transcripts = _copy(home, session_ids, spec.out_dir)
        outcome.cycles = _cycles(spec.out_dir, outcome.transcripts)
        outcome.command = runs[0].command if runs else []
        cli.write_runs(spec.out_dir, runs)
        cli.remove_home(spec, home)
    outcome.versions.update(applied(spec, signed_in))
    if spec.cache_bust_tool:
        outcome.versions.update(mcp_server.calls_record(_dummy_answers(spec.out_dir, outcome.transcripts, spec)))
    return outcome


def _turn_failure(events: list[dict]) -> str:
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    if result is None:
        return "no result event in claude's output"
    if result.get("is_error") or result.get("subtype") != "success":
        detail = result.get("result") or result.get("errors") or ""
        return f"result {result.get('subtype')}: {detail}"[:500]
    return ""


def _copy(home: Path, sessions: list[str], out_dir: Path) -> list[str]:
    """Session files (this trial's sessions first, in order; subagent files keep their subfolder), then stdout."""
    found = []
    for project in sorted((home / ".claude" / "projects").glob("*")):
        found += [(p, p.relative_to(project).as_posix()) for p in sorted(project.rglob("*.jsonl"))]
    rank = {f"{s}.jsonl": i for i, s in enumerate(sessions)}
    found.sort(key=lambda pair: rank.get(pair[1], len(rank)))
    names = cli.copy_transcripts(found, out_dir)
    return names + ([STDOUT] if (out_dir / STDOUT).exists() else [])


def _dummy_answers(out_dir: Path, names: list[str], spec: TrialSpec) -> list[str]:
    """What each call of the trial's dummy tool answered the model: the ``tool_result`` of each ``tool_use`` of
    ``mcp__cachebust__<tool>`` in the session files (a permission refusal would be the answer)."""
    tool = mcp_server.tool_name(mcp_server.CACHE_BUST_SERVER, str(spec.cache_bust_tool))
    calls: set[str] = set()
    answers: dict[str, str] = {}  # by call id: lines repeat across a session's files
    for name in names:
        for line in cli.read_jsonl(out_dir / name) if name != STDOUT else []:
            message = line.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and block.get("name") == tool:
                    calls.add(str(block.get("id")))
                elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in calls:
                    answers[str(block.get("tool_use_id"))] = mcp_server.result_text(block.get("content"))
    return list(answers.values())


def _cycles(out_dir: Path, names: list[str]) -> int:
    """Model responses in the main session files: distinct ``message.id`` of real assistant lines."""
    ids = set()
    for name in names:
        if name == STDOUT or "/" in name:
            continue
        for line in cli.read_jsonl(out_dir / name):
            message = line.get("message") if line.get("type") == "assistant" else None
            if (
                isinstance(message, dict)
                and message.get("model") != "<synthetic>"
                and not line.get("isApiErrorMessage")
            ):
                ids.add(message.get("id"))
    return len(ids)
