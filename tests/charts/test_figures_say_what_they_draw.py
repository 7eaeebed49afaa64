"""Each figure says what it draws and draws what it says (issue 30, item 7), checked on matplotlib's objects.

The audit found a label over the wrong arm, a lone dot on a ±0.04 grade axis with no word of why, a footnote
explaining a marker the plot lacked, a legend naming a curve that was not drawn, and bounds that are not
confidence bounds drawn like those that are. Each test reads the artists (texts and their positions against
the ticks, legend handles against drawn lines, axis limits, marker styles), never pixels.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.colors import to_hex
from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D

from kit import charts
from kit.charts.parity import FLAGGED_NOTE
from kit.experiment.layout import BatchDir
from kit.records import AnalysisFiles
from tests.report_tables import DESIGN, ratio_row, report_ratios
from tests.support import ROOT

matplotlib.use("Agg")

EXAMPLES = ROOT / "outputs" / "examples"


@pytest.fixture(scope="module")
def batch_read() -> AnalysisFiles:
    return BatchDir(Path(EXAMPLES / "batch-read")).read_analysis()


@pytest.fixture(scope="module")
def terse() -> AnalysisFiles:
    return BatchDir(Path(EXAMPLES / "terse")).read_analysis()


def _footer(fig) -> str:
    """The figure's own texts (title, subtitle, notes) as one line: a wrapped note reads as written."""
    return " ".join(" ".join(t.get_text() for t in fig.texts).split())


def _nearest_tick(ax, y: float) -> int:
    ticks = np.asarray(ax.get_yticks(), float)
    return int(ticks[np.argmin(np.abs(ticks - y))])


