"""The embedded provider under bad input and load: every request gets its API's own error shape, and the
server keeps serving everyone else (malformed JSON, wrong content types, oversized or slowly sent bodies,
slowloris connections, invalid tool-call continuations, injected faults, a short soak)."""

from __future__ import annotations

import socket
import sys
import threading
import time

import anthropic
import httpx
import openai
import pytest

from kit.provider import Reply, serve
from kit.provider.log import read
from tests.support import ROOT

KEY = "sk-PLANTED-test-reliability-key-0000"
ENDPOINTS = ("/v1/responses", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens")
VALID = {
    "/v1/responses": b'{"model": "m", "input": "hi"}',
    "/v1/chat/completions": b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
    "/v1/messages": b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}',
    "/v1/messages/count_tokens": b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "log.jsonl"
    with serve(profile="anthropic", max_body_bytes=64 * 1024, body_timeout_s=1.0, log_path=log) as p:
        yield p


def post(p, path: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(p.base_url + path, content=content, headers={"x-api-key": KEY, **headers}, timeout=30)


def assert_error_shape(path: str, response: httpx.Response, status: int, *words: str) -> None:
    """OpenAI: {"error": {message, type, param, code}}; Anthropic: {"type": "error", "error": {type, message}}."""
    assert response.status_code == status, response.text
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        message = body["error"]["message"]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
        message = body["error"]["message"]
    assert all(w in message for w in words), message


def still_serves(p) -> None:
    for path, body in VALID.items():
        assert post(p, path, body).status_code == 200, path


MALFORMED = {
    "truncated": (b'{"model": "m", "input": "hi', "not valid JSON"),
    "trailing garbage": (b'{"model": "m"} {"x": 1}', "not valid JSON"),
    "empty body": (b"", "not valid JSON"),
    "not an object": (b'"just a string"', "JSON object"),
    "invalid utf-8": (b'{"model": "m\xff\xfe", "input": "hi"}', "not valid JSON"),
    "NaN": (b'{"model": "m", "input": "hi", "temperature": NaN}', "not valid JSON"),
    "nested past orjson": (b'{"model": "m", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("path", ENDPOINTS)
def test_malformed_json_gets_a_400_in_shape(provider, path, case):
    body, words = MALFORMED[case]
    assert_error_shape(path, post(provider, path, body), 400, words)


def test_json_nested_deeper_than_the_renderer_is_a_400_not_a_crash(provider):
    deep = b"[" * 1000 + b"]" * 1000  # within orjson's limit, past Python's recursion limit
    body = b'{"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "x", "d": %s}]}]}'
    assert_error_shape("/v1/responses", post(provider, "/v1/responses", body % deep), 400, "nested too deeply")
    still_serves(provider)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded", "text/xml"]
)
@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_declared_non_json_content_type_is_a_415_in_shape(provider, path, content_type):
    response = post(provider, path, VALID[path], **{"content-type": content_type})
    assert_error_shape(path, response, 415, "content-type", "application/json")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "application/x+json"])
def test_json_content_types_and_an_absent_one_are_accepted(provider, content_type):
    for path, body in VALID.items():
        assert post(provider, path, body, **{"content-type": content_type}).status_code == 200
        assert httpx.post(provider.base_url + path, content=body).status_code == 200  # no content-type at all


WRONG_FIELD_TYPES = [
    ("/v1/responses", b'{"model": 5, "input": "hi"}', "model"),
    ("/v1/responses", b'{"model": "m", "input": {"role": "user"}}', "input"),
    ("/v1/responses", b'{"model": "m", "input": "hi", "stream": "yes"}', "stream"),
    ("/v1/responses", b'{"model": "m", "input": "hi", "tools": [{"type": 3}]}', "tools[0].type"),
    ("/v1/chat/completions", b'{"model": "m", "messages": "hi"}', "messages"),
    ("/v1/chat/completions", b'{"model": "m", "messages": []}', "messages"),
    ("/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": 7}]}', "messages[0].content"),
    ("/v1/messages", b'{"model": "m", "max_tokens": "5", "messages": []}', "max_tokens"),
    ("/v1/messages", b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": null}]}', "content"),
    ("/v1/messages", b'{"model": "m", "max_tokens": 5, "system": 3, "messages": []}', "system"),
    ("/v1/messages", b'{"model": "m", "max_tokens": 1' + b"0" * 40 + b', "messages": []}', "max_tokens"),  # a float
]


@pytest.mark.parametrize(("path", "body", "field"), WRONG_FIELD_TYPES)
def test_wrong_json_types_name_the_field(provider, path, body, field):
    assert_error_shape(path, post(provider, path, body), 400, field)


