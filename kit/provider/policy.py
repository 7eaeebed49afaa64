"""The scripted model's interface: what a policy sees of a request and what it answers.

The provider knows nothing of task packs; a pack injects a ``Policy``. The server normalises
each API's request (Responses, Chat Completions, Messages) into one ``Conversation`` and turns the
policy's ``Reply`` back into that API's wire format, so a policy is written once for all clients.
"""

from __future__ import annotations

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
