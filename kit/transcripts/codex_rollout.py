"""Codex CLI rollout files (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Rows come from ``token_usage_record`` lines where the file has them (CLI ≥ 0.169: one per response,
keyed by ``response_id``), else from ``event_msg``/``token_count`` events, one per response, using
``last_token_usage`` (or the difference of the cumulative ``total_token_usage``). Three traps:

- Codex re-emits byte-identical ``token_count`` events (46% of events in one public corpus): an event
  whose cumulative total equals the previous one is collapsed.
- A forked or spawned (subagent) rollout first replays its parent's history, token events included.
  The replay ends at the first turn whose id (a UUIDv7) is not older than the fork's own id; replayed
  cumulative totals seen again later are skipped as well, and records of another thread never count.
- A ``token_count`` without usage (``info: null``) also announces rate limits at turn start; it stands
  for a response (usage unknown) only when model output came since the last counted event.

``rate_limits`` used percentages (first and last per window) go to ``attrs["rate_limits"]``; the sum of
rows is cross-checked against the last cumulative total in ``attrs["crosscheck"]``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import orjson

from kit.transcripts import _usage
from kit.transcripts._base import Issues, Parsed, as_dict, file_summary, records, text
from kit.transcripts._tools import exit_failed, result_row, text_chars

FORMAT = "codex_rollout"
BACKEND = "codex"
KNOWN = {"session_meta", "response_item", "event_msg", "turn_context", "token_usage_record", "compacted", "world_state"}
CALLS = {"function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call"}
RESULTS = {"function_call_output", "custom_tool_call_output"}
CHECKED = {"input_tokens": "input_tokens", "cache_read_tokens": "cached_input_tokens", "output_tokens": "output_tokens"}


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
    call_id: Any = None
    name: Any = None
    namespace: Any = None  # an MCP tool's server (``mcp__kit``): the call is named ``<namespace>__<name>``
    output: msgspec.Raw = msgspec.Raw(b"null")  # a tool's output: decoded only when tool results are asked for
    info: Any = None
    rate_limits: Any = None
    thread_id: Any = None
    response_id: Any = None
    usage: Any = None


class _Line(msgspec.Struct, gc=False):
    type: Any = None
    timestamp: Any = None
    payload: _Payload | None = None


DECODER = msgspec.json.Decoder(_Line)
EMPTY = _Payload()


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    out = Parsed()
    for path in paths:
        state = _File(path, issues, tools)
        for number, line in records(path, issues, DECODER):
            state.line(number, line)
        out.extend(state.finish())
    return out


def uuid7_ms(value: object) -> int | None:
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


def _tool_output(output: object) -> tuple[int, bool]:
    """Characters and error status of a call's output (text, content list, or an object)."""
    if isinstance(output, str):
        legacy = None
        if output.startswith("{"):
            try:
                legacy = orjson.loads(output)
            except orjson.JSONDecodeError:
                legacy = None
        if isinstance(legacy, dict) and isinstance(legacy.get("metadata"), dict):
            return len(output), legacy["metadata"].get("exit_code") not in (0, None)
        return len(output), exit_failed(output)
    if isinstance(output, dict):
        return text_chars(output.get("content", output.get("body"))), output.get("success") is False
    return text_chars(output), False


class _Response(NamedTuple):
    """A response as its line found it; mapped to a row at the end, once the file's row source is known."""

    number: int
    timestamp: object
    usage: object
    tool_calls: int
    turn: int | None
    model: str | None


