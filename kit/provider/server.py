"""The embedded provider's HTTP server: OpenAI Responses, Chat Completions and Anthropic Messages.

A Starlette app served by uvicorn in a background thread, bound to loopback. Every model request
goes the same way: parse and validate the body into a ``Conversation``, cut the prompt into token
segments (``prompt``), let the cache engine decide reads and writes for the caller's domain (a hash
of its API key), ask the scripted policy for a reply, render it in the API's own wire format, and
append one line to the request log before the response leaves.

Cache rules: a named profile applies to every route (the run stage always names one, so a batch's
requests follow one profile whatever API its backend speaks). With none named, each API follows its own
provider's rules (``DEFAULT_PROFILES``): an Anthropic client that marks ``cache_control`` breakpoints
sees its writes and reads, an OpenAI client sees implicit caching. Each profile then has its own engine
(OpenAI's two APIs share one, as they share one cache at OpenAI), so the two providers never share entries.

The CPU-bound work of a request (decoding and checking the body, tokenising it, the cache engine, rendering
the answer, counting its tool results) runs in the event loop's default executor, a bounded pool of worker
threads (``min(32, cores + 4)``): a 31 MB body takes tens of seconds to tokenise, and on the event loop it
stalled every other trial's requests for as long. The tokeniser and the engine are locked; the policy alone
is called on the event loop, so requests reach it one at a time and a policy need not be thread-safe.
Response, item and call ids come from a stream seeded by the seed, the caller, the trial and the prompt:
clients send the ids back in later prompts, so random ids would make the same batch (seed, salt) cost a
few tokens more or less on every run.

Everything a request can get wrong becomes an error in that API's shape, logged; the server keeps serving.
That includes a body that is not JSON (a declared non-JSON ``content-type`` gets 415), too large (413),
nested too deep for the renderer or orjson's 254 levels, on a streamed or a JSON answer (400), or sent too
slowly (408 after ``body_timeout_s``: a slow client holds only its own connection). Anything unexpected is a
500 in the API's shape, logged (``ProviderApp._unexpected``), never Starlette's plain-text one. A
connection that never finishes its headers never reaches the app; uvicorn keeps it open without blocking
anyone else.

Fault injection, for tests only and off unless a policy asks: a ``Reply`` whose ``fault`` is ``"drop"``
is rendered, about half of its bytes are sent, and the connection is cut (a provider dropping a stream
mid-response); ``"hang"`` sends nothing until the client gives up (a provider that stops answering).
Both are logged with ``error`` saying so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.errors import InputError, KitError
from kit.framing import result_block
from kit.jsontypes import JsonObject
from kit.provider import wire_anthropic, wire_openai
from kit.provider.cache import BreakpointError, CacheEngine, CacheProfile, CacheResult, load_profile
from kit.provider.log import RequestLog, domain_of, record
from kit.provider.policy import Conversation, EchoPolicy, Policy, Reply
from kit.provider.prompt import ParsedRequest, PromptCounter, RequestError
from kit.provider.service import LoopbackService, bind, discard, launch, temporary_log

MAX_BODY_BYTES = 32 * 1024 * 1024
SIMULATED_HEADER = "x-kit-simulated"  # on every answer: a client (or the recording proxy) can tell it is the kit
BODY_TIMEOUT_S = 30.0
SEEN_PROMPTS = 100_000  # prompts remembered for distinct ids on repeats (~10 MB at most)
# Model names ``/v1/models`` lists, for clients and users that ask which models exist. Any name is answered (the
# scripted policy ignores it); these are the ones the kit uses: sim-agent in every params/*.yaml, sim-ping the
# default of ``python -m kit ping``, sim-model the examples' and tests', sim-gpt / sim-claude per-API names.
MODELS = ("sim-agent", "sim-model", "sim-ping", "sim-gpt", "sim-claude")
# With no profile named, each API follows its own provider's cache rules (keys: the log's "api").
DEFAULT_PROFILES = {"responses": "openai-implicit", "chat": "openai-implicit", "messages": "anthropic"}
CLIENT_KEY = "kit-embedded-placeholder"  # what ``serve`` tells clients to send: any non-empty key works
_TRIAL = re.compile(rb"^/t/([^/]+)(/.*)$")
# The Responses path of the ChatGPT backend, where Codex sends a ChatGPT login's requests (its base URL
# chatgpt.com/backend-api/codex, no /v1): served too, so a batch on a login (kit/agents/login.py) runs offline
# through the recording proxy with this provider as its upstream, on the real endpoint's paths.
CHATGPT_RESPONSES = "/backend-api/codex/responses"
_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Prepared:
    """A request read: its parsed form, its prompt segments and the cache's verdict (before the policy)."""

    parsed: ParsedRequest
    segments: list
    result: CacheResult


