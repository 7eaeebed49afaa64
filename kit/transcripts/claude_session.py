"""Claude Code session files (``~/.claude/projects/<dir>/<session>.jsonl``, and ``subagents/agent-*.jsonl``).

One row per API response, deduped by ``message.id`` (see ``_claude``) within a file and across the
files of one read (``_drop_repeats``: resumed sessions and subagent logs repeat responses). Responses
whose lines are all ``isSidechain`` (subagents, compaction requests) stay rows, because they cost
tokens, and are listed in ``attrs["sidechain_ids"]`` so the occupancy analysis can keep them out of
the parent's context. ``turn`` counts the user's prompts (``_prompt``): a resumed session's second
``claude -p`` is turn 2 of the same file. Where the CLI writes ``api-request`` lines (one per API
call, CLI ≥ 2.1.3xx), ``attrs["crosscheck"]`` says whether each has its response (``requestRef``).
``system`` lines (``compact_boundary`` with its ``compactMetadata``, …), Claude Code's ``cost-state``
and its synthetic error messages (with the kind the CLI names, ``error``) go to ``attrs["events"]``; the
local commands a session ran (``/login``) go to its ``attrs["files"]`` entry, so that a file of no response
says why; bookkeeping lines (``api-request-shape``, snapshots, progress, …) are read past. The CLI's
``output_tokens`` may be a partial streaming snapshot (v2.1.29 writes 1 on every line); this file cannot know
better, the stream-json ``result`` can.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from kit.framing import block_framing
from kit.jsontypes import JsonObject
from kit.transcripts._base import (
    Issues,
    Parsed,
    Position,
    Reader,
    Resume,
    Unused,
    file_summary,
    int_or_none,
    records,
    text,
)
from kit.transcripts._claude import (
    TOOL_BLOCKS,
    Content,
    Responses,
    block_tokens_by_piece,
    content_of,
    file_role,
    is_synthetic,
    keep_rank,
    piece,
    text_key,
    tool_piece,
    utf8_chars,
)

FORMAT = "claude_session"

# Line types Claude Code writes that carry no request usage (seen in CLI 2.1.x files and its docs).
BOOKKEEPING = {
    "queue-operation",
    "file-history-snapshot",
    "progress",
    "summary",
    "attachment",
    "atis-latch",
    "api-request-shape",
    "api-request-blob",
    "tools-used",
    "last-prompt",
    "mode",
    "custom-title",
    "ai-title",
    "agent-name",
    "tag",
    "pr-link",
    "permission-mode",
    "worktree-state",
}


# Fields of an event line kept in ``attrs["events"]`` (compactions, cost state).
KEEP = ("compactMetadata", "microcompactMetadata", "logicalParentUuid", "level", "totalCostUSD", "modelUsage")


class _Message(msgspec.Struct, gc=False):
    id: Any = None
    model: Any = None
    usage: Any = None
    content: msgspec.Raw = msgspec.Raw(b"null")  # ``_Block``s on assistant lines; else decoded where it holds results


class _Block(msgspec.Struct, gc=False):
    """An assistant content block: what ``output_chars`` and the tool calls need. A tool's input stays raw
    JSON text, whose characters are counted without decoding it."""

    type: Any = None
    id: Any = None
    name: Any = None
    text: Any = None
    thinking: Any = None
    input: msgspec.Raw = msgspec.Raw(b"")  # empty where the block has no input: its size is unknown
    caller: Any = None  # how the call was made (``{"type": "direct"}``): part of its framing

    def call(self) -> JsonObject:
        """A tool_use block's keys as the transcript holds them, its input emptied (``kit.framing.block_framing``)."""
        keys = {"type": self.type, "id": self.id, "name": self.name, "input": {}}
        return keys if self.caller is None else keys | {"caller": self.caller}


RENAME = {
    "request_id": "requestId",
    "sidechain": "isSidechain",
    "api_error": "isApiErrorMessage",
    "meta": "isMeta",
    "compact_summary": "isCompactSummary",
    "request_ref": "requestRef",
    "api_error_status": "apiErrorStatus",
}