@dataclass
class _File:
    path: Path
    issues: Issues
    want_tools: bool
    session_id: str | None = None
    cli_version: str | None = None
    fork_ms: int | None = None
    replaying: bool = False
    model: str | None = None
    turn_ids: list[str] = field(default_factory=list)
    counted: list[_Response] = field(default_factory=list)
    recorded: list[_Response] = field(default_factory=list)
    response_ids: set[str] = field(default_factory=set)
    prev_ident: bytes | None = None
    prev_total: dict | None = None
    replay_idents: set[bytes] = field(default_factory=set)
    baseline: dict | None = None
    last_total: tuple[int, dict] | None = None
    calls_for_count: int = 0
    calls_for_record: int = 0
    output_since: bool = False
    calls: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    tools: list[dict] = field(default_factory=list)
    rates: dict[str, dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    collapsed: int = 0
    replayed: int = 0

    def line(self, number: int, line: _Line) -> None:
        kind, payload = text(line.type), line.payload or EMPTY
        if kind not in KNOWN:
            self.issues.unknown_type(self.path, number, kind)
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
        elif kind == "compacted":
            self._event(number, line, kind)
        elif kind == "event_msg" and payload.type in ("context_compacted", "turn_aborted"):
            self._event(number, line, payload.type)

    def _cycle(self) -> int:
        """The response being generated now: responses completed so far."""
        return len(self.recorded) if self.recorded else len(self.counted)

    def _meta(self, meta: _Payload) -> None:
        if self.session_id is not None:
            return  # a replayed parent's meta: the first one is this file's own
        self.session_id, self.cli_version = meta.id, meta.cli_version
        if _parent(meta) is not None:
            self.fork_ms = uuid7_ms(meta.id) or _iso_ms(meta.timestamp)
            self.replaying = True

    def _turn(self, kind: str, payload: _Payload) -> None:
        turn_id = payload.turn_id
        if self.replaying:
            started = uuid7_ms(turn_id)
            own = (started >= self.fork_ms) if None not in (started, self.fork_ms) else kind == "turn_context"
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

    def _item(self, number: int, item: _Payload) -> None:
        kind = text(item.type)
        if kind in CALLS:
            name = f"{item.namespace}__{item.name}" if isinstance(item.namespace, str) else item.name
            self.calls[str(item.call_id)] = (name or kind, self._cycle())
            self.calls_for_count += 1
            self.calls_for_record += 1
            self.output_since = True
        elif kind == "reasoning" or (kind == "message" and item.role == "assistant"):
            self.output_since = True
        elif kind in RESULTS and self.want_tools:
            name, cycle = self.calls.get(str(item.call_id), (None, self._cycle() - 1))
            try:
                output = msgspec.json.decode(item.output)
            except msgspec.DecodeError as exc:  # a lone surrogate escape, which the line's decoding let through
                self.issues.add(self.path, number, f"invalid JSON in the tool output ({exc}); tool result skipped")
                return
            chars, is_error = _tool_output(output)
            self.tools.append(result_row(cycle + 1, name, chars, is_error))

    def _response(self, number: int, line: _Line, usage: object, tool_calls: int) -> _Response:
        return _Response(number, line.timestamp, usage, tool_calls, len(self.turn_ids) or None, self.model)

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
            "tool_calls": resp.tool_calls,
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
        self.recorded.append(self._response(number, line, record.usage, self.calls_for_record))
        self.calls_for_record = 0

    def _token_count(self, number: int, line: _Line, payload: _Payload) -> None:
        self._rates(payload.rate_limits)
        info = payload.info
        if not isinstance(info, dict):
            if self.output_since:
                self.counted.append(self._response(number, line, None, self.calls_for_count))
                self.calls_for_count, self.output_since = 0, False
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
        self.counted.append(self._response(number, line, usage, self.calls_for_count))
        self.calls_for_count, self.output_since = 0, False
        self.prev_ident, self.prev_total = ident, total if isinstance(total, dict) else self.prev_total
        if isinstance(total, dict):
            self.last_total = (number, total)

    def _rates(self, limits: object) -> None:
        for window, value in as_dict(limits).items():
            used = as_dict(value).get("used_percent")
            if isinstance(used, int | float) and not isinstance(used, bool):
                entry = self.rates.setdefault(window, {"first": used, "window_minutes": value.get("window_minutes")})
                entry["last"] = used

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

    def _crosscheck(self, rows: list[dict]) -> list[dict]:
        if self.last_total is None:
            return []
        number, total = self.last_total
        checks = []
        for column, key in CHECKED.items():
            values = [r[column] for r in rows]
            rows_sum = sum(values) if values and None not in values else None
            value, base = total.get(key), as_dict(self.baseline).get(key, 0)
            reported = value - base if isinstance(value, int) and isinstance(base, int) else None
            agree = rows_sum is not None and rows_sum == reported
            note = "" if agree else "sum of responses differs from the last cumulative total_token_usage"
            checks.append(
                {
                    "source_path": str(self.path),
                    "source_line": number,
                    "turn": None,
                    "field": column,
                    "rows_sum": rows_sum,
                    "reported": reported,
                    "agree": agree,
                    "note": note,
                }
            )
        return checks

    def finish(self) -> Parsed:
        if self.replaying:
            self.issues.add(self.path, 0, "fork/subagent rollout whose replayed parent history never ended; no rows")
        # only the responses of the rows' source are mapped, so only their usage problems are reported
        rows = [self._row(cycle, resp) for cycle, resp in enumerate(self.recorded or self.counted)]
        out = Parsed(rows=rows, tools=self.tools)
        out.attrs["events"] = self.events
        out.attrs["crosscheck"] = self._crosscheck(rows)
        out.attrs["rate_limits"] = [
            {"source_path": str(self.path), "limit": window, **entry} for window, entry in self.rates.items()
        ]
        out.attrs["files"].append(
            file_summary(
                self.path,
                FORMAT,
                rows,
                cli_version=self.cli_version,
                usage_from="token_usage_record" if self.recorded else "token_count",
                collapsed_reemits=self.collapsed,
                skipped_replay=self.replayed,
            )
        )
        return out
