"""The committed examples (``outputs/examples/``, made by ``make examples``) and the notebooks that read them.

The plot notebook re-runs on a copy of a committed snapshot and its figures are checked for content
(axis labels, one observed point per batch, the bootstrap band, the design line) in the SVG it writes;
the explore module puts two real batches on one warmth curve; tests never write into the committed folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest
import yaml
from matplotlib.collections import PathCollection, PolyCollection

from kit import charts, stats
from kit.cli import pipeline
from kit.report.batch import SIMULATION_BANNER
from kit.stages import analyze, explore, parse, plot, run
from tests.support import ROOT

EXAMPLES = ROOT / "outputs" / "examples"
LIMIT_BYTES = 5_000_000
SVG = "{http://www.w3.org/2000/svg}"


def _examples() -> dict[str, Path]:
    return {p.name: p for p in sorted(EXAMPLES.iterdir()) if (p / "manifest.json").is_file()}


def _copy(example: str, target: Path) -> Path:
    return Path(shutil.copytree(EXAMPLES / example, target / example))


def _execute(notebook: str, out: Path, **parameters) -> nbformat.NotebookNode:
    papermill.execute_notebook(
        str(ROOT / "notebooks" / notebook), str(out), parameters=parameters, cwd=str(ROOT),
        progress_bar=False, kernel_name="python3",
    )  # fmt: skip
    return nbformat.read(out, as_version=4)


# ---------------------------------------------------------------- the committed snapshots


def test_one_example_per_task_pack():
    tasks = {yaml.safe_load(p.read_text())["task"] for p in (ROOT / "params").glob("*.yaml")}
    assert tasks <= set(_examples()), f"no example for {sorted(tasks - set(_examples()))}: run `make examples`"


def test_examples_stay_under_5_mb():
    files = [p for p in EXAMPLES.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    assert total < LIMIT_BYTES, f"outputs/examples holds {total / 1e6:.2f} MB in {len(files)} files"


@pytest.mark.parametrize("name", sorted(_examples()))
def test_example_is_a_complete_lean_snapshot(name):
    folder = EXAMPLES / name
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["batch"] == name and manifest["status"] == "complete"
    raw = {str(p.relative_to(folder / "raw")): p for p in (folder / "raw").rglob("*") if p.is_file()}
    assert set(raw) == set(manifest["raw_sha256"])  # the raw snapshot is exactly what the run recorded
    for rel, path in raw.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == manifest["raw_sha256"][rel], rel
    for table in ("requests", "trials", "segments"):
        assert (folder / "tables" / f"{table}.parquet").is_file()
    for table in ("ratios", "headline", "warmth", "observed", "trials", "arms"):
        assert (folder / "analysis" / f"{table}.csv").is_file()
    assert sorted(p.stem for p in (folder / "figures").iterdir()) == sorted(plot.batch_figures(folder))  # PNG
    for stage in pipeline.STAGES:
        nb = nbformat.read(folder / f"{stage}.ipynb", as_version=4)
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{stage}.ipynb holds an error"
    plot_nb = (folder / "plot.ipynb").read_text()
    assert '"image/png"' not in plot_nb and 'src=\\"figures/warmth_vs_ratio.png\\"' in plot_nb
    assert (folder / "plot.html").is_file() and not list(folder.rglob(".homes"))


@pytest.mark.parametrize("name", sorted(_examples()))
def test_example_report_starts_with_the_simulation_banner(name):
    report = (EXAMPLES / name / "report.md").read_text()
    assert report.splitlines()[0] == SIMULATION_BANNER
    assert "total tokens" in report.splitlines()[4]  # the headline sentence follows the title


def test_readme_shows_the_batch_read_warmth_figure():
    readme = (ROOT / "README.md").read_text()
    assert "](outputs/examples/batch-read/figures/warmth_vs_ratio.png)" in readme
    headline = (EXAMPLES / "batch-read" / "report.md").read_text().splitlines()[4].strip("*")
    assert headline.split(" (")[0] in readme  # the README quotes the example's own headline


# ---------------------------------------------------------------- the plot notebook on a snapshot


def _axes_groups(svg: Path) -> list[ET.Element]:
    return [g for g in ET.parse(svg).getroot().iter(f"{SVG}g") if re.fullmatch(r"axes_\d+", g.get("id", ""))]


def _texts(svg: Path) -> str:
    return "\n".join(re.findall(r"<!-- (.*?) -->", svg.read_text()))


@pytest.fixture(scope="module")
def replotted(tmp_path_factory) -> Path:
    """A copy of the batch-read example whose figures and report the plot notebook drew anew."""
    folder = _copy("batch-read", tmp_path_factory.mktemp("snapshot"))
    shutil.rmtree(folder / "figures")
    for name in ("report.md", "report.html"):
        (folder / name).unlink()
    _execute("plot.ipynb", folder.parent / "plot.ipynb", batch_dir=str(folder))
    return folder


def test_plot_notebook_redraws_the_snapshot_figures_and_report(replotted):
    for name in plot.batch_figures(replotted):
        assert (replotted / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (replotted / "figures" / f"{name}.svg").is_file()
    assert (replotted / "report.md").read_text() == (EXAMPLES / "batch-read" / "report.md").read_text()


def test_warmth_figure_has_labels_band_and_one_point_per_batch(replotted):
    svg = replotted / "figures" / "warmth_vs_ratio.svg"
    (axes,) = _axes_groups(svg)
    children = {g.get("id", "").rstrip("_0123456789"): g for g in axes.findall(f"{SVG}g")}
    assert "FillBetweenPolyCollection" in children, "the bootstrap band is missing"
    observed = pd.read_csv(replotted / "analysis" / "observed.csv")
    points = children["PathCollection"].findall(f".//{SVG}use")
    assert len(points) == len(observed) == 1  # one interleaved batch, one observed point
    text = _texts(svg)
    for label in ("cache hit rate (warmth)", "uncached-token ratio batching / placebo", "replayed batching / placebo"):
        assert label in text
    assert charts.INPUT_LABEL in text and charts.TOTAL_LABEL in text


def test_every_figure_states_batch_design_n_and_simulation(replotted):
    for name in plot.batch_figures(replotted):
        text = _texts(replotted / "figures" / f"{name}.svg")
        assert "batch batch-read · schedule alternate, run-major · isolation all · n = 5" in text, name
        assert charts.SIMULATION_CAPTION in text, name


def test_arm_colours_are_the_fixed_ones_in_the_snapshot_figures(replotted):
    colours = charts.arm_colors(["placebo", "batching"])
    svg = (replotted / "figures" / "cycle_growth.svg").read_text().lower()
    for colour in colours.values():
        assert f"stroke: {colour}" in svg


# ---------------------------------------------------------------- explore: many batches


@pytest.fixture(scope="module")
def two_batches(tmp_path_factory) -> Path:
    """The committed batch-read example plus a real second batch run here at a cooler provider cache."""
    root = tmp_path_factory.mktemp("explore")
    _copy("batch-read", root)
    p = pipeline.load_params(
        str(ROOT / "params/demo.yaml"),
        [],
        [("batch", "batch-read-cool"), ("outputs_dir", str(root)), ("runs_per_arm", "2"), ("survival", "0.3")],
    )
    folder = run.run_batch(run.configure(p))
    parse.parse_batch(folder)
    analyze.analyze_batches([folder], baseline="placebo", n_resamples=1_000, warmth_levels=5)
    return root


def test_load_concatenates_tables_with_their_batch(two_batches):
    b = explore.load(str(two_batches / "*"))
    assert b.ids == ["batch-read", "batch-read-cool"]
    for table in explore.TABLES:
        assert set(b[table]["batch"]) == {"batch-read", "batch-read-cool"}, table
    assert b["trials"].groupby("batch").size().to_dict() == {"batch-read": 10, "batch-read-cool": 4}
    summary = explore.overview(b)
    assert list(summary["batch"]) == ["batch-read", "batch-read-cool"]
    assert summary["total_ratio"].notna().all() and summary["hit_rate_arm"].notna().all()


def test_cross_batch_warmth_figure_has_every_batch_on_one_curve(two_batches):
    b = explore.load(str(two_batches / "*"))
    ax = explore.warmth_figure(b).axes[0]
    assert ax.get_xlabel() == "cache hit rate (warmth)" and ax.get_ylabel() == "uncached-token ratio batching / placebo"
    assert any(isinstance(c, PolyCollection) for c in ax.collections), "bootstrap band missing"
    (points,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    observed = b["observed"].set_index("batch")
    assert len(points.get_offsets()) == len(b.ids) == 2
    expected_x = sorted(((observed["hit_rate_a"] + observed["hit_rate_b"]) / 2).round(6))
    assert sorted(points.get_offsets()[:, 0].round(6)) == expected_x
    assert expected_x[0] < expected_x[1] - 0.05  # the cooler cache sampled the curve elsewhere
    labels = ax.get_legend_handles_labels()[1]
    assert "replayed batching / placebo — curve: batch batch-read" in labels
    text = "\n".join(t.get_text() for t in ax.figure.texts)
    assert "batches batch-read, batch-read-cool" in text and "n = 12 (batching), 12 (placebo)" not in text
    assert "n = 7 per arm" in text and charts.SIMULATION_CAPTION in text
    pooled = explore.warmth_figure(b, curve="pooled").axes[0]
    assert any(label.endswith("curve: pooled over 2 batches") for label in pooled.get_legend_handles_labels()[1])


def test_cross_batch_ratios_pool_batches_and_refuse_a_stitch(two_batches, tmp_path):
    b = explore.load(str(two_batches / "*"))
    rows = explore.cross_ratios(b, n_resamples=1_000).set_index("metric")
    assert rows.loc["total_tokens", "batches"] == 2 and rows.loc["total_tokens", "label"] == ""
    assert rows.loc["total_tokens", "method"].startswith("two-level")
    assert rows.loc["uncached_input_tokens", "hit_rate_arm"] > 0
    if "terse" not in _examples():
        pytest.skip("no terse example to stitch against")
    _copy("terse", tmp_path)
    mixed = explore.load([str(two_batches / "batch-read"), str(tmp_path / "terse")])
    with pytest.raises(stats.StitchError, match="cross-run stitch"):
        explore.cross_ratios(mixed, ["total_tokens"], [("skill", "placebo")], n_resamples=1_000)
    stitched = explore.cross_ratios(
        mixed, ["total_tokens"], [("skill", "placebo")], allow_stitch=True, n_resamples=1_000
    )
    assert list(stitched["label"]) == ["cross-run stitch"]


def test_load_refuses_a_batch_twice_and_a_glob_that_matches_nothing(two_batches, tmp_path):
    _copy("batch-read", tmp_path)
    with pytest.raises(ValueError, match="batch 'batch-read' is in two folders"):
        explore.load([str(two_batches / "*"), str(tmp_path / "*")])
    with pytest.raises(ValueError, match=r"parameter 'batch_glob'.*accepted"):
        explore.load(str(tmp_path / "nothing-*"))


def test_explore_notebook_runs_on_the_committed_examples(tmp_path):
    nb = _execute("explore.ipynb", tmp_path / "explore.ipynb", n_resamples=1_000)
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    html = "\n".join(o.get("data", {}).get("text/html", "") for o in outputs)
    for name in _examples():
        assert name in html, name
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    pairs = len(explore.warmth_pairs(explore.load(str(EXAMPLES / "*"))))
    assert len(images) == pairs + len(_examples())  # one warmth curve per pair, one forest per batch


def test_committed_html_loads_nothing_from_another_host():
    """The committed examples open offline: no CDN script (require.js, MathJax), stylesheet or image."""
    remote = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""")
    pages = sorted(EXAMPLES.rglob("*.html"))
    assert pages
    assert [p.relative_to(EXAMPLES).as_posix() for p in pages if remote.search(p.read_text(encoding="utf-8"))] == []
