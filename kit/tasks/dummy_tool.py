"""``task_options.call_dummy_tool``: any pack, its scripted model first calling the trial's dummy tool.

One option for every pack, handled here and not in each pack: the pack plays as it always does, its policy
wrapped in ``kit.provider.policy.CallsDummyTool`` (the first reply of a conversation calls the isolation's
``cache_bust_<nonce>`` tool, then the pack's own policy answers as if it had not). A test, or a user checking a
setup, sees each backend answer the call (``{"success": true}``, recorded in each trial's meta ``versions`` as
``cache_bust_tool.calls``); the manifest's pack facts say the option was on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.experiment.design import Arm, ParamError
from kit.jsontypes import PackFacts
from kit.provider.policy import CallsDummyTool, Policy
from kit.tasks.base import Grade, TaskPack

OPTION = "call_dummy_tool"


def wrap(pack: TaskPack, value: object) -> TaskPack:
    """``pack`` as ``task_options.call_dummy_tool`` asks: wrapped when true, itself when false."""
    if not isinstance(value, bool):
        raise ParamError(f"task_options.{OPTION}", f"got {value!r}", "true or false")
    return DummyToolPack(pack.name, pack) if value else pack


@dataclass
class DummyToolPack:
    """A pack whose scripted model calls the dummy tool first; everything else is the pack's own."""

    name: str
    pack: TaskPack

    @property
    def true_effect(self) -> str:
        return self.pack.true_effect

    def arms(self) -> dict[str, Arm]:
        return self.pack.arms()

    def prompts_for(self, run: int) -> list[str]:
        return self.pack.prompts_for(run)

    def grade_for(self, run: int, answer: str) -> Grade:
        return self.pack.grade_for(run, answer)

    def prepare(self, workdir: Path) -> None:
        self.pack.prepare(workdir)

    def policy(self) -> Policy:
        return CallsDummyTool(self.pack.policy())

    def grade(self, answer: str) -> Grade:
        return self.pack.grade(answer)

    def describe(self) -> PackFacts:
        return {**self.pack.describe(), OPTION: True}
