"""A non-isolated control arm is measured, not headlined (docs/method.md#controls): the shared-prefix rule leaves its
trials out, its first requests' cache reads are set against the isolated arms', as the provider logged them, and the
report quotes it as the control."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.report import batch as report
from kit.stages import analyze, parse
from kit.tasks import batch_read
from tests.support import pack_batch

CONTROL = {"placebo_control": {"instruction": batch_read.PLACEBO, "placement": "agents_file", "control": True}}


@pytest.fixture(scope="module")
def control_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs of placebo, batching and a placebo control, one trial at a time (so the control's later trials
    find its earlier ones' prefix in the cache, whatever the machine's speed)."""
    out = tmp_path_factory.mktemp("controls")
    folder = pack_batch(
        "demo", out, batch="ctl", runs_per_arm=3, concurrency=1, salt="controls-1",
        arms=["placebo", "batching", "placebo_control"], arm_defs=CONTROL,
    )  # fmt: skip
    parse.parse_batch(folder)
    return folder


def _first_reads(folder: Path) -> dict[str, list[int]]:
    """The provider's truth: per arm, the cache reads it served each trial's first request (its log's first line)."""
    reads: dict[str, list[int]] = {}
    bd = BatchDir(folder)
    for tdir in bd.trial_dirs():
        meta = bd.read_trial_meta(tdir)
        first = orjson.loads(BatchDir(folder).trial_dir(meta.trial_id).provider_log.read_bytes().splitlines()[0])
        reads.setdefault(meta.arm, []).append(first["usage"]["cache_read_tokens"])
    return reads


def test_first_requests_are_the_provider_logs(control_batch: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([control_batch], n_resamples=1_000, out_dir=tmp_path)
    truth = _first_reads(control_batch)
    assert sum(truth["placebo_control"]) > 0  # the control's later trials read the earlier one's prefix
    assert truth["placebo"] == truth["batching"] == [0, 0, 0]  # the cache-bust tool heads every isolated prefix
    by_arm = {r.arm: r for r in result.design.first_request_reads}
    for arm, reads in truth.items():
        assert by_arm[arm].cached_mean == pytest.approx(sum(reads) / len(reads))
        assert by_arm[arm].reading == sum(r > 0 for r in reads) and by_arm[arm].trials == len(reads)
    assert by_arm["placebo_control"].control and not by_arm["placebo"].control
    assert result.design.controls == ["placebo_control"]


def test_the_shared_prefix_is_measured_over_isolated_trials(control_batch: Path) -> None:
    tables = BatchDir(control_batch)
    segments = pd.read_parquet(tables.table("segments"))
    trials = pd.read_parquet(tables.table("trials"))
    isolated = segments[segments["arm"] != "placebo_control"]
    assert analyze.shared_first_prefix(segments, trials) == analyze.shared_first_prefix(isolated) == 0
    control_only = trials[trials["arm"] == "placebo_control"]
    alone = analyze.shared_first_prefix(segments[segments["arm"] == "placebo_control"])
    assert alone is not None and alone > 1_000  # no isolation there
    assert analyze.shared_first_prefix(segments, control_only) == 0  # the control's own trials left out


def test_the_report_states_the_contamination_and_never_headlines_the_control(control_batch: Path) -> None:
    result = analyze.analyze_batches([control_batch], n_resamples=1_000)
    truth = _first_reads(control_batch)
    mean = sum(truth["placebo_control"]) / 3
    (sentence,) = report.contamination_sentences(result.design)
    assert sentence.startswith(f"Contamination the control shows: placebo_control's first requests read {mean:,.0f}")
    assert "the isolated arms' 0 (0 of 6 read any)" in sentence
    totals = report.total_sentences(result.ratios, result.design, result.headline)
    assert len(totals) == 1 and totals[0].startswith("batching feeds") and "placebo_control" not in totals[0]
    assert not any("placebo_control" in s for s in report.uncached_sentences(result.ratios, result.design))
    control_row = result.headline.set_index("arm").loc["placebo_control"]
    assert control_row["label"] == "control (not isolated)"
    assert (result.ratios["arm"] == "placebo_control").any()  # still compared: shown as the control
    assert set(result.quality["arm"]) == {"batching"} and set(result.warmth_invariance["arm"]) == {"batching"}
    assert result.savings.empty  # one prompt repeated: no per-prompt savings (issue 30 item 6)


def test_a_control_is_no_baseline(control_batch: Path, tmp_path: Path) -> None:
    with pytest.raises(ParamError, match=r"'baseline'.*non-isolated control"):
        analyze.analyze_batches([control_batch], baseline="placebo_control", n_resamples=1_000, out_dir=tmp_path)


def test_the_cache_section_shows_the_control_nearer_the_structural_model(control_batch: Path) -> None:
    """An ideal per-trial cache reads only the trial's own prompts. The isolated arms' observed reads stay below it
    (the provider's minimum and rounding); the control's reach further, by what it read of other trials' prefixes
    (measured: 0.999 of the structural share against 0.95-0.98)."""
    result = analyze.analyze_batches([control_batch], n_resamples=1_000)
    table = report.structural_vs_observed(result.trials).set_index("arm")["observed / structural"]
    assert 1 > table["placebo_control"] > max(table["placebo"], table["batching"])
