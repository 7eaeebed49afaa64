"""``python -m kit replicate``: three batches under fresh salts, each with a non-isolated control interleaved, run and
analysed together from one command (docs/method.md#replication), on the embedded provider's SDK backend."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit.cli import main as kit_main
from kit.cli import replicate
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from tests.support import ROOT

DEMO = str(ROOT / "params/demo.yaml")


@pytest.fixture(scope="module")
def replication(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("replicate")
    argv = ["replicate", "-f", DEMO, "-p", "batch", "rep", "-p", "outputs_dir", str(out), "-p", "runs_per_arm", "2"]
    argv += ["-p", "concurrency", "1", "-p", "n_resamples", "1000", "--control", "placebo"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert kit_main.main(argv) == 0
    return out, printed.getvalue()


def _first_reads(folder: Path) -> dict[str, list[int]]:
    """The provider's truth: per arm, the cache reads it served each trial's first request."""
    bd, reads = BatchDir(folder), dict[str, list[int]]()
    for tdir in bd.trial_dirs():
        meta = bd.read_trial_meta(tdir)
        first = orjson.loads(bd.trial_dir(meta.trial_id).provider_log.read_bytes().splitlines()[0])
        reads.setdefault(meta.arm, []).append(first["usage"]["cache_read_tokens"])
    return reads


def test_three_batches_with_fresh_salts_and_the_control_interleaved(replication: tuple[Path, str]) -> None:
    out, printed = replication
    folders = [out / f"rep-{i}" for i in (1, 2, 3)]
    manifests = [BatchDir(f).read_manifest() for f in folders]
    assert len({m.salt for m in manifests}) == 3
    for m in manifests:
        assert m.params.arms == ["placebo", "batching", "placebo_control"]
        assert (
            m.arms["placebo_control"].control and m.arms["placebo_control"].instruction == m.arms["placebo"].instruction
        )
        assert [s.arm for s in m.schedule[:3]] == ["placebo", "batching", "placebo_control"]  # run-major
    trials = pd.read_parquet(folders[1] / "tables/trials.parquet").set_index("arm")
    assert set(trials.loc["placebo_control", "isolation"]) == {"none"} and set(trials.loc["batching", "isolation"]) != {
        "none"
    }
    assert f"batches: {folders[0]}" in printed and "(control: placebo_control)" in printed
    assert printed.strip().endswith(str(folders[0] / "report.md"))


def test_one_report_over_every_batch_states_the_control(replication: tuple[Path, str]) -> None:
    out, _ = replication
    first = BatchDir(out / "rep-1")
    design, _ = first.read_design()
    assert design.batch == ["rep-1", "rep-2", "rep-3"] and design.control_arms == ["placebo_control"]
    invariance = pd.read_csv(first.analysis_csv("warmth_invariance")).set_index("arm")
    assert invariance.loc["batching", "n_batches"] == 3 and bool(invariance.loc["batching", "has_control"])
    control = [r for f in ("rep-1", "rep-2", "rep-3") for r in _first_reads(out / f)["placebo_control"]]
    isolated = [
        r for f in ("rep-1", "rep-2", "rep-3") for a in ("placebo", "batching") for r in _first_reads(out / f)[a]
    ]
    assert sum(control) > 0 and sum(isolated) == 0  # one trial at a time: a later control trial reads an earlier one's
    text = first.report_md.read_text()
    reading = sum(r > 0 for r in control)
    assert (
        f"placebo_control's first requests read {sum(control) / len(control):,.0f} cached tokens on average from "
        f"earlier trials ({reading} of {len(control)} read any), the isolated arms' 0 (0 of {len(isolated)} read any)"
    ) in text
    headline = text.split("## Warnings")[0]
    assert "placebo_control" not in headline and "batching feeds" in headline


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--batches", "1", "--control", "placebo"], "'--batches'"),
        (["--control", "placbo"], "'--control': 'placbo' is not an arm"),
        (["--control", "placebo", "-p", "isolation", "none"], "'isolation'"),
    ],
)
def test_a_mistake_is_one_line_and_writes_nothing(tmp_path: Path, argv: list[str], problem: str, capsys) -> None:
    assert replicate.main(["-f", DEMO, "-p", "outputs_dir", str(tmp_path), "-p", "batch", "x", *argv]) == 1
    assert problem in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_arm_defined_as_a_control_is_the_control() -> None:
    params = {"task": "batch-read", "arms": ["placebo", "batching"], "arm_defs": {"own": {"control": True}}}
    assert replicate.control_arm(params, "own") == ("own", {})
    name, spec = replicate.control_arm(params, "batching")
    assert name == "batching_control" and spec["control"] and spec["placement"] == "agents_file"
    with pytest.raises(ParamError):
        replicate.control_arm(params, "nope")
