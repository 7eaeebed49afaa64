"""Parse stage speed: the kit's transcript reader against ccusage on the same 250+ MB corpus.

    .venv/bin/python bench/parse.py [--mb 260] [--repeats 5] [--keep DIR] [--probes] [--floor]
                                    [--only codex] [--case CASE] [--kit-only]

Two corpora are written under a temporary folder (never the repository), one object per line in
compact JSON (ccusage skips lines with spaces after separators):

- Claude Code, ``projects/<project>/<session>.jsonl`` and ``<session>/subagents/agent-*.jsonl``:
  copies of the real session fixtures with fresh message, request, tool-use and session ids per copy,
  so dedupe keys are unique across copies while the duplicate lines inside a copy (one line per
  content block; spotter's ``…BN5jdsym`` written with output 25, then 173) keep their structure.
- Codex, ``sessions/YYYY/MM/DD/rollout-*.jsonl``: copies of the real rollout fixture (fresh ids,
  moved timestamps) and synthetic rollouts shaped like CLI 0.169's (``kit/transcripts/codex_rollout.py``):
  per response a ``token_usage_record`` and an ``event_msg``/``token_count``, a third of the latter
  re-emitted as Codex does (byte-identical, or with a fresh timestamp).

The generator knows what it wrote, so each corpus carries its expected totals (per response, the
usage of its last line; re-emits counted once); every tool is checked against them, and a tool that
misses them is matched against the usual wrong readings (first line per response, every line
summed, every token event summed). After a sync and one untimed warm-up each, runs alternate kit,
peer, kit, peer… (paired: same page cache and machine load); medians are reported, with the 1-minute
load average before and after each case (``load``: other work slows the kit's two processes and a peer
unevenly, so ratios taken under load vary). The kit is timed in-process (``kit.transcripts.read`` to
the canonical table, then the sums; Python start-up and imports, about 0.7 s, are not counted); a peer
as its whole process with ``--json --offline`` and an empty ``HOME``, so that only the corpus is found.

Four cases per corpus (``TARGETS``): cold (``read(folder)``: files over processes when there is more
than one core); cold into an empty parse cache (the requests a first ``python -m kit history`` reads; no
target; the history also reads the tool results, whose ``o200k_base`` counts cost about 1 s per 20 MB of
tool output cold, docs/method.md#calibration); warm with nothing changed (``read(folder, cache=…)``
again in the same process, as a notebook re-runs its cell); and warm after each round grew the corpus by
1% of its bytes (half appended to 1% of the sessions, as resumed sessions continue their files, half as
new sessions; the expected totals follow), the kit re-reading through its cache what changed since its
previous run (a grown file only from where its previous read stopped). The last table gathers every case
with its target against ccusage 20.0.24 and whether it was met.

``--floor`` adds the floor of any reader whose logic runs per line in Python: the files read, cut into
lines and each line decoded into a struct without fields, but the long lines of tool output that a read
of requests passes over (as the kit's does), in one process and in two, paired with ccusage 20.0.24. The
kit's cold case pays that and its rules and columns on top.

Peers (``make bench-peers``): ccusage 20.0.24's native binary for both corpora (``ccusage session``;
``ccusage codex session``, which replaced the ``@ccusage/codex`` package, now a stub saying "use npx
ccusage"), and ``@ccusage/codex`` 18.0.11, that package's last working release (Node).
Exit status 1 when the kit misses the expected totals or differs from ccusage 20.0.24, 2 when that
peer is not installed (``--kit-only`` times the kit alone, without peers). ``--probes`` adds small cases outside the
corpus where counting rules matter.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import orjson

from kit import transcripts
from kit.transcripts import _base, claude_session, codex_rollout
from kit.transcripts import cache as cache_module

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"  # real public transcripts, see tests/fixtures/SOURCES.md
PEERS = ROOT / ".tools/bench-peers/node_modules"
CCUSAGE = PEERS / "@ccusage/ccusage-linux-x64/bin/ccusage"
CCUSAGE_CODEX_JS = PEERS / "@ccusage/codex/dist/index.js"
CLAUDE_MAIN = (
    "claude-session_spotter_tool_heavy.jsonl",
    "claude-session_ccb_harbor_paired.jsonl",
    "claude-session_agent-history_v2.1.152.jsonl",
)
CLAUDE_SUBAGENT = "claude-session_spotter_subagent_acompact.jsonl"
CODEX_FIXTURE = "codex-rollout_agent-history_codex_exec_0.135.0.jsonl"
MB = 1_000_000


@dataclass
class Totals:
    """Token sums in the kit's canonical terms: ``input`` is the whole input side (cache included).

    None marks a count the tool does not report (the old ``@ccusage/codex`` has no cache writes).
    """

    input: int | None = 0
    cache_read: int | None = 0
    cache_write: int | None = 0
    output: int | None = 0
    total: int | None = 0

    def add(self, other: Totals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def agrees(self, other: Totals) -> bool:
        """Equal on every count both report."""
        pairs = ((getattr(self, f.name), getattr(other, f.name)) for f in fields(self))
        return all(a == b for a, b in pairs if None not in (a, b))


@dataclass
class Corpus:
    """What the generator wrote: the folder a tool is pointed at, its size and the expected totals.

    ``readings`` holds the totals of the usual wrong readings of the same lines, to name the rule a
    disagreeing tool follows.
    """

    root: Path
    files: int = 0
    lines: int = 0
    bytes: int = 0
    expected: Totals = field(default_factory=Totals)
    readings: dict[str, Totals] = field(default_factory=dict)
    grower: Callable[[Corpus, Path, int], int] | None = None  # appends about n bytes to a file, returns them
    maker: Callable[[Corpus, int], None] | None = None  # writes new files of about n bytes
    grown: list[Path] = field(default_factory=list)  # the files that may grow (main sessions, rollouts)

    def write(self, path: Path, blob: bytes) -> None:
        write(path, blob)
        self.files += 1
        self.lines += blob.count(b"\n")
        self.bytes += len(blob)

    def append(self, path: Path, blob: bytes) -> None:
        with open(path, "ab") as handle:
            handle.write(blob)
        self.lines += blob.count(b"\n")
        self.bytes += len(blob)

    def grow(self, share: float, rng: random.Random) -> None:
        """What a day of use adds: ``share`` of the bytes, half appended to the latest 1% of the sessions
        (resumed, still running), half as new sessions. Expected totals follow."""
        target = int(self.bytes * share)
        files = rng.sample(self.grown, max(1, len(self.grown) // 100))
        appended = sum(self.grower(self, path, target // 2 // len(files)) for path in files)
        self.maker(self, target - appended)

    def count(self, expected: Totals, **readings: Totals) -> None:
        self.expected.add(expected)
        for name, totals in readings.items():
            self.readings.setdefault(name.replace("_", " "), Totals()).add(totals)


def write(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)


def jsonl(lines: list[dict]) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


# --- Claude Code corpus -------------------------------------------------------------------------


def anthropic_totals(usage: dict) -> Totals:
    inp, write, read = usage["input_tokens"], usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]
    side = inp + write + read
    return Totals(side, read, write, usage["output_tokens"], side + usage["output_tokens"])


@dataclass
class ClaudeTemplate:
    """A fixture as compact lines, the ids each copy renames, and the totals of one copy."""

    blob: bytes
    session: bytes
    ids: re.Pattern[bytes]
    last: Totals
    first: Totals
    every_line: Totals


def claude_template(path: Path) -> ClaudeTemplate:
    lines = [orjson.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]
    ids: set[str] = set()
    by_id: dict[str, list[dict]] = {}
    every_line = Totals()
    for line in lines:
        if line.get("type") != "assistant":
            continue
        message = line["message"]
        ids |= {message["id"], line["requestId"]}
        ids |= {b["id"] for b in message["content"] if b.get("type") == "tool_use"}
        by_id.setdefault(message["id"], []).append(message["usage"])
        every_line.add(anthropic_totals(message["usage"]))
    last, first = Totals(), Totals()
    for usages in by_id.values():
        last.add(anthropic_totals(usages[-1]))
        first.add(anthropic_totals(usages[0]))
    quoted = sorted((orjson.dumps(i) for i in ids), key=len, reverse=True)
    return ClaudeTemplate(
        blob=jsonl(lines),
        session=orjson.dumps(lines[-1]["sessionId"]),
        ids=re.compile(b"|".join(map(re.escape, quoted))),
        last=last,
        first=first,
        every_line=every_line,
    )


def claude_copy(template: ClaudeTemplate, tag: str, session: str, corpus: Corpus) -> bytes:
    """One copy with every id suffixed by ``tag`` and the session id replaced; its totals are counted."""
    corpus.count(template.last, first_line_per_response=template.first, every_line_summed=template.every_line)
    suffix = f"-{tag}".encode()
    blob = template.ids.sub(lambda m: m.group()[:-1] + suffix + b'"', template.blob)
    return blob.replace(template.session, orjson.dumps(session))


def claude_corpus(root: Path, target: int, rng: random.Random) -> Corpus:
    """Sessions of 10-50 copies of the main fixtures, each with a subagent file of 1-4 compaction requests."""
    corpus = Corpus(root / "projects")
    main = [claude_template(FIXTURES / name) for name in CLAUDE_MAIN]
    sub = claude_template(FIXTURES / CLAUDE_SUBAGENT)
    tags = (f"{n:07d}" for n in range(10**7))

    def session_files(corpus: Corpus, copies: int) -> None:
        project = corpus.root / f"-home-user-project{rng.randrange(8)}"
        session = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        blobs = [claude_copy(t, next(tags), session, corpus) for _ in range(copies) for t in main]
        corpus.write(project / f"{session}.jsonl", b"".join(blobs))
        corpus.grown.append(project / f"{session}.jsonl")
        blobs = [claude_copy(sub, next(tags), session, corpus) for _ in range(rng.randint(1, 4))]
        corpus.write(
            project / session / "subagents" / f"agent-acompact-{rng.getrandbits(24):06x}.jsonl", b"".join(blobs)
        )

    def grower(corpus: Corpus, path: Path, n: int) -> int:
        """Copies of the main fixtures appended to a session file, as a resumed session continues it."""
        blob = b""
        while len(blob) < n:
            blob += b"".join(claude_copy(t, next(tags), path.stem, corpus) for t in main)
        corpus.append(path, blob)
        return len(blob)

    def maker(corpus: Corpus, n: int) -> None:
        end = corpus.bytes + n
        while corpus.bytes < end:
            session_files(corpus, rng.randint(2, 10))

    corpus.grower, corpus.maker = grower, maker
    while corpus.bytes < target:
        session_files(corpus, rng.randint(10, 50))
    return corpus


# --- Codex corpus -------------------------------------------------------------------------------


def uuid7(ms: int, rng: random.Random) -> str:
    """A UUIDv7 (Codex's session and turn ids) for the millisecond ``ms``."""
    value = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    return str(uuid.UUID(int=value))


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def codex_totals(usage: dict) -> Totals:
    """Codex (OpenAI) convention: ``input_tokens`` already holds the cached and cache-written tokens."""
    inp, out = usage["input_tokens"], usage["output_tokens"]
    return Totals(inp, usage["cached_input_tokens"], usage.get("cache_write_input_tokens", 0), out, inp + out)


def words(rng: random.Random, n: int) -> str:
    vocab = ("def", "return", "self", "import", "path", "value", "error", "test", "file", "line", "data", "kit")
    return " ".join(rng.choice(vocab) + str(rng.randrange(100)) for _ in range(n))


def plus(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in a}


class Rollout:
    """A synthetic rollout as CLI 0.169 writes it (``kit.transcripts.codex_rollout``); its totals go to ``corpus``."""

    def __init__(self, rng: random.Random, start: datetime, corpus: Corpus) -> None:
        self.rng, self.now, self.corpus = rng, start, corpus
        self.session = uuid7(int(start.timestamp() * 1000), rng)
        self.lines: list[bytes] = []
        keys = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens")
        self.thread = dict.fromkeys((*keys, "reasoning_output_tokens", "total_tokens"), 0)
        self.context = rng.randint(9_000, 14_000)

    def emit(self, kind: str, payload: dict, step_ms: int = 40) -> None:
        self.now += timedelta(milliseconds=step_ms + self.rng.randrange(20))
        self.lines.append(orjson.dumps({"timestamp": iso(self.now), "type": kind, "payload": payload}) + b"\n")

    def build(self, turns: int, instructions: str) -> bytes:
        meta = {"session_id": self.session, "id": self.session, "timestamp": iso(self.now), "cwd": "/home/user/demo"}
        meta |= {"originator": "codex_exec", "cli_version": "0.169.0", "source": "exec", "thread_source": "user"}
        self.emit("session_meta", meta | {"model_provider": "openai", "base_instructions": {"text": instructions}})
        for _ in range(turns):
            self.turn()
        return b"".join(self.lines)

    def turn(self) -> None:
        rng, turn = self.rng, uuid7(int(self.now.timestamp() * 1000) + 1, self.rng)
        self.emit("event_msg", {"type": "task_started", "turn_id": turn, "model_context_window": 258_400})
        context = {"turn_id": turn, "cwd": "/home/user/demo", "approval_policy": "never", "model": "gpt-5.5"}
        self.emit("turn_context", context | {"sandbox_policy": {"type": "read-only"}, "summary": words(rng, 40)})
        prompt = words(rng, rng.randint(20, 300))
        self.emit("response_item", message("user", "input_text", prompt))
        self.emit("event_msg", {"type": "user_message", "message": prompt, "images": []})
        calls, turn_usage = rng.randint(1, 8), None
        for k in range(calls + 1):
            turn_usage = self.response(turn, turn_usage, final=k == calls)
        self.emit(
            "event_msg", {"type": "task_complete", "turn_id": turn, "last_agent_message": "…", "duration_ms": 604}
        )

    def response(self, turn: str, turn_usage: dict | None, final: bool) -> dict:
        """One model response: reasoning, a call (its output after) or the answer, and its usage lines."""
        rng, call_id = self.rng, f"call_{self.rng.getrandbits(64):016x}"
        secret = rng.randbytes(rng.randint(600, 3000)).hex()
        self.emit("response_item", {"type": "reasoning", "summary": [], "encrypted_content": secret}, 900)
        if final:
            self.emit("response_item", message("assistant", "output_text", words(rng, rng.randint(30, 200))))
        else:
            call = {"type": "function_call", "name": "exec_command", "call_id": call_id}
            self.emit(
                "response_item", call | {"arguments": orjson.dumps({"cmd": f"cat src/{words(rng, 1)}.py"}).decode()}
            )
        usage = self.usage()
        turn_usage = usage if turn_usage is None else plus(turn_usage, usage)
        record = {"thread_id": self.session, "turn_id": turn, "session_id": self.session, "root_turn_id": turn}
        record |= {"response_id": f"resp_{rng.getrandbits(64):016x}", "usage": usage, "turn_token_usage": turn_usage}
        self.emit("token_usage_record", record | {"thread_token_usage": self.thread})
        if not final:
            output = "Chunk ID: 1\nProcess exited with code 0\nOutput:\n" + words(rng, rng.randint(50, 3000))
            self.emit("response_item", {"type": "function_call_output", "call_id": call_id, "output": output})
            self.context += len(output) // 4
        info = {"total_token_usage": self.thread, "last_token_usage": usage, "model_context_window": 258_400}
        event = {"type": "token_count", "info": info, "rate_limits": {"primary": {"used_percent": 12.5}}}
        self.emit("event_msg", event)
        self.corpus.count(Totals(), every_token_event_summed=codex_totals(usage))
        if (reemit := rng.random()) < 0.35:  # Codex re-emits the event: byte for byte, or with a fresh timestamp
            if reemit < 0.2:
                self.lines.append(self.lines[-1])
            else:
                self.emit("event_msg", event)
            self.corpus.count(Totals(), every_token_event_summed=codex_totals(usage))
        return turn_usage

    def usage(self) -> dict:
        """The next response's usage: the context grows by what came back; writes are within the uncached part."""
        rng = self.rng
        uncached, out = rng.randint(200, 2_000), rng.randint(20, 900)
        usage = {"input_tokens": self.context, "cached_input_tokens": self.context - uncached}
        usage |= {"cache_write_input_tokens": rng.randint(0, min(400, uncached)), "output_tokens": out}
        usage |= {"reasoning_output_tokens": rng.randint(0, out), "total_tokens": self.context + out}
        self.context += out + rng.randint(10, 300)
        self.thread = plus(self.thread, usage)
        self.corpus.count(codex_totals(usage))
        return usage


def message(role: str, kind: str, text: str) -> dict:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def fixture_rollout(lines: list[dict], rng: random.Random, start: datetime) -> tuple[str, bytes]:
    """The real rollout fixture with fresh session and turn ids and its timestamps moved to ``start``."""
    origin = datetime.fromisoformat(lines[0]["timestamp"])
    session, turns = uuid7(int(start.timestamp() * 1000), rng), {}
    out = []
    for line in lines:
        moved = dict(line, timestamp=iso(start + (datetime.fromisoformat(line["timestamp"]) - origin)))
        payload = dict(line["payload"])
        if line["type"] == "session_meta":
            payload |= {"id": session, "timestamp": moved["timestamp"]}
        if "turn_id" in payload:
            payload["turn_id"] = turns.setdefault(payload["turn_id"], uuid7(int(start.timestamp() * 1000) + 1, rng))
        out.append(moved | {"payload": payload})
    return session, jsonl(out)


def codex_corpus(root: Path, target: int, rng: random.Random) -> Corpus:
    """One rollout in five is the real fixture, the others synthetic with 1-6 turns of 2-9 responses."""
    corpus = Corpus(root / "sessions")
    fixture = [orjson.loads(raw) for raw in (FIXTURES / CODEX_FIXTURE).read_bytes().splitlines() if raw.strip()]
    events = [line["payload"]["info"] for line in fixture if line["payload"].get("type") == "token_count"]
    instructions = words(rng, 3_000)  # Codex's base instructions, about 21 kB, open every rollout
    start = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
    rollouts: dict[Path, Rollout] = {}

    def grower(corpus: Corpus, path: Path, n: int) -> int:
        """Turns appended to a synthetic rollout, as a resumed Codex session continues its file."""
        rollout, blob = rollouts[path], b""
        while len(blob) < n:
            rollout.turn()
            blob += b"".join(rollout.lines)
            rollout.lines = []
        corpus.append(path, blob)
        return len(blob)

    def maker(corpus: Corpus, n: int) -> None:
        nonlocal start
        end = corpus.bytes + n
        while corpus.bytes < end:
            start += timedelta(minutes=rng.randint(3, 90))
            rollout = Rollout(rng, start, corpus)
            blob = rollout.build(rng.randint(1, 6), instructions)
            stamp = start.strftime("%Y-%m-%dT%H-%M-%S")
            corpus.write(corpus.root / start.strftime("%Y/%m/%d") / f"rollout-{stamp}-{rollout.session}.jsonl", blob)

    corpus.grower, corpus.maker = grower, maker
    while corpus.bytes < target:
        start += timedelta(minutes=rng.randint(3, 90))
        rollout = None
        if rng.random() < 0.2:
            session, blob = fixture_rollout(fixture, rng, start)
            for usage in (codex_totals(info["last_token_usage"]) for info in events):
                corpus.count(usage, every_token_event_summed=usage)
        else:
            rollout = Rollout(rng, start, corpus)
            session, blob = rollout.session, rollout.build(rng.randint(1, 6), instructions)
            rollout.lines = []
        stamp = start.strftime("%Y-%m-%dT%H-%M-%S")
        path = corpus.root / start.strftime("%Y/%m/%d") / f"rollout-{stamp}-{session}.jsonl"
        corpus.write(path, blob)
        if rollout is not None:
            rollouts[path] = rollout
            corpus.grown.append(path)
    return corpus


# --- the tools ----------------------------------------------------------------------------------


def kit_totals(folder: Path, cache: Path | None = None) -> Totals:
    df = transcripts.read(folder, cache=cache)
    if df.attrs["issues"] or not df["usage_known"].all():
        raise SystemExit(f"kit: {len(df.attrs['issues'])} issues reading {folder}: {df.attrs['issues'][:3]}")
    sums = df[["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens"]].sum()
    return Totals(*map(int, sums))


def ccusage_totals(t: dict) -> Totals:
    """ccusage 20's JSON totals in canonical terms: its ``inputTokens`` leaves out cache reads and writes."""
    side = t["inputTokens"] + t["cacheReadTokens"] + t["cacheCreationTokens"]
    return Totals(side, t["cacheReadTokens"], t["cacheCreationTokens"], t["outputTokens"], t["totalTokens"])


def codex_js_totals(t: dict) -> Totals:
    """``@ccusage/codex`` 18's totals: OpenAI's convention (input holds the cached part), no cache writes."""
    return Totals(t["inputTokens"], t["cachedInputTokens"], None, t["outputTokens"], t["totalTokens"])


@dataclass
class Peer:
    name: str
    program: Path  # what ``make bench-peers`` installs
    argv: list[str]
    variable: str  # the environment variable that points it at the corpus
    totals: Callable[[dict], Totals]
    reference: bool = True  # the kit must agree with it (exit status)

    def run(self, folder: Path, home: Path) -> Totals:
        if "," in str(folder):
            raise SystemExit(f"{folder}: ccusage splits {self.variable} at commas; use a folder name without one")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), self.variable: str(folder), "TZ": "UTC"}
        done = subprocess.run(self.argv, env=env, capture_output=True, check=True)
        return self.totals(orjson.loads(done.stdout)["totals"])


