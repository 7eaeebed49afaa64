"""What a task pack is: everything one experiment needs besides the backend.

A pack generates its fixture repository deterministically, states the prompt(s) and the arms,
grades final answers against generated ground truth, and supplies the scripted policy the
embedded provider plays for it, with a documented, configurable effect (the pack's "true effect",
which the analysis must recover).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kit.design import Arm
from kit.provider.policy import Policy


@dataclass(frozen=True)
class Grade:
    """A graded final answer: score in [0, 1] (None where no ground truth exists) and why."""

    score: float | None
    detail: str


class TaskPack(Protocol):
    name: str
    true_effect: str

    def arms(self) -> dict[str, Arm]: ...

    def prompts(self) -> list[str]:
        """The user turns of one trial, in order (one for single-question packs)."""
        ...

    def prepare(self, workdir: Path) -> None:
        """Write the fixture repository into ``workdir`` (created, empty)."""
        ...

    def policy(self) -> Policy: ...

    def grade(self, answer: str) -> Grade: ...

    def describe(self) -> dict[str, Any]:
        """Pack parameters for the manifest."""
        ...
