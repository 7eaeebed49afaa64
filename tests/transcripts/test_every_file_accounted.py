"""Every input file of a read is accounted for: rows, or 0 rows and why (issue 31, "Files vanish without a word").

A folder read file by file left files with no API response out of its table unsaid: a session whose only
assistant line is Claude Code's ``<synthetic>`` client-error stand-in, a ``/login``-only session, a stream cut
inside its turn, and one copy of a session committed twice (its responses counted in the other). Each case is a
fixture written to the documented shape (tests/fixtures/SOURCES.md); the expected accounts and totals below are
derived by hand from those shapes, not from the kit's output. The same files also pin the Claude Code 2.1.152
rule: cache writes from the nested ``cache_creation`` breakdown when the flat field is 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts
from kit.cli import parse as cli
from kit.transcripts import cache, parallel
from kit.transcripts.accounting import CLIENT_ERROR, ISSUE, NO_RESPONSE, REPEATS, FileAccount, Reason
from tests.support import FIXTURES, ROOT, cli_env

TRANSCRIPTS = FIXTURES / "transcripts"
STAND_IN = TRANSCRIPTS / "claude-session_shape_synthetic_auth_failed.jsonl"
LOGIN = TRANSCRIPTS / "claude-session_shape_login_only.jsonl"
NESTED = TRANSCRIPTS / "claude-session_shape_v2.1.152_nested_writes.jsonl"
TWICE = TRANSCRIPTS / "committed_twice"
SESSION = "3d0b5c2f-6a74-4ebc-8f88-4c5d6e7f8091.jsonl"
COPY_A, COPY_B = TWICE / "repo-a" / SESSION, TWICE / "repo-b" / SESSION
REAL = TRANSCRIPTS / "claude-session_agent-history_v2.1.152.jsonl"
TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens"]


@pytest.fixture(autouse=True)
def _fresh_stores():
    cache._STORES.clear()
    yield
    cache._STORES.clear()


def account(df: pd.DataFrame, path: Path) -> FileAccount:
    (found,) = [a for a in df.attrs["accounting"] if a.source_path == str(path)]
    return found


def cut_stream(folder: Path) -> Path:
    """A ``codex exec --json`` stream that ends inside its turn: one command completed, no ``turn.completed``."""
    path = folder / "cut.jsonl"
    lines = [
        {"type": "thread.started", "thread_id": "01a22745-bad8-7f93-a6a1-c1886b73860e"},
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {"id": "item_1", "type": "command_execution", "command": "ls", "status": "in_progress"},
        },
        {
            "type": "item.completed",
            "item": {"id": "item_1", "type": "command_execution", "command": "ls", "exit_code": 0},
        },
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


# --- each kind of file with no rows, and why -------------------------------------------------------------


def test_a_session_of_one_synthetic_stand_in_names_its_kind_and_line():
    df = transcripts.read(STAND_IN)
    assert len(df) == 0 and df.attrs["issues"] == []
    assert df.attrs["accounting"] == [
        FileAccount(str(STAND_IN), "claude_session", 0, (Reason(CLIENT_ERROR, 2, "authentication_failed"),))
    ]
    (event,) = [e for e in df.attrs["events"] if e["kind"] == "api_error"]
    assert (event["kind"], event["detail"]["error"], event["detail"]["status"]) == (
        "api_error",
        "authentication_failed",
        None,
    )
    text = account(df, STAND_IN).text()
    assert (
        text.startswith(f"{STAND_IN}: 0 rows: 1 client-error stand-in(s)")
        and "authentication_failed \u00d71 (line 2)" in text
    )


def test_stand_ins_of_several_kinds_are_grouped_by_kind_with_their_lines(tmp_path):
    """The issue's four: ``authentication_failed`` three times and ``billing_error`` once, in one file here."""
    prompt, stand_in, duration = STAND_IN.read_bytes().splitlines(keepends=True)
    billing = stand_in.replace(b'"authentication_failed"', b'"billing_error"').replace(
        b'"isApiErrorMessage":true', b'"isApiErrorMessage":true,"apiErrorStatus":400'
    )
    path = tmp_path / "walled.jsonl"
    path.write_bytes(b"".join([prompt, stand_in, prompt, stand_in, prompt, stand_in, prompt, billing, duration]))
    found = account(transcripts.read(path), path)
    assert found.rows == 0 and [(r.kind, r.line, r.detail) for r in found.reasons] == [
        (CLIENT_ERROR, 2, "authentication_failed"),
        (CLIENT_ERROR, 4, "authentication_failed"),
        (CLIENT_ERROR, 6, "authentication_failed"),
        (CLIENT_ERROR, 8, "billing_error"),
    ]
    assert "4 client-error stand-in(s)" in found.text()
    assert "authentication_failed \u00d73 (lines 2, 4, 6), billing_error \u00d71 (line 8)" in found.text()
    events = [e for e in transcripts.read(path).attrs["events"] if e["kind"] == "api_error"]
    assert [e["detail"]["status"] for e in events] == [None, None, None, 400]


