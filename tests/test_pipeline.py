"""The spine end to end: the four notebooks through papermill on a tiny batch, asserted on content."""

import json
import os
import re
import struct
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest

from kit import pipeline

ROOT = Path(__file__).resolve().parent.parent
FAKE_OPENAI = "sk-proj-PLANTEDfakeOpenAIkey0123456789abcdef"
FAKE_ANTHROPIC = "sk-ant-api03-PLANTEDfakeAnthropicKey0123456789"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    out = tmp_path_factory.mktemp("outputs")
    params = pipeline.load_params(
        str(ROOT / "params/demo.yaml"),
        ["arms: [placebo, batching]"],
        [("runs_per_arm", "2"), ("batch", "tiny"), ("outputs_dir", str(out)), ("n_resamples", "1000"),
         ("warmth_levels", "5")],
    )  # fmt: skip
    old = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    os.environ.update(OPENAI_API_KEY=FAKE_OPENAI, ANTHROPIC_API_KEY=FAKE_ANTHROPIC)
    try:
        folder = pipeline.execute(params, progress=False)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return folder


def test_every_stage_executed_and_exported(batch):
    for stage in pipeline.STAGES:
        nb = nbformat.read(batch / f"{stage}.ipynb", as_version=4)
        assert any(c.metadata.get("tags") == ["injected-parameters"] for c in nb.cells)
        assert (batch / f"{stage}.html").stat().st_size > 10_000


REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""")


def test_exported_html_loads_nothing_from_another_host(batch):
    """Exports are opened offline and attached to write-ups: no script, stylesheet or image from the web."""
    pages = [*batch.glob("*.html")]
    assert len(pages) >= len(pipeline.STAGES) + 1  # the four notebooks and the report
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not REMOTE.findall(html), page.name


def test_requests_have_positive_input_for_every_trial(batch):
    requests = pd.read_parquet(batch / "tables/requests.parquet")
    trials = pd.read_parquet(batch / "tables/trials.parquet")
    assert len(trials) == 4 and set(trials["status"]) == {"ok"}
    assert set(requests["trial_id"]) == set(trials["trial_id"])
    assert (requests.groupby("trial_id")["input_tokens"].min() > 0).all()
    assert requests["usage_known"].all()


def test_one_ratio_row_per_non_baseline_arm_with_an_interval(batch):
    ratios = pd.read_csv(batch / "analysis/ratios.csv")
    total = ratios[ratios["metric"] == "total_tokens"]
    assert list(total["arm"]) == ["batching"] and list(total["baseline"]) == ["placebo"]
    row = total.iloc[0]
    assert row["lower"] < row["estimate"] < row["upper"]
    assert set(ratios[ratios["metric"] == "uncached_input_tokens"]["arm"]) == {"batching"}


def test_figures_are_non_empty_pngs(batch):
    pngs = sorted((batch / "figures").glob("*.png"))
    assert len(pngs) >= 6
    for png in pngs:
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", head[16:24])
        assert width > 200 and height > 100


def test_manifest_records_design_and_hashes(batch):
    manifest = json.loads((batch / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["simulated"] is True
    assert [s["arm"] for s in manifest["schedule"]] == ["placebo", "batching", "batching", "placebo"]
    assert manifest["salt"] and manifest["versions"]["python"] and manifest["versions"]["openai"]
    assert "kit_commit" in manifest["versions"]
    raw_files = {str(p.relative_to(batch / "raw")) for p in (batch / "raw").rglob("*") if p.is_file()}
    assert set(manifest["raw_sha256"]) == raw_files


def test_report_says_simulation(batch):
    report = (batch / "report.md").read_text()
    assert report.splitlines()[0].startswith("SIMULATION")
    assert "total tokens" in report


def test_no_secret_reaches_any_output(batch):
    for path in batch.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert FAKE_OPENAI.encode() not in data, path
            assert FAKE_ANTHROPIC.encode() not in data, path
            assert b"PLANTED" not in data, path


def test_a_stage_reruns_alone_on_the_batch_folder(batch, tmp_path):
    out = tmp_path / "plot.ipynb"
    papermill.execute_notebook(
        str(ROOT / "notebooks/plot.ipynb"), str(out), parameters={"batch_dir": str(batch)}, cwd=str(ROOT),
        progress_bar=False, kernel_name="python3",
    )  # fmt: skip
    assert (batch / "report.html").exists()


def test_bad_parameter_stops_the_run_notebook_in_its_first_cell(tmp_path):
    out = tmp_path / "run.ipynb"
    with pytest.raises(papermill.PapermillExecutionError, match=r"parameter 'arms'.*accepted"):
        papermill.execute_notebook(
            str(ROOT / "notebooks/run.ipynb"), str(out), cwd=str(ROOT), progress_bar=False, kernel_name="python3",
            parameters={"arms": ["placebo", "nope"], "outputs_dir": str(tmp_path)},
        )  # fmt: skip
    nb = nbformat.read(out, as_version=4)
    failed = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    first_logic = next(
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and "parameters" not in c.metadata.get("tags", [])
        and "injected-parameters" not in c.metadata.get("tags", [])
    )
    assert failed == [first_logic]
    assert not (tmp_path / "raw").exists()


def test_notebooks_run_top_to_bottom_with_their_defaults(tmp_path):
    """As in JupyterLab: no injected parameters; parse/analyze/plot pick up the batch run just made."""
    for stage in pipeline.STAGES:
        papermill.execute_notebook(
            str(ROOT / f"notebooks/{stage}.ipynb"), str(tmp_path / f"{stage}.ipynb"), cwd=str(tmp_path),
            progress_bar=False, kernel_name="python3",
        )  # fmt: skip
    (folder,) = (tmp_path / "outputs").iterdir()
    assert (folder / "report.md").read_text().startswith("SIMULATION")
    assert len(pd.read_parquet(folder / "tables/trials.parquet")) == 10
