"""The embedded provider through the official openai SDK: Responses and Chat Completions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any, cast

import openai
import pytest
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFunctionToolCall, ResponseStreamEvent

from kit import tokens
from kit.provider import Conversation, Reply, ToolCall, serve
from kit.provider.cache import CacheEngine, Segment
from kit.provider.log import domain_of, read
from kit.provider.prompt import PromptCounter
from kit.provider.wire_openai import parse_responses, responses_items

LONG = "You are a careful coding agent. Follow the repository conventions exactly. " * 150  # ~2k tokens


class ToolPolicy:
    """Calls ``exec_command`` on cycle 0 (with hidden reasoning), answers with the tool output on cycle 1."""

    name = "test-tool"

    def reply(self, conversation: Conversation) -> Reply:
        if conversation.cycle == 0:
            return Reply(text="", tool_calls=(ToolCall("exec_command", {"cmd": "cat a.txt"}),), reasoning_tokens=7)
        result = conversation.results()[-1][1].text
        return Reply(text=f"The file says: {result}")


@pytest.fixture
def provider():
    with serve(policy=ToolPolicy(), seed=3) as p:
        yield p


def client(p, key: str = "sk-test", base: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=(base or p.base_url) + "/v1", api_key=key, max_retries=0)


def completed(events: Iterable[ResponseStreamEvent]) -> Response:
    """A finished stream's response: its last event is ``response.completed``, which carries it."""
    return cast(ResponseCompletedEvent, list(events)[-1]).response


def replay(p, lines: list[dict]) -> list:
    """The same requests through a fresh engine: what the server reported must be what the engine says."""
    engine = CacheEngine(p.profiles[lines[0]["api"]], seed=3)  # Responses and Chat share OpenAI's profile
    return [
        engine.process(
            [Segment(*s) for s in line["segments"]],
            domain=line["domain"],
            now=line["t"],
            model=line["model"],
            routing_key=line["prompt_cache_key"],
        )
        for line in lines
    ]


EXEC_TOOL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}


def test_responses_text_answer_and_headers(provider):
    raw = client(provider).responses.with_raw_response.create(model="sim-model", input="Say hello")
    response = raw.parse()
    assert raw.headers["x-kit-policy"] == "test-tool" and raw.headers["x-kit-simulated"] == "true"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call"]  # cycle 0 of the tool policy
    assert response.output[0].encrypted_content == "kit-sim-reasoning:7"
    usage = response.usage
    assert usage.output_tokens_details.reasoning_tokens == 7
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens > 0 and usage.input_tokens_details.cached_tokens == 0


def _responses_round(c, stream: bool, **kw):
    if not stream:
        return c.responses.create(model="sim-model", **kw)
    with c.responses.stream(model="sim-model", **kw) as s:
        return s.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_round_trip(provider, stream):
    c = client(provider)
    items = [{"role": "developer", "content": LONG}, {"role": "user", "content": "Show me a.txt"}]
    first = _responses_round(c, stream, input=items, tools=[EXEC_TOOL], prompt_cache_key="thread-1")
    call = next(i for i in first.output if i.type == "function_call")
    assert call.name == "exec_command" and call.arguments == '{"cmd":"cat a.txt"}'
    # The client echoes reasoning and call items back, then the tool output (as Codex does).
    echoed = [i.model_dump(exclude_none=True) for i in first.output]
    second_input = [*items, *echoed, {"type": "function_call_output", "call_id": call.call_id, "output": "hi there"}]
    second = _responses_round(c, stream, input=second_input, tools=[EXEC_TOOL], prompt_cache_key="thread-1")
    assert second.output_text == "The file says: hi there"
    assert second.usage.input_tokens > first.usage.input_tokens
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= 1024 and cached <= first.usage.input_tokens  # the shared prefix is read, inside input

    lines = read(provider.log_path)
    assert [line["status"] for line in lines] == [200, 200]
    for line, response in zip(lines, [first, second], strict=True):
        assert line["wire_usage"] == response.usage.model_dump(exclude_none=True)
        assert line["response_id"] == response.id and line["stream"] is stream
        assert line["usage"]["input_tokens"] == response.usage.input_tokens == sum(s[1] for s in line["segments"])
        assert line["usage"]["cache_read_tokens"] == response.usage.input_tokens_details.cached_tokens
        assert line["prompt_cache_key"] == "thread-1" and line["domain"] == domain_of("sk-test")
    assert [r.cache_read for r in replay(provider, lines)] == [0, cached]
    assert lines[0]["tool_calls"] == 1 and lines[0]["tool_results"] == []
    frame = json.dumps({**second_input[-1], "output": ""}, separators=(",", ":"))  # the item as sent, emptied
    framed = {"framing_chars": len(frame), "o200k_tokens": tokens.count(frame) + tokens.count("hi there")}
    assert lines[1]["tool_results"] == [
        {"call_id": call.call_id, "name": "exec_command", "chars": 8, "is_error": False, **framed}
    ]


