"""Bad parameters, table-driven: every parameter of every notebook, wrong type, empty, unknown name, out of range.

Each case must stop the notebook in its first cell with a ``ParamError`` naming the parameter and what it
accepts. The table covers every declared name (a new parameter without a row fails the coverage test). The
first cells run in-process on the exact cell papermill injects (``papermill.parameterize``), with the kernel's
input history ``In`` as IPython keeps it; one real papermill execution per notebook proves the same in a kernel.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import papermill
import pytest
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

from kit import params
from kit.cli import pipeline
from kit.experiment.design import ParamError
from tests.support import ROOT

NOTEBOOKS = tuple(params.NOTEBOOKS)

# A value of a type the parameter does not accept.
WRONG_TYPE = {str: 5, int: "3", float: "0.5", bool: 1, list: "a", dict: ["a"]}
# The empty value of the parameter's type; None for numbers and booleans (None is their "nothing").
EMPTY: dict[type, object] = {str: "", int: None, float: None, bool: None, list: [], dict: {}}
# Parameters whose empty value is valid (an empty mapping of options, a None that means "default").
EMPTY_OK = {"task_options", "arm_defs", "backend_options"}
# A value of the right type outside what the parameter accepts; None where the parameter has no range.
OUT_OF_RANGE: dict[str, object] = {
    "batch": "../escape",
    "task": None,  # any name passes here; the task registry refuses unknown ones (run.configure)
    "arms": ["placebo"],
    "runs_per_arm": 0,
    "order": "zigzag",
    "allow_blocked": None,
    "backend": "gpt",
    "endpoint": "cloud",
    "model": None,
    "isolation": "some",
    "seed": -1,
    "concurrency": 17,
    "outputs_dir": None,
    "task_options": None,
    "arm_defs": None,
    "backend_options": None,
    "retry_failed": None,
    "profile": None,  # the cache profile registry refuses unknown names (kit.provider.cache)
    "salt": "a b",
    "survival": 1.5,
    "timeout_s": 0,
    "max_cycles": 0,
    "upstream_url": "ftp://127.0.0.1/v1",
    "retention": "forever",
    "stop": None,  # its keys and values are refused by kit.stages.run.configure (tests/stages/test_stop_rule.py)
    "batch_dir": None,
    "strict": None,
    "batch_dirs": ["ok", 3],
    "baseline": None,
    "comparisons": None,
    "n_resamples": 99,
    "confidence": 1.0,
    "allow_stitch": None,
    "warmth_levels": 102,
    "window_tokens": 999,
    "quality_margin": 1.0,
    "batch_glob": ["ok", ""],
    "pairs": [["a", "b", "c"]],
    "metrics": ["total tokens"],
    "curve": None,
    "figure": "../ratio_forest",
}


def first_cell_error(notebook: str, parameters: dict) -> ParamError:
    """Run the notebook's cells as papermill would, up to its first logic cell; return what that cell raised."""
    nb = parameterize_notebook(load_notebook_node(str(ROOT / "notebooks" / f"{notebook}.ipynb")), parameters)
    namespace: dict = {"In": [""]}
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        namespace["In"].append(cell.source)
        tags = cell.metadata.get("tags", [])
        if "parameters" in tags or "injected-parameters" in tags:
            exec(cell.source, namespace)
            continue
        with pytest.raises(ParamError) as caught:
            exec(cell.source, namespace)
        return caught.value
    raise AssertionError(f"{notebook}.ipynb has no logic cell")


def spec_of(notebook: str) -> dict[str, params.Param]:
    return {p.name: p for p in params.NOTEBOOKS[notebook]}


def cases() -> list:
    out = []
    for notebook in NOTEBOOKS:
        for name, p in spec_of(notebook).items():
            kind = p.types[0]
            out.append(pytest.param(notebook, name, "wrong type", WRONG_TYPE[kind], id=f"{notebook}-{name}-type"))
            empty = EMPTY[kind]
            if name not in EMPTY_OK and not (empty is None and p.optional):
                out.append(pytest.param(notebook, name, "empty", empty, id=f"{notebook}-{name}-empty"))
            if OUT_OF_RANGE[name] is not None:
                out.append(pytest.param(notebook, name, "range", OUT_OF_RANGE[name], id=f"{notebook}-{name}-range"))
    return out


def test_table_covers_every_declared_parameter_of_every_notebook():
    for notebook in NOTEBOOKS:
        declared = set(papermill.inspect_notebook(str(ROOT / "notebooks" / f"{notebook}.ipynb")))
        assert declared == set(spec_of(notebook)), notebook  # the spec is what the parameters cell declares
        assert set(spec_of(notebook)) <= set(OUT_OF_RANGE), notebook


