"""Task pack ``terse`` (docs/method.md#controls): does a compression skill shorten answers beyond "Answer concisely."?

Twelve developer questions (``kit/data/terse_prompts.txt``), one per trial: the trial's run index picks
the question (:meth:`TersePack.prompts_for`), so ``runs_per_arm`` = 12 asks each once per arm and
trials pair by question. Three arms, all in the system prompt, as in caveman's evals:

- ``baseline``: no instruction;
- ``terse``: ``Answer concisely.`` (the control);
- ``skill``: ``Answer concisely.`` plus a compression style guide (``kit/data/terse_skill.md``).

The honest delta is ``skill`` against ``terse``: comparing with ``baseline`` would credit the skill with
the generic effect of asking for brevity. Grading is real: every question has three key terms
(``kit/data/terse_facts.yaml``) and the grade is the share of them the answer contains, so an arm that
saves tokens by dropping content scores worse. No repository is needed; the fixture is a README.

True effect of the scripted model (the analysis must recover it). The model writes its answer from the
question's fact bank, sized to a target of ``V * 0.75 * m * exp(noise * z - noise**2 / 2)`` output tokens
(o200k_base), where ``V`` is the length of the question's full verbose material, ``z`` is standard
normal per trial and ``m`` is 1 (baseline), ``terse_ratio`` (terse) or ``terse_ratio * skill_ratio``
(skill); sentences are added while they bring the answer closer to the target. So expected output
tokens are terse/baseline ~ ``terse_ratio`` (0.7) and skill/terse ~ ``skill_ratio`` (0.6); the mean
per-question saving ``1 - skill/terse`` is ~ ``1 - skill_ratio * exp(noise**2)`` (0.39 with defaults),
its median ~ ``1 - skill_ratio`` (0.40). Quality: baseline and terse state every key fact (grade 1);
skill drops one of its three facts with probability ``drop_fact_p`` (0.2), so its expected grade is
``1 - drop_fact_p / 3`` (0.933), with no effect on its length. The skill text also adds input tokens to
every request, which the total-token headline counts and an output-only measurement (caveman's) misses.

The user's own inputs (``kit.tasks.terse_user``): ``task_options.prompts_file`` replaces the twelve questions
with the user's, one per line, and ``task_options.skills_dir`` replaces the ``skill`` arm with one arm per
``<name>/SKILL.md`` (instruction ``Answer concisely.`` plus that file's text, in the system prompt, as the
pack's own skill), so the arms are ``baseline``, ``terse`` and each skill's name (list them in ``arms``).
The scripted model plays every user skill alike (``skill_ratio``; skill vs skill is truly 1.0). A user's
question that is one of the twelve keeps its answer key; any other is answered from the bank's generic
sentences and is not graded (``NO_KEY``), since the kit has no ground truth for it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kit.errors import KitError
from kit.experiment.design import Arm, ParamError
from kit.jsontypes import PackFacts
from kit.provider.policy import Conversation, Reply
from kit.tasks.base import Grade
from kit.tasks.terse_user import UserPrompt, UserSkill, read_prompts, read_skills
from kit.tokens import count

DATA = Path(__file__).resolve().parent.parent / "data"
PROMPTS_FILE = DATA / "terse_prompts.txt"
FACTS_FILE = DATA / "terse_facts.yaml"
SKILL_FILE = DATA / "terse_skill.md"

TERSE = "Answer concisely."
SKILL = SKILL_FILE.read_text(encoding="utf-8")
SKILL_MARKER = SKILL.splitlines()[0]  # the skill's heading: how the scripted model knows it was given the skill
BASE_FILL = 0.75  # the baseline's expected share of the full verbose material
USER_INTRO = "Here is the general picture."  # a user's question outside the bank: no facts, only generic prose
NO_KEY = "no answer key: a question of the user's prompts file that is not one of the pack's"
README = (
    "# terse task\n\n"
    "This folder is intentionally empty. The question is a general developer question: answer it from\n"
    "what you know; there is nothing to read here.\n"
)
OPENERS = ("Good question.", "Sure, here is how this works.", "Happy to explain.", "Great question!")
CLOSERS = (
    "Let me know if you would like a worked example.",
    "I hope this helps, and feel free to ask follow-up questions.",
    "If anything is unclear, I am happy to go into more detail.",
)
_DROP = re.compile(
    r"\b(?:a|an|the|just|really|very|basically|simply|actually|also|usually|that|so|then|therefore|quite)\b ?",
    re.IGNORECASE,
)
_PHRASES = (("in order to", "to"), ("for example", "e.g."), ("such as", "e.g."), (" and ", " + "), ("because", "since"))


class BankError(KitError, ValueError):
    """The pack's data files disagree; the message names the file and the entry."""