def test_responses_stream_events(provider):
    events = list(client(provider).responses.create(model="sim-model", input="hi", stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    final = events[-1].response
    assert [i.id for i in done] == [i.id for i in final.output] and final.id.startswith("resp_")
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == final.output[1].arguments
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


def test_chat_completions(provider):
    c = client(provider)
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "Show me a.txt"}]
    tools = [{"type": "function", "function": {"name": "exec_command", "parameters": {"type": "object"}}}]
    first = c.chat.completions.create(model="sim-model", messages=messages, tools=tools)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "exec_command"
    assert first.usage.completion_tokens_details.reasoning_tokens == 7
    call = choice.message.tool_calls[0]
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "ok"},
    ]
    chunks = list(
        c.chat.completions.create(
            model="sim-model", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "The file says: ok"
    assert all(ch.usage is None for ch in chunks[:-1]) and chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens >= 1024
    assert usage.prompt_tokens_details.cache_write_tokens is None  # openai-implicit: writes are free, not reported
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    lines = read(provider.log_path)
    assert lines[1]["wire_usage"] == usage.model_dump(exclude_none=True)
    assert [r.cache_read for r in replay(provider, lines)] == [0, usage.prompt_tokens_details.cached_tokens]


def test_chat_stream_tool_call_deltas(provider):
    with client(provider).chat.completions.stream(model="sim-model", messages=[{"role": "user", "content": "x"}]) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.arguments == '{"cmd":"cat a.txt"}' and call.id.startswith("call_")
    assert read(provider.log_path)[0]["wire_usage"] is None  # no include_usage: the client got no usage


class PatchPolicy:
    name = "patch"

    def reply(self, conversation: Conversation) -> Reply:
        return Reply(tool_calls=(ToolCall("apply_patch", {"input": "*** Begin Patch\n*** End Patch"}),))


def test_custom_and_non_function_tools():
    tools = [
        EXEC_TOOL,
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
        {"type": "web_search", "external_web_access": False},
        {"type": "namespace", "name": "multi_agent_v1", "tools": []},
    ]
    parsed = parse_responses({"model": "m", "input": "x", "tools": tools})
    assert parsed.conversation.tool_names() == {"exec_command", "apply_patch", "web_search", "multi_agent_v1"}
    with serve(policy=PatchPolicy()) as p:
        events = list(client(p).responses.create(model="gpt-5.5", input="patch it", tools=tools, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    item = events[-1].response.output[0]
    assert item.type == "custom_tool_call" and item.name == "apply_patch"
    assert item.input == deltas == "*** Begin Patch\n*** End Patch"
    # Echoed back with its output, the freeform call is part of the assistant turn the policy sees.
    echoed = [
        item.model_dump(exclude_none=True),
        {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "ok"},
    ]
    conversation = parse_responses({"model": "m", "input": [{"role": "user", "content": "x"}, *echoed]}).conversation
    assert conversation.cycle == 1 and conversation.results()[0][0].arguments == {"input": item.input}


def test_trial_id_from_url_and_header(provider):
    client(provider, base=provider.trial_base_url("b1-placebo-r0")).responses.create(model="sim-model", input="a")
    client(provider).with_options(default_headers={"x-kit-trial-id": "b1-x-r1"}).responses.create(
        model="sim-model", input="b"
    )
    client(provider, base=provider.trial_base_url("odd/id r2")).chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "c"}]
    )
    assert [line["trial_id"] for line in read(provider.log_path)] == ["b1-placebo-r0", "b1-x-r1", "odd/id r2"]


def test_prompt_counter_tokenises_only_new_blocks():
    counter = PromptCounter()
    history = [{"role": "developer", "content": LONG}, {"role": "user", "content": "start"}]
    body = {"model": "m", "tools": [EXEC_TOOL], "input": history}
    first = counter.responses(body)
    assert counter.encode_calls == 3 and len(first) == 3
    for step in range(5):
        history += [
            {"type": "function_call", "call_id": f"c{step}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{step}", "output": f"result {step}"},
        ]
        before = counter.encode_calls
        segments = counter.responses(body)
        assert counter.encode_calls - before == 2  # only the two new items are tokenised
    assert segments[:3] == first  # same blocks, same digests and counts
    moved = counter.responses({**body, "input": [{"role": "developer", "content": LONG}]})
    assert moved[1] == first[1]  # a block's digest does not depend on what follows it


def test_concurrent_streaming_sessions_are_independent(provider):
    """16 clients, each its own API key (domain), the same long prompt: no one reads another's cache."""
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def session(n: int) -> None:
        try:
            c = client(provider, key=f"sk-user-{n}")
            # JSON items as sent: the SDK's input TypedDicts do not admit the model_dump() dicts added below
            items: list[Any] = [{"role": "developer", "content": LONG}, {"role": "user", "content": "Show me a.txt"}]
            first = completed(c.responses.create(model="sim-model", input=items, stream=True))
            call = next(i for i in first.output if isinstance(i, ResponseFunctionToolCall))
            items += [
                *(i.model_dump(exclude_none=True) for i in first.output),
                {"type": "function_call_output", "call_id": call.call_id, "output": f"n={n}"},
            ]
            second = completed(c.responses.create(model="sim-model", input=items, stream=True))
            assert second.output_text == f"The file says: n={n}"
            results[n] = [first.usage, second.usage]
        except BaseException as exc:  # surfaced below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=session, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    firsts = {results[n][0].input_tokens_details.cached_tokens for n in range(16)}
    seconds = {results[n][1].input_tokens_details.cached_tokens for n in range(16)}
    assert firsts == {0} and len(seconds) == 1 and seconds.pop() >= 1024
    lines = read(provider.log_path)
    assert len(lines) == 32 and len({line["domain"] for line in lines}) == 16
    assert len({line["response_id"] for line in lines}) == 32


def test_namespaced_functions_are_offered_called_and_read_back_by_their_mcp_name():
    """Codex offers MCP tools inside a ``namespace`` tool and calls them by function name plus namespace."""
    explore = {"type": "function", "name": "explore", "description": "d", "parameters": {"type": "object"}}
    tools = [{"type": "namespace", "name": "mcp__kit", "description": "Tools in mcp__kit.", "tools": [explore]}]
    parsed = parse_responses({"model": "m", "input": "x", "tools": tools})
    assert {"mcp__kit", "mcp__kit__explore"} <= parsed.conversation.tool_names()
    assert parsed.namespaced == {"mcp__kit__explore": ("mcp__kit", "explore")}
    reply = Reply(text="", tool_calls=(ToolCall("mcp__kit__explore", {"query": "run"}, "call_1"),))
    (item,) = responses_items(reply, parsed.custom_tools, parsed.namespaced)
    assert (item["name"], item["namespace"], item["arguments"]) == ("explore", "mcp__kit", '{"query":"run"}')
    output = {"type": "function_call_output", "call_id": "call_1", "output": "o"}
    echoed = [{"role": "user", "content": "x"}, item, output]
    conversation = parse_responses({"model": "m", "input": echoed, "tools": tools}).conversation
    ((call, result),) = conversation.results()
    assert (call.name, call.arguments, result.text) == ("mcp__kit__explore", {"query": "run"}, "o")
