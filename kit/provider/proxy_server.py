"""The recording proxy: the kit's loopback server in pass-through mode in front of a real endpoint.

A real provider reports tokens but not the prompt's structure; the embedded provider knows the structure
but is a simulation. The proxy gives a real run both: every request goes to the upstream unchanged
(method, path, query, body bytes, headers except hop-by-hop ones, ``Host`` rewritten), every response comes
back unchanged (status, headers minus hop-by-hop ones, body; SSE chunk by chunk as it arrives), and each
model request gets one line in a request log of the embedded provider's format (``kit.provider.log``): the
prompt segments cut as the embedded provider cuts them, the usage the provider reported, model, cache key
and retention, status, wall time and trial id. So the parse stage and the cache model read a real run as
they read a simulated one (docs/method.md#structural-cache).

Trials: as with the embedded provider, ``/t/<trial_id>/…`` is the trial's base URL; the prefix is logged and
removed before forwarding. API keys are forwarded and never written: the log holds only the key's cache
domain (a short hash, as the embedded provider logs it), and error lines hold an error's type and code,
never its message (providers quote part of a rejected key there). One header is changed on the way up:
``accept-encoding`` is narrowed to the codings the proxy can read (gzip, deflate), or the usage inside a
brotli-compressed answer would be lost. An answer from the kit's own embedded provider (its
``x-kit-simulated`` header) is logged ``upstream_simulated``, so a batch proxied to it stays labelled a
simulation.

The log line is written before the response's last part leaves: before a JSON answer is sent (it is read
whole: the upstream sends it at once anyway), and before the SSE chunk holding the stream's final event.
A client that has its answer therefore finds its line written, which the run stage relies on when it
copies a trial's lines. An unreachable upstream gets the client a 502 in its API's error shape, logged.

The proxy forwards only to its upstream. A request's target must be origin-form (a path starting with one
``/``, no ``@``, ``\\`` or ``#``, no ``.`` or ``..`` segment, plain or percent-encoded); anything else (an
absolute-form ``http://host/…``, an ``@host:port/…`` that string concatenation would read as the upstream's
user info and another host) is a 400 in the API's error shape, logged, and nothing is sent. The URL is built
from the upstream's with httpx (``copy_with(raw_path=…)``) and checked to keep its scheme, host and port
before the request leaves. Requests the proxy answers itself are logged whatever their path, since nothing
else records them: a refused target (400), a body too large (413, ``max_body_bytes``, the embedded
provider's 32 MB by default) or sent too slowly (408 after ``body_timeout_s``, the provider's 30 s), and
anything unexpected (a 500 in the API's shape, or a cut connection once the answer has begun).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import httpx
import uvicorn
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from kit.errors import InputError
from kit.provider.log import RequestLog, domain_of, record
from kit.provider.prompt import PromptCounter
from kit.provider.proxy_record import ResponseReader, api_of, canonical_usage, narrow_accept_encoding, read_request
from kit.provider.server import (
    BODY_TIMEOUT_S,
    MAX_BODY_BYTES,
    SIMULATED_HEADER,
    HttpError,
    TrialPrefix,
    api_key_of,
    error_response,
    is_anthropic,
)
from kit.provider.service import LoopbackService, bind, discard, launch, temporary_log

# Where a request goes when no upstream is named: its provider's public API (Messages and anything sent
# with an ``anthropic-version`` header to Anthropic, the rest to OpenAI).
PUBLIC_UPSTREAMS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com"}
READ_TIMEOUT_S = 600.0  # longest silence from the upstream (a reasoning model may think for minutes)
_LOGGER = logging.getLogger(__name__)
# RFC 9110 section 7.6.1, plus the de facto proxy-connection; a proxy must not forward these
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)


def _hop_by_hop(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The fixed hop-by-hop names plus any the message's own ``Connection`` header lists."""
    listed = {
        token.strip().lower() for name, value in headers if name.lower() == b"connection" for token in value.split(b",")
    }
    return _HOP_BY_HOP | listed