class _Line(msgspec.Struct, rename=RENAME, gc=False):
    """The fields of a session line the reader uses; the rest (text, thinking, tool output) is only checked."""

    type: Any = None
    version: Any = None
    id: Any = None  # of an ``api-request`` line, which the response's lines name in ``requestRef``
    message: _Message | None = None
    request_id: Any = None
    request_ref: Any = None
    sidechain: Any = None
    api_error: Any = None
    error: Any = None  # the kind of a client-error stand-in (``authentication_failed``, ``billing_error``, …)
    api_error_status: Any = None  # its HTTP status, where the CLI had one
    meta: Any = None
    compact_summary: Any = None
    timestamp: Any = None
    subtype: Any = None
    compactMetadata: Any = msgspec.UNSET
    microcompactMetadata: Any = msgspec.UNSET
    logicalParentUuid: Any = msgspec.UNSET
    level: Any = msgspec.UNSET
    totalCostUSD: Any = msgspec.UNSET
    modelUsage: Any = msgspec.UNSET


DECODER = msgspec.json.Decoder(_Line)
BLOCKS_DECODER = msgspec.json.Decoder(list[_Block] | str | None)
TOOL_RESULT = re.compile(rb'"tool_result"')
TEXT, BLOCKS = re.compile(rb'\s*"'), re.compile(rb"\s*\[")
# A local command the user ran (``/login``, ``/model``): Claude Code writes it as a prompt line and sends nothing
COMMAND = re.compile(rb"<command-name>([^<]{1,200})</command-name>")
# A user line whose content opens with a tool result (most of a session's bytes): not a prompt (``_prompt``), so
# read past undecoded when tool results are not asked for (``_base.Unused``)
REQUESTS_ONLY = Unused.lines(
    '"user","message":\\{"role":"user","content":\\[\\{(?:"tool_use_id":"[^"\\\\]*",)?"type":"tool_result"',
    b'"type":"tool_result"',
)


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of every file, each response once across files (``_drop_repeats``); ``tools=False`` skips tool results."""
    files = [_read_file(path, issues, tools) for path in paths]
    answered = set().union(*(ids.answered for _, ids in files))  # a subagent's requests may be answered elsewhere
    for parsed, ids in files:
        parsed.attrs["crosscheck"] = requests_check(ids.path, ids.sent, answered, len(parsed.rows))
    out = Parsed()
    out.attrs["repeats"] = _drop_repeats(files)
    for parsed, _ in files:
        out.extend(parsed)
    return out


@dataclass
class Ids:
    """What the dedupe across files needs of one file: per response id, its cycle, last line and rank
    (``keep_rank``), and the calling cycle of each tool row. The responses themselves, usage objects
    and all, are let go, so that a big read does not hold them to the end."""

    path: Path
    cycles: dict[str, tuple[int, int, tuple[bool, int]]]
    callers: list[int | None]
    sent: dict[str, int]  # api-request id -> its line
    answered: set[str]  # the api-request ids that response lines name (requestRef)


def _drop_repeats(files: list[tuple[Parsed, Ids]]) -> list[dict]:
    """Keep each response (same ``message.id``, else ``requestId``) in one file only; list the copies dropped.

    A resumed or forked session's file repeats the parent's history, and a subagent log can replay its
    parent's responses (with ``isSidechain``): counting every file would count those responses twice
    (ccusage dedupes across files too). The copy kept is the parent's own (not a sidechain) where there
    is one, then, as within a file, the one with the largest output, the last read on ties. A dropped
    copy takes its tool results along; it is not an issue, since such copies are expected, and goes to
    ``attrs["repeats"]`` with the place of the copy kept.
    """
    dropped, repeats = repeated([ids for _, ids in files])
    for index, cycles in dropped.items():
        parsed, ids = files[index]
        parsed.attrs = without(parsed.attrs, len(parsed.rows), cycles)
        parsed.rows = [r for r in parsed.rows if r["cycle"] not in cycles]
        parsed.tools = [t for t, c in zip(parsed.tools, ids.callers, strict=True) if c not in cycles]
    return repeats


def repeated(files: list[Ids]) -> tuple[dict[int, set[int]], list[dict]]:
    """The cycles to drop per file (by index in ``files``), and ``attrs["repeats"]`` (see ``_drop_repeats``).

    The parse cache calls it on the ids it keeps, without the rows.
    """
    dropped: dict[int, set[int]] = {}
    repeats = []
    for key, found in _copies(files).items():
        kept_index, (_, kept_line, _) = max(found, key=lambda c: (*c[1][2], c[0]))
        for index, (cycle, line, _) in found:
            if index == kept_index:
                continue
            dropped.setdefault(index, set()).add(cycle)
            entry = {"source_path": str(files[index].path), "source_line": line, "cycle": cycle}
            entry |= {"message_id": key, "kept_path": str(files[kept_index].path), "kept_line": kept_line}
            repeats.append((index, cycle, entry))
    return dropped, [entry for *_, entry in sorted(repeats, key=lambda r: r[:2])]


def without(attrs: dict[str, list], rows: int, cycles: set[int]) -> dict[str, list]:
    """A file's attrs (of ``rows`` rows) once the responses of ``cycles`` are dropped, as a new dict."""
    out = dict(attrs)
    out["sidechain_ids"] = [s for s in attrs["sidechain_ids"] if s["cycle"] not in cycles]
    out["files"] = [attrs["files"][0] | {"rows": rows - len(cycles), "repeats": len(cycles)}]
    return out


