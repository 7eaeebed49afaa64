"""The analyze stage over several batches: two-level intervals and the warmth-invariance check."""

import pandas as pd
import pytest

from kit.cli import pipeline
from kit.stages import analyze, parse, run
from kit.tasks import batch_read
from tests.support import ROOT


@pytest.fixture(scope="module")
def three_batches(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi")
    control = {"instruction": batch_read.PLACEBO, "placement": "agents_file", "control": True}
    folders = []
    for i, survival in enumerate((1.0, 0.6, 0.3)):
        params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
        params.update(
            outputs_dir=str(out), batch=f"m{i}", runs_per_arm=2, survival=survival, concurrency=2,
            arms=["placebo", "batching", "placebo_control"], arm_defs={"placebo_control": control},
        )  # fmt: skip
        folder = run.run_batch(run.configure(params), progress=False)
        parse.parse_batch(folder)
        folders.append(folder)
    return folders


def test_cross_batch_ratios_use_every_batch(three_batches, tmp_path):
    result = analyze.analyze_batches(three_batches, baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    total = result.ratios.query("metric == 'total_tokens' and arm == 'batching'").iloc[0]
    assert total["batches"] == 3 and total["label"] != "cross-run stitch"
    assert total["lower"] < total["estimate"] < total["upper"]
    assert isinstance(result.design.batch, list) and len(result.design.salts) == 3


def test_warmth_invariance_is_checked_with_a_control(three_batches, tmp_path):
    analyze.analyze_batches(three_batches, baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    inv = pd.read_csv(tmp_path / "warmth_invariance.csv").set_index("arm")
    assert inv.loc["batching", "n_batches"] == 3
    assert bool(inv.loc["batching", "has_control"])
    hits = pd.read_csv(tmp_path / "observed.csv")
    assert len(hits) == 3 and hits["hit_rate_b"].nunique() == 3  # the three warmth levels differ


def test_control_arm_trials_are_not_isolated(three_batches):
    trials = pd.read_parquet(three_batches[0] / "tables/trials.parquet").set_index("arm")
    assert set(trials.loc["placebo_control", "isolation"]) == {"none"}
    assert set(trials.loc["placebo", "isolation"]) != {"none"}