def test_a_login_only_session_has_no_response_and_says_it_ran_login():
    df = transcripts.read(LOGIN)
    assert len(df) == 0 and df.attrs["issues"] == [] and df.attrs["files"][0]["local_commands"] == ["/login"]
    assert df.attrs["accounting"] == [FileAccount(str(LOGIN), "claude_session", 0, (Reason(NO_RESPONSE, 0, "/login"),))]
    assert (
        account(df, LOGIN)
        .text()
        .endswith("0 rows: no API response in the file: the session ran only local command(s) /login")
    )


def test_a_stream_cut_inside_its_turn_is_listed_with_its_readers_issue(tmp_path):
    """The reader's issue (``codex_exec``) is the reason, at its line, and the only one: requests were made and their
    usage is unknown, which "no API response in the file" would contradict."""
    path = cut_stream(tmp_path)
    df = transcripts.read(path)
    issues = [i for i in df.attrs["issues"] if i["source_path"] == str(path)]
    found = account(df, path)
    assert found.rows == 0 and issues, "a cut stream must be an issue (kit.transcripts.codex_exec)"
    assert [r for r in found.reasons if r.kind == ISSUE] == [
        Reason(ISSUE, i["source_line"], i["reason"]) for i in issues
    ]
    assert all(r.kind != NO_RESPONSE for r in found.reasons)
    assert f"line {issues[0]['source_line']}: {issues[0]['reason']}" in found.text()


def test_a_session_committed_twice_names_the_copy_its_responses_are_counted_in():
    """The two repositories' copies hold the same two responses (repo-b's one bookkeeping line longer): counted
    once, in the copy read last (ties), and the other says so. Totals by hand: (3 + 5,200 + 11,000) +
    (1 + 60 + 16,200) = 32,464 input-side tokens; reads 27,200, writes 5,260 (all 5-minute), output 48 + 22 = 70."""
    df = transcripts.read(TWICE)
    assert df.attrs["accounting"] == [
        FileAccount(str(COPY_A), "claude_session", 0, (Reason(REPEATS, 2, str(COPY_B), 2),)),
        FileAccount(str(COPY_B), "claude_session", 2),
    ]
    assert account(df, COPY_A).text() == f"{COPY_A}: 0 rows: all 2 response(s) repeated in {COPY_B} (counted there)"
    assert df[TOKENS].sum().tolist() == [32_464, 27_200, 5_260, 0, 70]


def test_byte_identical_copies_name_the_file_counted(tmp_path):
    """Identical copies are told apart before any reader (``group_files``): the later one is a duplicate, named."""
    for repo in ("repo-a", "repo-b"):
        (tmp_path / repo).mkdir()
        shutil.copy(COPY_A, tmp_path / repo / SESSION)
    df = transcripts.read(tmp_path)
    first, second = tmp_path / "repo-a" / SESSION, tmp_path / "repo-b" / SESSION
    reason = f"duplicate of {first} (same content); counted once"
    assert df.attrs["accounting"] == [
        FileAccount(str(first), "claude_session", 2),
        FileAccount(str(second), None, 0, (Reason(ISSUE, 0, reason),)),
    ]


# --- every file, whatever the way of reading -------------------------------------------------------------


def test_every_fixture_file_is_accounted_once_and_the_rows_add_up():
    df = transcripts.read(TRANSCRIPTS)
    found = [a.source_path for a in df.attrs["accounting"]]
    walked = sorted(str(p) for p in TRANSCRIPTS.rglob("*") if p.suffix in (".jsonl", ".txt"))
    assert sorted(found) == walked and len(set(found)) == len(found)
    assert sum(a.rows for a in df.attrs["accounting"]) == len(df)
    assert all(a.reasons for a in df.attrs["accounting"] if not a.rows)
    assert {a.source_path for a in df.attrs["accounting"] if not a.rows} >= {str(STAND_IN), str(LOGIN), str(COPY_A)}


