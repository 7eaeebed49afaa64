"""Codex CLI rollout files (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``).

A response's usage comes from its ``token_usage_record`` line (newer CLIs: one per response, keyed
by ``response_id``) or its ``event_msg``/``token_count`` event (``last_token_usage``, or the difference
of the cumulative ``total_token_usage``). Most responses have both, written one after the other with
the same usage: the two are paired and the response counted once. A response with only one of them
(a rollout continued by another CLI version, a record the CLI did not write) keeps it, so every
response is a row once; where a file mixes the two, ``attrs["crosscheck"]`` says how many came from
each. Three traps:

- Codex re-emits byte-identical ``token_count`` events (46% of events in one public corpus): an event
  whose cumulative total equals the previous one is collapsed.
- A forked or spawned (subagent) rollout first replays its parent's history, token events included.
  The replay ends at the first turn whose id (a UUIDv7) is not older than the fork's own id; replayed
  cumulative totals seen again later are skipped as well, and records of another thread never count.
- A ``token_count`` without usage (``info: null``) also announces rate limits at turn start; it stands
  for a response (usage unknown) only when model output came since the last counted event.

``rate_limits`` used percentages (first and last per window) go to ``attrs["rate_limits"]``, and each
response keeps those of its own ``token_count`` (``quota_*_used``); the sum of rows is cross-checked
against the last cumulative total in ``attrs["crosscheck"]``.

Per response, from the items the model wrote before its usage line: ``output_chars`` (assistant text,
reasoning summary and content text, function-call arguments and custom-tool input as sent; encrypted
reasoning is not shown, so not counted; NA for a call whose input the rollout does not give as sent)
and the Code Mode counts (docs/method.md#transcripts): ``exec`` cells, the ``tools.*(`` calls written
in them, cells with two or more, cells using ``Promise.all``, and plain function calls. A command that
fails inside a cell is reported by an ``item_completed`` event (``"status": "failed"``), not in the
cell's output: that event makes the cell's tool result an error.
"""

from __future__ import annotations

import operator
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import orjson

from kit.framing import block_framing, block_tokens, result_block
from kit.jsontypes import Row
from kit.transcripts import _usage
from kit.transcripts._base import (
    COMPACTION,
    MAIN,
    Issues,
    Parsed,
    Position,
    Reader,
    Resume,
    Unused,
    as_dict,
    file_summary,
    json_lines,
    records,
    text,
)
from kit.transcripts._tools import exit_failed, result_row, text_of

FORMAT = "codex_rollout"
BACKEND = "codex"
# The line types a rollout wraps in a ``payload`` envelope, as format detection looks for them
ENVELOPED = {"session_meta", "response_item", "event_msg", "turn_context", "token_usage_record", "compacted"}
KNOWN = {"session_meta", "response_item", "event_msg", "turn_context", "token_usage_record", "compacted", "world_state"}
CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call"}
RESULTS = {"function_call_output", "custom_tool_call_output"}
CHECKED = {"input_tokens": "input_tokens", "cache_read_tokens": "cached_input_tokens", "output_tokens": "output_tokens"}
# The keys of an item as the CLI sends it back. Not ``internal_chat_message_metadata_passthrough`` (a call's or
# result's turn and time), which the rollout keeps and the request leaves out (seen on the wire by the embedded
# provider: 129 characters and 47-49 tokens a result; docs/method.md#calibration).
FRAMING_KEYS = ("type", "id", "status", "role", "phase", "call_id", "name", "namespace")
FRAMED = operator.attrgetter(*FRAMING_KEYS)  # their values at once (a call per key cost more than the rest)
CALL_INPUT = {"function_call": "arguments", "custom_tool_call": "input"}  # the key holding what the model wrote
WRITTEN_KEYS = ("arguments", "input", "summary", "content", "encrypted_content")  # raw in ``_Payload``
OPAQUE_CALLS = {"local_shell_call", "web_search_call", "tool_search_call"}  # input not given as the model sent it
TOOL_CALL = re.compile(r"\btools\.[A-Za-z_]\w*\s*\(")  # a tool called from a Code Mode cell
PROMISE_ALL = re.compile(r"\bPromise\.all(?:Settled)?\b")


