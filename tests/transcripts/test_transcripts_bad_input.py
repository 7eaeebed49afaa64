"""Bad input: every problem is reported with its place, the rest of the file is still read, and
no row is invented or lost (a hypothesis property over mutated real transcripts). Also the traps
that look like good input: Codex re-emits, fork replays and thread-cumulative ``codex exec`` usage.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import orjson
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit import transcripts
from kit.cli import parse as cli
from kit.stages import parse
from kit.transcripts import _base
from tests.support import CODE_MODE, ROLLOUT, SESSION, STREAM, TOOL_HEAVY, TRANSCRIPTS

TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens"]


def fixture_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def write(path: Path, lines: list[bytes] | list[dict]) -> Path:
    path.write_bytes(b"".join(x if isinstance(x, bytes) else orjson.dumps(x) + b"\n" for x in lines))
    return path


def reasons(df: pd.DataFrame) -> list[tuple[int, str]]:
    return [(i["source_line"], i["reason"]) for i in df.attrs["issues"]]


def test_truncated_last_line_is_reported_and_the_rest_read(tmp_path):
    lines = fixture_lines(TOOL_HEAVY)[:37]
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # killed while writing the 173-token line
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert reasons(df) == [(37, "truncated last line (no final newline: writer killed?); line skipped")]
    assert len(df) == 4
    assert (df.output_tokens.iloc[3], df.source_line.iloc[3]) == (25, 34)  # the earlier snapshot survives


@pytest.mark.parametrize("codex", [False, True], ids=["claude-session", "codex-rollout"])
@pytest.mark.parametrize("where", ["ascii chunk", "non-ascii chunk"])
def test_bytes_that_are_not_utf8_in_a_skipped_field_make_the_line_invalid(tmp_path, codex, where):
    """The typed decoders skip text they do not need without checking its UTF-8; the reader checks it."""
    source = ROLLOUT if codex else TOOL_HEAVY
    lines = fixture_lines(source)
    lines[3] = lines[3].replace(b'"type"', b'"note":"caf\xe9 \xff","type"', 1)  # Latin-1 bytes, not UTF-8
    if where == "non-ascii chunk":
        lines[1] = lines[1].replace(b'"type"', '"note":"café →","type"'.encode(), 1)  # valid UTF-8
    df = transcripts.read(write(tmp_path / source.name, lines))
    assert [(n, r.split(" (")[0]) for n, r in reasons(df)] == [(4, "invalid JSON")]
    assert orjson.loads(lines[1])  # the valid non-ASCII line is read


def test_content_that_is_not_json_values_makes_the_line_invalid(tmp_path):
    """Line 13 is a tool_use block: what the line's check lets through, reading its content reports."""
    lines = fixture_lines(TOOL_HEAVY)
    lines[12] = lines[12].replace(b'"name":"', b'"note":"\\ud800","name":"', 1)  # a lone surrogate
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    reason = "invalid JSON (JSON is malformed: unexpected end of hex escape"
    assert [n for n, _ in reasons(df)] == [13] and reasons(df)[0][1].startswith(reason)
    assert len(df) == 4 and df.source_line.tolist() == [5, 12, 30, 37]  # the response keeps its other lines


def test_out_of_range_number_in_a_block_field_not_read_is_accepted(tmp_path):
    """``1e999`` is JSON by the grammar; in a content-block field the reader does not use, it is skipped
    like any other such field, and the line counts in full (its tool call, its characters)."""
    lines = fixture_lines(TOOL_HEAVY)
    lines[12] = lines[12].replace(b'"name":"', b'"size":1e999,"name":"', 1)
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert reasons(df) == []
    assert df.source_line.tolist() == [5, 13, 30, 37] and df.tool_calls.iloc[1] == 1
    assert df.output_chars.tolist() == transcripts.read(TOOL_HEAVY).output_chars.tolist()


def test_invalid_json_mid_file(tmp_path):
    lines = fixture_lines(TOOL_HEAVY)
    lines[11] = b'{"type": "assistant", oops\n'
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert [line for line, _ in reasons(df)] == [12]
    assert reasons(df)[0][1].startswith("invalid JSON")
    assert len(df) == 4 and df.source_line.tolist() == [5, 13, 30, 37]


def test_non_object_line(tmp_path):
    lines = [*fixture_lines(SESSION)[:3], b"[1, 2]\n", *fixture_lines(SESSION)[3:]]
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert reasons(df) == [(4, "expected a JSON object, got list; line skipped")]
    assert len(df) == 3


