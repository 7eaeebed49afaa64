"""Every verified fact of tests/fixtures/transcripts/README.md, reproduced by the readers.

The fixtures are real transcripts read in place (read-only). Where the README shows a figure to be
wrong (per-event sums, Harbor's old result), the test computes that figure from the raw file too and
checks the reader does not produce it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kit import schema, transcripts
from kit.cli import parse as cli
from tests.support import ACOMPACT, CODE_MODE, HARBOR, NEWEST, ROLLOUT, SESSION, STREAM, TOOL_HEAVY, TRANSCRIPTS

SIZES = {
    SESSION: 15_357,
    STREAM: 7_449,
    HARBOR: 3_235,
    TOOL_HEAVY: 39_279,
    ACOMPACT: 27_352,
    ROLLOUT: 3_524,
    NEWEST: 1_916,
}


def raw_lines(path: Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def assistant_events(path: Path) -> list[dict]:
    return [line["message"] for line in raw_lines(path) if line.get("type") == "assistant"]


def anthropic_parts(df: pd.DataFrame) -> dict[str, int]:
    """Sums in Anthropic's own terms (input excluding the cache), from canonical rows."""
    return {
        "input": int((df.input_tokens - df.cache_read_tokens - df.cache_write_tokens).sum()),
        "cache_creation": int(df.cache_write_tokens.sum()),
        "cache_read": int(df.cache_read_tokens.sum()),
        "output": int(df.output_tokens.sum()),
    }


def test_fixtures_are_the_documented_files_unchanged():
    assert {p: p.stat().st_size for p in SIZES} == SIZES


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (SESSION, "claude_session"),
        (STREAM, "claude_stream"),
        (TOOL_HEAVY, "claude_session"),
        (ACOMPACT, "claude_session"),
        (ROLLOUT, "codex_rollout"),
        (NEWEST, "claude_session"),
    ],
)
def test_detect(path, fmt):
    assert transcripts.detect(path) == fmt


def test_harbor_result_json_is_not_a_transcript():
    with pytest.raises(transcripts.TranscriptError, match=r"harbor-result_ccb_paired\.json:0: cannot detect"):
        transcripts.detect(HARBOR)


# --- the CodeContextBench pair: stream-json and session file of one run ---------------------------


def test_pair_three_requests_appear_as_four_events():
    events = assistant_events(STREAM)
    assert len(events) == 4
    assert len({m["id"] for m in events}) == 3
    assert [m["id"] for m in events].count("msg_019JYVTtfAyUVZSDaAZMTnpd") == 2
    assert len(transcripts.read(STREAM)) == 3
    assert len(transcripts.read(SESSION)) == 3


def test_pair_deduped_usage_equals_result_usage():
    result = next(line for line in raw_lines(STREAM) if line["type"] == "result")["usage"]
    expected = {"input": 2, "cache_creation": 6_464, "cache_read": 57_775}
    assert {k: result[f"{k}_tokens" if k == "input" else f"{k}_input_tokens"] for k in expected} == expected
    stream, session = anthropic_parts(transcripts.read(STREAM)), anthropic_parts(transcripts.read(SESSION))
    assert {k: stream[k] for k in expected} == expected
    assert {k: session[k] for k in expected} == expected


def test_pair_output_from_result_for_stream_and_as_stated_for_session():
    assert anthropic_parts(transcripts.read(STREAM))["output"] == 606
    # The session file states a partial 1 per response (anthropics/claude-code#22686): 3, not 606.
    session = transcripts.read(SESSION)
    assert session.output_tokens.tolist() == [1, 1, 1]
    assert all(m["usage"]["output_tokens"] == 1 for m in assistant_events(SESSION))


def test_pair_stream_crosscheck_records_the_output_disagreement():
    checks = {c["field"]: c for c in transcripts.read(STREAM).attrs["crosscheck"]}
    assert checks.keys() == {"input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens"}
    assert checks["input_tokens"]["agree"] and checks["input_tokens"]["reported"] == 64_241
    assert checks["cache_read_tokens"]["agree"] and checks["cache_write_tokens"]["agree"]
    out = checks["output_tokens"]
    assert (out["agree"], out["rows_sum"], out["reported"]) == (False, 3, 606)
    assert "partial" in out["note"] and "603" in out["note"]


def test_pair_per_event_sums_are_wrong():
    events = assistant_events(STREAM)
    per_event_creation = sum(m["usage"]["cache_creation_input_tokens"] for m in events)
    per_event_read = sum(m["usage"]["cache_read_input_tokens"] for m in events)
    assert (per_event_creation, per_event_read) == (6_561, 78_978)
    parts = anthropic_parts(transcripts.read(STREAM))
    assert (parts["cache_creation"], parts["cache_read"]) != (per_event_creation, per_event_read)
    assert per_event_read / parts["cache_read"] == pytest.approx(1.367, abs=0.001)  # 37% over


def test_pair_per_request_context():
    for path in (STREAM, SESSION):
        assert transcripts.read(path).input_tokens.tolist() == [21_205, 21_300, 21_736]


