"""``output_chars``: the characters a response wrote, per format, checked against an independent count.

Each expected figure is computed here from the raw JSON lines with the standard library (``json``),
never through the readers, and one response per format is also spelled out by hand. Where the source
does not show what the model wrote, the column is missing, never zero (docs/method.md#transcripts).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pandas as pd

from kit import tokens, transcripts
from tests.support import ACOMPACT, CODE_MODE, NEWEST, ROLLOUT, SESSION, STREAM, TOOL_HEAVY, TRANSCRIPTS


def lines(path: Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def claude_expected(path: Path) -> list[int]:
    """Per message.id, in first-seen order: each distinct block once (text, thinking, tool input JSON)."""
    blocks: dict[str, dict[tuple, int]] = {}
    for line in lines(path):
        if line.get("type") != "assistant":
            continue
        message = line["message"]
        seen = blocks.setdefault(message["id"], {})
        for block in message["content"]:
            kind = block["type"]
            if kind == "text":
                seen[(kind, block["text"])] = len(block["text"])
            elif kind == "thinking":
                seen[(kind, block["thinking"])] = len(block["thinking"])
            elif kind == "tool_use":
                seen[(kind, block["id"])] = len(compact(block["input"]))
    return [sum(found.values()) for found in blocks.values()]


def test_claude_session_and_stream_json_every_fixture():
    for path in (SESSION, STREAM, TOOL_HEAVY, ACOMPACT, NEWEST):
        assert transcripts.read(path).output_chars.tolist() == claude_expected(path), path.name


def test_claude_by_hand():
    # tool_heavy's …TgDSj7e6 spans 4 lines: text "\n\n", a 155-character thinking, two tool_use inputs
    raw = {n: line for n, line in enumerate(lines(TOOL_HEAVY), start=1)}
    assert raw[27]["message"]["content"][0]["text"] == "\n\n"
    assert len(raw[28]["message"]["content"][0]["thinking"]) == 155
    search = '{"query":"xterm.js scroll not working embedded page captures scroll events"}'
    assert compact(raw[29]["message"]["content"][0]["input"]) == search
    glob = '{"pattern":"assets/js/**/*.js"}'
    assert compact(raw[30]["message"]["content"][0]["input"]) == glob
    assert transcripts.read(TOOL_HEAVY).output_chars.iloc[2] == 2 + 155 + len(search) + len(glob)
    # the CodeContextBench pair: the first response is one Read call, the same in both files
    read_call = '{"file_path":"/workspace/submission.json"}'
    assert transcripts.read(SESSION).output_chars.iloc[0] == transcripts.read(STREAM).output_chars.iloc[0] == 42
    assert len(read_call) == 42


def test_claude_block_repeated_on_a_later_line_counts_once(tmp_path):
    """Streaming snapshots can repeat a block on a later line of the same response: counted once."""
    raw = TOOL_HEAVY.read_bytes().splitlines(keepends=True)
    repeated = [*raw[:30], raw[28], *raw[30:]]  # a tool_use line again, after the response's last line
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(repeated))
    assert transcripts.read(path).output_chars.tolist() == transcripts.read(TOOL_HEAVY).output_chars.tolist()


def test_claude_unknown_where_the_content_is_not_there(tmp_path):
    """A null content, or a tool call without its input: the response's characters are unknown."""
    raw = lines(NEWEST)
    for edit in ({"content": None}, {"content": [{"type": "tool_use", "id": "toolu_1", "name": "Read"}]}):
        changed = [
            line | {"message": line["message"] | edit} if line.get("type") == "assistant" else line for line in raw
        ]
        path = tmp_path / "s.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in changed))
        df = transcripts.read(path)
        assert len(df) == 1 and df.usage_known.all() and pd.isna(df.output_chars.iloc[0]), edit


def codex_expected(path: Path) -> list[int]:
    """Per response (items up to its usage line): assistant text, reasoning summary and content text,
    function-call arguments, custom-tool input. Records are the rows where the file has them."""
    raw = lines(path)
    boundary = "token_usage_record" if any(line["type"] == "token_usage_record" for line in raw) else "token_count"
    out, chars = [], 0
    for line in raw:
        payload = line["payload"]
        kind = payload.get("type")
        if line["type"] == "response_item":
            if kind == "message" and payload["role"] == "assistant":
                chars += sum(len(part["text"]) for part in payload["content"])
            elif kind == "reasoning":
                parts = (payload.get("summary") or []) + (payload.get("content") or [])
                chars += sum(len(part["text"]) for part in parts)
            elif kind == "function_call":
                chars += len(payload["arguments"])
            elif kind == "custom_tool_call":
                chars += len(payload["input"])
        elif line["type"] == boundary or (line["type"] == "event_msg" and kind == boundary and payload["info"]):
            out.append(chars)
            chars = 0
    return out


def test_codex_rollouts_every_fixture():
    for path in (ROLLOUT, CODE_MODE):
        assert transcripts.read(path).output_chars.tolist() == codex_expected(path), path.name


def test_codex_by_hand():
    raw = {n: line["payload"] for n, line in enumerate(lines(CODE_MODE), start=1)}
    summary = "**Planning file reading and patch application**"
    assert raw[10]["summary"][0]["text"] == summary and raw[12]["content"][0]["text"] == "Starting fixture work."
    cell = raw[13]["input"]
    assert cell.startswith("const r = await tools.exec_command({cmd:") and raw[14 - 1]["type"] == "custom_tool_call"
    first = transcripts.read(CODE_MODE).output_chars.iloc[0]
    assert first == len(summary) + len("Starting fixture work.") + len(cell) == 47 + 22 + len(cell)
    # the 0.135 rollout: one response, a redacted answer and an encrypted reasoning (not counted)
    items = [line["payload"] for line in lines(ROLLOUT) if line["type"] == "response_item"]
    answer = next(i for i in items if i.get("role") == "assistant")["content"][0]["text"]
    assert transcripts.read(ROLLOUT).output_chars.tolist() == [len(answer)]