def test_unknown_event_types_reported_once_each(tmp_path):
    lines = fixture_lines(SESSION)
    lines[2:2] = [b'{"type": "hologram", "sessionId": "x"}\n', b'{"type": "hologram"}\n', b'{"type": "x-ray"}\n']
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert [(line, r.split(";")[0]) for line, r in reasons(df)] == [
        (3, "unknown line type 'hologram'"),
        (5, "unknown line type 'x-ray'"),
    ]
    assert anthropic_sum(df) == anthropic_sum(transcripts.read(SESSION))


def anthropic_sum(df: pd.DataFrame) -> list[int]:
    return [int(df[c].sum()) for c in TOKENS]


@pytest.mark.parametrize("fmt", ["claude_stream", "codex_exec", "codex_rollout"])
def test_unknown_event_types_in_other_formats(tmp_path, fmt):
    first = {"claude_stream": {"type": "system", "subtype": "init", "session_id": "s"}}.get(fmt)
    first = first or ({"type": "thread.started", "thread_id": "t"} if fmt == "codex_exec" else None)
    first = first or {"type": "session_meta", "payload": {"id": "x"}}
    df = transcripts.read(write(tmp_path / "t.jsonl", [first, {"type": "mystery"}]))
    assert reasons(df) == [(2, "unknown line type 'mystery'; ignored (further lines of this type not reported)")]


