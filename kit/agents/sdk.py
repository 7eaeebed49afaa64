"""The kit's own small tool-using agent loop on the official ``openai`` and ``anthropic`` SDKs.

One loop, two thin API adapters. The agent offers ``list_files``/``read_file``/``grep`` over the
trial's fixture (read-only, confined), the extra tools the arm lists in ``Arm.tools`` (``explore``),
plus the trial's ``cache_bust_<id>`` tool first in the tool list when that isolation is on (it answers
``{"success": true}`` if a model calls it anyway). Every API response is recorded as received to
``sdk_responses.jsonl`` before the loop acts on it, with its turn and session.

Sessions (``Arm.session``, docs/method.md#sources): ``resume`` carries one conversation across every turn (native
resume: the whole transcript, tool output included, is re-sent). ``fresh`` starts each later turn as a
new conversation whose first user message holds a compact, bounded summary of the earlier turns'
questions and final answers (``session_summary``), then the new question. Isolation is per trial, not
per session: the cache-bust tool, the nonce and ``prompt_cache_key`` stay the same across sessions.

``timeout_s`` bounds the whole trial, as for the CLI backends: each request may take only what is left
of it. A request that times out, loses its connection or gets an error status ends the trial as
``failed`` with the reason, keeping the responses recorded so far (no retries: a failure is seen).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, cast

import anthropic
import openai
from anthropic.types import MessageParam, TextBlockParam, ToolParam
from openai.types.responses import FunctionToolParam, ResponseInputParam

from kit.agents import mcp_server, sessions
from kit.agents.base import JsonlWriter, TrialOutcome, TrialSpec
from kit.agents.filetools import EXTRA_SPECS, SPECS, FileTools, ToolError, ToolSpec
from kit.errors import InputError


def _system_text(spec: TrialSpec) -> str:
    parts = [spec.system_prompt]
    if spec.arm.instruction and spec.arm.placement in ("system", "append_system"):
        parts.append(spec.arm.instruction)
    return "\n\n".join(parts)


def _context_text(spec: TrialSpec) -> str | None:
    """Instructions that travel as conversation context (AGENTS.md / developer instructions)."""
    if spec.arm.instruction and spec.arm.placement == "agents_file":
        return f"# AGENTS.md instructions for {spec.workdir.name}\n\n{spec.arm.instruction}"
    if spec.arm.instruction and spec.arm.placement == "developer_instructions":
        return spec.arm.instruction
    return None


def _tool_specs(spec: TrialSpec) -> list[ToolSpec]:
    """The file tools every trial gets, then the extra tools the arm lists (``Arm.tools``)."""
    unknown = sorted(set(spec.arm.tools) - set(EXTRA_SPECS))
    if unknown:
        raise InputError(f"arm {spec.arm.name!r} lists tools {unknown}; the SDK agent offers {sorted(EXTRA_SPECS)}")
    return [*SPECS, *(EXTRA_SPECS[t] for t in spec.arm.tools)]


class _OpenAIResponses:
    api = "responses"

    def __init__(self, spec: TrialSpec, base_url: str) -> None:
        self.spec = spec
        self.client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=spec.api_key, max_retries=0)
        tools = [_function_tool(s) for s in _tool_specs(spec)]
        if spec.cache_bust_tool:
            tools.insert(0, _function_tool(_cache_bust_spec(spec.cache_bust_tool)))
        self.tools = tools
        self.start_session()

    def start_session(self) -> None:
        """An empty conversation, opened as every session of the trial opens (nonce, then context)."""
        self.items: list[dict[str, Any]] = []
        if self.spec.nonce_line:  # its own item at the system -> task boundary: the system prompt stays shared
            self.items.append({"role": "developer", "content": self.spec.nonce_line})
        context = _context_text(self.spec)
        if context:
            self.items.append({"role": "developer", "content": context})

    def add_user(self, text: str) -> None:
        self.items.append({"role": "user", "content": text})

    def call(self, timeout_s: float) -> Any:
        extra: dict[str, Any] = {}
        if self.spec.prompt_cache_key:
            extra["prompt_cache_key"] = self.spec.prompt_cache_key
        if self.spec.effort:
            extra["reasoning"] = {"effort": self.spec.effort}
        if self.spec.retention:  # docs/method.md#retention: how long the API may keep the prefix
            extra["prompt_cache_retention"] = self.spec.retention
        return self.client.responses.create(
            model=self.spec.model,
            instructions=_system_text(self.spec),
            # The conversation is kept as JSON (output items as the API returned them, replayed as input
            # items); the SDK's TypedDicts describe the same shapes.
            input=cast(ResponseInputParam, self.items),
            tools=self.tools,
            store=False,
            parallel_tool_calls=True,
            timeout=timeout_s,
            **extra,
        )

    def absorb(self, response: Any) -> tuple[list[tuple[str, str, dict]], str]:
        calls, text = [], []
        for item in response.output:
            data = item.model_dump(mode="json", exclude_none=True)
            if data.get("type") == "function_call":
                calls.append((data["call_id"], data["name"], _args(data.get("arguments"))))
            elif data.get("type") == "message":
                text += [c.get("text", "") for c in data.get("content", []) if c.get("type") == "output_text"]
            self.items.append(data)
        return calls, "".join(text)

    def add_results(self, results: list[tuple[str, str, bool]]) -> None:
        for call_id, output, _is_error in results:
            self.items.append({"type": "function_call_output", "call_id": call_id, "output": output})


class _AnthropicMessages:
    """Messages API with Claude Code's breakpoints: the system prompt and the moving last block."""

    api = "messages"

    def __init__(self, spec: TrialSpec, base_url: str) -> None:
        self.spec = spec
        self.client = anthropic.Anthropic(base_url=base_url, api_key=spec.api_key, max_retries=0)
        tools = [_anthropic_tool(s) for s in _tool_specs(spec)]
        if spec.cache_bust_tool:
            tools.insert(0, _anthropic_tool(_cache_bust_spec(spec.cache_bust_tool)))
        self.tools = tools
        self.start_session()

    def start_session(self) -> None:
        """An empty conversation; the context (AGENTS.md, developer instructions) opens its first user message."""
        self.messages: list[dict[str, Any]] = []
        self.pending_context = _context_text(self.spec)

    def add_user(self, text: str) -> None:
        blocks = []
        if self.pending_context:
            blocks.append({"type": "text", "text": self.pending_context})
            self.pending_context = None
        blocks.append({"type": "text", "text": text})
        self.messages.append({"role": "user", "content": blocks})

    def call(self, timeout_s: float) -> Any:
        system: list[TextBlockParam] = [
            {"type": "text", "text": _system_text(self.spec), "cache_control": {"type": "ephemeral"}}
        ]
        if self.spec.nonce_line:  # its own block at the system -> task boundary, after the shared system prompt
            system.append({"type": "text", "text": self.spec.nonce_line})
        messages = [{"role": m["role"], "content": [dict(b) for b in m["content"]]} for m in self.messages]
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return self.client.messages.create(
            model=self.spec.model,
            max_tokens=8192,
            system=system,
            # The conversation is kept as JSON (content blocks as the API returned them); the SDK's TypedDicts
            # describe the same shapes.
            messages=cast(list[MessageParam], messages),
            tools=self.tools,
            timeout=timeout_s,
        )

    def absorb(self, response: Any) -> tuple[list[tuple[str, str, dict]], str]:
        content = [b.model_dump(mode="json", exclude_none=True) for b in response.content]
        self.messages.append({"role": "assistant", "content": content})
        calls = [(b["id"], b["name"], b.get("input") or {}) for b in content if b.get("type") == "tool_use"]
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        return calls, text

    def add_results(self, results: list[tuple[str, str, bool]]) -> None:
        blocks = [
            {"type": "tool_result", "tool_use_id": cid, "content": out, **({"is_error": True} if err else {})}
            for cid, out, err in results
        ]
        self.messages.append({"role": "user", "content": blocks})


