"""Claude Code's assistant lines grouped into API responses (shared by the session and stream readers).

Claude Code writes one line per content block, each repeating the response's ``message.id`` and usage,
so summing lines double-counts (37% too much cache_read on the CodeContextBench pair). Lines are
grouped by ``message.id`` (``requestId`` where the id is missing). Streamed lines can carry a partial
``output_tokens`` that later lines of the same response complete (25 then 173 in spotter's tool_heavy),
so the group keeps the whole usage of its line with the largest output, the last one on ties; never
the first line and never a per-field maximum mixed from several lines.

``output_chars`` sums the response's content blocks once each (a block repeated on a later line of the
same response is not counted again): text, visible thinking (a redacted or signature-only thinking
block shows no text), and each tool call's input as compact JSON text (docs/method.md#transcripts).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson

from kit.framing import block_framing, block_tokens, result_block
from kit.transcripts import _usage
from kit.transcripts._base import COMPACTION, MAIN, Issues, as_dict
from kit.transcripts._tools import result_row, text_of

BACKEND = "claude"
TOOL_BLOCKS = ("tool_use", "server_tool_use")  # the model's own calls; their inputs are its output
BLOCK_FRAMING = {  # a text or thinking block's framing (``kit.framing.block_framing``; a signature is opaque: emptied)
    "text": block_framing({"type": "text", "text": ""}),
    "thinking": block_framing({"type": "thinking", "thinking": "", "signature": ""}),
}


class Content(NamedTuple):
    """What one assistant line's content blocks add to its response.

    ``calls``: (id, name, framing characters: ``kit.framing.block_framing``) of each ``tool_use`` block. ``pieces``:
    (block key, characters) of each block that shows the model's own output; the key names the block so
    that a later line repeating it is not counted twice. ``pieces`` is None where the size is unknown:
    content not readable as blocks, or a tool call without its input.
    """

    calls: list[tuple[object, object, int]]
    pieces: list[tuple[object, int]] | None


def utf8_chars(data: bytes) -> int:
    """Characters of UTF-8 text given as bytes (a raw JSON value: counted without building the string)."""
    return len(data) if data.isascii() else len(data.decode("utf-8", "replace"))


def text_key(kind: str, text: str) -> tuple[str, int, int]:
    """What names a text or thinking block among its response's blocks: its length and a CRC-32 of its text.

    Not ``hash(text)``: that differs between processes, and a reader's state, keys included, is kept by
    the parse cache and resumed in another process (``kit.transcripts.cache``).
    """
    return kind, len(text), zlib.crc32(text.encode("utf-8", "surrogatepass"))


def piece(kind: object, ident: object, text: object, thinking: object, input_chars: int) -> tuple[object, int] | None:
    """The (key, characters) of one content block, or None for a block that is not the model's own output
    (tool results of server tools, images, redacted thinking). Text is keyed by ``text_key``."""
    if kind == "text" and isinstance(text, str):
        return text_key("text", text), len(text)
    if kind == "thinking" and isinstance(thinking, str):
        return text_key("thinking", thinking), len(thinking)
    if kind in TOOL_BLOCKS:
        return tool_piece(kind, ident, input_chars)
    return None


def tool_piece(kind: object, ident: object, input_chars: int) -> tuple[object, int]:
    """The (key, characters) of a tool call block: keyed by its id (by its input's size if it has none)."""
    return (kind, ident if isinstance(ident, str) else input_chars), input_chars


def content_of(blocks: object) -> Content:
    """``Content`` of decoded blocks (plain dicts: stream-json, or a session line of unexpected shape)."""
    if isinstance(blocks, str):
        return Content([], [(text_key("text", blocks), len(blocks))])
    if not isinstance(blocks, list):
        return Content([], None)
    calls: list[tuple[object, object, int]] = []  # Content.calls
    pieces: list[tuple[object, int]] = []  # Content.pieces
    known = True
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind, ident = block.get("type"), block.get("id")
        if kind == "tool_use":
            calls.append((ident, block.get("name"), block_framing(block)))
        known &= kind not in TOOL_BLOCKS or "input" in block  # a call without its input: its size is unknown
        chars = utf8_chars(orjson.dumps(block.get("input"))) if kind in TOOL_BLOCKS else 0
        if (found := piece(kind, ident, block.get("text"), block.get("thinking"), chars)) is not None:
            pieces.append(found)
    return Content(calls, pieces if known else None)


def block_tokens_by_piece(blocks: object) -> dict[object, int]:
    """Each output block's ``o200k_base`` tokens (``kit.framing.block_tokens``) by its piece's key (``piece``):
    the blocks ``Content.pieces`` counts, so that a block repeated on a later line is counted once."""
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    found: dict[object, int] = {}
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        chars = utf8_chars(orjson.dumps(block.get("input"))) if kind in TOOL_BLOCKS else 0
        if (named := piece(kind, block.get("id"), block.get("text"), block.get("thinking"), chars)) is not None:
            found[named[0]] = block_tokens(block)  # by its key, as ``Content.pieces`` has it
    return found


@dataclass(slots=True)
class _Response:
    cycle: int
    first_line: int
    last_line: int
    usage_line: int
    usage: object
    output: int  # ``_output(usage)``, kept: every further line of the response is compared with it
    model: str | None
    started_at: str | None
    sidechain: bool
    turn: int | None
    tool_use_ids: list[object] = field(default_factory=list)  # as the transcript gives them
    pieces: dict[object, int] | None = field(default_factory=dict)  # see ``Content``; None: chars unknown
    o200k: dict[object, int] | None = None  # each piece's block's ``o200k_base`` tokens; None: not counted


def _o200k(resp: _Response) -> int | None:
    """The response's blocks' ``o200k_base`` tokens; None where not counted or where its output is unknown."""
    return None if resp.o200k is None or resp.pieces is None else sum(resp.o200k.values())


def _output(usage: object) -> int:
    value = usage.get("output_tokens") if type(usage) is dict else None
    return value if isinstance(value, int) else -1


@dataclass
class Responses:
    """The responses of one file in first-seen order, with the tool calls each asked for.

    ``local`` holds the keys made up from a line number (no ``message.id`` nor ``requestId``): they
    name a response within this file only. ``callers`` gives, for each tool row, the cycle of the
    response that called the tool (None when the call is not in the file).
    """

    path: Path
    fmt: str
    issues: Issues
    by_key: dict[str, _Response] = field(default_factory=dict)
    local: set[str] = field(default_factory=set)
    calls: dict[str, tuple[object, int, int]] = field(default_factory=dict)  # id -> (name as given, cycle, framing)
    tools: list[dict] = field(default_factory=list)
    callers: list[int | None] = field(default_factory=list)

    def add(
        self,
        line: int,
        message_id: object,
        request_id: object,
        model: object,
        usage: object,
        content: Content,
        sidechain: bool,
        timestamp: object,
        turn: int | None = None,
        tokens: dict[object, int] | None = None,
    ) -> _Response:
        """One assistant line: a new response, or another line of one already seen (``content``: its blocks;
        ``tokens``: their ``o200k_base`` counts by piece key, where counted, ``block_tokens``)."""
        ident = message_id or request_id
        key = str(ident) if ident else f"line {line}"
        resp = self.by_key.get(key)
        if resp is None:
            if not ident:
                self.local.add(key)
            resp = _Response(
                cycle=len(self.by_key),
                first_line=line,
                last_line=line,
                usage_line=line,
                usage=usage,
                output=_output(usage),
                model=model if isinstance(model, str) else None,
                started_at=timestamp if isinstance(timestamp, str) else None,
                sidechain=sidechain,
                turn=turn,
                o200k=None if tokens is None else {},
            )
            self.by_key[key] = resp
        else:
            resp.last_line = line
            resp.sidechain = resp.sidechain and sidechain
            if type(usage) is dict and (output := _output(usage)) >= resp.output:
                resp.usage, resp.usage_line, resp.output = usage, line, output
        for ident, name, framed in content.calls:
            if ident not in resp.tool_use_ids:
                resp.tool_use_ids.append(ident)
                self.calls[str(ident)] = (name, resp.cycle, framed)
        if content.pieces is None:
            resp.pieces = None
        elif resp.pieces is not None:
            resp.pieces.update(content.pieces)
        if tokens is None:
            resp.o200k = None
        elif resp.o200k is not None:
            resp.o200k.update(tokens)
        return resp

    def final_output(self, key: str, output: int) -> None:
        """A streamed response's final output count (stream-json ``message_delta``), where it is larger."""
        resp = self.by_key.get(key)
        if resp is not None:
            resp.output = max(output, resp.output, 0)
            resp.usage = as_dict(resp.usage) | {"output_tokens": resp.output}

    def add_results(self, content: object) -> None:
        """Tool results of a user line; each goes to the request after the response that called it."""
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            call = self.calls.get(str(block.get("tool_use_id")))
            name, cycle, _ = call or (None, len(self.by_key) - 1, None)
            text, error = text_of(block.get("content")), block.get("is_error") is True
            sizes = result_block(block, "content", text)
            self.tools.append(result_row(cycle + 1, name, len(text), error, block=sizes, path=str(self.path)))
            self.callers.append(None if call is None else call[1])

    def rows(self) -> list[dict]:
        rows, path = [], str(self.path)
        for resp in self.by_key.values():
            try:
                usage = _usage.anthropic(resp.usage)
            except _usage.UsageError as exc:
                self.issues.add(self.path, resp.usage_line, f"{exc}; usage of this response unknown")
                usage = _usage.unknown()
            rows.append(
                {
                    "cycle": resp.cycle,
                    "turn": resp.turn,
                    "backend": BACKEND,
                    "model": resp.model,
                    "source_format": self.fmt,
                    "source_path": path,
                    "source_line": resp.last_line,
                    **usage,
                    "tool_calls": len(resp.tool_use_ids),
                    "output_chars": None if resp.pieces is None else sum(resp.pieces.values()),
                    "output_framing_chars": self._framing(resp.pieces),
                    "output_o200k_tokens": _o200k(resp),
                    "started_at": resp.started_at,
                }
            )
        return rows

    def _framing(self, pieces: dict[object, int] | None) -> int | None:
        """Framing characters of a response's blocks (``kit.framing.block_framing``): a call's measured on its block
        (``calls``), a text or thinking block's its kind's; unknown where its output is."""
        if pieces is None:
            return None
        total = 0
        for key in pieces:  # (kind, id, ...): ``text_key``, ``tool_piece``
            kind, ident = key[:2] if isinstance(key, tuple) else (None, None)
            call = self.calls.get(str(ident)) if kind == "tool_use" else None
            total += call[2] if call is not None else BLOCK_FRAMING.get(kind, 0)
        return total

    def sidechain_ids(self) -> list[dict]:
        return [
            {"source_path": str(self.path), "cycle": r.cycle, "message_id": key}
            for key, r in self.by_key.items()
            if r.sidechain
        ]


def keep_rank(resp: _Response) -> tuple[bool, int]:
    """How one file's copy of a response ranks against another file's: the parent's own copy (not a
    sidechain) first, then the larger output, as within a file."""
    return not resp.sidechain, resp.output


def is_synthetic(model: object, api_error: object) -> bool:
    """Claude Code's own stand-in for a failed request (model ``<synthetic>``): not an API response."""
    return model == "<synthetic>" or api_error is True


def file_role(path: Path) -> str:
    """Whose window a Claude Code file's responses fill: it writes subagents to ``subagents/agent-*.jsonl`` and
    compaction requests to ``agent-acompact-*`` (``Reader.role``)."""
    if path.name.startswith("agent-acompact"):
        return COMPACTION
    return "subagent" if path.name.startswith("agent-") or path.parent.name == "subagents" else MAIN
