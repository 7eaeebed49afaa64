"""The terse pack on the user's own prompts file and skills folder (kit.tasks.terse_user): each
``skills/<name>/SKILL.md`` an arm, each line of the prompts file a run's question, bad inputs refused with
their place before anything runs. Batches run on sdk-anthropic and the real Claude Code against the embedded
provider; what reached the model is what the provider parsed from the wire, and its log's input tokens."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kit import tasks
from kit.agents import cli_common
from kit.cli import pipeline
from kit.experiment.design import ParamError
from kit.provider.log import read as read_log
from kit.provider.policy import Conversation, Message, Reply
from kit.stages import run
from kit.tasks import terse
from kit.tasks.terse import TersePack, TersePolicy, load_bank
from kit.tokens import count
from tests.support import ROOT, write_files

BANK_Q = load_bank().questions[0]  # a question of the pack's own: it keeps its answer key
OWN_Q = "Why would I pick SQLite over Postgres for a desktop app?"  # the user's own: not graded
ALPHA = (
    "# Skill: alpha-telegraph\n\nAnswer like a telegram. STOP between sentences. Drop every article, every\n"
    "greeting and every closing offer. Keep commands, flags and numbers exactly as written. STOP.\n"
)
BETA = "---\nname: beta\ndescription: a longer style guide\n---\n\n# Skill: beta-bullets\n\n" + "".join(
    f"- Rule {i}: keep answer item {i} to one short line, no filler words.\n" for i in range(12)
)


def user_inputs(root: Path, prompts: str | None = None, skills: dict[str, str] | None = None) -> dict[str, str]:
    """A prompts file and a skills folder under ``root``; the task options naming them."""
    prompts = f"{BANK_Q.prompt}\n\n  {OWN_Q}  \n" if prompts is None else prompts
    skills = {"alpha/SKILL.md": ALPHA, "beta/SKILL.md": BETA, "README.md": "not a skill"} if skills is None else skills
    write_files(root, {"prompts.txt": prompts, **{f"skills/{k}": v for k, v in skills.items()}})
    (root / "skills").mkdir(exist_ok=True)
    return {"prompts_file": str(root / "prompts.txt"), "skills_dir": str(root / "skills")}


def test_each_skill_folder_is_an_arm_and_each_line_a_question(tmp_path):
    pack = TersePack(**user_inputs(tmp_path))
    arms = pack.arms()
    assert list(arms) == ["baseline", "terse", "alpha", "beta"]  # the pack's own `skill` arm gives way
    assert arms["alpha"].instruction == "Answer concisely.\n\n" + ALPHA  # as caveman: terse + SKILL.md, verbatim
    assert arms["beta"].instruction == "Answer concisely.\n\n" + BETA
    assert {a.placement for a in arms.values()} == {"system"}
    assert [pack.prompts_for(r) for r in range(3)] == [[BANK_Q.prompt], [OWN_Q], [BANK_Q.prompt]]
    good = " ".join(BANK_Q.terms)
    assert pack.grade_for(0, good).score == 1.0 and pack.grade_for(1, good) == terse._grade_answer(
        good, pack.questions()[1]
    )
    assert pack.grade_for(1, good).score is None and "no answer key" in pack.grade_for(1, good).detail
    facts = pack.describe()
    assert facts["skills"] == ["alpha", "beta"] and facts["n_prompts"] == 2
    assert facts["fixture_sha256"] != TersePack().describe()["fixture_sha256"]
    assert "each of alpha, beta / terse = 0.6" in facts["true_effect"] and "1 of 2 questions" in facts["true_effect"]
    edited = user_inputs(tmp_path / "b", skills={"alpha/SKILL.md": ALPHA + "more\n", "beta/SKILL.md": BETA})
    assert TersePack(**edited).describe()["fixture_sha256"] != facts["fixture_sha256"]  # a resume sees the edit


def test_the_scripted_model_tells_the_users_skills_from_the_control(tmp_path):
    pack = TersePack(**user_inputs(tmp_path))
    policy = pack.policy()
    styles = {}
    for arm, spec in pack.arms().items():
        conv = _conv(spec.instruction, OWN_Q)
        styles[arm] = policy.style(conv)
        assert policy.question(conv) == pack.questions()[1]
    assert styles == {"baseline": "baseline", "terse": "terse", "alpha": "skill", "beta": "skill"}
    answer = policy.reply(_conv(pack.arms()["beta"].instruction, OWN_Q)).text
    assert answer.startswith("- ") and "only answers" not in answer  # the skill's style, on the user's question


def _conv(system: str, question: str) -> Conversation:
    return Conversation("messages", "sim-agent", system, (), (Message("user", question),), trial_id="t", seed=0)


BAD_INPUTS = [
    ("prompts", "a\n\nb\n  a \n", r"prompts\.txt:4: the same question as line 1"),
    ("prompts", "ok\nbad\x00line\n", r"prompts\.txt:2: control character '\\x00'"),
    ("prompts", "\n  \n", r"prompts\.txt: no question in it"),
    ("prompts_bytes", b"fine\n\xff\xfe broken\n", r"prompts\.txt:2: not UTF-8 text"),
    ("skills", {"my skill/SKILL.md": ALPHA}, r"skills/my skill: folder name 'my skill' cannot name an arm"),
    ("skills", {"terse/SKILL.md": ALPHA}, r"skills/terse: folder name 'terse' is one of the pack's own arms"),
    ("skills", {"_x/SKILL.md": ALPHA}, r"folder name '_x' cannot name an arm"),
    ("skills", {"alpha/skill.txt": ALPHA}, r"skills/alpha/SKILL\.md: cannot read"),
    ("skills", {"alpha/SKILL.md": " \n"}, r"skills/alpha/SKILL\.md: empty"),
    ("skills", {"README.md": "only a file"}, r"skills: no <name>/SKILL\.md in it"),
]


@pytest.mark.parametrize(("kind", "content", "message"), BAD_INPUTS)
def test_bad_inputs_are_refused_with_their_place_before_anything_runs(tmp_path, kind, content, message):
    if kind == "prompts_bytes":
        options = user_inputs(tmp_path / "in")
        Path(options["prompts_file"]).write_bytes(content)
    elif kind == "prompts":
        options = user_inputs(tmp_path / "in", prompts=content)
    else:
        options = user_inputs(tmp_path / "in", skills=content)
    with pytest.raises(ParamError, match=message):
        TersePack(**options)
    out = tmp_path / "out"
    params = {**_params(out, "sdk-anthropic"), "task_options": options}
    with pytest.raises(ParamError, match=r"parameter 'task_options\.(prompts_file|skills_dir)'"):
        run.configure(params)
    assert not out.exists()  # refused when the pack was made: no batch folder, nothing ran


def test_missing_paths_and_unknown_arms_are_named(tmp_path):
    with pytest.raises(ParamError, match=r"prompts_file'.*nope\.txt: cannot read"):
        TersePack(prompts_file=str(tmp_path / "nope.txt"))
    with pytest.raises(ParamError, match=r"skills_dir'.*is not a folder"):
        TersePack(skills_dir=str(tmp_path / "none"))
    params = {**_params(tmp_path / "out", "sdk-anthropic"), "task_options": user_inputs(tmp_path)}
    params["arms"] = ["terse", "skill"]  # params/terse.yaml's arm, gone once the user's skills are the arms
    with pytest.raises(ParamError, match=r"unknown arm 'skill'.*\['alpha', 'baseline', 'beta', 'terse'\]"):
        run.configure(params)


def _params(out: Path, backend: str) -> dict:
    params = pipeline.load_params(str(ROOT / "params/terse.yaml"))
    params.update(outputs_dir=str(out), batch="user", backend=backend, runs_per_arm=2, concurrency=2)
    params.update(arms=["terse", "alpha", "beta"], profile=None, timeout_s=1800.0)
    return params


class Recorder(TersePolicy):
    """The pack's own scripted model, keeping every conversation it answered (what the backend really sent)."""

    seen: list[Conversation]

    def reply(self, conv: Conversation) -> Reply:
        self.seen.append(conv)
        return super().reply(conv)


