"""A new user's mistakes on the command line: one clear line, exit code 1 (2 for usage), nothing written.

Every case runs ``python -m kit …`` as a user would, against its own outputs folder holding one batch
(``mybatch``, with an executed ``run.ipynb`` a refused resume must not replace). The folder's listing
and every file's sha256 are compared before and after. The cases start together (each is mostly
imports), so the file costs about one slow case, not their sum.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit import params as kit_params
from tests.support import ROOT

DEMO = ["-f", "params/demo.yaml"]

# (id, argv after `python -m kit`, exit code, what the one line says); {out} is the case's outputs folder.
CASES = [
    ("unknown-arm", ["batch", *DEMO, "-y", "arms: [placebo, batchng]"], 1,
     "error: parameter 'arms': unknown arm 'batchng' for task 'batch-read' (did you mean 'batching'?); accepted:"),
    ("runs-zero", ["batch", *DEMO, "-p", "runs_per_arm", "0"], 1,
     "error: parameter 'runs_per_arm': got 0; accepted: an integer >= 1"),
    ("unknown-name", ["batch", *DEMO, "-p", "runs_per_armm", "3"], 1,
     "error: parameter 'runs_per_armm': unknown parameter (did you mean 'runs_per_arm'?)"),
    ("list-with-p", ["batch", *DEMO, "-p", "arms", '["placebo","batching"]'], 1,
     '-p passes text; give a list or mapping with -y "arms: [placebo, batching]"'),
    ("missing-file", ["batch", "-f", "params/nope.yaml"], 1,
     "error: parameters file params/nope.yaml: no such file or directory"),
    ("misspelled-batch", ["batch", *DEMO, "--stages", "parse", "-p", "batch", "mybatc"], 1,
     "is not a batch folder (no manifest.json) (did you mean 'mybatch'?); accepted: a batch in"),
    ("not-a-batch-dir", ["batch", "--stages", "analyze", "-p", "batch_dir", "{out}/xyz"], 1,
     "error: parameter 'batch_dir': {out}/xyz is not a batch folder (no manifest.json); accepted: a batch in {out}: "
     "mybatch"),
    ("unknown-stage", ["batch", "--stages", "analyse", "-p", "batch", "mybatch"], 1,
     "error: parameter '--stages': unknown stage 'analyse' (did you mean 'analyze'?)"),
    ("baseline-not-an-arm", ["batch", *DEMO, "-p", "baseline", "placeb"], 1,
     "error: parameter 'baseline': 'placeb' is not an arm of the batch (did you mean 'placebo'?)"),
    ("resume-changed", ["batch", *DEMO, "-p", "batch", "mybatch", "-p", "runs_per_arm", "3"], 1,
     "error: parameter 'runs_per_arm': batch 'mybatch' exists with runs_per_arm=5; accepted: the batch's own value"),
    ("stop-unknown-key", ["batch", *DEMO, "-y", "stop: {max_runs_per_arm: 20, precison: 1.5}"], 1,
     "error: parameter 'stop': got {'max_runs_per_arm': 20, 'precison': 1.5}; accepted: {max_runs_per_arm: N, "
     "precision: 1.5 and/or exclude_one: true}"),
    ("stop-cap-below-runs", ["batch", *DEMO, "-y", "stop: {max_runs_per_arm: 4, min_runs_per_arm: 4, precision: 2}"],
     1, "error: parameter 'stop': max_runs_per_arm 4 is below runs_per_arm 5"),
    ("resume-new-stop", ["batch", *DEMO, "-p", "batch", "mybatch", "-y", "stop: {max_runs_per_arm: 20, precision: 2}"],
     1, "error: parameter 'stop': batch 'mybatch' exists with stop=None; accepted: the batch's own value"),
    ("real-without-key", ["batch", *DEMO, "-p", "endpoint", "real"], 1,
     "error: parameter 'endpoint': 'real' needs OPENAI_API_KEY in the environment"),
    ("bad-yaml", ["batch", *DEMO, "-y", "arms: [placebo"], 1, "error: -y 'arms: [placebo': not valid YAML"),
    ("ping-real-without-key", ["ping", "--backend", "sdk-openai", "--endpoint", "real"], 1,
     "error: --endpoint real needs OPENAI_API_KEY in the environment"),
    ("usage-batch", ["batch", "--bogus"], 2, "python -m kit batch: error: unrecognized arguments: --bogus"),
    ("usage-command", ["bacth"], 2, "python -m kit: error: argument COMMAND: invalid choice: 'bacth'"),
    ("serve-batch-without-salt", ["provider", "serve", *DEMO], 2,
     "python -m kit provider serve: error: serving as a batch needs the batch's salt: -p salt S"),
    ("serve-batch-and-seed", ["provider", "serve", *DEMO, "-p", "salt", "abcd", "--seed", "3"], 2,
     "python -m kit provider serve: error: --seed cannot be given with batch parameters (the batch sets them)"),
    ("serve-batch-bad-param", ["provider", "serve", *DEMO, "-p", "salt", "abcd", "-p", "arms", "x"], 2,
     "python -m kit provider serve: error: "),
]  # fmt: skip


def _batch_folder(out: Path) -> None:
    """``out/mybatch``: a batch as the run stage leaves it, enough for every stage's checks."""
    demo = yaml.safe_load((ROOT / "params/demo.yaml").read_text())
    params = {p.name: demo.get(p.name) for p in kit_params.RUN} | {"batch": "mybatch"}  # a manifest records them all
    folder = out / "mybatch"
    folder.mkdir(parents=True)
    manifest = {"batch": "mybatch", "salt": "s", "params": params, "simulated": True}
    (folder / "manifest.json").write_text(
        json.dumps(manifest | {"started_at": "2026-01-01T00:00:00+00:00", "status": "running"})
    )
    (folder / "run.ipynb").write_text('{"an executed notebook": "must stay as it is"}\n')
    (folder / "raw").mkdir()


