"""``kit history`` on ``codex exec --json`` streams (issue #31): it completes, counts their tokens, and sets their
rows (whole turns, not responses) apart from what needs one row per response, saying so.

The streams are the documented-shape fixtures of ``tests/transcripts/test_codex_exec_rows.py`` (expected
totals by hand there); beside them one Claude Code session, whose occupancy and structural cache must be
unchanged by them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kit.history.structural import TURNS
from kit.stages import history
from kit.transcripts import cache
from tests.support import ROOT
from tests.transcripts.test_codex_exec_rows import CUT, CUT_ISSUE, RESUMED, THREAD, split

SESSION = ROOT / "tests" / "fixtures" / "transcripts" / "claude-session_spotter_tool_heavy.jsonl"
THREAD_TOTALS = {"input_tokens": 21_738, "cache_read_tokens": 15_000, "output_tokens": 252, "total_tokens": 21_990}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache._STORES.clear()
    yield
    cache._STORES.clear()


def folder(tmp_path: Path) -> Path:
    found = tmp_path / "history"
    found.mkdir()
    for path in (RESUMED, CUT, SESSION):
        shutil.copy(path, found / path.name)
    return found


def test_kit_history_on_a_folder_with_exec_streams_completes_and_counts_them(tmp_path: Path) -> None:
    source, out = folder(tmp_path), tmp_path / "out"
    env = os.environ | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, "-m", "kit", "history", str(source), "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    by_session = pd.read_csv(out / "analysis" / "usage_by_session.csv").set_index("session")
    assert by_session.loc[THREAD, list(THREAD_TOTALS)].to_dict() == THREAD_TOTALS
    assert by_session.loc[THREAD, "requests"] == 2  # its two turns
    issues = pd.read_csv(out / "tables" / "parse_issues.csv")
    cut = str(source / CUT.name)
    assert [(r.source_path, r.source_line, r.reason) for r in issues.itertuples()] == [(cut, 2, CUT_ISSUE)]
    text = (out / "report.md").read_text()
    assert "**2 of the " in text and " rows are whole turns of `codex exec --json` stdout**" in text
    assert f"- `{THREAD}`: 2 turns, 21,990 tokens" in text
    occupancy = pd.read_csv(out / "analysis" / "occupancy_sessions.csv")
    assert set(occupancy.loc[occupancy["trial_id"] == THREAD, "calibration"]) == {TURNS}
    assert "claude-session_spotter_tool_heavy" in text.split("### Residual context occupancy")[1]


def test_a_thread_over_two_files_is_one_session_of_its_turns(tmp_path: Path) -> None:
    """A run's stdout and its ``exec resume``'s are one thread: one session, turns 1 and 2 (each file's turns
    are not restarted after the other's), no cycle, context or occupancy block made of turn sums."""
    run, resume = split(tmp_path)
    found = history.analyze([resume, run, SESSION], cache=tmp_path / "cache")
    req = found.history.requests
    mine = req[req["trial_id"] == THREAD].sort_values("turn")
    assert mine["turn"].tolist() == [1, 2] and mine["source_path"].tolist() == [str(run), str(resume)]
    assert mine["file_cycle"].tolist() == [0, 1] and mine["cycle"].notna().all()
    assert {c: int(mine[c].sum()) for c in THREAD_TOTALS} == THREAD_TOTALS
    table = found.sessions.set_index("session")
    assert table.loc[THREAD, "turns"] == 2 and int(table.loc[THREAD, "total_tokens"]) == 21_990
    context = ["cycles", "first_context", "last_context", "max_context", "context_drops", "growth_per_cycle"]
    assert table.loc[THREAD, context].isna().all()
    assert table.loc["claude-session_spotter_tool_heavy", "cycles"] == 4  # per-response sessions as before
    assert THREAD not in found.blocks and "claude-session_spotter_tool_heavy" in found.blocks
    assert THREAD not in set(found.prompts["trial_id"]) and THREAD not in set(found.structural["session"])
    alone = history.analyze([SESSION], cache=tmp_path / "cache")
    pd.testing.assert_frame_equal(found.structural, alone.structural)
    theirs = found.occupancy[found.occupancy["trial_id"] != THREAD].reset_index(drop=True)
    pd.testing.assert_frame_equal(theirs, alone.occupancy)
