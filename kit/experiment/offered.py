"""What a trial's recorded requests show about the tools its client offered: whether the trial's dummy tool reached
the prompt, and which multi-agent tools were offered against the pinned configuration.

Why from the requests: what a CLI sends is decided inside the CLI, by its version and the model's catalog entry,
not by the flags the kit passes. Measured on Codex 0.169.0 with ``-m gpt-5.6-sol`` (catalog ``tool_mode:
code_mode_only``, ``multi_agent_version: v2``): the MCP server ``cachebust`` starts, but its tool is deferred
behind the cell runtime's tool search and never appears in a request, so ``cache_bust_<id>`` isolates nothing;
and the ``collaboration`` namespace (``spawn_agent``, …) is offered although ``features.multi_agent=false``
(``features.multi_agent_v2=false`` does not remove it either; ``agents.max_threads=0`` is refused). The
embedded provider and the recording proxy log each request's tool names (``tools``), so the run stage reads
what held from there and says it per trial and in the batch's warnings (docs/method.md#isolation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Codex's multi-agent tools: v1 offers them bare, v2 in the ``collaboration`` namespace (flattened by the
# provider's wire reader as ``collaboration__<function>``).
MULTI_AGENT_NAMESPACE = "collaboration__"
MULTI_AGENT_TOOLS = frozenset({"spawn_agent", "send_input", "wait_agent", "close_agent", "resume_agent"})


@dataclass(frozen=True)
class OfferedTools:
    """The tools a trial's requests offered: the first request's, and every request's together."""

    first: tuple[str, ...] | None  # None when no request was logged with its tools
    every: frozenset[str]

    def dummy_tool_reached(self, dummy: str | None) -> bool | None:
        """Whether ``dummy`` (``cache_bust_<id>``) was among the first request's tools, bare or under an MCP
        server (``mcp__cachebust__cache_bust_<id>``); None when there is nothing to check."""
        if not dummy or self.first is None:
            return None
        return any(name == dummy or name.endswith("__" + dummy) for name in self.first)

    def missing(self, wanted: Iterable[str]) -> list[str]:
        """Of the tools ``wanted`` (an arm's, e.g. ``explore``), those no request offered, bare or under a server."""
        return [t for t in wanted if not any(n == t or n.endswith("__" + t) for n in self.every)]

    def multi_agent(self) -> list[str]:
        """The multi-agent tools offered, by the name the model sees (``spawn_agent``)."""
        names = {n.removeprefix(MULTI_AGENT_NAMESPACE) for n in self.every if n.startswith(MULTI_AGENT_NAMESPACE)}
        names |= {n for n in self.every if n in MULTI_AGENT_TOOLS}
        return sorted(names)


def offered_tools(records: Sequence[Mapping[str, Any]]) -> OfferedTools:
    """The tools of a trial's provider-log records (in log order); records without ``tools`` are skipped."""
    lists = [tuple(r["tools"]) for r in records if isinstance(r.get("tools"), list)]
    return OfferedTools(lists[0] if lists else None, frozenset(n for names in lists for n in names))


@dataclass(frozen=True)
class Expected:
    """What the kit set for a trial, to check against what its requests offered."""

    dummy: str | None  # the trial's cache_bust_<id>, if served
    claimed: bool  # the backend says it put the dummy tool among the tools (not deferred)
    arm_tools: tuple[str, ...]  # the arm's own tools (Arm.tools)
    pins_multi_agent_off: bool  # the command line pinned features.multi_agent=false


def trial_facts(offered: OfferedTools, expected: Expected) -> dict[str, str]:
    """What goes into a trial's ``versions`` beside what its backend applied (keys ``isolation.cache_bust_tool``,
    ``arm_tools_missing``, ``multi_agent_tools``): the dummy tool its backend claimed to put among the tools but no
    request offered, the arm's tools no request offered, and the multi-agent tools offered against the pin. A
    backend that already says it deferred the dummy tool (Claude Code names it after the system prompt, behind
    ToolSearch) is taken at its word."""
    out: dict[str, str] = {}
    dummy = expected.dummy
    if offered.first is None:
        return out
    missing = offered.missing(expected.arm_tools)
    if missing:
        out["arm_tools_missing"] = ", ".join(missing)
    if expected.claimed and offered.dummy_tool_reached(dummy) is False:
        out["isolation.cache_bust_tool"] = (
            f"{NOT_IN_PROMPT}: {dummy} was served, but the client kept it out of every request's tools "
            "(deferred), so it isolated nothing"
        )
    agents = offered.multi_agent()
    if agents and expected.pins_multi_agent_off:
        out["multi_agent_tools"] = ", ".join(agents) + PINNED_OFF
    return out


NOT_IN_PROMPT = "NOT IN THE PROMPT"
PINNED_OFF = " offered despite features.multi_agent=false"


def batch_warnings(trials: Iterable[tuple[str, str, Mapping[str, str], bool]]) -> list[str]:
    """The batch's warnings from its trials' facts: ``(model, arm, versions, served the dummy tool)`` per trial."""
    deferred: dict[str, int] = {}
    served: dict[str, int] = {}
    held: dict[str, set[str]] = {}
    agents: dict[str, set[str]] = {}
    absent: dict[tuple[str, str, str], int] = {}
    for model, arm, versions, serves_dummy in trials:
        served[model] = served.get(model, 0) + int(serves_dummy)
        if versions.get("isolation.cache_bust_tool", "").startswith(NOT_IN_PROMPT):
            deferred[model] = deferred.get(model, 0) + 1
            held.setdefault(model, set()).update(versions.get("isolation_held", "none").split(","))
        if "multi_agent_tools" in versions:
            agents.setdefault(model, set()).update(versions["multi_agent_tools"].removesuffix(PINNED_OFF).split(", "))
        for tool in filter(None, versions.get("arm_tools_missing", "").split(", ")):
            absent[(arm, tool, model)] = absent.get((arm, tool, model), 0) + 1
    out = [
        f"arm tools: {tool} reached no request of arm {arm} on {model} in {n} trial(s): the client deferred or "
        "dropped it, so the arm ran without the tool it is about and its comparison does not measure that tool"
        for (arm, tool, model), n in sorted(absent.items())
    ]
    out += [
        f"isolation: on {model} the cache_bust_<id> tool did not reach the prompt in {n} of {served[model]} "
        f"trial(s) that served it: the client deferred it, so those trials are isolated by "
        f"{' and '.join(sorted(held[model] - {'none'})) or 'nothing'} alone, and the head of their first prompt is "
        "shared across trials (docs/method.md#isolation)"
        for model, n in sorted(deferred.items())
    ]
    out += [
        f"multi-agent tools: Codex offered {', '.join(sorted(names))} on {model} although the kit pins "
        "features.multi_agent=false (its model catalog sets multi-agent v2, which no setting turns off): the model "
        "could delegate to sub-agents (docs/method.md#isolation)"
        for model, names in sorted(agents.items())
    ]
    return out
