"""What a user sees: each figure's content and the report's tables, checked on the committed examples.

The figures are inspected as matplotlib objects (lines' data, axis limits and scale, labels, legend
texts), so a test fails when a figure says something other than the numbers in ``analysis/``. The
examples are read, never rewritten: publishing runs on a copy of an example's tables and analysis.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import matplotlib
import msgspec
import numpy as np
import pandas as pd
import pytest

from kit import charts
from kit.experiment.layout import BatchDir
from kit.records import AnalysisFiles
from kit.report import batch as report
from kit.stages import analyze, plot
from tests.report_tables import DESIGN
from tests.support import ROOT

matplotlib.use("Agg")

EXAMPLES = ROOT / "outputs" / "examples"


def _example(name: str) -> AnalysisFiles:
    return BatchDir(EXAMPLES / name).read_analysis()


@pytest.fixture(scope="module")
def batch_read() -> AnalysisFiles:
    return _example("batch-read")


@pytest.fixture(scope="module")
def terse() -> AnalysisFiles:
    return _example("terse")


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _copy(name: str, into: Path) -> Path:
    """An example's tables and analysis (not its raw run) in a fresh folder, to publish without touching it."""
    folder = into / name
    for part in ("tables", "analysis"):
        shutil.copytree(EXAMPLES / name / part, folder / part)
    return folder


# ---------------------------------------------------------------- 1. warmth


def test_warmth_cold_end_is_the_input_ratio_and_the_total_ratio_is_drawn_apart(terse):
    observed, warmth = terse.observed, terse.warmth
    ax = charts.warmth_vs_ratio(warmth, observed, terse.design).axes[0]
    pairs = observed[["arm_a", "arm_b"]].drop_duplicates().itertuples(index=False)
    for arm_a, arm_b in pairs:  # the example compares skill and baseline with terse: one pair of lines each
        name = f"{arm_a} / {arm_b}"
        cold = [line for line in ax.lines if line.get_label().startswith(f"{charts.INPUT_LABEL} {name} (")]
        total = [line for line in ax.lines if line.get_label().startswith(f"{charts.TOTAL_LABEL} {name} (")]
        assert len(cold) == 1 and len(total) == 1, name
        swept = warmth[(warmth["arm_a"] == arm_a) & (warmth["arm_b"] == arm_b)]
        seen = observed[(observed["arm_a"] == arm_a) & (observed["arm_b"] == arm_b)]
        assert cold[0].get_ydata()[0] == pytest.approx(swept["total_ratio"].iloc[0])  # mean input tokens a / b
        assert total[0].get_ydata()[0] == pytest.approx(seen["total_ratio"].iloc[0])  # the headline's ratio
        assert cold[0].get_label() == f"{charts.INPUT_LABEL} {name} ({swept['total_ratio'].iloc[0]:.2f})"
    assert "median of 2 batches" not in _legend(ax)  # two pairs of one batch are not two batches
    assert "total-token ratio (cold end)" not in _legend(ax)  # the old, untrue label


def test_warmth_axis_spans_the_replayed_hit_rates_and_names_the_arms(batch_read):
    fig = charts.warmth_vs_ratio(batch_read.warmth, batch_read.observed, batch_read.design)
    ax = fig.axes[0]
    warmth = batch_read.warmth
    reach = float(((warmth["hit_rate_a"] + warmth["hit_rate_b"]) / 2).max())  # full survival: 46 %, not 100 %
    assert reach == pytest.approx(0.464, abs=0.001)
    assert ax.get_xlim() == pytest.approx((0.0, reach * 1.08))
    curve = next(line for line in ax.lines if line.get_label() == "replayed batching / placebo")
    assert curve.get_xdata().max() == pytest.approx(reach)
    assert ax.get_ylabel() == "uncached-token ratio batching / placebo"
    assert fig._suptitle.get_text() == "Uncached-token ratio batching / placebo vs cache warmth"
    assert "a / b" not in ax.get_ylabel()


