"""OpenAI wire formats: Responses and Chat Completions requests in, policy replies out.

Requests become a ``Conversation`` (system/developer text and ``instructions`` fold into its system
text; an assistant turn's message, reasoning and calls become one assistant message). Replies become
the API's JSON object or its SSE events. Codex reads output items only from
``response.output_item.done`` and needs ``response.completed`` with ``response.id`` and
``usage.total_tokens``; the full event sequence is still sent so the SDKs' stream helpers work.
Usage follows OpenAI's convention: cached and cache-write tokens are parts of ``input_tokens``.
Tool-call continuations are checked as the APIs check them: every call output answers an earlier call,
and every call is answered before the conversation goes on (a 400 naming the call id otherwise).
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson

from kit.jsontypes import JsonObject
from kit.provider.cache import CacheResult
from kit.provider.policy import Conversation, Message, Reply, ToolCall, ToolSpec
from kit.provider.prompt import ParsedRequest, RequestError, expect

_SYSTEM_ROLES = ("system", "developer")
_ASSISTANT_ITEMS = ("function_call", "custom_tool_call", "reasoning")
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")
_MAX_DELTAS = 16  # text is streamed in at most this many deltas: realistic framing, no per-token loop


_IDS: ContextVar[random.Random | None] = ContextVar("kit_provider_ids", default=None)


def new_id(prefix: str) -> str:
    """``prefix_`` + 24 hex digits, from the current ``id_stream`` if one is open, else random."""
    rng = _IDS.get()
    bits = rng.getrandbits(96) if rng is not None else secrets.randbits(96)
    return f"{prefix}_{bits:024x}"


@contextmanager
def id_stream(rng: random.Random) -> Iterator[None]:
    """Draw every ``new_id`` inside the block from ``rng``: the server opens one per response, seeded by the
    request, so a batch with a fixed seed and salt gets the same ids (and the same prompt tokens, as
    clients send the ids back) when it runs again."""
    token = _IDS.set(rng)
    try:
        yield
    finally:
        _IDS.reset(token)


def chunks(text: str) -> list[str]:
    """``text`` cut into at most ``_MAX_DELTAS`` pieces (at least one, possibly empty)."""
    size = max(64, -(-len(text) // _MAX_DELTAS))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def error_body(status: int, message: str, param: str | None = None) -> JsonObject:
    """OpenAI's error shape."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = {
        404: "not_found",
        405: "method_not_allowed",
        408: "request_timeout",
        413: "request_too_large",
        415: "unsupported_media_type",
    }.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _text_of(content: Any) -> str:
    """The text of a content string or a list of parts (input_text, output_text, text, refusal)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
    return "\n".join(t for t in texts if isinstance(t, str) and t)


def _arguments(raw: Any, field: str) -> dict:
    """Function-call arguments (a JSON string on the wire) as a dict; unparsable text is kept raw."""
    if isinstance(raw, dict):
        return raw
    expect(raw, str, field, required=False)
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


def _tool_spec(tool: Any, field: str) -> ToolSpec:
    expect(tool, dict, field)
    kind = expect(tool.get("type"), str, f"{field}.type")
    if isinstance(tool.get(kind), dict):  # Chat Completions nests the definition: {"type": "function", "function": …}
        tool = tool[kind]
    name = tool.get("name")
    if kind in ("function", "custom"):
        expect(name, str, f"{field}.name")
    return ToolSpec(
        name=name if isinstance(name, str) else kind,
        description=tool.get("description") if isinstance(tool.get("description"), str) else "",
        parameters=tool.get("parameters") if isinstance(tool.get("parameters"), dict) else {},
    )


def offered_tools(body: dict) -> list:
    """Every tool definition the request offers: ``tools``, then each ``additional_tools`` input item's.

    Codex 0.169.0 sends no ``tools`` for models its catalog marks ``tool_mode: code_mode_only`` (the GPT-5.6
    family): it declares them in an input item ``{"type": "additional_tools", "role": "developer", "tools":
    [...]}`` ahead of the instructions, as namespaces (``functions`` holding ``exec``, ``wait``…;
    ``collaboration`` holding the multi-agent tools), measured against a capturing server (docs/design.md, "The
    embedded provider").
    """
    tools = list(expect(body.get("tools"), list, "tools", required=False) or [])
    items = body.get("input")
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == ADDITIONAL_TOOLS:
            tools += expect(item.get("tools"), list, f"input[{i}].tools")
    return tools


ADDITIONAL_TOOLS = "additional_tools"
DEFAULT_NAMESPACE = "functions"  # the model's default namespace (``to=functions.exec``): its tools keep bare names


def _tools(tools: list) -> tuple[ToolSpec, ...]:
    """Every tool, then each function of a ``namespace`` tool as ``<namespace>__<function>``.

    Codex offers MCP tools this way (``{"type": "namespace", "name": "mcp__kit", "tools": [...]}``), and
    a policy looks them up by the name Claude Code gives the same tool (``mcp__kit__explore``). The tools of
    the default namespace ``functions`` keep their bare names (``exec``), as the model calls them.
    """
    specs = [_tool_spec(t, f"tools[{i}]") for i, t in enumerate(tools)]
    for namespace, _, inner in _namespaces(tools):
        spec = _tool_spec(inner, f"tools[namespace {namespace}].tools")
        specs.append(ToolSpec(_flat(namespace, spec.name), spec.description, spec.parameters))
    return tuple(specs)


def _is_namespace(tool: Any) -> bool:
    return isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("name"), str)


def _flat(namespace: str, name: str) -> str:
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}__{name}"


def _namespaces(tools: list) -> list[tuple[str, str, dict]]:
    """(namespace, function name, definition) of every function inside a ``namespace`` tool."""
    found = []
    for tool in tools:
        if _is_namespace(tool):
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found.append((tool["name"], inner["name"], inner))
    return found


RETENTIONS = ("in_memory", "24h")  # prompt_cache_retention's values (openai-python 3.57)


def _common(body: dict) -> tuple[str, bool, str | None]:
    model = expect(body.get("model"), str, "model")
    stream = bool(expect(body.get("stream"), bool, "stream", required=False))
    key = expect(body.get("prompt_cache_key"), str, "prompt_cache_key", required=False)
    retention = expect(body.get("prompt_cache_retention"), str, "prompt_cache_retention", required=False)
    if retention not in (None, *RETENTIONS):  # the log records it; the cache profile models one retention
        raise RequestError("prompt_cache_retention", f"expected one of {', '.join(RETENTIONS)}, got {retention!r}")
    return model, stream, key


# ---------------------------------------------------------------- Responses: request


def parse_responses(body: dict, *, seed: int = 0, trial_id: str | None = None) -> ParsedRequest:
    """Validate a ``/v1/responses`` body and build the policy's view of it."""
    model, stream, key = _common(body)
    instructions = expect(body.get("instructions"), str, "instructions", required=False)
    items = expect(body.get("input"), (str, list), "input", required=False) or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    # with a previous response, earlier calls live on the server, not in this input
    conversation = _ResponsesInput(stateful=body.get("previous_response_id") is not None)
    if instructions:
        conversation.system.append(instructions)
    for i, item in enumerate(items):
        conversation.add(expect(item, dict, f"input[{i}]"), f"input[{i}]")
    messages = conversation.finish()
    offered = offered_tools(body)
    tools = _tools(offered)
    inner = _namespaces(offered)
    custom = frozenset(
        [str(t.get("name")) for t in offered if isinstance(t, dict) and t.get("type") == "custom"]
        + [_flat(ns, fn) for ns, fn, t in inner if t.get("type") == "custom"]
    )
    namespaced = {_flat(ns, fn): (ns, fn) for ns, fn, _ in inner if ns != DEFAULT_NAMESPACE}
    system = "\n\n".join(s for s in conversation.system if s)
    return ParsedRequest(
        Conversation("responses", model, system, tools, messages, trial_id, seed),
        body,
        stream,
        key,
        custom_tools=custom,
        namespaced=namespaced,
    )


@dataclass
class _ResponsesInput:
    """The Responses ``input`` items read in order into messages: an assistant turn (its text, reasoning and
    calls) is one message, closed by the next item of another kind; every call must get its output."""

    stateful: bool
    system: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    turn_text: list[str] = field(default_factory=list)
    turn_calls: list[ToolCall] = field(default_factory=list)
    in_turn: bool = False
    called: list[str] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)

    def add(self, item: dict, where: str) -> None:
        kind = item.get("type") or "message"
        if kind == "message":
            self._message(item, where)
        elif kind in _ASSISTANT_ITEMS:
            self.in_turn = True
            if kind != "reasoning":
                self._call(item, kind, where)
        elif kind in _OUTPUT_ITEMS:
            self._output(item, where)
        # Other items (web_search_call, item_reference…) are part of the prompt only.

    def finish(self) -> tuple[Message, ...]:
        self._close_turn()
        unanswered = [c for c in self.called if c not in self.answered]
        if unanswered:
            raise RequestError("input", f"no tool output found for function call {unanswered[0]!r}")
        return tuple(self.messages)

    def _message(self, item: dict, where: str) -> None:
        role = expect(item.get("role"), str, f"{where}.role")
        content = expect(item.get("content"), (str, list), f"{where}.content")
        if role == "assistant":
            self.in_turn = True
            self.turn_text.append(_text_of(content))
            return
        self._close_turn()
        if role in _SYSTEM_ROLES:
            self.system.append(_text_of(content))
        elif role == "user":
            self.messages.append(Message("user", _text_of(content)))
        else:
            raise RequestError(f"{where}.role", f"unknown role {role!r} (user, assistant, system, developer)")

    def _call(self, item: dict, kind: str, where: str) -> None:
        call_id = expect(item.get("call_id"), str, f"{where}.call_id")
        name = expect(item.get("name"), str, f"{where}.name")
        namespace = expect(item.get("namespace"), str, f"{where}.namespace", required=False)
        name = f"{namespace}__{name}" if namespace else name
        if kind == "function_call":
            arguments = _arguments(item.get("arguments"), f"{where}.arguments")
        else:
            arguments = {"input": item.get("input", "")}
        self.turn_calls.append(ToolCall(name, arguments, call_id))
        self.called.append(call_id)

    def _output(self, item: dict, where: str) -> None:
        self._close_turn()
        call_id = expect(item.get("call_id"), str, f"{where}.call_id")
        if call_id not in self.called and not self.stateful:
            raise RequestError(f"{where}.call_id", f"no tool call found for function call output {call_id!r}")
        self.answered.add(call_id)
        output = expect(item.get("output"), (str, list), f"{where}.output")
        self.messages.append(Message("tool", _text_of(output), tool_call_id=call_id))

    def _close_turn(self) -> None:
        if self.in_turn:
            self.messages.append(
                Message("assistant", "\n".join(t for t in self.turn_text if t), tuple(self.turn_calls))
            )
            self.turn_text.clear()
            self.turn_calls.clear()
            self.in_turn = False