def _copies(files: list[Ids]) -> dict[str, list[tuple[int, tuple[int, int, tuple[bool, int]]]]]:
    """Each response id found in more than one file, with its copies (file index, cycle, line, rank) in file order.

    Found with set operations, once per file, since most ids are in one file only.
    """
    seen: set[str] = set()
    repeated: set[str] = set()
    for ids in files:
        repeated |= ids.cycles.keys() & seen
        seen.update(ids.cycles)  # not ``seen |= keys``: with a keys view that copies ``seen`` for every file
    copies: dict[str, list] = {}
    for index, ids in enumerate(files):
        for key in sorted(ids.cycles.keys() & repeated):
            copies.setdefault(key, []).append((index, ids.cycles[key]))
    return copies


def _blocks(raw: msgspec.Raw, marker: re.Pattern[bytes]) -> object:
    """A message's content blocks where ``marker`` occurs in them, else None (most content is only text).

    Raises ``msgspec.DecodeError`` for what the line's decoding let through unread (a lone surrogate
    escape such as ``\\ud800``, which JSON text must not hold): the caller reports the line.
    """
    return msgspec.json.decode(raw) if marker.search(raw) else None


def _content(raw: msgspec.Raw) -> Content:
    """An assistant line's tool calls and block sizes, from typed blocks (content of another shape: as dicts).

    Raises ``msgspec.DecodeError`` for what the line's decoding let through unread (see ``_blocks``).
    """
    try:
        blocks = BLOCKS_DECODER.decode(raw)
    except msgspec.ValidationError:
        return content_of(msgspec.json.decode(raw))
    if not isinstance(blocks, list):
        return content_of(blocks)
    calls: list[tuple[object, object, int]] = []  # Content.calls
    pieces: list[tuple[object, int]] = []  # Content.pieces
    known = True
    for block in blocks:  # ``piece`` inlined for text: this runs for every assistant line
        kind = block.type
        if kind == "text" and type(value := block.text) is str:
            pieces.append((text_key("text", value), len(value)))
        elif kind in TOOL_BLOCKS:
            if kind == "tool_use":
                calls.append(
                    (
                        block.id,
                        block.name,
                        block_framing(block.call()),
                    )
                )
            chars = utf8_chars(bytes(block.input))
            known &= chars > 0  # a call without its input: the response's size is unknown
            pieces.append(tool_piece(kind, block.id, chars))
        elif (found := piece(kind, block.id, block.text, block.thinking, 0)) is not None:
            pieces.append(found)
    return Content(calls, pieces if known else None)


def _prompt(line: _Line) -> bool:
    """A user line with text (not tool results) in the main conversation: the next response starts a turn.

    Text lines in a row (an interrupt marker, a ``/command`` and its output, then the prompt) make one
    turn, since only a response closes it. Claude Code's own lines (``isMeta`` caveats, the
    ``isCompactSummary`` after a compaction) and a subagent's prompts (sidechain) are not the user's.
    """
    if line.message is None or True in (line.sidechain, line.meta, line.compact_summary):
        return False
    content = line.message.content
    return TEXT.match(content) is not None or (BLOCKS.match(content) is not None and not TOOL_RESULT.search(content))