def peers() -> dict[str, list[Peer]]:
    native, js = ["session", "--json", "--offline"], [shutil.which("node") or "node", str(CCUSAGE_CODEX_JS)]
    return {
        "claude": [Peer("ccusage 20.0.24", CCUSAGE, [str(CCUSAGE), *native], "CLAUDE_CONFIG_DIR", ccusage_totals)],
        "codex": [
            Peer("ccusage 20.0.24", CCUSAGE, [str(CCUSAGE), "codex", *native], "CODEX_HOME", ccusage_totals),
            Peer("@ccusage/codex 18.0.11", CCUSAGE_CODEX_JS, [*js, *native], "CODEX_HOME", codex_js_totals, False),
        ],
    }


def paired(runs: list[Callable[[], Totals]], repeats: int) -> list[tuple[float, Totals]]:
    """Each run's median seconds over alternating rounds (after one untimed warm-up each), and its totals."""
    results = [run() for run in runs]
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, spent in zip(runs, times, strict=True):
            start = time.perf_counter()
            run()
            spent.append(time.perf_counter() - start)
    return [(statistics.median(spent), result) for spent, result in zip(times, results, strict=True)]


def verdict(corpus: Corpus, got: Totals) -> str:
    if got.agrees(corpus.expected):
        return "yes"
    rule = next((name for name, totals in corpus.readings.items() if got.agrees(totals)), None)
    return f"no: {rule}" if rule else "no"


