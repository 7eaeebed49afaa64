"""The kit's own records: the embedded provider's log and the SDK agents' response records.

Lines are written by hand in the shape ``kit.provider.log`` and ``kit.agents.sdk`` write; the expected
canonical rows are worked out by hand from each provider's convention (OpenAI inside, Anthropic on top).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts


def write(path: Path, lines: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def log_line(trial: str | None, usage: dict | None, status: int = 200, **extra) -> dict:
    line = {
        "kit_provider_log": 1,
        "ts": "2026-11-29T13:00:00.123456+00:00",
        "t": 12.5,
        "endpoint": "/v1/responses",
        "api": "responses",
        "stream": True,
        "status": status,
        "error": None if status == 200 else "rate limited",
        "model": "sim-model",
        "policy": "batch-read",
        "profile": "openai-implicit",
        "domain": "d-3f2a",
        "prompt_cache_key": None,
        "trial_id": trial,
        "response_id": "resp_1",
        "usage": usage,
        "wire_usage": {},
        "tool_calls": 0,
        "tool_results": [],
        "segments": [["9f1c", 812, None]],
        "server_ms": 3.2,
    }
    return line | extra


OPENAI_USAGE = {
    "input_tokens": 1234,
    "cache_read_tokens": 1024,
    "cache_write_tokens": 0,
    "cache_write_1h_tokens": 0,
    "output_tokens": 56,
    "reasoning_tokens": 12,
}


def test_provider_log_openai_line(tmp_path):
    results = [
        {"call_id": "c1", "name": "read_file", "chars": 5120, "is_error": False},
        {"call_id": "c2", "name": "grep", "chars": 80, "is_error": True},
    ]
    wire = {"input_tokens": 1234, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 56}
    lines = [
        log_line("b1-placebo-r0", OPENAI_USAGE, tool_calls=2, wire_usage=wire),
        log_line("b1-placebo-r0", OPENAI_USAGE | {"cache_read_tokens": 1152}, tool_results=results),
    ]
    path = write(tmp_path / "provider_log.jsonl", lines)
    assert transcripts.detect(path) == "provider_log"
    df = transcripts.read(path)
    first = df.iloc[0]
    assert (first.input_tokens, first.cache_read_tokens, first.uncached_input_tokens) == (1234, 1024, 210)
    assert (first.output_tokens, first.reasoning_tokens, first.total_tokens) == (56, 12, 1290)
    assert (first.trial_id, first.cycle, first.tool_calls, first.model) == ("b1-placebo-r0", 0, 2, "sim-model")
    assert first.wall_s == pytest.approx(0.0032) and first.started_at == "2026-11-29T13:00:00.123456+00:00"
    assert df.cycle.tolist() == [0, 1] and df.uncached_input_tokens.tolist() == [210, 82]
    assert df.source_format.tolist() == ["provider_log"] * 2 and df.source_line.tolist() == [1, 2]
    assert pd.isna(first.batch) and pd.isna(first.arm) and pd.isna(first.run)
    tools = transcripts.tool_results(path)
    assert tools[["trial_id", "cycle", "tool", "category", "chars", "is_error"]].values.tolist() == [
        ["b1-placebo-r0", 1, "read_file", "read", 5120, False],
        ["b1-placebo-r0", 1, "grep", "grep", 80, True],
    ]
    assert tools["framing_chars"].isna().all() and tools["o200k_tokens"].isna().all()  # the log has no blocks


def test_provider_log_anthropic_line_uses_the_canonical_usage_not_the_wire(tmp_path):
    wire = {"input_tokens": 101, "cache_creation_input_tokens": 2001, "cache_read_input_tokens": 10_000}
    usage = {
        "input_tokens": 12_102,  # 101 + 2001 + 10000: the log already adds Anthropic's cache on top
        "cache_read_tokens": 10_000,
        "cache_write_tokens": 2_001,
        "cache_write_1h_tokens": 2_001,
        "output_tokens": 27,
        "reasoning_tokens": None,
    }
    line = log_line("t-1", usage, endpoint="/v1/messages", api="messages", profile="anthropic", wire_usage=wire)
    row = transcripts.read(write(tmp_path / "log.jsonl", [line])).iloc[0]
    assert (row.input_tokens, row.cache_write_tokens, row.cache_write_1h_tokens) == (12_102, 2_001, 2_001)
    assert (row.uncached_input_tokens, row.total_tokens) == (2_102, 12_129)
    assert pd.isna(row.reasoning_tokens)


def test_provider_log_cycles_per_trial_errors_and_missing_usage(tmp_path):
    lines = [
        log_line("a", OPENAI_USAGE),
        log_line("b", OPENAI_USAGE),
        log_line("a", None, status=429),
        log_line("a", None),
        log_line("b", OPENAI_USAGE),
    ]
    df = transcripts.read(write(tmp_path / "log.jsonl", lines))
    assert df.trial_id.tolist() == ["a", "b", "a", "b"] and df.cycle.tolist() == [0, 0, 1, 1]
    assert df.usage_known.tolist() == [True, True, False, True]
    assert df.input_tokens.isna().tolist() == [False, False, True, False]
    (event,) = df.attrs["events"]
    assert (event["kind"], event["source_line"], event["detail"]["status"]) == ("http_error", 3, 429)
    assert df.attrs["issues"] == []


def test_provider_log_bad_lines_are_located(tmp_path):
    lines = [log_line("a", OPENAI_USAGE), {"kit_provider_log": 2}, log_line("a", OPENAI_USAGE | {"output_tokens": -1})]
    df = transcripts.read(write(tmp_path / "log.jsonl", lines), format="provider_log")
    assert [(i["source_line"], i["reason"][:40]) for i in df.attrs["issues"]] == [
        (2, 'not a provider log line (expected "kit_p'),
        (3, "usage field 'output_tokens' is not a non"),
    ]
    assert df.usage_known.tolist() == [True, False]


def sdk_line(api: str, response: dict, cycle: int, turn: int = 1) -> dict:
    return {
        "kit_sdk": 1,
        "api": api,
        "turn": turn,
        "cycle": cycle,
        "started_at": f"2026-11-29T13:00:0{cycle}+00:00",
        "wall_s": 0.05,
        "response": response,
    }


def test_sdk_openai_responses_usage_is_a_subset_convention(tmp_path):
    response = {
        "id": "resp_1",
        "model": "gpt-5.5",
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "read_file", "call_id": "c1", "arguments": "{}"},
            {"type": "function_call", "name": "grep", "call_id": "c2", "arguments": "{}"},
        ],
        "usage": {
            "input_tokens": 2123,
            "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 100},
            "output_tokens": 27,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 2150,
        },
    }
    final = {"id": "resp_2", "model": "gpt-5.5", "output": [{"type": "message"}], "usage": None}
    path = write(
        tmp_path / "sdk_responses.jsonl", [sdk_line("responses", response, 0), sdk_line("responses", final, 1)]
    )
    assert transcripts.detect(path) == "sdk_record"
    df = transcripts.read(path)
    row = df.iloc[0]
    assert (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens) == (2123, 1000, 100)
    assert (row.uncached_input_tokens, row.output_tokens, row.reasoning_tokens, row.total_tokens) == (1123, 27, 2, 2150)
    assert (row.tool_calls, row.turn, row.cycle, row.backend, row.model) == (2, 1, 0, "sdk", "gpt-5.5")
    assert row.wall_s == pytest.approx(0.05)
    assert pd.isna(row.cache_write_1h_tokens)
    assert df.usage_known.tolist() == [True, False] and pd.isna(df.total_tokens.iloc[1])
    # framing: each output item as returned, what the model wrote emptied (the arguments "{}" -> "")
    items = [
        '{"type":"reasoning","summary":[]}',
        *(
            f'{{"type":"function_call","name":"{n}","call_id":"c{i}","arguments":""}}'
            for i, n in ((1, "read_file"), (2, "grep"))
        ),
    ]
    assert df.output_framing_chars.tolist() == [sum(map(len, items)), len('{"type":"message"}')]


def test_sdk_openai_chat_usage(tmp_path):
    response = {
        "id": "chatcmpl-1",
        "model": "gpt-4o",
        "choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c1"}, {"id": "c2"}, {"id": "c3"}]}}],
        "usage": {
            "prompt_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1280},
            "completion_tokens": 40,
            "completion_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 1540,
        },
    }
    row = transcripts.read(write(tmp_path / "sdk.jsonl", [sdk_line("chat", response, 0)])).iloc[0]
    assert (row.input_tokens, row.cache_read_tokens, row.uncached_input_tokens) == (1500, 1280, 220)
    assert (row.output_tokens, row.total_tokens, row.tool_calls) == (40, 1540, 3)
    assert pd.isna(row.cache_write_tokens)  # not reported: unknown, not zero


def test_sdk_anthropic_messages_usage_is_additive(tmp_path):
    response = {
        "id": "msg_1",
        "model": "claude-opus-4-6",
        "content": [{"type": "text", "text": "Reading."}, {"type": "tool_use", "id": "t1", "name": "read_file"}],
        "usage": {
            "input_tokens": 101,
            "cache_creation_input_tokens": 2001,
            "cache_read_input_tokens": 10_000,
            "cache_creation": {"ephemeral_5m_input_tokens": 1, "ephemeral_1h_input_tokens": 2000},
            "output_tokens": 27,
        },
    }
    no_cache = {"id": "msg_2", "content": [], "usage": {"input_tokens": 50, "output_tokens": 5}}
    df = transcripts.read(
        write(tmp_path / "sdk.jsonl", [sdk_line("messages", response, 0), sdk_line("messages", no_cache, 1)])
    )
    row = df.iloc[0]
    assert (row.input_tokens, row.cache_read_tokens, row.cache_write_tokens) == (12_102, 10_000, 2_001)
    assert (row.cache_write_1h_tokens, row.uncached_input_tokens, row.total_tokens) == (2_000, 2_102, 12_129)
    assert (row.tool_calls, row.model) == (1, "claude-opus-4-6")
    second = df.iloc[1]
    assert (second.input_tokens, second.cache_read_tokens, second.cache_write_tokens) == (50, 0, 0)
    assert pd.isna(second.cache_write_1h_tokens)  # no breakdown given: the 1h share is unknown


def test_sdk_bad_records_are_located(tmp_path):
    good = sdk_line("responses", {"usage": {"input_tokens": 10, "output_tokens": 1}}, 0)
    lines = [
        good,
        {"kit_sdk": 1, "api": "gemini", "response": {}},
        sdk_line("messages", {"usage": {"input_tokens": "many", "output_tokens": 1}}, 2),
    ]
    df = transcripts.read(write(tmp_path / "sdk.jsonl", lines))
    assert [i["source_line"] for i in df.attrs["issues"]] == [2, 3]
    assert df.usage_known.tolist() == [True, False]
    with pytest.raises(transcripts.TranscriptError, match=r"sdk\.jsonl:2: expected"):
        transcripts.read(tmp_path / "sdk.jsonl", strict=True)
