"""Every task pack runs a small batch on a real CLI against the embedded provider, and parses exactly."""

from pathlib import Path

import pytest

from kit import parse, pipeline, run, tasks
from kit.agents import cli_common

ROOT = Path(__file__).resolve().parent.parent
PARAMS = {"batch-read": "demo", "terse": "terse", "occupancy": "occupancy", "session-chain": "session-chain"}

pytestmark = pytest.mark.e2e


# fresh sessions on both CLIs; occupancy's explore tool reaches both through the kit's MCP server
CASES = [(task, "codex") for task in sorted(tasks.PACKS)] + [("session-chain", "claude"), ("occupancy", "claude")]


@pytest.mark.parametrize(("task", "backend"), CASES)
def test_pack_small_batch_on_a_cli(tmp_path, task, backend):
    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    params = pipeline.load_params(str(ROOT / f"params/{PARAMS[task]}.yaml"))
    params.update(outputs_dir=str(tmp_path), batch=task, backend=backend, runs_per_arm=1, concurrency=2, profile=None)
    params["arms"] = params["arms"][:2]
    folder = run.run_batch(run.configure(params), progress=False)
    tables = parse.parse_batch(folder)
    trials = tables["trials"]
    assert list(trials["status"]) == ["ok", "ok"], list(run.summary(folder)["reason"])
    assert tables["parse_issues"].empty, tables["parse_issues"].to_dict("records")
    assert (trials["total_tokens"] > 0).all() and (trials["cycles"] >= len(tasks.get(task).prompts_for(0))).all()
    graded = trials["grade"].dropna()
    assert len(graded) == 2 and (graded > 0).all()
    if task == "occupancy":  # the explore arm explored (through MCP), the files arm read files
        calls = trials.set_index("arm")[["calls_explore", "calls_read", "calls_exec", "calls_bash", "calls_other"]]
        reading = ["calls_read", "calls_exec", "calls_bash"]
        assert calls.loc["explore", "calls_explore"] >= 3 and calls.loc["explore", reading].sum() == 0
        assert calls.loc["files", "calls_explore"] == 0 and calls.loc["files", reading].sum() > 0
        # Claude Code defers MCP tools: one ToolSearch loads explore; Codex offers it from the start
        assert calls.loc["explore", "calls_other"] == (1 if backend == "claude" else 0)