@dataclass
class _State:
    """A file's reading state after its last line: what reading lines appended later starts from.

    The parse cache keeps it (as MessagePack, decoded by these types: ``STATE``, never pickled) with the
    file's rows, so that a grown session file has only its new lines read (``scan`` with this state) and
    the same rows come out as from reading it whole: a later line can still complete an earlier response,
    a tool result can answer an earlier call, and a prompt can open the next turn. ``issues`` are the
    lines' own; ``finish`` adds its own to them.
    """

    path: Path
    tools: bool
    issues: Issues
    responses: Responses
    at: Position = field(default_factory=Position)
    events: list[dict] = field(default_factory=list)
    version: Any = None
    turn: int | None = None
    prompted: bool = False
    sent: dict[str, int] = field(default_factory=dict)  # api-request id -> line
    answered: set[str] = field(default_factory=set)
    commands: list[str] = field(default_factory=list)  # local commands run (``COMMAND``), first-run order

    def __post_init__(self) -> None:
        """The responses report into the state's issues, one list: a decoded state (the cache's) comes with a
        copy of them in ``responses``, which this replaces."""
        self.responses.issues = self.issues


STATE = _State  # the type the parse cache decodes a kept state into (``kit.transcripts.cache``)


def start(path: Path, issues: Issues, tools: bool, crc: bool = False) -> _State:
    """The state before a file's first line; ``crc``: keep a CRC of the bytes read (``Position``)."""
    return _State(path, tools, issues, Responses(path, FORMAT, issues), Position(crc=0 if crc else None))


def _read_file(path: Path, issues: Issues, tools: bool) -> tuple[Parsed, Ids]:
    """One file read whole, alone: ``read`` joins the files' rows once each has its own."""
    return finish(scan(start(path, issues, tools)))


def scan(state: _State) -> _State:
    """Read the file's lines after ``state.at`` into ``state`` (kept in locals while the loop runs: this is
    the hot loop of a history read) and return it."""
    path, issues, tools, responses = state.path, state.issues, state.tools, state.responses
    events, sent, answered = state.events, state.sent, state.answered
    version, turn, prompted = state.version, state.turn, state.prompted
    for number, line in records(path, issues, DECODER, state.at, None if tools else REQUESTS_ONLY):
        kind, message = line.type, line.message  # compared as it is; ``text`` only where it must be a string
        version = line.version or version
        if kind == "assistant":
            if message is None:
                issues.add(path, number, "assistant line without a message object; line skipped")
            elif is_synthetic(message.model, line.api_error):
                events.append(_event(path, number, responses, "api_error", line, message))
            else:
                try:
                    content = _content(message.content)
                    tokens = block_tokens_by_piece(msgspec.json.decode(message.content)) if tools else None
                except msgspec.DecodeError as exc:
                    issues.add(path, number, f"invalid JSON in message.content ({exc}); line skipped")
                    continue
                if isinstance(line.request_ref, str):
                    answered.add(line.request_ref)
                sidechain = line.sidechain is True
                if prompted and not sidechain:
                    turn, prompted = (turn or 0) + 1, False
                usage, request = message.usage, line.request_id
                responses.add(
                    number, message.id, request, message.model, usage, content, sidechain, line.timestamp, turn, tokens
                )
        elif kind == "user":
            if _prompt(line):
                prompted = True
                _commands(line, state.commands)
            if tools and message is not None:
                try:
                    responses.add_results(_blocks(message.content, TOOL_RESULT))
                except msgspec.DecodeError as exc:
                    issues.add(path, number, f"invalid JSON in message.content ({exc}); tool results skipped")
        elif kind == "system":
            events.append(_event(path, number, responses, f"system:{line.subtype}", line))
        elif kind == "api-request":
            if isinstance(line.id, str):
                sent.setdefault(line.id, number)
        elif kind == "cost-state":
            events.append(_event(path, number, responses, "cost-state", line))
        elif (kind := text(kind)) not in BOOKKEEPING:
            issues.unknown_type(path, number, kind)
    state.version, state.turn, state.prompted = version, turn, prompted
    return state


