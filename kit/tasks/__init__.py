"""Task packs: fixture, prompts, arms, grader and scripted policy of one experiment each."""

from __future__ import annotations

from typing import Any

from kit.experiment.design import ParamError
from kit.tasks import dummy_tool
from kit.tasks.base import Grade, TaskPack
from kit.tasks.batch_read import BatchReadPack
from kit.tasks.occupancy import OccupancyPack
from kit.tasks.session_chain import SessionChainPack
from kit.tasks.terse import TersePack

PACKS: dict[str, type[BatchReadPack | OccupancyPack | SessionChainPack | TersePack]] = {
    "batch-read": BatchReadPack,
    "occupancy": OccupancyPack,
    "session-chain": SessionChainPack,
    "terse": TersePack,
}

__all__ = ["PACKS", "Grade", "TaskPack", "get", "names"]


def names() -> list[str]:
    return sorted(PACKS)


def get(name: str, **options: Any) -> TaskPack:
    """The pack ``name`` configured with ``options`` (its documented knobs, e.g. preset, p_batch)."""
    if name not in PACKS:
        raise ParamError("task", f"unknown task {name!r}", names())
    cls = PACKS[name]
    known = set(cls.__dataclass_fields__) - {"name"} | {dummy_tool.OPTION}  # the last: every pack's
    unknown = set(options) - known
    if unknown:
        raise ParamError("task_options", f"unknown options {sorted(unknown)} for task {name!r}", sorted(known))
    call_dummy = options.pop(dummy_tool.OPTION, False)
    return dummy_tool.wrap(cls(**options), call_dummy)
