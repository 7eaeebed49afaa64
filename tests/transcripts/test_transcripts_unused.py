"""Lines a read of requests alone reads past undecoded (``kit.transcripts._base.Unused``): tool output.

The rows must be the same as when those lines are decoded (``tables``, which reads the tool results), a
damaged line that no longer looks whole is still reported, and only a line's own top-level type is matched,
never the same words nested in a call's input or behind escapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit import transcripts
from kit.transcripts import claude_session, codex_rollout
from kit.transcripts._base import MARKER_WINDOW
from tests.support import CODE_MODE, ROLLOUT, SESSION, TOOL_HEAVY, assert_requests_alone

OUTPUT = "x" * 2000  # long enough to be looked at (``_base.LONG``)


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("path", [SESSION, TOOL_HEAVY, ROLLOUT, CODE_MODE], ids=lambda p: p.name)
def test_requests_alone_equal_the_requests_read_with_tool_results(path):
    alone = transcripts.read(path)
    with_tools, _ = transcripts.tables(path)
    assert_requests_alone(alone, with_tools)
    assert alone.attrs["issues"] == []


def rollout(output_line: dict | str) -> list:
    meta = {"timestamp": "2026-06-01T08:00:00.000Z", "type": "session_meta", "payload": {"id": "s-1"}}
    call = {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}
    usage = {"input_tokens": 900, "cached_input_tokens": 800, "output_tokens": 20}
    count = {"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage}}
    return [
        meta,
        {"timestamp": "2026-06-01T08:00:01.000Z", "type": "turn_context", "payload": {"model": "gpt-5.5"}},
        {"timestamp": "2026-06-01T08:00:02.000Z", "type": "response_item", "payload": call},
        {"timestamp": "2026-06-01T08:00:02.500Z", "type": "event_msg", "payload": count},
        output_line,
    ]


def test_a_codex_tool_output_is_read_past_and_its_damage_reported_when_it_is_read(tmp_path):
    output = {"type": "function_call_output", "call_id": "c1", "output": OUTPUT}
    line = {"timestamp": "2026-06-01T08:00:03.000Z", "type": "response_item", "payload": output}
    assert codex_rollout.REQUESTS_ONLY.pattern.match(json.dumps(line, separators=(",", ":")).encode())
    good = write(tmp_path / "good.jsonl", rollout(line))
    # damaged inside yet ending as an object does: not decoded by a read of requests, reported by tables
    text = good.read_text().replace('"output":"xxx', '"output":xxx', 1)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(text)
    requests = transcripts.read(damaged)
    same = requests.drop(columns="source_path").equals(transcripts.read(good).drop(columns="source_path"))
    assert requests.attrs["issues"] == [] and same
    _, tools = transcripts.tables(damaged)
    assert [(i["source_line"], i["reason"][:12]) for i in tools.attrs["issues"]] == [(5, "invalid JSON")]
    # cut short (a killed writer, a truncated copy): reported by both
    cut = tmp_path / "cut.jsonl"
    cut.write_text(good.read_text()[:-500] + "\n")
    assert [i["source_line"] for i in transcripts.read(cut).attrs["issues"]] == [5]


def claude_line(kind: str, content: object, **keys: object) -> dict:
    head = {"parentUuid": None, "isSidechain": False, "cwd": "/w", "sessionId": "s", "version": "2.1.38"}
    return {**head, **keys, "type": kind, "message": {"role": kind, "content": content}, "uuid": "u"}


def assistant(ident: str, content: list) -> dict:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 100, "output_tokens": 5}
    line = claude_line("assistant", content)
    line["message"] |= {"id": ident, "model": "claude-x", "usage": usage}
    return line


def test_only_a_claude_line_of_its_own_tool_results_is_read_past(tmp_path):
    result = [{"tool_use_id": "t1", "type": "tool_result", "content": OUTPUT}]
    lines = [
        claude_line("user", "first prompt"),
        assistant("m1", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}]),
        claude_line("user", result),  # read past
        # a call whose input holds a whole user line of tool results, nested: never read past
        assistant("m2", [{"type": "tool_use", "id": "t2", "name": "Echo", "input": claude_line("user", result)}]),
        # escapes before its type: decoded (and a prompt, so the next response opens turn 2)
        claude_line("user", [{"type": "text", "text": OUTPUT}], cwd='C:\\w "q"'),
        assistant("m3", [{"type": "text", "text": "done"}]),
    ]
    raw = [json.dumps(line, separators=(",", ":")).encode() for line in lines]
    matched = [bool(claude_session.REQUESTS_ONLY.pattern.match(line)) for line in raw]
    assert matched == [False, False, True, False, False, False]
    path = write(tmp_path / "s.jsonl", lines)
    df = transcripts.read(path)
    assert df.source_line.tolist() == [2, 4, 6] and df.turn.tolist() == [1, 1, 2]
    assert_requests_alone(df, transcripts.tables(path)[0])
    assert df.attrs["issues"] == []


def test_a_claude_tool_result_is_looked_for_by_its_marker_in_the_first_4_kb_only(tmp_path):
    """``Unused.marker``: a line whose type comes after the window is decoded (here: its damage reported), never
    read past on the pattern's say alone; one within it is read past, its damage unseen by a read of requests."""
    result = [{"tool_use_id": "t1", "type": "tool_result", "content": OUTPUT}]
    call = assistant("m1", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}])
    for cwd, read_past in (("/w", True), ("/w" + "x" * MARKER_WINDOW, False)):
        line = claude_line("user", result, cwd=cwd)
        raw = json.dumps(line, separators=(",", ":"))
        assert claude_session.REQUESTS_ONLY.pattern.match(raw.encode())  # the pattern alone would read it past
        damaged = raw.replace('"content":"xxx', '"content":xxx', 1)
        path = tmp_path / f"{len(cwd)}.jsonl"
        path.write_text(json.dumps(call, separators=(",", ":")) + "\n" + damaged + "\n")
        issues = [(i["source_line"], i["reason"][:12]) for i in transcripts.read(path).attrs["issues"]]
        assert issues == ([] if read_past else [(2, "invalid JSON")])
