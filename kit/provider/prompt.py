"""A request body -> the prompt as cache segments, in provider prefix order, with real token counts.

Prefix order is what providers render: tool definitions, then the system / instructions, then the
conversation. Each tool definition, system block, content block and (non-message) input item is one
``Segment``, so a cached prefix always ends at a block boundary and a breakpoint belongs to a block.

Token counts use tiktoken ``o200k_base`` for every API. That is the real tokenizer of the current
OpenAI models; Claude's tokenizer is not public, so Anthropic counts are an o200k approximation.
What is counted is a canonical rendering of exactly what the client sent: the block's JSON skeleton
(keys and short values) followed by its long strings as plain text, so prose and code are tokenised
as text rather than as JSON-escaped strings. Inline images and base64 files count a flat
``IMAGE_TOKENS`` each (pixels are not decoded; a simulation, not the providers' image formulas).

Agents resend the whole history every request, so a block is tokenised once: counts are kept in a
bounded LRU keyed by the block digest, and a long session costs time proportional to what is new.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from kit.errors import KitError
from kit.provider.cache import Segment
from kit.provider.policy import Conversation
from kit.tokens import encoding

ENCODING = "o200k_base"
IMAGE_TOKENS = 1024
_LONG = 32  # strings longer than this are rendered as plain text, not inside the JSON skeleton
_IMAGE_MIN_CHARS = 1000  # a data: URL this long is an inline image or file, not prose

Wrapped = tuple[str, Any, Any]  # (role or kind, message metadata on a message's first block, block)


class RequestError(KitError, ValueError):
    """A request the API would reject with 400; ``field`` locates the problem in the JSON body."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request: what the policy sees plus what the server needs to answer it."""

    conversation: Conversation
    body: dict
    stream: bool
    prompt_cache_key: str | None = None
    include_usage: bool = False  # Chat Completions ``stream_options.include_usage``
    custom_tools: frozenset[str] = frozenset()  # Responses freeform tools (answered with custom_tool_call)
    # Responses functions inside a ``namespace`` tool (Codex's MCP tools), by the name the policy sees
    # (``<namespace>__<function>``): answered with a function_call naming the function and its namespace
    namespaced: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.conversation.model


