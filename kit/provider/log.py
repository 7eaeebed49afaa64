"""The embedded provider's request log: append-only JSONL, one line per model request.

The run stage copies a trial's lines next to its transcripts, and the readers compare what the
client recorded with what the server sent, so a line is written (and flushed) before the response
leaves the server. The API key is never written: requests are attributed to a cache domain, a short
hash of the key. Writing a line never fails on what a client sent: a value orjson cannot write (nested past
its 254 levels, say a ``model`` or ``prompt_cache_retention`` that is a deep object) is replaced by a string
saying so, so the request still gets its line and its answer.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from kit.errors import InputError
from kit.jsontypes import JsonObject

VERSION = 1
KEYS = (
    "kit_provider_log",
    "ts",
    "t",
    "endpoint",
    "api",
    "stream",
    "status",
    "error",
    "model",
    "policy",
    "profile",
    "domain",
    "prompt_cache_key",
    "prompt_cache_retention",  # what the request asked for (OpenAI); the profile models one retention
    "trial_id",
    "response_id",
    "usage",
    "wire_usage",
    "tool_calls",
    "tool_results",
    "tools",  # the tool names the request offered, flat (``mcp__cachebust__cache_bust_<id>``): isolation checks
    "segments",
    "server_ms",
)


def domain_of(api_key: str | None) -> str:
    """The cache namespace of an API key ("d-" + 12 hex digits of its hash); the key stays secret."""
    return "d-" + hashlib.blake2b((api_key or "").encode(), digest_size=6).hexdigest()


def record(**fields: Any) -> JsonObject:
    """A log line with every key of the format present (null where not given), in the spec's order."""
    unknown = set(fields) - set(KEYS)
    if unknown:
        raise InputError(f"not request-log keys: {sorted(unknown)}")
    line = dict.fromkeys(KEYS)
    line.update(fields)
    line["kit_provider_log"] = VERSION
    line["ts"] = line["ts"] or datetime.now(UTC).isoformat()
    return line


class RequestLog:
    """Appends records to ``path``; thread-safe; each line is flushed as soon as it is written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        self._lock = threading.Lock()

    def write(self, line: dict[str, Any]) -> None:
        try:
            data = orjson.dumps(line) + b"\n"
        except orjson.JSONEncodeError:
            data = orjson.dumps({key: _writable(value) for key, value in line.items()}) + b"\n"
        with self._lock:
            self._file.write(data)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def _writable(value: Any) -> Any:
    """``value`` if orjson can write it, else a string naming why not (the rest of the line is kept)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return f"not loggable: {exc}"
    return value


def read(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a log file, in order (for tests, benches and the run stage)."""
    with Path(path).open("rb") as f:
        return [orjson.loads(line) for line in f if line.strip()]