def test_oversized_bodies_declared_or_chunked_get_413_and_others_are_served(provider):
    big = b'{"model": "m", "input": "' + b"x" * (70 * 1024) + b'"}'
    for path in ENDPOINTS:
        assert_error_shape(path, post(provider, path, big), 413, "exceeds")

    def chunks():
        for _ in range(70):
            yield b"x" * 1024

    response = httpx.post(provider.base_url + "/v1/responses", content=chunks(), timeout=30)  # no content-length
    assert_error_shape("/v1/responses", response, 413, "exceeds")
    errors: list[int] = []
    threads = [
        threading.Thread(target=lambda: errors.append(post(provider, "/v1/messages", big).status_code))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    still_serves(provider)
    for t in threads:
        t.join()
    assert errors == [413, 413]


def _raw(p, data: bytes) -> socket.socket:
    sock = socket.create_connection((p.host, p.port), timeout=60)
    sock.sendall(data)
    return sock


def _response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of one HTTP response read off a raw socket (up to its content-length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), body


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
def test_a_body_sent_too_slowly_gets_408_in_shape_while_others_are_served(provider, path):
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    sock = _raw(provider, head.encode() + b'{"model": "m", ')
    still_serves(provider)  # the slow client holds only its own connection
    time.sleep(0.4)
    sock.sendall(b'"input": ')  # still trickling when the 1 s body timeout ends
    status, body = _response(sock)
    sock.close()
    fake = httpx.Response(status, content=body)
    assert_error_shape(path, fake, 408, "not received within 1 s")


def test_slowloris_connections_do_not_block_anyone(provider):
    """200 connections that never finish their headers, and 50 that never finish their body."""
    stuck = [_raw(provider, b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nX-Slow: ") for _ in range(200)]
    body_head = b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"
    stuck += [_raw(provider, body_head) for _ in range(50)]
    try:
        for _ in range(3):
            still_serves(provider)
        client = openai.OpenAI(base_url=provider.base_url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        with client.responses.stream(model="sim-model", input="streaming still works?") as stream:
            assert "simulated" in stream.get_final_response().output_text
    finally:
        for sock in stuck:
            sock.close()
    still_serves(provider)


# ------------------------------------------------------------------ invalid tool-call continuations


def _responses_call(call_id: str) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": "read_file", "arguments": "{}"}


def _responses_output(call_id: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": "x"}


def test_responses_tool_continuations():
    with serve() as p:
        client = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0)
        user = {"role": "user", "content": "go"}
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input=[user, _responses_output("call_ghost")])
        assert caught.value.body["param"] == "input[1].call_id" and "call_ghost" in caught.value.body["message"]
        with pytest.raises(openai.BadRequestError, match="no tool output found for function call 'call_a'"):
            client.responses.create(model="m", input=[user, _responses_call("call_a")])
        with pytest.raises(openai.BadRequestError, match="call_b"):  # answered the wrong call
            client.responses.create(model="m", input=[user, _responses_call("call_a"), _responses_output("call_b")])
        ok = client.responses.create(model="m", input=[user, _responses_call("call_a"), _responses_output("call_a")])
        assert ok.status == "completed"
        stateful = client.responses.create(model="m", input=[_responses_output("call_x")], previous_response_id="r")
        assert stateful.status == "completed"  # the call lives in the previous response on the server's side


def test_chat_tool_continuations():
    with serve() as p:
        client = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0)
        call = {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        asked = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=[*asked[:1], {"role": "tool", "tool_call_id": "x",
                                                                              "content": "r"}])  # fmt: skip
        assert caught.value.body["param"] == "messages[1].tool_call_id"
        with pytest.raises(openai.BadRequestError, match="not answered: call_a"):
            client.chat.completions.create(model="m", messages=[*asked, {"role": "user", "content": "and?"}])
        with pytest.raises(openai.BadRequestError, match="not answered: call_a"):
            client.chat.completions.create(model="m", messages=asked)
        done = [*asked, {"role": "tool", "tool_call_id": "call_a", "content": "r"}]
        assert client.chat.completions.create(model="m", messages=done).choices[0].finish_reason == "stop"


def test_anthropic_tool_continuations():
    with serve(profile="anthropic") as p:
        client = anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0)
        use = {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "r"}
        user = {"role": "user", "content": "go"}
        cases = [
            ([user, {"role": "assistant", "content": [{"type": "text", "text": "hm"}]},
              {"role": "user", "content": [result]}], "messages[2].content[0].tool_use_id"),
            ([{"role": "user", "content": [result]}], "messages[0].content[0].tool_use_id"),
            ([user, {"role": "assistant", "content": [use]}, {"role": "user", "content": "next"}], "messages[1]"),
        ]  # fmt: skip
        for messages, where in cases:
            with pytest.raises(anthropic.BadRequestError) as caught:
                client.messages.create(model="m", max_tokens=5, messages=messages)
            assert caught.value.body["error"]["type"] == "invalid_request_error"
            assert caught.value.body["error"]["message"].startswith(where), caught.value.body
        ok = [user, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
        assert client.messages.create(model="m", max_tokens=5, messages=ok).stop_reason == "end_turn"
        system = {"role": "system", "content": "env"}  # Claude Code's environment message between turns
        assert client.messages.create(model="m", max_tokens=5, messages=[system, *ok]).id


# ------------------------------------------------------------------ injected faults


class Faulty:
    """Answers normally, except the request whose last user text is ``trigger``: it gets ``fault``."""

    name = "faulty"

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def reply(self, conversation):
        if conversation.last_user_text() == "trigger":
            return Reply(text="never delivered in full " * 50, fault=self.fault)
        return Reply(text="fine")


def cut(caught: pytest.ExceptionInfo) -> None:
    """A cut connection: the SDK's connection error, or mid-stream the transport's own protocol error."""
    assert type(caught.value).__name__ in ("APIConnectionError", "RemoteProtocolError"), repr(caught.value)


@pytest.mark.parametrize("stream", [False, True])
def test_dropped_response_is_an_error_for_its_client_only(tmp_path, stream):
    with serve(policy=Faulty("drop"), profile="anthropic", log_path=tmp_path / "log.jsonl") as p:
        oa = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0)
        an = anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0)
        with pytest.raises(Exception) as caught:  # the class depends on where the cut lands
            if stream:
                with oa.responses.stream(model="m", input="trigger") as s:
                    s.get_final_response()
            else:
                oa.responses.create(model="m", input="trigger")
        cut(caught)
        chat = {"model": "m", "messages": [{"role": "user", "content": "trigger"}]}
        with pytest.raises(Exception) as caught:
            if stream:
                for _ in oa.chat.completions.create(**chat, stream=True):
                    pass
            else:
                oa.chat.completions.create(**chat)
        cut(caught)
        message = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "trigger"}]}
        with pytest.raises(Exception) as caught:
            if stream:
                with an.messages.stream(**message) as s:
                    s.get_final_message()
            else:
                an.messages.create(**message)
        cut(caught)
        assert oa.responses.create(model="m", input="other").output_text == "fine"
    lines = read(tmp_path / "log.jsonl")
    dropped = [x for x in lines if (x["error"] or "").startswith("fault injected: connection dropped")]
    assert len(dropped) == 3 and all(x["status"] == 200 and x["usage"] for x in dropped)
    assert lines[-1]["error"] is None and lines[-1]["status"] == 200