def _check_upstream(url: str) -> str:
    """``url`` without a trailing slash; refused when it could carry a credential (user info) or is not http(s).

    A credential belongs in the headers the client sends, which are forwarded and never written; a URL is
    printed and logged.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"upstream must be an http(s) URL with a host, got {url!r}")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise InputError("upstream must not carry user info, a query or a fragment: send keys as headers")
    return url.rstrip("/")


def _target(upstream: str, raw_path: bytes, query: bytes) -> httpx.URL:
    """The upstream URL of an origin-form request target, or a 400: the proxy forwards only to its upstream.

    ``raw_path`` is the target as sent (the trial prefix removed). It must start with one ``/`` and hold no
    ``@``, ``\\``, ``#`` or dot segment, plain or percent-encoded: anything else could name another host or
    climb out of the upstream's path prefix. The URL is the upstream's with its path extended (httpx keeps
    the bytes as sent), and must keep the upstream's scheme, host, port and (empty) user info.
    """
    segments = unquote_to_bytes(raw_path).split(b"/")
    shown = raw_path.decode("latin-1")[:200]
    if (
        not raw_path.startswith(b"/")
        or raw_path.startswith(b"//")
        or any(c in raw_path for c in (b"@", b"\\", b"#"))
        or any(segment in (b".", b"..") for segment in segments)
    ):
        raise HttpError(400, f"request target {shown!r} refused: the proxy forwards only origin-form paths")
    base = httpx.URL(upstream)
    try:
        url = base.copy_with(raw_path=base.raw_path.rstrip(b"/") + raw_path + (b"?" + query if query else b""))
    except httpx.InvalidURL as exc:
        raise HttpError(400, f"request target {shown!r} refused: {exc}") from None
    if (url.scheme, url.host, url.port, url.userinfo) != (base.scheme, base.host, base.port, base.userinfo):
        raise HttpError(400, f"request target {shown!r} refused: it would leave the upstream {upstream}")
    return url


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ProxyApp:
    """The ASGI app: forward, stream back, log model requests. One HTTP client per upstream, opened at startup."""

    def __init__(
        self,
        upstream: str | None,
        log: RequestLog,
        clock: Callable[[], float],
        read_timeout_s: float = READ_TIMEOUT_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ):
        self.upstream = _check_upstream(upstream) if upstream is not None else None
        self.log = log
        self.clock = clock
        self.read_timeout_s = read_timeout_s
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.counter = PromptCounter()
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, upstream: str) -> httpx.AsyncClient:
        """The upstream's client. Environment proxy settings apply except for a loopback upstream (tests and
        local gateways must never leave the machine through a proxy)."""
        if upstream not in self._clients:
            timeout = httpx.Timeout(connect=10.0, read=self.read_timeout_s, write=60.0, pool=None)
            self._clients[upstream] = httpx.AsyncClient(
                timeout=timeout, trust_env=not _is_loopback(upstream), limits=httpx.Limits(max_connections=256)
            )
        return self._clients[upstream]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self.handle(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for client in self._clients.values():
                    await client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request, forwarded and answered; a model request is logged once, whatever happens, and so is
        every request the proxy answers itself (a refusal or a failure of its own)."""
        started = time.perf_counter()
        request = Request(scope, receive)
        anthropic = is_anthropic(scope)
        watched = _Watched(send)
        fields: dict[str, Any] = {
            "t": self.clock(),
            "endpoint": scope["path"],
            "api": api_of(request.method, scope["path"]),
            "domain": domain_of(api_key_of(request)),
            "trial_id": scope.get("kit_trial_id") or request.headers.get("x-kit-trial-id"),
        }
        try:
            await self._forward(request, anthropic, fields, started, watched)
        except HttpError as exc:
            self._log(fields, started, status=exc.status, error=exc.message)
            await error_response(anthropic, exc.status, exc.message)(scope, receive, send)
        except Exception as exc:
            _LOGGER.exception("the recording proxy failed on %s", scope["path"])
            message = f"internal error in the kit's proxy: {type(exc).__name__}"
            if not watched.logged:
                self._log(fields, started, status=500, error=message)
            if not watched.started:  # else returning cuts the connection: the client sees the answer fail
                await error_response(anthropic, 500, message)(scope, receive, send)

    async def _forward(
        self, request: Request, anthropic: bool, fields: dict[str, Any], started: float, watched: _Watched
    ) -> None:
        """Check the target, read the body, send it upstream and relay the answer; raises ``HttpError`` for
        what the proxy refuses itself (400 target, 408 slow body, 413 large body)."""
        scope, api = request.scope, fields["api"]
        upstream = self.upstream or PUBLIC_UPSTREAMS["anthropic" if anthropic else "openai"]
        target = _target(upstream, scope["raw_path"], scope["query_string"])
        body = await _read_body(request, self.max_body_bytes, self.body_timeout_s)
        # The prompt is cut in a worker thread while the upstream works: the tokeniser adds no latency.
        reading = asyncio.ensure_future(asyncio.to_thread(read_request, api, body, self.counter)) if api else None
        try:
            response = await self._client(upstream).send(
                httpx.Request(request.method, target, headers=_request_headers(scope["headers"]), content=body),
                stream=True,
            )
        except httpx.HTTPError as exc:
            message = f"the kit's proxy could not reach the upstream {upstream}: {type(exc).__name__}: {exc}"
            if reading:
                fields |= await reading
            raise HttpError(502, message) from None
        try:
            if not api or reading is None:  # not a model request (reading is None exactly then)
                await _Relay(response, scope, request.receive, watched, None, None).run()
                return
            reader = ResponseReader(
                api, response.headers.get("content-type", ""), response.headers.get("content-encoding", "")
            )

            # the kit's own provider says so on every answer: a batch proxied to it is still a simulation
            fields["upstream_simulated"] = response.headers.get(SIMULATED_HEADER) == "true"

            async def log(error: str | None = None) -> None:
                self._log_response({**fields, **await reading}, started, response.status_code, reader, error)
                watched.logged = True

            await _Relay(response, scope, request.receive, watched, reader, log).run()
        finally:
            await response.aclose()

    def _log_response(
        self, fields: dict[str, Any], started: float, status: int, reader: ResponseReader, error: str | None
    ) -> None:
        if status != 200:
            error = f"upstream answered {status}: {reader.error or 'no error details'}"
        self._log(
            fields,
            started,
            status=status,
            error=error or reader.error,
            response_id=reader.response_id,
            usage=canonical_usage(fields["api"], reader.wire_usage),
            wire_usage=reader.wire_usage,
            tool_calls=reader.tool_calls,
        )

    def _log(self, fields: dict[str, Any], started: float, **more: Any) -> None:
        """One line in the embedded provider's format, plus the two things only a proxy knows: the upstream and
        the request's ``prompt_cache_retention`` (not a request-log key of the simulator, which models one)."""
        own = ("prompt_cache_retention", "upstream_simulated")
        known = {k: v for k, v in fields.items() if k not in own}
        line = record(**known, **more, server_ms=round((time.perf_counter() - started) * 1000, 3))
        extra = {k: fields.get(k) for k in own} | {"upstream": self.upstream or "public"}
        self.log.write({**line, **extra})


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole request body (segments need all of it, and it is forwarded as sent); a 413 past ``limit``
    (the rest is drained, so the client reads the answer), a 408 when it has not all arrived within
    ``timeout_s`` (a client trickling its body must not hold a handler forever), as the embedded provider."""
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size <= limit:
                    parts.append(chunk)
    except TimeoutError:
        raise HttpError(408, f"request body not received within {timeout_s:g} s") from None
    if size > limit:
        raise HttpError(413, f"request body exceeds the proxy's limit of {limit} bytes")
    return b"".join(parts)


class _Watched:
    """The client's ``send``, noting whether the answer has begun (after that no error answer can be sent),
    and whether the request's log line is written (so a failure after it writes no second one)."""

    def __init__(self, send: Send) -> None:
        self._send, self.started, self.logged = send, False, False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