def test_missing_usage_is_unknown_never_zero(tmp_path):
    lines = [json.loads(x) for x in fixture_lines(SESSION)]
    del lines[2]["message"]["usage"]  # the first response
    lines[7]["message"]["usage"] = {"input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 0}
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert df.usage_known.tolist() == [False, True, False]
    for column in TOKENS:
        assert df[column].isna().tolist() == [True, False, True], column
    assert df.input_tokens.iloc[1] == 21_300


def test_malformed_usage_field_is_located(tmp_path):
    lines = [json.loads(x) for x in fixture_lines(SESSION)]
    lines[2]["message"]["usage"]["cache_read_input_tokens"] = "15272"
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    reason = "usage field 'cache_read_input_tokens' is not a non-negative integer: '15272'"
    assert reasons(df) == [(3, f"{reason}; usage of this response unknown")]
    assert df.usage_known.tolist() == [False, True, True]


@pytest.mark.parametrize("fmt", ["auto", "claude_session", "provider_log"])
def test_empty_file(tmp_path, fmt):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    df = transcripts.read(path, format=fmt)
    assert df.empty and reasons(df) == [(0, "empty file")]
    blank = write(tmp_path / "blank.jsonl", [b"\n", b"  \r\n"])
    assert reasons(transcripts.read(blank, format=fmt)) == [(0, "empty file")]


def test_crlf_and_bom_read_like_the_original(tmp_path):
    original = transcripts.read(SESSION)
    crlf = [line.replace(b"\n", b"\r\n") for line in fixture_lines(SESSION)]
    crlf[0] = b"\xef\xbb\xbf" + crlf[0]
    df = transcripts.read(write(tmp_path / "crlf.jsonl", crlf))
    assert df.attrs["issues"] == []
    columns = [*TOKENS, "cycle", "source_line", "tool_calls"]
    pd.testing.assert_frame_equal(df[columns], original[columns])
    bom_stream = write(tmp_path / "stream.txt", [b"\xef\xbb\xbf" + STREAM.read_bytes()])
    assert transcripts.detect(bom_stream) == "claude_stream"
    assert int(transcripts.read(bom_stream).output_tokens.sum()) == 606


def test_duplicate_files_counted_once(tmp_path):
    first = write(tmp_path / "a.jsonl", fixture_lines(SESSION))
    second = write(tmp_path / "copy-of-a.jsonl", fixture_lines(SESSION))
    df = transcripts.read([first, second, first])
    assert len(df) == 3 and set(df.source_path) == {str(first)}
    assert reasons(df) == [(0, f"duplicate of {first} (same content); counted once")] * 2
    assert len(transcripts.tool_results([first, second])) == 2


def test_missing_file_and_undetectable_file(tmp_path):
    junk = write(tmp_path / "junk.jsonl", [{"hello": "world"}])
    df = transcripts.read([tmp_path / "nope.jsonl", junk, SESSION])
    assert len(df) == 3
    (missing, junk_issue) = df.attrs["issues"]
    assert missing["source_line"] == 0 and missing["reason"].startswith("cannot read")
    assert junk_issue == {
        "source_path": str(junk),
        "source_line": 0,
        "reason": "cannot detect the transcript format in the first 50 lines (the first JSON object's keys: hello)",
    }
    with pytest.raises(ValueError, match="unknown transcript format 'nope'"):
        transcripts.read(SESSION, format="nope")


def detect_error(path: Path) -> str:
    with pytest.raises(transcripts.TranscriptError) as info:
        transcripts.detect(path)
    return str(info.value)


def test_undetectable_files_say_why(tmp_path):
    """A real session saved as UTF-16 (as a Windows editor or PowerShell redirect does), a text file, a
    legacy Codex rollout, an empty file: each reason says what the file is, not only that it is unknown."""
    utf16 = tmp_path / "session.jsonl"
    utf16.write_bytes(SESSION.read_text().encode("utf-16"))  # with its byte-order mark, FF FE
    assert detect_error(utf16) == (
        f"{utf16}:0: cannot detect the transcript format: the file is UTF-16 (byte-order mark FF FE) text; "
        "transcripts are UTF-8 JSON lines (convert it first)"
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("Run 3 notes\n\ncodex exec finished\n")
    assert detect_error(notes).startswith(
        f"{notes}:0: cannot detect the transcript format: no JSON object in it (line 1: invalid JSON"
    )
    empty = tmp_path / "killed.jsonl"
    empty.write_bytes(b"")
    assert detect_error(empty) == f"{empty}:0: empty file"


def test_legacy_codex_rollout_is_named(tmp_path):
    """Before ``session_meta``, Codex wrote a bare header, ``record_type`` markers and bare response items
    (no ``payload``, no token usage). Built from the Code Mode rollout's own items, unwrapped."""
    real = [json.loads(line) for line in CODE_MODE.read_text().splitlines()]
    items = [line["payload"] for line in real if line["type"] == "response_item"][:4]
    header = {"id": real[0]["payload"]["id"], "timestamp": real[0]["timestamp"], "instructions": None}
    path = write(tmp_path / "rollout-legacy.jsonl", [header, {"record_type": "state"}, *items])
    reason = (
        "cannot detect the transcript format: a legacy Codex rollout (bare response items, no "
        "session_meta/event_msg envelope); it records no token usage, so no rows"
    )
    assert detect_error(path) == f"{path}:2: {reason}"
    without_marker = write(tmp_path / "rollout-bare.jsonl", [header, *items])
    assert detect_error(without_marker) == f"{without_marker}:2: {reason}"
    df = transcripts.read(tmp_path)
    assert df.empty and [r["source_line"] for r in df.attrs["issues"]] == [2, 2]


def test_statement_of_the_token_source_mix_reaches_parse_issues(tmp_path):
    """A rollout mixing usage records and token_count-only responses: the parse stage lists it."""
    raw = CODE_MODE.read_bytes().splitlines(keepends=True)
    first_record = next(i for i, line in enumerate(raw) if b'"type":"token_usage_record"' in line)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(raw[:first_record] + raw[first_record + 1 :]))
    df = transcripts.read(path)
    assert len(df) == 7
    (issue,) = parse._disagreements(df)
    assert issue["source_line"] == 0 and issue["reason"].startswith(
        "cross-check responses: rows give 7, the transcript"
    )


def test_strict_raises_with_file_and_line(tmp_path):
    lines = fixture_lines(TOOL_HEAVY)
    lines[20] = b"{broken\n"
    path = write(tmp_path / "t.jsonl", lines)
    with pytest.raises(transcripts.TranscriptError, match=rf"^{path}:21: invalid JSON") as info:
        transcripts.read(path, strict=True)
    assert (info.value.path, info.value.line) == (str(path), 21)
    assert cli.main([str(path), "--strict"]) == 1
    assert cli.main([str(path)]) == 0


def test_claude_stream_result_disagreement_is_recorded_not_trusted(tmp_path):
    lines = [json.loads(x) for x in fixture_lines(STREAM)]
    lines[-1]["usage"].update(input_tokens=0, cache_creation_input_tokens=436, cache_read_input_tokens=21_300)
    df = transcripts.read(write(tmp_path / "s.txt", lines))  # a "last turn only" result (codegraph 04c0f8e)
    checks = {c["field"]: c for c in df.attrs["crosscheck"]}
    assert not checks["cache_read_tokens"]["agree"]
    assert (checks["cache_read_tokens"]["rows_sum"], checks["cache_read_tokens"]["reported"]) == (57_775, 21_300)
    assert int(df.cache_read_tokens.sum()) == 57_775  # rows keep the per-response values


def test_claude_stream_partial_messages_give_final_output(tmp_path):
    lines = [json.loads(x) for x in fixture_lines(STREAM)]
    deltas = []
    for message_id, output in [("msg_01S8K5758zZtTEadiZUZLbR8", 60), ("msg_019JYVTtfAyUVZSDaAZMTnpd", 500)]:
        start = {"type": "message_start", "message": {"id": message_id}}
        delta = {"type": "message_delta", "usage": {"output_tokens": output}}
        deltas += [{"type": "stream_event", "event": e, "session_id": "s"} for e in (start, delta)]
    lines[1:1] = deltas
    df = transcripts.read(write(tmp_path / "s.txt", lines))
    assert df.output_tokens.tolist() == [60, 500, 46]  # the last response's final comes from result: 606-561
    assert df.attrs["issues"] == []


def test_claude_synthetic_error_and_compact_boundary_are_events(tmp_path):
    lines = [json.loads(x) for x in fixture_lines(SESSION)]
    synthetic = {
        "type": "assistant",
        "isApiErrorMessage": True,
        "sessionId": "s",
        "message": {"id": "x", "model": "<synthetic>", "content": [{"type": "text", "text": "API Error"}]},
    }
    boundary = {
        "type": "system",
        "subtype": "compact_boundary",
        "sessionId": "s",
        "compactMetadata": {"trigger": "auto", "preTokens": 167_094},
        "timestamp": "2026-02-11T21:18:41Z",
    }
    lines[4:4] = [synthetic, boundary]
    df = transcripts.read(write(tmp_path / "t.jsonl", lines))
    assert len(df) == 3
    kinds = [(e["kind"], e["source_line"], e["cycle"]) for e in df.attrs["events"]]
    assert kinds == [("api_error", 5, 1), ("system:compact_boundary", 6, 1)]
    assert df.attrs["events"][1]["detail"]["compactMetadata"]["preTokens"] == 167_094


# --- Codex traps ---------------------------------------------------------------------------------


def uuid7(ms: int) -> str:
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0b10 << 62) | 0x1234))


