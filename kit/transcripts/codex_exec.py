"""``codex exec --json`` stdout: one row per turn, not per request (this stream has no per-request usage).

``turn.completed.usage`` is cumulative for the whole thread: it keeps growing across
``codex exec resume`` (gitmoot#661, openai/codex#17539; the kit's probe saw 6369 then 21738). So the
turns of one thread, read from any number of files in any order, are put in cumulative order and
differenced: each row is one turn's own tokens. The same cumulative figure seen twice (a file given
twice, overlapping captures) is one turn, never two. The earliest turn read is taken to start the
thread: a resumed run's stdout read without its predecessors would count the earlier turns in it.
``trial_id`` is the thread (``thread.started``; the file's stem where that line is missing), ``cycle`` the
0-based turn of the thread and ``turn`` the 1-based one, so every stage and command can key and order the rows.
A row is a whole turn, not a response: its input is the sum of the prompts of the turn's requests, so what
needs one row per response (occupancy, the structural cache, context growth) sets these rows apart
(``turn_rows``) with a note. A turn that started and never completed (the stream cut inside it) is an issue
at its ``turn.started`` line: tokens were spent and the file does not say how many.

``output_chars`` of a turn: its agent messages, reasoning text and MCP call arguments (compact JSON).
Commands, file changes, searches and to-do lists are given as what ran, not as the arguments the model
sent, so a turn with any of them has ``output_chars`` NA (docs/method.md#transcripts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pandas as pd

from kit.transcripts import _usage
from kit.transcripts._base import Issues, Parsed, Reader, as_dict, json_lines, text
from kit.transcripts._tools import result_row, text_chars

FORMAT = "codex_exec"
BACKEND = "codex"
KNOWN = {"thread.started", "turn.started", "turn.completed", "turn.failed", "item.started", "item.updated"}
KNOWN |= {"item.completed", "error"}
CALL_ITEMS = {"command_execution", "mcp_tool_call", "file_change", "web_search"}
WRITTEN = {"agent_message": "text", "reasoning": "text"}  # items whose text the model wrote
FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens", "reasoning_output_tokens")


@dataclass
class _Turn:
    thread: str | None  # None where the file has no thread.started
    path: Path
    line: int
    usage: dict
    tool_calls: int
    output_chars: int | None
    tools: list[dict] = field(default_factory=list)

    def trial(self) -> str:
        """The trial the turn belongs to: its thread, else its file's stem."""
        return self.thread if self.thread is not None else self.path.stem

    def key(self) -> tuple[int, ...]:
        """The cumulative counts: a turn's identity within its thread, and its place in time."""
        return tuple(v if isinstance(v := self.usage.get(f), int) else -1 for f in FIELDS)


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of ``paths``; tool-result rows only with ``tools`` (this format has few, so they cost little)."""
    out = Parsed()
    turns: list[_Turn] = []
    for path in paths:
        found = _read_file(path, issues, out)
        turns += found
        out.attrs["files"].append({"source_path": str(path), "format": FORMAT, "turns": len(found)})
    threads: dict[str, list[_Turn]] = {}
    for turn in turns:  # a file without thread.started is a thread of its own, whatever its stem
        threads.setdefault(turn.thread or f"(no thread.started in {turn.path})", []).append(turn)
    for thread_turns in threads.values():
        _difference(thread_turns, issues, out)
    for summary in out.attrs["files"]:
        summary["rows"] = sum(r["source_path"] == summary["source_path"] for r in out.rows)
    if not tools:
        out.tools = []
    return out


def _read_file(path: Path, issues: Issues, out: Parsed) -> list[_Turn]:
    thread: str | None = None
    turns: list[_Turn] = []
    calls = 0
    chars: int | None = 0  # None once an item's output is not known
    tools: list[dict] = []
    started: int | None = None  # the line of the turn.started not yet closed by turn.completed or turn.failed
    for number, line in json_lines(path, issues):
        kind = text(line.get("type"))
        if kind == "thread.started":
            thread = str(line.get("thread_id"))
        elif kind == "turn.started":
            _cut(path, started, calls, issues)
            calls, chars, tools, started = 0, 0, [], number
        elif kind == "item.completed":
            item = as_dict(line.get("item"))
            calls += text(item.get("type")) in CALL_ITEMS
            more = _written(item)
            chars = None if chars is None or more is None else chars + more
            tools += _tool_result(item)
        elif kind == "turn.completed":
            turns.append(_Turn(thread, path, number, as_dict(line.get("usage")), calls, chars, tools))
            calls, chars, tools, started = 0, 0, [], None
        elif kind in ("turn.failed", "error"):
            started = None if kind == "turn.failed" else started
            detail = {"message": str(line.get("message") or as_dict(line.get("error")).get("message"))[:500]}
            out.attrs["events"].append(
                {"source_path": str(path), "source_line": number, "cycle": None, "kind": kind, "timestamp": None}
                | {"detail": detail}
            )
        elif kind not in KNOWN:
            issues.unknown_type(path, number, kind)
    _cut(path, started, calls, issues)
    return turns


def _cut(path: Path, started: int | None, calls: int, issues: Issues) -> None:
    """The issue of a turn that started at line ``started`` and never completed (None: no such turn).

    Its usage is only ever sent in ``turn.completed``, so the tokens its requests spent are unknown; saying
    nothing would let the file read as 0 turns (issue #31: a stream cut after 20 completed commands)."""
    if started is not None:
        ran = f" ({calls} tool calls completed in it)" if calls else ""
        issues.add(path, started, f"turn started at line {started} never completed: its usage is not in the file{ran}")


def _written(item: dict) -> int | None:
    """Characters the model wrote in a completed item; None where the item does not show them as sent."""
    kind = item.get("type")
    if kind in WRITTEN:
        value = item.get(WRITTEN[kind])
        return len(value) if isinstance(value, str) else None
    if kind == "mcp_tool_call":
        return len(orjson.dumps(item.get("arguments")).decode())
    return 0 if kind == "error" else None


def _tool_result(item: dict) -> list[dict]:
    if item.get("type") == "command_execution":
        failed = item.get("exit_code") not in (0, None) or item.get("status") == "failed"
        return [result_row(None, "command_execution", text_chars(item.get("aggregated_output")), failed)]
    if item.get("type") == "mcp_tool_call":
        chars = text_chars(as_dict(item.get("result")).get("content"))
        return [result_row(None, item.get("tool"), chars, item.get("status") == "failed" or bool(item.get("error")))]
    return []


def _difference(turns: list[_Turn], issues: Issues, out: Parsed) -> None:
    """Per-turn deltas of one thread's cumulative usage; zeros mean the server sent no usage."""
    unique: dict[tuple, _Turn] = {}
    for turn in turns:
        unique.setdefault(turn.key(), turn)
    previous: dict | None = None
    for number, turn in enumerate(sorted(unique.values(), key=lambda t: t.key()), start=1):
        usage = _delta(turn, previous, issues)
        if usage["usage_known"]:
            previous = turn.usage
        out.rows.append(
            {
                "trial_id": turn.trial(),
                "turn": number,
                "cycle": number - 1,
                "backend": BACKEND,
                "source_format": FORMAT,
                "source_path": str(turn.path),
                "source_line": turn.line,
                **usage,
                "tool_calls": turn.tool_calls,
                "output_chars": turn.output_chars,
            }
        )
        out.tools += [tool | {"trial_id": turn.trial(), "cycle": number - 1} for tool in turn.tools]  # of no one file


def _delta(turn: _Turn, previous: dict | None, issues: Issues) -> dict:
    try:
        if not _usage.codex(turn.usage)["usage_known"]:
            return _usage.unknown()
        before = previous or {}
        delta = {f: turn.usage[f] - (before.get(f) or 0) for f in FIELDS if isinstance(turn.usage.get(f), int)}
        if any(v < 0 for v in delta.values()):
            raise _usage.UsageError(f"thread usage went down ({delta}): not cumulative?")
        return _usage.codex(delta)
    except _usage.UsageError as exc:
        issues.add(turn.path, turn.line, f"{exc}; usage of this turn unknown")
        return _usage.unknown()


def turn_rows(rows: pd.DataFrame) -> pd.Series:
    """Which canonical rows are whole turns of this format, not responses: a command that needs one row per
    response (occupancy, the structural cache, context growth) sets them apart and says so."""
    return (rows["source_format"] == FORMAT).fillna(False).astype(bool)


def judge(line: dict) -> bool:
    """A ``codex exec --json`` event: a ``thread.*``, ``turn.*`` or ``item.*`` type."""
    kind = text(line.get("type"))
    return kind is not None and kind.split(".")[0] in ("thread", "turn", "item")


READER = Reader(FORMAT, judge, read, across_files=True)  # a thread's turns are differenced across its files