def test_warmth_without_any_cache_hit_still_gets_an_axis(terse):
    fig = charts.warmth_vs_ratio(terse.warmth, terse.observed, terse.design)
    assert fig.axes[0].get_xlim() == pytest.approx((0.0, 0.05))
    assert any("no cache hit at any replayed warmth" in t.get_text() for t in fig.axes[0].texts)


# ---------------------------------------------------------------- 2. ratio forest


def test_forest_axis_is_clamped_and_far_bounds_are_labelled_arrows(batch_read):
    ratios = batch_read.ratios.copy()
    total_row = ratios.index[ratios["metric"] == "total_tokens"][0]
    ratios.loc[total_row, "lower"] = 1 / 76.63  # an absurd bound, as an uncapped interval once gave
    ax = charts.ratio_forest(ratios, batch_read.design).axes[0]
    assert ax.get_xscale() == "log"
    low, high = ax.get_xlim()
    shown = 1 / ratios.loc[ratios["metric"] != "grade", "estimate"]  # "times fewer", as the headline reads
    assert low >= shown.min() / charts.FOREST_SPREAD and high <= shown.max() * charts.FOREST_SPREAD
    assert high < 76.63 and "→ 76.6 (beyond the runs)" in [t.get_text() for t in ax.texts]  # and not capped
    arrows = [line for line in ax.lines if line.get_marker() == ">"]
    assert arrows and any(a.get_xdata()[0] == pytest.approx(high) for a in arrows)
    for line in ax.lines:  # nothing is drawn past the axis
        x = np.asarray(line.get_xdata(), float)
        if line.get_linestyle() != "--":
            assert (x >= low * 0.999).all() and (x <= high * 1.001).all(), line


def test_forest_runs_the_way_the_headline_reads(batch_read):
    ratios, design = batch_read.ratios, batch_read.design
    total = ratios[ratios["metric"] == "total_tokens"].iloc[0]
    headline = report.total_sentences(ratios, design)[0]
    assert headline.startswith(f"batching feeds {1 / total['estimate']:.2f}× fewer total tokens than placebo")
    factor_ci = f"95% CI {1 / total['upper']:.2f}–{1 / total['lower']:.2f}× fewer"
    assert f"({factor_ci}; ratio {total['estimate']:.2f}, 95% CI {total['lower']:.2f}–" in headline  # each in its units
    fig = charts.ratio_forest(ratios, design)
    ax = fig.axes[0]
    point = next(line for line in ax.lines if line.get_marker() == "o")  # the first row: total tokens
    assert point.get_xdata()[0] == pytest.approx(1 / total["estimate"])
    ci = next(line for line in ax.lines if line.get_marker() in ("None", "") and len(line.get_xdata()) == 2)
    assert ci.get_xdata()[0] == pytest.approx(1 / total["upper"])  # the headline's lower bound
    assert ax.get_xlabel().startswith("times fewer = mean(baseline) / mean(arm)")
    assert "right of 1: the arm uses less" in ax.get_xlabel()
    assert "times fewer" in fig._suptitle.get_text()


def test_forest_keeps_more_when_the_headline_says_more(terse):
    ratios, design = terse.ratios, terse.design
    first = ratios[ratios["metric"] == "total_tokens"].iloc[0]
    assert f"{first['estimate']:.2f}× more total tokens" in report.total_sentences(ratios, design)[0]
    ax = charts.ratio_forest(ratios, design).axes[0]
    assert ax.get_xlabel().startswith("times more = mean(arm) / mean(baseline)")
    point = next(line for line in ax.lines if line.get_marker() == "o")
    assert point.get_xdata()[0] == pytest.approx(ratios["estimate"].iloc[0])


# ---------------------------------------------------------------- 3. distributions