class _Payload(msgspec.Struct, gc=False):
    """The payload fields the reader uses, of every line type (messages, instructions, reasoning are only checked)."""

    type: Any = None
    id: Any = None
    cli_version: Any = None
    timestamp: Any = None
    forked_from_id: Any = None
    source: Any = None
    thread_source: Any = None
    turn_id: Any = None
    model: Any = None
    role: Any = None
    phase: Any = None  # an assistant message's phase (newer CLIs): sent with it
    call_id: Any = None
    status: Any = None
    name: Any = None
    namespace: Any = None  # an MCP tool's server (``mcp__kit``): the call is named ``<namespace>__<name>``
    output: msgspec.Raw = msgspec.Raw(b"null")  # a tool's output: decoded only when tool results are asked for
    arguments: msgspec.Raw = msgspec.Raw(b"null")  # a function call's JSON arguments (a string), as sent
    input: msgspec.Raw = msgspec.Raw(b"null")  # a custom tool call's input (a string: a Code Mode cell's code)
    content: msgspec.Raw = msgspec.Raw(b"null")  # message parts, reasoning text: decoded for the model's own items
    summary: msgspec.Raw = msgspec.Raw(b"null")  # reasoning summary parts
    item: msgspec.Raw = msgspec.Raw(b"null")  # an ``item_completed`` event's item: decoded for failed commands
    info: Any = None
    rate_limits: Any = None
    thread_id: Any = None
    response_id: Any = None
    usage: Any = None
    compaction_response_id: Any = None  # a ``compacted`` line's: the response that wrote its summary
    encrypted_content: msgspec.Raw = msgspec.Raw(b"null")  # a reasoning item's opaque text: only framed

    def _known(self) -> dict[str, object]:
        """The keys this reader knows of a call, result or message, as the CLI sends them (its framing)."""
        return {k: v for k, v in zip(FRAMING_KEYS, FRAMED(self), strict=True) if v is not None}

    def framing(self, key: str | None) -> int:
        """Characters of this call besides what its ``key`` holds (``kit.framing.block_framing``; None: the item has no
        such key, as a ``local_shell_call``)."""
        return block_framing(self._known() | ({key: ""} if key else {}))

    def item_framing(self, texts: dict[str, tuple[msgspec.Raw, int]]) -> int:
        """Characters of a reasoning or message item besides its text: its known keys, each of ``texts`` (key:
        its raw JSON and the characters of text in it) less that text, and an opaque ``encrypted_content``
        emptied (its tokens cannot be told from the rollout)."""
        known = self._known() | ({"encrypted_content": ""} if self.encrypted_content != NULL else {})
        return block_framing(known) + sum(len(key) + 4 + len(raw) - chars for key, (raw, chars) in texts.items())

    def tokens(self) -> int:
        """This item's ``o200k_base`` tokens as a client sends it back, whole: its known keys and what the model
        wrote as written, an opaque ``encrypted_content`` emptied (``kit.framing.block_tokens``)."""
        shown: dict[str, object] = self._known()
        for key in WRITTEN_KEYS:
            if (raw := getattr(self, key)) != NULL:
                shown[key] = orjson.Fragment(bytes(raw))
        return block_tokens(shown)

    def result_block(self, output: object, text: str) -> tuple[int, int]:
        """This result's framing characters and ``o200k_base`` tokens (``kit.framing.result_block``)."""
        return result_block(self._known() | {"output": output}, "output", text)


class _Line(msgspec.Struct, gc=False):
    type: Any = None
    timestamp: Any = None
    payload: _Payload | None = None


class _Part(msgspec.Struct, gc=False):
    """A part of a message's content or of a reasoning summary: only its text is counted."""

    text: Any = None


class _Item(msgspec.Struct, gc=False):
    """What an ``item_completed`` event says about a command: whether it failed."""

    type: Any = None
    id: Any = None
    status: Any = None
    exit_code: Any = None


DECODER = msgspec.json.Decoder(_Line)
# A tool's output (most of a rollout's bytes): read past undecoded when tool results are not asked for
REQUESTS_ONLY = Unused.lines('"response_item","payload":\\{"type":"(?:function_call_output|custom_tool_call_output)"')
PARTS = msgspec.json.Decoder(list[_Part])
NULL = msgspec.Raw(b"null")
ITEM = msgspec.json.Decoder(_Item)
STRING = msgspec.json.Decoder(str | None)
EMPTY = _Payload()


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    out = Parsed()
    for path in paths:
        out.extend(scan(start(path, issues, tools)).finish())
    return out


