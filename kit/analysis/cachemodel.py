"""The offline cache model: recorded prompts replayed through the provider's own cache engine.

The provider's ``cached_tokens`` is a server-side variable we neither control nor can reproduce
(docs/method.md#warmth), so a cache-dependent figure must be modelled from the prompts themselves:

* ``structural`` — docs/method.md#structural-cache: an ideal never-evict prefix cache per trial
  (arm-run lineage). Depends only on content, so it is reproducible and server-independent.
* ``replay`` — one pass of a batch through a real profile (minimums, rounding, TTL, isolation) at a given
  warmth (``survival``), each trial in its own cache domain or, for the non-isolated control, one shared one.
* ``warmth_sweep`` — docs/method.md#warmth: the uncached ratio between two arms slides with warmth; the sweep draws that
  line from cold (survival 0, where it equals the total-token ratio exactly) to ideal (survival 1), with a
  seeded bootstrap band per level; ``warmth_sweeps`` draws it for every comparison over one replay per level.

Input: one row per request with ``trial_id``, ``cycle`` (order within the trial) and ``segments`` (a list of
``[digest, tokens, breakpoint]``, ``{"digest", "tokens", "breakpoint"}`` or ``Segment``, in prefix order);
``replay`` and ``warmth_sweep`` also need ``t`` (seconds) and ``warmth_sweep`` needs ``arm``. Optional
``model`` and ``routing_key`` columns are passed to the engine (per-model minimums, OpenAI routing).
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import SupportsIndex

import numpy as np
import pandas as pd

from kit.errors import InputError
from kit.provider.cache import CacheEngine, CacheProfile, Segment

# The ideal cache of docs/method.md#structural-cache as an engine profile: every boundary stored, exact
# reads, no minimum, never expires. Capacity is unbounded when the engine is built (never evict).
STRUCTURAL = CacheProfile(
    name="structural",
    kind="openai_implicit",
    source_urls=("https://github.com/steyangdot/PromptPilot/wiki/Measurement-Methodology",),
    checked="2026-06-16",
    notes="docs/method.md#structural-cache: longest common prefix with any earlier request of the same trial",
)
_SHARED_DOMAIN = "shared"


def structural(requests: pd.DataFrame) -> pd.DataFrame:
    """Add ``input_tokens``, ``structural_cached`` and ``structural_uncached`` (docs/method.md#structural-cache).

    ``structural_cached`` is the longest common prefix, in tokens at segment boundaries, with any earlier
    request (by ``cycle``) of the same trial: an ideal cache that never evicts, with no minimum and no
    rounding. ``input_tokens`` is the sum of segment tokens and replaces a column of that name.
    """
    _require(requests, ("trial_id", "cycle", "segments"), "structural")
    segments = _segments_column(requests)
    order = _order(requests, ("trial_id", "cycle"))
    engine = CacheEngine(STRUCTURAL, capacity_tokens=sys.maxsize)
    trial = requests["trial_id"].astype(str).to_numpy()
    total = np.zeros(len(requests), dtype=np.int64)
    cached = np.zeros(len(requests), dtype=np.int64)
    for i in order:
        result = engine.process(segments[i], domain=trial[i], now=0.0)
        total[i], cached[i] = result.input_tokens, result.cache_read
    out = requests.copy()
    out["input_tokens"] = total
    out["structural_cached"] = cached
    out["structural_uncached"] = total - cached
    return out


def replay(
    requests: pd.DataFrame,
    profile: CacheProfile | str,
    survival: float,
    seed: int,
    domain_by: str | None = "trial_id",
) -> pd.DataFrame:
    """Replay the requests in order of ``t`` through one engine; add the per-request cache usage.

    ``domain_by`` names the column whose value is a request's cache domain (``"trial_id"``: isolation per
    trial); ``None`` puts every request in one shared domain (the non-isolated control). Adds
    ``input_tokens``, ``cache_read``, ``cache_write``, ``cache_write_1h`` and ``uncached`` (input − read).
    """
    batch = _Batch.of(requests, domain_by)
    usage = batch.run(profile, survival, seed)
    out = requests.copy()
    out["input_tokens"] = batch.input_tokens
    out["cache_read"], out["cache_write"], out["cache_write_1h"] = usage
    out["uncached"] = batch.input_tokens - usage[0]
    return out


def warmth_sweep(
    requests: pd.DataFrame,
    arms: tuple[str, str],
    levels: int | Sequence[float] = 21,
    profile: CacheProfile | str = "openai-implicit",
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    domain_by: str | None = "trial_id",
) -> pd.DataFrame:
    """The uncached ratio between two arms as a function of warmth (docs/method.md#warmth), one row per level.

    ``levels`` is a count of evenly spaced survival levels over [0, 1] or the levels themselves. Each level
    replays the whole batch through a fresh engine with the same ``seed`` (so hit sets are nested across
    levels). Columns: ``survival``, ``arm_a``, ``arm_b``, ``n_a``, ``n_b`` (trials), ``hit_rate_a/b``
    (cache reads / input tokens over the arm), ``mean_uncached_a/b`` (per trial), ``ratio`` (mean uncached
    a / b) with its percentile bootstrap band ``ratio_lower``/``ratio_upper`` (trials resampled within each
    arm, ``numpy`` Generator seeded with ``seed``; the same resamples at every level), and ``total_ratio``
    (mean input tokens per trial a / b), which ``ratio`` equals exactly at survival 0.
    """
    return warmth_sweeps(
        requests, [arms], levels, profile=profile, seed=seed, n_boot=n_boot, confidence=confidence, domain_by=domain_by
    )


WARMTH_COLUMNS = ["survival", "arm_a", "arm_b", "n_a", "n_b", "hit_rate_a", "hit_rate_b", "mean_uncached_a"]
WARMTH_COLUMNS += ["mean_uncached_b", "ratio", "ratio_lower", "ratio_upper", "total_ratio"]


def warmth_sweeps(
    requests: pd.DataFrame,
    pairs: Sequence[tuple[str, str]],
    levels: int | Sequence[float] = 21,
    profile: CacheProfile | str = "openai-implicit",
    seed: int = 0,
    n_boot: int = 1000,
    confidence: float = 0.95,
    domain_by: str | None = "trial_id",
) -> pd.DataFrame:
    """:func:`warmth_sweep` for every (arm, baseline) pair, the pairs' curves one after another (``arm_a``,
    ``arm_b`` tell them apart). What a level's replay leaves uncached does not depend on the pair, so the batch
    is replayed once per level, whatever the number of comparisons; no pair gives an empty table."""
    _require(requests, ("arm", "trial_id"), "warmth_sweep")
    grid = _sweep_grid(levels, confidence, n_boot)
    batch = _Batch.of(requests, domain_by)
    codes, trials = pd.factorize(requests["trial_id"].astype(str), sort=True)
    trial_arm = _trial_arms(requests, codes, len(trials))
    members = {}
    for arm in dict.fromkeys(arm for pair in pairs for arm in pair):
        members[arm] = np.flatnonzero(trial_arm == arm)
        if members[arm].size == 0:
            raise InputError(f"warmth_sweep: no trials of arm {arm!r} (arms present: {sorted(set(trial_arm))})")
    if not members:
        return pd.DataFrame(columns=WARMTH_COLUMNS)
    input_per_trial = np.bincount(codes, weights=batch.input_tokens, minlength=len(trials))
    uncached = np.empty((grid.size, len(trials)))
    for k, level in enumerate(grid):
        reads = batch.run(profile, float(level), seed)[0]
        uncached[k] = input_per_trial - np.bincount(codes, weights=reads, minlength=len(trials))
    curves = []
    for a, b in pairs:
        lower, upper = _band(uncached[:, members[a]], uncached[:, members[b]], seed, n_boot, confidence)
        total = {arm: input_per_trial[members[arm]] for arm in (a, b)}
        mean = {arm: uncached[:, members[arm]].mean(axis=1) for arm in (a, b)}
        curve = {
            "survival": grid,
            "arm_a": a,
            "arm_b": b,
            "n_a": members[a].size,
            "n_b": members[b].size,
            "hit_rate_a": 1.0 - uncached[:, members[a]].sum(axis=1) / total[a].sum(),
            "hit_rate_b": 1.0 - uncached[:, members[b]].sum(axis=1) / total[b].sum(),
            "mean_uncached_a": mean[a],
            "mean_uncached_b": mean[b],
            "ratio": mean[a] / mean[b],
            "ratio_lower": lower,
            "ratio_upper": upper,
            "total_ratio": total[a].mean() / total[b].mean(),
        }
        curves.append(pd.DataFrame(curve, columns=WARMTH_COLUMNS))
    return pd.concat(curves, ignore_index=True)


def _band(a: np.ndarray, b: np.ndarray, seed: int, n_boot: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap band of mean(a) / mean(b) at every level (rows), trials resampled within each arm;
    the same resamples at every level, so the band moves with the curve, not with the draws."""
    rng = np.random.default_rng(seed)
    resamples = [rng.integers(0, arm.shape[1], size=(n_boot, arm.shape[1])) for arm in (a, b)]
    boot_a, boot_b = (arm[:, picks].mean(axis=2) for arm, picks in zip((a, b), resamples, strict=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_boot = boot_a / boot_b
    tail = (1.0 - confidence) / 2.0 * 100.0
    lower, upper = np.nanpercentile(ratio_boot, [tail, 100.0 - tail], axis=1)
    return lower, upper


def _sweep_grid(levels: int | Sequence[float], confidence: float, n_boot: int) -> np.ndarray:
    """The survival levels of a sweep, its settings checked first (a located message for each)."""
    if not 0.0 < confidence < 1.0:
        raise InputError(f"warmth_sweep: confidence must be within (0, 1), got {confidence!r}")
    if n_boot < 1:
        raise InputError(f"warmth_sweep: n_boot must be positive, got {n_boot!r}")
    grid = np.linspace(0.0, 1.0, levels) if isinstance(levels, int) else np.asarray(levels, dtype=float)
    if grid.size == 0 or np.any((grid < 0) | (grid > 1)) or np.any(np.isnan(grid)):
        raise InputError(f"warmth_sweep: levels must be survival values within [0, 1], got {levels!r}")
    return grid


# --- shared plumbing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """A batch converted once (segments, order, domains) so that many replays cost only the engine."""

    segments: list[list[Segment]]
    order: np.ndarray
    domains: list[str]
    times: np.ndarray
    models: list[str]
    routing_keys: list[str | None]
    input_tokens: np.ndarray

    @classmethod
    def of(cls, requests: pd.DataFrame, domain_by: str | None) -> _Batch:
        needed = ("t", "segments", *((domain_by,) if domain_by else ()))
        _require(requests, needed, "replay")
        times = pd.to_numeric(requests["t"], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(times))
        if bad.size:
            raise InputError(f"{_where(requests, bad[0])}: t must be a finite number of seconds")
        segments = _segments_column(requests)
        n = len(requests)
        domains = [_SHARED_DOMAIN] * n if domain_by is None else requests[domain_by].astype(str).tolist()
        models = requests["model"].fillna("").astype(str).tolist() if "model" in requests else [""] * n
        keys = [None if pd.isna(k) else str(k) for k in requests["routing_key"]] if "routing_key" in requests else None
        order = _order(requests, ("t", "cycle") if "cycle" in requests else ("t",))
        return cls(
            segments=segments,
            order=order,
            domains=domains,
            times=times,
            models=models,
            routing_keys=keys or [None] * n,
            input_tokens=np.array([sum(s.tokens for s in segs) for segs in segments], dtype=np.int64),
        )

    def run(self, profile: CacheProfile | str, survival: float, seed: int) -> tuple[np.ndarray, ...]:
        """(cache_read, cache_write, cache_write_1h) per request, in the frame's row order."""
        engine = CacheEngine(profile, capacity_tokens=sys.maxsize, survival=survival, seed=seed)
        usage = np.zeros((3, len(self.segments)), dtype=np.int64)
        for i in self.order:
            result = engine.process(
                self.segments[i],
                domain=self.domains[i],
                now=self.times[i],
                model=self.models[i],
                routing_key=self.routing_keys[i],
            )
            usage[0, i], usage[1, i], usage[2, i] = result.cache_read, result.cache_write, result.cache_write_1h
        return usage[0], usage[1], usage[2]


def _require(requests: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in requests.columns]
    if missing:
        raise InputError(f"{what}: requests lack column(s) {missing}; have {list(requests.columns)}")


def _order(requests: pd.DataFrame, by: Sequence[str]) -> np.ndarray:
    """Row positions sorted by ``by`` (stable: ties keep the frame's order)."""
    return requests[list(by)].reset_index(drop=True).sort_values(list(by), kind="stable").index.to_numpy()


def _trial_arms(requests: pd.DataFrame, codes: np.ndarray, n_trials: int) -> np.ndarray:
    """The arm of each trial; a trial that appears under two arms is an error (it would count twice)."""
    arms = requests["arm"].astype(str).to_numpy()
    out = np.empty(n_trials, dtype=object)
    for row, (code, arm) in enumerate(zip(codes, arms, strict=True)):
        if out[code] is None:
            out[code] = arm
        elif out[code] != arm:
            raise InputError(f"{_where(requests, row)}: trial appears under arms {out[code]!r} and {arm!r}")
    return out


def _where(requests: pd.DataFrame, row: int) -> str:
    """A request's place for error messages: its index label, trial and cycle where present."""
    parts = [f"row {requests.index[row]!r}"]
    for column in ("trial_id", "cycle"):
        if column in requests:
            value = requests[column].iloc[row]
            parts.append(f"{column}={value.item() if isinstance(value, np.generic) else value!r}")
    return " ".join(parts)


def _segments_column(requests: pd.DataFrame) -> list[list[Segment]]:
    return [_segments(value, requests, row) for row, value in enumerate(requests["segments"])]


def _segments(value: object, requests: pd.DataFrame, row: int) -> list[Segment]:
    """One request's segments from lists, dicts or ``Segment`` s (as Parquet or JSON give them back)."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise InputError(f"{_where(requests, row)}: segments must be a list of [digest, tokens, breakpoint]")
    out = []
    for k, item in enumerate(value):
        if isinstance(item, Segment):
            out.append(item)
            continue
        if isinstance(item, Mapping):
            fields = (item.get("digest"), item.get("tokens"), item.get("breakpoint"))
        elif isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) not in (2, 3):
            fields = (None, None, None)
        else:
            fields = (item[0], item[1], item[2] if len(item) == 3 else None)
        digest, tokens, breakpoint = fields
        if isinstance(breakpoint, float) and math.isnan(breakpoint):
            breakpoint = None
        count = operator.index(tokens) if isinstance(tokens, SupportsIndex) else -1
        if not isinstance(digest, str) or not digest or count < 0 or not isinstance(breakpoint, (str, type(None))):
            raise InputError(
                f"{_where(requests, row)}: segment {k}: expected [digest (str), tokens (int >= 0), "
                f"breakpoint (str or None)], got {item!r}"
            )
        out.append(Segment(digest, count, breakpoint))
    return out
