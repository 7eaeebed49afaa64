"""Every task pack runs a small batch on both real CLIs against the embedded provider, through all four
stages: run, parse (exactly), analyze and plot.

Small presets and one run of two arms keep each case to seconds; analyze and plot are called as their
notebooks call them (``analyze.analyze_batches``, ``plot.publish``), without a kernel per stage,
which the pipeline tests already start. Fresh-session arms write one transcript per turn on both
CLIs, so these batches are also where trials with several transcript files go through every analysis.
"""

from pathlib import Path

import pandas as pd
import pytest

from kit import tasks
from kit.agents import cli_common
from kit.analysis import occupancy
from kit.stages import analyze, parse, plot, run
from tests.support import small_batch

pytestmark = pytest.mark.e2e

CASES = [(task, backend) for task in sorted(tasks.PACKS) for backend in ("codex", "claude")]


@pytest.mark.parametrize(("task", "backend"), CASES)
def test_pack_small_batch_on_a_cli(tmp_path, task, backend):
    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    folder = small_batch(tmp_path, task, backend)
    tables = parse.parse_batch(folder)
    trials = tables["trials"]
    assert list(trials["status"]) == ["ok", "ok"], list(run.schedule_table(folder)["reason"])
    assert tables["parse_issues"].empty, tables["parse_issues"].to_dict("records")
    assert (trials["total_tokens"] > 0).all() and (trials["cycles"] >= len(tasks.get(task).prompts_for(0))).all()
    graded = trials["grade"].dropna()
    assert len(graded) == 2 and (graded > 0).all()
    requests = tables["requests"]
    for _, rows in requests.groupby("trial_id"):  # cycle counts the trial's responses across its files
        assert rows["cycle"].tolist() == list(range(len(rows))), rows[["source_path", "cycle", "file_cycle"]]
    if task == "occupancy":  # the explore arm explored (through MCP), the files arm read files
        calls = trials.set_index("arm")[["calls_explore", "calls_read", "calls_exec", "calls_bash", "calls_other"]]
        reading = ["calls_read", "calls_exec", "calls_bash"]
        assert calls.loc["explore", "calls_explore"] >= 3 and calls.loc["explore", reading].sum() == 0
        assert calls.loc["files", "calls_explore"] == 0 and calls.loc["files", reading].sum() > 0
        # Claude Code defers MCP tools: one ToolSearch loads explore; Codex offers it from the start
        assert calls.loc["explore", "calls_other"] == (1 if backend == "claude" else 0)

    result = analyze.analyze_batches([folder], n_resamples=1_000, warmth_levels=5)
    occ = result.occupancy_trials
    assert len(occ) == 2 * len(occupancy.CATEGORIES) and occ["tokens"].notna().all()
    assert result.trials["structural_uncached"].notna().all()
    published = plot.publish(folder)
    assert (folder / "figures" / "cycle_growth.png").is_file() and Path(published.report).is_file()

    if task == "session-chain":  # with_session: each of the five turns a fresh session, in its own file
        fresh = requests[requests["arm"] == "with_session"]
        assert fresh["source_path"].nunique() == 5 and fresh["turn"].drop_duplicates().tolist() == [1, 2, 3, 4, 5]
        assert (fresh["file_cycle"] == 0).sum() == 5 and (fresh["file_role"] == "main").all()
        sessions = occ.drop_duplicates("trial_id").set_index("arm")["sessions"]
        assert sessions.to_dict() == {"builtin": 1, "with_session": 5}
        assert not pd.read_parquet(folder / "tables" / "requests.parquet")["sidechain"].any()