def start(path: Path, issues: Issues, tools: bool, crc: bool = False) -> _File:
    """The state before a file's first line; ``crc``: keep a CRC of the bytes read (``Position``)."""
    return _File(path, issues, tools, at=Position(crc=0 if crc else None))


def scan(state: _File) -> _File:
    """Read the file's lines after ``state.at`` into ``state`` and return it. The parse cache keeps the
    state (``STATE``, as MessagePack) with the file's rows, so that a grown rollout has only its new lines read: a later
    line can still pair with an earlier response's usage, re-emit its event or answer its call."""
    line, unused = state.line, None if state.want_tools else REQUESTS_ONLY
    for number, record in records(state.path, state.issues, DECODER, state.at, unused):
        line(number, record)
    return state


def _uuid7_ms(value: object) -> int | None:
    """Milliseconds since the epoch encoded in a UUIDv7 (Codex's session and turn ids), else None."""
    try:
        parsed = uuid.UUID(str(value))
    except ValueError:
        return None
    return parsed.int >> 80 if parsed.version == 7 else None


def _iso_ms(value: object) -> int | None:
    try:
        return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _parent(meta: _Payload) -> str | None:
    """The parent thread of a forked or spawned rollout, or None for a root session."""
    spawn = as_dict(as_dict(as_dict(meta.source).get("subagent")).get("thread_spawn"))
    parent = meta.forked_from_id or spawn.get("parent_thread_id")
    if parent is None and meta.thread_source == "subagent":
        return "?"
    return parent


def _identity(info: dict) -> bytes:
    total = info.get("total_token_usage")
    return orjson.dumps(total if isinstance(total, dict) else info, option=orjson.OPT_SORT_KEYS)


def _minus(total: dict, previous: dict | None) -> dict:
    """``total - previous`` field by field (counts only; a malformed field is left for ``_usage`` to report)."""
    before = {k: v for k, v in as_dict(previous).items() if isinstance(v, int)}
    return {k: v - before.get(k, 0) if isinstance(v, int) else v for k, v in total.items()}


def _tool_output(output: object) -> tuple[str, bool]:
    """The text and error status of a call's output (text, content list, or an object)."""
    if isinstance(output, str):
        legacy = None
        if output.startswith("{"):
            try:
                legacy = orjson.loads(output)
            except orjson.JSONDecodeError:
                legacy = None
        if isinstance(legacy, dict) and isinstance(legacy.get("metadata"), dict):
            return output, legacy["metadata"].get("exit_code") not in (0, None)
        return output, exit_failed(output)
    if isinstance(output, dict):
        return text_of(output.get("content", output.get("body"))), output.get("success") is False
    return text_of(output), False


def _written(kind: str | None, item: _Payload) -> bool:
    """Whether the item is the model's own (a call, reasoning, an assistant message): part of its response."""
    return kind in CALLS or kind == "reasoning" or (kind == "message" and item.role == "assistant")


def _plus(total: int | None, more: int | None) -> int | None:
    """A running count that becomes unknown (None) once any part of it is."""
    return None if total is None or more is None else total + more


@dataclass(slots=True)
class _Output:
    """What the model wrote in one response: its items between the previous usage line and its own."""

    wrote: bool = False  # any model item: a ``token_count`` without usage then still stands for a response
    tool_calls: int = 0
    chars: int | None = 0
    framing: int = 0  # characters of its items besides what the model wrote (``_Payload.framing``)
    o200k: int = 0  # its items' ``o200k_base`` tokens (``_Payload.tokens``), counted with the tool results
    exec_cells: int = 0
    exec_tool_calls: int | None = 0
    exec_multi_call_cells: int | None = 0
    exec_promise_all_cells: int | None = 0
    function_calls: int = 0

    def cell(self, code: str | None) -> None:
        """A Code Mode ``exec`` cell: its ``tools.*(`` calls and ``Promise.all``; unknown if its code is."""
        self.exec_cells += 1
        calls = None if code is None else len(TOOL_CALL.findall(code))
        self.exec_tool_calls = _plus(self.exec_tool_calls, calls)
        self.exec_multi_call_cells = _plus(self.exec_multi_call_cells, None if calls is None else int(calls >= 2))
        promise = None if code is None else int(PROMISE_ALL.search(code) is not None)
        self.exec_promise_all_cells = _plus(self.exec_promise_all_cells, promise)

    def columns(self, counted: bool) -> Row:
        """The response's output columns; ``counted``: its items' tokens were counted (with the tool results)."""
        return {
            "tool_calls": self.tool_calls,
            "output_chars": self.chars,
            "output_framing_chars": self.framing,
            "output_o200k_tokens": self.o200k if counted else None,
            "exec_cells": self.exec_cells,
            "exec_tool_calls": self.exec_tool_calls,
            "exec_multi_call_cells": self.exec_multi_call_cells,
            "exec_promise_all_cells": self.exec_promise_all_cells,
            "function_calls": self.function_calls,
        }


