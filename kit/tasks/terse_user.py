"""The user's own questions and skills for the terse pack: a prompts file and a ``skills/<name>/SKILL.md`` folder.

caveman's evals (docs/method.md#controls) keep their questions in ``prompts/en.txt``, one per line, and pick up
every ``skills/<name>/SKILL.md`` as an arm. The terse pack takes the same two inputs
(``task_options: {prompts_file: PATH, skills_dir: PATH}``), so a user who has them runs that experiment as it
is, interleaved and on any backend. Both are checked when the pack is made, before anything is written or
run, and a mistake is refused with its place (``file:line`` for a question, the folder for a skill):

- the prompts file is UTF-8 text, one question per line; blank lines are skipped and a line's surrounding
  white space dropped. A control character (a question goes into a CLI's argument list, which cannot hold a
  NUL) or a question asked twice (its runs would pair with themselves) is refused, as is a file with none;
- each folder of the skills folder is one skill: its name becomes the arm's name, so it must pass
  ``kit.names.NAME_RULE`` and be neither ``baseline`` nor ``terse`` (the pack's reference arms), and it must
  hold a non-empty UTF-8 ``SKILL.md``. Loose files and hidden folders (``.git``) are not skills and are
  skipped; a folder without ``SKILL.md`` is refused rather than skipped, since an arm the user expected
  would otherwise silently not run.

A relative path is taken from the repository root, as ``outputs_dir`` is (``kit.experiment.layout.from_root``),
so a notebook (started in ``notebooks/``) and ``kit batch`` read the same file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.experiment.design import ParamError
from kit.experiment.layout import from_root
from kit.names import NAME_RULE, is_name

RESERVED = ("baseline", "terse")  # the pack's own arms: a skill of that name would replace one
PROMPTS_RULE = "a UTF-8 text file with one question per line (blank lines skipped), as caveman's prompts/en.txt"
SKILLS_RULE = (
    f"a folder of <name>/SKILL.md, each <name> {NAME_RULE}, and neither {' nor '.join(RESERVED)}; "
    "each SKILL.md non-empty UTF-8"
)


@dataclass(frozen=True)
class UserPrompt:
    """One question of the prompts file and the line it is on (for messages)."""

    text: str
    line: int


@dataclass(frozen=True)
class UserSkill:
    """One skill folder: its arm name, its SKILL.md and that file's text (the arm's instruction after the
    terse control, as caveman's ``Answer concisely.\\n\\n{SKILL.md}``)."""

    name: str
    path: Path
    text: str


def _resolve(value: object, option: str, rule: str) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ParamError(f"task_options.{option}", f"got {value!r}", f"a path to {rule}")
    return from_root(Path(value).expanduser())


def _decode(raw: bytes, where: Path, option: str, rule: str) -> str:
    """``raw`` as UTF-8 (a byte-order mark dropped), or a ParamError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ParamError(f"task_options.{option}", f"{where}:{line}: not UTF-8 text ({exc.reason})", rule) from None


def _control(text: str) -> str | None:
    """The first control character of ``text`` (tab allowed), shown as its escape; None if there is none."""
    bad = next((c for c in text if (c < " " and c != "\t") or c == "\x7f"), None)
    return repr(bad) if bad is not None else None


def read_prompts(value: object) -> tuple[UserPrompt, ...]:
    """The questions of the prompts file ``value`` in file order (module docstring: the format, the checks)."""
    path = _resolve(value, "prompts_file", PROMPTS_RULE)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ParamError("task_options.prompts_file", f"{path}: cannot read ({exc.strerror})", PROMPTS_RULE) from None
    text = _decode(raw, path, "prompts_file", PROMPTS_RULE)
    seen: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        question = line.strip()
        if not question:
            continue
        bad = _control(question)
        if bad:
            raise ParamError("task_options.prompts_file", f"{path}:{number}: control character {bad}", PROMPTS_RULE)
        if question in seen:
            problem = f"{path}:{number}: the same question as line {seen[question]}"
            raise ParamError("task_options.prompts_file", problem, PROMPTS_RULE)
        seen[question] = number
    if not seen:
        raise ParamError("task_options.prompts_file", f"{path}: no question in it", PROMPTS_RULE)
    return tuple(UserPrompt(q, n) for q, n in seen.items())


def read_skills(value: object) -> tuple[UserSkill, ...]:
    """One skill per folder of ``value``, by name (module docstring: what is a skill, what is refused)."""
    root = _resolve(value, "skills_dir", SKILLS_RULE)
    if not root.is_dir():
        raise ParamError("task_options.skills_dir", f"{root} is not a folder", SKILLS_RULE)
    skills = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        if not is_name(folder.name) or folder.name in RESERVED:
            why = "is one of the pack's own arms" if folder.name in RESERVED else "cannot name an arm"
            raise ParamError("task_options.skills_dir", f"{folder}: folder name {folder.name!r} {why}", SKILLS_RULE)
        path = folder / "SKILL.md"
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ParamError("task_options.skills_dir", f"{path}: cannot read ({exc.strerror})", SKILLS_RULE) from None
        text = _decode(raw, path, "skills_dir", SKILLS_RULE)
        if not text.strip():
            raise ParamError("task_options.skills_dir", f"{path}: empty", SKILLS_RULE)
        if "\x00" in text:  # a CLI gets the instruction as an argument, which cannot hold a NUL
            line = text[: text.index("\x00")].count("\n") + 1
            raise ParamError("task_options.skills_dir", f"{path}:{line}: a NUL character", SKILLS_RULE)
        skills.append(UserSkill(folder.name, path, text))
    if not skills:
        raise ParamError("task_options.skills_dir", f"{root}: no <name>/SKILL.md in it", SKILLS_RULE)
    return tuple(skills)