@dataclass(frozen=True)
class _Answer:
    """A request answered: the policy's reply, the answer's bytes and the log fields that describe it."""

    reply: Reply
    payload: list[bytes]  # the API's wire format: one JSON body or the SSE frames
    json: bool  # a JSON answer (else SSE frames)
    logged: dict[str, Any]  # status 200's log fields: response id, usage, wire usage, tool calls and results


class HttpError(KitError):
    """A request refused before it is parsed (bad JSON, too large): answered in the API's shape, never raised
    out of the server."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class _Api:
    """One model endpoint: how to read its requests and render a reply in its wire format."""

    name: str  # the log's "api"
    endpoint: str
    parse: Callable[..., ParsedRequest]
    segments: Callable[[PromptCounter, dict], list]
    anthropic: bool = False


_RESPONSES = _Api("responses", "/v1/responses", wire_openai.parse_responses, PromptCounter.responses)
_CHAT = _Api("chat", "/v1/chat/completions", wire_openai.parse_chat, PromptCounter.chat)
_MESSAGES = _Api("messages", "/v1/messages", wire_anthropic.parse_messages, PromptCounter.anthropic, anthropic=True)
APIS = (_RESPONSES, _CHAT, _MESSAGES)  # the model routes, each with its wire module (the proxy records them too)


@dataclass
class _Rendered:
    response_id: str
    wire_usage: dict | None
    body: dict | None = None  # a JSON answer
    frames: list[bytes] = field(default_factory=list)  # or SSE frames


def error_response(
    anthropic: bool, status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """An error in the API's own shape (the provider's and the proxy's: a client's SDK parses it as it would the
    real provider's, so the message reaches the user instead of a JSON decoding error)."""
    body = wire_anthropic.error_body(status, message) if anthropic else wire_openai.error_body(status, message, param)
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def is_anthropic(scope: Scope) -> bool:
    """Whether a request is answered in Anthropic's shape: a Messages path (after any prefix: the proxy's
    gateways, an absolute-form target) or an ``anthropic-version`` header. Read off the scope, since a
    malformed target need not make a URL."""
    return "/v1/messages" in scope["path"] or any(name.lower() == b"anthropic-version" for name, _ in scope["headers"])


def api_key_of(request: Request) -> str:
    """The caller's API key, from ``x-api-key`` (Anthropic) or the bearer token (OpenAI): its hash is the cache
    domain, as a provider's cache is per organisation."""
    auth = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (auth[7:] if auth.lower().startswith("bearer ") else auth)


def _check_content_type(request: Request) -> None:
    """A declared media type must be JSON (``application/json``, ``…+json``); an absent one is read as JSON."""
    declared = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if declared and declared != "application/json" and not declared.endswith("+json"):
        raise HttpError(415, f"content-type {declared!r} is not supported; send application/json")