def codex_usage(inp: int, cached: int, out: int, reasoning: int = 0, write: int | None = None) -> dict:
    usage = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out}
    usage |= {"reasoning_output_tokens": reasoning, "total_tokens": inp + out}
    return usage if write is None else usage | {"cache_write_input_tokens": write}


def token_count(total: dict | None, last: dict | None = None, used: float = 12.5) -> dict:
    info = None if total is None else {"total_token_usage": total, "last_token_usage": last or total}
    limits = {"primary": {"used_percent": used, "window_minutes": 300}, "credits": None}
    return {"type": "event_msg", "payload": {"type": "token_count", "info": info, "rate_limits": limits}}


def plus(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in a}


def call(call_id: str, name: str = "exec_command") -> dict:
    return {"type": "response_item", "payload": {"type": "function_call", "name": name, "call_id": call_id}}


def call_output(call_id: str, output: str) -> dict:
    return {"type": "response_item", "payload": {"type": "function_call_output", "call_id": call_id, "output": output}}


ASSISTANT = {"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": []}}


def test_codex_reemitted_token_counts_collapse(tmp_path):
    a, b = codex_usage(1_123, 0, 17, 1), codex_usage(2_123, 1_000, 27, 2)
    lines = [
        {"type": "session_meta", "payload": {"id": uuid7(1_000), "cli_version": "0.160.0"}},
        {"type": "turn_context", "payload": {"turn_id": uuid7(1_001), "model": "sim-model"}},
        token_count(None, used=10.0),  # rate limits at turn start: not a response
        call("c1"),
        call_output("c1", "Chunk ID: 1\nProcess exited with code 2\nOutput:\nno such file\n"),
        token_count(a, used=11.0),
        token_count(a, used=11.0),  # byte-identical re-emit
        ASSISTANT,
        token_count(plus(a, b), b, used=12.5),
        token_count(plus(a, b), b, used=12.5),
    ]
    df = transcripts.read(write(tmp_path / "rollout.jsonl", lines))
    assert df.input_tokens.tolist() == [1_123, 2_123] and df.cache_read_tokens.tolist() == [0, 1_000]
    assert df.tool_calls.tolist() == [1, 0] and df.model.tolist() == ["sim-model"] * 2
    assert df.attrs["files"][0]["collapsed_reemits"] == 2
    assert df.attrs["rate_limits"] == [
        {"source_path": str(tmp_path / "rollout.jsonl"), "limit": "primary", "first": 10.0, "window_minutes": 300}
        | {"last": 12.5}
    ]
    assert all(c["agree"] for c in df.attrs["crosscheck"])
    tools = transcripts.tool_results(tmp_path / "rollout.jsonl")
    assert tools[["tool", "category", "cycle", "is_error"]].values.tolist() == [["exec_command", "exec", 1, True]]