RECORD, COUNT = "token_usage_record", "token_count"


@dataclass(slots=True)
class _Response:
    """A response as its first usage line found it; mapped to a row at the end."""

    number: int
    timestamp: object
    usage: object
    output: _Output
    turn: int | None
    model: object  # as the rollout gives it (the cache decodes the state by these types: ``STATE``)
    source: str  # RECORD or COUNT: the line the usage is taken from
    quota: dict[str, float]  # used percent per window, from the response's ``token_count``
    key: tuple | None  # ``_key(usage)``
    paired: bool = False  # the other kind of usage line of the same response was seen too
    response_id: object = None  # as its ``token_usage_record`` names it (None where only a ``token_count`` told)
    side_request: str | None = None  # COMPACTION: the response a ``compacted`` line names as its summary


def _key(usage: object) -> tuple | None:
    """What a record and a ``token_count`` of the same response share: their counts (CHECKED)."""
    if type(usage) is not dict:
        return None
    get = usage.get
    return get("input_tokens"), get("cached_input_tokens"), get("output_tokens")


@dataclass
class _File:
    """A rollout's reading state: what its lines so far said, and where the next line starts (``at``).

    The parse cache keeps it as MessagePack and decodes it by these types (``STATE``, no pickle), so a field
    holding a value as the rollout gives it (any JSON) is typed ``object``: a narrower type would refuse it.
    """

    path: Path
    issues: Issues
    want_tools: bool
    at: Position = field(default_factory=Position)
    session_id: object = None
    cli_version: object = None
    fork_ms: int | None = None
    replaying: bool = False
    model: object = None
    turn_ids: list[object] = field(default_factory=list)
    responses: list[_Response] = field(default_factory=list)
    current: _Output = field(default_factory=_Output)
    response_ids: set[str] = field(default_factory=set)
    prev_ident: bytes | None = None
    prev_total: dict | None = None
    replay_idents: set[bytes] = field(default_factory=set)
    baseline: dict | None = None
    last_total: tuple[int, dict] | None = None
    calls: dict[str, tuple[object, int]] = field(default_factory=dict)  # call id -> (its tool's name as given, cycle)
    open_calls: set[str] = field(default_factory=set)  # calls whose output has not come yet
    open_cells: set[str] = field(default_factory=set)  # the Code Mode cells among them
    failed: set[str] = field(default_factory=set)  # open calls a failed command was reported for
    tools: list[dict] = field(default_factory=list)
    rates: dict[str, dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    collapsed: int = 0
    replayed: int = 0

    def line(self, number: int, line: _Line) -> None:
        kind, payload = line.type, line.payload or EMPTY
        if type(kind) is not str or kind not in KNOWN:
            self.issues.unknown_type(self.path, number, text(kind))
        elif kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context" or (kind == "event_msg" and payload.type == "task_started"):
            self._turn(kind, payload)
        if self.replaying:
            if kind == "event_msg" and payload.type == "token_count" and isinstance(payload.info, dict):
                self._replayed(payload.info)
            return
        if kind == "response_item":
            self._item(number, payload)
        elif kind == "token_usage_record":
            self._record(number, line, payload)
        elif kind == "event_msg" and payload.type == "token_count":
            self._token_count(number, line, payload)
        elif kind == "event_msg" and payload.type == "item_completed" and self.want_tools:
            self._completed(number, payload.item)
        elif kind == "compacted":
            self._event(number, line, kind)
            self._compaction(payload.compaction_response_id)
        elif kind == "event_msg" and payload.type in ("context_compacted", "turn_aborted"):
            self._event(number, line, payload.type)

    def _cycle(self) -> int:
        """The response being generated now: responses completed so far."""
        return len(self.responses)

    def _meta(self, meta: _Payload) -> None:
        if self.session_id is not None:
            return  # a replayed parent's meta: the first one is this file's own
        self.session_id, self.cli_version = meta.id, meta.cli_version
        if _parent(meta) is not None:
            self.fork_ms = _uuid7_ms(meta.id) or _iso_ms(meta.timestamp)
            self.replaying = True

    def _turn(self, kind: str, payload: _Payload) -> None:
        turn_id = payload.turn_id
        if self.replaying:
            started = _uuid7_ms(turn_id)
            fork = self.fork_ms
            own = started >= fork if started is not None and fork is not None else kind == "turn_context"
            if not own:
                return
            self.replaying = False
        if turn_id is not None and turn_id not in self.turn_ids:
            self.turn_ids.append(turn_id)
        if kind == "turn_context":
            self.model = payload.model or self.model

    def _replayed(self, info: dict) -> None:
        ident = _identity(info)
        self.replay_idents.add(ident)
        self.replayed += 1
        self.prev_ident, self.prev_total = ident, info.get("total_token_usage")
        self.baseline = self.prev_total

    def _decoded(self, number: int, raw: msgspec.Raw, decoder: msgspec.json.Decoder, what: str) -> Any:
        """``raw`` decoded by ``decoder``; None, reported, for a value of another shape or invalid text
        (a lone surrogate escape, which the line's decoding let through unread)."""
        try:
            return decoder.decode(raw)
        except msgspec.DecodeError as exc:
            self.issues.add(self.path, number, f"unreadable {what} ({exc}); its characters are unknown")
            return None

    def _text_chars(self, number: int, raw: msgspec.Raw, what: str) -> int | None:
        """Characters of the text parts in ``raw`` (a list of ``{"text": ...}``; null is none)."""
        if raw == NULL:
            return 0
        parts = self._decoded(number, raw, PARTS, what)
        return None if parts is None else sum(len(p.text) for p in parts if isinstance(p.text, str))

    def _item(self, number: int, item: _Payload) -> None:
        kind, out = text(item.type), self.current
        if self.want_tools and _written(kind, item):  # counted with the tool results only: tokenizing costs
            out.o200k += item.tokens()
        if kind in CALLS:
            name = f"{item.namespace}__{item.name}" if isinstance(item.namespace, str) else item.name
            call_id = str(item.call_id)
            framed = item.framing(CALL_INPUT.get(kind))
            self.calls[call_id] = (name or kind, self._cycle())
            out.wrote, out.tool_calls, out.framing = True, out.tool_calls + 1, out.framing + framed
            if kind == "function_call":
                out.function_calls += 1
                arguments = self._decoded(number, item.arguments, STRING, "function call arguments")
                out.chars = _plus(out.chars, None if arguments is None else len(arguments))
            elif kind == "custom_tool_call":
                code = self._decoded(number, item.input, STRING, "custom tool call input")
                out.chars = _plus(out.chars, None if code is None else len(code))
                if item.name == "exec" and item.namespace is None:
                    out.cell(code)
                    if self.want_tools:
                        self.open_cells.add(call_id)
            else:
                out.chars = None  # OPAQUE_CALLS: the rollout keeps a parsed action, not the text sent
            if self.want_tools:
                self.open_calls.add(call_id)
        elif kind == "reasoning":
            out.wrote = True
            summary = self._text_chars(number, item.summary, "reasoning summary")
            out.chars = _plus(out.chars, _plus(summary, self._text_chars(number, item.content, "reasoning content")))
            out.framing += item.item_framing({"summary": (item.summary, summary or 0), "content": (item.content, 0)})
        elif kind == "message" and item.role == "assistant":
            out.wrote = True
            chars = self._text_chars(number, item.content, "assistant message content")
            out.chars = _plus(out.chars, chars)
            out.framing += item.item_framing({"content": (item.content, chars or 0)})
        elif kind in RESULTS and self.want_tools:
            call_id = str(item.call_id)
            name, cycle = self.calls.get(call_id, (None, self._cycle() - 1))
            failed = call_id in self.failed
            for pending in (self.open_calls, self.open_cells, self.failed):
                pending.discard(call_id)
            try:
                output = msgspec.json.decode(item.output)
            except msgspec.DecodeError as exc:  # a lone surrogate escape, which the line's decoding let through
                self.issues.add(self.path, number, f"invalid JSON in the tool output ({exc}); tool result skipped")
                return
            shown, is_error = _tool_output(output)
            sizes = item.result_block(output, shown)
            self.tools.append(
                result_row(cycle + 1, name, len(shown), is_error or failed, block=sizes, path=str(self.path))
            )

    def _completed(self, number: int, raw: msgspec.Raw) -> None:
        """An ``item_completed`` event: a failed command marks its call, or, run inside a Code Mode cell
        (its id is not a call's), the cells still open (one, unless the model ran cells in parallel)."""
        try:
            item = ITEM.decode(raw)
        except msgspec.DecodeError as exc:
            self.issues.add(self.path, number, f"item_completed without an item object ({exc}); event ignored")
            return
        if item.status == "failed" or item.exit_code not in (0, None):
            call_id = str(item.id)
            self.failed |= {call_id} if call_id in self.open_calls else self.open_cells

    def _usage_line(
        self, number: int, line: _Line, usage: object, source: str, quota: dict[str, float], response_id: object = None
    ) -> None:
        """A response's usage line: the other line of the response just read (same counts), or a new response.

        Codex writes a response's ``token_usage_record`` and its ``token_count`` one after the other, so
        only the last response can be the one this line completes.
        """
        last, key = self.responses[-1] if self.responses else None, _key(usage)
        if last is not None and not last.paired and last.source != source and key is not None and key == last.key:
            last.paired = True
            last.quota = quota or last.quota
            last.response_id = last.response_id or response_id
            return
        turn = len(self.turn_ids) or None
        found = _Response(number, line.timestamp, usage, self.current, turn, self.model, source, quota, key)
        found.response_id = response_id
        self.responses.append(found)
        self.current = _Output()

    def _row(self, cycle: int, resp: _Response) -> dict:
        try:
            canonical = _usage.codex(resp.usage)
        except _usage.UsageError as exc:
            self.issues.add(self.path, resp.number, f"{exc}; usage of this response unknown")
            canonical = _usage.unknown()
        return {
            "cycle": cycle,
            "turn": resp.turn,
            "backend": BACKEND,
            "model": resp.model,
            "source_format": FORMAT,
            "source_path": str(self.path),
            "source_line": resp.number,
            **canonical,
            **resp.output.columns(self.want_tools),
            "quota_primary_used": resp.quota.get("primary"),
            "quota_secondary_used": resp.quota.get("secondary"),
            "side_request": resp.side_request,
            "started_at": resp.timestamp,
        }

    def _record(self, number: int, line: _Line, record: _Payload) -> None:
        thread, response_id = record.thread_id, text(record.response_id)
        if None not in (thread, self.session_id) and thread != self.session_id:
            self.replayed += 1
            return
        if response_id is not None:
            if response_id in self.response_ids:
                self.collapsed += 1
                return
            self.response_ids.add(response_id)
        self._usage_line(number, line, record.usage, RECORD, {}, response_id)

    def _token_count(self, number: int, line: _Line, payload: _Payload) -> None:
        quota = self._rates(payload.rate_limits)
        info = payload.info
        if not isinstance(info, dict):
            if self.current.wrote:
                self._usage_line(number, line, None, COUNT, quota)
            return
        ident = _identity(info)
        if ident == self.prev_ident:
            self.collapsed += 1
            return
        if ident in self.replay_idents:
            self.replayed += 1
            return
        total, last = info.get("total_token_usage"), info.get("last_token_usage")
        usage = last if isinstance(last, dict) else _minus(total, self.prev_total) if isinstance(total, dict) else None
        self._usage_line(number, line, usage, COUNT, quota)
        self.prev_ident, self.prev_total = ident, total if isinstance(total, dict) else self.prev_total
        if isinstance(total, dict):
            self.last_total = (number, total)

    def _rates(self, limits: object) -> dict[str, float]:
        """Record each window's used percent (first and last of the file); return this event's, per window.
        (A decoded number is exactly an int or a float: a bool is neither.)"""
        seen: dict[str, float] = {}
        if type(limits) is not dict:
            return seen
        rates = self.rates
        for window, value in limits.items():
            used = value.get("used_percent") if type(value) is dict else None
            if type(used) is int or type(used) is float:
                if (entry := rates.get(window)) is None:
                    entry = rates[window] = {"first": used, "window_minutes": value.get("window_minutes")}
                entry["last"] = seen[window] = used
        return seen

    def _compaction(self, response_id: object) -> None:
        """Mark the response a ``compacted`` line names (``compaction_response_id``, CLI 0.169.0) as the compaction's
        summary request: Codex compacts with a request of its own (measured against the embedded provider: no tools,
        its prompt "You are performing a CONTEXT CHECKPOINT COMPACTION"), which the rollout records like any
        response. A line naming none (older CLIs), or a response the rollout lacks, marks nothing; the parse stage
        then says the compaction's request is not seen (``kit.transcripts.sources.unseen_compactions``)."""
        if response_id is None:
            return
        for resp in reversed(self.responses):
            if resp.response_id == response_id:
                resp.side_request = COMPACTION
                return

    def _event(self, number: int, line: _Line, kind: str) -> None:
        self.events.append(
            {
                "source_path": str(self.path),
                "source_line": number,
                "cycle": self._cycle(),
                "kind": kind,
                "timestamp": line.timestamp,
                "detail": {},
            }
        )

    def _crosscheck(self, rows: list[dict], recorded: int) -> list[dict]:
        checks = []
        if 0 < recorded < len(rows):
            checks.append(self._check(0, "responses", len(rows), recorded, self._mix_note(recorded, len(rows))))
        if self.last_total is None:
            return checks
        number, total = self.last_total
        for column, key in CHECKED.items():
            values = [r[column] for r in rows]
            rows_sum = sum(values) if values and None not in values else None
            value, base = total.get(key), as_dict(self.baseline).get(key, 0)
            reported = value - base if isinstance(value, int) and isinstance(base, int) else None
            agree = rows_sum is not None and rows_sum == reported
            note = "" if agree else "sum of responses differs from the last cumulative total_token_usage"
            checks.append(self._check(number, column, rows_sum, reported, note, agree))
        return checks

    @staticmethod
    def _mix_note(recorded: int, rows: int) -> str:
        return (
            f"{recorded} responses from token_usage_record lines, {rows - recorded} known only from token_count "
            "events (no usage record written for them); each response counted once"
        )

    def _check(
        self, number: int, column: str, rows_sum: int | None, reported: int | None, note: str, agree: bool = False
    ) -> dict:
        return {
            "source_path": str(self.path),
            "source_line": number,
            "turn": None,
            "field": column,
            "rows_sum": rows_sum,
            "reported": reported,
            "agree": agree,
            "note": note,
        }

    def finish(self) -> Parsed:
        if self.replaying:
            self.issues.add(self.path, 0, "fork/subagent rollout whose replayed parent history never ended; no rows")
        rows = [self._row(cycle, resp) for cycle, resp in enumerate(self.responses)]
        recorded = sum(r.source == RECORD or r.paired for r in self.responses)
        out = Parsed(rows=rows, tools=self.tools)
        out.attrs["events"] = self.events
        out.attrs["crosscheck"] = self._crosscheck(rows, recorded)
        out.attrs["rate_limits"] = [
            {"source_path": str(self.path), "limit": window, **entry} for window, entry in self.rates.items()
        ]
        usage_from = RECORD if recorded == len(rows) and rows else COUNT if not recorded else "mixed"
        out.attrs["files"].append(
            file_summary(
                self.path,
                FORMAT,
                rows,
                cli_version=self.cli_version,
                usage_from=usage_from,
                from_records=recorded,
                from_token_count_only=len(rows) - recorded,
                collapsed_reemits=self.collapsed,
                skipped_replay=self.replayed,
            )
        )
        return out


STATE = _File  # the type the parse cache decodes a kept state into (``kit.transcripts.cache``)


def _finish(state: _File) -> tuple[Parsed, None]:
    """A file read to its end (``Resume.finish``): a rollout's rows need nothing of the other files."""
    return state.finish(), None


def judge(line: dict) -> bool:
    """A rollout line: one of its line types in a ``payload`` envelope."""
    return text(line.get("type")) in ENVELOPED and "payload" in line


def file_role(path: Path) -> str:
    """Whose window a rollout's responses fill, as its ``session_meta`` says (``source.subagent``: ``compact``,
    ``review``, a ``thread_spawn``; or ``thread_source: subagent``). A fork of the main thread
    (``forked_from_id``) continues the main conversation."""
    for _, line in json_lines(path, Issues()):  # problems are the reader's to report
        payload = as_dict(line.get("payload"))
        if line.get("type") != "session_meta":
            break
        subagent = as_dict(payload.get("source")).get("subagent")
        if subagent == "compact":
            return COMPACTION
        return "subagent" if subagent is not None or payload.get("thread_source") == "subagent" else MAIN
    return MAIN


READER = Reader(FORMAT, judge, read, role=file_role, resume=Resume(_File, start, scan, _finish))
