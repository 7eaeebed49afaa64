"""Occupancy on the real transcripts of tests/fixtures (issue #15): no pooled fallback anywhere, and each
session's chars/token is either measured within the 2-4 of dense source or flagged with the reason."""

from __future__ import annotations

import pytest

from kit.analysis import occupancy as occ
from kit.cli import occupancy as occupancy_cli
from tests.support import FIXTURES

TRANSCRIPTS = FIXTURES / "transcripts"
# file -> how its ratio is found now that readers give output_chars (measured, or a named fallback)
CASES = {
    "claude-session_ccb_harbor_paired.jsonl": "default",  # CodeContextBench: one gap with tool output, 4% of it
    "claude-streamjson_ccb_harbor_claude-code.txt": "default",  # the same run as stream-json
    "claude-session_spotter_tool_heavy.jsonl": "measured",
    "claude-session_spotter_subagent_acompact.jsonl": "none",  # its tool results are the subagent's window
    "codex-rollout_yepanywhere_codemode_0.154.0.jsonl": "default",  # Code Mode: at most 74% tool result
}


@pytest.mark.parametrize(("name", "how"), CASES.items())
def test_ratio_is_measured_in_range_or_flagged_with_the_reason(name, how):
    rows = occupancy_cli.session(TRANSCRIPTS / name)
    trial = rows[rows["category"] == occ.CONTEXT].iloc[0]
    assert trial["calibration"] == how, trial["calibration_note"]
    # every response's own characters are known (output_chars), and a session file's blocks or a rollout's items
    # are counted with o200k_base where the results are too (output_o200k_tokens); a one-request main window has
    # no gap to measure
    counted = name.startswith(("claude-session", "codex-rollout")) and trial["priced_by"] == "o200k"
    assert trial["output_measure"] == (("o200k" if counted else "chars") if trial["requests"] > 1 else "")
    low, high = occ.DENSE_RANGE
    if how == "measured" and low <= trial["chars_per_token"] <= high:
        assert trial["calibration_note"] == ""
    else:
        assert trial["calibration_note"].startswith(("no gap", "no tool result")), trial["calibration_note"]