def test_a_hanging_response_times_out_its_client_while_others_are_served(tmp_path):
    with serve(policy=Faulty("hang"), log_path=tmp_path / "log.jsonl") as p:
        slow = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0, timeout=3)
        fast = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        outcome: list[object] = []

        def hang() -> None:
            try:
                slow.responses.create(model="m", input="trigger")
            except openai.APITimeoutError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=hang)
        thread.start()
        time.sleep(0.5)
        answers = [fast.responses.create(model="m", input=f"q{i}").output_text for i in range(5)]
        thread.join(10)
        assert answers == ["fine"] * 5 and len(outcome) == 1  # the hang blocked no one but its own client
        assert not thread.is_alive()
    hung = [x for x in read(tmp_path / "log.jsonl") if x["error"] and "hang" in x["error"]]
    assert len(hung) == 1 and hung[0]["status"] is None


# ------------------------------------------------------------------ load


def test_short_soak_sixteen_trials_no_failure_memory_bounded():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import soak  # type: ignore[import-not-found]  # bench/ is on sys.path only here, at run time
    finally:
        sys.path.pop(0)
    result = soak.soak(minutes=20 / 60, concurrency=16, capacity_tokens=300_000, windows=4)
    summary = result["summary"]
    assert summary["requests"] > 50 and summary["trials"] >= 16
    assert summary["failed_trials"] == 0 and summary["non_200_responses"] == 0, summary["failures"]
    assert summary["logged_responses"] == summary["requests"]  # every response the clients saw was logged
    assert summary["max_resident_tokens"] <= 300_000
    assert result["ok"], result
