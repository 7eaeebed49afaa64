"""The recording proxy, offline: the embedded provider is the upstream, driven by the official SDKs.

Two embedded providers with the same seed and policy answer the same conversations, one directly and one
behind the proxy; they must see the same requests and the client the same answers, and the proxy's log
must read (through kit.transcripts) as the upstream's own. Where the upstream must do what the embedded
provider cannot (hold a stream open, compress, refuse a key, record raw bytes), a small loopback
http.server of the test's own stands in. Nothing contacts another host.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageToolCallUnion
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.responses import Response

from kit import transcripts
from kit.jsontypes import JsonObject
from kit.provider import Conversation, Reply, ToolCall, proxy, serve
from kit.provider.log import read
from tests.support import ROOT

LONG = "You are a careful coding agent. Follow the repository conventions exactly. " * 150  # ~2k tokens
OPENAI_KEY = "sk-proj-PLANTEDopenaiKEY0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-PLANTEDanthropicKEY0123456789"
EXEC_TOOL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
CHAT_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "exec_command", "parameters": {"type": "object"}},
}
READ_TOOL = {"name": "exec_command", "description": "run", "input_schema": {"type": "object", "properties": {}}}
TIMES = re.compile(rb'"created(_at)?":\s*[0-9.]+')  # the only fields the embedded provider takes from the clock


class ToolPolicy:
    """Calls ``exec_command`` on cycle 0 (with hidden reasoning), answers with the tool output on cycle 1."""

    name = "test-proxy"

    def reply(self, conversation: Conversation) -> Reply:
        if conversation.cycle == 0:
            return Reply(
                text="Running it.", tool_calls=(ToolCall("exec_command", {"cmd": "cat a.txt"}),), reasoning_tokens=5
            )
        return Reply(text=f"The file says: {conversation.results()[-1][1].text}")


def _normalized(obj: object) -> object:
    """A response or event without its clock fields, as JSON bytes."""
    dumped = obj.model_dump(mode="json", warnings=False) if hasattr(obj, "model_dump") else obj
    return TIMES.sub(b'"created":0', orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS))


def _responses(c: openai.OpenAI, stream: bool) -> list:
    """A Responses tool round trip (cached instructions, cache key and retention); what the client saw."""
    seen: list = []
    common: JsonObject = {"model": "sim-model", "instructions": LONG, "tools": [EXEC_TOOL], "prompt_cache_key": "pck-1"}
    history: list = [{"role": "user", "content": "What is in a.txt?"}]
    for _ in range(2):
        final: Response  # the stream's is a ParsedResponse, a Response
        if stream:
            with c.responses.stream(input=history, prompt_cache_retention="in_memory", **common) as s:
                seen += [_normalized(e) for e in s]
                final = s.get_final_response()
        else:
            final = c.responses.create(input=history, prompt_cache_retention="in_memory", **common)
        seen.append(_normalized(final))
        calls = [item for item in final.output if item.type == "function_call"]
        history += [item.model_dump(exclude_none=True, warnings=False) for item in final.output]
        history += [{"type": "function_call_output", "call_id": call.call_id, "output": "hello"} for call in calls]
    return seen


def _chat(c: openai.OpenAI, stream: bool) -> list:
    seen: list = []
    messages: list = [{"role": "system", "content": LONG}, {"role": "user", "content": "What is in a.txt?"}]
    for _ in range(2):
        text: str | None
        calls: list[ChoiceDeltaToolCall] | list[ChatCompletionMessageToolCallUnion]
        if stream:
            chunks = list(
                c.chat.completions.create(
                    model="sim-model",
                    messages=messages,
                    tools=[CHAT_TOOL],
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            seen += [_normalized(chunk) for chunk in chunks]
            calls = [t for chunk in chunks for choice in chunk.choices for t in choice.delta.tool_calls or [] if t.id]
            text = "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)
        else:
            answer = c.chat.completions.create(model="sim-model", messages=messages, tools=[CHAT_TOOL])
            seen.append(_normalized(answer))
            calls, text = answer.choices[0].message.tool_calls or [], answer.choices[0].message.content
        tool_calls = [
            {"id": t.id, "type": "function", "function": {"name": "exec_command", "arguments": "{}"}} for t in calls
        ]
        messages.append({"role": "assistant", "content": text, **({"tool_calls": tool_calls} if tool_calls else {})})
        messages += [{"role": "tool", "tool_call_id": t["id"], "content": "hello"} for t in tool_calls]
    return seen


def _messages(c: anthropic.Anthropic, stream: bool) -> list:
    """A Messages tool round trip with a 5-minute breakpoint on the system prompt."""
    seen: list = []
    system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    messages: list = [{"role": "user", "content": "What is in a.txt?"}]
    for _ in range(2):
        kw: JsonObject = {
            "model": "claude-opus-5-5",
            "max_tokens": 500,
            "system": system,
            "tools": [READ_TOOL],
            "messages": messages,
        }
        final: anthropic.types.Message  # the stream's is a ParsedMessage, a Message
        if stream:
            with c.messages.stream(**kw) as s:
                seen += [_normalized(e) for e in s]
                final = s.get_final_message()
        else:
            final = c.messages.create(**kw)
        seen.append(_normalized(final))
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]})
        uses = [b for b in final.content if b.type == "tool_use"]
        if uses:
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "hello"} for b in uses],
                }
            )
    return seen


def _everything(base: str) -> list:
    """Every API, streamed and not, two cycles each: what the client saw, in order."""
    oa = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0)
    return [
        *_responses(oa, stream=False),
        *_responses(oa, stream=True),
        *_chat(oa, stream=False),
        *_chat(oa, stream=True),
        *_messages(an, stream=False),
        *_messages(an, stream=True),
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The same conversations, once straight to an embedded provider, once through the proxy to its twin."""
    out = tmp_path_factory.mktemp("proxy-runs")
    with serve(policy=ToolPolicy(), seed=7, log_path=out / "direct.jsonl") as direct:
        seen_direct = _everything(direct.trial_base_url("trial-1"))
    with (
        serve(policy=ToolPolicy(), seed=7, log_path=out / "upstream.jsonl") as upstream,
        proxy(upstream=upstream.trial_base_url("trial-1"), log_path=out / "proxy.jsonl") as p,
    ):
        seen_proxied = _everything(p.trial_base_url("trial-1"))
    return {"direct": seen_direct, "proxied": seen_proxied, "dir": out}