async def _read_body(request: Request, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> bytes:
    """The body, or a 413 once it exceeds ``limit`` (the rest is drained so the client sees the 413), or a
    408 when it has not fully arrived within ``timeout_s`` (a slow client must not hold a handler forever)."""
    _check_content_type(request)
    declared = request.headers.get("content-length", "")
    too_large = declared.isdigit() and int(declared) > limit
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                too_large = too_large or size > limit
                if not too_large:
                    parts.append(chunk)
    except TimeoutError:
        raise HttpError(408, f"request body not received within {timeout_s:g} s") from None
    if too_large:
        raise HttpError(413, f"request body exceeds the limit of {limit} bytes")
    return b"".join(parts)


def _refusal(exc: Exception) -> tuple[int, str, str | None] | None:
    """The status, message and field a failed request is answered with; None when the failure is unexpected."""
    if isinstance(exc, RecursionError | orjson.JSONEncodeError):  # deeper than the renderer or orjson goes
        return 400, "request body is nested too deeply", None
    if isinstance(exc, HttpError):
        return exc.status, exc.message, None
    if isinstance(exc, RequestError):
        return 400, str(exc), exc.field
    return None


def _load_json(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _result_blocks(body: JsonObject) -> dict[str, tuple[JsonObject, str]]:
    """Each tool result's block as the client sent it, by call id, with the key that holds its content:
    Responses ``function_call_output`` / ``custom_tool_call_output`` items, Messages ``tool_result`` blocks,
    Chat ``tool`` messages."""
    out: dict[str, tuple[JsonObject, str]] = {}
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out[str(item.get("call_id"))] = (item, "output")
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            out[str(message.get("tool_call_id") or message.get("name"))] = (message, "content")
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out[str(block.get("tool_use_id"))] = (block, "content")
    return out


def new_tool_results(conversation: Conversation, body: JsonObject) -> list[dict]:
    """Tool results after the last assistant message: what this request brings new (for the log), with each
    block's framing and ``o200k_base`` tokens as the client sent it (``kit.framing``; None if not found)."""
    last = max((i for i, m in enumerate(conversation.messages) if m.role == "assistant"), default=-1)
    calls, blocks = conversation.calls_by_id(), _result_blocks(body)
    out = []
    for m in conversation.messages[last + 1 :]:
        if m.role != "tool":
            continue
        found = blocks.get(m.tool_call_id) if m.tool_call_id else None
        framing, tokens = result_block(found[0], found[1], m.text) if found else (None, None)
        name = calls[m.tool_call_id].name if m.tool_call_id in calls else None
        out.append({"call_id": m.tool_call_id, "name": name, "chars": len(m.text), "is_error": m.is_error})
        out[-1] |= {"framing_chars": framing, "o200k_tokens": tokens}
    return out


class ProviderApp:
    """The request pipeline behind the routes: engine, tokeniser, policy, log and clock."""

    def __init__(
        self,
        *,
        profile: CacheProfile | None,
        policy: Policy,
        seed: int,
        survival: float,
        capacity_tokens: int,
        clock: Callable[[], float],
        log: RequestLog,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ):
        # The profile in force on each API's route, and one engine per profile (APIs under one share its cache).
        self.profiles = {api.name: profile or load_profile(DEFAULT_PROFILES[api.name]) for api in APIS}
        engines: dict[CacheProfile, CacheEngine] = {}
        for each in self.profiles.values():
            if each not in engines:
                engines[each] = CacheEngine(each, capacity_tokens=capacity_tokens, survival=survival, seed=seed)
        self.engines = {name: engines[each] for name, each in self.profiles.items()}
        self.policy = policy
        self.policy_name = str(getattr(policy, "name", type(policy).__name__))
        self.seed = seed
        self.counter = PromptCounter()
        self.clock = clock
        self.log = log
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # prompt -> times answered (for the id stream)
        self._seen_lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/responses", self._endpoint(_RESPONSES), methods=["POST"]),
                Route(CHATGPT_RESPONSES, self._endpoint(_RESPONSES), methods=["POST"]),
                Route("/v1/chat/completions", self._endpoint(_CHAT), methods=["POST"]),
                Route("/v1/messages", self._endpoint(_MESSAGES), methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ],
            middleware=[Middleware(TrialPrefix)],
            exception_handlers={HTTPException: self._http_exception, Exception: self._unexpected},
        )

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"x-kit-policy": self.policy_name, SIMULATED_HEADER: "true", **(extra or {})}

    async def _http_exception(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        message = f"{getattr(exc, 'detail', 'error')}: {request.method} {request.url.path}"
        return error_response(is_anthropic(request.scope), status, message, headers=self.headers())

    async def _unexpected(self, request: Request, exc: Exception) -> Response:
        """The catch-all: a failure no handler caught is a 500 in the API's shape, with a log line (model
        requests log their own failures in ``handle``; this is for anything else that breaks)."""
        message = f"internal error in the simulated provider: {type(exc).__name__}: {exc}"
        trial = request.scope.get("kit_trial_id") or request.headers.get("x-kit-trial-id")
        line = record(t=self.clock(), endpoint=request.scope["path"], status=500, error=message, trial_id=trial)
        self.log.write(line)
        return error_response(is_anthropic(request.scope), 500, message, headers=self.headers())

    def _endpoint(self, api: _Api) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await self.handle(api, request)

        return endpoint

    async def models(self, request: Request) -> Response:
        if is_anthropic(request.scope):
            data = [{"type": "model", "id": m, "display_name": m, "created_at": "2026-01-01T00:00:00Z"} for m in MODELS]
            body: dict = {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]}
        else:
            body = {
                "object": "list",
                "data": [{"id": m, "object": "model", "created": 0, "owned_by": "agent-ab-kit"} for m in MODELS],
            }
        return Response(orjson.dumps(body), media_type="application/json", headers=self.headers())

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's token counter: the prompt's total tokens, without touching the cache (counted in a
        worker thread, as a model request's prompt is)."""
        try:
            raw = await _read_body(request, self.max_body_bytes, self.body_timeout_s)
            tokens = await asyncio.to_thread(self._count_tokens, raw)
        except Exception as exc:
            if (refused := _refusal(exc)) is None:
                raise  # the catch-all answers it (``_unexpected``)
            return error_response(True, refused[0], refused[1], headers=self.headers())
        return Response(orjson.dumps({"input_tokens": tokens}), media_type="application/json", headers=self.headers())

    def _count_tokens(self, raw: bytes) -> int:
        body = _load_json(raw)
        wire_anthropic.parse_messages(body, require_max_tokens=False)
        return sum(s.tokens for s in self.counter.anthropic(body))

    async def handle(self, api: _Api, request: Request) -> Response:
        """One model request, start to log line; never raises."""
        started = time.perf_counter()
        fields: dict[str, Any] = {
            "t": self.clock(),
            "endpoint": api.endpoint,
            "api": api.name,
            "policy": self.policy_name,
            "profile": self.profiles[api.name].name,
            "domain": domain_of(api_key_of(request)),
            "trial_id": request.scope.get("kit_trial_id") or request.headers.get("x-kit-trial-id"),
        }
        request_id = wire_openai.new_id("req")
        headers = self.headers({"request-id" if api.anthropic else "x-request-id": request_id})
        try:
            answer = await self._answer(api, request, fields)
        except Exception as exc:
            if (refused := _refusal(exc)) is None:
                _LOGGER.exception("provider failed on %s", api.endpoint)
                refused = 500, f"internal error in the simulated provider: {type(exc).__name__}: {exc}", None
            status, message, param = refused
            self._log(fields, started, status=status, error=message)
            return error_response(api.anthropic, status, message, param, headers)
        if answer.reply.fault == "hang":
            self._log(fields, started, status=None, error="fault injected: hang (nothing sent; the client gave up)")
            while not await request.is_disconnected():
                await asyncio.sleep(0.05)
            return Response(status_code=504)  # the client is gone; nothing reads this
        return self._send(answer, fields, started, headers)

    async def _answer(self, api: _Api, request: Request, fields: dict[str, Any]) -> _Answer:
        """Read, segment, cache and answer the request, filling ``fields`` for the log as it goes: the work
        in worker threads, the policy on the event loop (see the module docstring)."""
        raw = await _read_body(request, self.max_body_bytes, self.body_timeout_s)
        prepared = await asyncio.to_thread(self._prepare, api, raw, fields)
        reply = self.policy.reply(prepared.parsed.conversation)
        answer = await asyncio.to_thread(self._finish, api, prepared, reply)
        if isinstance(self.clock, SimulatedClock):
            self.clock.advance(answer.logged["usage"]["output_tokens"])
        return answer

    def _prepare(self, api: _Api, raw: bytes, fields: dict[str, Any]) -> _Prepared:
        """Decode, check and segment the body, and let the cache engine decide (a worker thread's part)."""
        body = _load_json(raw)
        retention = body.get("prompt_cache_retention")
        fields.update(model=body.get("model"), stream=body.get("stream") is True, prompt_cache_retention=retention)
        parsed = api.parse(body, seed=self.seed, trial_id=fields["trial_id"])
        fields["prompt_cache_key"] = parsed.prompt_cache_key
        fields["tools"] = sorted(parsed.conversation.tool_names())  # what the client offered (isolation checks)
        segments = api.segments(self.counter, body)
        fields["segments"] = [[s.digest, s.tokens, s.breakpoint] for s in segments]
        try:
            result = self.engines[api.name].process(
                segments,
                domain=fields["domain"],
                now=fields["t"],
                model=parsed.model,
                routing_key=parsed.prompt_cache_key,
            )
        except BreakpointError as exc:
            raise RequestError("cache_control", str(exc)) from None
        return _Prepared(parsed, segments, result)

    def _finish(self, api: _Api, prepared: _Prepared, reply: Reply) -> _Answer:
        """Render the reply as the bytes to send, and describe it for the log (a worker thread's part; a body
        too deep for orjson fails here, inside ``handle``'s error mapping, on a JSON answer as on a stream)."""
        parsed, result = prepared.parsed, prepared.result
        output_tokens = self._output_tokens(reply)
        with wire_openai.id_stream(self._ids(parsed.conversation.identity(), prepared.segments)):
            rendered = self._render(api, parsed, reply, result, output_tokens)
        payload = [orjson.dumps(rendered.body)] if rendered.body is not None else rendered.frames
        logged = {
            "response_id": rendered.response_id,
            "usage": {
                "input_tokens": result.input_tokens,
                "cache_read_tokens": result.cache_read,
                "cache_write_tokens": result.cache_write,
                "cache_write_1h_tokens": result.cache_write_1h,
                "output_tokens": output_tokens,
                "reasoning_tokens": reply.reasoning_tokens,
            },
            "wire_usage": rendered.wire_usage,
            "tool_calls": len(reply.tool_calls),
            "tool_results": new_tool_results(parsed.conversation, parsed.body),
        }
        return _Answer(reply, payload, rendered.body is not None, logged)

    def _send(self, answer: _Answer, fields: dict[str, Any], started: float, headers: dict[str, str]) -> Response:
        """Log the answer, then send it (cut halfway for an injected drop)."""
        payload, fault = answer.payload, None
        if answer.reply.fault == "drop":
            size = sum(map(len, payload))
            payload = [b"".join(payload)[: size // 2]]
            fault = f"fault injected: connection dropped after {size // 2} of {size} bytes"
        self._log(fields, started, status=200, error=fault, **answer.logged)
        if fault:
            media = "application/json" if answer.json else "text/event-stream"
            return StreamingResponse(_frames(payload, cut=True), media_type=media, headers=headers)
        if answer.json:
            return Response(payload[0], media_type="application/json", headers=headers)
        return StreamingResponse(
            _frames(payload), media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )

    def _ids(self, trial: str, segments: list) -> random.Random:
        """The response's id stream: a function of the seed, the trial (``Conversation.identity``), the whole
        prompt and how often that prompt was seen before, so the same batch (seed, salt) gets the same ids (and so
        the same prompt tokens) when it runs again, directly or through the recording proxy, and no two responses
        share ids (a retry gets new ones). The caller's key is left out: the proxy forwards the user's key where
        the run stage sends the kit's placeholder, and the ids must not tell them apart."""
        key = "|".join([str(self.seed), trial, *(s.digest for s in segments)]).encode()
        digest = hashlib.blake2b(key, digest_size=16).digest()
        with self._seen_lock:
            seen = self._seen.pop(digest, 0)
            self._seen[digest] = seen + 1
            if len(self._seen) > SEEN_PROMPTS:  # bounded: the oldest prompts are forgotten first
                self._seen.popitem(last=False)
        return random.Random(digest + seen.to_bytes(8, "big"))

    def _output_tokens(self, reply: Reply) -> int:
        """Real tokens of the text and each call (name + JSON arguments), plus the hidden reasoning."""
        count = self.counter.count_text
        calls = sum(count(c.name) + count(orjson.dumps(c.arguments).decode()) for c in reply.tool_calls)
        return count(reply.text) + calls + reply.reasoning_tokens

    def _render(
        self, api: _Api, parsed: ParsedRequest, reply: Reply, result: CacheResult, output_tokens: int
    ) -> _Rendered:
        """The reply in the API's wire format, JSON or SSE frames, with its usage object."""
        reasoning = reply.reasoning_tokens
        if api is _RESPONSES:
            usage = wire_openai.responses_usage(result, output_tokens, reasoning)
            items = wire_openai.responses_items(reply, parsed.custom_tools, parsed.namespaced)
            final = wire_openai.response_object(parsed, wire_openai.new_id("resp"), items, usage)
            if parsed.stream:
                return _Rendered(final["id"], usage, frames=wire_openai.responses_events(parsed, final))
            return _Rendered(final["id"], usage, body=final)
        if api is _CHAT:
            bills_writes = self.profiles[api.name].kind in ("openai_explicit", "anthropic")
            usage = wire_openai.chat_usage(result, output_tokens, reasoning, bills_writes)
            response_id = wire_openai.new_id("chatcmpl")
            calls = wire_openai.chat_calls(reply)
            if parsed.stream:
                frames = wire_openai.chat_events(parsed, response_id, reply, calls, usage)
                return _Rendered(response_id, usage if parsed.include_usage else None, frames=frames)
            return _Rendered(response_id, usage, body=wire_openai.chat_object(parsed, response_id, reply, calls, usage))
        usage = wire_anthropic.messages_usage(result, output_tokens, reasoning)
        message = wire_anthropic.message_object(
            parsed, wire_openai.new_id("msg"), wire_anthropic.content_blocks(reply), usage
        )
        if parsed.stream:
            return _Rendered(message["id"], usage, frames=wire_anthropic.message_events(message))
        return _Rendered(message["id"], usage, body=message)

    def _log(self, fields: dict[str, Any], started: float, **more: Any) -> None:
        self.log.write(record(**fields, **more, server_ms=round((time.perf_counter() - started) * 1000, 3)))


class _Dropped(Exception):
    """Raised inside a response body to cut the connection (fault injection)."""


async def _frames(frames: list[bytes], cut: bool = False) -> Any:
    for frame in frames:
        yield frame
    if cut:
        await asyncio.sleep(0.05)  # let the bytes reach the client before the connection is cut
        raise _Dropped("fault injected: connection dropped mid-response")


class TrialPrefix:
    """``/t/<trial_id>/v1/...`` → ``/v1/...`` with the trial id kept in the scope for the log."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = (scope.get("raw_path") or scope["path"].encode()) if scope["type"] == "http" else b""
        if match := _TRIAL.match(raw.split(b"?")[0]):  # raw: a trial id may hold an escaped "/"
            trial_id, rest = (unquote(g.decode()) for g in match.groups())
            scope = {**scope, "path": rest, "raw_path": match.group(2), "kit_trial_id": trial_id}
        await self.app(scope, receive, send)


class SimulatedClock:
    """The embedded provider's time: the seconds a run of real agents would have taken, advanced by each
    answer (``advance``), never read off the machine.

    The cache engine's entries expire by it (a profile's TTL) and the log's ``t`` is it, so the cache model's
    replay sees the same times. Read off the machine, a batch's cache outcomes would depend on how busy the
    machine was (a trial slowed past a 5-minute TTL misses what it hit on an idle one), and the scripted
    model, which answers in milliseconds, would never let an entry expire at all. Advanced per answer, a
    seeded batch run one trial at a time has the same outcomes on any machine (docs/method.md#clock).
    """

    CLIENT_S = 2.0  # per answer: the agent's own time before its next request (tools run, a CLI starts)
    OUTPUT_TOKENS_PER_S = 50.0  # the simulated model's generation speed

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, output_tokens: int) -> None:
        """One answer of ``output_tokens`` was given: time passes as its generation and the client's turn."""
        with self._lock:
            self._now += self.CLIENT_S + output_tokens / self.OUTPUT_TOKENS_PER_S


class Provider(LoopbackService):
    """A running embedded provider (returned by ``start``, yielded by ``serve``)."""

    def __init__(
        self,
        app: ProviderApp,
        sock: socket.socket,
        server: uvicorn.Server,
        thread: threading.Thread,
        owned: Path | None,
    ):
        super().__init__(app, sock, server, thread, owned)
        self.profiles: dict[str, CacheProfile] = app.profiles  # by API: "responses", "chat", "messages"
        self.engines: dict[str, CacheEngine] = app.engines
        self.policy: Policy = app.policy
        self.policy_name = app.policy_name

    @property
    def profile(self) -> CacheProfile:
        """The profile of every route; an error when the routes follow their own APIs' (no profile named)."""
        return self._single(self.profiles)

    @property
    def engine(self) -> CacheEngine:
        """The engine of every route; an error when each API has its own (no profile named)."""
        return self._single(self.engines)

    def _single(self, by_api: dict[str, Any]) -> Any:
        first = by_api[_RESPONSES.name]
        if any(value != first for value in by_api.values()):
            routes = ", ".join(f"{name}: {profile.name}" for name, profile in self.profiles.items())
            raise InputError(f"no single cache profile ({routes}); use profiles[api] / engines[api]")
        return first

    def client_settings(self) -> list[tuple[str, str]]:
        """How to point clients at this provider, as (name, value) lines: SDK environment variables, then a
        Codex CLI and a Claude Code command line configured the way the run stage configures them."""
        openai_url, anthropic_url = f"{self.base_url}/v1", self.base_url
        codex_provider = (
            f'model_providers.kit={{name="kit",base_url="{openai_url}",wire_api="responses",env_key="OPENAI_API_KEY"}}'
        )
        return [
            ("OPENAI_BASE_URL", openai_url),
            ("OPENAI_API_KEY", CLIENT_KEY),
            ("ANTHROPIC_BASE_URL", anthropic_url),
            ("ANTHROPIC_API_KEY", CLIENT_KEY),
            (
                "codex",
                f"OPENAI_API_KEY={CLIENT_KEY} codex exec -c model_provider=kit -c '{codex_provider}' "
                f"-m {MODELS[0]} 'your prompt'",
            ),
            (
                "claude",
                f"ANTHROPIC_BASE_URL={anthropic_url} ANTHROPIC_API_KEY={CLIENT_KEY} "
                f"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude -p --model {MODELS[0]} 'your prompt'",
            ),
        ]


def start(
    profile: str | CacheProfile | None = None,
    policy: Policy | None = None,
    seed: int = 0,
    port: int = 0,
    host: str = "127.0.0.1",
    log_path: str | Path | None = None,
    survival: float = 1.0,
    capacity_tokens: int = 20_000_000,
    clock: Callable[[], float] | None = None,
    allow_non_loopback: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> Provider:
    """Start the provider in a background thread and return once it accepts connections.

    ``profile`` applies to every route; ``None`` gives each API its own provider's (``DEFAULT_PROFILES``),
    one engine per profile, each holding up to ``capacity_tokens``. ``port=0`` picks a free port.
    ``log_path=None`` logs to a temporary file, removed when the provider stops. ``clock`` is the cache
    engine's time in seconds (default: a ``SimulatedClock``, advanced by each answer; a plain callable is
    read as it is). A request body larger than
    ``max_body_bytes`` gets 413; one not received within ``body_timeout_s`` gets 408.
    """
    if isinstance(profile, str):
        profile = load_profile(profile)
    sock = bind(host, port, allow_non_loopback, "the simulated provider")
    owned = None
    try:
        if log_path is None:
            log_path = temporary_log("kit-provider-")
            owned = log_path.parent
        app = ProviderApp(
            profile=profile,
            policy=policy or EchoPolicy(),
            seed=seed,
            survival=survival,
            capacity_tokens=capacity_tokens,
            clock=clock or SimulatedClock(),
            log=RequestLog(log_path),
            max_body_bytes=max_body_bytes,
            body_timeout_s=body_timeout_s,
        )
    except BaseException:
        sock.close()
        discard(owned)
        raise
    try:
        server, thread = launch(app.app, sock, app.log, "the embedded provider", lifespan="off")
    except BaseException:
        discard(owned)
        raise
    return Provider(app, sock, server, thread, owned)


serve = start  # ``with serve(profile=..., policy=..., seed=...) as p:``: a Provider stops when its block ends


def serve_forever(**kwargs: Any) -> None:
    """Run until interrupted (the CLI), printing the base URL first (scripts read that line), then how to
    point each client at it, the cache profile of each route, the log path and the policy. Without a log path the
    log goes to a temporary file that is kept: its path is printed for the user to read."""
    provider = start(**kwargs | {"log_path": kwargs.get("log_path") or temporary_log("kit-provider-")})
    lines = [provider.base_url]
    lines += [f"{name}={value}" if name.isupper() else f"{name}: {value}" for name, value in provider.client_settings()]
    named = "" if kwargs.get("profile") is not None else " (each API's own; --profile NAME sets one for every route)"
    routes = ", ".join(f"{api.endpoint} {provider.profiles[api.name].name}" for api in APIS)
    lines += [f"profiles: {routes}{named}", f"log: {provider.log_path}", f"policy: {provider.policy_name}"]
    provider.wait("\n".join(lines))
