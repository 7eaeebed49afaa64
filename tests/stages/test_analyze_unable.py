"""Which arms could not do the task, from the trials table alone (``kit.analysis.metrics.unable_arms``), and what the
report makes of it: no efficiency headline, the arm named first (issue 29). Measured on the real Codex CLI: a model
whose tools the provider did not see answered "no tool" in every trial, graded 0, counted ``ok``, and the report
printed "1.00× fewer total tokens"; this batch's tables are rewritten the same way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from kit.analysis import metrics
from kit.experiment.layout import BatchDir
from kit.report import batch as report
from kit.stages import analyze, parse, plot
from tests.support import pack_batch


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = pack_batch("demo", tmp_path_factory.mktemp("unable"), batch="ok", runs_per_arm=2, salt="unable-1")
    parse.parse_batch(folder)
    return folder


def test_a_batch_whose_arms_do_the_task_is_not_flagged(healthy: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([healthy], n_resamples=1_000, out_dir=tmp_path)
    assert result.design.unable == []
    assert report.headline_text(result.headline, result.ratios, result.design).count("total tokens than") == 1


def test_every_arm_answering_without_a_tool_gets_no_headline(healthy: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(healthy, tmp_path / "no-tool"))
    table = BatchDir(folder).table("trials")
    trials = pd.read_parquet(table)
    trials.assign(grade=0.0, tool_calls=0).astype({"tool_calls": trials["tool_calls"].dtype}).to_parquet(table)
    result = analyze.analyze_batches([folder], n_resamples=1_000)
    flagged = {(u.arm, u.graded_zero, u.no_tool) for u in result.design.unable}
    assert flagged == {("placebo", True, False), ("batching", True, False)}  # nobody called a tool: grades say it
    plot.publish(folder)
    text = BatchDir(folder).report_md.read_text()
    opening = text.split("## Warnings")[0]
    assert "total tokens than" not in opening and opening.count("**Cannot do the task:") == 2
    assert "graded 0 each and no trial of it called a tool" in opening
    assert "| cannot do the task |" in text  # the per-arm table flags both rows


def _trials(rows: list[tuple[str, str, float | None, int]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["arm", "status", "grade", "tool_calls"])
    return frame.assign(batch="b", run=range(len(frame)), trial_id=[f"t{i}" for i in range(len(frame))])


def test_only_an_arm_that_fails_throughout_is_flagged() -> None:
    mixed = _trials([("a", "ok", 0.0, 3), ("a", "ok", 0.5, 3), ("b", "ok", 1.0, 3)])
    assert metrics.unable_arms(mixed) == []  # one right answer: the arm can do it
    failed = _trials([("a", "failed", 0.0, 0), ("a", "ok", 1.0, 2), ("b", "ok", 1.0, 3)])
    assert metrics.unable_arms(failed) == []  # a failed trial is counted as failed, not as this
    no_tools_needed = _trials([("a", "ok", 1.0, 0), ("b", "ok", 0.9, 0)])
    assert metrics.unable_arms(no_tools_needed) == []  # the terse pack: nobody calls a tool
    (ungraded,) = metrics.unable_arms(_trials([("a", "ok", None, 0), ("b", "ok", None, 4)]))
    assert (ungraded.arm, ungraded.graded_zero, ungraded.no_tool) == ("a", False, True)
    assert ungraded.reason == "a: no trial of it called a tool (the other arms' made 4.0 calls per trial)"