def table(rows: list[dict]) -> str:
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in rows[0]}
    lines = ["  ".join(k.rjust(w) for k, w in widths.items())]
    lines += ["  ".join(str(r[k]).rjust(w) for k, w in widths.items()) for r in rows]
    return "\n".join(lines)


def totals_row(source: str, totals: Totals) -> dict:
    return {"source": source, **{f.name: "-" if (v := getattr(totals, f.name)) is None else v for f in fields(totals)}}


# case -> the speed the kit must reach against ccusage 20.0.24 (peer s / kit s); None: shown, no target
TARGETS = {"cold": 1.0, "cold, into an empty cache": None, "warm, nothing changed": 20.0, "warm, 1% grown": 10.0}


def grown_rounds(corpus: Corpus, runs: list[Callable[[], Totals]], repeats: int, rng: random.Random) -> list:
    """Each round first grows the corpus by 1% (``Corpus.grow``), then runs every tool once on it, in turn:
    the kit re-reads through its warm cache what changed since its last run. Medians over ``repeats``
    rounds after one untimed round."""
    times: list[list[float]] = [[] for _ in runs]
    results: list[Totals] = []
    for round_ in range(repeats + 1):
        corpus.grow(0.01, rng)
        os.sync()
        results = []
        for run, spent in zip(runs, times, strict=True):
            start = time.perf_counter()
            results.append(run())
            if round_:
                spent.append(time.perf_counter() - start)
    return [(statistics.median(spent), result) for spent, result in zip(times, results, strict=True)]