def test_harbor_old_accounting_is_wrong_and_truth_is_recovered():
    agent = json.loads(HARBOR.read_text())["agent_result"]
    events = assistant_events(STREAM)
    per_event_read = sum(m["usage"]["cache_read_input_tokens"] for m in events)
    assert agent["n_input_tokens"] == 78_980 == 2 + per_event_read  # cache_creation left out, no dedupe
    assert agent["n_cache_tokens"] == 78_978 == per_event_read
    assert agent["n_output_tokens"] == 4 == sum(m["usage"]["output_tokens"] for m in events)
    df = transcripts.read(STREAM)
    assert int(df.input_tokens.sum()) == 64_241 == 2 + 6_464 + 57_775
    assert int(df.output_tokens.sum()) == 606
    assert int(df.input_tokens.sum()) != agent["n_input_tokens"]
    assert int(df.output_tokens.sum()) != agent["n_output_tokens"]


# --- spotter tool_heavy: streamed snapshots and 1-hour writes ------------------------------------


def test_tool_heavy_four_requests_from_nine_lines():
    assert len(assistant_events(TOOL_HEAVY)) == 9
    df = transcripts.read(TOOL_HEAVY)
    assert len(df) == 4
    assert df.cycle.tolist() == [0, 1, 2, 3]
    assert df.source_line.tolist() == [5, 13, 30, 37]


def test_session_turns_start_at_the_users_text_not_at_tool_results_or_cli_lines():
    """tool_heavy: a prompt (line 4), then an interrupt, ``/mcp`` with its caveat and output, and the
    second prompt (lines 18-26) before the next response: two turns. The pair's session and stream-json
    agree (one turn); the subagent's compaction request belongs to no turn of its own file."""
    users = [(n, line) for n, line in enumerate(raw_lines(TOOL_HEAVY), start=1) if line.get("type") == "user"]
    texts = [n for n, line in users if "tool_result" not in str(line)]
    assert texts == [4, 18, 20, 21, 22, 26, 39]
    assert transcripts.read(TOOL_HEAVY).turn.tolist() == [1, 1, 2, 2]
    assert transcripts.read(SESSION).turn.tolist() == transcripts.read(STREAM).turn.tolist() == [1, 1, 1]
    assert transcripts.read(ACOMPACT).turn.isna().all()


def test_tool_heavy_dedupe_keeps_173_not_25():
    lines = raw_lines(TOOL_HEAVY)
    outputs = [
        (n, line["message"]["usage"]["output_tokens"])
        for n, line in enumerate(lines, start=1)
        if line.get("type") == "assistant" and line["message"]["id"].endswith("BN5jdsym")
    ]
    assert outputs == [(34, 25), (37, 173)]
    assert lines[35 - 1]["type"] == "progress" and lines[36 - 1]["type"] == "user"  # a tool_result in between
    row = transcripts.read(TOOL_HEAVY).iloc[3]
    assert (row.output_tokens, row.source_line, row.tool_calls) == (173, 37, 2)


def test_tool_heavy_request_spanning_four_lines():
    ids = [m["id"] for m in assistant_events(TOOL_HEAVY)]
    assert sum(i.endswith("TgDSj7e6") for i in ids) == 4
    row = transcripts.read(TOOL_HEAVY).iloc[2]
    assert (row.input_tokens, row.output_tokens, row.tool_calls) == (3 + 8_490 + 18_014, 11, 2)


def test_tool_heavy_writes_are_one_hour():
    df = transcripts.read(TOOL_HEAVY)
    assert (df.cache_write_1h_tokens == df.cache_write_tokens).all()
    assert df.cache_write_1h_tokens.tolist() == [7_883, 208, 8_490, 1_115]


def test_pair_writes_are_five_minute():
    assert transcripts.read(SESSION).cache_write_1h_tokens.tolist() == [0, 0, 0]


def test_tool_heavy_tool_results():
    tools = transcripts.tool_results(TOOL_HEAVY)
    assert tools.tool.tolist() == ["Bash", "Bash", "Glob", "WebSearch", "Read", "WebFetch"]
    assert tools.category.tolist() == ["bash", "bash", "grep", "other", "read", "other"]
    assert tools.cycle.tolist() == [1, 2, 3, 3, 4, 4]
    assert not tools.is_error.any()


def test_pair_tool_results_carry_the_error():
    tools = transcripts.tool_results(SESSION)
    assert tools[["tool", "cycle", "is_error"]].values.tolist() == [["Read", 1, True], ["Write", 2, False]]
    assert tools.chars.tolist() == [len("<tool_use_error>File does not exist.</tool_use_error>"), 56]


# --- spotter subagent: the compaction request ----------------------------------------------------


def test_subagent_compaction_request():
    df = transcripts.read(ACOMPACT)
    assert len(df) == 1
    assert (df.cache_read_tokens[0], df.output_tokens[0]) == (166_758, 6)
    assert df.attrs["sidechain_ids"] == [
        {"source_path": str(ACOMPACT), "cycle": 0, "message_id": "msg_01EmKCTGA88TYu4RzLxm2E5i"}
    ]
    assert transcripts.read(TOOL_HEAVY).attrs["sidechain_ids"] == []


