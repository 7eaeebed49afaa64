"""The embedded provider through the official anthropic SDK: Messages, streaming and not, with caching."""

from __future__ import annotations

import json

import anthropic
import pytest

from kit import tokens
from kit.provider import Conversation, Reply, ToolCall, serve
from kit.provider.cache import CacheEngine, Segment
from kit.provider.log import read

LONG = "You are a careful coding agent. Follow the repository conventions exactly. " * 150  # ~2k tokens
MODEL = "claude-opus-5-5"  # minimum cacheable prefix 1024 in the anthropic profile
READ_TOOL = {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}}
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


class ReadPolicy:
    """Calls ``Read`` on cycle 0 (after a short remark), answers with the file content on cycle 1."""

    name = "test-read"

    def reply(self, conversation: Conversation) -> Reply:
        if conversation.cycle == 0:
            return Reply(text="Reading it.", tool_calls=(ToolCall("Read", {"file_path": "a.txt"}),))
        results = conversation.results()
        return Reply(text=f"It says: {results[-1][1].text}" if results else "Nothing to read.")


@pytest.fixture
def provider():
    with serve(profile="anthropic", policy=ReadPolicy(), seed=5) as p:
        yield p


def client(p, key: str = "sk-ant-test") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.base_url, api_key=key, max_retries=0)


def create(c, stream: bool, **kw):
    if not stream:
        return c.messages.create(model=MODEL, max_tokens=1000, **kw)
    with c.messages.stream(model=MODEL, max_tokens=1000, **kw) as s:
        return s.get_final_message()


def replay(p, lines: list[dict]) -> list:
    engine = CacheEngine(p.profile, seed=5)
    return [
        engine.process(
            [Segment(*s) for s in line["segments"]], domain=line["domain"], now=line["t"], model=line["model"]
        )
        for line in lines
    ]


def cum_until_breakpoint(line: dict, kind: str) -> int:
    """Prompt tokens up to and including the last segment with breakpoint ``kind``."""
    total, upto = 0, 0
    for _, count, mark in line["segments"]:
        total += count
        upto = total if mark == kind else upto
    return upto


def test_text_answer_headers_and_system_role_message(provider):
    raw = client(provider).beta.messages.with_raw_response.create(  # the beta path: /v1/messages?beta=true
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "system", "content": "# Environment\ncwd: /tmp"}, {"role": "user", "content": "Hi"}],
    )
    message = raw.parse()
    assert raw.headers["request-id"].startswith("req_") and raw.headers["x-kit-simulated"] == "true"
    assert raw.headers["x-kit-policy"] == "test-read"
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.stop_reason == "tool_use"
    assert message.content[1].input == {"file_path": "a.txt"}
    assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens == 0
    line = read(provider.log_path)[0]
    assert line["endpoint"] == "/v1/messages" and line["usage"]["input_tokens"] == message.usage.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip_with_moving_breakpoint(provider, stream):
    """Claude Code's layout: cached system blocks, one breakpoint on the last block that moves each request."""
    c = client(provider)
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1"},
        {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    ask = {"role": "user", "content": [{"type": "text", "text": "Show a.txt", "cache_control": {"type": "ephemeral"}}]}
    first = create(c, stream, system=system, tools=[READ_TOOL], messages=[ask])
    tool_use = first.content[1]
    assert tool_use.type == "tool_use" and tool_use.name == "Read" and tool_use.input == {"file_path": "a.txt"}
    u1 = first.usage
    assert u1.cache_read_input_tokens == 0 and u1.cache_creation_input_tokens > 1024 and u1.input_tokens == 0

    plain_ask = {"role": "user", "content": [{"type": "text", "text": "Show a.txt"}]}  # breakpoint removed
    result = {
        "type": "tool_result",
        "tool_use_id": tool_use.id,
        "content": "hello",
        "cache_control": {"type": "ephemeral"},
    }
    messages = [
        plain_ask,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [result]},
    ]
    second = create(c, stream, system=system, tools=[READ_TOOL], messages=messages)
    assert second.content[0].text == "It says: hello" and second.stop_reason == "end_turn"
    u2 = second.usage
    assert u2.cache_read_input_tokens == u1.cache_creation_input_tokens  # the moved breakpoint still finds it
    assert u2.cache_creation_input_tokens > 0 and u2.cache_creation.ephemeral_1h_input_tokens == 0

    lines = read(provider.log_path)
    for line, message in zip(lines, [first, second], strict=True):
        usage = message.usage
        total = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        assert total == line["usage"]["input_tokens"] == sum(s[1] for s in line["segments"])  # additive
        assert line["usage"]["cache_read_tokens"] == usage.cache_read_input_tokens
        assert line["usage"]["cache_write_tokens"] == usage.cache_creation_input_tokens
        split = usage.cache_creation
        assert split.ephemeral_5m_input_tokens + split.ephemeral_1h_input_tokens == usage.cache_creation_input_tokens
        assert line["wire_usage"] == usage.model_dump(exclude_none=True)
        assert line["response_id"] == message.id
    assert u1.cache_creation.ephemeral_1h_input_tokens == cum_until_breakpoint(lines[0], "1h")
    assert [(r.cache_read, r.cache_write, r.cache_write_1h) for r in replay(provider, lines)] == [
        (0, u1.cache_creation_input_tokens, u1.cache_creation.ephemeral_1h_input_tokens),
        (u2.cache_read_input_tokens, u2.cache_creation_input_tokens, 0),
    ]
    frame = json.dumps({**result, "content": ""}, separators=(",", ":"))  # the block as sent, content emptied
    framed = {"framing_chars": len(frame), "o200k_tokens": tokens.count(frame) + tokens.count(result["content"])}
    assert lines[1]["tool_results"] == [
        {"call_id": tool_use.id, "name": "Read", "chars": 5, "is_error": False, **framed}
    ]