def test_the_upstream_sees_the_same_requests(runs):
    direct, upstream = read(runs["dir"] / "direct.jsonl"), read(runs["dir"] / "upstream.jsonl")
    assert len(upstream) == len(direct) == 12
    for mine, theirs in zip(upstream, direct, strict=True):
        for key in ("endpoint", "api", "stream", "status", "model", "domain", "prompt_cache_key", "trial_id"):
            assert mine[key] == theirs[key], key
        assert mine["segments"] == theirs["segments"]  # the same prompt, block by block
        assert mine["usage"] == theirs["usage"] and mine["response_id"] == theirs["response_id"]
    assert {line["domain"] for line in upstream if line["api"] != "messages"} == {direct[0]["domain"]}


def test_the_client_sees_the_same_answers(runs):
    assert len(runs["proxied"]) == len(runs["direct"]) > 12  # every JSON answer and every SSE event
    for mine, theirs in zip(runs["proxied"], runs["direct"], strict=True):
        assert mine == theirs


def test_the_proxy_log_reads_as_the_upstreams_own(runs):
    proxied, upstream = read(runs["dir"] / "proxy.jsonl"), read(runs["dir"] / "upstream.jsonl")
    for mine, theirs in zip(proxied, upstream, strict=True):
        for key in ("endpoint", "api", "stream", "status", "model", "domain", "prompt_cache_key", "trial_id"):
            assert mine[key] == theirs[key], key
        for key in ("segments", "response_id", "wire_usage", "tool_calls", "tool_results"):
            assert mine[key] == theirs[key], key
        assert mine["upstream"].endswith("/t/trial-1") and mine["server_ms"] > 0
        assert mine["upstream_simulated"] is True  # the kit's own provider answered: still a simulation
    assert [line["prompt_cache_retention"] for line in proxied[:4]] == ["in_memory"] * 4
    assert any(line["usage"]["cache_read_tokens"] for line in proxied)  # the second cycles hit the cache

    rows = {
        name: transcripts.read(runs["dir"] / f"{name}.jsonl", format="provider_log") for name in ("proxy", "upstream")
    }
    # Every count the provider reports on the wire; the simulator also logs what it did not report (Chat's
    # cache writes under implicit caching, OpenAI's 1-hour writes), which the proxy cannot know.
    reported = ["trial_id", "cycle", "model", "input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens"]
    reported += ["tool_calls", "usage_known", "uncached_input_tokens", "total_tokens"]
    assert rows["proxy"][reported].equals(rows["upstream"][reported])
    not_chat = [line["api"] != "chat" for line in upstream]
    assert rows["proxy"]["cache_write_tokens"][not_chat].equals(rows["upstream"]["cache_write_tokens"][not_chat])
    anthropic_rows = [line["api"] == "messages" for line in upstream]
    written_1h = "cache_write_1h_tokens"
    assert rows["proxy"][written_1h][anthropic_rows].equals(rows["upstream"][written_1h][anthropic_rows])
    tools = {name: transcripts.tool_results(runs["dir"] / f"{name}.jsonl", format="provider_log") for name in rows}
    assert len(tools["proxy"]) == 6 and tools["proxy"].equals(tools["upstream"])


