"""Figures and report of a batch: their content, not just that they draw.

The frames are small synthetic ones in the shapes of docs/tables.md; numbers are chosen so the
expected sentences can be worked out by hand.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_hex

from kit import charts
from kit.report import batch as report
from tests.report_tables import DESIGN, ratio_row, report_headline, report_ratios, report_trials


def _warmth() -> pd.DataFrame:
    survival = np.linspace(0, 1, 11)
    return pd.DataFrame(
        {
            "survival": survival,
            "hit_rate_a": 0.9 * survival,
            "hit_rate_b": 0.8 * survival,
            "uncached_a": 1.0,
            "uncached_b": 1.0,
            "ratio": 1.4 - 0.5 * survival,
            "lower": 1.3 - 0.5 * survival,
            "upper": 1.5 - 0.5 * survival,
            "total_ratio": 1.4,
            "arm_a": "placebo",
            "arm_b": "batching",
        }
    )


def _observed() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "batch": ["b1", "b2", "b3"],
            "arm_a": "placebo",
            "arm_b": "batching",
            "hit_rate_a": [0.8, 0.85, 0.9],
            "hit_rate_b": [0.7, 0.75, 0.8],
            "uncached_ratio": [1.0, 0.98, 0.95],
            "total_ratio": 1.4,
        }
    )


def _requests(trials: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, t in trials.iterrows():
        for cycle in range(1, 6):
            tokens = 1_000 * cycle + (5_000 if t["arm"] == "placebo" else 0)
            if t["trial_id"] == "b1-batching-r0" and cycle == 3:
                tokens = pd.NA
            rows.append(
                {"batch": "b1", "arm": t["arm"], "trial_id": t["trial_id"], "cycle": cycle, "input_tokens": tokens}
            )
    return pd.DataFrame(rows).astype({"input_tokens": "Int64"})


def _occupancy() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"arm": arm, "category": cat, "tokens": tok, "share_of_window": tok / 200_000, "err": tok * 0.02}
            for arm in ("batching", "placebo")
            for cat, tok in (("base", 30_000), ("file-access", 10_000 if arm == "placebo" else 4_000))
        ]
    )


def _texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text())


@pytest.fixture(scope="module")
def figs() -> dict:
    trials = report_trials()
    return {
        "warmth": charts.warmth_vs_ratio(_warmth(), _observed(), DESIGN),
        "forest": charts.ratio_forest(report_ratios(), DESIGN),
        "distributions": charts.arm_distributions(trials, DESIGN),
        "growth": charts.cycle_growth(_requests(trials), DESIGN),
        "occupancy": charts.occupancy_bars(_occupancy(), DESIGN),
        "quality": charts.quality_parity(trials, DESIGN),
    }


# ---------------------------------------------------------------- figures


def test_warmth_curve_band_reference_and_observed_points(figs):
    ax = figs["warmth"].axes[0]
    assert ax.get_xlabel() == "cache hit rate (warmth)"
    assert ax.get_ylabel() == "uncached-token ratio placebo / batching"
    assert any(isinstance(c, PolyCollection) for c in ax.collections), "bootstrap band missing"
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(points) == 1 and len(points[0].get_offsets()) == 3  # one point per observed batch
    np.testing.assert_allclose(points[0].get_offsets()[:, 0], [0.75, 0.8, 0.85])
    cold = [line for line in ax.lines if line.get_label().startswith(charts.INPUT_LABEL)]
    assert len(cold) == 1 and set(cold[0].get_ydata()) == {1.4}
    curve = next(line for line in ax.lines if line.get_label().startswith("replayed"))
    np.testing.assert_allclose(curve.get_xdata()[[0, -1]], [0.0, 0.85])  # x = mean of the two arms' hit rates
    assert {"b1", "b2", "b3"} <= {t.get_text() for t in ax.texts}


def test_warmth_accepts_the_sweeps_band_names():
    sweep = _warmth().rename(columns={"lower": "ratio_lower", "upper": "ratio_upper"})
    ax = charts.warmth_vs_ratio(sweep, _observed().iloc[:1], DESIGN).axes[0]
    band = next(c for c in ax.collections if isinstance(c, PolyCollection))
    assert band.get_paths()[0].vertices[:, 1].max() == pytest.approx(1.5)
    assert len(next(c for c in ax.collections if isinstance(c, PathCollection)).get_offsets()) == 1


def test_every_figure_states_design_and_simulation(figs):
    for name, fig in figs.items():
        text = _texts(fig)
        assert charts.SIMULATION_CAPTION in text, name
        assert "schedule balanced" in text and "isolation nonce+key" in text, name
        assert "b1" in text and "n = " in text, name
    real = charts.warmth_vs_ratio(_warmth(), _observed(), msgspec.structs.replace(DESIGN, simulated=False))
    assert charts.SIMULATION_CAPTION not in _texts(real)


def test_arm_colours_fixed_by_name_and_shared_across_figures(figs):
    colors = charts.arm_colors(["placebo", "batching"])
    assert colors == charts.arm_colors(["batching", "placebo"])
    index = int(hashlib.sha256(b"batching").hexdigest(), 16) % len(charts.ARM_PALETTE)
    assert charts.arm_colors(["batching"])["batching"] == charts.ARM_PALETTE[index]
    clash = next(
        f"x{i}"
        for i in range(1000)
        if int(hashlib.sha256(f"x{i}".encode()).hexdigest(), 16) % len(charts.ARM_PALETTE) == index
    )
    assert len(set(charts.arm_colors(["batching", clash]).values())) == 2  # a collision still gets two colours
    growth = {to_hex(line.get_color()) for line in figs["growth"].axes[0].lines}
    assert growth == set(colors.values())
    dist_ax = figs["distributions"].axes[0]
    batching_points = {
        to_hex(c.get_facecolor()[0]) for c in dist_ax.collections if isinstance(c, PathCollection)
    } & set(colors.values())
    assert batching_points == set(colors.values())


def test_forest_marks_stitch_and_small_n_hollow_and_puts_grade_apart():
    ratios = report_ratios()
    ratios.loc[ratios["metric"] == "cycles", "label"] = "cross-run stitch"
    ratios.loc[ratios["metric"] == "grade", "small_n"] = True
    fig = charts.ratio_forest(ratios, DESIGN)
    main, grade = fig.axes
    labels = [t.get_text() for t in main.get_yticklabels()]
    assert labels == [
        "batching vs placebo · total tokens",
        "batching vs placebo · uncached tokens (hit 91%/88%)",
        "batching vs placebo · cycles (stitch)",
    ]
    assert [t.get_text() for t in grade.get_yticklabels()] == ["batching vs placebo · grade (n<5)"]
    faces = [to_hex(line.get_markerfacecolor()) for line in main.lines if line.get_marker() == "o"]
    assert faces[2] == "#ffffff" and faces[0] != "#ffffff"
    assert any(line.get_xdata()[0] == 1.0 for line in main.lines if line.get_linestyle() == "--")
    assert any(line.get_xdata()[0] == 0.0 for line in grade.lines if line.get_linestyle() == "--")
    assert "no estimate (not drawn): cost_usd" in _texts(fig)


def test_distributions_show_each_ok_trial_with_its_schedule_position(figs):
    fig = figs["distributions"]
    total_ax, uncached_ax = fig.axes[:2]
    offsets = np.vstack([c.get_offsets() for c in total_ax.collections if isinstance(c, PathCollection)])
    expected = report_trials().query("status == 'ok'")
    assert sorted(offsets[:, 1]) == sorted(expected["total_tokens"].astype(float))
    assert sorted(int(t.get_text()) for t in total_ax.texts) == sorted(expected["order_index"])
    assert "uncached" in uncached_ax.get_ylabel()
    assert "1 failed trial(s) not drawn" in _texts(fig)


def test_cycle_growth_is_cumulative_and_stops_at_unknown_usage(figs):
    ax = figs["growth"].axes[0]
    trials = report_trials()
    lines = [line for line in ax.lines if line.get_label().startswith("_trial")]
    assert len(lines) == len(trials)
    tops = sorted(np.nanmax(line.get_ydata()) for line in lines)
    assert tops[-1] == sum(1_000 * c + 5_000 for c in range(1, 6))  # a placebo trial: 40,000
    stopped = [line.get_ydata() for line in lines if np.isnan(line.get_ydata()).any()]
    assert len(stopped) == 1 and list(stopped[0][:2]) == [1_000, 3_000] and np.isnan(stopped[0][2:]).all()
    assert ax.get_ylabel() == "cumulative prompt (input) tokens"


def test_occupancy_stacks_with_error_bars_and_tolerates_empty(figs):
    ax = figs["occupancy"].axes[0]
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert len(bars) == 4
    assert max(p.get_y() + p.get_height() for p in bars) == 40_000
    assert any("20.0% of window" in t.get_text() for t in ax.texts)
    assert sum(1 for c in ax.collections if c.__class__.__name__ == "LineCollection") >= 2
    empty = charts.occupancy_bars(_occupancy().iloc[0:0], DESIGN)
    assert "no multi-turn data" in _texts(empty)


def test_quality_parity_puts_grade_next_to_total(figs):
    left, right = figs["quality"].axes[:2]
    assert "grade" in left.get_xlabel() and "total tokens" in right.get_xlabel()
    factor = 103_750 / 74_600  # ok placebo trials 0, 3, 4, 8 against batching 1, 2, 5, 6, 9
    assert [t.get_text() for t in right.texts] == [f"mean {factor:.2f}× fewer than placebo"]  # the headline's way
    by_ratios = charts.quality_parity(report_ratios(), DESIGN)
    assert "grade difference" in by_ratios.axes[0].get_xlabel()
    assert by_ratios.axes[1].get_xlabel().startswith("total tokens, times fewer")


def test_save_writes_png_and_svg(figs, tmp_path):
    png, svg = charts.save(figs["warmth"], tmp_path / "figures", "warmth")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text and "cache hit rate (warmth)" in text
    charts.save(figs["warmth"], tmp_path / "again", "warmth")
    assert (tmp_path / "again" / "warmth.svg").read_text() == text  # deterministic re-run


# ---------------------------------------------------------------- report


def test_headline_direction_and_numbers():
    fewer = report.total_sentences(report_ratios(), DESIGN)
    assert fewer == [
        "batching feeds 1.43× fewer total tokens than placebo "
        "(95% CI 1.30–1.56× fewer; ratio 0.70, 95% CI 0.64–0.77; n = 5 runs per arm, one interleaved batch)."
    ]  # one direction per unit: the factor with its interval, the ratio with its own (issue #30 item 7)
    more = pd.DataFrame([ratio_row("total_tokens", 1.42, 1.30, 1.55, n_arm=5, n_baseline=4, batches=3)])
    assert report.total_sentences(more, DESIGN) == [
        "batching feeds 1.42× more total tokens than placebo "
        "(ratio 1.42; 95% CI 1.30–1.55; n = 5 (batching) and 4 (placebo) runs, 3 interleaved batches)."
    ]
    straddles = pd.DataFrame([ratio_row("total_tokens", 0.95, 0.85, 1.07)])
    assert report.total_sentences(straddles, DESIGN)[0].startswith(
        "no difference in total tokens shown between batching and placebo (ratio 0.95; 95% CI 0.85–1.07, which "
        "includes no difference;"
    )
    stitched = pd.DataFrame([ratio_row("total_tokens", 0.7, 0.6, 0.8, label="cross-run stitch", batches=2)])
    assert "cross-run stitch of 2 batches, not one interleaved batch" in report.total_sentences(stitched, DESIGN)[0]


def test_uncached_is_a_separate_sentence_with_hit_rates():
    text = report.headline_text(report_headline(), report_ratios(), DESIGN)
    lines = text.splitlines()
    assert lines[0] == report.SIMULATION_BANNER
    total, uncached = lines[1], lines[2]
    assert "uncached" not in total and "hit rate" not in total
    assert uncached.startswith("uncached tokens: batching feeds 1.20× fewer uncached input tokens than placebo")
    assert "at observed cache hit rates 91% (batching) and 88% (placebo)" in uncached
    assert uncached.endswith("this figure depends on cache warmth.")
    real = report.headline_text(report_headline(), report_ratios(), msgspec.structs.replace(DESIGN, simulated=False))
    assert "SIMULATION" not in real


def test_headline_falls_back_to_headline_table():
    text = report.headline_text(
        report_headline(), report_ratios().iloc[0:0], msgspec.structs.replace(DESIGN, simulated=False)
    )
    assert text.startswith("batching feeds 1.43× fewer total tokens than placebo (95% CI 1.30–1.56× fewer; ratio 0.70")
    assert "n = 5 (batching) and 4 (placebo) runs" in text


@pytest.fixture
def batch_dir(tmp_path, figs) -> tuple[Path, dict]:
    paths = {name: charts.save(fig, tmp_path / "figures", name)[0] for name, fig in figs.items()}
    return tmp_path, paths


def test_report_content_and_files(batch_dir):
    folder, figures = batch_dir
    ratios = report_ratios(values=(-0.12, -0.2, -0.05))
    ratios.loc[ratios["metric"] == "cycles", "label"] = "cross-run stitch"
    ratios.loc[ratios["metric"] == "cycles", "small_n"] = True
    design = msgspec.structs.replace(DESIGN, versions={"codex": "0.169.0"})
    md_path = report.write_report(
        folder, design=design, headline=report_headline(), ratios=ratios, trials=report_trials(), figures=figures,
        warnings=["given: quote with care"],
    )  # fmt: skip
    md = md_path.read_text()
    assert md.splitlines()[0] == report.SIMULATION_BANNER
    assert "**batching feeds 1.43× fewer total tokens than placebo (95% CI 1.30–1.56× fewer; ratio 0.70, 95% CI" in md
    assert "\nuncached tokens: batching feeds 1.20× fewer" in md  # its own paragraph
    for needle in (
        "given: quote with care",
        "cross-run stitch: batching vs placebo (cycles)",
        "small n: batching vs placebo",
        "failed trials: 1 of 5 placebo trials failed (timeout)",
        "quality drift: batching grades 0.12 lower than placebo",
        "one batch without a non-isolated control",
        "| isolation | nonce+key |",
        "| versions | codex=0.169.0 |",
        "| model | sim-model |",
        "| batching | 5 | 0 | 0.90 |",  # grade per arm: graded, ungraded, mean
    ):
        assert needle in md, needle
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(images) == len(figures)
    assert all(not Path(i).is_absolute() and (folder / i).is_file() for i in images)
    page = (folder / "report.html").read_text()
    assert '<p class="banner">SIMULATION:' in page and "<table>" in page
    assert all((folder / src).is_file() for src in re.findall(r'<img src="([^"]+)"', page))
    assert len(re.findall(r"<img ", page)) == len(figures)


def test_report_without_flags_has_no_false_warnings(tmp_path):
    folder = tmp_path
    trials = report_trials().assign(status="ok", reason="")
    design = msgspec.structs.replace(DESIGN, simulated=False)
    md = report.write_report(
        folder,
        design=design,
        headline=report_headline(),
        ratios=report_ratios(),
        trials=trials,
        figures={},
        warnings=[],
    ).read_text()
    assert "SIMULATION" not in md
    for absent in ("cross-run stitch:", "small n:", "failed trials:", "quality drift:"):
        assert absent not in md, absent


def test_report_refuses_a_missing_figure(tmp_path):
    with pytest.raises(FileNotFoundError, match="figure 'warmth'"):
        report.write_report(
            tmp_path, design=DESIGN, headline=report_headline(), ratios=report_ratios(), trials=report_trials(),
            figures={"warmth": Path("figures/warmth.png")}, warnings=[],
        )  # fmt: skip