def test_codex_fork_replay_is_not_counted(tmp_path):
    parent_a, parent_b = codex_usage(10_000, 0, 100), codex_usage(12_000, 9_000, 200)
    own = codex_usage(13_000, 12_000, 50)
    replayed_total = plus(parent_a, parent_b)
    lines = [
        {"type": "session_meta", "payload": {"id": uuid7(5_000), "forked_from_id": uuid7(1_000)}},
        {"type": "session_meta", "payload": {"id": uuid7(1_000)}},  # the parent's meta, replayed
        {"type": "turn_context", "payload": {"turn_id": uuid7(1_001), "model": "gpt-5.5"}},
        call("p1"),
        token_count(parent_a),
        token_count(replayed_total, parent_b),
        {"type": "turn_context", "payload": {"turn_id": uuid7(5_001), "model": "gpt-5.5"}},
        token_count(replayed_total, parent_b),  # replayed again after the child's own turn began
        ASSISTANT,
        token_count(plus(replayed_total, own), own),
    ]
    df = transcripts.read(write(tmp_path / "fork.jsonl", lines))
    assert df.input_tokens.tolist() == [13_000] and df.output_tokens.tolist() == [50]
    assert df.tool_calls.tolist() == [0] and df.turn.tolist() == [1]
    assert df.attrs["files"][0]["skipped_replay"] == 2
    assert all(c["agree"] for c in df.attrs["crosscheck"])  # last total minus the replayed baseline


def test_codex_usage_records_preferred_and_other_threads_ignored(tmp_path):
    own_id = uuid7(2_000)
    first, second = codex_usage(1_123, 0, 17, 1, write=50), codex_usage(2_123, 1_000, 27, 2, write=100)

    def record(thread: str, response: str, usage: dict) -> dict:
        payload = {"thread_id": thread, "response_id": response, "usage": usage, "thread_token_usage": usage}
        return {"type": "token_usage_record", "payload": payload}

    lines = [
        {"type": "session_meta", "payload": {"id": own_id, "cli_version": "0.169.0"}},
        {"type": "turn_context", "payload": {"turn_id": uuid7(2_001), "model": "sim-model"}},
        call("c1"),
        call("c2"),
        record(own_id, "resp_1", first),
        record(own_id, "resp_1", first),  # the same response twice
        record(uuid7(1_000), "resp_parent", second),  # another thread's record
        token_count(first),
        record(own_id, "resp_2", second),
        token_count(plus(first, second), second),
    ]
    df = transcripts.read(write(tmp_path / "r.jsonl", lines))
    assert df.source_line.tolist() == [5, 9]
    assert df.cache_write_tokens.tolist() == [50, 100] and df.tool_calls.tolist() == [2, 0]
    assert df.attrs["files"][0]["usage_from"] == "token_usage_record"


def test_codex_rollout_without_usage_gives_unknown_rows(tmp_path):
    lines = [
        {"type": "session_meta", "payload": {"id": uuid7(1)}},
        token_count(None),  # turn start, rate limits only
        call("c1"),
        token_count(None),
        ASSISTANT,
        token_count(None),
    ]
    df = transcripts.read(write(tmp_path / "r.jsonl", lines))
    assert df.usage_known.tolist() == [False, False]
    assert df.input_tokens.isna().all() and df.total_tokens.isna().all()


