"""The spine end to end: the four notebooks through papermill on a tiny batch, asserted on content."""

import json
import os
import re
import shutil
import struct

import msgspec
import nbformat
import pandas as pd
import papermill
import pytest

from kit.cli import pipeline
from tests.support import ROOT, run_params

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
        assert nb.metadata.papermill.output_path == str(batch / f"{stage}.ipynb")  # not the temporary name
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


def test_one_ratio_row_per_non_baseline_arm_and_no_interval_from_two_runs(batch):
    ratios = pd.read_csv(batch / "analysis/ratios.csv")
    total = ratios[ratios["metric"] == "total_tokens"]
    assert list(total["arm"]) == ["batching"] and list(total["baseline"]) == ["placebo"]
    row = total.iloc[0]
    assert row["estimate"] > 0 and pd.isna(row["lower"]) and pd.isna(row["upper"])  # 2 runs: the estimate only
    assert "too few runs" in row["note"]
    assert set(ratios[ratios["metric"] == "uncached_input_tokens"]["arm"]) == {"batching"}


def test_figures_are_non_empty_pngs(batch):
    pngs = sorted((batch / "figures").glob("*.png"))
    assert len(pngs) >= 5  # occupancy_bars only where occupancy is the question (kit.stages.plot.figures_for)
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


def test_a_stage_reruns_alone_on_the_batch_folder(batch):
    """``kit batch --stages plot -p batch_dir FOLDER``: that folder, no stray batch beside it."""
    before = sorted(batch.parent.iterdir())
    assert pipeline.execute({"batch_dir": str(batch)}, stages=["plot"], progress=False) == batch
    assert sorted(batch.parent.iterdir()) == before
    assert (batch / "report.html").exists() and not list(batch.glob("*.running.*"))


def test_run_notebook_prints_one_line_per_trial_not_a_progress_bar(batch):
    nb = nbformat.read(batch / "run.ipynb", as_version=4)
    text = "".join(
        o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream"
    )
    trials = [line for line in text.splitlines() if line.startswith("trial ")]
    assert [line.split()[1] for line in trials] == ["1/4", "2/4", "3/4", "4/4"], text
    assert all(line.endswith(" tokens") and ": ok, " in line for line in trials), trials
    assert "\r" not in text and "it/s" not in text


def test_written_files_follow_the_umask_like_a_plain_open(batch):
    umask = os.umask(0)
    os.umask(umask)
    for name in ("report.html", "report.md", "run.html", "manifest.json"):
        assert (batch / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_a_failed_stage_keeps_the_earlier_notebook_and_saves_the_failed_one(tmp_path, capfd):
    folder = tmp_path / "b"
    folder.mkdir()
    manifest = {"batch": "b", "salt": "s", "params": msgspec.to_builtins(run_params(batch="b")), "simulated": True,
                "started_at": "2026-12-01T00:00:00+00:00", "status": "complete"}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "plot.ipynb").write_text("an earlier, good executed notebook\n")
    with pytest.raises(pipeline.StageFailed, match=r"^stage 'plot' failed: FileNotFoundError: .*design.json: missing"):
        pipeline.execute({"batch": "b", "outputs_dir": str(tmp_path)}, stages=["plot"], progress=False)
    assert (folder / "plot.ipynb").read_text() == "an earlier, good executed notebook\n"
    assert (folder / "plot.failed.ipynb").exists() and (folder / "plot.failed.html").exists()
    assert not list(folder.glob("*.running.*"))
    assert "without encryption" not in capfd.readouterr().err  # the kernel runs on a local socket, not TCP


def test_a_stop_rule_and_its_baseline_reach_the_run_notebook_checked(tmp_path):
    stop = {"max_runs_per_arm": 20, "precision": 1.5}
    params = pipeline.load_params(
        str(ROOT / "params/demo.yaml"), [f"stop: {json.dumps(stop)}"], [("outputs_dir", str(tmp_path))]
    )
    run_parameters = pipeline.plan(params).parameters["run"]
    assert run_parameters["stop"] == stop and run_parameters["baseline"] == "placebo"
    assert not any(tmp_path.iterdir())  # checked, nothing written


def test_bad_parameter_stops_the_run_notebook_in_its_first_cell(tmp_path):
    out = tmp_path / "run.ipynb"
    with pytest.raises(papermill.PapermillExecutionError, match=r"parameter 'arms'.*accepted"):
        papermill.execute_notebook(
            str(ROOT / "notebooks/run.ipynb"), str(out), cwd=str(ROOT), progress_bar=False, kernel_name="python3",
            parameters={"arms": ["placebo", "nope"], "outputs_dir": str(tmp_path), "batch": "b"},
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


def test_notebooks_run_top_to_bottom_with_their_defaults(tmp_path, monkeypatch):
    """As in JupyterLab: the kernel in notebooks/, no injected parameters; parse/analyze/plot pick up the batch
    run just made, and outputs_dir "outputs" is the repository's, not notebooks/outputs. A copy of the
    repository's code (imported first through PYTHONPATH) keeps the batch out of the real outputs/."""
    for part in ("kit", "notebooks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    for stage in pipeline.STAGES:
        papermill.execute_notebook(
            str(tmp_path / f"notebooks/{stage}.ipynb"), str(tmp_path / f"{stage}.ipynb"),
            cwd=str(tmp_path / "notebooks"), progress_bar=False, kernel_name="python3",
        )  # fmt: skip
    (folder,) = (tmp_path / "outputs").iterdir()
    assert not (tmp_path / "notebooks" / "outputs").exists()
    assert (folder / "report.md").read_text().startswith("SIMULATION")
    assert len(pd.read_parquet(folder / "tables/trials.parquet")) == 10
