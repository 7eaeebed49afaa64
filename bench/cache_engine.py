"""Benchmark of the prompt-cache engine and of the offline warmth sweep that reuses it.

Prints two tables: microseconds per ``CacheEngine.process`` call for prompts of 50/200/1000 segments (a
first, cold request vs a follow-up that extends a cached prompt by two segments), per profile; and the wall
time of ``kit.analysis.cachemodel.warmth_sweep`` (21 levels, 1000 bootstrap resamples) on a synthetic batch of about
5 million recorded prompt tokens (2 arms x 10 trials of growing agent conversations).

Run: ``.venv/bin/python bench/cache_engine.py``
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pandas as pd

from kit.analysis.cachemodel import warmth_sweep
from kit.provider.cache import CacheEngine, Segment, profile_names

SIZES = (50, 200, 1000)
REPEATS = 200


def _digest(*parts: object) -> str:
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()


def _prompt(tag: str, n: int, kind: str) -> list[Segment]:
    """``n`` segments of 120 tokens with the breakpoints a client of this profile would send."""
    segments = [Segment(_digest(tag, i), 120) for i in range(n)]
    return _mark(segments, kind)


def _mark(segments: list[Segment], kind: str) -> list[Segment]:
    last = segments[-1]
    if kind == "anthropic":
        segments[0] = Segment(segments[0].digest, segments[0].tokens, "1h")
        segments[-1] = Segment(last.digest, last.tokens, "5m")
    elif kind == "openai_explicit":
        segments[-1] = Segment(last.digest, last.tokens, "explicit")
    return segments


def _unmark(segments: list[Segment]) -> list[Segment]:
    """The prompt as the next request resends it: only the fixed 1-hour breakpoint stays in place."""
    return [
        Segment(s.digest, s.tokens, "1h" if i == 0 and s.breakpoint == "1h" else None) for i, s in enumerate(segments)
    ]


def per_call() -> pd.DataFrame:
    """Mean microseconds per process() call: cold prompts vs follow-ups of one cached prompt."""
    rows = []
    for name in profile_names():
        for n in SIZES:
            engine = CacheEngine(name)
            kind = engine.profile.kind
            firsts = [_prompt(f"{name}-{n}-{r}", n, kind) for r in range(REPEATS)]
            start = time.perf_counter()
            for r, prompt in enumerate(firsts):
                engine.process(prompt, domain="bench", now=float(r))
            first = (time.perf_counter() - start) / REPEATS
            base = _unmark(firsts[-1])
            follow = [
                _mark([*base, *(Segment(_digest("new", r, j), 120) for j in range(2))], kind) for r in range(REPEATS)
            ]
            start = time.perf_counter()
            for r, prompt in enumerate(follow):
                engine.process(prompt, domain="bench", now=float(REPEATS + r))
            later = (time.perf_counter() - start) / REPEATS
            rows.append({"profile": name, "segments": n, "first_us": first * 1e6, "follow_up_us": later * 1e6})
    return pd.DataFrame(rows)


def synthetic_batch() -> pd.DataFrame:
    """2 arms x 10 trials, run-major interleaved; each cycle appends an assistant turn and a tool result.

    Arm ``builtin`` resends a long history (about 25 cycles, 7 tool-result blocks per cycle);
    ``with_session`` keeps it short (about 12 cycles, 3 blocks): about 4M and 1M recorded prompt tokens.
    Trial lengths and pauses vary (seeded) so that the bootstrap band has something to resample.
    """
    rng = np.random.default_rng(7)
    shape = {"builtin": (25, 7), "with_session": (12, 3)}
    rows, clock = [], 0.0
    for run in range(10):
        for arm in ("builtin", "with_session") if run % 2 == 0 else ("with_session", "builtin"):
            trial = f"{arm}-r{run}"
            mean_cycles, blocks = shape[arm]
            cycles = int(rng.integers(mean_cycles * 3 // 4, mean_cycles * 5 // 4 + 1))
            history = [Segment(_digest("tool", i), 200) for i in range(20)]  # shared tool definitions
            history.append(Segment(_digest("system", arm), 2000))
            history.append(Segment(_digest("nonce", trial), 12))  # salted nonce: isolates the trial
            history.append(Segment(_digest("task", arm), 400))
            for cycle in range(cycles):
                rows.append({"trial_id": trial, "arm": arm, "cycle": cycle, "t": clock, "segments": list(history)})
                clock += float(rng.exponential(20.0))
                history.append(Segment(_digest(trial, cycle, "assistant"), 150))
                history.extend(Segment(_digest(trial, cycle, "tool", j), 100) for j in range(blocks))
            clock += 30.0
    return pd.DataFrame(rows)


def main() -> None:
    pd.set_option("display.width", 120)
    print("process() per call, microseconds (mean of", REPEATS, "calls)")
    print(per_call().to_string(index=False, float_format=lambda v: f"{v:,.0f}"))
    batch = synthetic_batch()
    tokens = sum(s.tokens for segs in batch["segments"] for s in segs)
    segments = sum(len(segs) for segs in batch["segments"])
    start = time.perf_counter()
    sweep = warmth_sweep(batch, ("builtin", "with_session"), levels=21, profile="openai-implicit", seed=0)
    wall = time.perf_counter() - start
    print()
    print(f"warmth_sweep: {len(batch)} requests, {segments:,} segments, {tokens:,} prompt tokens, 21 levels")
    print(f"wall time: {wall:.2f} s")
    print(
        sweep[["survival", "hit_rate_a", "hit_rate_b", "ratio", "ratio_lower", "ratio_upper"]]
        .iloc[::5]
        .to_string(index=False)
    )


if __name__ == "__main__":
    main()