def exec_stdout(thread: str, cumulative: dict, exit_code: int = 0) -> list[dict]:
    item = {"id": "item_1", "type": "command_execution", "aggregated_output": "Files: a.txt b.txt\n"}
    return [
        {"type": "thread.started", "thread_id": thread},
        {"type": "turn.started"},
        {"type": "item.completed", "item": item | {"exit_code": exit_code, "status": "completed"}},
        {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": cumulative},
    ]


def test_codex_exec_resume_gives_per_turn_deltas_without_double_count(tmp_path):
    turn1 = {"input_tokens": 6_369, "cached_input_tokens": 3_000, "cache_write_input_tokens": 300}
    turn1 |= {"output_tokens": 81, "reasoning_output_tokens": 6}
    turn2 = {"input_tokens": 21_738, "cached_input_tokens": 15_000, "cache_write_input_tokens": 700}
    turn2 |= {"output_tokens": 200, "reasoning_output_tokens": 10}
    first = write(tmp_path / "turn1.jsonl", exec_stdout("th-1", turn1))
    second = write(tmp_path / "turn2.jsonl", exec_stdout("th-1", turn2, exit_code=1))
    both = write(tmp_path / "both.jsonl", [*exec_stdout("th-1", turn1), *exec_stdout("th-1", turn2)[1:]])
    for paths in ([first, second], [second, first], [both, second, first]):
        df = transcripts.read(paths).sort_values("turn")
        assert df.turn.tolist() == [1, 2], paths
        assert df.input_tokens.tolist() == [6_369, 21_738 - 6_369]
        assert df.cache_read_tokens.tolist() == [3_000, 12_000]
        assert df.output_tokens.tolist() == [81, 119] and df.reasoning_tokens.tolist() == [6, 4]
        assert int(df.input_tokens.sum()) == 21_738  # the thread total, never 6,369 + 21,738
        assert df.cycle.tolist() == [0, 1] and df.trial_id.tolist() == ["th-1"] * 2 and df.tool_calls.tolist() == [1, 1]
    tools = transcripts.tool_results([first, second])
    assert tools.is_error.tolist() == [False, True] and tools.category.tolist() == ["exec", "exec"]


def test_codex_exec_zero_usage_is_unknown(tmp_path):
    zeros = dict.fromkeys(["input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"], 0)
    df = transcripts.read(write(tmp_path / "z.jsonl", exec_stdout("th-z", zeros)))
    assert df.usage_known.tolist() == [False] and df.input_tokens.isna().all()


# --- property: mutated real transcripts --------------------------------------------------------

BASE = fixture_lines(TOOL_HEAVY)
IDS = [json.loads(x)["message"]["id"] if json.loads(x).get("type") == "assistant" else None for x in BASE]
OUTPUTS = [json.loads(x)["message"]["usage"]["output_tokens"] if i else None for x, i in zip(BASE, IDS, strict=True)]


OPS = ["keep", "keep", "keep", "drop", "dup", "corrupt"]  # keep is the commonest: mutants stay close to real


@settings(max_examples=50, deadline=None)
@given(
    ops=st.lists(st.sampled_from(OPS), min_size=len(BASE), max_size=len(BASE)),
    truncate_end=st.booleans(),
)
def test_mutations_never_invent_or_lose_rows(ops, truncate_end):
    out: list[bytes] = []
    meta: list[tuple[str | None, bool, int | None]] = []  # per written line: message id, valid JSON, output
    largest: dict[str, int] = {}  # per message id: the largest output among its surviving lines
    for line, message_id, output, op in zip(BASE, IDS, OUTPUTS, ops, strict=True):
        if op == "drop":
            continue
        copies = 2 if op == "dup" else 1
        written = line[: len(line) // 2] + b"\n" if op == "corrupt" else line
        out += [written] * copies
        meta += [(message_id, op != "corrupt", output)] * copies
    if truncate_end and out:
        out[-1] = out[-1][: max(1, len(out[-1]) // 2)].rstrip(b"\n")
        meta[-1] = (meta[-1][0], False, None)
    expected: dict[str, int] = {}
    for number, (message_id, valid, output) in enumerate(meta, start=1):
        if message_id is not None and valid:
            expected[message_id] = number
            largest[message_id] = max(output, largest.get(message_id, -1))
    bad = [number for number, (_, valid, _) in enumerate(meta, start=1) if not valid]
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder) / "mutant.jsonl", out)
        df = transcripts.read(path, format="claude_session")
        assert len(df) <= len({i for i in IDS if i})
        assert df.source_line.tolist() == sorted(expected.values())
        assert df.output_tokens.tolist() == [largest[i] for i in sorted(expected, key=expected.get)]
        assert [i["source_line"] for i in df.attrs["issues"]] == (bad or ([0] if not out else []))
        if bad:
            with pytest.raises(transcripts.TranscriptError, match=rf"^{path}:{bad[0]}: "):
                transcripts.read(path, format="claude_session", strict=True)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 10**7), st.floats(allow_nan=False), st.text(max_size=4)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=8,
)
REAL = {
    path: [json.loads(x) for x in fixture_lines(path)]
    for path in (TOOL_HEAVY, STREAM, TRANSCRIPTS / "codex-rollout_agent-history_codex_exec_0.135.0.jsonl")
}