class Upstream(http.server.ThreadingHTTPServer):
    """A loopback upstream of the test's own: records what it receives, answers with ``answer(handler)``."""

    daemon_threads = True

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None]):
        self.received: list[dict] = []
        self.answer = answer

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # `self` is the server
                body = handler.rfile.read(int(handler.headers.get("content-length", 0)))
                self.received.append({"path": handler.path, "headers": handler.headers.items(), "body": body})
                self.answer(handler)

            do_GET = do_POST

            def log_message(handler, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def upstream_of(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> Iterator[Upstream]:
    server = Upstream(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _json_answer(body: bytes, status: int = 200, **headers: str) -> Callable:
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in {"content-type": "application/json", **headers}.items():
            handler.send_header(name, value)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


USAGE = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 9}


def test_request_bytes_path_query_and_headers_pass_unchanged(tmp_path):
    raw = b'{ "model" :"sim-model",\n  "input": "caf\\u00e9 \xc3\xa9",  "stream":false }'  # odd but valid JSON
    headers = {"authorization": f"Bearer {OPENAI_KEY}", "x-custom": "1", "accept-encoding": "br, gzip;q=0.5"}
    with upstream_of(_json_answer(orjson.dumps({"id": "resp_1", "output": [], "usage": USAGE}))) as up:
        with proxy(upstream=up.url + "/prefix", log_path=tmp_path / "log.jsonl") as p:
            response = httpx.post(p.trial_base_url("t 1/a") + "/v1/responses?x=1&y=%2F", content=raw, headers=headers)
            models = httpx.get(p.base_url + "/v1/models")  # not a model request: passed on, not logged
        direct = httpx.post(up.url + "/prefix/v1/responses?x=1&y=%2F", content=raw, headers=headers)
    assert response.status_code == 200 and response.content == direct.content
    assert models.status_code == 200 and up.received[1]["path"] == "/prefix/v1/models"
    via, _, straight = up.received
    assert via["body"] == straight["body"] == raw
    assert via["path"] == straight["path"] == "/prefix/v1/responses?x=1&y=%2F"  # the trial prefix stays here
    sent, forwarded = ({k.lower(): v for k, v in r["headers"]} for r in (straight, via))
    assert forwarded["host"] == sent["host"] == up.url.removeprefix("http://")  # rewritten from the proxy's
    assert forwarded.pop("accept-encoding") == "gzip;q=0.5"  # narrowed to the codings the proxy can read
    assert forwarded["authorization"] == f"Bearer {OPENAI_KEY}"  # keys are forwarded
    assert forwarded == {k: v for k, v in sent.items() if k not in ("connection", "accept-encoding")}  # hop-by-hop
    (line,) = read(tmp_path / "log.jsonl")
    assert line["trial_id"] == "t 1/a" and line["endpoint"] == "/v1/responses" and line["segments"]
    assert line["upstream_simulated"] is False  # an upstream that is not the kit's provider
    assert line["usage"]["input_tokens"] == 1500 and line["usage"]["cache_read_tokens"] == 1024


def test_a_compressed_answer_passes_as_sent_and_is_read(tmp_path):
    body = gzip.compress(orjson.dumps({"id": "resp_2", "output": [], "usage": USAGE}))
    with (
        upstream_of(_json_answer(body, **{"content-encoding": "gzip"})) as up,
        proxy(upstream=up.url, log_path=tmp_path / "l.jsonl") as p,
        httpx.stream("POST", p.base_url + "/v1/responses", json={"model": "m", "input": "hi"}) as response,
    ):
        assert b"".join(response.iter_raw()) == body
    (line,) = read(tmp_path / "l.jsonl")
    assert line["response_id"] == "resp_2" and line["wire_usage"] == USAGE


def test_sse_reaches_the_client_as_it_arrives(tmp_path):
    """The upstream sends its final event only after the client has the first: a buffering proxy deadlocks."""
    client_has_first = threading.Event()
    final = {"type": "response.completed", "response": {"id": "resp_3", "output": [], "usage": USAGE}}

    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()  # no length: HTTP/1.0, the body ends when the connection closes
        handler.wfile.write(
            b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_3"}}\n\n'
        )
        handler.wfile.flush()
        if client_has_first.wait(10):
            handler.wfile.write(b"event: response.completed\ndata: " + orjson.dumps(final) + b"\n\n")

    with upstream_of(answer) as up, proxy(upstream=up.url, log_path=tmp_path / "l.jsonl") as p:
        body = {"model": "m", "input": "hi", "stream": True}
        with httpx.stream("POST", p.base_url + "/v1/responses", json=body, timeout=20) as response:
            events = []
            for event in response.iter_lines():
                if event.startswith("data:"):
                    events.append(orjson.loads(event[5:]))
                    client_has_first.set()
                    if events[-1]["type"] == "response.completed":
                        (line,) = read(tmp_path / "l.jsonl")  # logged before the final event left the proxy
    assert [e["type"] for e in events] == ["response.created", "response.completed"]
    assert line["status"] == 200 and line["stream"] and line["wire_usage"] == USAGE and line["error"] is None


def test_a_client_hanging_up_mid_stream_is_logged(tmp_path):
    release = threading.Event()

    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(b'data: {"type":"response.created","response":{"id":"resp_4"}}\n\n')
        handler.wfile.flush()
        release.wait(10)

    with upstream_of(answer) as up, proxy(upstream=up.url, log_path=tmp_path / "l.jsonl") as p:
        body = {"model": "m", "input": "hi", "stream": True}
        with httpx.stream("POST", p.base_url + "/v1/responses", json=body, timeout=20) as response:
            next(response.iter_lines())  # the first event, then hang up
        deadline = time.monotonic() + 10
        while not read(tmp_path / "l.jsonl") and time.monotonic() < deadline:
            time.sleep(0.02)
        release.set()
    (line,) = read(tmp_path / "l.jsonl")
    assert line["error"].startswith("client disconnected after") and line["response_id"] == "resp_4"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upstream_down_is_a_502_the_client_can_read(tmp_path):
    with proxy(upstream=f"http://127.0.0.1:{_free_port()}", log_path=tmp_path / "l.jsonl") as p:
        oa = openai.OpenAI(base_url=p.trial_base_url("t9") + "/v1", api_key=OPENAI_KEY, max_retries=0)
        with pytest.raises(openai.InternalServerError) as failed:
            oa.responses.create(model="sim-model", input="hi")
        an = anthropic.Anthropic(base_url=p.base_url, api_key=ANTHROPIC_KEY, max_retries=0)
        with pytest.raises(anthropic.InternalServerError) as failed_anthropic:
            an.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 502 and "could not reach the upstream" in failed.value.message
    assert failed_anthropic.value.body["error"]["type"] == "api_error"
    lines = read(tmp_path / "l.jsonl")
    assert [(line["status"], line["api"], line["trial_id"]) for line in lines] == [
        (502, "responses", "t9"),
        (502, "messages", None),
    ]
    assert all("could not reach the upstream" in line["error"] and line["segments"] for line in lines)
    events = transcripts.read(tmp_path / "l.jsonl", format="provider_log").attrs["events"]
    assert [e["detail"]["status"] for e in events] == [502, 502]


class DropPolicy:
    name = "drop"

    def reply(self, conversation: Conversation) -> Reply:
        return Reply(text="x" * 2000, fault="drop")


def test_a_dropped_stream_is_dropped_for_the_client_and_logged(tmp_path):
    with serve(policy=DropPolicy()) as up, proxy(upstream=up.base_url, log_path=tmp_path / "l.jsonl") as p:
        oa = openai.OpenAI(base_url=p.base_url + "/v1", api_key=OPENAI_KEY, max_retries=0)
        with pytest.raises(openai.APIError), oa.responses.stream(model="m", input="hi") as s:
            list(s)
    (line,) = read(tmp_path / "l.jsonl")
    assert line["status"] == 200 and line["error"].startswith("upstream connection lost after")


def test_no_key_in_any_byte_the_proxy_writes(tmp_path):
    """The CLI, as a user runs it: keys in every header providers use, a 401 quoting the key, a dead upstream."""
    quoted = orjson.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {OPENAI_KEY}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
    )
    log, out, err = tmp_path / "logs" / "proxy.jsonl", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    code = "import sys; from kit.cli.provider import main; sys.exit(main(sys.argv[1:]))"
    with serve(seed=1) as up, upstream_of(_json_answer(quoted, status=401)) as refusing:
        for upstream in (up.base_url, refusing.url, f"http://127.0.0.1:{_free_port()}"):
            command = [sys.executable, "-c", code, "proxy", "--upstream", upstream, "--log", str(log)]
            with out.open("ab") as o, err.open("ab") as e:
                child = subprocess.Popen(command, cwd=ROOT, stdout=o, stderr=e)
            try:
                base = _first_line(out, child)
                _send_keys(base)
            finally:
                child.send_signal(signal.SIGINT)
                child.wait(timeout=120)
            out.write_bytes(out.read_bytes().replace(base.encode(), b"BASE"))  # the next run's first line is new
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(read(log)) == 12 and {200, 401, 502} <= {line["status"] for line in read(log)}
    for path in written:
        data = path.read_bytes()
        for key in (OPENAI_KEY, ANTHROPIC_KEY):
            assert key.encode() not in data and key[-12:].encode() not in data, path.name


def _send_keys(base: str) -> None:
    """A key in each header providers use (Authorization, x-api-key, api-key), a request per API and mode.

    The refusing and the dead upstream answer errors: what counts here is what got written, not the answer.
    """
    oa = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0)
    hi: list[Any] = [{"role": "user", "content": "hi"}]  # the same JSON message to both SDKs
    with contextlib.suppress(openai.APIError):
        oa.responses.create(model="m", input="hi")
    with contextlib.suppress(openai.APIError):
        list(oa.chat.completions.create(model="m", messages=hi, stream=True))
    with contextlib.suppress(anthropic.APIError):
        an.messages.create(model="m", max_tokens=9, messages=hi)
    httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": []}, headers={"api-key": OPENAI_KEY})


def _first_line(path: Path, child: subprocess.Popen) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        started = [line for line in path.read_text().splitlines() if line.startswith("http://")]
        if started:  # earlier runs' base URLs were blanked out
            return started[0]
        if child.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"the proxy did not start: {path.read_text()}")


def test_bad_upstreams_are_refused():
    for url in ("ftp://example.org", "https://user:secret@example.org", "https://example.org/?key=1", "example.org"):
        with pytest.raises(ValueError, match="upstream"), proxy(upstream=url):
            pass
    with pytest.raises(ValueError, match="loopback"), proxy(upstream="http://127.0.0.1:1", host="0.0.0.0"):
        pass