@dataclass(frozen=True)
class Question:
    """One question: its prompt, the facts that answer it (key term -> sentence) and optional prose."""

    prompt: str
    intro: str
    facts: dict[str, str]
    elaboration: tuple[str, ...]

    @property
    def terms(self) -> tuple[str, ...]:
        return tuple(self.facts)


@dataclass(frozen=True)
class Bank:
    questions: tuple[Question, ...]
    generic: tuple[str, ...]


def _term_pattern(term: str) -> re.Pattern[str]:
    """A key term found case-insensitively at the start of a word (``rebase`` matches ``rebased``)."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(term), re.IGNORECASE)


def has_term(text: str, term: str) -> bool:
    return _term_pattern(term).search(text) is not None


def compress(sentence: str) -> str:
    """The skill's style: articles and filler dropped, symbols for connectives; code spans kept verbatim."""
    parts = re.split(r"(`[^`]*`)", sentence.rstrip("."))
    out = []
    for part in parts:
        if not part.startswith("`"):
            for long, short in _PHRASES:
                part = part.replace(long, short)
            part = _DROP.sub("", part)
        out.append(part)
    text = re.sub(r"\s+", " ", "".join(out)).replace(" ,", ",").strip()
    return text[:1].lower() + text[1:] if text[:1].isalpha() and not text[1:2].isupper() else text


