"""The analysis parameters a batch was analysed with are stored with it and reused (issue 29, finding 6): analysed
again without its parameters file, the terse example keeps comparing against its terse control, the comparison a
three-arm design names first leads the report, and the warmth sweep covers every comparison."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit.analysis import cachemodel
from kit.cli import pipeline
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.files import write_json
from kit.report import batch as report
from kit.stages import analyze
from tests.support import ROOT

TERSE = ROOT / "outputs" / "examples" / "terse"
HONEST = [["skill", "terse"], ["baseline", "terse"]]


@pytest.fixture
def terse(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TERSE, tmp_path / "terse"))


def _leading(folder: Path) -> str:
    design, _ = BatchDir(folder).read_design()
    files = BatchDir(folder).read_analysis()
    return report.total_sentences(files.ratios, design, files.headline)[0]


def test_analysed_again_without_parameters_the_baseline_is_the_stored_one(terse: Path) -> None:
    result = analyze.analyze_batches([terse], n_resamples=1_000, warmth_levels=3)
    assert result.design.baseline == "terse" and result.design.comparisons_from == "analysis/design.json"
    assert _leading(terse).startswith("skill feeds") and " than terse " in _leading(terse)  # the stored comparisons
    (terse / "analysis" / "design.json").unlink()  # no analysis yet: the run's parameters (the manifest) say terse
    again = analyze.analyze_batches([terse], n_resamples=1_000, warmth_levels=3)
    assert again.design.baseline == "terse" and again.design.comparisons_from == "manifest.json"


def test_the_comparison_named_first_leads_and_is_reused(terse: Path) -> None:
    first = analyze.analyze_batches([terse], comparisons=HONEST, n_resamples=1_000, warmth_levels=3)
    assert first.design.comparisons == HONEST and first.design.comparisons_from == "given"
    assert first.design.baseline == "terse"  # the first comparison's baseline
    assert _leading(terse).startswith("skill feeds") and " than terse " in _leading(terse)
    stored = orjson.loads((terse / "analysis" / "design.json").read_bytes())
    assert stored["comparisons"] == HONEST
    again = analyze.analyze_batches([terse], n_resamples=1_000, warmth_levels=3)
    assert again.design.comparisons == HONEST and again.design.comparisons_from == "analysis/design.json"
    assert list(dict.fromkeys(again.ratios["comparison"])) == ["skill vs terse", "baseline vs terse"]
    given = analyze.analyze_batches([terse], baseline="baseline", n_resamples=1_000, warmth_levels=3)
    assert given.design.comparisons == [["terse", "baseline"], ["skill", "baseline"]]  # given wins, stored again


def test_the_params_file_leads_with_the_honest_comparison() -> None:
    params = pipeline.load_params(str(ROOT / "params" / "terse.yaml"))
    assert params["comparisons"][0] == ["skill", "terse"]
    plan = pipeline.plan({**params, "batch": "terse", "outputs_dir": str(TERSE.parent)}, ("analyze",))
    assert plan.parameters["analyze"]["comparisons"] == HONEST


def test_the_warmth_sweep_covers_every_comparison(terse: Path) -> None:
    result = analyze.analyze_batches([terse], comparisons=HONEST, n_resamples=1_000, warmth_levels=5)
    assert list(dict.fromkeys(zip(result.warmth["arm_a"], result.warmth["arm_b"], strict=True))) == [
        ("skill", "terse"),
        ("baseline", "terse"),
    ]
    assert set(zip(result.observed["arm_a"], result.observed["arm_b"], strict=True)) == {
        ("skill", "terse"),
        ("baseline", "terse"),
    }
    seg = pd.read_parquet(BatchDir(terse).table("segments"))
    seg = seg.assign(segments=seg["segments_json"].map(orjson.loads), trial_id="terse/" + seg["trial_id"])
    for a, b in HONEST:  # one replay per level for both pairs gives each pair's own sweep
        alone = cachemodel.warmth_sweep(seg, (a, b), levels=5, profile="openai-implicit")
        mine = result.warmth[(result.warmth["arm_a"] == a) & (result.warmth["arm_b"] == b)].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone, check_dtype=False)


def test_a_stored_comparison_that_no_longer_fits_is_refused_with_its_source(terse: Path) -> None:
    design = orjson.loads((terse / "analysis" / "design.json").read_bytes())
    write_json(terse / "analysis" / "design.json", {**design, "comparisons": [["skil", "terse"]]})
    with pytest.raises(ParamError, match=r"'comparisons'.*'skil'.*stored in analysis/design.json"):
        analyze.analyze_batches([terse], n_resamples=1_000, warmth_levels=3)
    with pytest.raises(ParamError, match=r"'comparisons'.*'nope'"):
        pipeline.plan(
            {"batch": "terse", "outputs_dir": str(terse.parent), "comparisons": [["nope", "terse"]]}, ("analyze",)
        )
