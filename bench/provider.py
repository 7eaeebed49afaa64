"""Bench the embedded provider: server-side time per request and throughput under concurrency.

    .venv/bin/python bench/provider.py [--sessions N] [--clients 16]

Prompts are Codex-shaped Responses requests (tools, developer instructions, a user prompt, then
function_call / function_call_output pairs) of about 2k, 30k and 100k tokens. For each size a fresh
session's first request (every block new to the tokeniser and the cache) is compared with its
follow-up (the same history plus one new call/output pair), using ``server_ms`` from the request log
(receipt of the request to the response ready, log line included). Throughput: 16 client threads,
each its own API key, each growing its own ~2k-token session with streamed requests.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

import httpx
import orjson

from kit.provider import serve
from kit.provider.log import read
from kit.tokens import count

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "file",
    "read",
    "write",
    "cmd",
    "output",
    "test",
    "value",
    "index",
    "error",
    "line",
    "path",
    "module",
]
TOOLS = [
    {"type": "function", "name": n, "description": f"The {n} tool. " * 20, "parameters": {"type": "object"}}
    for n in ("exec_command", "write_stdin", "view_image", "apply_patch")
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(words))


def _session(rng: random.Random, target_tokens: int) -> list[dict]:
    """Input items of about ``target_tokens`` tokens: instructions, a prompt, then call/output pairs."""
    items = [
        {"role": "developer", "content": _text(rng, 600)},
        {"role": "user", "content": "Fix the failing test. " + _text(rng, 30)},
    ]
    size = count(orjson.dumps(items).decode())
    step = 0
    while size < target_tokens:
        items += _pair(rng, step, min(600, max(20, (target_tokens - size) // 2)))
        size = count(orjson.dumps(items).decode())
        step += 1
    return items


def _pair(rng: random.Random, step: int, words: int) -> list[dict]:
    call_id = f"call_{step}_{rng.randrange(10**9)}"
    return [
        {"type": "function_call", "call_id": call_id, "name": "exec_command", "arguments": '{"cmd": "cat f.py"}'},
        {"type": "function_call_output", "call_id": call_id, "output": _text(rng, words)},
    ]


def _post(client: httpx.Client, items: list[dict], key: str, stream: bool = False) -> None:
    body = {"model": "sim-model", "tools": TOOLS, "input": items, "stream": stream, "prompt_cache_key": key}
    response = client.post("/v1/responses", content=orjson.dumps(body), headers={"authorization": f"Bearer {key}"})
    response.raise_for_status()


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def latency_table(sessions: int) -> list[tuple[str, int, float, float, float, float]]:
    rows = []
    for label, target in (("2k", 2_000), ("30k", 30_000), ("100k", 100_000)):
        rng = random.Random(target)
        with serve() as p, httpx.Client(base_url=p.base_url, timeout=60) as client:
            _post(client, _session(random.Random(0), 500), "warmup")  # loads the tokeniser once
            for n in range(sessions):
                items = _session(rng, target)
                _post(client, items, f"s{n}")
                _post(client, [*items, *_pair(rng, 10_000, 200)], f"s{n}")
            lines = read(p.log_path)[1:]
        tokens = statistics.median(line["usage"]["input_tokens"] for line in lines[0::2])
        first = _percentiles([line["server_ms"] for line in lines[0::2]])
        follow = _percentiles([line["server_ms"] for line in lines[1::2]])
        rows.append((label, int(tokens), *first, *follow))
    return rows


def throughput(clients: int, requests_each: int) -> tuple[int, float]:
    with serve() as p:
        barrier = threading.Barrier(clients + 1)

        def run(n: int) -> None:
            rng = random.Random(n)
            items = _session(rng, 2_000)
            with httpx.Client(base_url=p.base_url, timeout=60) as client:
                barrier.wait()
                for step in range(requests_each):
                    items += _pair(rng, step, 100)
                    _post(client, items, f"key-{n}", stream=True)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        done = len(read(p.log_path))
    return done, done / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20, help="sessions per prompt size")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=20, help="requests per client in the throughput run")
    args = parser.parse_args(argv)
    print(f"server_ms per request (p50 / p95), {args.sessions} sessions per size, openai-implicit, EchoPolicy")
    print(f"{'prompt':>6} {'tokens':>7} | {'first p50':>9} {'first p95':>9} | {'follow-up p50':>13} {'p95':>7}")
    for label, tokens, f50, f95, u50, u95 in latency_table(args.sessions):
        print(f"{label:>6} {tokens:>7} | {f50:>9.2f} {f95:>9.2f} | {u50:>13.2f} {u95:>7.2f}")
    print("target: a 30k follow-up <= 10 ms p50")
    done, rate = throughput(args.clients, args.requests)
    print(
        f"\n{args.clients} concurrent streaming clients (~2k-token growing sessions): {done} requests, {rate:.0f} req/s"
    )


if __name__ == "__main__":
    main()
