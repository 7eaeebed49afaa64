"""The scripted model's interface: what a policy sees of a request and what it answers.

The provider knows nothing of task packs; a pack injects a ``Policy``. The server normalises
each API's request (Responses, Chat Completions, Messages) into one ``Conversation`` and turns the
policy's ``Reply`` back into that API's wire format, so a policy is written once for all clients.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
# How a kit trial names itself inside its requests (docs/method.md#isolation): a nonce line at the system -> task
# boundary and a ``cache_bust_<nonce>`` tool. The scripted model keys its choices on the nonce because it is the one
# trial identity that reaches the provider through anything in between (the recording proxy forwards the request's
# bytes, not the kit's ``/t/<trial_id>`` URL prefix).
NONCE_LINE = "Trial nonce: {}"
CACHE_BUST_TOOL = "cache_bust_{}"
_TRIAL_NONCE = re.compile(r"(?:Trial nonce: |cache_bust_)([0-9a-f]{16})\b")
# The trial's dummy tool as a request offers it: bare (the SDK agents) or under its MCP server
# (``mcp__cachebust__cache_bust_<nonce>``: Claude Code's name, and Codex's namespace and function joined).
_DUMMY_TOOL = re.compile(r"(?:^|__)cache_bust_[0-9a-f]{16}$")
_DEFERRED_DUMMY = re.compile(r"\bmcp__\w+?__cache_bust_[0-9a-f]{16}\b")
TOOL_SEARCH = "ToolSearch"  # Claude Code's loader of deferred tools (its MCP tools, by default)


def trial_nonce(text: str) -> str | None:
    """The kit trial nonce named in ``text`` (a nonce line or a ``cache_bust_<nonce>`` tool name), if any."""
    found = _TRIAL_NONCE.search(text)
    return found.group(1) if found else None


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered in the request (function tools only; others keep their type as name)."""

    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    """A call the model makes; ``call_id`` may be empty and is then assigned by the server."""

    name: str
    arguments: dict
    call_id: str = ""