# ---------------------------------------------------------------- Responses: reply


def responses_usage(result: CacheResult, output_tokens: int, reasoning_tokens: int) -> JsonObject:
    return {
        "input_tokens": result.input_tokens,
        "input_tokens_details": {"cached_tokens": result.cache_read, "cache_write_tokens": result.cache_write},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": result.input_tokens + output_tokens,
    }


def responses_items(
    reply: Reply, custom_tools: frozenset[str] = frozenset(), namespaced: Mapping[str, tuple[str, str]] | None = None
) -> list[dict]:
    """The output items of a reply: reasoning (if any), the message (if any text), then the calls.

    A call of a namespaced function names the function and its ``namespace`` (measured with Codex
    0.169: the flat ``mcp__kit__explore`` is an "unsupported call").
    """
    items: list[dict] = []
    if reply.reasoning_tokens:
        summary = f"Simulated reasoning ({reply.reasoning_tokens} tokens)."
        items.append(
            {
                "type": "reasoning",
                "id": new_id("rs"),
                "summary": [{"type": "summary_text", "text": summary}],
                "encrypted_content": f"kit-sim-reasoning:{reply.reasoning_tokens}",
            }
        )
    if reply.text or not reply.tool_calls:
        part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
        items.append(
            {"type": "message", "id": new_id("msg"), "status": "completed", "role": "assistant", "content": [part]}
        )
    for call in reply.tool_calls:
        call_id = call.call_id or new_id("call")
        if call.name in custom_tools:
            raw = call.arguments.get("input") if set(call.arguments) == {"input"} else None
            text = raw if isinstance(raw, str) else orjson.dumps(call.arguments).decode()
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": new_id("ctc"),
                    "status": "completed",
                    "call_id": call_id,
                    "name": call.name,
                    "input": text,
                }
            )
        else:
            namespace, name = (namespaced or {}).get(call.name, (None, call.name))
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc"),
                    "status": "completed",
                    "call_id": call_id,
                    "name": name,
                    **({"namespace": namespace} if namespace else {}),
                    "arguments": orjson.dumps(call.arguments).decode(),
                }
            )
    return items


