"""Stream-json of a Task run, reconciled per model against ``result.modelUsage`` (issue 31, ``claude_stream``).

The fixture is written to the documented shape of CLI 2.1.41 (tests/fixtures/SOURCES.md). Its numbers, by hand:

- main ``claude-opus-4-5-20251101``: response A (3 + 4,000 written + 10,000 read, true output 300) and the
  answer B (1 + 500 + 14,000, output 500); every event shows output 1.
- subagent ``claude-haiku-4-5-20251001``: S1 (5 + 2,000 + 0, output 80), S2 (2 + 300 + 2,000, output 60), both
  events showing output 1, then its last response F (1 + 400 + 2,300, output 250), shown only by the Task
  result on line 8 (``totalTokens`` 2,951); and one call in no event (120 input, output 30).
- ``modelUsage`` (line 10): opus 4 / 4,500 / 24,000 / 800; haiku 128 / 2,700 / 4,300 / 420. ``result.usage``
  is opus's alone, so the old reader's output total was its 800, against 1,220 billed.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pandas as pd

from kit import transcripts
from kit.transcripts import claude_stream, sources
from tests.support import STREAM, TRANSCRIPTS

FIXTURE = TRANSCRIPTS / "claude-streamjson_task-subagent_documented.jsonl"
OPUS, HAIKU = "claude-opus-4-5-20251101", "claude-haiku-4-5-20251001"
FIELDS = ["input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens"]
BILLED = {  # modelUsage as canonical fields: input_tokens = inputTokens + cache writes + cache reads
    OPUS: {
        "input_tokens": 4 + 4_500 + 24_000,
        "cache_write_tokens": 4_500,
        "cache_read_tokens": 24_000,
        "output_tokens": 800,
    },
    HAIKU: {
        "input_tokens": 128 + 2_700 + 4_300,
        "cache_write_tokens": 2_700,
        "cache_read_tokens": 4_300,
        "output_tokens": 420,
    },
}
GAP = "claude-haiku-4-5-20251001: input_tokens 120 billed per modelUsage but in no event"


def lines() -> list[dict]:
    return [json.loads(x) for x in FIXTURE.read_text().splitlines()]


def write(path: Path, found: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in found))
    return path


def per_model(df) -> dict[str, dict[str, int]]:
    return {m: {f: int(part[f].sum()) for f in FIELDS} for m, part in df.groupby("model")}


def without_gap(found: list[dict]) -> list[dict]:
    """The fixture with modelUsage billing only the calls its events show: haiku less 120 input, 30 output."""
    haiku = found[-1]["modelUsage"][HAIKU]
    haiku.update(inputTokens=haiku["inputTokens"] - 120, outputTokens=haiku["outputTokens"] - 30)
    return found


def test_per_model_totals_equal_model_usage_where_every_call_is_in_an_event(tmp_path):
    df = transcripts.read(write(tmp_path / "s.jsonl", without_gap(lines())))
    haiku = {**BILLED[HAIKU], "input_tokens": BILLED[HAIKU]["input_tokens"] - 120, "output_tokens": 390}
    assert per_model(df) == {OPUS: BILLED[OPUS], HAIKU: haiku}
    assert df.attrs["issues"] == []


def test_the_file_total_is_what_model_usage_bills_not_the_main_models_result_usage():
    df = transcripts.read(FIXTURE)
    assert int(df.output_tokens.sum()) == 800 + 420 == 1_220  # result.usage says 800: opus alone
    found = per_model(df)
    assert found[OPUS] == BILLED[OPUS]
    assert found[HAIKU] == {**BILLED[HAIKU], "input_tokens": BILLED[HAIKU]["input_tokens"] - 120}


def test_missing_output_goes_on_each_models_own_last_response():
    df = transcripts.read(FIXTURE)
    # A, S1, S2, F, B: haiku's 420 - 250 (F, stated) - 1 (S1) = 169 on S2; opus's 800 - 1 (A) = 799 on B
    assert list(zip(df.model, df.output_tokens, strict=True)) == [
        (OPUS, 1),
        (HAIKU, 1),
        (HAIKU, 169),
        (HAIKU, 250),
        (OPUS, 799),
    ]


def test_the_task_result_is_the_subagents_last_response_a_sidechain_row():
    df = transcripts.read(FIXTURE)
    (row,) = df[df.source_line == 8].itertuples()
    assert (row.model, row.cycle, row.turn) == (HAIKU, 3, 1)
    assert (row.input_tokens, row.cache_write_tokens, row.cache_read_tokens, row.output_tokens) == (
        2_701,
        400,
        2_300,
        250,
    )
    assert row.input_tokens + row.output_tokens == lines()[7]["tool_use_result"]["totalTokens"] == 2_951
    assert row.output_chars == len(lines()[7]["tool_use_result"]["content"][0]["text"])
    assert [s["cycle"] for s in df.attrs["sidechain_ids"]] == [1, 2, 3]  # S1, S2 and F: the subagent's


def test_a_gap_is_an_issue_naming_the_model_and_the_result_line():
    df = transcripts.read(FIXTURE)
    (issue,) = df.attrs["issues"]
    assert (issue["source_path"], issue["source_line"]) == (str(FIXTURE), 10)
    assert issue["reason"].startswith(GAP)
    checks = [c for c in df.attrs["crosscheck"] if c["model"] == HAIKU and c["field"] == "input_tokens"]
    assert [(c["rows_sum"], c["reported"], c["agree"]) for c in checks] == [(7_008, 7_128, False)]


def test_result_usage_is_checked_against_the_main_conversation_it_covers():
    checks = {c["field"]: c for c in transcripts.read(FIXTURE).attrs["crosscheck"] if c["model"] is None}
    assert (checks["input_tokens"]["rows_sum"], checks["input_tokens"]["agree"]) == (28_504, True)
    assert "main conversation only" in checks["input_tokens"]["note"]
    out = checks["output_tokens"]
    assert (out["rows_sum"], out["reported"], out["agree"]) == (2, 800, False)  # two opus snapshots of 1
    assert f"{OPUS} +798" in out["note"] and f"{HAIKU} +168" in out["note"]


def test_a_subagent_response_shown_by_an_event_too_is_counted_once(tmp_path):
    found = lines()
    final = {**found[5], "message": {**found[5]["message"], "id": "msg_01TaskSubEEEEEEEEEEEEEE"}}
    final["message"]["usage"] = {**found[7]["tool_use_result"]["usage"], "output_tokens": 1}
    df = transcripts.read(write(tmp_path / "s.jsonl", [*found[:7], final, *found[7:]]))
    assert len(df) == 5 and 9 not in set(df.source_line)  # the Task result (now line 9) names the event's response
    assert per_model(df)[HAIKU]["output_tokens"] == 420
    assert df[df.source_line == 8].output_tokens.tolist() == [250]  # its final output, from the Task result


def test_a_subagent_without_events_takes_its_model_from_the_task_result(tmp_path):
    found = lines()
    del found[3:7]  # the subagent's own events
    found[3]["tool_use_result"]["resolvedModel"] = HAIKU
    df = transcripts.read(write(tmp_path / "s.jsonl", found))
    assert df.model.tolist() == [OPUS, HAIKU, OPUS]
    (issue,) = df.attrs["issues"]  # S1, S2 and the call in no event: 2,005 + 2,302 + 120 input, 80 + 60 + 30 output
    assert issue["source_line"] == 6
    assert issue["reason"].startswith(f"{HAIKU}: input_tokens 4,427, cache_write_tokens 2,300, cache_read_tokens 2,000")
    assert "output_tokens 170 billed per modelUsage but in no event" in issue["reason"]
    del found[3]["tool_use_result"]["resolvedModel"]
    unnamed = transcripts.read(write(tmp_path / "t.jsonl", found))
    assert [i["source_line"] for i in unnamed.attrs["issues"]] == [4, 6]
    assert "model is stated nowhere" in unnamed.attrs["issues"][0]["reason"]


def test_model_usage_is_differenced_across_the_results_of_one_process(tmp_path):
    found = lines()
    answer = {**found[8], "message": {**found[8]["message"], "id": "msg_01TaskMainFFFFFFFFFFFFF"}}
    answer["message"]["usage"] = {**answer["message"]["usage"], "input_tokens": 2, "cache_creation_input_tokens": 100}
    answer["message"]["usage"]["cache_read_input_tokens"] = 28_500
    second = json.loads(json.dumps(found[9]))
    second["usage"].update(
        input_tokens=2, cache_creation_input_tokens=100, cache_read_input_tokens=28_500, output_tokens=40
    )
    opus = second["modelUsage"][OPUS]
    opus.update(inputTokens=opus["inputTokens"] + 2, cacheCreationInputTokens=opus["cacheCreationInputTokens"] + 100)
    opus.update(cacheReadInputTokens=opus["cacheReadInputTokens"] + 28_500, outputTokens=opus["outputTokens"] + 40)
    df = transcripts.read(write(tmp_path / "s.jsonl", [*found, answer, second]))
    assert df.turn.tolist() == [1, 1, 1, 1, 1, 2]
    assert int(df.output_tokens.iloc[-1]) == 40  # the second turn's own 40, not the process's 840
    assert [i["source_line"] for i in df.attrs["issues"]] == [10]  # haiku's gap, once


def test_the_real_stream_fixtures_totals_are_unchanged():
    df = transcripts.read(STREAM)
    assert [int(df[f].sum()) for f in FIELDS] == [64_241, 6_464, 57_775, 606]
    assert df.output_tokens.tolist() == [1, 1, 604]
    assert df.attrs["issues"] == []
    assert {c["model"] for c in df.attrs["crosscheck"]} == {None}  # one model: result.usage's rows alone


def test_without_model_usage_result_usage_alone_is_checked(tmp_path):
    found = lines()
    del found[-1]["modelUsage"]
    df = transcripts.read(write(tmp_path / "s.jsonl", found))
    assert {c["model"] for c in df.attrs["crosscheck"]} == {None} and df.attrs["issues"] == []
    # result.usage covers the main conversation: its 800 less the two snapshots (2) goes on the answer B
    assert df.output_tokens.tolist() == [1, 1, 1, 250, 799]


def test_a_gap_the_provider_log_holds_is_taken_back_and_a_larger_one_stays():
    """Claude Code 2.1.328's ``/compact`` turn billed 12,788 input tokens in no stream event; the provider log's
    summary request held 12,797, now a row of its own (``sources.with_log``): that gap is explained, not an issue.
    A gap beyond what the log's side requests hold stays one."""
    gap = {"source_path": "s.jsonl", "source_line": 18, "reason": f"m: input_tokens 12,788 {claude_stream.GAP} …"}
    other = {"source_path": "s.jsonl", "source_line": 3, "reason": "unknown line type 'x'"}
    side = pd.DataFrame({"input_tokens": [12_797]})
    assert sources._explained_gaps([gap, other], side) == [other]
    bigger = {**gap, "reason": f"m: input_tokens 20,000 {claude_stream.GAP} …"}
    assert sources._explained_gaps([bigger], side) == [bigger]
    assert sources._explained_gaps([gap], side.iloc[0:0]) == [gap]  # no side request: nothing explains it