def bench(
    name: str, corpus: Corpus, tools: list[Peer], home: Path, repeats: int, cache_root: Path, only: list[str]
) -> list[dict]:
    """The cases ``only`` of the corpus against every peer, printed; the rows for the closing table."""
    os.sync()  # the corpus was just written: its write-back must not overlap the timed runs
    folder = corpus.root.parent
    peer_runs = [lambda p=p: p.run(folder, home) for p in tools]
    warm = cache_root / name
    fresh = (cache_root / f"{name}-empty-{n}" for n in range(10**6))
    cases: dict[str, Callable[[], list]] = {
        "cold": lambda: paired([lambda: kit_totals(corpus.root), *peer_runs], repeats),
        "cold, into an empty cache": lambda: paired(
            [lambda: kit_totals(corpus.root, next(fresh)), *peer_runs], repeats
        ),
        "warm, nothing changed": lambda: paired([lambda: kit_totals(corpus.root, warm), *peer_runs], repeats),
        "warm, 1% grown": lambda: grown_rounds(
            corpus, [lambda: kit_totals(corpus.root, warm), *peer_runs], repeats, random.Random(len(name))
        ),
    }
    rows = []
    for case, measure in cases.items():
        if case not in only:
            continue
        load = os.getloadavg()[0]
        (kit_s, kit), *others = measure()
        load = f"{load:.1f}-{os.getloadavg()[0]:.1f}"  # other work on the machine slows both sides unevenly
        for stale in [k for k in cache_module._STORES if f"{name}-empty-" in k]:
            del cache_module._STORES[stale]  # each cold run had its own store; only their files stay
        print(f"\n{name}, {case}: {corpus.root}  (medians of {repeats} paired runs; ratio = peer s / kit s)")
        for peer, (peer_s, got) in zip(tools, others, strict=True):
            target = TARGETS[case] if peer.reference else None
            ratio = peer_s / kit_s
            row = {"corpus": name, "case": case, "peer": peer.name, "MB": f"{corpus.bytes / MB:.1f}"}
            row |= {"files": corpus.files, "kit s": f"{kit_s:.3f}", "peer s": f"{peer_s:.3f}", "ratio": f"{ratio:.2f}"}
            row |= {"target": f">= {target:g}" if target else "-"}
            row |= {"met": "-" if target is None else "yes" if ratio >= target else "NO", "load": load}
            row |= {"totals equal": "yes" if got.agrees(kit) else "NO", "peer = expected": verdict(corpus, got)}
            row["ok"] = kit.agrees(corpus.expected) and (got.agrees(kit) or not peer.reference)
            rows.append(row)
        if not tools:  # --kit-only: the kit's own times, no ratio
            row = {"corpus": name, "case": case, "peer": "-", "MB": f"{corpus.bytes / MB:.1f}", "files": corpus.files}
            row |= {"kit s": f"{kit_s:.3f}", "load": load, "ok": kit.agrees(corpus.expected)}
            rows.append(row)
        print(table([{k: v for k, v in r.items() if k != "ok"} for r in rows if r["case"] == case]))
        print(f"kit = expected: {verdict(corpus, kit)}")
        print(
            table(
                [totals_row("expected", corpus.expected), totals_row("kit", kit)]
                + [totals_row(p.name, got) for p, (_, got) in zip(tools, others, strict=True)]
            )
        )
    return rows