def response_object(parsed: ParsedRequest, response_id: str, output: list[dict], usage: dict | None) -> JsonObject:
    """The ``Response`` object; ``usage`` None gives the in-progress snapshot sent at stream start."""
    body = parsed.body
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if usage is not None else "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": parsed.model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "metadata": body.get("metadata") or {},
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": parsed.prompt_cache_key,
        "reasoning": body.get("reasoning"),
        "store": body.get("store", False),
        "text": body.get("text") or {"format": {"type": "text"}},
        "usage": usage,
    }


def _item_events(index: int, item: dict) -> Iterator[dict]:
    """added → the item's own delta/done events → output_item.done."""
    item_id = item["id"]
    base = {"item_id": item_id, "output_index": index}
    kind = item["type"]
    if kind == "message":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        }
        part = item["content"][0]
        text = part["text"]
        yield {"type": "response.content_part.added", **base, "content_index": 0, "part": {**part, "text": ""}}
        for piece in chunks(text):
            yield {"type": "response.output_text.delta", **base, "content_index": 0, "delta": piece, "logprobs": []}
        yield {"type": "response.output_text.done", **base, "content_index": 0, "text": text, "logprobs": []}
        yield {"type": "response.content_part.done", **base, "content_index": 0, "part": part}
    elif kind == "reasoning":
        yield {"type": "response.output_item.added", "output_index": index, "item": {**item, "summary": []}}
        part = item["summary"][0]
        yield {
            "type": "response.reasoning_summary_part.added",
            **base,
            "summary_index": 0,
            "part": {**part, "text": ""},
        }
        yield {"type": "response.reasoning_summary_text.delta", **base, "summary_index": 0, "delta": part["text"]}
        yield {"type": "response.reasoning_summary_text.done", **base, "summary_index": 0, "text": part["text"]}
        yield {"type": "response.reasoning_summary_part.done", **base, "summary_index": 0, "part": part}
    else:
        field, event = (
            ("arguments", "function_call_arguments") if kind == "function_call" else ("input", "custom_tool_call_input")
        )
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", field: ""},
        }
        for piece in chunks(item[field]):
            yield {"type": f"response.{event}.delta", **base, "delta": piece}
        done = {"type": f"response.{event}.done", **base, field: item[field]}
        if kind == "function_call":
            done["name"] = item["name"]
        yield done
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def responses_events(parsed: ParsedRequest, final: dict) -> list[bytes]:
    """The SSE frames of a streamed response whose final object is ``final``."""
    start = response_object(parsed, final["id"], [], None)
    events: list[dict] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(final["output"]):
        events.extend(_item_events(index, item))
    events.append({"type": "response.completed", "response": final})
    return [
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps({**e, "sequence_number": n}) + b"\n\n"
        for n, e in enumerate(events)
    ]