def finish(state: _State) -> tuple[Parsed, Ids]:
    """The rows, tool results and side tables of a file read to its end, and its ids for the dedupe across files."""
    responses, out = state.responses, Parsed()
    out.rows = responses.rows()
    out.tools = responses.tools
    out.attrs["events"] = state.events
    out.attrs["sidechain_ids"] = responses.sidechain_ids()
    summary = file_summary(state.path, FORMAT, out.rows, cli_version=state.version, repeats=0)
    out.attrs["files"].append(summary | {"local_commands": list(state.commands)})
    local = responses.local
    cycles = {k: (r.cycle, r.last_line, keep_rank(r)) for k, r in responses.by_key.items() if k not in local}
    ids = Ids(state.path, cycles, responses.callers, state.sent, state.answered)
    return out, ids


def _commands(line: _Line, found: list[str]) -> None:
    """Add the local commands a prompt line holds to ``found`` (once each): a session of ``/login`` alone has
    no response, and the file's account says so (``kit.transcripts.accounting``)."""
    if line.message is None:
        return
    for name in COMMAND.findall(line.message.content):
        try:
            command = msgspec.json.decode(b'"' + name.strip() + b'"')
        except msgspec.DecodeError:
            continue
        if isinstance(command, str) and command not in found:
            found.append(command)


def requests_check(path: Path, sent: dict[str, int], answered: set[str], rows: int) -> list[dict]:
    """The requests the CLI says it sent (``api-request`` lines, CLI ≥ 2.1.3xx) against the responses read.

    A request with no response line was failed, retried or cut off (a killed CLI): its tokens are not in
    the rows, and nothing in the file says what they were, so the disagreement is stated, not guessed.
    """
    if not sent:
        return []
    unanswered = sorted(n for rid, n in sent.items() if rid not in answered)
    note = ""
    if unanswered:
        note = (
            f"{len(unanswered)} api-request line(s) without a response (first at line {unanswered[0]}): "
            "failed, retried or cut-off requests whose usage is unknown and not in the rows"
        )
    return [
        {
            "source_path": str(path),
            "source_line": unanswered[0] if unanswered else max(sent.values()),
            "turn": None,
            "field": "requests",
            "rows_sum": rows,
            "reported": len(sent),
            "agree": not unanswered,
            "note": note,
        }
    ]


def _event(
    path: Path, number: int, responses: Responses, kind: str, line: _Line, message: _Message | None = None
) -> dict:
    """An event in transcript order; ``cycle`` is the next response's, i.e. the first request after it."""
    detail = {k: value for k in KEEP if (value := getattr(line, k)) is not msgspec.UNSET}
    if message is not None:
        try:
            detail["text"] = str(msgspec.json.decode(message.content))[:500]
        except msgspec.DecodeError:
            detail["text"] = bytes(message.content)[:500].decode("utf-8", "replace")
        detail["error"] = text(line.error)  # a stand-in's kind, where the CLI names it
        detail["status"] = int_or_none(line.api_error_status)
    return {
        "source_path": str(path),
        "source_line": number,
        "cycle": len(responses.by_key),
        "kind": kind,
        "timestamp": line.timestamp,
        "detail": detail,
    }


def judge(line: dict) -> bool:
    """A session line: Claude Code's linking keys (``parentUuid``, ``sessionId``, ``isSidechain``)."""
    return "parentUuid" in line or "sessionId" in line or "isSidechain" in line


def joined(
    files: list[Ids], attrs: list[dict[str, list]], rows: list[int]
) -> tuple[list[dict[str, list]], list[set[int]], list[dict]]:
    """``read``'s steps across files on the files' ids alone (``Reader.join``, for the parse cache, which keeps
    the ids and not the rows): each file's attrs with its requests check, the cycles dropped per file as
    repeats of another file's responses, and ``attrs["repeats"]``. ``attrs`` and ``rows``: each file's own."""
    answered = set().union(*(found.answered for found in files))
    dropped, repeats = repeated(files)
    out, cycles = [], []
    for index, (found_ids, own_attrs, count) in enumerate(zip(files, attrs, rows, strict=True)):
        own = dropped.get(index, set())
        found = without(own_attrs, count, own) if own else dict(own_attrs)
        found["crosscheck"] = requests_check(found_ids.path, found_ids.sent, answered, count)
        out.append(found)
        cycles.append(own)
    return out, cycles, repeats


READER = Reader(FORMAT, judge, read, role=file_role, resume=Resume(_State, start, scan, finish), join=joined)