# --- the floor: what any per-line Python reader pays before its logic (--floor) ----------------------------


class _Nothing(msgspec.Struct):
    """No field: decoding a line into it checks that it is JSON and builds nothing."""


NOTHING = msgspec.json.Decoder(_Nothing)
UNUSED = {"claude": claude_session.REQUESTS_ONLY, "codex": codex_rollout.REQUESTS_ONLY}  # what a read of requests skips


def floor_read(paths: list[str], unused: _base.Unused) -> Totals:
    """Each file read whole and cut into lines, every line decoded into ``_Nothing`` but those the kit reads past
    undecoded (``unused``: the long lines of tool output, ``kit.transcripts._base.Unused``): the least a reader
    written in Python does per line, reading as the kit reads (no field kept, no row made, no rule applied)."""
    for path in paths:
        with open(path, "rb") as handle:
            data = handle.read()
        start, find = 0, data.find
        while (end := find(b"\n", start)) >= 0:
            if not (end - start >= _base.LONG and data[end - 1] == _base.CLOSE and unused.passes(data, start, end)):
                NOTHING.decode(data[start:end])
            start = end + 1
    return Totals(None, None, None, None, None)


def floor_pair(pool: ProcessPoolExecutor, halves: list[list[str]], unused: _base.Unused) -> Totals:
    """``floor_read`` of each half in its own worker, once both are done."""
    done = list(pool.map(functools.partial(floor_read, unused=unused), halves))
    return done[0]