@pytest.mark.parametrize(("notebook", "name", "kind", "value"), cases())
def test_bad_value_stops_the_first_cell_naming_the_parameter(notebook, name, kind, value):
    error = first_cell_error(notebook, {name: value})
    assert error.name == name
    assert f"parameter {name!r}" in str(error)
    assert f"accepted: {spec_of(notebook)[name].accepted}" in str(error)


@pytest.mark.parametrize("name", sorted(EMPTY_OK))
def test_empty_option_mappings_are_accepted(name):
    assert params.validate({**_run_defaults(), name: {}}, params.RUN)[name] == {}


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_unknown_name_stops_the_first_cell_listing_the_accepted_names(notebook):
    for name in spec_of(notebook):
        error = first_cell_error(notebook, {f"{name}x": 1})  # a typo of every declared name
        assert error.name == f"{name}x"
        assert "unknown parameter" in str(error) and str(list(spec_of(notebook))) in str(error)


def test_unknown_name_check_reads_only_papermills_injected_cell():
    assert params.injected_names(["", "x = 1", '# Parameters\nbatch = "b"\nseed = 3\n', "y = 2"]) == ["batch", "seed"]
    assert params.injected_names(None) == []  # JupyterLab without papermill: nothing injected, nothing refused
    params.check_names(["PAPERMILL_INPUT_PATH", "batch"], params.PLOT)  # papermill's own --inject-paths pass
    with pytest.raises(ParamError, match="'batchh': unknown parameter"):
        params.check_names(["batchh"], params.PLOT)


def test_one_parameters_file_serves_every_stage():
    """A stage takes the parameters it declares and lets another stage's pass: params/*.yaml feeds all four."""
    params.check_names(["task", "arms", "baseline", "runs_per_arm", "batch"], params.PLOT)
    with pytest.raises(ParamError, match=r"'baselin': unknown parameter \(did you mean 'baseline'\?\)"):
        params.check_names(["baselin"], params.PARSE)


def test_a_papermill_run_must_name_its_batch():
    """papermill writes the notebook where it is told; a new batch id would put the data elsewhere."""
    with pytest.raises(ParamError, match="'batch': missing in a papermill run"):
        params.check_batch_named(["runs_per_arm"], {"batch": None})
    params.check_batch_named([], {"batch": None})  # JupyterLab: nothing injected, a new id is fine
    params.check_batch_named(["batch_dir"], {"batch": None, "batch_dir": "outputs/b"})


def test_a_list_given_as_text_is_told_to_use_yaml():
    with pytest.raises(ParamError, match=r'-p passes text; give a list or mapping with -y "arms: \[a, b\]"'):
        params.validate({**_run_defaults(), "arms": '["a","b"]'}, params.RUN)


def test_pipeline_refuses_a_name_no_stage_declares(tmp_path):
    with pytest.raises(ParamError, match="'runs_per_armm': unknown parameter"):
        pipeline.execute({"task": "batch-read", "runs_per_armm": 3, "outputs_dir": str(tmp_path)}, progress=False)
    assert not any(tmp_path.iterdir())  # refused before any folder is made


def _papermill(notebook: str, out: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / f"{notebook}.ipynb"), str(out)]
    argv += ["-p", "seedd", "1", "--cwd", str(ROOT), "--no-progress-bar", "-k", "python3"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def test_in_a_real_kernel_every_notebook_refuses_an_unknown_name_in_its_first_cell(tmp_path):
    with ThreadPoolExecutor(max_workers=len(NOTEBOOKS)) as pool:
        done = dict(zip(NOTEBOOKS, pool.map(lambda n: _papermill(n, tmp_path / f"{n}.ipynb"), NOTEBOOKS), strict=True))
    for notebook, result in done.items():
        assert result.returncode != 0, notebook
        assert "parameter 'seedd': unknown parameter (did you mean 'seed'?); accepted:" in result.stderr, notebook
        nb = nbformat.read(tmp_path / f"{notebook}.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        tags = [c.metadata.get("tags", []) for c in code]
        first_logic = next(i for i, t in enumerate(tags) if "parameters" not in t and "injected-parameters" not in t)
        failed = [i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
        assert failed == [first_logic], notebook


def _run_defaults() -> dict:
    nb = nbformat.read(ROOT / "notebooks" / "run.ipynb", as_version=4)
    namespace: dict = {}
    exec(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])), namespace)
    return {p.name: namespace[p.name] for p in params.RUN}
