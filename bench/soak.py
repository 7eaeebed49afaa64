"""Soak the embedded provider: concurrent agent trials for a fixed time, nothing may fail or grow.

    .venv/bin/python bench/soak.py --minutes 10 [--concurrency 16] [--capacity-tokens 2000000]

The provider runs in a process of its own (so its memory is measured alone, VmRSS from /proc) with the
batch-read pack's scripted model and a cache engine of ``--capacity-tokens``. ``--concurrency`` client
threads each run real SDK-agent trials (``kit.agents.sdk`` on the openai SDK, one of the pack's arms)
back to back for the whole period. Every trial is isolated (its own nonce, cache-bust tool and
``prompt_cache_key``), so each one adds new cache entries: the cache fills to its capacity early and
evicts from then on, which is the regime where a leak would show.

Each window reports the requests answered, the failures (a non-200 in the provider's log, or a trial
that did not finish), p50 / p95 / max request latency (the client's wall time per response), the
server's peak RSS and the cache's resident tokens. The verdict: no failed request, resident tokens
never above the capacity, and the server's RSS in the second half of the run no higher than at the
end of the first half plus ``--rss-slack-mb`` (memory bounded once the cache is full). p95 latency is
reported per window, with the ratio of the last window to the first (stable: close to 1); the client's
latency includes its own share of the machine (16 agent loops in one Python process), so the server's
own time per request (``server_ms`` from its log) is shown beside it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

CAPACITY_TOKENS = 2_000_000
RSS_SLACK_MB = 48.0


def _rss_mb(pid: int) -> float:
    """Resident memory of a process (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _serve(capacity: int, log_path: str) -> None:
    """The provider process (``soak.py --serve``): prints its base URL, then answers each line on stdin
    with the cache's resident tokens, until stdin closes."""
    from kit import tasks
    from kit.provider import serve

    policy = tasks.get("batch-read").policy()
    with serve(profile="openai-implicit", policy=policy, capacity_tokens=capacity, log_path=log_path) as provider:
        print(provider.base_url, flush=True)
        for _ in sys.stdin:
            print(provider.engine.resident_tokens, flush=True)


@dataclass
class _Tally:
    """What the clients saw, shared under a lock: (time, latency) per response and failed trials."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (wall-clock start, seconds)
    failed: list[tuple[float, str]] = field(default_factory=list)
    trials: int = 0


def _client(index: int, base_url: str, until: float, workdir: Path, out_root: Path, tally: _Tally) -> None:
    """Run trials back to back until ``until`` (time.monotonic); record each response's latency."""
    from kit import tasks
    from kit.agents import sdk
    from kit.agents.base import TrialSpec
    from kit.experiment import design

    pack = tasks.get("batch-read")
    arms = list(pack.arms().values())
    n = 0
    while time.monotonic() < until:
        trial_id = f"c{index:02d}-t{n:05d}"
        nonce = design.nonce("soak", trial_id, n)
        out = out_root / trial_id
        out.mkdir(parents=True)
        spec = TrialSpec(
            batch="soak", trial_id=trial_id, arm=arms[n % len(arms)], run=n, order_index=n, nonce=nonce,
            isolation=frozenset({"nonce", "cache_bust_tool", "prompt_cache_key"}),
            prompt_cache_key=design.prompt_cache_key("soak", nonce, "arm", n), prompts=tuple(pack.prompts_for(0)),
            workdir=workdir, out_dir=out, base_url=f"{base_url}/t/{trial_id}", api_key=f"soak-key-{index}",
            model="sim-model", timeout_s=120,
        )  # fmt: skip
        try:
            outcome = sdk.run_trial("sdk-openai", spec)
            reason = "" if outcome.status == "ok" else outcome.reason
        except Exception as exc:  # the soak reports every failure; it never stops at one
            reason = f"{type(exc).__name__}: {exc}"
        records = [orjson.loads(line) for line in (out / "sdk_responses.jsonl").read_bytes().splitlines()]
        shutil.rmtree(out, ignore_errors=True)
        now = time.monotonic()
        with tally.lock:
            tally.trials += 1
            tally.latencies += [(_wall(r["started_at"]), r["wall_s"]) for r in records]
            if reason:
                tally.failed.append((now, reason))
        n += 1


def _wall(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _read_log(log_path: Path) -> tuple[dict[int | None, int], list[tuple[float, float]]]:
    """Responses per HTTP status, and (wall time, server_ms) per response, from the provider's log (streamed)."""
    counts: dict[int | None, int] = {}
    server: list[tuple[float, float]] = []
    with log_path.open("rb") as fh:
        for line in fh:
            record = orjson.loads(line)
            counts[record.get("status")] = counts.get(record.get("status"), 0) + 1
            server.append((_wall(record["ts"]), record["server_ms"]))
    return counts, server


def soak(
    minutes: float,
    concurrency: int = 16,
    capacity_tokens: int = CAPACITY_TOKENS,
    windows: int = 10,
    rss_slack_mb: float = RSS_SLACK_MB,
) -> dict[str, Any]:
    """Run the soak; returns ``{"windows": [...], "summary": {...}, "ok": bool}``."""
    tmp = Path(tempfile.mkdtemp(prefix="kit-soak-"))
    log_path = tmp / "provider_log.jsonl"
    argv = [sys.executable, __file__, "--serve", str(capacity_tokens), str(log_path)]
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip()
        if not base_url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the provider process did not start (said {base_url!r})")
        from kit import tasks

        workdir = tmp / "work" / "repo_a"
        workdir.mkdir(parents=True)
        tasks.get("batch-read").prepare(workdir)
        tally = _Tally()
        start, wall_start = time.monotonic(), time.time()
        until = start + minutes * 60
        clients = [
            threading.Thread(target=_client, args=(i, base_url, until, workdir, tmp / "trials", tally), daemon=True)
            for i in range(concurrency)
        ]
        for thread in clients:
            thread.start()
        samples = []  # (t, rss_mb, resident_tokens)
        while any(t.is_alive() for t in clients):
            server.stdin.write("stats\n")
            server.stdin.flush()
            resident = int(server.stdout.readline())
            samples.append((time.monotonic(), _rss_mb(server.pid), resident))
            time.sleep(1.0)
        server.stdin.close()
        server.wait(30)
        statuses, server_ms = _read_log(log_path)
        server_ms = [(t - wall_start + start, ms) for t, ms in server_ms]  # wall clock onto the monotonic one
        tally.latencies = [(t - wall_start + start, s) for t, s in tally.latencies]
        log_mb = log_path.stat().st_size / 1e6
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return _verdict(
        start, minutes * 60, windows, tally, samples, statuses, server_ms, capacity_tokens, rss_slack_mb, log_mb
    )


def _verdict(
    start: float,
    period: float,
    windows: int,
    tally: _Tally,
    samples: list[tuple[float, float, int]],
    statuses: dict[int | None, int],
    server_ms: list[tuple[float, float]],
    capacity: int,
    slack: float,
    log_mb: float,
) -> dict[str, Any]:
    edges = [start + period * i / windows for i in range(windows)] + [float("inf")]
    rows = []
    for i in range(windows):
        lo, hi = edges[i], edges[i + 1]
        lat = np.array([w for t, w in tally.latencies if lo <= t < hi]) * 1000
        rss = [r for t, r, _ in samples if lo <= t < hi]
        resident = [k for t, _, k in samples if lo <= t < hi]
        served = np.array([ms for t, ms in server_ms if lo <= t < hi])
        rows.append(
            {
                "window": i + 1,
                "until_s": round(period * (i + 1) / windows, 1),
                "requests": int(lat.size),
                "failed": sum(1 for t, _ in tally.failed if lo <= t < hi),
                "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else None,
                "p95_ms": round(float(np.percentile(lat, 95)), 1) if lat.size else None,
                "max_ms": round(float(lat.max()), 1) if lat.size else None,
                "server_p95_ms": round(float(np.percentile(served, 95)), 1) if served.size else None,
                "server_rss_mb": round(max(rss), 1) if rss else None,
                "resident_tokens": max(resident) if resident else None,
            }
        )
    half = start + period / 2
    first = [r for t, r, _ in samples if t < half]
    second = [r for t, r, _ in samples if t >= half]
    p95 = [r["p95_ms"] for r in rows if r["p95_ms"] is not None]
    summary = {
        "trials": tally.trials,
        "requests": len(tally.latencies),
        "failed_trials": len(tally.failed),
        "non_200_responses": sum(n for status, n in statuses.items() if status != 200),
        "logged_responses": sum(statuses.values()),
        "capacity_tokens": capacity,
        "max_resident_tokens": max((k for _, _, k in samples), default=0),
        "rss_end_of_first_half_mb": round(first[-1], 1) if first else None,
        "rss_max_second_half_mb": round(max(second), 1) if second else None,
        "p95_last_over_first": round(p95[-1] / p95[0], 2) if len(p95) > 1 and p95[0] else None,
        "provider_log_mb": round(log_mb, 1),
        "failures": [why for _, why in tally.failed[:5]],
    }
    bounded = bool(first and second) and max(second) <= first[-1] + slack
    ok = (
        summary["failed_trials"] == 0
        and summary["non_200_responses"] == 0
        and summary["max_resident_tokens"] <= capacity
        and bounded
    )
    return {"windows": rows, "summary": summary, "ok": ok}


def _table(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        _serve(int(argv[1]), argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the soak (<= 10 for a local run)")
    ap.add_argument("--concurrency", type=int, default=16, help="trials running at once")
    ap.add_argument("--capacity-tokens", type=int, default=CAPACITY_TOKENS, help="the cache engine's capacity")
    ap.add_argument("--windows", type=int, default=10, help="report windows")
    ap.add_argument("--rss-slack-mb", type=float, default=RSS_SLACK_MB, help="allowed RSS growth after warm-up")
    args = ap.parse_args(argv)
    result = soak(args.minutes, args.concurrency, args.capacity_tokens, args.windows, args.rss_slack_mb)
    print(_table(result["windows"]))
    print()
    for key, value in result["summary"].items():
        print(f"{key}: {value}")
    print("verdict:", "ok" if result["ok"] else "FAILED")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
