"""The terse pack (docs/method.md#controls): data contract, grading, a policy whose documented effect is recoverable."""

import hashlib
import statistics

import pytest
import yaml

from kit import tasks
from kit.cli import pipeline
from kit.provider.policy import Conversation, Message
from kit.stages import run
from kit.tasks import terse
from kit.tasks.terse import TersePack, load_bank
from kit.tokens import count
from tests.support import ROOT

README_SHA256 = "d74c56b7af1c42d5ab43c72a9d487f38f87d16baca605f6c4e55cc37bdee3bdf"
# The pack's data (README, prompts, facts, skill): a deliberate edit of kit/data/terse_* updates this pin.
DATA_SHA256 = "29ace4a070857a6f22a012cc6d61acdf798e569e9f235031b7fd955736e0fdf3"


def _conv(pack: TersePack, arm: str, run_index: int, trial: str = "t0", seed: int = 0) -> Conversation:
    system = "You are a coding agent.\n\n" + pack.arms()[arm].instruction
    user = Message("user", pack.prompts_for(run_index)[0])
    return Conversation("responses", "sim-agent", system, (), (user,), trial_id=trial, seed=seed)


def test_prompts_and_facts_agree_and_every_question_has_two_to_four_terms():
    lines = (ROOT / "kit/data/terse_prompts.txt").read_text().splitlines()
    bank = load_bank()
    assert len(lines) >= 10 and [q.prompt for q in bank.questions] == lines
    assert all(2 <= len(q.terms) <= 4 for q in bank.questions)


