"""Quality before economy (issue 30): the headline states an efficiency claim only beside the grade's
non-inferiority test, and a comparison family is judged by Holm's step-down.

The batch is the demo pack on the embedded provider (its grades are all 1.0), its trials then rewritten: the
batching arm's answers graded wrong in all trials but one half-right one, so the arm is cheaper and worse. The
report must not say it "feeds fewer tokens" without saying so."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kit import stats
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.report import batch as report
from kit.stages import analyze, parse, plot
from kit.stats import quality
from tests.support import pack_batch


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = pack_batch("demo", tmp_path_factory.mktemp("quality"), batch="q", runs_per_arm=5, salt="quality-1")
    parse.parse_batch(folder)
    return folder


def _regrade(folder: Path, into: Path, grades: dict[str, list[float]]) -> Path:
    copy = Path(shutil.copytree(folder, into))
    table = BatchDir(copy).table("trials")
    trials = pd.read_parquet(table)
    for arm, values in grades.items():
        rows = trials.index[trials["arm"] == arm]
        trials.loc[rows, "grade"] = values[: len(rows)]
    trials.to_parquet(table)
    return copy


def test_an_arm_worse_beyond_the_margin_gets_no_efficiency_headline(graded: Path, tmp_path: Path) -> None:
    folder = _regrade(graded, tmp_path / "worse", {"batching": [0.0, 0.0, 0.0, 0.0, 0.5]})
    result = analyze.analyze_batches([folder], n_resamples=1_000)
    gate = result.quality.set_index("arm").loc["batching"]
    assert gate["verdict"] == quality.WORSE and gate["upper"] < -gate["margin"]
    plot.publish(folder)
    text = BatchDir(folder).report_md.read_text()
    opening = text.split("## Warnings")[0]
    section = text.split("## Quality parity")[1].split("\n## ")[0]
    assert "The non-inferiority gate" in section and "No efficiency headline for batching" in section
    assert "fewer total tokens" not in opening and "more total tokens" not in opening
    assert "No efficiency headline for batching against placebo" in opening
    text = report.headline_text(result.headline, result.ratios, result.design, result.quality)
    assert "fewer total tokens" not in text and "No efficiency headline" in text


def test_parity_not_shown_qualifies_the_headline(graded: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([graded], n_resamples=1_000, out_dir=tmp_path)
    gate = result.quality.iloc[0]
    assert gate["verdict"] == quality.PARITY_NOT_SHOWN  # five perfect answers a side cannot show a 0.1 margin
    assert gate["runs_for_parity"] == quality.runs_for_parity(1.0, 0.1, 0.95) == 45
    (sentence,) = report.total_sentences(result.ratios, result.design, result.headline, result.quality)
    assert "total tokens" in sentence and "placebo" in sentence
    assert "Quality parity is not shown" in sentence and "about 45 graded runs per arm would show it" in sentence
    wider = analyze.analyze_batches([graded], n_resamples=1_000, out_dir=tmp_path / "m", quality_margin=0.6)
    assert wider.quality.iloc[0]["verdict"] == quality.PARITY_SHOWN
    assert (
        "Quality parity shown" in report.total_sentences(wider.ratios, wider.design, wider.headline, wider.quality)[0]
    )


def test_newcombe_matches_its_published_example_and_refuses_bad_margins() -> None:
    # Newcombe (1998), Table II, method 11: 56/70 against 48/80 gives 0.0428 to 0.3422; 9/10 against 3/10,
    # 0.1013 to 0.8387; 5/56 against 0/29, -0.0667 to 0.2037.
    for (ka, na, kb, nb), published in (
        ((56, 70, 48, 80), (0.0428, 0.3422)),
        ((9, 10, 3, 10), (0.1013, 0.8387)),
        ((5, 56, 0, 29), (-0.0667, 0.2037)),
    ):
        lower, upper = quality.newcombe(ka / na, na, kb / nb, nb, 0.95)
        assert (round(float(lower), 4), round(float(upper), 4)) == published
    for bad in (0, 1, -0.1, True, "0.1"):
        with pytest.raises(ParamError, match="quality_margin"):
            quality.check_margin(bad)
    assert quality.check_margin(np.float32(0.25)) == pytest.approx(0.25)
    trials = pd.DataFrame({"arm": ["a"] * 5 + ["b"] * 5, "grade": [1.5] + [1.0] * 9})
    with pytest.raises(ParamError, match="outside"):
        stats.quality_gate(trials, "a", "b")


def test_an_ungraded_pair_says_so() -> None:
    trials = pd.DataFrame({"arm": ["a"] * 5 + ["b"] * 5, "grade": [None] * 10, "status": "ok"})
    gate = stats.quality_gate(trials, "a", "b")
    assert gate.verdict == quality.NOT_GRADED and "cannot tell" in gate.note


def _row(metric: str, lower: float, upper: float) -> stats.Comparison:
    return stats.Comparison(
        comparison="a vs b", arm="a", baseline="b", metric=metric, estimate=(lower + upper) / 2, lower=lower,
        upper=upper, confidence=0.95, n_arm=10, n_baseline=10, paired=False, batches=1, method="m", label="",
        small_n=False, resample_min=0.0, resample_max=9.0, bound_beyond_data=False, interval_rests_on="",
        hit_rate_arm=0.0, hit_rate_baseline=0.0, simulated=True, note="",
    )  # fmt: skip


def test_holm_steps_down_on_intervals() -> None:
    """Three rows: at 1 - 0.05/3 only the first excludes 1; then at 1 - 0.05/2 the second does; the third never."""
    widths = {"a": 0.2, "b": 0.013, "c": 0.05}  # twice the half-width per unit of z, by row

    def again(row: stats.Comparison, level: float) -> stats.Comparison:
        from scipy.stats import norm

        centre = {"a": 0.7, "b": 0.985, "c": 1.02}[row.comparison]
        z = norm.ppf((1 + level) / 2)
        half = widths[row.comparison] * z / 2
        return _replace(row, lower=centre - half, upper=centre + half, confidence=level)

    rows = [again(_replace(_row("total_tokens", 0, 0), comparison=k), 0.95) for k in "abc"]
    out = stats.holm(rows, again, confidence=0.95)
    assert [r.decisive for r in out] == [True, True, False]
    assert [round(r.family_level, 4) for r in out] == [0.9833, 0.975, 0.95]
    assert all(r.family_size == 3 for r in out)
    single = stats.holm(rows[:1], again)
    assert single[0].family_level == 0.95 and single[0].decisive


def _replace(row: stats.Comparison, **changes: object) -> stats.Comparison:
    import msgspec

    return msgspec.structs.replace(row, **changes)


def test_the_analysis_judges_total_and_uncached_as_one_family(graded: Path, tmp_path: Path) -> None:
    result = analyze.analyze_batches([graded], n_resamples=1_000, out_dir=tmp_path)
    ratios = result.ratios.set_index("metric")
    for metric in stats.HEADLINE_METRICS:
        assert ratios.loc[metric, "family_size"] == 2
        assert ratios.loc[metric, "family_level"] in (0.95, 0.975)
    assert (ratios.drop(index=list(stats.HEADLINE_METRICS))["family_size"] == 0).all()
    table = report._ratios_table(result.ratios)
    assert table["family (Holm)"].str.contains(r"decisive at 9[57]").sum() == 2


def test_a_single_prompt_pack_has_no_per_prompt_savings(graded: Path, tmp_path: Path) -> None:
    """Issue 30 item 6: the batch-read pack repeats one prompt, so run i of one arm is no partner of run i of the
    other; 'per-prompt' savings there paired trials by an index that means nothing."""
    result = analyze.analyze_batches([graded], n_resamples=1_000, out_dir=tmp_path)
    assert result.savings.empty
    assert report._savings_section(result.savings) == []
