"""Side requests (issue 29, finding 4): requests a CLI makes that its transcript does not record.

Claude Code 2.1.328 writes no line of its compaction's summary requests into the session file (measured: a
``/compact`` turn against the embedded provider made two requests of ~12,800 input tokens that only the provider
log held). The parse stage takes such requests from the trial's provider log, the record of every request,
so that total tokens equal the log's (the known truth), and marks them (``side_request``: ``compaction`` at a
compaction event, else ``unrecorded``). Without a log (a user's own history, ``kit parse`` of a session file)
it says that a compaction's requests cannot be seen. The trial here is written in Claude Code's session format
and the log as the provider writes it (``kit.provider.log.record``); tests/e2e/test_side_requests_cli.py runs
the real CLIs.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit.history import load as history
from kit.provider.log import record
from kit.stages import parse
from kit.transcripts import collect
from tests.support import trial_meta

TRIAL = "r00-a"
SESSION = "s1.jsonl"
LOG = "provider_log.jsonl"
UNSEEN = "no request of this compaction is in the transcript"


def user(at: str, content: object) -> dict:
    return {"type": "user", "sessionId": "s1", "timestamp": at, "message": {"role": "user", "content": content}}


def assistant(at: str, mid: str, prompt: int, output: int) -> dict:
    usage = {"input_tokens": 10, "cache_read_input_tokens": prompt - 10, "cache_creation_input_tokens": 0}
    usage["output_tokens"] = output
    message = {"id": mid, "model": "sim-agent", "content": [{"type": "text", "text": "ok"}], "usage": usage}
    return {"type": "assistant", "sessionId": "s1", "timestamp": at, "message": message}


BOUNDARY = {"type": "system", "subtype": "compact_boundary", "sessionId": "s1", "compactMetadata": {"trigger": "x"}}
LINES = [
    user("2026-01-01T10:00:00Z", "Where is auth?"),
    assistant("2026-01-01T10:00:01Z", "m1", 1000, 20),
    assistant("2026-01-01T10:00:03Z", "m2", 1500, 30),
    user("2026-01-01T10:00:04Z", "<command-name>/compact</command-name>"),
    BOUNDARY,  # line 5
    user("2026-01-01T10:00:07Z", "Which function checks expiry?"),
    assistant("2026-01-01T10:00:08Z", "m3", 700, 40),
]
# (input, output) of every request, as the provider logged them: the transcript's three, a request between the
# first two that nothing records (a title request, say), and two summary requests before the boundary
LOGGED = [(1000, 20), (1200, 9), (1500, 30), (1800, 300), (1810, 310), (700, 40)]
SIDE = [None, "unrecorded", None, "compaction", "compaction", None]


def log_line(t: int, prompt: int, output: int) -> dict:
    usage = {"input_tokens": prompt, "cache_read_tokens": prompt - 10, "cache_write_tokens": 0}
    usage |= {"cache_write_1h_tokens": 0, "output_tokens": output, "reasoning_tokens": 0}
    return record(t=float(t), status=200, trial_id=TRIAL, usage=usage, tool_calls=0, segments=[["h", prompt, False]])


def write(folder: Path, lines: list[dict]) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def batch(tmp_path: Path, logged: list[tuple[int, int]] | None) -> Path:
    """A batch of one Claude Code trial, with a provider log of ``logged`` requests (None: no log)."""
    tdir = tmp_path / "b1" / "raw" / TRIAL
    write(tdir / SESSION, LINES)
    listed = [SESSION]
    if logged is not None:
        write(tdir / LOG, [log_line(t, *counts) for t, counts in enumerate(logged)])
        listed.append(LOG)
    (tdir / "meta.json").write_bytes(orjson.dumps(trial_meta(trial_id=TRIAL, transcripts=listed)))
    return tmp_path / "b1"


def test_the_logs_requests_the_transcript_lacks_are_in_the_totals_and_marked(tmp_path):
    tables = parse.parse_batch(batch(tmp_path, LOGGED))
    assert tables["parse_issues"].empty, tables["parse_issues"].to_dict("records")
    req = tables["requests"]
    assert list(zip(req["input_tokens"], req["output_tokens"], strict=True)) == LOGGED  # the log's order
    assert req["cycle"].tolist() == list(range(6)) == tables["segments"]["cycle"].tolist()
    assert req["side_request"].astype(object).where(req["side_request"].notna(), None).tolist() == SIDE
    side = req[req["side_request"].notna()]
    assert set(side["source_format"]) == {"provider_log"} and side["sidechain"].all() and side["turn"].isna().all()
    assert side["file_role"].tolist() == ["side", "compaction", "compaction"]
    assert req.loc[req["side_request"].isna(), "source_format"].eq("claude_session").all()
    trial = tables["trials"].iloc[0]
    assert trial["total_tokens"] == sum(i + o for i, o in LOGGED)  # the provider's truth
    assert (trial["cycles"], trial["side_requests"], trial["side_tokens"]) == (6, 3, 1209 + 2100 + 2120)
    assert tables["events"][["cycle", "kind"]].values.tolist() == [[5, "system:compact_boundary"]]  # after both


def test_the_command_reads_the_trial_as_the_stage_does(tmp_path):
    folder = batch(tmp_path, LOGGED)
    stage = parse.parse_batch(folder)["requests"]
    rows, issues, _ = collect.collect([folder])
    assert issues == []
    keys = ["cycle", "side_request", "file_role", "input_tokens", "total_tokens"]
    assert rows[keys].equals(stage[keys])


@pytest.mark.parametrize("where", ["stage", "command", "history"])
def test_without_a_log_a_compaction_says_its_requests_cannot_be_seen(tmp_path, where):
    folder = batch(tmp_path, None)
    session = folder / "raw" / TRIAL / SESSION
    if where == "stage":
        issues = parse.parse_batch(folder)["parse_issues"].to_dict("records")
        session = Path("raw") / TRIAL / SESSION  # the stage's tables name files inside the batch
    elif where == "command":
        issues = collect.collect([session])[1]
    else:
        issues = history.load([session]).issues
    unseen = [i for i in issues if UNSEEN in i["reason"]]
    assert [(str(i["source_path"]), i["source_line"]) for i in unseen] == [(str(session), 5)], issues
    assert unseen[0]["reason"].startswith("system:compact_boundary: ")


def test_a_log_whose_requests_cannot_be_matched_adds_nothing_and_says_how_many_tokens(tmp_path):
    logged = [(1000, 20), (1200, 9), (1499, 30), (1800, 300), (700, 40)]  # the second response logged otherwise
    tables = parse.parse_batch(batch(tmp_path, logged))
    assert len(tables["requests"]) == 3 and tables["requests"]["side_request"].isna().all()
    reasons = tables["parse_issues"]["reason"].tolist()
    beyond = sum(i + o for i, o in logged) - (1020 + 1530 + 740)
    assert "cross-check: 3 responses in the transcript, 5 in the provider log" in reasons[0]
    assert f"the log's {beyond} further tokens are not in the rows" in reasons[0]
    assert any(UNSEEN in r for r in reasons)  # nothing supplied the compaction's requests


def test_a_log_with_as_many_requests_compares_them_one_by_one(tmp_path):
    """The transcript's own responses only: nothing is added, and a count that differs is named at its line."""
    logged = [(1000, 20), (1500, 31), (700, 40)]
    tables = parse.parse_batch(batch(tmp_path, logged))
    assert tables["requests"]["side_request"].isna().all() and tables["trials"]["side_requests"].tolist() == [0]
    issues = tables["parse_issues"]
    assert issues["source_line"].tolist()[0] == 2 and "cross-check: transcript" in issues["reason"].tolist()[0]
    assert pd.Series(issues["reason"]).str.contains(UNSEEN).any()