_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
_Adapter = _OpenAIResponses | _AnthropicMessages
ADAPTERS: dict[str, type[_Adapter]] = {"sdk-openai": _OpenAIResponses, "sdk-anthropic": _AnthropicMessages}


def _cache_bust_spec(name: str) -> ToolSpec:
    return {"name": name, "description": "Never call this tool.", "parameters": _EMPTY}


def _function_tool(s: ToolSpec) -> FunctionToolParam:
    """A Responses API function tool; keys in the order sent before (type, strict, then the spec's)."""
    return {
        "type": "function",
        "strict": False,
        "name": s["name"],
        "description": s["description"],
        "parameters": s["parameters"],
    }


def _anthropic_tool(s: ToolSpec) -> ToolParam:
    return {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}


def _args(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": raw}
    return value if isinstance(value, dict) else {"_value": value}


def run_trial(backend: str, spec: TrialSpec) -> TrialOutcome:
    """Run every turn of one trial; each turn loops until the model answers without tool calls.

    A ``resume`` arm keeps one conversation; a ``fresh`` arm opens a new one for every turn (see above).
    """
    files = FileTools(spec.workdir, spec.arm.tools)  # refuses an unknown extra tool before any request
    if spec.arm.session == "fresh" and len(spec.prompts) > 1:
        sessions.summary_chars(spec)
    outcome = TrialOutcome(status="ok", versions={"openai": openai.__version__, "anthropic": anthropic.__version__})
    record_path = spec.out_dir / "sdk_responses.jsonl"
    outcome.transcripts.append(record_path.name)
    adapter = ADAPTERS[backend](spec, spec.base_url)
    deadline = time.monotonic() + spec.timeout_s
    with JsonlWriter(record_path) as record, adapter.client:  # the client's connections close with the trial
        try:
            _loop(spec, adapter, files, record, outcome, deadline)
        except (openai.APIError, anthropic.APIError) as exc:
            left = deadline - time.monotonic()
            why = f"timeout_s {spec.timeout_s:g} reached" if left <= 0 else f"{type(exc).__name__}: {exc}"
            outcome.status, outcome.reason = "failed", f"turn {outcome.turns}: {why}"[:500]
    return outcome


def _loop(
    spec: TrialSpec, adapter: _Adapter, files: FileTools, record: JsonlWriter, outcome: TrialOutcome, deadline: float
) -> None:
    """The turns of one trial; fills ``outcome`` (status stays "ok" unless a limit is reached)."""
    answers = outcome.answers
    dummy: list[str] = []  # what each call of the cache-bust tool answered (meta ``versions``)
    session = 1
    for turn in range(len(spec.prompts)):
        if turn > 0 and spec.arm.session == "fresh":
            adapter.start_session()
            session += 1
        adapter.add_user(sessions.turn_prompt(spec, turn, answers))
        outcome.turns = turn + 1
        while True:
            if outcome.cycles >= spec.max_cycles:
                outcome.status, outcome.reason = (
                    "failed",
                    f"max_cycles {spec.max_cycles} reached in turn {turn + 1}",
                )
                return
            left = deadline - time.monotonic()
            if left <= 0:
                outcome.status, outcome.reason = "failed", f"turn {turn + 1}: timeout_s {spec.timeout_s:g} reached"
                return
            started, t0 = datetime.now(UTC).isoformat(), time.perf_counter()
            response = adapter.call(left)
            record.write(
                {
                    "kit_sdk": 1,
                    "api": adapter.api,
                    "turn": turn + 1,
                    "session": session,
                    "cycle": outcome.cycles,
                    "started_at": started,
                    "wall_s": round(time.perf_counter() - t0, 6),
                    "response": response.model_dump(mode="json"),
                }
            )
            outcome.cycles += 1
            calls, text = adapter.absorb(response)
            if not calls:
                outcome.answers.append(text)
                break
            results = [(cid, *_execute(files, spec, name, args)) for cid, name, args in calls]
            dummy += [r[1] for r, (_, name, _) in zip(results, calls, strict=True) if name == spec.cache_bust_tool]
            outcome.versions.update(mcp_server.calls_record(dummy))
            adapter.add_results(results)


def _execute(files: FileTools, spec: TrialSpec, name: str, args: dict) -> tuple[str, bool]:
    """(output, is_error) of one tool call; the cache-bust tool answers harmlessly (docs/method.md#isolation)."""
    if name == spec.cache_bust_tool:
        return mcp_server.CACHE_BUST_RESULT, False
    try:
        return files.call(name, args), False
    except ToolError as exc:
        return f"error: {exc}", True
