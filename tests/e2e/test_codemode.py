"""Codex Code Mode, simulated: the ``code_mode`` backend option, the scripted model's ``exec`` cells, the
batch-read pack on the real Codex CLI with its exec-cell metrics, and the Code Mode figure.

The cells are read back the way Codex sends them to the model: the cell's ``text(…)`` items joined into
one tool output, possibly cut by Codex's per-output budget. The e2e case pins ``p_batch=1``/``q_batch=0``
so the arms' cells are known exactly (placebo: one call per cell; batching: ``Promise.all``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kit import charts
from kit.agents import cli_common, codex
from kit.agents.base import TrialSpec
from kit.cli import pipeline
from kit.experiment.design import Arm
from kit.provider.policy import Conversation, Message, ToolCall, ToolSpec
from kit.stages import analyze, parse, plot, run
from kit.tasks import batch_read, tooluse
from kit.transcripts.codex_rollout import PROMISE_ALL, TOOL_CALL
from tests.support import ROOT, design

FX = batch_read.generate(0, "small")
CODEX_TOOLS = (ToolSpec("exec_command"), ToolSpec("exec"), ToolSpec("wait"))


def _output(paths: list[str], files: dict[str, str]) -> str:
    """What Codex sends back for a ``read_cell``: the status header, then one text item per read."""
    items = [
        f"==> {p} (exit 0) <==\n{files[p]}" if p in files else f"==> {p} (exit 1) <==\ncat: {p}: No such file"
        for p in paths
    ]
    return "\n".join(["Script completed\nWall time 0.1 seconds\nOutput:\n", *items])


def _conversation(system: str, cells: list[list[str]]) -> Conversation:
    """The batch-read prompt and ``cells`` already run (each a list of paths), on Codex with Code Mode."""
    messages = [Message("user", batch_read.PROMPT)]
    for i, paths in enumerate(cells):
        call = ToolCall("exec", tooluse.read_cell(paths).arguments, f"c{i}")
        messages += [Message("assistant", "", (call,)), Message("tool", _output(paths, FX.files), tool_call_id=f"c{i}")]
    return Conversation("responses", "sim", system, CODEX_TOOLS, tuple(messages), "t1", 0)


def _cell(reply) -> str:
    (call,) = reply.tool_calls
    assert call.name == "exec" and set(call.arguments) == {"input"}
    return call.arguments["input"]


# ------------------------------------------------------------------ cells written and read back


def test_a_cell_has_one_tools_call_per_read_and_promise_all_only_for_several():
    one = tooluse.read_cell(["MANIFEST.txt"]).arguments["input"]
    several = tooluse.read_cell(["a.py", "b c.py", "d.py"]).arguments["input"]
    assert len(TOOL_CALL.findall(one)) == 1 and not PROMISE_ALL.search(one)  # counted as the readers count
    assert len(TOOL_CALL.findall(several)) == 3 and PROMISE_ALL.search(several)
    assert '"cmd": "cat \'b c.py\'"' in several  # quoted for the shell, JSON inside the JavaScript


def test_cell_output_gives_each_file_back_and_failures_as_failures():
    paths = ["MANIFEST.txt", "nope.txt", "config/defaults.toml"]
    result = Message("tool", _output(paths, FX.files))
    reads = tooluse.cell_reads(tooluse.read_cell(paths), result)
    assert reads == {"MANIFEST.txt": FX.files["MANIFEST.txt"], "nope.txt": None, **{paths[2]: FX.files[paths[2]]}}
    failed = Message("tool", "Script failed\nWall time 0.0 seconds\nOutput:\n\nScript error:\nboom")
    assert tooluse.cell_reads(tooluse.read_cell(paths[:1]), failed) == {"MANIFEST.txt": None}


def test_reads_codex_cut_are_read_again_and_the_next_cell_holds_what_came_through():
    paths = ["MANIFEST.txt", "config/defaults.toml", "pipeline/ingest.py", "pipeline/dedupe.py"]
    whole = _output(paths[:2], FX.files)
    cut = f"{whole}\n==> {paths[2]} (exit 0) <==\nimport…812 tokens truncated…x\n[omitted 1 text items ...]"
    call = ToolCall("exec", tooluse.read_cell(paths).arguments, "c0")
    assert list(tooluse.cell_reads(call, Message("tool", cut))) == paths[:2]  # neither read nor failed
    history = (Message("assistant", "", (call,)), Message("tool", cut, tool_call_id="c0"))
    conv = Conversation("responses", "sim", "", CODEX_TOOLS, history)
    assert tooluse.cell_capacity(conv) == 2 and tooluse.file_contents(conv).keys() == set(paths[:2])
    alone = ToolCall("exec", tooluse.read_cell(paths[2:3]).arguments, "c1")  # a lone read is kept, as a call's is
    assert tooluse.cell_reads(alone, Message("tool", cut.replace(whole, "")))[paths[2]].startswith("import…")


def test_policy_writes_serial_cells_for_placebo_and_one_promise_all_cell_for_batching():
    policy = batch_read.BatchReadPolicy(p_batch=1.0, q_batch=0.0)
    start = _cell(policy.reply(_conversation(batch_read.PLACEBO, [])))
    assert len(TOOL_CALL.findall(start)) == 1 and "MANIFEST.txt" in start
    placebo = _cell(policy.reply(_conversation(batch_read.PLACEBO, [["MANIFEST.txt"]])))
    assert len(TOOL_CALL.findall(placebo)) == 1 and not PROMISE_ALL.search(placebo)
    batching = _cell(policy.reply(_conversation(batch_read.BATCHING, [["MANIFEST.txt"]])))
    assert len(TOOL_CALL.findall(batching)) == len(policy.paths) and PROMISE_ALL.search(batching)
    done = policy.reply(_conversation(batch_read.BATCHING, [["MANIFEST.txt"], list(policy.paths)]))
    assert not done.tool_calls and batch_read.grade(done.text, FX).score == 1.0


# ------------------------------------------------------------------ the backend option


def _spec(tmp_path: Path, **options) -> TrialSpec:
    return TrialSpec(
        batch="t", trial_id="t1", arm=Arm("a"), run=0, order_index=0, nonce="abc", isolation=frozenset(),
        prompt_cache_key=None, prompts=("first",), workdir=tmp_path / "repo_a", out_dir=tmp_path,
        base_url="http://127.0.0.1:8000/t/t1", api_key=run.EMBEDDED_KEY, model="sim-model", options=options,
    )  # fmt: skip


def test_code_mode_option_sets_the_codex_feature_and_refuses_non_booleans(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    assert codex.CODE_MODE not in codex.config_args(_spec(tmp_path), home)[0]
    on, _ = codex.config_args(_spec(tmp_path, code_mode=True), home)
    assert on[on.index(codex.CODE_MODE) - 1] == "-c"
    assert "code_mode" in codex.applied(_spec(tmp_path, code_mode=True), None)
    with pytest.raises(ValueError, match=r"backend_options\.code_mode"):
        codex.config_args(_spec(tmp_path, code_mode="false"), home)


# ------------------------------------------------------------------ the figure


TRIALS = pd.DataFrame(
    {
        "arm": ["placebo", "placebo", "batching", "batching", "batching"],
        "status": ["ok", "ok", "ok", "ok", "failed"],
        "exec_cells": [14, 12, 3, 2, 0],
        "exec_tool_calls": [14, 15, 18, 14, 0],
        "exec_multi_call_cells": [0, 1, 2, 1, 0],
        "exec_promise_all_cells": [0, 1, 2, 1, 0],
    }
)
DESIGN = design(batch="cm", arms=["placebo", "batching"], runs_per_arm=2, backend="codex")


def _points(ax) -> dict[float, list[float]]:
    """x position -> the y values of the scatter points there."""
    out: dict[float, list[float]] = {}
    for collection in ax.collections:
        for x, y in collection.get_offsets():
            out.setdefault(float(x), []).append(float(y))
    return {x: sorted(ys) for x, ys in out.items()}


def test_code_mode_figure_shows_calls_per_cell_and_cells_per_trial_with_the_design_line():
    fig = charts.code_mode_cells(TRIALS, DESIGN)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ["batching", "placebo"]
    assert _points(left) == {0.0: [6.0, 7.0], 1.0: [1.0, 1.25]}  # the failed trial is not drawn
    assert _points(right) == {0.0: [2.0, 3.0], 1.0: [12.0, 14.0]}
    texts = [t.get_text() for t in fig.texts]
    assert charts.design_line(DESIGN, {"batching": 2, "placebo": 2}) in "\n".join(texts).replace("\n", " ")
    assert "batching: 5 cells, 32 tools.* calls, 3 cells with ≥ 2 calls, 3 with Promise.all" in texts
    assert "placebo: 26 cells, 29 tools.* calls, 1 cells with ≥ 2 calls, 1 with Promise.all" in texts
    assert charts.SIMULATION_CAPTION in texts


def test_code_mode_figure_is_drawn_only_where_a_trial_ran_a_cell():
    assert plot.code_mode_ran(TRIALS)
    assert not plot.code_mode_ran(TRIALS.assign(exec_cells=0))
    assert not plot.code_mode_ran(TRIALS.drop(columns="exec_cells"))


# ------------------------------------------------------------------ the real Codex CLI


@pytest.mark.e2e
def test_batch_read_on_codex_with_code_mode_batches_in_cells(tmp_path, monkeypatch):
    if not (cli_common.TOOLS_BIN / "codex").exists():
        pytest.skip(f"codex CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="codemode", backend="codex", runs_per_arm=1, concurrency=2)
    params.update(profile=None, backend_options={"code_mode": True})
    params["task_options"] = {**params["task_options"], "p_batch": 1.0, "q_batch": 0.0}
    folder = run.run_batch(run.configure(params), progress=False)
    tables = parse.parse_batch(folder)
    trials = tables["trials"].set_index("arm")
    assert list(trials["status"]) == ["ok", "ok"], list(run.schedule_table(folder)["reason"])
    assert tables["parse_issues"].empty and (trials["grade"] == 1.0).all()
    assert (trials["function_calls"] == 0).all()  # every read went through a cell
    per_cell = trials["exec_tool_calls"] / trials["exec_cells"]
    assert per_cell["placebo"] == 1.0 and trials.loc["placebo", "exec_promise_all_cells"] == 0
    assert per_cell["batching"] > 3 and trials.loc["batching", "exec_promise_all_cells"] >= 1
    assert trials.loc["batching", "cycles"] < trials.loc["placebo", "cycles"]
    assert trials.loc["placebo", "exec_tool_calls"] == len(batch_read.BatchReadPolicy().paths) + 1  # no re-read
    meta = json.loads((folder / "raw" / trials.loc["batching", "trial_id"] / "meta.json").read_text())
    assert "features.code_mode=true" in json.dumps(meta)
    analyze.analyze_batches([folder], n_resamples=1000, warmth_levels=5)
    published = plot.publish(folder)
    assert published.figures["code_mode_cells"].is_file()


@pytest.mark.e2e
@pytest.mark.parametrize("code_mode", [False, True])
def test_batch_read_on_codex_gpt_5_6_sol_reads_through_its_additional_tools(tmp_path, code_mode):
    """Codex's code_mode_only model: tools only in an ``additional_tools`` item, Code Mode on or not. The scripted
    model finds ``exec`` there and reads in cells; what Codex kept out (the deferred dummy tool) and offered against
    the pin (multi-agent v2) is said per trial and in the batch's warnings, from the provider log's truth."""
    if not (cli_common.TOOLS_BIN / "codex").exists():
        pytest.skip(f"codex CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="sol", backend="codex", runs_per_arm=1, concurrency=2)
    params.update(model="gpt-5.6-sol", backend_options={"code_mode": code_mode})
    params["task_options"] = {**params["task_options"], "p_batch": 1.0, "q_batch": 0.0}
    folder = run.run_batch(run.configure(params), progress=False)
    tables = parse.parse_batch(folder)
    trials = tables["trials"].set_index("arm")
    assert list(trials["status"]) == ["ok", "ok"], list(run.schedule_table(folder)["reason"])
    assert (trials["grade"] == 1.0).all() and (trials["function_calls"] == 0).all()
    per_cell = trials["exec_tool_calls"] / trials["exec_cells"]
    assert per_cell["placebo"] == 1.0 and per_cell["batching"] > 3
    for arm in ("placebo", "batching"):
        tdir = folder / "raw" / trials.loc[arm, "trial_id"]
        log = [json.loads(line) for line in (tdir / "provider_log.jsonl").read_text().splitlines()]
        assert "exec" in log[0]["tools"] and "collaboration__spawn_agent" in log[0]["tools"]
        assert not any("cache_bust" in name for record in log for name in record["tools"])  # the truth: deferred
        versions = json.loads((tdir / "meta.json").read_text())["versions"]
        assert versions["isolation_held"] == "nonce,prompt_cache_key"
        assert versions["isolation.cache_bust_tool"].startswith("NOT IN THE PROMPT")
        assert "spawn_agent" in versions["multi_agent_tools"]
    warnings = json.loads((folder / "manifest.json").read_text())["warnings"]
    assert any(w.startswith("isolation: on gpt-5.6-sol the cache_bust_<id> tool did not reach") for w in warnings)
    assert any(w.startswith("multi-agent tools: Codex offered") for w in warnings)
    analyze.analyze_batches([folder], n_resamples=1000, warmth_levels=5)
