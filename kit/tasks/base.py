"""What a task pack is: everything one experiment needs besides the backend.

A pack generates its fixture repository deterministically, states the prompt(s) and the arms,
grades final answers against generated ground truth, and supplies the scripted policy the
embedded provider plays for it, with a documented, configurable effect (the pack's "true effect",
which the analysis must recover).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kit.experiment.design import Arm
from kit.jsontypes import PackFacts
from kit.provider.policy import Policy


@dataclass(frozen=True)
class Grade:
    """A graded final answer: score in [0, 1] (None where no ground truth exists) and why."""

    score: float | None
    detail: str


class TaskPack(Protocol):
    name: str

    @property
    def true_effect(self) -> str:
        """What the arms truly do, in words (the packs compute it from their settings)."""
        ...

    def arms(self) -> dict[str, Arm]: ...

    def prompts_for(self, run: int) -> list[str]:
        """The user turns of the trial with this run index, in order (one for single-question packs).

        Packs with a bank of questions (terse) give each run index its own question, so a batch of
        ``runs_per_arm`` runs covers the bank and every arm answers the same question in the same run.
        """
        ...

    def grade_for(self, run: int, answer: str) -> Grade:
        """Grade the final answer of the trial with this run index (it knows which question was asked)."""
        ...

    def prepare(self, workdir: Path) -> None:
        """Write the fixture repository into ``workdir`` (created, empty)."""
        ...

    def policy(self) -> Policy: ...

    def grade(self, answer: str) -> Grade: ...

    def describe(self) -> PackFacts:
        """Pack parameters for the manifest."""
        ...