def floor(name: str, corpus: Corpus, peer: Peer, home: Path, repeats: int) -> list[dict]:
    """The floor in one process and in two (files dealt alternately, forked workers started before the timing),
    paired with the peer; printed, and returned as rows for the closing table. What the peer's time leaves
    above the floor in two processes is what a reader whose logic runs per line in Python has for its rules."""
    paths = sorted(str(p) for p in corpus.root.rglob("*.jsonl"))
    halves = [paths[0::2], paths[1::2]]
    unused = UNUSED[name]
    with ProcessPoolExecutor(2, multiprocessing.get_context("fork")) as pool:
        list(pool.map(len, halves))  # both workers started
        runs = [
            lambda: floor_read(paths, unused),
            lambda: floor_pair(pool, halves, unused),
            lambda: peer.run(corpus.root.parent, home),
        ]
        (one, _), (two, _), (peer_s, _) = paired(runs, repeats)
    rows = [
        {"corpus": name, "floor": f"{label}", "floor s": f"{spent:.3f}", "peer": peer.name, "peer s": f"{peer_s:.3f}"}
        | {"peer s / floor s": f"{peer_s / spent:.2f}"}
        for label, spent in (("one process", one), ("two processes", two))
    ]
    print(f"\n{name}, floor: files read, lines cut, each decoded into a struct without fields but the tool output")
    print(f"the kit reads past (medians of {repeats})")
    print(table(rows))
    return rows