def test_fixture_is_a_fixed_readme_byte_for_byte(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    TersePack().prepare(a)
    TersePack(skill_ratio=0.5).prepare(b)
    assert [p.name for p in a.iterdir()] == ["README.md"]
    digest = hashlib.sha256((a / "README.md").read_bytes()).hexdigest()
    assert digest == hashlib.sha256((b / "README.md").read_bytes()).hexdigest()
    assert digest == README_SHA256
    assert TersePack().describe()["fixture_sha256"] == TersePack(noise=0).describe()["fixture_sha256"] == DATA_SHA256
    assert all(t not in terse.README for q in load_bank().questions for t in q.terms)  # nothing to copy


def test_arms_follow_seed_002():
    arms = TersePack().arms()
    assert list(arms) == ["baseline", "terse", "skill"]
    assert {a.placement for a in arms.values()} == {"system"}
    assert arms["baseline"].instruction == ""
    assert arms["terse"].instruction == "Answer concisely."
    skill_md = (ROOT / "kit/data/terse_skill.md").read_text()
    assert arms["skill"].instruction == "Answer concisely.\n\n" + skill_md


def test_run_index_selects_the_question():
    pack, bank = TersePack(), load_bank()
    n = len(bank.questions)
    assert pack.prompts_for(0) == [bank.questions[0].prompt] == pack.prompts()
    assert pack.prompts_for(5) == [bank.questions[5].prompt]
    assert pack.prompts_for(n + 2) == pack.prompts_for(2)
    assert len({pack.prompts_for(r)[0] for r in range(n)}) == n


GOOD = "Run `git reset --soft HEAD~1`. The work stays staged; if you overshoot, `git reflog` finds the old commit."
PARTIAL = "Use git reset --soft HEAD~1, then commit again; everything is still in the index."
WRONG = "Use `git revert HEAD`: it adds a new commit that undoes the last one."


@pytest.mark.parametrize(
    ("answer", "score", "detail"),
    [
        (GOOD, 1.0, "key terms 3/3"),
        (PARTIAL, 0.3333, "key terms 1/3; missing: staged, reflog"),
        (PARTIAL + " Changes remain Staged.", 0.6667, "key terms 2/3; missing: reflog"),
        (WRONG, 0.0, "key terms 0/3; missing: reset --soft, staged, reflog"),
        ("", 0.0, "key terms 0/3; missing: reset --soft, staged, reflog"),
    ],
)
def test_grader_on_hand_written_answers(answer, score, detail):
    grade = TersePack().grade(answer)
    assert (grade.score, grade.detail) == (score, detail)


def test_grader_uses_the_runs_question_and_word_starts():
    pack = TersePack()
    assert pack.grade_for(1, GOOD).score == 0.0  # the git answer does not answer run 1's question
    assert pack.grade_for(1, "Own address space; threads share the heap; cheaper context switch.").score == 1.0
    assert terse.has_term("it was rebased", "rebase") and not terse.has_term("prebase", "rebase")


def test_compress_keeps_code_and_terms():
    out = terse.compress("Run `git reset --soft HEAD~1` in order to move the branch and keep the files.")
    assert out == "run `git reset --soft HEAD~1` to move branch + keep files"


def test_bank_contract_is_enforced_with_a_located_error(tmp_path, monkeypatch):
    raw = yaml.safe_load(terse.FACTS_FILE.read_text())
    raw["questions"][2]["elaboration"].append("Plain lsof output is verbose.")
    bad = tmp_path / "terse_facts.yaml"
    bad.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(terse, "FACTS_FILE", bad)
    with pytest.raises(terse.BankError, match=r"terse_facts.yaml: questions\[2\]: elaboration\[4\] names .*lsof"):
        load_bank.__wrapped__()
    raw["questions"][0]["prompt"] = "Something else?"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(terse.BankError, match=r"questions\[0\]: prompt .* differs from terse_prompts.txt:1"):
        load_bank.__wrapped__()


def test_knobs_are_checked_and_named():
    with pytest.raises(ValueError, match=r"task_options\.skill_ratio"):
        TersePack(skill_ratio=0)
    with pytest.raises(ValueError, match=r"task_options\.drop_fact_p"):
        TersePack(drop_fact_p=1.5)


def test_policy_reads_the_arm_from_its_context_and_is_deterministic():
    pack = TersePack()
    policy = pack.policy()
    assert [policy.style(_conv(pack, a, 0)) for a in ("baseline", "terse", "skill")] == ["baseline", "terse", "skill"]
    again = policy.reply(_conv(pack, "skill", 3)).text
    assert again == policy.reply(_conv(pack, "skill", 3)).text
    assert again != policy.reply(_conv(pack, "skill", 3, trial="t1")).text
    assert policy.reply(_conv(pack, "baseline", 3)).tool_calls == ()
    unknown = Conversation("chat", "m", "", (), (Message("user", "What is the capital of France?"),))
    assert "only answers the terse task's questions" in policy.reply(unknown).text


def _simulate(pack: TersePack, trials_per_question: int) -> dict[str, dict[str, list[float]]]:
    policy, bank = pack.policy(), load_bank()
    out: dict[str, dict[str, list[float]]] = {arm: {"tokens": [], "grade": []} for arm in pack.arms()}
    for q in range(len(bank.questions)):
        for t in range(trials_per_question):
            for arm in out:
                text = policy.reply(_conv(pack, arm, q, trial=f"{q}-{t}-{arm}")).text
                out[arm]["tokens"].append(count(text))
                score = pack.grade_for(q, text).score
                assert score is not None  # every terse question has its answer key
                out[arm]["grade"].append(score)
    return out


def test_true_effect_is_what_the_docstring_states():
    sim = _simulate(TersePack(), 25)
    mean = {arm: statistics.fmean(v["tokens"]) for arm, v in sim.items()}
    assert mean["terse"] / mean["baseline"] == pytest.approx(0.7, abs=0.03)
    assert mean["skill"] / mean["terse"] == pytest.approx(0.6, abs=0.03)
    assert sim["baseline"]["grade"] == sim["terse"]["grade"] == [1.0] * 300
    assert statistics.fmean(sim["skill"]["grade"]) == pytest.approx(1 - 0.2 / 3, abs=0.025)
    assert set(sim["skill"]["grade"]) == {1.0, 0.6667}  # at most one fact dropped


def test_knobs_move_the_effect():
    sim = _simulate(TersePack(skill_ratio=0.9, drop_fact_p=0.0, noise=0.0), 2)
    mean = {arm: statistics.fmean(v["tokens"]) for arm, v in sim.items()}
    assert mean["skill"] / mean["terse"] == pytest.approx(0.9, abs=0.05)
    assert set(sim["skill"]["grade"]) == {1.0}


def test_true_effect_is_stated_in_the_params_file_and_the_manifest():
    params = pipeline.load_params(str(ROOT / "params/terse.yaml"))
    assert params["task"] == "terse" and params["arms"] == ["baseline", "terse", "skill"]
    assert params["baseline"] == "terse" and params["runs_per_arm"] == len(load_bank().questions)
    pack = TersePack(**params["task_options"])
    text = (ROOT / "params/terse.yaml").read_text()
    assert "skill/terse = 0.6" in text and "skill/terse = 0.6" in pack.describe()["true_effect"]
    assert "p = 0.2" in text and "p=0.2" in pack.true_effect


def test_a_batch_runs_end_to_end_on_the_embedded_provider(tmp_path, monkeypatch):
    monkeypatch.setitem(tasks.PACKS, "terse", TersePack)
    params = pipeline.load_params(str(ROOT / "params/terse.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="t1", runs_per_arm=3, concurrency=1, salt="terse-e2e")
    folder = run.run_batch(run.configure(params), progress=False)
    table = run.schedule_table(folder)
    assert set(table["status"]) == {"ok"}
    assert set(table[table["arm"] != "skill"]["grade"]) == {1.0} and table["grade"].min() >= 2 / 3
    answers = {(r.arm, r.run): (folder / "raw" / r.trial_id / "answer.md").read_text() for r in table.itertuples()}
    # three questions per arm: the arms' mean lengths keep the true effect's order (0.7x, then 0.6x of that;
    # one question alone inverts baseline and terse about once in twenty, from the 15% length noise)
    lengths = {arm: sum(count(text) for (a, _), text in answers.items() if a == arm) for arm in params["arms"]}
    assert lengths["baseline"] > lengths["terse"] > lengths["skill"], lengths
    assert "reset --soft" in answers[("baseline", 0)]
