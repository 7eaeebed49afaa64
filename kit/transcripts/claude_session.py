"""Claude Code session files (``~/.claude/projects/<dir>/<session>.jsonl``, and ``subagents/agent-*.jsonl``).

One row per API response, deduped by ``message.id`` (see ``_claude``). Responses whose lines are all
``isSidechain`` (subagents, compaction requests) stay rows, because they cost tokens, and are listed in
``attrs["sidechain_ids"]`` so the occupancy analysis can keep them out of the parent's context.
``system`` lines (``compact_boundary`` with its ``compactMetadata``, …), Claude Code's ``cost-state``
and its synthetic error messages go to ``attrs["events"]``; bookkeeping lines (``api-request``,
snapshots, progress, …) are read past. The CLI's ``output_tokens`` may be a partial streaming snapshot
(v2.1.29 writes 1 on every line); this file cannot know better, the stream-json ``result`` can.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from kit.transcripts._base import Issues, Parsed, file_summary, records, text
from kit.transcripts._claude import Responses, is_synthetic

FORMAT = "claude_session"

# Line types Claude Code writes that carry no request usage (seen in CLI 2.1.x files and its docs).
BOOKKEEPING = {
    "queue-operation",
    "file-history-snapshot",
    "progress",
    "summary",
    "attachment",
    "atis-latch",
    "api-request",
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
    content: msgspec.Raw = msgspec.Raw(b"null")  # decoded only where it holds tool calls or results


RENAME = {"request_id": "requestId", "sidechain": "isSidechain", "api_error": "isApiErrorMessage"}


class _Line(msgspec.Struct, rename=RENAME, gc=False):
    """The fields of a session line the reader uses; the rest (text, thinking, tool output) is only checked."""

    type: Any = None
    version: Any = None
    message: _Message | None = None
    request_id: Any = None
    sidechain: Any = None
    api_error: Any = None
    timestamp: Any = None
    subtype: Any = None
    compactMetadata: Any = msgspec.UNSET
    microcompactMetadata: Any = msgspec.UNSET
    logicalParentUuid: Any = msgspec.UNSET
    level: Any = msgspec.UNSET
    totalCostUSD: Any = msgspec.UNSET
    modelUsage: Any = msgspec.UNSET


DECODER = msgspec.json.Decoder(_Line)
TOOL_USE, TOOL_RESULT = re.compile(rb'"tool_use"'), re.compile(rb'"tool_result"')


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    out = Parsed()
    for path in paths:
        out.extend(_read_file(path, issues, tools))
    return out


def _blocks(raw: msgspec.Raw, marker: re.Pattern[bytes]) -> object:
    """A message's content blocks where ``marker`` occurs in them, else None (most content is only text)."""
    return msgspec.json.decode(raw) if marker.search(raw) else None


def _read_file(path: Path, issues: Issues, tools: bool) -> Parsed:
    responses = Responses(path, FORMAT, issues)
    out = Parsed()
    version = None
    for number, line in records(path, issues, DECODER):
        kind, message = text(line.type), line.message
        version = line.version or version
        if kind == "assistant":
            if message is None:
                issues.add(path, number, "assistant line without a message object; line skipped")
            elif is_synthetic(message.model, line.api_error):
                out.attrs["events"].append(_event(path, number, responses, "api_error", line, message))
            else:
                content = _blocks(message.content, TOOL_USE)
                sidechain = line.sidechain is True
                usage, request = message.usage, line.request_id
                responses.add(number, message.id, request, message.model, usage, content, sidechain, line.timestamp)
        elif kind == "user":
            if tools and message is not None:
                responses.add_results(_blocks(message.content, TOOL_RESULT))
        elif kind == "system":
            out.attrs["events"].append(_event(path, number, responses, f"system:{line.subtype}", line))
        elif kind == "cost-state":
            out.attrs["events"].append(_event(path, number, responses, "cost-state", line))
        elif kind not in BOOKKEEPING:
            issues.unknown_type(path, number, kind)
    out.rows = responses.rows()
    out.tools = responses.tools
    out.attrs["sidechain_ids"] = responses.sidechain_ids()
    out.attrs["files"].append(file_summary(path, FORMAT, out.rows, cli_version=version))
    return out


def _event(
    path: Path, number: int, responses: Responses, kind: str, line: _Line, message: _Message | None = None
) -> dict:
    """An event in transcript order; ``cycle`` is the next response's, i.e. the first request after it."""
    detail = {k: value for k in KEEP if (value := getattr(line, k)) is not msgspec.UNSET}
    if message is not None:
        detail["text"] = str(msgspec.json.decode(message.content))[:500]
    return {
        "source_path": str(path),
        "source_line": number,
        "cycle": len(responses.by_key),
        "kind": kind,
        "timestamp": line.timestamp,
        "detail": detail,
    }