def test_token_axes_start_at_zero(batch_read):
    fig = charts.arm_distributions(batch_read.trials, batch_read.design)
    for ax in fig.axes[:2]:
        assert ax.get_ylim()[0] == 0


# ---------------------------------------------------------------- 4. cycle growth


def test_cycle_growth_has_thin_trial_lines_and_a_bold_mean_per_arm(batch_read):
    requests = batch_read.requests
    ax = charts.cycle_growth(requests, batch_read.design).axes[0]
    trials = [line for line in ax.lines if line.get_label().startswith("_trial")]
    means = [line for line in ax.lines if " mean " in line.get_label()]
    assert len(trials) == requests["trial_id"].nunique() == 10
    assert all(line.get_linewidth() < 1 and line.get_alpha() < 0.5 for line in trials)
    assert len(means) == 2 and all(line.get_linewidth() > 2 and line.get_alpha() is None for line in means)
    assert _legend(ax) == ["batching mean (5 trials)", "placebo mean (5 trials)"]
    assert ax.get_ylim()[0] == 0


def test_cycle_growth_mean_counts_a_finished_trial_at_its_total():
    requests = pd.DataFrame(
        {
            "arm": "a",
            "trial_id": ["t1", "t1", "t1", "t2", "t2"],
            "cycle": [1, 2, 3, 1, 2],
            "input_tokens": [100, 200, 300, 50, 50],
        }
    )
    ax = charts.cycle_growth(requests, msgspec.structs.replace(DESIGN, batch="x")).axes[0]
    mean = next(line for line in ax.lines if line.get_label() == "a mean (2 trials)")
    np.testing.assert_allclose(mean.get_ydata(), [75, 200, 350])  # t2 ended at 100 and stays there: (600+100)/2


# ---------------------------------------------------------------- 5. occupancy


def test_occupancy_legend_lists_only_categories_present():
    data = _example("occupancy")
    ax = charts.occupancy_bars(data.occupancy, data.design).axes[0]
    assert sorted(_legend(ax)) == ["Grep/Glob", "Read", "base", "explore tool"]  # no Bash/exec, other tools


@pytest.mark.parametrize(
    ("name", "drawn"), [("occupancy", True), ("batch-read", False), ("terse", False), ("session-chain", False)]
)
def test_occupancy_figure_only_where_occupancy_is_the_question(name, drawn):
    data = _example(name)
    assert plot.occupancy_is_the_question(data.design, data.occupancy) is drawn
    assert ("occupancy_bars" in plot.figures_for(data.design, data.occupancy)) is drawn


def test_an_explore_arm_asks_the_occupancy_question_whatever_the_task():
    data = _example("occupancy")
    occupancy, design = data.occupancy, msgspec.structs.replace(data.design, task="my-repo")
    assert plot.occupancy_is_the_question(design, occupancy)
    assert not plot.occupancy_is_the_question(design, occupancy[occupancy["arm"] == "files"])


# ---------------------------------------------------------------- 6. quality parity


def _total_interval(ax, y: int) -> tuple[float, float, float]:
    """(mean, lower, upper) of the interval drawn at row ``y`` of the total-tokens panel."""
    point = next(line for line in ax.lines if line.get_marker() == "o" and line.get_ydata()[0] == y)
    segments = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    bars = [seg for c in segments for seg in c.get_segments() if seg[0][1] == y]
    (bar,) = bars
    return float(point.get_xdata()[0]), float(bar[0][0]), float(bar[1][0])


def test_quality_parity_quotes_arms_csv(batch_read):
    arms = batch_read.arms
    totals = arms[arms["metric"] == "total_tokens"].set_index("arm")
    for given in (arms, None):  # handed arms.csv, or computing it as the analyze stage does
        right = charts.quality_parity(batch_read.trials, batch_read.design, given).axes[1]
        for y, arm in enumerate(["batching", "placebo"]):
            mean, lower, upper = _total_interval(right, y)
            assert (mean, lower, upper) == pytest.approx(tuple(totals.loc[arm, ["mean", "lower", "upper"]]))
    assert not hasattr(charts, "_mean_ci")
    grades = charts.grade_summary(batch_read.trials, arms).set_index("arm")
    assert grades.loc["batching", "mean"] == 1.0 and np.isnan(grades.loc["batching", "lower"])  # zero variance


