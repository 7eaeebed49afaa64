"""Anthropic Messages wire format: requests in, policy replies out (JSON Message or SSE events).

Claude Code sends a ``role: "system"`` message inside ``messages`` (its environment block); it is
accepted and folded into the conversation's system text, like the top-level ``system``. Streams
carry ``event:`` lines (without them Claude Code falls back to a non-streaming request) and every
``content_block_stop`` (without it Claude Code cannot parse a tool call). Usage follows Anthropic's
convention: ``input_tokens`` excludes cache reads and writes, which are reported on top of it.
Tool use is checked as the API checks it: a ``tool_result`` answers a ``tool_use`` of the previous
message, and every ``tool_use`` is answered in the next one (a 400 naming the id otherwise).
"""

from __future__ import annotations

from typing import Any

import orjson

from kit.jsontypes import JsonObject
from kit.provider.cache import CacheResult
from kit.provider.policy import Conversation, Message, Reply, ToolCall, ToolSpec
from kit.provider.prompt import ParsedRequest, RequestError, expect
from kit.provider.wire_openai import chunks, new_id

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
}


def error_body(status: int, message: str) -> JsonObject:
    """Anthropic's error shape."""
    return {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))


def _blocks(content: Any, field: str) -> list[dict]:
    """Content as blocks, each checked to be an object with a string ``type``."""
    expect(content, (str, list), field)
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    for j, block in enumerate(content):
        expect(block, dict, f"{field}[{j}]")
        expect(block.get("type"), str, f"{field}[{j}].type")
    return content


def _system(body: dict) -> list[str]:
    system = expect(body.get("system"), (str, list), "system", required=False)
    if system is None:
        return []
    return [_text_of(_blocks(system, "system"))]


def _tools(body: dict) -> tuple[ToolSpec, ...]:
    tools = expect(body.get("tools"), list, "tools", required=False) or []
    specs = []
    for i, tool in enumerate(tools):
        expect(tool, dict, f"tools[{i}]")
        name = expect(tool.get("name"), str, f"tools[{i}].name")
        schema = tool.get("input_schema")
        specs.append(ToolSpec(name, tool.get("description") or "", schema if isinstance(schema, dict) else {}))
    return tuple(specs)


def parse_messages(
    body: dict, *, seed: int = 0, trial_id: str | None = None, require_max_tokens: bool = True
) -> ParsedRequest:
    """Validate a ``/v1/messages`` body (``count_tokens`` skips ``max_tokens``) into the policy's view."""
    model = expect(body.get("model"), str, "model")
    if require_max_tokens:
        expect(body.get("max_tokens"), int, "max_tokens")
    stream = bool(expect(body.get("stream"), bool, "stream", required=False))
    raw_messages = expect(body.get("messages"), list, "messages")
    system = _system(body)
    messages: list[Message] = []
    open_calls: tuple[list[str], int] | None = None  # (ids of the last assistant message's tool_use, its index)
    for i, message in enumerate(raw_messages):
        field = f"messages[{i}]"
        expect(message, dict, field)
        role = expect(message.get("role"), str, f"{field}.role")
        blocks = _blocks(message.get("content"), f"{field}.content")
        if role == "system":
            system.append(_text_of(blocks))
            continue
        calls_before, open_calls = open_calls, None
        if role == "assistant":
            calls = tuple(_call(b, f"{field}.content[{j}]") for j, b in enumerate(blocks) if b["type"] == "tool_use")
            messages.append(Message("assistant", _text_of(blocks), calls))
            open_calls = ([c.call_id for c in calls], i) if calls else None
        elif role == "user":
            expected = calls_before[0] if calls_before else []
            for j, block in enumerate(blocks):
                if block["type"] == "tool_result":
                    call_id = expect(block.get("tool_use_id"), str, f"{field}.content[{j}].tool_use_id")
                    if call_id not in expected:
                        raise RequestError(
                            f"{field}.content[{j}].tool_use_id",
                            f"unexpected tool_use_id {call_id!r}: each tool_result block must have a "
                            "corresponding tool_use block in the previous message",
                        )
                    text = _text_of(block.get("content"))
                    messages.append(Message("tool", text, tool_call_id=call_id, is_error=bool(block.get("is_error"))))
            text = _text_of([b for b in blocks if b["type"] == "text"])
            if text or not any(b["type"] == "tool_result" for b in blocks):
                messages.append(Message("user", text))
        else:
            raise RequestError(f"{field}.role", f"unknown role {role!r} (user, assistant, system)")
        if calls_before:
            answered = {b.get("tool_use_id") for b in blocks if b["type"] == "tool_result"} if role == "user" else set()
            missing = [c for c in calls_before[0] if c not in answered]
            if missing:
                raise RequestError(
                    f"messages[{calls_before[1]}]",
                    f"tool_use ids were found without tool_result blocks immediately after: {', '.join(missing)}",
                )
    conversation = Conversation(
        "messages", model, "\n\n".join(s for s in system if s), _tools(body), tuple(messages), trial_id, seed
    )
    return ParsedRequest(conversation, body, stream)


def _call(block: dict, field: str) -> ToolCall:
    call_id = expect(block.get("id"), str, f"{field}.id")
    name = expect(block.get("name"), str, f"{field}.name")
    arguments = expect(block.get("input"), dict, f"{field}.input", required=False) or {}
    return ToolCall(name, arguments, call_id)


def messages_usage(result: CacheResult, output_tokens: int, reasoning_tokens: int) -> JsonObject:
    """Anthropic usage: the uncached rest, plus writes (5m/1h split) and reads on top of it."""
    write, write_1h = result.cache_write, result.cache_write_1h
    return {
        "input_tokens": result.input_tokens - result.cache_read - write,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": result.cache_read,
        "cache_creation": {"ephemeral_5m_input_tokens": write - write_1h, "ephemeral_1h_input_tokens": write_1h},
        "output_tokens": output_tokens,
        "output_tokens_details": {"thinking_tokens": reasoning_tokens},
        "service_tier": "standard",
    }


def content_blocks(reply: Reply) -> list[dict]:
    """A text block (when there is text, or nothing else), then one tool_use block per call."""
    blocks: list[dict] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    blocks.extend(
        {"type": "tool_use", "id": c.call_id or new_id("toolu"), "name": c.name, "input": c.arguments}
        for c in reply.tool_calls
    )
    return blocks


def message_object(parsed: ParsedRequest, message_id: str, blocks: list[dict], usage: dict) -> JsonObject:
    tool_use = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": parsed.model,
        "content": blocks,
        "stop_reason": "tool_use" if tool_use else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def message_events(message: dict) -> list[bytes]:
    """message_start (usage with output_tokens 1), each block's start/delta/stop, message_delta, message_stop."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            events.extend(
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                for piece in chunks(block["text"])
            )
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            events.extend(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                }
                for piece in chunks(orjson.dumps(block["input"]).decode())
            )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": usage,
        }
    )
    events.append({"type": "message_stop"})
    return [b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events]