def _state(out: Path) -> dict[str, str]:
    """Every path below ``out`` (folders too) with its content's sha256 (files)."""
    from kit.files import sha256_tree

    return {str(p.relative_to(out)): "dir" for p in out.rglob("*") if p.is_dir()} | sha256_tree(out)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict, dict, Path]]:
    """Every case run at once, each against its own outputs folder: (result, state before, after, folder)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    started = {}
    for case_id, argv, _, _ in CASES:
        out = tmp_path_factory.mktemp(case_id) / "outputs"
        _batch_folder(out)
        args = [a.replace("{out}", str(out)) for a in argv]
        if args[0] == "batch" and "--bogus" not in args:
            args += ["-p", "outputs_dir", str(out)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "kit", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        started[case_id] = (proc, args, _state(out), out)
    done = {}
    for case_id, (proc, args, before, out) in started.items():
        stdout, stderr = proc.communicate(timeout=300)
        done[case_id] = (subprocess.CompletedProcess(args, proc.returncode, stdout, stderr), before, _state(out), out)
    return done


@pytest.mark.parametrize(("case_id", "code", "says"), [(c[0], c[2], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_mistake_is_one_line_and_changes_nothing(outcomes, case_id, code, says):
    result, before, after, out = outcomes[case_id]
    assert result.returncode == code, result.stderr
    assert says.replace("{out}", str(out)) in result.stderr
    if code == 1:
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("error: ")
    assert after == before  # nothing created, nothing changed: not a folder, not a file


def test_help_lists_every_command_and_each_command_has_help():
    from kit.cli.main import COMMANDS

    top = subprocess.run([sys.executable, "-m", "kit", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert top.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in top.stdout, name
        sub = subprocess.run([sys.executable, "-m", "kit", name, "--help"], capture_output=True, text=True, cwd=ROOT)
        assert sub.returncode == 0 and "usage: python -m kit" in sub.stdout, (name, sub.stderr)


def test_stage_refused_on_a_folder_that_is_not_a_batch_lists_the_batches(tmp_path):
    """The notebooks' own check (kit.experiment.layout.batch_path): what papermill by hand meets."""
    from kit.experiment import layout
    from kit.experiment.design import ParamError

    for name in ("b", "a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    with pytest.raises(ParamError, match=r"xyz is not a batch folder \(no manifest.json\); accepted: .*: a, b$"):
        layout.batch_path(None, str(tmp_path), "xyz")
    with pytest.raises(ParamError, match=r"parameter 'batch_dir': .*notes is not a batch folder"):
        layout.batch_path(str(tmp_path / "notes"), "outputs", None)
    assert layout.batch_path(None, str(tmp_path), "a") == tmp_path / "a"


def test_relative_outputs_dir_is_the_repository_root_whatever_the_working_folder(tmp_path, monkeypatch):
    from kit.experiment import layout

    monkeypatch.chdir(tmp_path)  # JupyterLab's kernel starts in notebooks/
    assert layout.from_root("outputs") == ROOT / "outputs"
    assert layout.from_root(str(tmp_path)) == tmp_path


def test_written_files_are_readable_by_others_as_a_plain_open_makes_them(tmp_path):
    from kit.files import write_text

    old = os.umask(0o022)
    try:
        assert write_text(tmp_path / "report.html", "x").stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        assert write_text(tmp_path / "private.html", "x").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_every_kit_error_class_has_the_one_root_and_a_bug_keeps_its_traceback(monkeypatch, capsys):
    """The CLI prints a KitError as one line; anything else is a bug and is raised with its traceback."""
    import importlib
    import inspect
    import pkgutil

    import kit
    from kit.cli import batch, pipeline
    from kit.errors import KitError

    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(kit.__path__, "kit.")]
    ours = {
        obj
        for module in modules
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__.startswith("kit") and not obj.__name__.startswith("_")
    }
    assert kit and ours and all(issubclass(cls, KitError) for cls in ours), sorted(c.__name__ for c in ours)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(pipeline, "execute", broken)
    with pytest.raises(ZeroDivisionError):
        batch.main(["-f", "params/demo.yaml"])
    assert "error:" not in capsys.readouterr().err