# --- codex rollout ------------------------------------------------------------------------------


def test_codex_rollout_usage():
    df = transcripts.read(ROLLOUT)
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.input_tokens, row.cache_read_tokens) == (22_539, 20_864)
    assert (row.output_tokens, row.total_tokens) == (10, 22_549)
    assert row.uncached_input_tokens == 22_539 - 20_864  # cached is inside input: never added on top
    assert (row.reasoning_tokens, row.model, row.backend, row.turn) == (0, "gpt-5.5", "codex", 1)
    assert pd.isna(row.cache_write_tokens)  # 0.135 does not report writes: unknown, not zero


def test_codex_rollout_rate_limits_and_crosscheck():
    df = transcripts.read(ROLLOUT)
    limits = {r["limit"]: (r["first"], r["last"], r["window_minutes"]) for r in df.attrs["rate_limits"]}
    assert limits == {"primary": (15.0, 15.0, 300), "secondary": (5.0, 5.0, 10080)}
    assert all(c["agree"] for c in df.attrs["crosscheck"]) and len(df.attrs["crosscheck"]) == 3


def test_code_mode_rollout_usage():
    df = transcripts.read(CODE_MODE)
    assert len(df) == 7  # token_count events and token_usage_record lines agree: one row per response
    totals = df[["input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens"]].sum().tolist()
    assert totals == [109_047, 91_392, 577, 102]
    assert df.tool_calls.sum() == 5  # the exec cells


def test_code_mode_failed_exec_cell_is_an_error():
    """The cell's output says nothing the shell-exit check can read (``"exit_code":7`` inside a JSON string);
    the ``item_completed`` event of the command run in it says ``failed``."""
    lines = raw_lines(CODE_MODE)
    failed = [n for n, line in enumerate(lines, start=1) if line["payload"].get("item", {}).get("status") == "failed"]
    assert failed == [32] and '\\"exit_code\\":7' in json.dumps(lines[33 - 1]["payload"]["output"])
    tools = transcripts.tool_results(CODE_MODE)
    assert tools.tool.tolist() == ["exec"] * 5 and tools.is_error.tolist() == [False, False, False, True, False]
    assert tools.cycle[tools.is_error].tolist() == [4]  # the result of the cell the response at cycle 3 wrote


# --- newest Claude usage shape -------------------------------------------------------------------


def test_newest_session_shape():
    df = transcripts.read(NEWEST)
    row = df.iloc[0]
    assert (row.input_tokens, row.cache_write_tokens, row.cache_write_1h_tokens) == (6 + 1_045 + 3_057, 1_045, 1_045)
    assert (row.cache_read_tokens, row.output_tokens, row.model) == (3_057, 16, "claude-opus-4-7")
    assert df.attrs["files"][0]["cli_version"] == "2.1.152"


# --- the whole folder, and the command line ------------------------------------------------------


def test_folder_reads_every_transcript_with_only_the_issues_its_fixtures_hold():
    """Two fixtures exist for their issue: the Task-subagent stream's usage billed in no event (line 10) and the
    exec stream cut inside its turn (line 2); every other file reads without one."""
    df = transcripts.read(TRANSCRIPTS)
    assert [(Path(i["source_path"]).name, i["source_line"]) for i in df.attrs["issues"]] == [
        ("claude-streamjson_task-subagent_documented.jsonl", 10),
        ("codex-exec_cut-turn_documented.jsonl", 2),
    ]
    counts = {"claude_session": 9 + 2 + 3 + 2, "claude_stream": 3 + 5, "codex_exec": 2, "codex_rollout": 1 + 7}
    # claude_session: the real 9, the late-compaction shape 2, the 2.1.152 nested-writes shape 3, the session
    # committed twice 2 (counted once); the stand-in and /login shapes give none (attrs["accounting"] says why).
    # claude_stream: the harbor capture 3, the Task-subagent shape 5; codex_exec: the resumed thread's 2 turns;
    # codex_rollout: 1 and the Code Mode rollout's 7
    assert df.groupby("source_format").size().to_dict() == counts
    assert list(df.columns) == schema.REQUEST_COLUMNS


def test_cli_prints_totals_and_writes_tables(tmp_path, capsys):
    out = tmp_path / "rows.parquet"
    assert cli.main([str(STREAM), str(SESSION), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "64241" in printed and "606" in printed and "TOTAL" in printed
    # the stream-json capture and the session file are one run: TOTAL counts both, and the issues say so
    twin = f"{SESSION}:0: holds the same run as {STREAM} (3 responses with the same input and cache counts; "
    assert twin in captured.err and captured.err.count("holds the same run") == 1
    back = pd.read_parquet(out)
    assert len(back) == 6 and int(back.output_tokens.sum()) == 609
    csv = tmp_path / "rows.csv"
    assert cli.main([str(ROLLOUT), "--out", str(csv)]) == 0
    assert pd.read_csv(csv).input_tokens.tolist() == [22_539]