def _process(session: str, mid: str, read: int, output: int) -> list[dict]:
    """One ``claude -p`` process of one response: init, the assistant event, the result with its modelUsage."""
    usage = {"input_tokens": 0, "cache_creation_input_tokens": 100, "cache_read_input_tokens": read,
             "output_tokens": output}  # fmt: skip
    billed = {"inputTokens": 0, "outputTokens": output, "cacheReadInputTokens": read, "cacheCreationInputTokens": 100}
    return [
        {"type": "system", "subtype": "init", "session_id": session, "model": "sim-agent"},
        {"type": "assistant", "session_id": session,
         "message": {"id": mid, "model": "sim-agent", "usage": usage, "content": [{"type": "text", "text": "ok"}]}},
        {"type": "result", "subtype": "success", "session_id": session, "usage": usage,
         "modelUsage": {"sim-agent": billed}},
    ]  # fmt: skip


def test_model_usage_adds_up_over_a_session_and_starts_again_in_a_new_one(tmp_path):
    """Measured on Claude Code 2.1.328 against the embedded provider: a stdout of five ``claude -p`` processes of new
    sessions (the session-chain pack's arm) gives each result's modelUsage from 0; five processes resuming one
    session keep adding. Differencing across new sessions had read 'below the previous result's' and cut output
    2,330 to 1,455."""
    new = tmp_path / "new.jsonl"
    new.write_text(
        "".join(json.dumps(x) + "\n" for x in _process("s1", "m1", 5_000, 300) + _process("s2", "m2", 4_000, 200))
    )
    df = transcripts.read(new)
    assert not df.attrs["issues"] and df["output_tokens"].tolist() == [300, 200]
    resumed = tmp_path / "resumed.jsonl"
    second = _process("s1", "m2", 4_000, 200)
    second[2]["modelUsage"]["sim-agent"] = {"inputTokens": 0, "outputTokens": 500, "cacheReadInputTokens": 9_000,
                                            "cacheCreationInputTokens": 200}  # fmt: skip  # cumulative over s1
    resumed.write_text("".join(json.dumps(x) + "\n" for x in _process("s1", "m1", 5_000, 300) + second))
    df = transcripts.read(resumed)
    assert not df.attrs["issues"] and df["output_tokens"].tolist() == [300, 200]