def _data_y(ax, text) -> float:
    """A text's y in data coordinates wherever it was anchored (annotations by their point plus offset)."""
    fig = ax.figure
    FigureCanvasAgg(fig).draw()
    box = text.get_window_extent()
    return float(ax.transData.inverted().transform(((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2))[1])


def _markers(ax, marker: str, hollow: bool | None = None) -> list[Line2D]:
    lines = [line for line in ax.lines if line.get_marker() == marker]
    if hollow is None:
        return lines
    return [line for line in lines if (to_hex(line.get_markerfacecolor()) == "#ffffff") is hollow]


# ---------------------------------------------------------------- 1. the parity label sits on its own arm


def _three_arms() -> pd.DataFrame:
    """Three arms graded and counted: alpha 2× fewer than placebo, beta 1.25× more."""
    totals = {"alpha": 50_000, "beta": 125_000, "placebo": 100_000}
    rows = [
        {"batch": "b1", "arm": arm, "run": r, "status": "ok", "grade": 0.8 + 0.04 * r,
         "total_tokens": total + 1_000 * (r - 2), "uncached_input_tokens": 1_000}
        for arm, total in totals.items()
        for r in range(5)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_each_parity_label_sits_in_the_row_of_the_arm_it_describes():
    fig = charts.quality_parity(_three_arms(), DESIGN)
    right = fig.axes[1]
    names = [t.get_text() for t in right.get_yticklabels()]
    assert names == ["alpha", "beta", "placebo"]
    expected = {"alpha": "mean 2.00× fewer than placebo", "beta": "mean 1.25× more than placebo"}
    labels = {t.get_text(): t for t in right.texts}
    assert set(labels) == set(expected.values())  # the baseline's own row gets none
    axes_box = right.get_window_extent()
    for arm, wording in expected.items():
        text = labels[wording]
        row = names.index(arm)
        y = _data_y(right, text)
        assert _nearest_tick(right, y) == row and row - 0.5 < y < row  # above its own line, inside its own band
        box = text.get_window_extent()
        assert axes_box.x0 <= box.x0 and box.x1 <= axes_box.x1  # the whole label inside the panel
        mean = right.transData.transform((_three_arms().query("arm == @arm")["total_tokens"].mean(), row))[0]
        assert box.x0 - 6 <= mean <= box.x1 + 6  # and starting or ending at the arm's mean


def test_the_batch_read_parity_label_is_on_batching_and_inside_the_panel(batch_read):
    right = charts.quality_parity(batch_read.trials, batch_read.design, batch_read.arms).axes[1]
    (text,) = right.texts
    assert "fewer than placebo" in text.get_text()
    assert right.get_yticklabels()[_nearest_tick(right, _data_y(right, text))].get_text() == "batching"
    assert right.get_window_extent().x0 <= text.get_window_extent().x0  # no longer spilling past the axis


# ---------------------------------------------------------------- 2. a grade that did not vary says so


def test_a_grade_without_variation_says_so_on_a_sensible_axis(batch_read):
    ratios = batch_read.ratios
    grade = ratios[ratios["metric"] == "grade"].iloc[0]
    assert np.isnan(grade["lower"]) and "zero variance in both arms" in grade["note"]  # the example's case
    fig = charts.ratio_forest(ratios, batch_read.design)
    panel = fig.axes[1]
    low, high = panel.get_xlim()
    assert low == pytest.approx(-high) and high >= 0.25  # not ±0.04 around a lone dot
    (note,) = [t for t in panel.texts if t.get_text() == "no variation in either arm"]
    assert note.xy == (pytest.approx(grade["estimate"]), 0)  # beside the grade's own dot
    assert _nearest_tick(panel, _data_y(panel, note)) == 0


def test_a_grade_interval_keeps_its_bounds_on_the_axis():
    ratios = report_ratios(values=(-0.4, -0.7, -0.1))
    panel = charts.ratio_forest(ratios, DESIGN).axes[1]
    low, high = panel.get_xlim()
    assert low < -0.7 and high > 0.7 and low == pytest.approx(-high)
    assert not panel.texts  # an interval drawn needs no note


def test_parity_grade_panel_notes_an_arm_whose_grades_are_all_equal(batch_read):
    left = charts.quality_parity(batch_read.trials, batch_read.design, batch_read.arms).axes[0]
    names = [t.get_text() for t in left.get_yticklabels()]
    notes = {_nearest_tick(left, _data_y(left, t)): t.get_text() for t in left.texts}
    assert notes == {names.index(arm): "no variation: all 5 graded 1.00" for arm in names}
    varied = charts.quality_parity(_three_arms(), DESIGN).axes[0]
    assert not varied.texts  # grades that vary get their interval, not a note


# ---------------------------------------------------------------- 3. the footnote explains only what is drawn


def _footnote_matches_markers(fig) -> None:
    ax = fig.axes[0]
    text = _footer(fig)
    assert ("hollow dot" in text) == bool(_markers(ax, "o", hollow=True))
    assert ("hollow square at a bound" in text) == bool(_markers(ax, "s", hollow=True))
    assert ("cross at a bound" in text) == bool(_markers(ax, "x"))


@pytest.mark.parametrize("case", ["plain", "stitch", "small_n", "capped", "beyond"])
def test_forest_footnote_describes_only_the_markers_drawn(case: str):
    ratios = report_ratios()
    cycles = ratios["metric"] == "cycles"
    if case == "stitch":
        ratios.loc[cycles, "label"] = "cross-run stitch"
    if case == "small_n":
        ratios.loc[cycles, "small_n"] = True
    if case in ("capped", "beyond"):  # cycles 0.4–0.6: the runs allow 0.4–0.58 or, paired, 0.45–0.58
        ratios = ratios.assign(resample_min=np.nan, resample_max=np.nan, bound_beyond_data=False)
        ratios.loc[cycles, ["resample_min", "resample_max", "bound_beyond_data"]] = (
            (0.4, 0.58, True) if case == "capped" else (0.45, 0.58, True)
        )
    fig = charts.ratio_forest(ratios, DESIGN)
    _footnote_matches_markers(fig)
    text = _footer(fig)
    assert ("cross-run stitch" in text) == (case == "stitch") and ("n < 5" in text) == (case == "small_n")
    if case == "plain":
        assert "hollow" not in text and "cross" not in text  # the footnote the audit saw, on a plot without one


def test_the_examples_forests_explain_exactly_their_markers(batch_read, terse):
    for data in (batch_read, terse):
        _footnote_matches_markers(charts.ratio_forest(data.ratios, data.design))


# ---------------------------------------------------------------- 4. no legend entry for an undrawn curve


def _visible(artist) -> bool:
    """Whether an artist shows something: a marker, or a line with extent on screen, or points."""
    if isinstance(artist, ErrorbarContainer):
        return _visible(artist.lines[0])
    if isinstance(artist, PathCollection):
        return np.asarray(artist.get_offsets()).shape[0] > 0
    if isinstance(artist, Line2D):
        if artist.get_marker() not in (None, "", "None", " "):
            return True
        xy = artist.get_transform().transform(np.column_stack([artist.get_xdata(), artist.get_ydata()]))
        return bool(np.nanmax(np.ptp(xy, axis=0)) > 1)
    return True


def _legend_artists_are_drawn(ax) -> list[str]:
    handles, labels = ax.get_legend_handles_labels()
    FigureCanvasAgg(ax.figure).draw()
    assert labels == [t.get_text() for t in ax.get_legend().get_texts()]
    for handle, label in zip(handles, labels, strict=True):
        assert _visible(handle), label
    return labels


def test_terse_warmth_draws_its_one_point_and_says_why_there_is_no_curve(terse):
    ax = charts.warmth_vs_ratio(terse.warmth, terse.observed, terse.design).axes[0]
    labels = _legend_artists_are_drawn(ax)
    assert "replayed baseline / terse" not in labels  # the curve the audit's legend named, never drawn
    assert "replayed baseline / terse: one point (no warmth range)" in labels
    (point,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer) and "baseline / terse" in c.get_label()]
    swept = terse.warmth[(terse.warmth["arm_a"] == "baseline") & (terse.warmth["arm_b"] == "terse")]
    ratio = swept["ratio"].iloc[0]
    assert point.lines[0].get_xdata()[0] == 0.0 and point.lines[0].get_ydata()[0] == pytest.approx(ratio)
    assert any(t.get_text().startswith("no warmth curve: no cache hit at any replayed warmth") for t in ax.texts)
    assert "band = " not in _footer(ax.figure)  # no band is drawn, so none is explained


def test_warmth_without_a_sweep_says_so_in_the_axis(terse):
    ax = charts.warmth_vs_ratio(terse.warmth.iloc[0:0], terse.observed, terse.design).axes[0]
    labels = _legend_artists_are_drawn(ax)
    assert not any(label.startswith("replayed") for label in labels)
    assert "no warmth curve: this analysis has no warmth sweep" in [t.get_text() for t in ax.texts]


def test_a_warmth_curve_is_drawn_with_its_band_and_no_excuse(batch_read):
    ax = charts.warmth_vs_ratio(batch_read.warmth, batch_read.observed, batch_read.design).axes[0]
    labels = _legend_artists_are_drawn(ax)
    assert "replayed batching / placebo" in labels
    assert not any(t.get_text().startswith("no warmth curve") for t in ax.texts)
    assert "band = bootstrap CI of the replayed ratio" in _footer(ax.figure)


# ---------------------------------------------------------------- 5. bounds that are not confidence bounds


def test_forest_marks_the_capped_bound_where_the_runs_end(batch_read):
    ratios = batch_read.ratios
    ax = charts.ratio_forest(ratios, batch_read.design).axes[0]
    shown = ratios[ratios["metric"] != "grade"].reset_index(drop=True)
    squares = {(round(float(m.get_xdata()[0]), 9), int(m.get_ydata()[0])) for m in _markers(ax, "s", hollow=True)}
    expected = set()
    for i, row in shown.iterrows():  # drawn as "times fewer": the ratio's lower bound is the right end
        if str(row["bound_beyond_data"]) == "True" and row["lower"] == pytest.approx(row["resample_min"]):
            expected.add((round(1 / float(row["resample_min"]), 9), int(i)))
        if str(row["bound_beyond_data"]) == "True" and row["upper"] == pytest.approx(row["resample_max"]):
            expected.add((round(1 / float(row["resample_max"]), 9), int(i)))
    assert expected and squares == expected
    total = int(shown.index[shown["metric"] == "total_tokens"][0])
    assert (round(1 / float(shown.loc[total, "resample_min"]), 9), total) in squares  # the headline's far bound
    ticks = _markers(ax, "|")
    for row in shown.index[shown["bound_beyond_data"].astype(str) != "True"]:
        assert len([t for t in ticks if t.get_ydata()[0] == row]) == 2  # confidence bounds keep their ticks
    assert "capped where these runs end" in _footer(ax.figure)


def test_forest_marks_a_paired_bound_beyond_the_runs_with_a_cross(terse):
    """A paired row is flagged, not capped, past the runs' range (the terse example's had 1.069–1.118 past
    1.072–1.114); set so here, on the example's first total-token row, whatever this rebuild of it drew."""
    ratios = terse.ratios.copy()
    i = ratios.index[ratios["metric"] == "total_tokens"][0]
    lo, hi = ratios.at[i, "resample_min"] * 0.99, ratios.at[i, "resample_max"] * 1.01
    ratios["bound_beyond_data"] = False
    ratios.loc[i, ["lower", "upper", "bound_beyond_data", "paired"]] = [lo, hi, True, True]
    ax = charts.ratio_forest(ratios, terse.design).axes[0]
    row = list(ratios.index[ratios["metric"] != "grade"]).index(i)
    crosses = sorted(float(m.get_xdata()[0]) for m in _markers(ax, "x") if m.get_ydata()[0] == row)
    assert crosses == pytest.approx([lo, hi])
    assert not _markers(ax, "s")  # nothing was capped
    assert "cross at a bound" in _footer(ax.figure)


def _whisker_styles(ax, row: int) -> list[str]:
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    return [
        "dashed" if cast(list, c.get_linestyle())[0][1] is not None else "solid"  # (offset, dashes); solid: None
        for c in bars
        if any(seg[0][1] == row for seg in c.get_segments())
    ]


def test_parity_dashes_a_per_arm_interval_arms_csv_flags():
    trials = _three_arms()
    arms = charts.parity._arm_intervals(trials, ["total_tokens", "grade"])
    flagged = arms.assign(bound_beyond_data=(arms["arm"] == "placebo") & (arms["metric"] == "total_tokens"))
    fig = charts.quality_parity(trials, DESIGN, flagged)
    right = fig.axes[1]
    assert [_whisker_styles(right, row) for row in range(3)] == [["solid"], ["solid"], ["dashed"]]  # placebo last
    assert FLAGGED_NOTE in _footer(fig)
    plain = charts.quality_parity(trials, DESIGN, arms.drop(columns="bound_beyond_data", errors="ignore"))  # older
    assert _whisker_styles(plain.axes[1], 2) == ["solid"] and FLAGGED_NOTE not in _footer(plain)


def test_parity_ratio_form_marks_a_capped_bound_and_explains_it():
    ratios = pd.DataFrame(
        [
            ratio_row("total_tokens", 0.5, 0.25, 0.8, paired=False, resample_min=0.25, resample_max=0.9,
                      bound_beyond_data=True),
            ratio_row("grade", 0.0, np.nan, np.nan, note="zero variance in both arms: no interval"),
        ]
    )  # fmt: skip
    fig = charts.quality_parity(ratios, DESIGN)
    grades, totals = fig.axes[:2]
    (square,) = _markers(totals, "s", hollow=True)
    assert square.get_xdata()[0] == pytest.approx(1 / 0.25)  # "times fewer": the capped lower bound is the right end
    assert "capped where these runs end" in _footer(fig) and "hollow dot" not in _footer(fig)
    assert [t.get_text() for t in grades.texts] == ["no variation in either arm"]
    assert grades.get_xlim()[1] >= 0.25