# ---------------------------------------------------------------- Chat Completions: request


def parse_chat(body: dict, *, seed: int = 0, trial_id: str | None = None) -> ParsedRequest:
    """Validate a ``/v1/chat/completions`` body and build the policy's view of it."""
    model, stream, key = _common(body)
    raw_messages = expect(body.get("messages"), list, "messages")
    if not raw_messages:
        raise RequestError("messages", "must contain at least one message")
    options = expect(body.get("stream_options"), dict, "stream_options", required=False) or {}
    system: list[str] = []
    messages: list[Message] = []
    pending: list[str] = []  # calls of the last assistant message not yet answered by a tool message
    for i, message in enumerate(raw_messages):
        field = f"messages[{i}]"
        expect(message, dict, field)
        role = expect(message.get("role"), str, f"{field}.role")
        if pending and role not in ("tool", "function"):
            raise RequestError(f"messages[{i - 1}]", _unanswered(pending))
        content = expect(message.get("content"), (str, list), f"{field}.content", required=role != "assistant")
        text = _text_of(content)
        if role in _SYSTEM_ROLES:
            system.append(text)
        elif role == "user":
            messages.append(Message("user", text))
        elif role == "assistant":
            calls = expect(message.get("tool_calls"), list, f"{field}.tool_calls", required=False) or []
            parsed_calls = tuple(_chat_call(c, f"{field}.tool_calls[{j}]") for j, c in enumerate(calls))
            messages.append(Message("assistant", text, parsed_calls))
            pending = [c.call_id for c in parsed_calls]
        elif role in ("tool", "function"):
            call_id = expect(message.get("tool_call_id") or message.get("name"), str, f"{field}.tool_call_id")
            if role == "tool" and call_id not in pending:  # legacy "function" messages answer function_call
                raise RequestError(
                    f"{field}.tool_call_id",
                    f"{call_id!r} does not answer a tool call of the preceding assistant message",
                )
            if call_id in pending:
                pending.remove(call_id)
            messages.append(Message("tool", text, tool_call_id=call_id))
        else:
            raise RequestError(f"{field}.role", f"unknown role {role!r} (system, developer, user, assistant, tool)")
    if pending:
        raise RequestError(f"messages[{len(raw_messages) - 1}]", _unanswered(pending))
    conversation = Conversation(
        "chat",
        model,
        "\n\n".join(s for s in system if s),
        _tools(expect(body.get("tools"), list, "tools", required=False) or []),
        tuple(messages),
        trial_id,
        seed,
    )
    return ParsedRequest(conversation, body, stream, key, include_usage=bool(options.get("include_usage")))