@pytest.mark.parametrize("backend", ["sdk-anthropic", "claude"])
def test_user_arms_ran_with_their_skills_on_the_backend(tmp_path, monkeypatch, backend):
    if backend == "claude" and not (cli_common.TOOLS_BIN / "claude").exists():
        pytest.skip(f"claude CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    seen: list[Conversation] = []
    own = TersePack.policy

    def recording(self: TersePack) -> Recorder:
        inner = own(self)
        rec = Recorder(**{f.name: getattr(inner, f.name) for f in dataclasses.fields(inner)})
        rec.seen = seen
        return rec

    monkeypatch.setitem(tasks.PACKS, "terse", TersePack)
    monkeypatch.setattr(TersePack, "policy", recording)
    params = {**_params(tmp_path / "out", backend), "task_options": user_inputs(tmp_path / "in")}
    folder = run.run_batch(run.configure(params), progress=False)
    table = run.schedule_table(folder)
    assert list(table["status"]) == ["ok"] * 6, list(table["reason"])
    texts = {"alpha": ALPHA.strip(), "beta": BETA.strip()}
    log = read_log(folder / "raw" / "_provider" / "requests.jsonl")
    first_input = {}
    for r in table.itertuples():
        convs = [c for c in seen if c.trial_id == r.trial_id]
        assert convs, f"{r.trial_id}: the provider answered no request of it"
        system = convs[0].system
        assert "Answer concisely." in system
        for arm, text in texts.items():  # its own SKILL.md reached the model, and only its own
            assert (text in system) == (arm == r.arm), (r.trial_id, arm)
        asked = [m.text for m in convs[0].messages if m.role == "user"]
        assert any([BANK_Q.prompt, OWN_Q][r.run] in t for t in asked), (r.trial_id, asked)
        answer = (folder / "raw" / r.trial_id / "answer.md").read_text()
        assert answer.lstrip().startswith("- ") == (r.arm != "terse"), (r.trial_id, answer[:80])
        assert (r.grade is None or r.grade != r.grade) == (r.run == 1), (r.trial_id, r.grade)  # not graded: own Q
        lines = [x for x in log if x["trial_id"] == r.trial_id]
        assert len(lines) == len(convs) >= 1
        first_input[(r.arm, r.run)] = lines[0]["usage"]["input_tokens"]
    # the provider's count of each skill arm's first request exceeds the control's by the skill's text, to a few
    # tokens: the text's edges tokenize with its neighbours (beta: 245 and 246 for 250 on sdk-anthropic and
    # claude), and Claude Code's environment message varies by 1 to 3 tokens from trial to trial
    for arm, text in texts.items():
        expected = count("\n\n" + text)
        for run_index in (0, 1):
            extra = first_input[(arm, run_index)] - first_input[("terse", run_index)]
            assert abs(extra - expected) <= 10, (arm, run_index, extra, expected)
