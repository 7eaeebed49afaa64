"""What each turn's user message is, in every backend: the question, and for a fresh session the summary.

An arm's ``session`` is ``resume`` (one conversation carries every turn: the PromptPilot write-up's builtin arm) or
``fresh`` (each later turn is a new session whose first message summarises the earlier turns' questions
and final answers: its with_session arm; docs/method.md#sources). The SDK agents and the CLI backends build the message
here, so the two modes mean the same thing whichever client runs the trial.
"""

from __future__ import annotations

from kit.agents.base import TrialSpec
from kit.errors import InputError

SUMMARY_CHARS = 4000  # bound of a fresh session's summary of earlier turns (backend_options: summary_chars)
SUMMARY_HEADER = (
    "Summary of the earlier turns of this task. This is a new session: their tool output is not in context, "
    "only these questions and final answers (clipped)."
)


def turn_prompt(spec: TrialSpec, turn: int, answers: list[str]) -> str:
    """The user message of ``turn``; a fresh session's first message also carries the summary and prefix."""
    text = spec.prompts[turn]
    starts_session = turn == 0 or spec.arm.session == "fresh"
    if turn > 0 and spec.arm.session == "fresh":
        text = f"{session_summary(spec.prompts[:turn], answers, summary_chars(spec))}\n\nNew question:\n{text}"
    if starts_session and spec.arm.instruction and spec.arm.placement == "user_prefix":
        text = f"{spec.arm.instruction}\n\n{text}"
    return text


def session_summary(questions: list[str] | tuple[str, ...], answers: list[str], limit: int = SUMMARY_CHARS) -> str:
    """Earlier turns as a fresh session sees them: every question and final answer, clipped to fit ``limit``.

    Each turn gets an equal share of the bound (a question at most a third of it), so the summary never
    exceeds ``limit`` characters however long the answers were, and no turn is dropped.
    """
    pairs = list(zip(questions, answers, strict=False))
    if not pairs:
        return ""
    share = (limit - len(SUMMARY_HEADER)) // len(pairs) - 40  # 40: the "Turn N question/answer:" labels
    if share < 60:
        raise InputError(f"summary_chars={limit} is too small for {len(pairs)} earlier turns")
    entries = []
    for i, (question, answer) in enumerate(pairs, 1):
        q = _clip(question, share // 3)
        entries.append(f"Turn {i} question: {q}\nTurn {i} answer: {_clip(answer, share - len(q))}")
    return "\n\n".join([SUMMARY_HEADER, *entries])


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def summary_chars(spec: TrialSpec) -> int:
    value = spec.options.get("summary_chars", SUMMARY_CHARS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 400:
        raise InputError(f"backend_options.summary_chars: expected an integer >= 400, got {value!r}")
    return value