def _unanswered(call_ids: list[str]) -> str:
    return (
        "an assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'; not answered: {', '.join(call_ids)}"
    )


def _chat_call(call: Any, field: str) -> ToolCall:
    expect(call, dict, field)
    function = expect(call.get("function") or call.get("custom"), dict, f"{field}.function")
    name = expect(function.get("name"), str, f"{field}.function.name")
    arguments = (
        _arguments(function["arguments"], f"{field}.function.arguments")
        if "arguments" in function
        else {"input": function.get("input", "")}
    )
    return ToolCall(name, arguments, call.get("id") or "")


# ---------------------------------------------------------------- Chat Completions: reply


def chat_usage(result: CacheResult, output_tokens: int, reasoning_tokens: int, bills_writes: bool) -> JsonObject:
    """Chat usage; ``cache_write_tokens`` appears only where the profile bills cache writes."""
    details = {"cached_tokens": result.cache_read}
    if bills_writes:
        details["cache_write_tokens"] = result.cache_write
    return {
        "prompt_tokens": result.input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": result.input_tokens + output_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def chat_calls(reply: Reply) -> list[dict]:
    return [
        {
            "id": c.call_id or new_id("call"),
            "type": "function",
            "function": {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()},
        }
        for c in reply.tool_calls
    ]


def chat_object(parsed: ParsedRequest, response_id: str, reply: Reply, calls: list[dict], usage: dict) -> JsonObject:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": parsed.model,
        "system_fingerprint": None,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": usage,
    }


def chat_events(parsed: ParsedRequest, response_id: str, reply: Reply, calls: list[dict], usage: dict) -> list[bytes]:
    """Data-only SSE chunks; with ``include_usage`` a final ``choices: []`` chunk carries the usage."""
    head = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": parsed.model,
        "system_fingerprint": None,
    }
    if parsed.include_usage:
        head["usage"] = None

    def chunk(delta: dict, finish: str | None = None) -> JsonObject:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    frames = [chunk({"role": "assistant", "content": "" if reply.text or not calls else None, "refusal": None})]
    if reply.text:
        frames.extend(chunk({"content": piece}) for piece in chunks(reply.text))
    for index, call in enumerate(calls):
        frames.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        frames.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in chunks(call["function"]["arguments"])
        )
    frames.append(chunk({}, "tool_calls" if calls else "stop"))
    if parsed.include_usage:
        frames.append({**head, "choices": [], "usage": usage})
    return [b"data: " + orjson.dumps(f) + b"\n\n" for f in frames] + [b"data: [DONE]\n\n"]