# --- where the tools count differently (small corpora, --probes) ----------------------------


def probes(base: Path, home: Path) -> list[dict]:
    """Cases outside the benchmark corpus where counting rules matter, each on a tiny corpus (kit vs ccusage 20.0.24).

    Built from spotter's tool_heavy session (4 responses in 9 assistant lines) and a one-response
    Codex rollout; the benchmark corpus has none of these shapes.
    """
    lines = [orjson.loads(raw) for raw in (FIXTURES / CLAUDE_MAIN[0]).read_bytes().splitlines() if raw.strip()]
    assistant = [line for line in lines if line.get("type") == "assistant"]
    no_id = [line | {"message": {k: v for k, v in line["message"].items() if k != "id"}} for line in assistant]
    spaced = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    claude_cases = {
        "response repeated in another session file (resume/fork)": {
            "a.jsonl": jsonl(lines),
            "b.jsonl": jsonl(lines[:-3]),
        },
        "subagent file repeating parent responses (same ids)": {
            "a.jsonl": jsonl(lines),
            "a/subagents/agent-x.jsonl": jsonl([line | {"isSidechain": True} for line in assistant]),
        },
        "assistant lines without message.id": {"a.jsonl": jsonl(no_id)},
        "JSON with spaces after separators": {"a.jsonl": spaced},
    }
    reference = peers()
    rows = []
    for number, (case, files) in enumerate(claude_cases.items()):
        root = base / f"probe-{number}"
        for name, blob in files.items():
            write(root / "projects/p" / name, blob)
        rows.append(probe_row(case, kit_totals(root / "projects"), reference["claude"][0].run(root, home)))
    usage = {"input_tokens": 1_000, "cached_input_tokens": 900, "cache_write_input_tokens": 300, "output_tokens": 10}
    info = {"total_token_usage": usage, "last_token_usage": usage}
    rollout = [
        {
            "timestamp": "2026-06-01T08:00:00.000Z",
            "type": "session_meta",
            "payload": {"id": uuid7(1, random.Random(0))},
        },
        {"timestamp": "2026-06-01T08:00:01.000Z", "type": "turn_context", "payload": {"model": "gpt-5.5"}},
        {
            "timestamp": "2026-06-01T08:00:02.000Z",
            "type": "event_msg",
            "payload": {"type": "token_count", "info": info},
        },
    ]
    root = base / "probe-codex"
    write(root / "sessions/2026/06/01/rollout-x.jsonl", jsonl(rollout))
    peer = reference["codex"][0].run(root, home)
    rows.append(probe_row("Codex cache writes above input - cached", kit_totals(root / "sessions"), peer))
    return rows