def test_codex_call_given_as_an_action_is_unknown(tmp_path):
    """A ``local_shell_call`` keeps a parsed action, not the text the model sent: that response is NA."""
    raw = lines(CODE_MODE)
    raw[12] = raw[12] | {"payload": {"type": "local_shell_call", "call_id": "c1", "action": {"command": ["ls"]}}}
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in raw))
    chars = transcripts.read(path).output_chars
    assert pd.isna(chars.iloc[0]) and chars.iloc[1:].tolist() == codex_expected(CODE_MODE)[1:]


def test_codex_exec_json_turns(tmp_path):
    """``codex exec --json``: messages, reasoning and MCP arguments count; a command is not given as sent."""
    events = [
        {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Scanning the repo**"}},
        {
            "type": "item.completed",
            "item": {
                "id": "item_1",
                "type": "mcp_tool_call",
                "server": "docs",
                "tool": "search",
                "arguments": {"query": "cache"},
                "result": {"content": [{"type": "text", "text": "found"}]},
                "status": "completed",
            },
        },
        {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "Done."}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 0, "output_tokens": 9}},
        {"type": "turn.started"},
        {
            "type": "item.completed",
            "item": {
                "id": "item_3",
                "type": "command_execution",
                "command": "bash -lc ls",
                "aggregated_output": "a\n",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {"type": "turn.completed", "usage": {"input_tokens": 250, "cached_input_tokens": 0, "output_tokens": 20}},
    ]
    path = tmp_path / "exec.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    chars = transcripts.read(path).output_chars
    assert chars.iloc[0] == len("**Scanning the repo**") + len('{"query":"cache"}') + len("Done.")
    assert pd.isna(chars.iloc[1])


def sdk_line(api: str, response: dict) -> dict:
    return {"kit_sdk": 1, "api": api, "turn": 1, "cycle": 0, "response": response}


def test_sdk_records_each_api(tmp_path):
    usage = {"input_tokens": 10, "output_tokens": 5}
    responses = {
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan."}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hi."}]},
            {"type": "function_call", "name": "read_file", "call_id": "c1", "arguments": '{"path":"a.py"}'},
        ],
        "usage": usage,
    }
    chat = {
        "choices": [
            {"message": {"content": "Hi.", "tool_calls": [{"id": "c1", "function": {"arguments": '{"p":1}'}}]}}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    messages = {
        "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "c2lnbmF0dXJl"},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "é.py"}},
        ],
        "usage": usage,
    }
    hosted = {"output": [{"type": "web_search_call", "action": {"query": "x"}}], "usage": usage}
    path = tmp_path / "sdk.jsonl"
    records = [sdk_line("responses", responses), sdk_line("chat", chat), sdk_line("messages", messages)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*records, sdk_line("responses", hosted)]))
    chars = transcripts.read(path).output_chars
    assert chars.iloc[:3].tolist() == [5 + 3 + 15, 3 + 7, 4 + len('{"path":"é.py"}')]
    assert pd.isna(chars.iloc[3])  # a hosted tool's call is given as its action: unknown


def test_sdk_records_count_their_blocks_as_sent_back_with_the_tool_results_only(tmp_path):
    """``output_o200k_tokens`` of an SDK record: each block of the body as the agent sends it back, its null keys
    left out (the body as received spells them out), a signature emptied (docs/method.md#calibration)."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}]}
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "grep", "arguments": '{"p":"x"}'}
    responses = {"output": [{**reasoning, "content": None, "status": None}, {**call, "caller": None}]}
    thinking = {"type": "thinking", "thinking": "Hmm.", "signature": "c2lnbmF0dXJl"}
    messages = {"content": [thinking, {"type": "text", "text": "Hi.", "citations": None}]}
    path = tmp_path / "sdk.jsonl"
    lines = [sdk_line("responses", {**responses, "usage": {}}), sdk_line("messages", {**messages, "usage": {}})]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    def count(block: dict) -> int:
        return tokens.count(orjson.dumps(block).decode())

    full, _ = transcripts.tables(path)
    expected = [
        count(reasoning) + count(call),
        count({**thinking, "signature": ""}) + count({"type": "text", "text": "Hi."}),
    ]
    assert full["output_o200k_tokens"].tolist() == expected
    assert transcripts.read(path)["output_o200k_tokens"].isna().all()


def test_provider_log_has_no_content(tmp_path):
    """The provider log keeps usage and prompt segments, not what the model wrote: NA, never 0."""
    usage = {"input_tokens": 1234, "cache_read_tokens": 1024, "output_tokens": 56}
    line = {"kit_provider_log": 1, "status": 200, "trial_id": "r0-a", "usage": usage, "tool_calls": 1}
    path = tmp_path / "provider_log.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    df = transcripts.read(path)
    assert df.usage_known.tolist() == [True] and df.output_chars.isna().all()


def test_every_fixture_response_has_output_chars():
    df = transcripts.read(TRANSCRIPTS)
    exec_turns = df.source_format == "codex_exec"  # a turn that ran a command gives it as what ran: NA by design
    assert str(df.output_chars.dtype) == "Int64" and df[~exec_turns].output_chars.notna().all() and len(df) == 34
