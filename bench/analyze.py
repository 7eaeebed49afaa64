"""Timings of the analysis stage: bootstrap intervals, the warmth sweep and the occupancy pass.

Run: ``.venv/bin/python bench/analyze.py [--repeat N]``. Each case builds its input once, then times
the call (best of N, wall clock). Add a case by appending a :class:`Case` to ``CASES``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from cache_engine import synthetic_batch  # bench/cache_engine.py: ~5M recorded prompt tokens, 2 arms x 10 trials

from kit import stats
from kit.analysis import cachemodel, occupancy


@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[], object]
    run: Callable[[object], object]
    target_s: float | None = None


def paired_trials(batches: int, runs: int, seed: int = 0) -> pd.DataFrame:
    """Interleaved batches of paired trials with lognormal workloads and a true ratio near 0.5."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(13, 0.4, size=(batches, runs))
    arm = base * 0.5 * rng.lognormal(0, 0.2, size=(batches, runs))
    frames = []
    for name, values in (("placebo", base), ("batching", arm)):
        b, r = np.meshgrid(np.arange(batches), np.arange(runs), indexing="ij")
        frames.append(
            pd.DataFrame(
                {
                    "batch": [f"b{i}" for i in b.ravel()],
                    "arm": name,
                    "run": r.ravel(),
                    "status": "ok",
                    "total_tokens": values.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def occupancy_tables(trials: int, requests_per_trial: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sessions whose every request carries three tool results (read, grep, other) and grows by their tokens."""
    rng = np.random.default_rng(seed)
    chars = rng.integers(200, 6000, size=(trials, requests_per_trial, 3))
    growth = chars.sum(axis=2) / 2.6 + 120  # 2.6 chars/token, plus the previous response's output
    growth[:, 0] = 20_000  # the first request: system prompt, tools, question
    requests = pd.DataFrame(
        {
            "batch": "b0",
            "arm": np.repeat(np.where(np.arange(trials) % 2, "placebo", "batching"), requests_per_trial),
            "trial_id": np.repeat([f"t{i:04d}" for i in range(trials)], requests_per_trial),
            "cycle": np.tile(np.arange(requests_per_trial), trials),
            "input_tokens": growth.cumsum(axis=1).round().astype(np.int64).ravel(),
            "output_tokens": 160,
            "reasoning_tokens": 40,
        }
    )
    t, c, k = np.meshgrid(np.arange(trials), np.arange(requests_per_trial), np.arange(3), indexing="ij")
    results = pd.DataFrame(
        {
            "batch": "b0",
            "trial_id": [f"t{i:04d}" for i in t.ravel()],
            "cycle": c.ravel(),
            "category": np.array(["read", "grep", "other"])[k.ravel()],
            "chars": chars.ravel(),
        }
    )
    return requests, results[results["cycle"] > 0]


def _ratio(paired: bool | None = None, method: str = "BCa") -> Callable[[object], object]:
    return lambda trials: stats.ratio(
        trials, "total_tokens", "batching", "placebo", n_resamples=10_000, paired=paired, method=method
    )


BOOT_T = "bootstrap-t"
CASES = [
    Case(
        "ratio: paired bootstrap-t (default), 1 batch x 1,000 runs, 10,000 resamples",
        lambda: paired_trials(1, 1000),
        _ratio(method=BOOT_T),
        2.0,
    ),
    Case("ratio: paired BCa, 1 batch x 1,000 runs, 10,000 resamples", lambda: paired_trials(1, 1000), _ratio(), 2.0),
    Case("ratio: unpaired BCa, 1 batch x 1,000 runs, 10,000 resamples", lambda: paired_trials(1, 1000), _ratio(False)),
    Case(
        "ratio: paired bootstrap-t (default), 1 batch x 5 runs, 10,000 resamples",
        lambda: paired_trials(1, 5),
        _ratio(method=BOOT_T),
    ),
    Case("ratio: paired BCa, 1 batch x 5 runs, 10,000 resamples", lambda: paired_trials(1, 5), _ratio()),
    Case("ratio: two-level paired, 3 batches x 5 runs, 10,000 resamples", lambda: paired_trials(3, 5), _ratio()),
    Case("ratio: two-level paired, 10 batches x 100 runs, 10,000 resamples", lambda: paired_trials(10, 100), _ratio()),
    Case(
        "ratio: two-level unpaired, 10 batches x 100 runs, 10,000 resamples",
        lambda: paired_trials(10, 100),
        _ratio(False),
    ),
    Case(
        "warmth sweep: 21 levels, ~5M recorded prompt tokens (bench/cache_engine.py batch)",
        synthetic_batch,
        lambda batch: cachemodel.warmth_sweep(batch, ("builtin", "with_session"), levels=21, seed=0),
        10.0,
    ),
    Case(
        "occupancy: 1,000 requests (50 trials x 20), 2,850 tool results",
        lambda: occupancy_tables(50, 20),
        lambda tables: occupancy.measure(*tables),
        1.0,
    ),
]


def measure(cases: list[Case], repeat: int) -> pd.DataFrame:
    rows = []
    for case in cases:
        data = case.setup()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            case.run(data)
            times.append(time.perf_counter() - start)
        best = min(times)
        verdict = "" if case.target_s is None else ("ok" if best <= case.target_s else "SLOW")
        rows.append({"case": case.name, "best_s": round(best, 3), "target_s": case.target_s, "verdict": verdict})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions per case (best is shown)")
    args = parser.parse_args()
    print(measure(CASES, args.repeat).to_string(index=False))


if __name__ == "__main__":
    main()