@dataclass(frozen=True)
class Message:
    """One conversation item in order: text of a role, an assistant's calls, or a tool result."""

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class Conversation:
    """A request as a policy sees it, whatever API it came through."""

    api: Literal["responses", "chat", "messages"]
    model: str
    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    trial_id: str | None = None
    seed: int = 0

    @property
    def cycle(self) -> int:
        """How many assistant responses precede this request (0 for the first)."""
        return sum(1 for m in self.messages if m.role == "assistant")

    def tool_names(self) -> set[str]:
        return {t.name for t in self.tools}

    def all_text(self) -> str:
        """System text and every message's text: where an arm's instruction can be found."""
        return "\n".join([self.system, *(m.text for m in self.messages)])

    def calls_by_id(self) -> dict[str, ToolCall]:
        return {c.call_id: c for m in self.messages for c in m.tool_calls}

    def results(self) -> list[tuple[ToolCall, Message]]:
        """Every tool result in order, paired with the call that asked for it."""
        calls = self.calls_by_id()
        return [(calls[m.tool_call_id], m) for m in self.messages if m.role == "tool" and m.tool_call_id in calls]

    def last_user_text(self) -> str:
        """The latest user prompt, without the reminder blocks some clients (Claude Code) prepend."""
        for m in reversed(self.messages):
            text = _REMINDER.sub("", m.text).strip() if m.role == "user" else ""
            if text:
                return text
        return ""

    def turn(self) -> int:
        """User turns so far (1 for the first prompt); tool results are not user turns."""
        return sum(1 for m in self.messages if m.role == "user" and m.text) or 1

    def rng(self, salt: str = "") -> random.Random:
        """Deterministic randomness for (seed, trial, cycle, salt): same request, same answer."""
        key = f"{self.seed}|{self.identity()}|{self.cycle}|{salt}"
        return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))

    @functools.cached_property
    def _identity(self) -> str:
        return self.nonce() or self.trial_id or self._fallback_id()

    def identity(self) -> str:
        """Which trial this request belongs to, for the scripted model's draws: the kit nonce the request carries,
        else the trial id the request came with (``/t/<trial_id>``), else a digest of its system prompt and first
        user turn. The nonce comes first so a trial is answered alike whether it reaches the provider directly or
        through the recording proxy, which forwards the body but not the URL prefix. Found once per request:
        the policy draws several times and the server keys the response ids on it too."""
        return self._identity

    def nonce(self) -> str | None:
        """The kit trial nonce in the system prompt, a tool name or a message (searched in that order, first hit;
        the nonce sits at the system -> task boundary, so the search rarely reads past the first turn)."""
        texts = (self.system, *(t.name for t in self.tools), *(m.text for m in self.messages))
        return next((n for n in map(trial_nonce, texts) if n), None)

    def _fallback_id(self) -> str:
        first = next((m.text for m in self.messages if m.role == "user"), "")
        return hashlib.sha256((self.system + first).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers: text, tool calls, or both; reasoning is hidden output."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning_tokens: int = 0
    fault: Literal["drop", "hang"] | None = None  # tests only: the server cuts or withholds this reply


class Policy(Protocol):
    """A scripted model. ``name`` is reported in a response header and the request log."""

    name: str

    def reply(self, conversation: Conversation) -> Reply: ...


class EchoPolicy:
    """Default policy: a short, sensible text answer with no tools, so any client completes."""

    name = "default"

    def reply(self, conversation: Conversation) -> Reply:
        prompt = conversation.last_user_text().strip().splitlines()
        first = prompt[0][:120] if prompt else "(empty prompt)"
        text = (
            "This is a simulated model (agent-ab-kit embedded provider), not a real LLM. "
            f"You asked: {json.dumps(first)}. No task policy was configured, so this answer is a placeholder."
        )
        return Reply(text=text)


class CallsDummyTool:
    """A pack's scripted model that first calls the trial's dummy tool (``task_options.call_dummy_tool``).

    Isolation's ``cache_bust_<nonce>`` tool says "Never call this tool."; models sometimes do, and the
    technique holds only if the call is answered ``{"success": true}`` and the trial goes on
    (docs/method.md#isolation). This wrapper makes that happen on purpose, so a test, or a user checking a
    setup, sees each backend answer it: the first reply of a conversation calls the tool found among the
    request's tools by name (any name ending ``cache_bust_<nonce>``); where Claude Code defers it behind
    ToolSearch, that reply loads it (``select:<name>``) and the next one calls it. Then the pack's own
    policy answers, seeing the conversation without those calls and their results, so it plays exactly as
    it would have (same cycles, same draws). A conversation whose request offers no such tool is the
    pack's alone.
    """

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = f"{inner.name}+call_dummy_tool"

    def reply(self, conversation: Conversation) -> Reply:
        offered = next((t.name for t in conversation.tools if _DUMMY_TOOL.search(t.name)), None)
        calls = [c for m in conversation.messages for c in m.tool_calls]
        if not any(_DUMMY_TOOL.search(c.name) for c in calls):
            if offered:
                return Reply(tool_calls=(ToolCall(offered, {}),))
            deferred = _DEFERRED_DUMMY.search(conversation.all_text())
            asked = {str(c.arguments.get("query")) for c in calls if c.name == TOOL_SEARCH}
            load = f"select:{deferred.group(0)}" if deferred else ""
            if deferred and TOOL_SEARCH in conversation.tool_names() and load not in asked:
                return Reply(tool_calls=(ToolCall(TOOL_SEARCH, {"query": load, "max_results": 1}),))
        return self.inner.reply(_without_dummy(conversation))


def _without_dummy(conversation: Conversation) -> Conversation:
    """The conversation without the dummy tool's calls, the ToolSearch calls that loaded it, and their results."""

    def ours(call: ToolCall) -> bool:
        query = str(call.arguments.get("query", "")) if call.name == TOOL_SEARCH else ""
        return bool(_DUMMY_TOOL.search(call.name) or _DEFERRED_DUMMY.fullmatch(query.removeprefix("select:")))

    dropped = {c.call_id for m in conversation.messages for c in m.tool_calls if ours(c)}
    if not dropped:
        return conversation
    kept = []
    for m in conversation.messages:
        if m.role == "tool" and m.tool_call_id in dropped:
            continue
        calls = tuple(c for c in m.tool_calls if c.call_id not in dropped)
        if m.role == "assistant" and m.tool_calls and not calls and not m.text:
            continue
        kept.append(dataclasses.replace(m, tool_calls=calls))
    return dataclasses.replace(conversation, messages=tuple(kept))
