"""``codex exec --json`` rows carry their trial (the thread) and cycle (the turn), and a cut turn is an issue (#31).

The fixtures are written to the documented shape (tests/fixtures/SOURCES.md): the resumed thread is the probe
run of the project's notes on the CLIs' wire formats ("Codex --json stdout"), three requests per turn with
request k's usage input 1000k+123, cached 1000(k-1), cache write 50k, output 10k+7, reasoning k; the printed
``turn.completed.usage`` is the thread's running sum. So turn 1 (requests 1-3) is input 6,369, cached 3,000,
written 300, output 81, reasoning 6, and the thread after turn 2 (requests 4-6) input 21,738, cached 15,000,
written 1,050, output 252, reasoning 21: turn 2's own tokens are the differences.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd

from kit import transcripts
from kit.transcripts import codex_exec
from tests.support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"
RESUMED = FIXTURES / "codex-exec_resumed-thread_documented.jsonl"
CUT = FIXTURES / "codex-exec_cut-turn_documented.jsonl"
THREAD = "01a22745-bad8-7f93-a6a1-c1886b73860e"
TURNS = {  # per turn, by hand from the probe's per-request rule (module docstring)
    "input_tokens": [6_369, 21_738 - 6_369],
    "cache_read_tokens": [3_000, 15_000 - 3_000],
    "cache_write_tokens": [300, 1_050 - 300],
    "uncached_input_tokens": [6_369 - 3_000, 15_369 - 12_000],  # input less cache reads (docs/method.md#totals)
    "output_tokens": [81, 252 - 81],
    "reasoning_tokens": [6, 21 - 6],
    "total_tokens": [6_369 + 81, 15_369 + 171],  # input + output
}
CUT_ISSUE = "turn started at line 2 never completed: its usage is not in the file (20 tool calls completed in it)"


def split(tmp_path: Path) -> list[Path]:
    """The resumed thread as the two files two runs print: ``codex exec`` (lines 1-7), then ``exec resume``."""
    lines = RESUMED.read_bytes().splitlines(keepends=True)
    run, resume = tmp_path / "run.jsonl", tmp_path / "resume.jsonl"
    run.write_bytes(b"".join(lines[:7]))
    resume.write_bytes(b"".join(lines[7:]))
    return [run, resume]


def test_each_turn_row_has_its_thread_cycle_and_own_tokens() -> None:
    df = transcripts.read(RESUMED)
    assert df.attrs["issues"] == []
    assert df.trial_id.tolist() == [THREAD, THREAD]
    assert df.cycle.tolist() == [0, 1] and df.turn.tolist() == [1, 2]  # 0-based cycle, as every reader's
    assert df.source_line.tolist() == [7, 13] and df.tool_calls.tolist() == [1, 1]
    for column, want in TURNS.items():
        assert df[column].tolist() == want, column
    assert int(df.total_tokens.sum()) == 21_738 + 252  # the thread's printed total, counted once
    assert codex_exec.turn_rows(df).all()
    tools = transcripts.tool_results(RESUMED)
    assert tools.cycle.tolist() == [0, 1] and tools.trial_id.tolist() == [THREAD] * 2  # each at its turn


def test_a_thread_read_from_its_run_and_resume_files_in_any_order_is_the_same_turns(tmp_path: Path) -> None:
    run, resume = split(tmp_path)
    for paths in ([run, resume], [resume, run]):
        df = transcripts.read(paths).sort_values("cycle", ignore_index=True)
        assert df.trial_id.tolist() == [THREAD, THREAD] and df.cycle.tolist() == [0, 1], paths
        assert df.source_path.tolist() == [str(run), str(resume)]
        for column, want in TURNS.items():
            assert df[column].tolist() == want, (column, paths)


def test_a_file_without_thread_started_is_its_stems_trial(tmp_path: Path) -> None:
    lines = RESUMED.read_bytes().splitlines(keepends=True)
    path = tmp_path / "stdout-0042.jsonl"
    path.write_bytes(b"".join(lines[1:7]))
    df = transcripts.read(path)
    assert df.trial_id.tolist() == ["stdout-0042"] and df.cycle.tolist() == [0]
    assert df.input_tokens.tolist() == [6_369]


def test_a_stream_cut_inside_its_turn_is_a_located_issue_never_a_silent_zero() -> None:
    df = transcripts.read(CUT)
    assert df.empty  # no turn.completed: no usage to put on a row
    assert [(i["source_line"], i["reason"]) for i in df.attrs["issues"]] == [(2, CUT_ISSUE)]
    assert df.attrs["files"] == [{"source_path": str(CUT), "format": "codex_exec", "turns": 0, "rows": 0}]


def test_a_turn_cut_before_the_next_one_started_is_reported_and_the_next_one_counted(tmp_path: Path) -> None:
    """A run killed inside its turn, then resumed into the same stdout file: the cut turn's line is named, the
    resumed turn's row is the thread's running sum since the last completed turn (here, the whole thread)."""
    lines = RESUMED.read_bytes().splitlines(keepends=True)
    path = tmp_path / "cut-then-resumed.jsonl"
    path.write_bytes(b"".join([*lines[:6], *lines[7:]]))  # turn 1's turn.completed (line 7) never written
    df = transcripts.read(path)
    reasons = [(i["source_line"], i["reason"]) for i in df.attrs["issues"]]
    want = "turn started at line 3 never completed: its usage is not in the file (1 tool calls completed in it)"
    assert reasons == [(3, want)]
    assert df.cycle.tolist() == [0] and df.input_tokens.tolist() == [21_738] and df.output_tokens.tolist() == [252]


def test_a_failed_turn_is_closed_by_its_event_not_reported_as_cut(tmp_path: Path) -> None:
    path = tmp_path / "failed.jsonl"
    failed = {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}}
    path.write_bytes(b"".join(RESUMED.read_bytes().splitlines(keepends=True)[:6]) + orjson.dumps(failed) + b"\n")
    df = transcripts.read(path)
    assert df.empty and df.attrs["issues"] == []
    assert [(e["kind"], e["source_line"]) for e in df.attrs["events"]] == [("turn.failed", 7)]


def test_kit_occupancy_on_an_exec_stream_says_why_it_has_no_block() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit", "occupancy", str(RESUMED)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr and "InputError" not in done.stderr
    assert done.stderr.startswith(f"{RESUMED}: its 2 rows are whole turns of `codex exec --json`")
    assert "no per-request usage" in done.stderr and done.stdout == ""


def test_turn_rows_are_the_exec_rows_only() -> None:
    rows = pd.DataFrame({"source_format": pd.array(["codex_exec", "codex_rollout", None], dtype="string")})
    assert codex_exec.turn_rows(rows).tolist() == [True, False, False]
