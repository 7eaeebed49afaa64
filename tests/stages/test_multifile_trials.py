"""Trials with several transcript files (issue 14): fresh sessions, a subagent and a compaction request.

Each file numbers its responses from 0; the parse stage orders a trial's files by start time and
numbers ``cycle`` across the trial (a file that overlaps another in time, as a compaction request
inside a session does, has its responses placed where they happened), keeping ``file_cycle``,
``file_role`` and ``sidechain``, and maps tool results and events onto the trial's cycles, so occupancy
measures the main window (starting over at a fresh session) and leaves the subagent's out. The trial
is written here in Claude Code's session format, with file names in the opposite order of their start
times.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts
from kit.analysis import occupancy
from kit.stages import parse
from kit.transcripts import collect, sources
from tests.support import trial_meta

TRIAL = "r00-fresh"


def user(session: str, at: str, content: object, sidechain: bool = False) -> dict:
    message = {"role": "user", "content": content}
    return {"type": "user", "sessionId": session, "timestamp": at, "isSidechain": sidechain, "message": message}


def assistant(session: str, at: str, mid: str, prompt: int, tool: tuple[str, str] | None = None, **kw) -> dict:
    content = [{"type": "tool_use", "id": tool[0], "name": tool[1], "input": {}}] if tool else [{"type": "text"}]
    usage = {"input_tokens": 10, "cache_read_input_tokens": prompt - 10, "cache_creation_input_tokens": 0}
    message = {"id": mid, "model": "claude-sim", "content": content, "usage": usage | {"output_tokens": 20}}
    return {"type": "assistant", "sessionId": session, "timestamp": at, "message": message, **kw}


def result(session: str, at: str, tool_id: str, chars: int) -> dict:
    return user(session, at, [{"type": "tool_result", "tool_use_id": tool_id, "content": "x" * chars}])


FILES = {
    # the first session (named last): a Read, then the answer
    "z-first.jsonl": [
        user("s1", "2026-01-01T10:00:00Z", "Where is auth?"),
        assistant("s1", "2026-01-01T10:00:01Z", "m1", 1000, ("t1", "Read")),
        result("s1", "2026-01-01T10:00:02Z", "t1", 4000),
        assistant("s1", "2026-01-01T10:00:03Z", "m2", 2300),
    ],
    # a subagent the first session started
    "subagents/agent-s1.jsonl": [
        user("s1", "2026-01-01T10:01:00Z", "look around", sidechain=True),
        assistant("s1", "2026-01-01T10:01:01Z", "m3", 500, isSidechain=True),
        assistant("s1", "2026-01-01T10:01:02Z", "m4", 800, isSidechain=True),
    ],
    # the second turn, a fresh session: a Bash call, its answer, a compaction, one more response
    "a-second.jsonl": [
        user("s2", "2026-01-01T10:05:00Z", "Fix it"),
        assistant("s2", "2026-01-01T10:05:01Z", "m5", 900, ("t2", "Bash")),
        result("s2", "2026-01-01T10:05:02Z", "t2", 3000),
        assistant("s2", "2026-01-01T10:05:03Z", "m6", 1900),
        {"type": "system", "subtype": "compact_boundary", "sessionId": "s2", "compactMetadata": {"trigger": "auto"}},
        assistant("s2", "2026-01-01T10:05:05Z", "m7", 700),
    ],
    "subagents/agent-acompact-c1.jsonl": [assistant("s2", "2026-01-01T10:05:04Z", "m8", 1800, isSidechain=True)],
}


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    tdir = tmp_path / "fresh" / "raw" / TRIAL
    for name, lines in FILES.items():
        (tdir / name).parent.mkdir(parents=True, exist_ok=True)
        (tdir / name).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    meta = trial_meta(batch="fresh", arm="with_session", trial_id=TRIAL, transcripts=list(FILES))
    (tdir / "meta.json").write_bytes(orjson.dumps(meta))
    return tmp_path / "fresh"


def test_cycle_counts_the_trials_responses_across_its_files_in_start_order(batch):
    tables = parse.parse_batch(batch)
    assert tables["parse_issues"].empty, tables["parse_issues"].to_dict("records")
    got = tables["requests"][["cycle", "file_cycle", "file_role", "sidechain", "turn", "source_path"]]
    got = got.assign(source_path=got["source_path"].map(lambda p: Path(p).name))
    assert got.astype(object).where(got.notna(), None).values.tolist() == [
        [0, 0, "main", False, 1, "z-first.jsonl"],
        [1, 1, "main", False, 1, "z-first.jsonl"],
        [2, 0, "subagent", True, None, "agent-s1.jsonl"],
        [3, 1, "subagent", True, None, "agent-s1.jsonl"],
        [4, 0, "main", False, 2, "a-second.jsonl"],  # the second session's turn follows the first's
        [5, 1, "main", False, 2, "a-second.jsonl"],
        [6, 0, "compaction", True, None, "agent-acompact-c1.jsonl"],  # requested inside the session
        [7, 2, "main", False, 2, "a-second.jsonl"],
    ]
    # tool results and events are at the trial's cycles: the request after the call, after the boundary
    assert tables["tool_results"][["cycle", "category"]].values.tolist() == [[1, "read"], [5, "bash"]]
    assert tables["events"][["cycle", "kind"]].values.tolist() == [[7, "system:compact_boundary"]]
    assert tables["trials"]["cycles"].tolist() == [8]


def test_occupancy_measures_the_main_window_and_starts_over_at_a_fresh_session(batch):
    tables = parse.parse_batch(batch)
    occ = occupancy.measure(tables["requests"], tables["tool_results"], events=tables["events"])
    first = occ.iloc[0]
    assert (first["requests"], first["sessions"], first["compactions"]) == (5, 2, 1)  # subagent rows left out
    assert occ.set_index("category").loc["final context", "tokens"] == 700
    assert occ.set_index("category").loc["fixed base", "tokens"] == 1000


def test_the_command_reads_the_folder_as_the_stage_does(batch):
    stage = parse.parse_batch(batch)["requests"]
    rows, issues, note = collect.collect([batch / "raw" / TRIAL])
    keys = ["cycle", "file_cycle", "file_role", "sidechain", "turn", "input_tokens"]
    assert rows[keys].equals(stage[keys]) and issues == [] and note.startswith("1 kit trial folder(s)")
    inside = rows["source_path"].str.removeprefix(str(batch.resolve()) + "/")  # the stage's tables: batch-relative
    assert inside.tolist() == stage["source_path"].tolist()


def test_a_subagent_row_without_the_columns_is_still_left_out():
    """A bare read has no file_role; Claude's sidechain flag alone keeps a subagent out of the window."""
    requests = pd.DataFrame(
        {"trial_id": "t", "cycle": [0, 1, 2], "input_tokens": [100, 5000, 200], "output_tokens": 10}
    ).assign(sidechain=[False, True, False])
    results = pd.DataFrame({"trial_id": "t", "cycle": [1], "category": ["read"], "chars": [9000]})
    occ = occupancy.measure(requests, results).set_index("category")
    assert occ.loc["Read", "tokens"] == 0 and occ.loc["final context", "requests"] == 2