def _places(obj: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside a JSON object (the object itself included)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    return [prefix] + [p for key, value in items for p in _places(value, (*prefix, key))]


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_any_value_in_any_field_is_read_or_reported_never_a_crash(data):
    path = data.draw(st.sampled_from(sorted(REAL)))
    lines = json.loads(json.dumps(REAL[path]))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(1, len(lines) - 1))  # keep line 1, which tells the format apart
        place = data.draw(st.sampled_from(_places(lines[index])))
        value = data.draw(JSON_VALUES)
        if not place:
            lines[index] = value
            continue
        parent = lines[index]
        for key in place[:-1]:
            parent = parent[key]
        parent[place[-1]] = value
    with tempfile.TemporaryDirectory() as folder:
        mutant = write(Path(folder) / path.name, [orjson.dumps(x) + b"\n" for x in lines])
        df = transcripts.read(mutant)
        transcripts.tool_results(mutant)
        assert (df[TOKENS].fillna(0) >= 0).all().all()
        assert not (df.usage_known.fillna(False) & df.input_tokens.isna()).any()


def _api_session(tmp_path: Path, name: str, refs: list[str | None], sent: list[str]) -> Path:
    """A CLI 2.1.3xx-shaped session: api-request lines (``sent``), and one response per ``refs`` entry."""
    lines: list[dict] = [{"type": "user", "message": {"role": "user", "content": "go"}, "isSidechain": False}]
    lines += [{"type": "api-request", "id": rid, "params": {"model": "m"}} for rid in sent]
    usage = {"input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10, "output_tokens": 2}
    for n, ref in enumerate(refs):
        message = {"id": f"msg_{name}_{n}", "model": "m", "content": [{"type": "text", "text": "ok"}], "usage": usage}
        lines.append({"type": "assistant", "message": message, "requestId": f"req_{name}_{n}", "requestRef": ref})
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_requests_without_a_response_are_stated_not_guessed(tmp_path):
    """An api-request line no response names (a killed CLI, a failed try): crosschecked, no row invented."""
    path = _api_session(tmp_path, "s", ["A"], ["A", "B"])
    df = transcripts.read(path)
    assert len(df) == 1 and df.attrs["issues"] == []
    (check,) = df.attrs["crosscheck"]
    assert (check["field"], check["source_line"], check["rows_sum"], check["reported"]) == ("requests", 3, 1, 2)
    assert check["agree"] is False and "usage is unknown" in check["note"]
    (issue,) = parse._disagreements(df)  # the parse stage lists it in parse_issues, with its place
    assert (issue["source_path"], issue["source_line"]) == (str(path), 3)
    assert issue["reason"].startswith("cross-check requests: rows give 1, the transcript says 2; 1 api-request")
    # answered in another file of the same read (a subagent's request logged by its parent): agreed
    other = _api_session(tmp_path, "sub", ["B"], [])
    both = transcripts.read([path, other])
    assert [c["agree"] for c in both.attrs["crosscheck"]] == [True]
    assert transcripts.read(_api_session(tmp_path, "old", [None], [])).attrs["crosscheck"] == []  # older CLIs


def test_utf8_check_by_blocks_joins_a_character_cut_at_a_block_end():
    """``_utf8`` checks a chunk a block at a time: a character split between two blocks is valid, a bad byte
    in any block or a character cut at the data's end is not."""
    cut = _base.UTF8_BLOCK - 1
    blob = b"a" * cut + "→".encode() + b"b" * _base.UTF8_BLOCK  # 3 bytes: 1 in the first block, 2 in the next
    assert _base._utf8(blob, memoryview(blob))
    bad = blob + b"\xff"
    assert not _base._utf8(bad, memoryview(bad))
    assert not _base._utf8(blob + b"\xe2\x86", memoryview(blob + b"\xe2\x86"))