def _request_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers minus hop-by-hop ones; ``Host`` and ``Content-Length`` are set by httpx for the
    upstream (the length is the body's, unchanged), ``accept-encoding`` narrowed to what the proxy reads."""
    drop = _hop_by_hop(raw) | {b"host", b"content-length"}
    return [
        (
            name,
            narrow_accept_encoding(value.decode("latin-1")).encode() if name.lower() == b"accept-encoding" else value,
        )
        for name, value in raw
        if name.lower() not in drop
    ]


class _Relay:
    """One response on its way to the client: its headers (hop-by-hop ones dropped), what was sent, and
    whether its log line is written."""

    def __init__(
        self,
        response: httpx.Response,
        scope: Scope,
        receive: Receive,
        send: Send,
        reader: ResponseReader | None,
        log: Callable[[str | None], Awaitable[None]] | None,
    ) -> None:
        self.response, self.scope, self.receive, self.send, self.reader, self.log = (
            response, scope, receive, send, reader, log,
        )  # fmt: skip
        drop = _hop_by_hop(response.headers.raw)
        self.headers = [(k, v) for k, v in response.headers.raw if k.lower() not in drop]
        self.buffered = reader is not None and not reader.sse
        self.logged, self.sent = False, 0

    async def run(self) -> None:
        """Send the upstream's response to the client as it arrives and, for a model request, log it once.

        A JSON answer of a model request is read whole, logged, then sent; anything else is passed on chunk by
        chunk. A client that hangs up stops the relay (and the upstream request); an upstream that drops the
        connection mid-body gets the client's connection dropped too, as the client would have seen it.
        """
        relay = asyncio.ensure_future(self.pump())
        hangup = asyncio.ensure_future(_disconnected(self.receive))
        await asyncio.wait({relay, hangup}, return_when=asyncio.FIRST_COMPLETED)
        if not relay.done():
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay
            await self.log_once(f"client disconnected after {self.size} bytes")
        hangup.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hangup
        if not relay.cancelled():
            relay.result()  # an unexpected error in the relay surfaces here

    @property
    def size(self) -> int:
        """Bytes of the body so far: read by the reader, or sent for a body no reader follows."""
        return self.reader.size if self.reader is not None else self.sent

    async def log_once(self, error: str | None = None) -> None:
        if self.log is not None and not self.logged:
            await self.log(
                error
            )  # marked after: a relay cancelled while it waits for the segments leaves it to the caller
            self.logged = True

    async def pump(self) -> bool:
        """True once the whole body has been sent."""
        if not self.buffered:
            await self._start()
        chunks: list[bytes] = []
        try:
            async for chunk in self.response.aiter_raw():
                if self.reader is not None and self.reader.feed(chunk):
                    await self.log_once()  # the stream's final event is in this chunk: the line goes first
                if self.buffered:
                    chunks.append(chunk)
                    continue
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
                self.sent += len(chunk)
        except httpx.HTTPError as exc:
            return await self._lost(exc)
        if self.reader is not None:
            self.reader.finish(self.response.status_code)
        await self.log_once()
        if self.buffered:
            await self._start()
        await self.send({"type": "http.response.body", "body": b"".join(chunks), "more_body": False})
        return True

    async def _start(self) -> None:
        await self.send({"type": "http.response.start", "status": self.response.status_code, "headers": self.headers})

    async def _lost(self, exc: httpx.HTTPError) -> bool:
        """The upstream dropped mid-body: logged; a buffered answer becomes a 502 the client can read, a
        streamed one is cut (returning without completing the response cuts the client's connection)."""
        await self.log_once(f"upstream connection lost after {self.size} bytes: {type(exc).__name__}")
        if not self.buffered:
            return False
        message = f"the upstream dropped the connection mid-response: {type(exc).__name__}"
        await error_response(is_anthropic(self.scope), 502, message)(self.scope, self.receive, self.send)
        return True


async def _disconnected(receive: Receive) -> None:
    """Returns when the client hangs up (the request body has been read, so only that message can come)."""
    message: Message = {}
    while message.get("type") != "http.disconnect":
        message = await receive()


class Proxy(LoopbackService):
    """A running recording proxy (returned by ``proxy``)."""

    def __init__(
        self, app: ProxyApp, sock: socket.socket, server: uvicorn.Server, thread: threading.Thread, owned: Path | None
    ):
        super().__init__(app, sock, server, thread, owned)
        self.upstream = app.upstream  # None: each API's public endpoint (PUBLIC_UPSTREAMS)


def proxy(
    upstream: str | None = None,
    port: int = 0,
    host: str = "127.0.0.1",
    log_path: str | Path | None = None,
    allow_non_loopback: bool = False,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> Proxy:
    """Start the proxy in a background thread and return once it accepts connections; ``with proxy(...) as p:``
    stops it when the block ends.

    ``upstream`` is the endpoint's origin, with any path prefix but without ``/v1`` (clients add it, as they do
    for the embedded provider): ``http://127.0.0.1:8000``, ``https://api.openai.com``. ``None`` sends each
    request to its provider's public API. The proxy binds loopback only unless ``allow_non_loopback``;
    ``log_path=None`` logs to a temporary file, removed when the proxy stops. A request body larger than
    ``max_body_bytes`` gets 413; one not received within ``body_timeout_s`` gets 408 (the provider's limits).
    """
    sock = bind(host, port, allow_non_loopback, "the recording proxy")
    owned = None
    try:
        if log_path is None:
            log_path = temporary_log("kit-proxy-")
            owned = log_path.parent
        start = time.monotonic()
        app = ProxyApp(
            upstream,
            RequestLog(log_path),
            lambda: time.monotonic() - start,
            read_timeout_s,
            max_body_bytes=max_body_bytes,
            body_timeout_s=body_timeout_s,
        )
    except BaseException:
        sock.close()
        discard(owned)
        raise
    # The upstream's own Server and Date headers pass through: uvicorn must not add a second pair.
    try:
        options = {"lifespan": "on", "server_header": False, "date_header": False}
        server, thread = launch(TrialPrefix(app), sock, app.log, "the recording proxy", **options)
    except BaseException:
        discard(owned)
        raise
    return Proxy(app, sock, server, thread, owned)


def proxy_forever(**kwargs: Any) -> None:
    """Run until interrupted (the CLI): the base URL first (scripts read that line), then where clients point,
    where requests go and the log path (a temporary file, kept, without one given). No key is printed: clients
    send their own."""
    running = proxy(**kwargs | {"log_path": kwargs.get("log_path") or temporary_log("kit-proxy-")})
    where = running.upstream or ", ".join(f"{name}: {url}" for name, url in PUBLIC_UPSTREAMS.items())
    lines = [
        running.base_url,
        f"OPENAI_BASE_URL={running.base_url}/v1",
        f"ANTHROPIC_BASE_URL={running.base_url}",
        f"upstream: {where}",
        f"log: {running.log_path}",
    ]
    running.wait("\n".join(lines))