@pytest.mark.parametrize(
    ("meta", "role"),
    [
        ({"source": "exec"}, "main"),
        ({"source": "exec", "forked_from_id": "01a2"}, "main"),  # a fork continues the main thread
        ({"source": {"subagent": "compact"}}, "compaction"),
        ({"source": {"subagent": {"thread_spawn": {"parent_thread_id": "01a2"}}}}, "subagent"),
        ({"source": "exec", "thread_source": "subagent"}, "subagent"),
    ],
)
def test_a_codex_rollout_says_its_role_in_its_session_meta(tmp_path, meta, role):
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(orjson.dumps({"type": "session_meta", "payload": {"id": "01b3", **meta}}) + b"\n")
    assert sources.file_role(path, "codex_rollout") == role


def test_a_damaged_tool_output_line_of_a_several_file_trial_is_reported(batch):
    """The stage checks every line: ``transcripts.read`` of requests alone passes over a long tool-output line
    that ends as an object does (docs/method.md#transcripts), the stage reads the trial's tool results too."""
    path = batch / "raw" / TRIAL / "z-first.jsonl"
    head = {"parentUuid": None, "isSidechain": False, "sessionId": "s1", "type": "user"}
    content = [{"tool_use_id": "t9", "type": "tool_result", "content": "x" * 2000}]
    line = orjson.dumps(head | {"message": {"role": "user", "content": content}})
    with open(path, "ab") as handle:
        handle.write(line.replace(b'"content":"xx', b'"content":xx', 1) + b"\n")
    assert transcripts.read(path).attrs["issues"] == []  # the case the stage must not inherit
    issues = parse.parse_batch(batch)["parse_issues"]
    assert [(Path(p).name, n) for p, n in issues[["source_path", "source_line"]].values] == [("z-first.jsonl", 5)]
    assert issues["reason"].str.startswith("invalid JSON").all()
