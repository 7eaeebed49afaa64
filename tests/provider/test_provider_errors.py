"""Bad input gets an error in each API's own shape, the server keeps serving, and it stays on loopback."""

from __future__ import annotations

import warnings

import anthropic
import httpx
import openai
import pytest

from kit.provider import Reply, serve
from kit.provider.log import read
from kit.provider.server import MAX_BODY_BYTES
from kit.provider.service import check_host

OPENAI = ("/v1/responses", "/v1/chat/completions")
KEY = "sk-PLANTED-secret-key-never-logged"


@pytest.fixture
def provider():
    with serve(profile="anthropic", max_body_bytes=64 * 1024) as p:
        yield p


def post(p, path: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(p.base_url + path, content=content, headers={"authorization": f"Bearer {KEY}", **headers})


def assert_openai_error(response: httpx.Response, status: int, *words: str) -> dict:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert all(w in error["message"] for w in words), error
    assert response.headers["x-kit-simulated"] == "true"
    return error


def assert_anthropic_error(response: httpx.Response, status: int, kind: str, *words: str) -> None:
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert all(w in body["error"]["message"] for w in words), body


def still_serves(p) -> None:
    c = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0)
    assert "simulated" in c.responses.create(model="sim-model", input="still there?").output_text
    a = anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0)
    assert a.messages.create(model="sim-claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}]).id


def test_malformed_json(provider):
    for path in OPENAI:
        assert_openai_error(post(provider, path, b'{"model": "x", '), 400, "not valid JSON")
    assert_openai_error(post(provider, "/v1/responses", b"[1, 2]"), 400, "JSON object")
    assert_anthropic_error(post(provider, "/v1/messages", b"{nope"), 400, "invalid_request_error", "not valid JSON")
    still_serves(provider)
    lines = read(provider.log_path)
    assert [line["status"] for line in lines[:4]] == [400, 400, 400, 400]
    assert all(line["usage"] is None and "not valid JSON" in line["error"] for line in lines[:2])
    assert KEY not in provider.log_path.read_text()


def test_schema_errors_name_the_field(provider):
    error = assert_openai_error(post(provider, "/v1/responses", b'{"input": "hi"}'), 400, "model", "missing")
    assert error["param"] == "model"
    body = b'{"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}'
    assert assert_openai_error(post(provider, "/v1/responses", body), 400, "call_id")["param"] == "input[0].call_id"
    assert_openai_error(post(provider, "/v1/chat/completions", b'{"model": "m"}'), 400, "messages")
    body = b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}'
    assert_openai_error(post(provider, "/v1/chat/completions", body), 400, "messages[0].role", "wizard")
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    assert_anthropic_error(post(provider, "/v1/messages", body), 400, "invalid_request_error", "max_tokens")
    body = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]}'
    assert_anthropic_error(post(provider, "/v1/messages", body), 400, "invalid_request_error", "content[0].type")
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[0\]\.tool_use_id"):  # via the SDK
        anthropic.Anthropic(base_url=provider.base_url, api_key=KEY, max_retries=0).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]
        )
    still_serves(provider)


def test_unknown_path_and_method(provider):
    assert_openai_error(httpx.post(provider.base_url + "/v1/embeddings", json={}), 404, "/v1/embeddings")
    assert_openai_error(httpx.get(provider.base_url + "/t/trial-1/v1/nothing"), 404, "/v1/nothing")
    assert_anthropic_error(httpx.post(provider.base_url + "/v1/messages/batches", json={}), 404, "not_found_error")
    assert_openai_error(httpx.get(provider.base_url + "/v1/responses"), 405)
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=provider.base_url + "/v1", api_key=KEY, max_retries=0).embeddings.create(
            model="m", input="x"
        )
    still_serves(provider)


def test_oversized_body(provider):
    big = b'{"model": "m", "input": "' + b"x" * (65 * 1024) + b'"}'
    assert_openai_error(post(provider, "/v1/responses", big), 413, "exceeds")
    assert_anthropic_error(post(provider, "/v1/messages", big), 413, "request_too_large")
    with pytest.raises(openai.APIStatusError) as caught:
        openai.OpenAI(base_url=provider.base_url + "/v1", api_key=KEY, max_retries=0).responses.create(
            model="m", input="y" * (65 * 1024)
        )
    assert caught.value.status_code == 413
    assert MAX_BODY_BYTES == 32 * 1024 * 1024  # the default limit
    still_serves(provider)


def test_too_many_cache_breakpoints(provider):
    mark = {"type": "ephemeral"}
    blocks = [{"type": "text", "text": f"block {i}", "cache_control": mark} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as caught:
        anthropic.Anthropic(base_url=provider.base_url, api_key=KEY, max_retries=0).messages.create(
            model="sim-claude", max_tokens=10, messages=[{"role": "user", "content": blocks}]
        )
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "breakpoints" in caught.value.body["error"]["message"]
    still_serves(provider)


def test_policy_failure_is_a_500_in_shape():
    class Broken:
        name = "broken"

        def reply(self, conversation):
            raise RuntimeError("scripted model bug")

    with serve(policy=Broken()) as p:
        response = post(p, "/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}')
        error = assert_openai_error(response, 500, "scripted model bug")
        assert error["type"] == "server_error" and response.headers["x-kit-policy"] == "broken"
        p.policy.reply = lambda conversation: Reply(text="fixed")  # the server survives and keeps serving
        c = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY)
        assert c.responses.create(model="m", input="x").output_text == "fixed"
        assert [line["status"] for line in read(p.log_path)] == [500, 200]


def test_non_loopback_bind_is_refused():
    with pytest.raises(ValueError, match="loopback"), serve(host="0.0.0.0"):
        pass
    with pytest.raises(ValueError, match="loopback"), serve(host="192.0.2.1"):
        pass
    for host in ("127.0.0.1", "::1", "127.0.0.2"):
        check_host(host, allow_non_loopback=False)
    with serve(host="localhost") as p:
        assert p.host in ("127.0.0.1", "::1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_host("0.0.0.0", allow_non_loopback=True)
    assert "non-loopback" in str(caught[0].message)
