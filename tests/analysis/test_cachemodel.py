"""The offline cache model (kit/analysis/cachemodel.py): structural prefix cache, replay, warmth sweep."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from kit.analysis.cachemodel import replay, structural, warmth_sweep
from kit.provider.cache import CacheEngine, Segment


def d(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()[:32]


def lineage() -> pd.DataFrame:
    """Two trials sharing a system prompt; trial A branches and restarts; rows deliberately out of order."""
    s, u1, a1, t1, x, u2 = (d("sys"), 100), (d("u1"), 50), (d("a1"), 30), (d("t1"), 20), (d("x"), 40), (d("u2"), 60)
    rows = [
        ("A", 2, [[*s, None], [*u1, None], [*a1, None], [*x, "5m"]]),  # shares 180 with cycle 1 (branch)
        ("A", 0, [[*s, None], [*u1, None]]),
        ("B", 0, [[*s, None], [*u1, None], [*a1, None]]),  # another trial: nothing shared
        ("A", 1, [[*s, None], [*u1, None], [*a1, None], [*t1, None]]),  # extends cycle 0: 150
        ("A", 3, [[*s, None], [*u2, None]]),  # restarts after the system prompt: 100
        ("B", 1, [{"digest": s[0], "tokens": 100, "breakpoint": None}, Segment(d("b"), 7)]),
    ]
    return pd.DataFrame(rows, columns=["trial_id", "cycle", "segments"]).assign(arm="x")


def test_structural_is_the_longest_prefix_shared_with_any_earlier_request_of_the_trial():
    out = structural(lineage())
    assert out["input_tokens"].tolist() == [220, 150, 180, 200, 160, 107]
    assert out["structural_cached"].tolist() == [180, 0, 0, 150, 100, 100]
    assert out["structural_uncached"].tolist() == [40, 150, 180, 50, 60, 7]
    assert out["cycle"].tolist() == [2, 0, 0, 1, 3, 1]  # the frame keeps its order


def test_structural_reports_bad_rows_with_their_place():
    bad = lineage()
    bad.at[3, "segments"] = [[d("sys"), -5, None]]
    with pytest.raises(ValueError, match=r"row 3 trial_id='A' cycle=1: segment 0: expected \[digest"):
        structural(bad)
    with pytest.raises(ValueError, match=r"lack column\(s\) \['segments'\]"):
        structural(bad.drop(columns="segments"))


def batch(seed: int = 0, trials: int = 6, mark: str | None = None) -> pd.DataFrame:
    """Two arms of growing conversations, interleaved in time, every trial isolated by a nonce segment.

    ``mark`` puts that breakpoint on the last segment of every request (as an Anthropic client would).
    """
    rng = np.random.default_rng(seed)
    rows, now = [], 0.0
    for run in range(trials):
        for arm, (cycles, step) in (("long", (14, 900)), ("short", (7, 300))):
            trial = f"{arm}-{run}"
            history = [[d("tools"), 1800, None], [d(f"nonce-{trial}"), 9, None]]
            for cycle in range(int(rng.integers(cycles - 3, cycles + 4))):
                history.append([d(f"{trial}-{cycle}"), int(rng.integers(step // 2, step * 2)), None])
                prompt = [*history[:-1], [*history[-1][:2], mark]]
                rows.append({"trial_id": trial, "arm": arm, "cycle": cycle, "t": now, "segments": prompt})
                now += float(rng.exponential(40.0))
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed)  # replay must sort by t itself


REPLAYS = [("openai-implicit", 0.6, "trial_id", None), ("vllm", 1.0, None, None), ("anthropic", 0.5, "trial_id", "5m")]


@pytest.mark.parametrize(("profile", "survival", "domain_by", "mark"), REPLAYS)
def test_replay_equals_the_live_engine(profile, survival, domain_by, mark):
    requests = batch(mark=mark)
    out = replay(requests, profile, survival, seed=5, domain_by=domain_by)
    engine = CacheEngine(profile, survival=survival, seed=5)
    assert out["cache_read"].sum() > 0 and (mark is None or out["cache_write"].sum() > 0)
    for label, row in requests.sort_values(["t", "cycle"]).iterrows():
        segments = [Segment(*s) for s in row["segments"]]
        live = engine.process(segments, domain=row["trial_id"] if domain_by else "shared", now=row["t"])
        got = out.loc[label, ["input_tokens", "cache_read", "cache_write", "cache_write_1h", "uncached"]].tolist()
        assert got == [
            live.input_tokens,
            live.cache_read,
            live.cache_write,
            live.cache_write_1h,
            live.input_tokens - live.cache_read,
        ]


def test_shared_domain_lets_trials_warm_each_other():
    requests = batch()
    first_cycles = requests["cycle"] == 0
    isolated = replay(requests, "vllm", 1.0, seed=0)  # no TTL: only the domains differ
    shared = replay(requests, "vllm", 1.0, seed=0, domain_by=None)
    assert isolated.loc[first_cycles, "cache_read"].sum() == 0
    assert (shared.loc[first_cycles, "cache_read"] > 0).sum() == first_cycles.sum() - 1  # all but the very first


def test_replay_needs_time():
    with pytest.raises(ValueError, match=r"lack column\(s\) \['t'\]"):
        replay(lineage(), "openai-implicit", 1.0, seed=0)
    broken = batch().assign(t=np.nan)
    with pytest.raises(ValueError, match="t must be a finite number"):
        replay(broken, "openai-implicit", 1.0, seed=0)


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    return warmth_sweep(batch(), ("long", "short"), levels=11, seed=3, n_boot=400)


def test_cold_end_is_exactly_the_total_input_ratio(sweep):
    requests = batch()
    per_trial = structural(requests).groupby(["arm", "trial_id"])["input_tokens"].sum()
    expected = per_trial["long"].mean() / per_trial["short"].mean()
    assert sweep["total_ratio"].nunique() == 1 and sweep["total_ratio"].iloc[0] == pytest.approx(expected, rel=1e-12)
    cold = sweep.iloc[0]
    assert cold["survival"] == 0.0 and cold["hit_rate_a"] == 0.0 and cold["hit_rate_b"] == 0.0
    assert cold["ratio"] == cold["total_ratio"]
    assert sweep["ratio"].iloc[-1] < cold["ratio"] * 0.9  # the long arm caches better: the ratio slides


def test_hit_rate_rises_with_survival(sweep):
    for arm in ("a", "b"):
        rates = sweep[f"hit_rate_{arm}"].to_numpy()
        assert np.all(np.diff(rates) >= 0)
        assert rates[-1] > 0.5


def test_band_contains_the_point_estimate(sweep):
    assert (sweep["ratio_lower"] <= sweep["ratio"]).all() and (sweep["ratio"] <= sweep["ratio_upper"]).all()
    assert (sweep["ratio_upper"] > sweep["ratio_lower"]).all()  # trials differ: a real band
    assert sweep[["n_a", "n_b"]].iloc[0].tolist() == [6, 6]


def test_sweep_is_reproducible_and_checks_its_arms(sweep):
    again = warmth_sweep(batch(), ("long", "short"), levels=11, seed=3, n_boot=400)
    pd.testing.assert_frame_equal(sweep, again)
    with pytest.raises(ValueError, match="no trials of arm 'other'"):
        warmth_sweep(batch(), ("long", "other"), levels=3, n_boot=10)