# ---------------------------------------------------------------- 7, 8. report and publish


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict:
    """The terse example published anew from a copy, with its savings table (seed-002 style) added."""
    root = tmp_path_factory.mktemp("published")
    folder = _copy("terse", root)
    trials = pd.read_csv(folder / "analysis" / "trials.csv")
    savings = analyze.savings(trials, "terse", ["baseline", "skill"], confidence=0.95, n_resamples=2_000, seed=0)
    savings.to_csv(folder / "analysis" / "savings.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        out = plot.publish(Path("terse"))
        report_path = plot.report_path(Path("terse"))
    return {"folder": folder, "savings": savings, "published": out, "report_path": report_path}


def test_publish_returns_paths_relative_to_the_caller(published):
    assert published["published"].report == Path("terse/report.md")
    assert published["report_path"] == Path("terse/report.md")
    assert all(not p.is_absolute() for p in published["published"].figures.values())
    assert "occupancy_bars" not in published["published"].figures
    assert not (published["folder"] / "figures" / "occupancy_bars.png").exists()
    assert plot.report_path(published["folder"] / "nowhere") is None


def test_report_has_human_headers_one_cell_intervals_and_method_citations(published):
    md = (published["folder"] / "report.md").read_text()
    assert "| arm | n | failed | total tokens (mean) | total tokens, 95% CI | ratio arm / baseline |" in md
    for raw in ("total_tokens_mean", "ratio_lower", "total_tokens_upper", "seed 000 " + "§"):
        assert raw not in md, raw
    ratios = pd.read_csv(published["folder"] / "analysis" / "ratios.csv")
    total = ratios[(ratios["metric"] == "total_tokens") & (ratios["arm"] == "baseline")].iloc[0]
    cell = report.interval(total["lower"], total["upper"])
    assert re.fullmatch(r"\d\.\d+–\d\.\d+", cell) and f"| {cell} |" in md  # one cell, not three columns
    assert "(docs/method.md#replication)" in md
    assert md.splitlines()[0] == report.SIMULATION_BANNER  # an embedded-provider batch says so first


def test_report_lists_per_prompt_savings(published):
    md = (published["folder"] / "report.md").read_text()
    assert "## Per-prompt savings" in md and "docs/method.md#savings" in md
    row = published["savings"].query("arm == 'skill' and metric == 'output_tokens'").iloc[0]
    cells = (
        f"| skill vs terse | output tokens | {row['n']} | {row['median']:.1%} | {row['mean']:.1%} | "
        f"{row['lower']:.1%} to {row['upper']:.1%} | {row['min']:.1%} | {row['max']:.1%} | {row['stdev']:.1%} |"
    )
    assert cells in md


def test_report_html_keeps_tables_on_the_page(published):
    page = (published["folder"] / "report.html").read_text()
    assert "overflow-x: auto" in page and "white-space: nowrap" in page and "table-layout" in page
    assert page.count('<div class="table-wrap"><table>') == page.count("<table>") > 0
    intervals = re.findall(r'<td class="interval">([^<]*)</td>', page)
    assert intervals and all("–" in i or " to " in i for i in intervals)
    assert not re.search(r"<td[^>]*>\s*[\d.,]+–\s*</td>", page)  # no interval split over cells


def test_every_published_figure_still_says_simulation(published):
    for name in published["published"].figures:
        svg = (published["folder"] / "figures" / f"{name}.svg").read_text()
        assert charts.SIMULATION_CAPTION in svg, name
    assert published["published"].headline.splitlines()[0] == report.SIMULATION_BANNER
