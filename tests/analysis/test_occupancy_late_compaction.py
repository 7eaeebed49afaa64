"""A compaction after the last response counts (issue 31): a session that ends in an auto-compaction printed
``compactions 0``, because a compaction was counted only inside the gap between two requests and no request
follows this one. The fixture is written to Claude Code's documented shape (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import re

import pandas as pd

from kit.analysis import occupancy as occ
from kit.cli import main as cli
from kit.cli import occupancy as occupancy_cli
from tests.support import FIXTURES

LATE = FIXTURES / "transcripts" / "claude-session_shape_ends_in_autocompact.jsonl"


def test_session_ending_in_an_auto_compaction_prints_compactions_1(capsys):
    assert cli.main(["occupancy", str(LATE)]) == 0
    measure = capsys.readouterr().out.splitlines()[-2]
    assert re.search(r"· turns 2 · compactions 1 ·", measure), measure


def test_late_compaction_counts_and_the_residual_is_the_window_it_cleared():
    rows = occupancy_cli.session(LATE).set_index("category")
    # by hand from the file: request 0 = 3 + 1,200 written + 18,000 read, request 1 = 2 + 900 + 19,203;
    # the compact_boundary (line 5, trigger auto) comes after request 1, the file's last
    assert (rows.loc[occ.CONTEXT, "requests"], rows.loc[occ.CONTEXT, "compactions"]) == (2, 1)
    assert rows.loc[occ.CONTEXT, "tokens"] == 20_105 and rows.loc[occ.FIXED_BASE, "tokens"] == 19_203
    # no request shows what the compaction left, so the Read result the last request carried stays resident
    assert rows.loc["Read", "results"] == 1 and rows.loc["Read", "tokens"] > 0
    assert rows.loc[occ.CONTEXT, "evicted_tokens"] == 0


def _requests(cycles: list[int]) -> pd.DataFrame:
    return pd.DataFrame(
        {"trial_id": "t", "arm": "a", "cycle": cycles, "input_tokens": [1000 + 100 * c for c in cycles]}
    ).assign(output_tokens=10)


def test_a_late_gap_counts_once_like_any_gap_and_other_events_do_not_count():
    requests = _requests([0, 1, 2])
    results = pd.DataFrame(columns=["trial_id", "cycle", "category", "chars"])
    events = pd.DataFrame(
        {
            "trial_id": "t",
            # one compaction inside the gap before request 1; Codex's two events of one compaction after the last
            # request (cycle 3: the request after it, which never came); an API error after it, not a compaction
            "cycle": [1, 3, 3, 3],
            "kind": ["system:compact_boundary", "compacted", "context_compacted", "api_error"],
        }
    )
    out = occ.measure(requests, results, events=events)
    assert out["compactions"].iloc[0] == 2
    assert occ.measure(requests, results, events=events.iloc[[0, 3]])["compactions"].iloc[0] == 1
