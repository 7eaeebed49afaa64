"""The recording proxy forwards only to its upstream, and neither it nor the embedded provider lets a request
out of its API's shape or its own trial: hostile targets, bodies nested past orjson's 254 levels, a body
that stalls, a large body tokenised while other trials go on. Every answer is checked in its API's error
shape with its log line. Real servers on loopback, port 0; requests sent as raw bytes where the target
must reach the server as written."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import orjson
import pytest

from kit.provider import proxy, serve
from kit.provider.log import read

KEY = "sk-PLANTED-containment-key-0000"
VALID = {
    "/v1/responses": b'{"model": "m", "input": "hi"}',
    "/v1/messages": b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}',
}


def request_bytes(method: str, target: str, body: bytes = b"", **headers: str) -> bytes:
    """An HTTP/1.1 request with ``target`` exactly as given (no client library normalises it)."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", "Content-Type: application/json"]
    lines += [f"Content-Length: {len(body)}", f"x-api-key: {KEY}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` on a new connection; the status and body of the answer (read up to its length)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of the answer on a ``Connection: close`` request (read to the end, de-chunked)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, found, body = data.partition(b"\r\n\r\n")
    assert found, f"connection closed before an answer: {data!r}"
    if b"transfer-encoding: chunked" in head.lower():
        parts = []
        while True:
            size, _, body = body.partition(b"\r\n")
            if int(size, 16) == 0:
                break
            parts.append(body[: int(size, 16)])
            body = body[int(size, 16) + 2 :]
        body = b"".join(parts)
    return int(head.split()[1]), body


def assert_shape(path: str, status: int, body: bytes, expected: int, *words: str) -> None:
    """OpenAI: {"error": {message, type, param, code}}; Anthropic: {"type": "error", "error": {type, message}}."""
    assert status == expected, body
    answer = orjson.loads(body)
    if "/v1/messages" in path:
        assert answer["type"] == "error" and set(answer["error"]) == {"type", "message"}, answer
    else:
        assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
    if expected == 400:
        assert answer["error"]["type"] == "invalid_request_error", answer
    assert all(w in answer["error"]["message"] for w in words), answer


@contextmanager
def listener() -> Iterator[socket.socket]:
    """A plain loopback socket that accepts nothing itself: the kernel queues any connection made to it,
    so a non-blocking ``accept`` afterwards tells whether anything connected."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


# ------------------------------------------------------------------ the proxy forwards only to its upstream


def test_the_proxy_forwards_only_to_its_upstream(tmp_path):
    with listener() as other, serve(log_path=tmp_path / "up.jsonl") as up:
        port = other.getsockname()[1]
        hostile = [
            f"@127.0.0.1:{port}/v1/responses",  # upstream + target would read the upstream as user info
            f"http://127.0.0.1:{port}/v1/responses",  # absolute form
            f"@127.0.0.1:{port}/v1/messages",
            f"http://127.0.0.1:{port}/v1/messages",
            f"/t/trial-1/@127.0.0.1:{port}/v1/responses",  # behind a trial prefix
            "/v1/../../v1/responses",  # climbing out of the upstream's path prefix
            "/v1/%2e%2e/%2E%2E/v1/messages",
            "//127.0.0.1/v1/responses",
        ]
        with proxy(upstream=up.base_url + "/", log_path=tmp_path / "proxy.jsonl") as p:
            for target in hostile:
                path = "/v1/messages" if "messages" in target else "/v1/responses"
                status, body = exchange(p.port, request_bytes("POST", target, VALID[path]))
                assert_shape(path, status, body, 400, "refused")
            for path, body in VALID.items():  # an origin-form target still goes through
                status, answer = exchange(p.port, request_bytes("POST", "/t/trial-2" + path, body))
                assert status == 200, answer
        assert not connected(other)  # nothing reached the other listener
    lines = read(tmp_path / "proxy.jsonl")
    assert [line["status"] for line in lines] == [400] * len(hostile) + [200, 200]
    assert all("refused" in line["error"] and line["endpoint"] for line in lines[: len(hostile)])
    assert lines[4]["trial_id"] == "trial-1"
    assert [line["trial_id"] for line in lines[-2:]] == ["trial-2", "trial-2"]
    assert [line["status"] for line in read(tmp_path / "up.jsonl")] == [200, 200]  # only the valid ones went up
    assert KEY not in (tmp_path / "proxy.jsonl").read_text()


def test_the_provider_answers_hostile_targets_in_shape(tmp_path):
    with serve(log_path=tmp_path / "log.jsonl") as p:
        for target in ("@127.0.0.1:1/v1/responses", "http://127.0.0.1:1/v1/messages", "*"):
            path = "/v1/messages" if "messages" in target else "/v1/responses"
            assert_shape(path, *exchange(p.port, request_bytes("POST", target, VALID[path])), 404, "Not Found")


# ------------------------------------------------------------------ deep nesting


DEEP = b'{"a":' * 300 + b"{}" + b"}" * 300  # past orjson's 254 levels when written back
NESTED = {
    "responses metadata": ("/v1/responses", b'{"model": "m", "input": "hi", "metadata": %s, "stream": %s}'),
    "responses model": ("/v1/responses", b'{"model": %s, "input": "hi", "stream": %s}'),
    "responses retention": (
        "/v1/responses",
        b'{"model": "m", "input": "hi", "prompt_cache_retention": %s, "stream": %s}',
    ),
    "chat metadata": (
        "/v1/chat/completions",
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": %s, "stream": %s}',
    ),
    "messages tool schema": (
        "/v1/messages",
        b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],'
        b' "tools": [{"name": "t", "input_schema": %s}], "stream": %s}',
    ),
}
COUNT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", "input_schema": %s}]}'


@pytest.mark.parametrize("stream", [False, True])
def test_deeply_nested_bodies_get_answers_in_shape_and_log_lines(tmp_path, stream):
    """Through the provider and through the proxy: each request an answer in its API's shape (a 400 where
    the body must be written back, a 200 where it need not) and one log line with that status."""
    flag = b"true" if stream else b"false"
    with (
        serve(log_path=tmp_path / "up.jsonl") as up,
        proxy(upstream=up.base_url, log_path=tmp_path / "proxy.jsonl") as p,
    ):
        statuses = []
        for path, template in NESTED.values():
            for port in (up.port, p.port):
                status, body = exchange(port, request_bytes("POST", path, template % (DEEP, flag)))
                if status != 200:
                    assert_shape(path, status, body, 400)
                statuses.append(status)
        assert 400 in statuses
        for deep in (DEEP, b"[" * 1000 + b"]" * 1000):  # past orjson's dump, past Python's recursion limit
            answer = exchange(up.port, request_bytes("POST", "/v1/messages/count_tokens", COUNT % deep))
            assert_shape("/v1/messages", *answer, 400, "nested too deeply")  # not a model request: not logged
        for path, body in VALID.items():  # both keep serving
            assert exchange(p.port, request_bytes("POST", path, body))[0] == 200
    assert [line["status"] for line in read(tmp_path / "up.jsonl")] == [*statuses, 200, 200]
    assert [line["status"] for line in read(tmp_path / "proxy.jsonl")] == [*statuses[1::2], 200, 200]
    assert statuses[:2] == [400, 400]  # responses metadata: the rendered answer echoes it


# ------------------------------------------------------------------ a large body delays only its own trial


def test_a_large_body_delays_only_its_own_trial(tmp_path):
    """A ~6 MB prompt of distinct blocks takes seconds to tokenise. Once its tokenising has begun (the
    tokeniser's count of encodings moves), another trial's small requests must be answered before it: on
    the event loop they waited for it to finish. Checked by the order of log lines, not by time."""
    items = [
        {"role": "user", "content": f"block {i}: " + " ".join(f"w{i}x{j}" for j in range(300))} for i in range(2200)
    ]
    large = orjson.dumps({"model": "m", "input": items})
    assert len(large) > 5_000_000
    with serve(log_path=tmp_path / "log.jsonl") as p:
        counter = p._app.counter
        statuses: list[int] = []

        def send_large() -> None:
            url = p.trial_base_url("large") + "/v1/responses"
            statuses.append(httpx.post(url, content=large, timeout=600).status_code)

        sender = threading.Thread(target=send_large)
        sender.start()
        deadline = time.monotonic() + 120
        while counter.encode_calls == 0 and sender.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert counter.encode_calls > 0, "the large prompt was never tokenised"
        for i in range(2):
            body = {"model": "m", "input": f"small request {i}"}
            response = httpx.post(p.trial_base_url("small") + "/v1/responses", json=body, timeout=600)
            assert response.status_code == 200
        sender.join(600)
    assert statuses == [200]
    assert [line["trial_id"] for line in read(tmp_path / "log.jsonl")] == ["small", "small", "large"]


# ------------------------------------------------------------------ the proxy's own limits


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_a_body_that_stalls_gets_the_proxys_408_in_shape(tmp_path, path):
    with (
        serve(log_path=tmp_path / "up.jsonl") as up,
        proxy(upstream=up.base_url, body_timeout_s=0.5, log_path=tmp_path / "proxy.jsonl") as p,
    ):
        head = request_bytes("POST", path, b"x" * 1000)[:-1000]  # headers announcing 1000 bytes
        with socket.create_connection(("127.0.0.1", p.port), timeout=30) as sock:
            sock.sendall(head + b'{"model": "m", ')  # then nothing more
            status, body = read_answer(sock)
        assert_shape(path, status, body, 408, "not received within 0.5 s")
        assert exchange(p.port, request_bytes("POST", path, VALID[path]))[0] == 200  # the proxy keeps serving
    assert [line["status"] for line in read(tmp_path / "proxy.jsonl")] == [408, 200]
    assert [line["status"] for line in read(tmp_path / "up.jsonl")] == [200]  # the stalled body never left


def test_a_body_over_the_proxys_limit_gets_413_in_shape(tmp_path):
    with (
        serve(log_path=tmp_path / "up.jsonl") as up,
        proxy(upstream=up.base_url, max_body_bytes=1024, log_path=tmp_path / "proxy.jsonl") as p,
    ):
        for path in VALID:
            big = b'{"model": "m", "input": "' + b"x" * 2048 + b'"}'
            assert_shape(path, *exchange(p.port, request_bytes("POST", path, big)), 413, "exceeds")
    assert [line["status"] for line in read(tmp_path / "proxy.jsonl")] == [413, 413]
    assert read(tmp_path / "up.jsonl") == []