@functools.cache
def load_bank() -> Bank:
    """The prompts and the fact bank, checked against each other (the grader's contract)."""
    prompts = [line.strip() for line in PROMPTS_FILE.read_text(encoding="utf-8").splitlines()]
    try:
        raw = yaml.safe_load(FACTS_FILE.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise BankError(f"{FACTS_FILE}: not valid YAML ({exc})") from exc
    entries, generic = raw.get("questions", []), tuple(raw.get("generic", []))
    if len(entries) != len(prompts):
        raise BankError(f"{FACTS_FILE.name}: {len(entries)} questions, {PROMPTS_FILE.name} has {len(prompts)} lines")
    questions = []
    for i, (entry, prompt) in enumerate(zip(entries, prompts, strict=True)):
        where = f"{FACTS_FILE.name}: questions[{i}]"
        if entry.get("prompt") != prompt:
            raise BankError(f"{where}: prompt {entry.get('prompt')!r} differs from {PROMPTS_FILE.name}:{i + 1}")
        q = Question(prompt, entry["intro"], dict(entry["facts"]), tuple(entry.get("elaboration", ())))
        _check_question(q, where)
        questions.append(q)
    for j, sentence in enumerate(generic):
        hit = [t for q in questions for t in q.terms if has_term(sentence, t)]
        if hit:
            raise BankError(f"{FACTS_FILE.name}: generic[{j}] names key term(s) {hit}")
    return Bank(tuple(questions), generic)


def _check_question(q: Question, where: str) -> None:
    if not 2 <= len(q.terms) <= 4:
        raise BankError(f"{where}: {len(q.terms)} key terms; expected 2 to 4")
    for term, sentence in q.facts.items():
        others = [t for t in q.terms if t != term and has_term(sentence, t)]
        if not has_term(sentence, term) or not has_term(compress(sentence), term) or others:
            raise BankError(f"{where}: fact {term!r} must name its own term (also compressed) and no other {others}")
    for k, sentence in enumerate((q.intro, *q.elaboration)):
        hit = [t for t in q.terms if has_term(sentence, t)]
        if hit:
            raise BankError(f"{where}: {'intro' if k == 0 else f'elaboration[{k - 1}]'} names key term(s) {hit}")


def _grade_answer(answer: str, question: Question) -> Grade:
    """Share of the question's key terms the answer contains; not graded for a question without any."""
    if not question.terms:
        return Grade(None, NO_KEY)
    missing = [t for t in question.terms if not has_term(answer, t)]
    found = len(question.terms) - len(missing)
    detail = f"key terms {found}/{len(question.terms)}" + (f"; missing: {', '.join(missing)}" if missing else "")
    return Grade(round(found / len(question.terms), 4), detail)


def _render(style: str, facts: list[str], pad: list[str], q: Question, opener: str, closer: str) -> str:
    if style == "skill":
        return "\n".join(f"- {compress(s)}" for s in facts + pad) + "\n"
    body = "\n\n".join(part for part in (" ".join(facts), " ".join(pad)) if part)
    if style == "terse":
        return body + "\n"
    return f"{opener} {q.intro}\n\n{body}\n\n{closer}\n"


@dataclass
class TerseEffect:
    """The pack's true effect (``task_options``), shared by the pack and its scripted model."""

    terse_ratio: float = 0.7
    skill_ratio: float = 0.6
    noise: float = 0.15
    drop_fact_p: float = 0.2
    name: str = "terse"


def _bank_questions() -> tuple[Question, ...]:
    return load_bank().questions


@dataclass
class TersePolicy(TerseEffect):
    """The scripted model for this pack (see the module docstring for its true effect).

    ``questions`` are the ones it answers (the bank's, or the user's prompts file's); ``markers`` the texts
    that tell it a skill was given (the pack's skill heading, or each user SKILL.md's text).
    """

    questions: tuple[Question, ...] = field(default_factory=_bank_questions)
    markers: tuple[str, ...] = (SKILL_MARKER,)

    def style(self, conv: Conversation) -> str:
        """Which arm's instruction the model was given, read from its context."""
        text = conv.all_text()
        if any(marker in text for marker in self.markers):
            return "skill"
        return "terse" if TERSE in text else "baseline"

    def question(self, conv: Conversation) -> Question | None:
        asked = [m.text for m in conv.messages if m.role == "user" and m.text]
        for text in reversed(asked):
            found = [q for q in self.questions if q.prompt in text]
            if found:  # the longest: a user's short question may lie inside a longer one
                return max(found, key=lambda q: len(q.prompt))
        return None

    def reply(self, conv: Conversation) -> Reply:
        q = self.question(conv)
        if q is None:
            return Reply("This simulated model only answers the terse task's questions; none was asked.")
        return Reply(self.answer(q, self.style(conv), conv.rng("terse")))

    def answer(self, q: Question, style: str, rng: random.Random) -> str:
        """An answer in ``style`` sized to its target length (deterministic for ``rng``'s state)."""
        bank = load_bank()
        factor = {"baseline": 1.0, "terse": self.terse_ratio, "skill": self.terse_ratio * self.skill_ratio}[style]
        verbose = count(" ".join([q.intro, *q.facts.values(), *q.elaboration, *bank.generic]))
        z = rng.gauss(0.0, 1.0)
        target = verbose * BASE_FILL * factor * math.exp(self.noise * z - self.noise**2 / 2)
        drop = rng.random() < self.drop_fact_p if style == "skill" else False
        drop = drop and bool(q.terms)  # a user's question without facts has none to drop
        dropped = rng.choice(q.terms) if drop else None
        facts = [s for t, s in q.facts.items() if t != dropped]
        pool = [*q.elaboration, *rng.sample(bank.generic, len(bank.generic))]
        opener, closer = rng.choice(OPENERS), rng.choice(CLOSERS)
        pad: list[str] = []
        best = abs(count(_render(style, facts, pad, q, opener, closer)) - target)
        for sentence in pool:
            gap = abs(count(_render(style, facts, [*pad, sentence], q, opener, closer)) - target)
            if gap >= best:
                break
            pad, best = [*pad, sentence], gap
        return _render(style, facts, pad, q, opener, closer)


@dataclass
class TersePack(TerseEffect):
    """The pack object the run stage uses (see the module docstring).

    ``prompts_file`` and ``skills_dir`` (``kit.tasks.terse_user``) are read and checked here, when the run
    stage makes the pack from ``task_options``, so a bad file stops the batch before anything runs.
    """

    prompts_file: str | None = None
    skills_dir: str | None = None

    def __post_init__(self) -> None:
        for knob in ("terse_ratio", "skill_ratio", "noise", "drop_fact_p"):
            value = getattr(self, knob)
            ratio = knob.endswith("_ratio")  # a ratio of 0 would be an empty answer; noise and p may be 0
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not (0 < value <= 1 if ratio else 0 <= value <= 1):
                accepted = "a number in (0, 1]" if ratio else "a number in [0, 1]"
                raise ParamError(f"task_options.{knob}", f"{value!r} is out of range", accepted)
        self.questions()  # reads and checks prompts_file now, before anything is written
        self.arms()  # and skills_dir

    @functools.cached_property
    def user_prompts(self) -> tuple[UserPrompt, ...]:
        """The prompts file's questions, read once (when the pack is made); none without one."""
        return read_prompts(self.prompts_file) if self.prompts_file is not None else ()

    @functools.cached_property
    def user_skills(self) -> tuple[UserSkill, ...]:
        """The skills folder's skills; none without one (the pack's own ``skill`` arm then)."""
        return read_skills(self.skills_dir) if self.skills_dir is not None else ()

    @property
    def skill_arms(self) -> list[str]:
        """The arms that carry a skill: each user skill's name, or ``skill``."""
        return [s.name for s in self.user_skills] or ["skill"]

    @property
    def true_effect(self) -> str:
        saving = 1 - self.skill_ratio * math.exp(self.noise**2)
        skills = self.skill_arms
        if skills == ["skill"]:
            return (
                f"expected output tokens terse/baseline = {self.terse_ratio}, skill/terse = {self.skill_ratio} "
                f"(lognormal noise sigma={self.noise}; mean per-question saving of skill over terse ~ {saving:.3f}); "
                f"skill drops one of 3 key facts with p={self.drop_fact_p} (expected grade "
                f"{1 - self.drop_fact_p / 3:.3f}; baseline and terse 1.0)"
            )
        keyed = sum(bool(q.terms) for q in self.questions())
        return (
            f"expected output tokens terse/baseline = {self.terse_ratio}, each of {', '.join(skills)} / terse = "
            f"{self.skill_ratio} (the scripted model plays every skill alike: skill vs skill = 1.0; lognormal noise "
            f"sigma={self.noise}; mean per-question saving ~ {saving:.3f}); a skill drops a key fact with "
            f"p={self.drop_fact_p}; {keyed} of {len(self.questions())} questions have an answer key, the others "
            "are not graded"
        )

    def arms(self) -> dict[str, Arm]:
        arms = {
            "baseline": Arm("baseline", "", placement="system", description="no system instruction"),
            "terse": Arm("terse", TERSE, placement="system", description="the terse control"),
        }
        if not self.user_skills:
            arms["skill"] = Arm("skill", f"{TERSE}\n\n{SKILL}", placement="system", description="terse + SKILL.md")
        for s in self.user_skills:
            arms[s.name] = Arm(s.name, f"{TERSE}\n\n{s.text}", placement="system", description=f"terse + {s.path}")
        return arms

    def questions(self) -> tuple[Question, ...]:
        """The bank's questions, or the prompts file's (a bank question keeps its answer key)."""
        bank = load_bank().questions
        if not self.user_prompts:
            return bank
        keyed = {q.prompt: q for q in bank}
        return tuple(keyed.get(p.text) or Question(p.text, USER_INTRO, {}, ()) for p in self.user_prompts)

    def question_for(self, run: int) -> Question:
        """The question of run ``run``: runs cycle through the prompts in order."""
        qs = self.questions()
        return qs[run % len(qs)]

    def prompts_for(self, run: int) -> list[str]:
        """The one user turn of run ``run`` (the run stage calls this when a pack has it)."""
        return [self.question_for(run).prompt]

    def prompts(self) -> list[str]:
        """Run 0's question: what a run stage that does not know ``prompts_for`` asks every trial."""
        return self.prompts_for(0)

    def prepare(self, workdir: Path) -> None:
        (workdir / "README.md").write_text(README)

    def policy(self) -> TersePolicy:
        markers = tuple(s.text.strip() for s in self.user_skills) or (SKILL_MARKER,)
        return TersePolicy(
            self.terse_ratio, self.skill_ratio, self.noise, self.drop_fact_p, "terse", self.questions(), markers
        )

    def grade_for(self, run: int, answer: str) -> Grade:
        """Grade against run ``run``'s question (the run stage calls this when a pack has it)."""
        return _grade_answer(answer, self.question_for(run))

    def grade(self, answer: str) -> Grade:
        """Grade against run 0's question, matching :meth:`prompts`."""
        return self.grade_for(0, answer)

    def describe(self) -> PackFacts:
        """The manifest's facts; ``fixture_sha256`` covers the user's prompts and skills too, so a resumed
        batch whose files changed is told apart."""
        prompts = "".join(f"{p.text}\n" for p in self.user_prompts) or PROMPTS_FILE.read_text(encoding="utf-8")
        skills = [f"{s.name}\n{s.text}" for s in self.user_skills] or [SKILL]
        digest = hashlib.sha256()
        for part in (README, prompts, FACTS_FILE.read_text(encoding="utf-8"), *skills):
            digest.update(part.encode() + b"\0")
        user: PackFacts = {}
        if self.prompts_file is not None:
            user["prompts_file"] = self.prompts_file
        if self.skills_dir is not None:
            user |= {"skills_dir": self.skills_dir, "skills": self.skill_arms}
        return {
            "task": self.name,
            "terse_ratio": self.terse_ratio,
            "skill_ratio": self.skill_ratio,
            "noise": self.noise,
            "drop_fact_p": self.drop_fact_p,
            **user,
            "n_prompts": len(self.questions()),
            "true_effect": self.true_effect,
            "fixture_sha256": digest.hexdigest(),
        }
