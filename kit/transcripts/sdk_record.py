"""The kit's own SDK agents' response records (``sdk_responses.jsonl``, written by ``kit.agents.sdk``).

Each line holds an API response body as the client received it, so its usage follows that API's own
convention: Responses and Chat Completions count cached and written tokens inside the input,
Messages adds them on top. ``api`` on the line says which, and picks the mapping in ``_usage``.
A response body holds no tool results (those travel in the next request): the provider log has them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kit.transcripts import _usage
from kit.transcripts._base import Issues, Parsed, as_dict, as_list, file_summary, int_or_none, json_lines, text

FORMAT = "sdk_record"
BACKEND = "sdk"
USAGE: dict[str, Callable[[object], dict]] = {
    "responses": _usage.openai_responses,
    "chat": _usage.openai_chat,
    "messages": _usage.anthropic,
}


def tool_calls(api: str, response: dict) -> int:
    """Tool calls a response asks for, in that API's shape."""
    if api == "responses":
        return sum(str(as_dict(i).get("type", "")).endswith("_call") for i in as_list(response.get("output")))
    if api == "chat":
        choices = as_list(response.get("choices")) or [{}]
        return len(as_list(as_dict(as_dict(choices[0]).get("message")).get("tool_calls")))
    return sum(as_dict(b).get("type") in ("tool_use", "server_tool_use") for b in as_list(response.get("content")))


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of ``paths``; tool-result rows only with ``tools`` (this format has few, so they cost little)."""
    out = Parsed()
    for path in paths:
        rows: list[dict] = []
        for number, line in json_lines(path, issues):
            api, response = text(line.get("api")), line.get("response")
            if line.get("kit_sdk") != 1 or api not in USAGE or not isinstance(response, dict):
                reason = 'expected {"kit_sdk": 1, "api": responses|chat|messages, "response": {...}}; line skipped'
                issues.add(path, number, reason)
                continue
            try:
                usage = USAGE[api](response.get("usage"))
            except _usage.UsageError as exc:
                issues.add(path, number, f"{exc}; usage of this response unknown")
                usage = _usage.unknown()
            wall = line.get("wall_s")
            rows.append(
                {
                    "turn": int_or_none(line.get("turn")),
                    "cycle": len(rows),
                    "backend": BACKEND,
                    "model": response.get("model"),
                    "source_format": FORMAT,
                    "source_path": str(path),
                    "source_line": number,
                    **usage,
                    "tool_calls": tool_calls(api, response),
                    "started_at": line.get("started_at"),
                    "wall_s": wall if isinstance(wall, int | float) else None,
                }
            )
        out.rows += rows
        out.attrs["files"].append(file_summary(path, FORMAT, rows))
    if not tools:
        out.tools = []
    return out