class PromptCounter:
    """Turns request bodies into ``Segment`` lists; thread-safe; remembers counts by digest."""

    def __init__(self, max_entries: int = 200_000, encoding_name: str = ENCODING):
        self._encoding = encoding(encoding_name)
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()
        self.encode_calls = 0

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (model output); not memoised, outputs are new by nature."""
        return len(self._encoding.encode_ordinary(text)) if text else 0

    def anthropic(self, body: dict) -> list[Segment]:
        """Messages API: tools, system blocks, message content blocks; ``cache_control`` breakpoints."""
        segments = [self._segment(w, _anthropic_mark(m)) for w, m in _anthropic_blocks(body)]
        if isinstance(body.get("cache_control"), dict) and segments:
            # Automatic caching: the breakpoint goes on the last block (unless that block has one).
            last = segments[-1]
            if last.breakpoint is None:
                segments[-1] = Segment(last.digest, last.tokens, _anthropic_mark(body))
        return segments

    def responses(self, body: dict) -> list[Segment]:
        """Responses API: tools, output format, instructions, input items (message parts split)."""
        return [self._segment(w, _openai_mark(m)) for w, m in _responses_blocks(body)]

    def chat(self, body: dict) -> list[Segment]:
        """Chat Completions: tools, response format, then every message's parts and tool calls."""
        return [self._segment(w, _openai_mark(m)) for w, m in _chat_blocks(body)]

    def _segment(self, wrapped: Wrapped, breakpoint: str | None) -> Segment:
        key = hashlib.blake2b(orjson.dumps(wrapped, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()
        with self._lock:
            tokens = self._counts.get(key)
            if tokens is not None:
                self._counts.move_to_end(key)
        if tokens is None:
            tokens = self._count_block(wrapped)
            with self._lock:
                self._counts[key] = tokens
                if len(self._counts) > self._max:
                    self._counts.popitem(last=False)
        return Segment(key.hex(), tokens, breakpoint)

    def _count_block(self, wrapped: Wrapped) -> int:
        role, meta, block = wrapped
        texts: list[str] = []
        images = [0]
        lines = [role] if meta is not None else []  # a message boundary renders its role
        if meta:
            lines.append(orjson.dumps(_strip(meta, texts, images)).decode())
        if block is not None:
            lines.append(orjson.dumps(_strip(block, texts, images)).decode())
        with self._lock:
            self.encode_calls += 1
        return len(self._encoding.encode_ordinary("\n".join(lines + texts))) + IMAGE_TOKENS * images[0]


def _strip(obj: Any, texts: list[str], images: list[int]) -> Any:
    """The JSON skeleton of ``obj``; long strings move to ``texts``; inline image/file data is counted apart."""
    if isinstance(obj, str):
        if len(obj) <= _LONG:
            return obj
        if len(obj) >= _IMAGE_MIN_CHARS and obj.startswith("data:"):
            images[0] += 1
        else:
            texts.append(obj)
        return ""
    if isinstance(obj, dict):
        if obj.get("type") == "base64" and isinstance(obj.get("data"), str):
            images[0] += 1
            obj = {k: v for k, v in obj.items() if k != "data"}
        return {k: _strip(v, texts, images) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip(v, texts, images) for v in obj]
    return obj


def _without(block: Any, key: str) -> Any:
    """``block`` minus a cache marker: moving a breakpoint must not change the prefix identity."""
    if isinstance(block, dict) and key in block:
        return {k: v for k, v in block.items() if k != key}
    return block


def _anthropic_mark(block: Any) -> str | None:
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(control, dict):
        return None
    return "1h" if control.get("ttl") == "1h" else "5m"


def _openai_mark(block: Any) -> str | None:
    marker = block.get("prompt_cache_breakpoint") if isinstance(block, dict) else None
    return "explicit" if isinstance(marker, dict) else None


def _parts(content: Any, text_type: str) -> list[Any]:
    """Message content as a list of blocks (a plain string is one text block, as providers treat it)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": text_type, "text": content}]
    return list(content) if isinstance(content, list) else [content]


def _message(role: str, meta: dict, parts: list[Any], marker: str) -> Iterator[tuple[Wrapped, Any]]:
    """One wrapped block per part; the first carries the message's role metadata (its boundary)."""
    if not parts:
        yield (role, meta, None), None
    for i, part in enumerate(parts):
        yield (role, meta if i == 0 else None, _without(part, marker)), part


def _loaded(body: dict) -> list[Any]:
    """Tool definitions rendered into the prompt: ``defer_loading`` ones stay out until a tool search loads them."""
    return [t for t in body.get("tools") or [] if not (isinstance(t, dict) and t.get("defer_loading") is True)]


def _anthropic_blocks(body: dict) -> Iterator[tuple[Wrapped, Any]]:
    for tool in _loaded(body):
        yield ("tool", None, _without(tool, "cache_control")), tool
    yield from _message("system", {}, _parts(body.get("system"), "text"), "cache_control")
    for message in body.get("messages") or []:
        yield from _message(message["role"], {}, _parts(message.get("content"), "text"), "cache_control")


def _responses_blocks(body: dict) -> Iterator[tuple[Wrapped, Any]]:
    marker = "prompt_cache_breakpoint"
    for tool in _loaded(body):
        yield ("tool", None, tool), tool
    text_format = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        yield ("format", None, text_format), text_format
    if body.get("instructions"):
        yield from _message("instructions", {}, _parts(body["instructions"], "input_text"), marker)
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        if (item.get("type") or "message") == "message":
            meta = {k: v for k, v in item.items() if k not in ("role", "content")}
            yield from _message(item["role"], meta, _parts(item.get("content"), "input_text"), marker)
        else:
            yield (item.get("type", "item"), None, item), item


def _chat_blocks(body: dict) -> Iterator[tuple[Wrapped, Any]]:
    marker = "prompt_cache_breakpoint"
    for tool in _loaded(body):
        yield ("tool", None, tool), tool
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        yield ("format", None, response_format), response_format
    for message in body["messages"]:
        meta = {k: v for k, v in message.items() if k not in ("role", "content", "tool_calls")}
        parts = _parts(message.get("content"), "text") + [
            {"type": "tool_call", **call} for call in message.get("tool_calls") or []
        ]
        yield from _message(message["role"], meta, parts, marker)


_TYPE_NAMES = {str: "a string", list: "an array", dict: "an object", bool: "a boolean", int: "an integer"}


def expect(value: Any, kind: type | tuple[type, ...], field: str, *, required: bool = True) -> Any:
    """``value`` if it has the JSON type ``kind``; else a ``RequestError`` naming ``field``."""
    if value is None:
        if required:
            raise RequestError(field, "required field is missing")
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise RequestError(field, f"expected {' or '.join(_TYPE_NAMES[k] for k in kinds)}, got {type(value).__name__}")
    return value
