"""The printed occupancy block (kit.analysis.occupancy_block): python -m kit occupancy on a real session prints the
layout of docs/method.md#occupancy, and every number in it is the table's."""

from __future__ import annotations

import re

from kit.analysis import occupancy_block
from kit.cli import main as cli
from kit.cli import occupancy as occupancy_cli
from tests.support import FIXTURES

TOOL_HEAVY = FIXTURES / "transcripts" / "claude-session_spotter_tool_heavy.jsonl"
PAIRED = FIXTURES / "transcripts" / "claude-session_ccb_harbor_paired.jsonl"


def test_cli_prints_the_block_with_the_tables_values(capsys):
    assert cli.main(["occupancy", str(TOOL_HEAVY)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = occupancy_cli.session(TOOL_HEAVY).set_index("category")
    assert lines[1] == "Residual context occupancy at end of run:"
    ctx = rows.loc["final context"]
    window = f"{ctx['share_of_window']:>7.1%} of 200k window"
    assert lines[2] == f"  final context     {round(ctx['tokens']):>8,} tok {window}"
    for line, category in zip(lines[3:9], occupancy_block.FAMILIES, strict=True):
        r = rows.loc[category]
        label = occupancy_block.LABELS[category]
        assert line.startswith(f"  {label:<18}{round(r['tokens']):>8,} tok"), line
        assert f"{r['share_of_context']:.1%} of ctx" in line and f"{r['share_of_window']:.1%} of 200k win" in line
        assert f"({round(r['chars']):,} chars, {r['results']} result" in line
    assert lines[9].startswith(f"  base (prompt+prose){round(rows.loc['base', 'tokens']):>8,} tok")
    assert lines[10] == (
        f"    of which fixed  {round(rows.loc['fixed base', 'tokens']):>8,} tok  "
        "system + tool schemas + question, before any tool answered"
    )
    cpt = rows.loc["final context", "chars_per_token"]
    measure = rf"  measure: {cpt:.2f} chars/tok measured ±\? \(.*\) · turns 4 · compactions 0 · priced by o200k"
    assert re.fullmatch(measure, lines[11])


def test_no_calibration_gap_is_said_loudly(capsys):
    assert cli.main(["occupancy", str(PAIRED), "--window-tokens", "100000"]) == 0
    out = capsys.readouterr().out
    assert "3.00 chars/tok default" in out and "of 100k window" in out
    assert "  ! no gap >= 80% tool result" in out and "3 chars/token assumed" in out


def test_missing_path_exits_1(capsys, tmp_path):
    assert cli.main(["occupancy", str(tmp_path / "none*.jsonl")]) == 1
    assert "no session file found" in capsys.readouterr().err
