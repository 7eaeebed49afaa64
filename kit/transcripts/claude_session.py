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

from collections.abc import Sequence
from pathlib import Path

from kit.transcripts._base import Issues, Parsed, as_dict, file_summary, json_lines, text
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


def read(paths: Sequence[Path], issues: Issues) -> Parsed:
    out = Parsed()
    for path in paths:
        out.extend(_read_file(path, issues))
    return out


def _read_file(path: Path, issues: Issues) -> Parsed:
    responses = Responses(path, FORMAT, issues)
    out = Parsed()
    version = None
    for number, line in json_lines(path, issues):
        kind = text(line.get("type"))
        version = line.get("version") or version
        if kind == "assistant":
            message = line.get("message")
            if not isinstance(message, dict):
                issues.add(path, number, "assistant line without a message object; line skipped")
            elif is_synthetic(message, line):
                out.attrs["events"].append(_event(path, number, responses, "api_error", line, message=message))
            else:
                sidechain = line.get("isSidechain") is True
                responses.add(number, message, line.get("requestId"), sidechain, line.get("timestamp"))
        elif kind == "user":
            responses.add_results(as_dict(line.get("message")).get("content"))
        elif kind == "system":
            out.attrs["events"].append(_event(path, number, responses, f"system:{line.get('subtype')}", line))
        elif kind == "cost-state":
            out.attrs["events"].append(_event(path, number, responses, "cost-state", line))
        elif kind not in BOOKKEEPING:
            issues.unknown_type(path, number, kind)
    out.rows = responses.rows()
    out.tools = responses.tools
    out.attrs["sidechain_ids"] = responses.sidechain_ids()
    out.attrs["files"].append(file_summary(path, FORMAT, out.rows, cli_version=version))
    return out


def _event(path: Path, number: int, responses: Responses, kind: str, line: dict, message: dict | None = None) -> dict:
    """An event in transcript order; ``cycle`` is the next response's, i.e. the first request after it."""
    keep = ("compactMetadata", "microcompactMetadata", "logicalParentUuid", "level", "totalCostUSD", "modelUsage")
    detail = {k: line[k] for k in keep if k in line}
    if message is not None:
        detail["text"] = str(message.get("content"))[:500]
    return {
        "source_path": str(path),
        "source_line": number,
        "cycle": len(responses.by_key),
        "kind": kind,
        "timestamp": line.get("timestamp"),
        "detail": detail,
    }
