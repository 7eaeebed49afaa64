"""A pack that asks question ``run % N`` says, before the batch runs, which questions its runs leave out."""

from __future__ import annotations

from kit.cli import pipeline
from kit.stages import run
from tests.support import ROOT


def _warnings(**changes) -> list[str]:
    params = pipeline.load_params(str(ROOT / "params/terse.yaml"))
    params.update(changes)
    return [w for w in run.configure(params).warnings if w.startswith("questions:")]


def test_fewer_runs_than_questions_names_the_questions_never_asked():
    (warning,) = _warnings(runs_per_arm=3)
    assert "asks only the first 3 of the pack's 12 questions" in warning


def test_runs_that_are_not_a_multiple_say_which_questions_are_asked_more():
    (warning,) = _warnings(runs_per_arm=14)
    assert "the first 2 are asked once more than the rest" in warning


def test_a_multiple_of_the_questions_or_a_one_question_pack_says_nothing():
    assert _warnings(runs_per_arm=24) == []
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    assert not [w for w in run.configure({**params, "runs_per_arm": 3}).warnings if w.startswith("questions:")]


def test_the_batch_read_fixture_warns_it_is_the_maximally_batchable_task_and_a_user_repo_does_not(tmp_path):
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    (caveat,) = [w for w in run.configure(params).warnings if w.startswith("task:")]
    assert "maximally batchable task" in caveat and "upper bound" in caveat
    (tmp_path / "a.py").write_text("x = 1\n")
    options = {**params["task_options"], "repo": str(tmp_path), "globs": ["*.py"]}
    assert not [w for w in run.configure({**params, "task_options": options}).warnings if w.startswith("task:")]