def test_stream_events_carry_usage(provider):
    with client(provider).messages.stream(model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "x"}]) as s:
        events = list(s)
        final = s.get_final_message()
    types = [e.type for e in events]
    assert types[0] == "message_start" and events[0].message.usage.output_tokens == 1
    assert types.count("content_block_start") == types.count("content_block_stop") == 2
    assert "message_delta" in types and final.usage.output_tokens > 1
    assert read(provider.log_path)[0]["usage"]["output_tokens"] == final.usage.output_tokens


def test_automatic_cache_control_and_other_blocks(provider):
    """Top-level cache_control puts the breakpoint on the last block; thinking and image blocks are accepted."""
    c = client(provider)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL * 40}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": LONG}, image]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Noted."},
            ],
        },
        {"role": "user", "content": "Go on"},
    ]
    first = c.messages.create(model=MODEL, max_tokens=100, messages=messages, cache_control={"type": "ephemeral"})
    second = c.messages.create(model=MODEL, max_tokens=100, messages=messages, cache_control={"type": "ephemeral"})
    line = read(provider.log_path)[0]
    total = sum(s[1] for s in line["segments"])
    assert line["segments"][-1][2] == "5m" and total > 1024 + 1024  # the image counts a flat 1024
    assert first.usage.cache_creation_input_tokens == total and first.usage.input_tokens == 0
    assert second.usage.cache_read_input_tokens == total and second.usage.cache_creation_input_tokens == 0


def test_count_tokens_matches_the_prompt(provider):
    c = client(provider)
    kw = {"model": MODEL, "system": LONG, "messages": [{"role": "user", "content": "Hi"}]}
    counted = c.messages.count_tokens(**kw).input_tokens
    c.messages.create(max_tokens=10, **kw)
    assert counted == read(provider.log_path)[0]["usage"]["input_tokens"] > 1500
    deferred = {**READ_TOOL, "name": "Later", "defer_loading": True}  # not in the prompt until a tool search loads it
    with_tools = c.messages.count_tokens(**kw, tools=[READ_TOOL, deferred]).input_tokens
    assert with_tools == c.messages.count_tokens(**kw, tools=[READ_TOOL]).input_tokens > counted
