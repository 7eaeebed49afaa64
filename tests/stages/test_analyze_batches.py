"""The analyze stage over several batches: two-level intervals and the warmth-invariance check."""

import pandas as pd
import pytest

from kit import stats
from kit.cli import pipeline
from kit.report import batch as report
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


# ---------------------------------------------------------------- every arm of every batch (issue 29, finding 5)

SHORT = {"short": {"instruction": "Keep every answer short.", "placement": "agents_file"}}


@pytest.fixture(scope="module")
def uneven_batches(tmp_path_factory):
    """Batch a runs placebo and batching; batch b adds an arm a lacks (short); batch c runs short and batching only."""
    out = tmp_path_factory.mktemp("uneven")
    folders = {}
    for name, arms in (
        ("a", ["placebo", "batching"]),
        ("b", ["placebo", "short", "batching"]),
        ("c", ["short", "batching"]),
    ):
        params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
        params.update(outputs_dir=str(out), batch=name, runs_per_arm=2, concurrency=2, arms=arms, arm_defs=SHORT)
        folders[name] = run.run_batch(run.configure(params), progress=False)
        parse.parse_batch(folders[name])
    return folders


def test_an_arm_the_first_batch_lacks_is_kept(uneven_batches, tmp_path):
    a, b = uneven_batches["a"], uneven_batches["b"]
    result = analyze.analyze_batches([a, b], baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    assert result.design.arms == ["placebo", "batching", "short"]
    total = result.ratios[result.ratios["metric"] == "total_tokens"].set_index("arm")
    assert total.loc["batching", "batches"] == 2 and total.loc["short", "batches"] == 1
    assert "batches without both arms left out: a" in total.loc["short", "note"]
    b_trials = pd.read_parquet(b / "tables/trials.parquet")
    ok = b_trials[b_trials["status"] == "ok"].groupby("arm")["total_tokens"].mean()
    assert total.loc["short", "estimate"] == pytest.approx(ok["short"] / ok["placebo"])  # batch b's alone
    assert set(result.headline["arm"]) == {"placebo", "batching", "short"}


def test_a_comparison_no_batch_holds_is_a_labelled_stitch_not_dropped(uneven_batches, tmp_path):
    a, c = uneven_batches["a"], uneven_batches["c"]
    with pytest.raises(stats.StitchError):
        analyze.analyze_batches([a, c], baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    result = analyze.analyze_batches([a, c], baseline="placebo", n_resamples=1_000, allow_stitch=True, out_dir=tmp_path)
    short = result.ratios[(result.ratios["arm"] == "short") & (result.ratios["metric"] == "total_tokens")].iloc[0]
    assert short["label"] == "cross-run stitch"


def test_uncached_stays_per_batch_at_its_own_warmth(three_batches, tmp_path):
    result = analyze.analyze_batches(three_batches, baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    rows = result.ratios.query("metric == 'uncached_input_tokens' and arm == 'batching'")
    assert sorted(rows["from_batch"]) == ["m0", "m1", "m2"] and set(rows["batches"]) == {1}  # no pooled uncached row
    for _, row in rows.iterrows():
        trials = pd.read_parquet(ROOT / three_batches[int(row["from_batch"][1])] / "tables/trials.parquet")
        ok = trials[trials["status"] == "ok"]
        arm, base = (ok[ok["arm"] == x] for x in ("batching", "placebo"))
        assert row["estimate"] == pytest.approx(
            arm["uncached_input_tokens"].mean() / base["uncached_input_tokens"].mean()
        )
        assert row["hit_rate_baseline"] == pytest.approx(base["cache_read_tokens"].sum() / base["input_tokens"].sum())
    assert rows["hit_rate_baseline"].nunique() == 3  # three warmths, three figures
    total = result.ratios.query("metric == 'total_tokens' and arm == 'batching'")
    assert len(total) == 1 and total.iloc[0]["from_batch"] == ""  # the cache-free figure pools the batches
    sentences = report.uncached_sentences(result.ratios, result.design)
    assert [s.split(":")[0] for s in sentences if "batching feeds" in s and "structural" not in s] == [
        "uncached tokens in batch m0", "uncached tokens in batch m1", "uncached tokens in batch m2",
    ]  # fmt: skip


def test_the_warmth_sweep_keeps_each_batchs_trials_apart(three_batches, tmp_path):
    """Trial ids repeat across batches (r00-placebo in each): the replay keys them by batch, one domain each."""
    result = analyze.analyze_batches(three_batches, baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    assert set(result.warmth["n_a"]) == {6} and set(result.warmth["n_b"]) == {6}  # 2 runs x 3 batches


def test_the_report_says_what_each_batch_contributed(uneven_batches, tmp_path):
    a, b = uneven_batches["a"], uneven_batches["b"]
    result = analyze.analyze_batches([a, b], baseline="placebo", n_resamples=1_000, out_dir=tmp_path)
    lines = report.batches_section(result.trials, result.ratios, result.design)
    table = "\n".join(lines)
    assert lines[0] == "## Batches"
    row_a = next(line for line in lines[4].splitlines() if line.startswith("| a |"))
    row_b = next(line for line in table.splitlines() if line.startswith("| b |"))
    assert row_a.endswith("| batching vs placebo |") and "short" not in row_a
    assert row_b.endswith("| batching vs placebo, short vs placebo |") and "short 2" in row_b
    assert report.batches_section(result.trials[result.trials["batch"] == "a"], result.ratios, result.design) == []


def test_the_structural_figure_keeps_each_batchs_trials_apart(three_batches, tmp_path):
    """Keyed by trial id alone, batch m1's r00-placebo read batch m0's same-named trial as cached."""
    joint = analyze.analyze_batches(three_batches, baseline="placebo", n_resamples=1_000, out_dir=tmp_path / "all")
    for i, folder in enumerate(three_batches):
        alone = analyze.analyze_batches([folder], baseline="placebo", n_resamples=1_000, out_dir=tmp_path / str(i))
        mine = joint.trials[joint.trials["batch"] == f"m{i}"].set_index("trial_id")["structural_uncached"]
        assert mine.to_dict() == alone.trials.set_index("trial_id")["structural_uncached"].to_dict()