def test_the_parse_cache_and_the_parallel_read_keep_the_accounting(tmp_path, monkeypatch):
    folder = shutil.copytree(TRANSCRIPTS, tmp_path / "history", ignore=shutil.ignore_patterns("*.md", "*.json"))
    cut_stream(folder)
    want = transcripts.read(folder).attrs["accounting"]
    assert any(not a.rows for a in want)
    store = tmp_path / "cache"
    assert transcripts.read(folder, cache=store).attrs["accounting"] == want  # cold: the cache written
    assert transcripts.read(folder, cache=store).attrs["accounting"] == want  # in memory
    cache._STORES.clear()
    assert transcripts.tables(folder, cache=store)[0].attrs["accounting"] == want  # from its files
    monkeypatch.setattr(parallel, "workers", lambda size: 2)
    assert transcripts.read(folder).attrs["accounting"] == want  # over two processes


# --- the command line -------------------------------------------------------------------------------------


def test_kit_parse_prints_one_line_per_file_with_no_rows(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    for path in (STAND_IN, LOGIN, REAL):
        shutil.copy(path, folder / path.name)
    shutil.copytree(TWICE, folder / "committed_twice")
    cut = cut_stream(folder)
    out = tmp_path / "rows.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "kit", "parse", str(folder), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=cli_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("4 of 6 file(s) gave no rows:")
    said = lines[start + 1 :]
    assert [line.split(": 0 rows: ")[0] for line in said] == [
        str(folder / LOGIN.name),
        str(folder / STAND_IN.name),
        str(folder / "committed_twice" / "repo-a" / SESSION),
        str(cut),
    ]
    assert said[0].endswith("local command(s) /login") and "authentication_failed \u00d71 (line 2)" in said[1]
    assert said[2].endswith(f"repeated in {folder / 'committed_twice' / 'repo-b' / SESSION} (counted there)")
    back = pd.read_parquet(out)  # the accounting in the frame's attrs does not stop it being written
    assert len(back) == 1 + 2 and str(folder / REAL.name) in done.stdout


def test_a_folder_of_files_with_no_rows_still_lists_each(tmp_path, capsys):
    for path in (STAND_IN, LOGIN):
        shutil.copy(path, tmp_path / path.name)
    assert cli.main([str(tmp_path)]) == 1
    printed = capsys.readouterr()
    assert printed.out.splitlines()[0] == "2 of 2 file(s) gave no rows:" and len(printed.out.splitlines()) == 3
    assert printed.err.endswith(f"error: no API responses could be read from {tmp_path}\n")


# --- Claude Code 2.1.152: cache writes in the nested breakdown only ---------------------------------------


def test_cache_writes_come_from_the_nested_breakdown_when_the_flat_field_is_0():
    """Three responses (hand-written to the 2.1.152 line shape): flat 0 with 2,300 1-hour writes nested; flat 0
    with 480 5-minute writes nested; flat 150 with 150 1-hour writes nested (the flat count stands). By hand:
    writes 2,300 + 480 + 150 = 2,930, of which 1-hour 2,300 + 0 + 150 = 2,450; input-side per response
    4 + 2,300 + 12,000 = 14,304, 2 + 480 + 14,300 = 14,782, 1 + 150 + 14,780 = 14,931 (44,017 in all); reads
    41,080; output 345. Reading the flat field alone gave writes 150 and input 41,237."""
    df = transcripts.read(NESTED)
    assert df["cache_write_tokens"].tolist() == [2_300, 480, 150]
    assert df["cache_write_1h_tokens"].tolist() == [2_300, 0, 150]
    assert df["input_tokens"].tolist() == [14_304, 14_782, 14_931]
    assert df["uncached_input_tokens"].tolist() == [4 + 2_300, 2 + 480, 1 + 150]  # not read from the cache
    assert df[TOKENS].sum().tolist() == [44_017, 41_080, 2_930, 2_450, 345]


def test_the_real_2_1_152_session_keeps_its_totals():
    """The origin's 2.1.152 session has flat 1,045 = nested 1,045 (1-hour): the rule changes nothing there."""
    df = transcripts.read(REAL)
    assert df[TOKENS].sum().tolist() == [4_108, 3_057, 1_045, 1_045, 16]
