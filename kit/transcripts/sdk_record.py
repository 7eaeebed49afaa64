"""The kit's own SDK agents' response records (``sdk_responses.jsonl``, written by ``kit.agents.sdk``).

Each line holds an API response body as the client received it, so its usage follows that API's own
convention: Responses and Chat Completions count cached and written tokens inside the input,
Messages adds them on top. ``api`` on the line says which, and picks the mapping in ``_usage``.
A response body holds no tool results (those travel in the next request): the provider log has them.
It does hold what the model wrote, so ``output_chars`` is counted from it (``output_chars``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kit.framing import block_tokens, response_framing
from kit.transcripts import _usage
from kit.transcripts._base import (
    Issues,
    Parsed,
    Reader,
    as_dict,
    as_list,
    file_summary,
    int_or_none,
    json_lines,
    sum_or_none,
    text,
)
from kit.transcripts._claude import content_of

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


def _texts(parts: object) -> int:
    """Characters of the ``text`` of each part (a list of parts; absent is none)."""
    return sum(len(t) for p in as_list(parts) if isinstance(t := as_dict(p).get("text"), str))


def _string(value: object) -> int | None:
    return len(value) if isinstance(value, str) else None


def _responses_item(item: dict) -> int | None:
    """Characters of one Responses output item; None for a hosted tool's call, given as its action only."""
    kind = item.get("type")
    if kind == "message":  # an output_text part has ``text``, a refusal its ``refusal``
        parts = [as_dict(p) for p in as_list(item.get("content"))]
        return sum(len(v) for p in parts for k in ("text", "refusal") if isinstance(v := p.get(k), str))
    if kind == "reasoning":
        return _texts(item.get("summary")) + _texts(item.get("content"))
    if kind == "function_call":
        return _string(item.get("arguments"))
    if kind == "custom_tool_call":
        return _string(item.get("input"))
    return None


def output_chars(api: str, response: dict) -> int | None:
    """Characters the model wrote in a response body: text, visible reasoning, tool-call arguments as sent
    (Messages: the input's compact JSON); None where a part of it is not shown as text."""
    if api == "responses":
        sizes = [_responses_item(as_dict(i)) for i in as_list(response.get("output"))]
        return sum_or_none(sizes)
    if api == "chat":
        choices = as_list(response.get("choices")) or [{}]
        message = as_dict(as_dict(choices[0]).get("message"))
        content = message.get("content")
        chars = len(content) if isinstance(content, str) else _texts(content)
        chars += sum(_string(message.get(k)) or 0 for k in ("refusal", "reasoning_content"))
        calls = [as_dict(as_dict(c).get("function")) for c in as_list(message.get("tool_calls"))]
        arguments = [_string(f.get("arguments")) for f in calls]
        written = sum_or_none(arguments)
        return None if written is None else chars + written
    pieces = content_of(response.get("content")).pieces
    return None if pieces is None else sum(chars for _, chars in pieces)


def _blocks(api: str, response: dict) -> list[object]:
    """The response's blocks: Responses output items, the Messages content blocks, the Chat message."""
    if api == "responses":
        return as_list(response.get("output"))
    if api == "chat":
        choices = as_list(response.get("choices")) or [{}]
        return [as_dict(as_dict(choices[0]).get("message"))]
    return as_list(response.get("content"))


def output_framing(api: str, response: dict) -> int:
    """Characters of the response's blocks besides what the model wrote (``kit.framing.response_framing``)."""
    return response_framing(_blocks(api, response))


def _sent(value: object) -> object:
    """``value`` as the SDK agents send a block back: its null keys left out, at any depth (the SDKs' models
    are dumped without unset values), where the body as received spells them out."""
    if isinstance(value, dict):
        return {k: _sent(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_sent(v) for v in value]
    return value


def output_tokens(api: str, response: dict) -> int:
    """``o200k_base`` tokens of the response's blocks as sent back (``_sent``, ``kit.framing.block_tokens``)."""
    blocks = [_sent(block) for block in _blocks(api, response)]
    return sum(block_tokens(block) for block in blocks if isinstance(block, dict))


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
                    "output_chars": output_chars(api, response),
                    "output_framing_chars": output_framing(api, response),
                    "output_o200k_tokens": output_tokens(api, response) if tools else None,
                    "started_at": line.get("started_at"),
                    "wall_s": wall if isinstance(wall, int | float) else None,
                }
            )
        out.rows += rows
        out.attrs["files"].append(file_summary(path, FORMAT, rows))
    if not tools:
        out.tools = []
    return out


def judge(line: dict) -> bool:
    """A response record of the kit's SDK agents: its ``kit_sdk`` version (``kit.agents.sdk``)."""
    return line.get("kit_sdk") is not None


READER = Reader(FORMAT, judge, read)
