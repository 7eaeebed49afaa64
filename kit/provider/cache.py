"""The pure prompt-cache engine: (prompt segments, time, domain, profile) -> what was read and written.

One engine serves two uses (docs/design.md): the embedded provider calls it live to answer real clients,
and ``kit.analysis.cachemodel`` replays recorded requests through it offline at any warmth. It therefore imports
nothing of the server and keeps every provider rule in a profile that is data
(``kit/data/cache_profiles/*.yaml``, dated and sourced), because those rules change within months.

How a request is modelled
-------------------------
A prompt is a list of ``Segment`` s in provider prefix order. The engine chains their digests
(``h_i = H(h_{i-1}, digest_i)``, seeded with the namespace), so a cached prefix is always a run of leading
segments and ``h_i`` names the prefix ending at segment ``i``. A store entry is one such prefix.

* ``openai_implicit`` / ``vllm_blocks``: every segment boundary of a cacheable prompt is stored (the whole
  prompt is kept, any boundary can match later). A hit is the longest run of stored leading boundaries
  (prefix-closed, like a KV block chain), then rounded: OpenAI to ``min_tokens + increment * k``,
  vLLM down to whole blocks and at most ``input - 1`` tokens (vLLM recomputes the last token for logits).
  No writes are reported.
* ``openai_explicit``: entries are written at the implicit breakpoint (end of prompt) and the latest
  explicit breakpoints (``max_writes`` in all); a hit is the longest stored prefix at any boundary (no
  lookback limit), exact (no rounding); ``cache_write`` = tokens newly written beyond the read prefix.
* ``anthropic``: only ``cache_control`` breakpoints write; each looks back ``lookback`` segments (itself
  first) for a stored prefix, the longest hit wins; ``cache_write`` runs from the read end to the last
  written breakpoint and ``cache_write_1h`` is its part up to the last 1-hour breakpoint.

Entries are namespaced by (domain, machine, model): domains never share (an organisation / workspace),
a model never reads another model's cache, and on profiles with ``machines > 1`` the routing key
(``prompt_cache_key``) combined with the hash of the first ``routing_prefix_tokens`` picks the machine.

Time, capacity, warmth
----------------------
``now`` is the caller's clock in seconds. An entry lives ``ttl`` after its last write or hit and, where the
profile says so, at most ``max_lifetime`` after its first write. Capacity is counted in *span* tokens: each
entry holds the tokens it added beyond the previous stored boundary of the request that wrote it, i.e. the
distinct KV tokens of a prefix-sharing tree (a full-prefix count would charge a growing conversation
quadratically). LRU eviction keeps ``resident_tokens <= capacity_tokens``; every entry counts at least one
token against the capacity so that the number of entries is bounded too. A request touches its entries
deepest first, so a prefix is always more recently used than its extensions and eviction takes leaves first.

``survival`` is the warmth knob (docs/method.md#warmth). When a stored entry would serve a hit it is
checked: it survived since its last use iff ``u < survival`` with ``u = H(seed, entry, times checked)`` in
[0, 1). A failed check bills the request as a full miss (read 0, the prefix written again), as a provider that
evicted the prefix or routed the request to a cold machine would. The store itself evolves exactly as at
survival 1 (the rewritten prefix is the refreshed one), so the draws line up across survival levels and a
higher survival keeps a superset of the hits for the same seed: warmth curves are monotone by construction.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kit.errors import InputError, KitError

KINDS = ("openai_implicit", "openai_explicit", "anthropic", "vllm_blocks")
_HASH = hashlib.blake2s  # 32-byte digests; the constructor without keywords is the fast path
PROFILE_DIR = "data/cache_profiles"


class BreakpointError(KitError, ValueError):
    """A request's cache breakpoints break the profile's rules (the server answers 400)."""


@dataclass(frozen=True)
class Segment:
    """A run of prompt tokens in provider prefix order (tools, then system/instructions, then messages)."""

    digest: str  # hex hash of this segment's content (not chained; the engine chains them)
    tokens: int  # real tiktoken count of the segment
    breakpoint: str | None = None  # None; Anthropic "5m" | "1h"; OpenAI "explicit"


@dataclass(frozen=True)
class CacheResult:
    """What one request read from and wrote to the cache, in tokens of its prompt."""

    input_tokens: int  # every prompt token (sum of segment tokens)
    cache_read: int  # tokens served from cache (a prefix)
    cache_write: int  # billable tokens written this request (0 where the profile's writes are free/unreported)
    cache_write_1h: int  # the part of cache_write with a 1-hour lifetime (Anthropic)
    entries_created: int  # store operations (the same at every survival level)
    entries_refreshed: int


@dataclass(frozen=True)
class CacheProfile:
    """One provider's cache rules, loaded from ``kit/data/cache_profiles/<name>.yaml``.

    Durations are seconds; ``math.inf`` means "never" (YAML ``null``). Mappings are stored as sorted tuples
    of pairs so that a profile stays hashable; use ``min_tokens_for`` and ``ttl_for``.
    """

    name: str
    kind: str
    source_urls: tuple[str, ...]
    checked: str
    min_tokens: int = 0  # shortest cacheable prompt / prefix
    min_tokens_by_model: tuple[tuple[str, int], ...] = ()  # (model-name prefix, minimum); longest prefix wins
    increment: int = 0  # read granularity above min_tokens (OpenAI 128); 0 = exact
    ttl: float = math.inf  # idle lifetime after the last write or hit
    ttl_by_breakpoint: tuple[tuple[str, float], ...] = ()  # Anthropic "5m"/"1h" -> seconds
    max_lifetime: float = math.inf  # cap after the first write, refreshes notwithstanding
    machines: int = 1  # machines a (domain, prefix) is spread over by routing key
    routing_prefix_tokens: int = 256  # leading tokens whose hash routes a request
    lookback: int | None = None  # segments a breakpoint looks back (itself first); None = unbounded
    max_breakpoints: int | None = None  # more breakpoints in one request raise BreakpointError
    max_writes: int | None = None  # OpenAI explicit: entries written per request, implicit one included
    implicit_breakpoint: bool = False  # OpenAI explicit: the end of the prompt is a write point
    block_size: int = 0  # vLLM: reads are whole blocks
    notes: str = ""

    def min_tokens_for(self, model: str) -> int:
        """The minimum cacheable length for ``model`` (the longest matching name prefix, else ``min_tokens``)."""
        best, value = -1, self.min_tokens
        for prefix, minimum in self.min_tokens_by_model:
            if model.startswith(prefix) and len(prefix) > best:
                best, value = len(prefix), minimum
        return value

    def ttl_for(self, breakpoint: str) -> float:
        """Lifetime of an entry written by a breakpoint of this kind; unknown kinds raise BreakpointError."""
        for kind, seconds in self.ttl_by_breakpoint:
            if kind == breakpoint:
                return seconds
        allowed = ", ".join(repr(k) for k, _ in self.ttl_by_breakpoint)
        raise BreakpointError(f"profile {self.name!r}: unknown cache breakpoint {breakpoint!r} (allowed: {allowed})")


# --- profiles as data -------------------------------------------------------------------------------------

_FIELDS: dict[str, tuple[type | tuple[type, ...], bool]] = {  # key -> (YAML type, required)
    "name": (str, True),
    "kind": (str, True),
    "source_urls": (list, True),
    "checked": (str, True),
    "description": (str, False),
    "notes": (str, False),
    "min_tokens": (int, False),
    "min_tokens_by_model": (dict, False),
    "increment": (int, False),
    "ttl": ((int, float, type(None)), False),
    "ttl_by_breakpoint": (dict, False),
    "max_lifetime": ((int, float, type(None)), False),
    "machines": (int, False),
    "routing_prefix_tokens": (int, False),
    "lookback": ((int, type(None)), False),
    "max_breakpoints": ((int, type(None)), False),
    "max_writes": ((int, type(None)), False),
    "implicit_breakpoint": (bool, False),
    "block_size": (int, False),
    "retention": (dict, False),  # which retentions a model is offered: read by kit.experiment.design.retention_offered
}
_CHECKED = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def profile_names() -> list[str]:
    """Names of the profiles shipped in ``kit/data/cache_profiles``."""
    folder = resources.files("kit").joinpath(PROFILE_DIR)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name: str) -> CacheProfile:
    """A shipped profile by name (``openai-implicit``…), or a profile file when ``name`` is a ``.yaml`` path."""
    if name.endswith((".yaml", ".yml")):
        return _parse_profile(Path(name).read_text(encoding="utf-8"), name)
    return _shipped_profile(name)


@functools.lru_cache(maxsize=16)
def _shipped_profile(name: str) -> CacheProfile:
    """Shipped profiles are read once per process (the server builds engines from names)."""
    path = Path(str(resources.files("kit").joinpath(PROFILE_DIR, f"{name}.yaml")))
    if not path.is_file():
        raise InputError(f"unknown cache profile {name!r}; known: {', '.join(profile_names())}")
    return _parse_profile(path.read_text(encoding="utf-8"), str(path))


def _parse_profile(text: str, where: str) -> CacheProfile:
    """Validate a profile document; every error names ``file:line`` and what was expected."""
    node = yaml.compose(text)
    if not isinstance(node, yaml.MappingNode):
        raise InputError(f"{where}:1: a cache profile must be a YAML mapping")
    data = yaml.safe_load(text)
    lines = {key.value: key.start_mark.line + 1 for key, _ in node.value}

    def fail(key: str, message: str) -> ValueError:
        return ValueError(f"{where}:{lines.get(key, 1)}: {key}: {message}")

    for key, value in data.items():
        if key not in _FIELDS:
            raise fail(key, f"unknown key (expected one of {', '.join(_FIELDS)})")
        expected, _ = _FIELDS[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise fail(key, f"expected {_type_name(expected)}, got {value!r}")
    for key, (_, required) in _FIELDS.items():
        if required and key not in data:
            raise InputError(f"{where}:1: missing required key {key!r}")
    if data["kind"] not in KINDS:
        raise fail("kind", f"expected one of {', '.join(KINDS)}, got {data['kind']!r}")
    if not _CHECKED.match(data["checked"]):
        raise fail("checked", f"expected a date YYYY-MM-DD (or YYYY-MM), got {data['checked']!r}")
    if not data["source_urls"] or not all(isinstance(u, str) and u.startswith("http") for u in data["source_urls"]):
        raise fail("source_urls", "expected a non-empty list of http(s) URLs")
    for key in ("min_tokens", "increment", "block_size", "routing_prefix_tokens"):
        if data.get(key, 0) < 0:
            raise fail(key, f"expected a non-negative integer, got {data[key]!r}")
    for key in ("machines", "lookback", "max_breakpoints", "max_writes"):
        if data.get(key) is not None and data[key] < 1:
            raise fail(key, f"expected a positive integer, got {data[key]!r}")
    if data["kind"] == "vllm_blocks" and data.get("block_size", 0) < 1:
        raise fail("kind", "a vllm_blocks profile needs block_size >= 1")
    if data["kind"] == "anthropic" and not data.get("ttl_by_breakpoint"):
        raise fail("kind", "an anthropic profile needs ttl_by_breakpoint")
    by_model = _pairs(data.get("min_tokens_by_model", {}), int, lambda m: fail("min_tokens_by_model", m))
    ttls = _pairs(data.get("ttl_by_breakpoint", {}), (int, float), lambda m: fail("ttl_by_breakpoint", m))
    return CacheProfile(
        name=data["name"],
        kind=data["kind"],
        source_urls=tuple(data["source_urls"]),
        checked=data["checked"],
        min_tokens=data.get("min_tokens", 0),
        min_tokens_by_model=by_model,
        increment=data.get("increment", 0),
        ttl=_seconds(data.get("ttl")),
        ttl_by_breakpoint=tuple((k, float(v)) for k, v in ttls),
        max_lifetime=_seconds(data.get("max_lifetime")),
        machines=data.get("machines", 1),
        routing_prefix_tokens=data.get("routing_prefix_tokens", 256),
        lookback=data.get("lookback"),
        max_breakpoints=data.get("max_breakpoints"),
        max_writes=data.get("max_writes"),
        implicit_breakpoint=data.get("implicit_breakpoint", False),
        block_size=data.get("block_size", 0),
        notes=data.get("notes", "").strip(),
    )


def _pairs(
    mapping: Mapping[Any, Any], kind: type[float] | tuple[type[float], ...], fail: Callable[[str], ValueError]
) -> tuple[tuple[str, Any], ...]:
    for key, value in mapping.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, kind) or value < 0:
            raise fail(f"expected name: non-negative {_type_name(kind)}, got {key!r}: {value!r}")
    return tuple(sorted(mapping.items()))


def _seconds(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _type_name(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


# --- the engine -------------------------------------------------------------------------------------------


class _Entry:
    """One stored prefix. ``span`` is what it adds to the resident tokens (see the module docstring)."""

    __slots__ = ("checks", "created", "expires", "span", "ttl")

    def __init__(self, span: int, now: float, ttl: float, max_lifetime: float) -> None:
        self.span = span
        self.created = now
        self.ttl = ttl
        self.expires = now + (ttl if ttl < max_lifetime else max_lifetime)
        self.checks = 0


class CacheEngine:
    """A bounded, thread-safe prefix cache following one ``CacheProfile`` (see the module docstring)."""

    def __init__(
        self,
        profile: CacheProfile | str,
        *,
        capacity_tokens: int = 20_000_000,
        survival: float = 1.0,
        seed: int = 0,
    ) -> None:
        self._profile = load_profile(profile) if isinstance(profile, str) else profile
        if self._profile.kind not in KINDS:
            raise InputError(f"profile {self._profile.name!r}: unknown kind {self._profile.kind!r}")
        if not 0.0 <= survival <= 1.0:
            raise InputError(f"survival must be within [0, 1], got {survival!r}")
        if capacity_tokens < 1:
            raise InputError(f"capacity_tokens must be positive, got {capacity_tokens!r}")
        self._capacity = capacity_tokens
        self._survival = float(survival)
        self._seed = str(int(seed)).encode() + b"\x1f"
        self._store: OrderedDict[bytes, _Entry] = OrderedDict()
        self._resident = 0  # sum of spans
        self._charged = 0  # sum of max(span, 1): what capacity bounds
        self._lock = threading.Lock()
        self._lookup = {
            "openai_implicit": self._every_boundary,
            "vllm_blocks": self._every_boundary,
            "openai_explicit": self._openai_explicit,
            "anthropic": self._anthropic,
        }[self._profile.kind]

    @property
    def profile(self) -> CacheProfile:
        return self._profile

    @property
    def resident_tokens(self) -> int:
        """Tokens the cache holds now (span-counted; bounded by ``capacity_tokens``)."""
        with self._lock:
            return self._resident

    def process(
        self,
        segments: Sequence[Segment],
        *,
        domain: str,
        now: float,
        model: str = "",
        routing_key: str | None = None,
    ) -> CacheResult:
        """Look the prompt up, store what the profile stores, and report the request's cache usage."""
        with self._lock:
            keys, cum = self._chain(segments, domain, model, routing_key)
            result = self._lookup(segments, keys, cum, float(now), model)
            self._evict(float(now))
            return result

    # -- prefix identity -----------------------------------------------------------------------------------

    def _chain(
        self, segments: Sequence[Segment], domain: str, model: str, routing_key: str | None
    ) -> tuple[list[bytes], list[int]]:
        """Chained prefix hashes (namespaced by domain, machine and model) and cumulative token counts."""
        machine = self._machine(segments, routing_key) if self._profile.machines > 1 else 0
        h = _HASH(f"{domain}\x1f{machine}\x1f{model}".encode()).digest()
        keys: list[bytes] = []
        cum: list[int] = []
        total = 0
        for seg in segments:
            tokens = seg.tokens
            if tokens < 0:
                raise InputError(f"segment {len(keys)}: tokens must be >= 0, got {tokens!r}")
            h = _HASH(h + seg.digest.encode()).digest()
            total += tokens
            keys.append(h)
            cum.append(total)
        return keys, cum

    def _machine(self, segments: Sequence[Segment], routing_key: str | None) -> int:
        """OpenAI routing: a hash of the leading tokens, combined with ``prompt_cache_key`` when given."""
        acc = _HASH(b"" if routing_key is None else b"key\x1f" + routing_key.encode())
        seen = 0
        for seg in segments:
            acc.update(b"\x1f" + seg.digest.encode())
            seen += seg.tokens
            if seen >= self._profile.routing_prefix_tokens:
                break
        return int.from_bytes(acc.digest()[:8], "little") % self._profile.machines

    # -- store primitives ----------------------------------------------------------------------------------

    def _alive(self, key: bytes, now: float) -> _Entry | None:
        entry = self._store.get(key)
        return entry if entry is not None and entry.expires > now else None

    def _touch(self, key: bytes, span: int, now: float, ttl: float) -> bool:
        """Write or refresh one entry and make it most recently used; True when it was created."""
        store = self._store
        entry = store.get(key)
        if entry is not None and entry.expires > now:
            entry.ttl = max(entry.ttl, ttl)
            idle, cap = now + entry.ttl, entry.created + self._profile.max_lifetime
            entry.expires = idle if idle < cap else cap
            store.move_to_end(key)
            return False
        if entry is not None:
            self._drop(key, entry)
        store[key] = _Entry(span, now, ttl, self._profile.max_lifetime)
        self._resident += span
        self._charged += max(span, 1)
        return True

    def _touch_all(
        self, positions: list[int], keys: list[bytes], cum: list[int], now: float, ttls: list[float]
    ) -> tuple[int, int]:
        """Touch the entries at ascending ``positions``, deepest first; each new one is charged its span."""
        created = 0
        for j in range(len(positions) - 1, -1, -1):
            pos = positions[j]
            span = cum[pos] - (cum[positions[j - 1]] if j else 0)
            created += self._touch(keys[pos], span, now, ttls[j])
        return created, len(positions) - created

    def _drop(self, key: bytes, entry: _Entry) -> None:
        del self._store[key]
        self._resident -= entry.span
        self._charged -= max(entry.span, 1)

    def _evict(self, now: float) -> None:
        """LRU eviction down to the capacity, plus expired entries that reached the cold end."""
        store = self._store
        while store:
            key = next(iter(store))
            entry = store[key]
            if self._charged <= self._capacity and entry.expires > now:
                break
            self._drop(key, entry)

    def _read(self, cum: list[int], keys: list[bytes], best: int) -> int:
        """Tokens read from the longest live prefix ``best`` (-1: none), if its entry survives the warmth draw."""
        read = cum[best] if best >= 0 else 0
        return read if read > 0 and self._survives(keys[best]) else 0

    def _survives(self, key: bytes) -> bool:
        """The warmth draw for an entry about to serve a hit (deterministic in seed, entry, check count)."""
        entry = self._store[key]
        checks = entry.checks
        entry.checks += 1
        if self._survival >= 1.0:
            return True
        if self._survival <= 0.0:
            return False
        u = int.from_bytes(_HASH(self._seed + key + checks.to_bytes(8, "little")).digest()[:8], "little")
        return u / 2.0**64 < self._survival

    # -- the four lookup rules -----------------------------------------------------------------------------

    def _every_boundary(
        self, segments: Sequence[Segment], keys: list[bytes], cum: list[int], now: float, model: str
    ) -> CacheResult:
        """OpenAI implicit and vLLM: every boundary stored, prefix-closed hit, rounded read, no writes."""
        profile = self._profile
        total = cum[-1] if cum else 0
        if not cum or total < profile.min_tokens:
            return CacheResult(total, 0, 0, 0, 0, 0)
        store = self._store
        deepest = -1
        for key in keys:
            entry = store.get(key)
            if entry is None or entry.expires <= now:
                break
            deepest += 1
        matched = cum[deepest] if deepest >= 0 else 0
        if profile.kind == "vllm_blocks":
            read = min(matched, total - 1) // profile.block_size * profile.block_size
        else:
            read = _grid(matched, profile.min_tokens, profile.increment)
        if read > 0 and not self._survives(keys[deepest]):
            read = 0
        # Every boundary is written or refreshed, deepest first (the hot path: _touch inlined).
        ttl, max_lifetime, move = profile.ttl, profile.max_lifetime, store.move_to_end
        created = 0
        for i in range(len(keys) - 1, -1, -1):
            key = keys[i]
            entry = store.get(key)
            if entry is not None and entry.expires > now:
                idle, cap = now + entry.ttl, entry.created + max_lifetime
                entry.expires = idle if idle < cap else cap
                move(key)
                continue
            if entry is not None:
                self._drop(key, entry)
            span = cum[i] - cum[i - 1] if i else cum[0]
            store[key] = _Entry(span, now, ttl, max_lifetime)
            self._resident += span
            self._charged += span if span > 0 else 1
            created += 1
        refreshed = len(keys) - created
        return CacheResult(total, read, 0, 0, created, refreshed)

    def _openai_explicit(
        self, segments: Sequence[Segment], keys: list[bytes], cum: list[int], now: float, model: str
    ) -> CacheResult:
        """OpenAI GPT-5.6+: writes at the implicit end and the latest explicit breakpoints, exact reads."""
        profile = self._profile
        marks = [i for i, seg in enumerate(segments) if seg.breakpoint is not None]
        for i in marks:
            if segments[i].breakpoint != "explicit":
                raise BreakpointError(
                    f"segment {i}: breakpoint {segments[i].breakpoint!r}; profile {profile.name!r} takes 'explicit'"
                )
        total = cum[-1] if cum else 0
        if not cum or total < profile.min_tokens:
            return CacheResult(total, 0, 0, 0, 0, 0)
        room = (profile.max_writes or len(marks) + 1) - int(profile.implicit_breakpoint)
        chosen = set(marks[max(0, len(marks) - room) :] if room > 0 else [])
        if profile.implicit_breakpoint:
            chosen.add(len(keys) - 1)
        writes = sorted(i for i in chosen if cum[i] >= profile.min_tokens)
        best = -1
        for j in range(len(keys) - 1, -1, -1):
            if cum[j] < profile.min_tokens:
                break
            if self._alive(keys[j], now) is not None:
                best = j
                break
        read = self._read(cum, keys, best)
        write = max(0, cum[writes[-1]] - read) if writes else 0
        positions = sorted({*writes, best} - {-1})
        ttls = [profile.ttl if p in writes else 0.0 for p in positions]
        created, refreshed = self._touch_all(positions, keys, cum, now, ttls)
        return CacheResult(total, read, write, 0, created, refreshed)

    def _anthropic(
        self, segments: Sequence[Segment], keys: list[bytes], cum: list[int], now: float, model: str
    ) -> CacheResult:
        """Anthropic: breakpoints only, per-breakpoint lookback, 5m/1h lifetimes, per-model minimum."""
        profile = self._profile
        marks = [i for i, seg in enumerate(segments) if seg.breakpoint is not None]
        if profile.max_breakpoints is not None and len(marks) > profile.max_breakpoints:
            raise BreakpointError(
                f"{len(marks)} cache_control breakpoints; at most {profile.max_breakpoints} are allowed per request"
            )
        mark_ttls = [profile.ttl_for(segments[i].breakpoint or "") for i in marks]
        for k in range(1, len(marks)):
            if mark_ttls[k] > mark_ttls[k - 1]:
                raise BreakpointError(
                    f"segment {marks[k]}: a {segments[marks[k]].breakpoint!r} breakpoint after a "
                    f"{segments[marks[k - 1]].breakpoint!r} one (longer lifetimes must come first)"
                )
        total = cum[-1] if cum else 0
        minimum = profile.min_tokens_for(model)
        window = profile.lookback or len(keys)
        best = -1
        for b in marks:
            for j in range(b, max(b - window, -1), -1):
                if cum[j] < minimum or j <= best:
                    break
                if self._alive(keys[j], now) is not None:
                    best = j
                    break
        read = self._read(cum, keys, best)
        writes = [(i, ttl) for i, ttl in zip(marks, mark_ttls, strict=True) if cum[i] >= minimum]
        write = max(0, cum[writes[-1][0]] - read) if writes else 0
        long_marks = [i for i, _ in writes if segments[i].breakpoint == "1h"]
        write_1h = max(0, cum[long_marks[-1]] - read) if long_marks else 0
        written = dict(writes)
        positions = sorted({*written, best} - {-1})
        created, refreshed = self._touch_all(positions, keys, cum, now, [written.get(p, 0.0) for p in positions])
        return CacheResult(total, read, write, write_1h, created, refreshed)


def _grid(matched: int, minimum: int, increment: int) -> int:
    """OpenAI's read grid: nothing below the minimum, then ``minimum + increment * k`` (exact if 0)."""
    if matched < max(minimum, 1):
        return 0
    if increment:
        return minimum + (matched - minimum) // increment * increment
    return matched
