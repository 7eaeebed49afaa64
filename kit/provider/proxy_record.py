"""What the recording proxy logs about a model request, read off the bytes that pass through it.

The proxy (``proxy_server``) forwards bytes unchanged; this module only reads copies of them, so a
request or response the kit cannot read is still delivered (its log line then says less). The
request body gives the model, the cache key and retention and the prompt segments, cut by the very
functions the embedded provider uses (``server.APIS``: one ``PromptCounter`` method per API), so the
structural cache model sees the same hashes whichever served a request (docs/method.md#structural-cache).
The response gives the usage the provider reported, verbatim (``wire_usage``) and in the kit's
convention (``usage``, docs/method.md#conventions), the response id and the number of tool calls: from
the JSON body, or from the SSE events as they stream past (Responses ``response.completed``, Chat's
chunk carrying ``usage``, Anthropic ``message_start`` updated by ``message_delta``).

The mapping to canonical counts repeats ``kit.transcripts._usage`` on purpose: the provider never
imports the readers (docs/design.md, "Who imports whom"), and the log it writes is already canonical.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from kit.jsontypes import JsonObject
from kit.provider.prompt import PromptCounter
from kit.provider.server import APIS, new_tool_results

# Model endpoints by how the path ends: a gateway or Azure puts its own prefix before them.
_ENDINGS = (("/chat/completions", "chat"), ("/responses", "responses"), ("/messages", "messages"))
_BY_NAME = {api.name: api for api in APIS}
# Responses output items that ask the client to run something (hosted tools such as web search do not).
CLIENT_CALLS = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call", "computer_call"}
)
_FINAL_RESPONSES = frozenset({"response.completed", "response.incomplete", "response.failed"})
DECODABLE = ("gzip", "deflate", "identity")  # response content-codings the reader can undo (stdlib zlib)


def api_of(method: str, path: str) -> str | None:
    """The model API a request speaks (the log's ``api``), or None for anything else (models list, token count)."""
    if method != "POST":
        return None
    return next((api for ending, api in _ENDINGS if path.endswith(ending)), None)


def read_request(api: str, raw: bytes, counter: PromptCounter) -> JsonObject:
    """The request's log fields; what cannot be read stays null, since the upstream, not the kit, judges a body.

    ``tool_results`` needs the embedded provider's parser, which is stricter than some real APIs: a body it
    rejects is still forwarded and counted, only without its tool results.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(body, dict):
        return {}
    fields: dict[str, Any] = {
        "model": body.get("model") if isinstance(body.get("model"), str) else None,
        "stream": body.get("stream") is True,
        "prompt_cache_key": body.get("prompt_cache_key") if isinstance(body.get("prompt_cache_key"), str) else None,
        "prompt_cache_retention": body.get("prompt_cache_retention"),
    }
    spec = _BY_NAME[api]
    try:
        fields["segments"] = [[s.digest, s.tokens, s.breakpoint] for s in spec.segments(counter, body)]
    except Exception:  # a shape the segmenter does not know: forwarded all the same, logged without segments
        return fields
    with contextlib.suppress(Exception):  # see the docstring: the simulator's parser refuses what a real API may accept
        conversation = spec.parse(body).conversation
        fields["tools"] = sorted(conversation.tool_names())
        fields["tool_results"] = new_tool_results(conversation, body)
    return fields


def narrow_accept_encoding(value: str) -> str:
    """``accept-encoding`` limited to codings the reader can undo (else usage in a brotli body would be lost)."""
    kept = [part.strip() for part in value.split(",") if part.split(";")[0].strip().lower() in DECODABLE]
    return ", ".join(kept) or "identity"


def _count(usage: Mapping, key: str) -> int | None:
    value = usage.get(key)
    return value if type(value) is int and value >= 0 else None


def _part(usage: Mapping, key: str) -> Mapping:
    value = usage.get(key)
    return value if isinstance(value, Mapping) else {}


def canonical_usage(api: str, wire: object) -> dict[str, int | None] | None:
    """A wire usage object in the log's convention: ``input_tokens`` holds every prompt token; null = not reported."""
    if not isinstance(wire, Mapping):
        return None
    if api == "messages":  # Anthropic adds cache reads and writes on top of input_tokens
        breakdown = _part(wire, "cache_creation")
        write = _count(wire, "cache_creation_input_tokens")
        if write is None and breakdown:
            write = (_count(breakdown, "ephemeral_5m_input_tokens") or 0) + (
                _count(breakdown, "ephemeral_1h_input_tokens") or 0
            )
        read, rest = _count(wire, "cache_read_input_tokens"), _count(wire, "input_tokens")
        return {
            "input_tokens": None if rest is None else rest + (write or 0) + (read or 0),
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "cache_write_1h_tokens": _count(breakdown, "ephemeral_1h_input_tokens"),
            "output_tokens": _count(wire, "output_tokens"),
            "reasoning_tokens": _count(_part(wire, "output_tokens_details"), "thinking_tokens"),
        }
    prompt, output = ("prompt", "completion") if api == "chat" else ("input", "output")
    details = _part(wire, f"{prompt}_tokens_details")
    return {
        "input_tokens": _count(wire, f"{prompt}_tokens"),
        "cache_read_tokens": _count(details, "cached_tokens"),
        "cache_write_tokens": _count(details, "cache_write_tokens"),
        "cache_write_1h_tokens": None,
        "output_tokens": _count(wire, f"{output}_tokens"),
        "reasoning_tokens": _count(_part(wire, f"{output}_tokens_details"), "reasoning_tokens"),
    }


class ResponseReader:
    """Reads one model response as it passes: undoes gzip/deflate on a copy, splits SSE events, keeps the
    response id, the usage, the tool calls and any error the provider reported.

    ``feed`` says when the stream's final event has gone by, so the proxy can write the log line before
    that chunk leaves (as the embedded provider does: a client that has its answer finds the line written).
    """

    def __init__(self, api: str, content_type: str, content_encoding: str):
        self.api = api
        self.sse = content_type.split(";")[0].strip().lower() == "text/event-stream"
        self.response_id: str | None = None
        self.wire_usage: dict | None = None
        self.tool_calls: int | None = None
        self.error: str | None = None  # what the provider said went wrong (its error type and code)
        self.final = False  # the stream's last event was read
        self.size = 0  # bytes passed (as sent, before decoding)
        self._calls: set[tuple[Any, Any]] = set()  # Chat streams: (choice index, call index)
        self._pending = b""  # decoded bytes not yet split into events / the JSON body so far
        coding = content_encoding.strip().lower()
        self._readable = coding in ("", *DECODABLE)  # False: passed on, not read
        self._decoder: Any = None
        if coding == "gzip":
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._decoder = zlib.decompressobj()
        elif not self._readable:
            self.error = f"response content-encoding {coding!r} not read: usage unknown"

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk as sent; True once the stream's final event is in."""
        self.size += len(chunk)
        if not self._readable:
            return False
        try:
            data = self._decoder.decompress(chunk) if self._decoder else chunk
        except zlib.error as exc:
            self.error, self._readable, self._pending = f"response body not decodable: {exc}", False, b""
            return False
        self._pending += data
        if self.sse:
            self._pending = self._pending.replace(b"\r\n", b"\n")
            *events, self._pending = self._pending.split(b"\n\n")
            for event in events:
                self._event(event)
        return self.final

    def finish(self, status: int) -> None:
        """The body is complete: read a JSON answer (or an error body), or the SSE tail without a blank line."""
        if self.sse:
            if self._pending.strip():
                self._event(self._pending)
            if not self.final and status == 200 and self.error is None:
                self.error = f"stream ended before its final event ({self.size} bytes)"
            return
        try:
            body = orjson.loads(self._pending)
        except orjson.JSONDecodeError:
            return
        if isinstance(body, dict):
            self._json(body, status)

    def _event(self, block: bytes) -> None:
        data = b"\n".join(line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))
        if data == b"[DONE]":  # Chat's last event
            self.final = True
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(event, dict):
            {"responses": self._responses_event, "chat": self._chat_chunk, "messages": self._messages_event}[self.api](
                event
            )

    def _responses_event(self, event: dict) -> None:
        kind = event.get("type")
        response = _dict_at(event, "response")
        if kind == "response.created":
            self.response_id = response.get("id")
        elif kind in _FINAL_RESPONSES:
            self._responses_object(response)
            self.final = True
            if kind != "response.completed":
                self.error = f"{kind}: {_error_kind(response.get('error') or response.get('incomplete_details'))}"
        elif kind == "error":
            self.error = f"stream error event: {_error_kind(event.get('error') or event)}"

    def _responses_object(self, response: dict) -> None:
        self.response_id = response.get("id") or self.response_id
        self.wire_usage = response.get("usage")
        output = _list_at(response, "output")
        self.tool_calls = sum(1 for item in output if isinstance(item, dict) and item.get("type") in CLIENT_CALLS)

    def _chat_chunk(self, chunk: dict) -> None:
        self.response_id = self.response_id or chunk.get("id")
        if isinstance(chunk.get("usage"), dict):
            self.wire_usage = chunk["usage"]
        if isinstance(chunk.get("error"), dict):
            self.error = f"stream error event: {_error_kind(chunk['error'])}"
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            for call in (delta or {}).get("tool_calls") or []:
                if isinstance(call, dict):
                    self._calls.add((choice.get("index"), call.get("index")))
        self.tool_calls = len(self._calls)

    def _messages_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            self.response_id = message.get("id")
            self.wire_usage = dict(message.get("usage") or {})
            self.tool_calls = 0
        elif kind == "content_block_start" and (event.get("content_block") or {}).get("type") == "tool_use":
            self.tool_calls = (self.tool_calls or 0) + 1
        elif kind == "message_delta" and isinstance(event.get("usage"), dict):
            # message_delta's counts are cumulative and win; fields it leaves null keep message_start's
            self.wire_usage = {**(self.wire_usage or {}), **{k: v for k, v in event["usage"].items() if v is not None}}
        elif kind == "message_stop":
            self.final = True
        elif kind == "error":
            self.error = f"stream error event: {_error_kind(event.get('error'))}"

    def _json(self, body: dict, status: int) -> None:
        if status != 200:
            self.error = _error_kind(body.get("error"))
            return
        self.response_id = body.get("id")
        self.wire_usage = body.get("usage")
        if self.api == "responses":
            self._responses_object(body)
        elif self.api == "chat":
            choices = [c for c in body.get("choices") or [] if isinstance(c, dict)]
            self.tool_calls = sum(len((c.get("message") or {}).get("tool_calls") or []) for c in choices)
        else:
            blocks = _list_at(body, "content")
            self.tool_calls = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use")


def _dict_at(mapping: dict, key: str) -> dict:
    """``mapping[key]`` if it is an object, else an empty one."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _list_at(mapping: dict, key: str) -> list:
    """``mapping[key]`` if it is an array, else an empty one."""
    value = mapping.get(key)
    return value if isinstance(value, list) else []


def _error_kind(error: object) -> str:
    """An error's type and code, never its message: providers quote part of a rejected key in the message."""
    if not isinstance(error, dict):
        return "no error details"
    kinds = [str(error[k]) for k in ("type", "code", "reason") if isinstance(error.get(k), str | int)]
    return "/".join(kinds) or "no error details"