def probe_row(case: str, kit: Totals, peer: Totals) -> dict:
    return {
        "case": case,
        "kit in/read/write/out": f"{kit.input}/{kit.cache_read}/{kit.cache_write}/{kit.output}",
        "ccusage in/read/write/out": f"{peer.input}/{peer.cache_read}/{peer.cache_write}/{peer.output}",
        "same": "yes" if kit.agrees(peer) else "no",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=260, help="size of each corpus in MB (10^6 bytes)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each tool, alternating")
    ap.add_argument("--keep", type=Path, help="write the corpora here and keep them (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=20260601)
    ap.add_argument("--probes", action="store_true", help="also show small cases where counting rules matter")
    ap.add_argument("--floor", action="store_true", help="also time the floor of a per-line reader (no logic)")
    ap.add_argument("--only", choices=["claude", "codex"], help="bench one corpus only (default: both)")
    ap.add_argument("--case", action="append", choices=list(TARGETS), help="bench these cases only (repeatable)")
    ap.add_argument("--kit-only", action="store_true", help="time the kit alone, without the peers (not installed)")
    args = ap.parse_args()
    if args.kit_only and (args.floor or args.probes):
        ap.error("--floor and --probes need the peers; --kit-only runs without them")
    if not args.kit_only and not os.access(CCUSAGE, os.X_OK):
        print(f"ccusage not installed at {CCUSAGE}: run `make bench-peers` (or pass --kit-only)", file=sys.stderr)
        return 2
    tools = {name: [p for p in group if p.program.exists() and not args.kit_only] for name, group in peers().items()}
    base = args.keep or Path(tempfile.mkdtemp(prefix="kit-bench-parse-"))
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    rng, target = random.Random(args.seed), int(args.mb * MB)
    try:
        rows: list[dict] = []
        floors: list[dict] = []
        for name, build in (("claude", claude_corpus), ("codex", codex_corpus)):
            corpus = build(base / name, target, rng)  # both built, in order, so that each is the same either way
            if args.only in (None, name):
                rows += bench(name, corpus, tools[name], home, args.repeats, base, args.case or list(TARGETS))
                if args.floor:
                    floors += floor(name, corpus, tools[name][0], home, args.repeats)
        print(f"\nall cases (medians of {args.repeats} paired runs, {len(os.sched_getaffinity(0))} cores):")
        print(table([{k: v for k, v in r.items() if k != "ok"} for r in rows]))
        if floors:
            print("\nthe floor of a per-line reader (no logic) against the peer:")
            print(table(floors))
        ok = all(r["ok"] for r in rows)
        if args.probes:
            print("\nshapes where counting rules matter (not in the corpus):")
            print(table(probes(base, home)))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
