"""The prompt-cache engine against each profile's documented rules (kit/provider/cache.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import threading

import numpy as np
import pytest

from kit.provider.cache import BreakpointError, CacheEngine, CacheResult, Segment, load_profile, profile_names


def seg(tag: str, tokens: int, breakpoint: str | None = None) -> Segment:
    return Segment(hashlib.sha256(tag.encode()).hexdigest()[:32], tokens, breakpoint)


def run(engine: CacheEngine, segments: list[Segment], now: float = 0.0, **kw) -> CacheResult:
    kw.setdefault("domain", "org")
    return engine.process(segments, now=now, **kw)


def marked(segments: list[Segment], breakpoint: str | None) -> list[Segment]:
    """The same prompt with ``breakpoint`` on its last segment (and none elsewhere)."""
    plain = [Segment(s.digest, s.tokens) for s in segments]
    plain[-1] = Segment(plain[-1].digest, plain[-1].tokens, breakpoint)
    return plain


BILLS_WRITES = {"openai-explicit", "anthropic"}
# The breakpoint a client of each profile puts on the last segment (implicit/vLLM ignore it).
LAST_MARK = {"openai-implicit": None, "openai-explicit": "explicit", "anthropic": "5m", "vllm": None}


# --- profiles as data ---------------------------------------------------------------------------------------


def test_shipped_profiles_are_dated_and_sourced():
    assert profile_names() == ["anthropic", "openai-explicit", "openai-implicit", "vllm"]
    for name in profile_names():
        profile = load_profile(name)
        assert profile.name == name
        assert profile.source_urls and all(u.startswith("https://") for u in profile.source_urls)
        assert profile.checked.startswith("2026-")
    implicit, explicit = load_profile("openai-implicit"), load_profile("openai-explicit")
    assert (implicit.min_tokens, implicit.increment, implicit.ttl, implicit.max_lifetime) == (1024, 128, 300, 3600)
    assert (explicit.min_tokens, explicit.increment, explicit.ttl, explicit.max_writes) == (1024, 0, 1800, 4)
    anthropic = load_profile("anthropic")
    assert (anthropic.lookback, anthropic.max_breakpoints) == (20, 4)
    assert anthropic.ttl_for("5m") == 300 and anthropic.ttl_for("1h") == 3600
    assert load_profile("vllm").block_size == 16


def test_anthropic_minimum_by_model_takes_the_longest_prefix():
    profile = load_profile("anthropic")
    assert profile.min_tokens_for("claude-opus-4-5-20251101") == 4096
    assert profile.min_tokens_for("claude-opus-4-20250514") == 1024
    assert profile.min_tokens_for("claude-opus-5-20260301") == 512
    assert profile.min_tokens_for("claude-opus-5-5") == 1024  # not the 512 of claude-opus-5
    assert profile.min_tokens_for("claude-haiku-4-5") == 4096
    assert profile.min_tokens_for("unknown-model") == 1024


def test_bad_profile_file_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\nkind: openai_implicit\nsource_urls: [https://example.org]\nchecked: '2026-01-01'\nttll: 5\n"
    )
    with pytest.raises(ValueError, match=r"bad\.yaml:5: ttll: unknown key"):
        load_profile(str(path))
    path.write_text("name: bad\nkind: openai_implicit\nsource_urls: [https://example.org]\nchecked: yesterday\n")
    with pytest.raises(ValueError, match=r"bad\.yaml:4: checked"):
        load_profile(str(path))
    with pytest.raises(ValueError, match="unknown cache profile 'nope'"):
        load_profile("nope")


# --- minimums and read granularity --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["openai-implicit", "openai-explicit", "anthropic"])
def test_below_minimum_prompts_never_cache(name):
    engine = CacheEngine(name)
    prompt = marked([seg("sys", 600), seg("user", 400)], LAST_MARK[name])  # 1000 < 1024
    for t in range(3):
        result = run(engine, prompt, now=t)
        assert (result.input_tokens, result.cache_read, result.cache_write) == (1000, 0, 0)
    assert engine.resident_tokens == 0


def test_anthropic_minimum_depends_on_the_model():
    engine = CacheEngine("anthropic")
    prompt = [seg("sys", 3000), seg("user", 100, "5m")]
    for t in range(2):  # 3100 < 4096 on Opus 4.5: neither written nor read
        assert run(engine, prompt, now=t, model="claude-opus-4-5-20251101").cache_write == 0
    assert run(engine, prompt, now=2, model="claude-opus-4-5-20251101").cache_read == 0
    first = run(engine, prompt, now=3, model="claude-sonnet-4-5")
    again = run(engine, prompt, now=4, model="claude-sonnet-4-5")
    assert (first.cache_write, again.cache_read, again.cache_write) == (3100, 3100, 0)


def test_vllm_caches_tiny_prompts_in_whole_blocks_only():
    engine = CacheEngine("vllm")
    assert run(engine, [seg("a", 15)]).cache_read == 0
    assert run(engine, [seg("a", 15)], now=1).cache_read == 0  # 14 reusable tokens: no full block


def test_openai_implicit_reads_on_the_1024_plus_128k_grid():
    engine = CacheEngine("openai-implicit")
    base = [seg("tools", 1000), seg("sys", 100), seg("u1", 300)]  # boundaries at 1000, 1100, 1400
    assert run(engine, base).cache_read == 0
    assert run(engine, [*base, seg("u2", 500)], now=1).cache_read == 1280  # 1400 -> 1024 + 2*128
    assert run(engine, [*base[:2], seg("other", 500)], now=2).cache_read == 1024  # 1100 -> 1024
    assert run(engine, [base[0], seg("x", 2000)], now=3).cache_read == 0  # 1000 < 1024
    exact = [seg("e1", 1024), seg("e2", 128)]
    run(engine, exact, now=4)
    assert run(engine, [*exact, seg("e3", 5)], now=5).cache_read == 1152


def test_openai_explicit_reports_writes_and_does_not_round():
    engine = CacheEngine("openai-explicit")
    first = run(engine, [seg("p", 1100), seg("q", 37, "explicit")])
    assert (first.cache_read, first.cache_write) == (0, 1137)
    second = run(engine, [seg("p", 1100), seg("q", 37, "explicit"), seg("r", 55)], now=1)
    assert (second.input_tokens, second.cache_read, second.cache_write) == (1192, 1137, 55)
    third = run(engine, [seg("p", 1100), seg("q", 37), seg("r", 55), seg("s", 3)], now=2)
    assert (third.cache_read, third.cache_write) == (1192, 3)  # the implicit breakpoint of the second request


def test_openai_explicit_writes_at_most_four_entries():
    engine = CacheEngine("openai-explicit")
    prompt = [seg(f"b{i}", 300, "explicit") for i in range(6)] + [seg("tail", 50)]
    result = run(engine, prompt)
    assert (result.entries_created, result.cache_write) == (4, 1850)  # the end plus the latest 3 explicit marks
    with pytest.raises(BreakpointError, match="takes 'explicit'"):
        run(engine, [seg("a", 2000, "5m")])


def test_vllm_reads_full_blocks_and_recomputes_the_last_token():
    engine = CacheEngine("vllm")
    run(engine, [seg("a", 40), seg("b", 30)])
    assert run(engine, [seg("a", 40), seg("b", 30)], now=1).cache_read == 64  # 70 -> min(70, 69) -> 64
    assert run(engine, [seg("a", 40), seg("b", 30), seg("c", 50)], now=2).cache_read == 64
    assert run(engine, [seg("a", 40), seg("d", 30)], now=3).cache_read == 32
    assert run(engine, [seg("a", 40), seg("b", 30), seg("c", 50), seg("x", 1)], now=4).cache_read == 112
    assert run(engine, [seg("a", 40), seg("b", 30)], now=5).cache_write == 0


# --- lifetimes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "ttl"), [("openai-implicit", 300), ("openai-explicit", 1800), ("anthropic", 300)])
def test_entries_expire_ttl_after_last_use(name, ttl):
    prompt = marked([seg("sys", 2000), seg("u", 100)], LAST_MARK[name])
    engine = CacheEngine(name)
    run(engine, prompt, now=0)
    assert run(engine, prompt, now=ttl - 1).cache_read > 0
    assert run(engine, prompt, now=2 * ttl - 2).cache_read > 0  # refreshed at ttl - 1
    assert run(engine, prompt, now=3 * ttl - 2).cache_read == 0  # idle exactly ttl: gone


def test_refresh_on_hit_extends_life_and_idle_entries_expire():
    prompt = [seg("sys", 2000), seg("u", 100)]
    refreshed, idle = CacheEngine("openai-implicit"), CacheEngine("openai-implicit")
    for engine in (refreshed, idle):
        run(engine, prompt, now=0)
    assert run(refreshed, prompt, now=200).cache_read > 0
    assert run(refreshed, prompt, now=450).cache_read > 0
    assert run(idle, prompt, now=450).cache_read == 0


def test_openai_implicit_entries_die_at_the_max_lifetime_despite_hits():
    engine = CacheEngine("openai-implicit")
    prompt = [seg("sys", 2000), seg("u", 100)]
    run(engine, prompt, now=0)
    for t in range(200, 3600, 200):
        assert run(engine, prompt, now=t).cache_read > 0
    assert run(engine, prompt, now=3600).cache_read == 0
    assert run(engine, prompt, now=3700).cache_read > 0  # rewritten at 3600


def test_anthropic_one_hour_breakpoints_outlive_five_minute_ones():
    engine = CacheEngine("anthropic")
    run(engine, [seg("tools", 2000, "1h"), seg("msg", 500, "5m")], now=0)
    later = run(engine, [seg("tools", 2000, "1h"), seg("msg", 500, "5m")], now=1000)
    assert (later.cache_read, later.cache_write, later.cache_write_1h) == (2000, 500, 0)


def test_vllm_has_no_ttl():
    engine = CacheEngine("vllm")
    run(engine, [seg("a", 64), seg("b", 64)])
    assert run(engine, [seg("a", 64), seg("b", 64)], now=1e7).cache_read == 112


# --- isolation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", profile_names())
def test_domains_never_share(name):
    engine = CacheEngine(name)
    prompt = marked([seg("sys", 2000), seg("u", 100)], LAST_MARK[name])
    run(engine, prompt, domain="org-a", now=0)
    assert run(engine, prompt, domain="org-b", now=1).cache_read == 0
    assert run(engine, prompt, domain="org-a", now=2).cache_read > 0


@pytest.mark.parametrize("name", profile_names())
def test_models_never_share(name):
    engine = CacheEngine(name)
    prompt = marked([seg("sys", 2000), seg("u", 100)], LAST_MARK[name])
    run(engine, prompt, model="claude-sonnet-4-5", now=0)
    assert run(engine, prompt, model="claude-sonnet-5", now=1).cache_read == 0


def test_routing_keys_isolate_only_with_several_machines():
    prompt = [seg("sys", 2000), seg("u", 100)]
    many = CacheEngine(dataclasses.replace(load_profile("openai-implicit"), machines=1 << 30))
    one = CacheEngine(dataclasses.replace(load_profile("openai-implicit"), machines=1))
    for engine in (many, one):
        run(engine, prompt, routing_key="trial-1", now=0)
    assert run(many, prompt, routing_key="trial-2", now=1).cache_read == 0
    assert run(many, prompt, routing_key="trial-1", now=2).cache_read > 0
    assert run(one, prompt, routing_key="trial-2", now=1).cache_read > 0
    assert run(one, prompt, routing_key=None, now=2).cache_read > 0


def test_shipped_openai_profile_routes_a_key_stickily():
    engine = CacheEngine("openai-implicit")
    prompt = [seg("sys", 2000), seg("u", 100)]
    run(engine, prompt, routing_key="k")
    assert all(run(engine, prompt, routing_key="k", now=t).cache_read == 2048 for t in range(1, 5))


# --- Anthropic breakpoints ----------------------------------------------------------------------------------


def test_anthropic_writes_to_the_last_breakpoint_and_reads_it_next_time():
    engine = CacheEngine("anthropic")
    first = run(engine, [seg("sys", 1500, "5m"), seg("u1", 300), seg("a1", 200, "5m"), seg("u2", 40)])
    assert (first.input_tokens, first.cache_read, first.cache_write, first.entries_created) == (2040, 0, 2000, 2)
    second = run(
        engine, [seg("sys", 1500, "5m"), seg("u1", 300), seg("a1", 200), seg("u2", 40), seg("a2", 60, "5m")], now=5
    )
    assert (second.cache_read, second.cache_write) == (2000, 100)


def test_anthropic_without_breakpoints_caches_nothing():
    engine = CacheEngine("anthropic")
    for t in range(2):
        result = run(engine, [seg("sys", 5000), seg("u", 10)], now=t)
        assert (result.cache_read, result.cache_write) == (0, 0)


def _history(n: int) -> list[Segment]:
    return [seg(f"block{i}", 200) for i in range(n)]


@pytest.mark.parametrize(("new_blocks", "hit"), [(1, True), (19, True), (20, False), (30, False)])
def test_anthropic_lookback_is_twenty_blocks_counting_the_breakpoint(new_blocks, hit):
    engine = CacheEngine("anthropic")
    run(engine, marked(_history(10), "5m"))
    result = run(engine, marked(_history(10 + new_blocks), "5m"), now=1)
    assert result.cache_read == (2000 if hit else 0)
    assert result.cache_write == 200 * (10 + new_blocks) - result.cache_read


def test_anthropic_intermediate_breakpoint_bridges_a_long_turn():
    engine = CacheEngine("anthropic")
    run(engine, marked(_history(10), "5m"))
    blocks = _history(40)
    blocks[25] = Segment(blocks[25].digest, 200, "5m")
    blocks[39] = Segment(blocks[39].digest, 200, "5m")
    assert run(engine, blocks, now=1).cache_read == 2000  # the block-25 breakpoint's window reaches block 9


def test_anthropic_breakpoint_rules_raise():
    engine = CacheEngine("anthropic")
    four = [seg(f"b{i}", 400, "5m") for i in range(4)]
    assert run(engine, four).cache_write == 1600
    with pytest.raises(BreakpointError, match="5 cache_control breakpoints; at most 4"):
        run(engine, [*four, seg("b4", 400, "5m")])
    with pytest.raises(BreakpointError, match="'1h' breakpoint after a '5m'"):
        run(engine, [seg("a", 2000, "5m"), seg("b", 10, "1h")])
    with pytest.raises(BreakpointError, match="unknown cache breakpoint 'explicit'"):
        run(engine, [seg("a", 2000, "explicit")])
    assert engine.resident_tokens == 1600  # failed requests change nothing


def test_anthropic_splits_one_hour_writes():
    engine = CacheEngine("anthropic")
    first = run(engine, [seg("tools", 2000, "1h"), seg("sys", 500), seg("u", 300, "5m")])
    assert (first.cache_write, first.cache_write_1h) == (2800, 2000)
    second = run(engine, [seg("tools", 2000, "1h"), seg("sys", 500), seg("u", 300), seg("u2", 100, "5m")], now=1)
    assert (second.cache_read, second.cache_write, second.cache_write_1h) == (2800, 100, 0)
    fresh = run(engine, [seg("tools2", 2000, "1h"), seg("t2", 900, "1h"), seg("u", 100, "5m")], now=2)
    assert (fresh.cache_write, fresh.cache_write_1h) == (3000, 2900)


# --- warmth (survival) --------------------------------------------------------------------------------------


def _workload(seed: int = 1) -> list[tuple[str, list[Segment], float]]:
    """Interleaved growing conversations of 6 trials sharing a tool prefix: (domain, prompt, time)."""
    rng = np.random.default_rng(seed)
    histories = {f"trial{k}": [seg("tools", 1500), seg(f"nonce{k}", 10)] for k in range(6)}
    out, now = [], 0.0
    for step in range(90):
        trial = f"trial{step % 6}"
        histories[trial].append(seg(f"{trial}-{step}", int(rng.integers(50, 400))))
        out.append((trial, list(histories[trial]), now))
        now += float(rng.exponential(20.0))
    return out


@pytest.mark.parametrize("name", profile_names())
def test_survival_zero_reads_nothing_and_bills_full_writes(name):
    cold, warm = CacheEngine(name, survival=0.0), CacheEngine(name)
    for domain, prompt, now in _workload():
        prompt = marked(prompt, LAST_MARK[name])
        c, w = run(cold, prompt, domain=domain, now=now), run(warm, prompt, domain=domain, now=now)
        assert c.cache_read == 0
        assert c.cache_write == (w.cache_write + w.cache_read if name in BILLS_WRITES else 0)
        assert (c.entries_created, c.entries_refreshed) == (w.entries_created, w.entries_refreshed)


@pytest.mark.parametrize("name", profile_names())
def test_hits_are_nested_across_survival_levels(name):
    levels = [0.0, 0.2, 0.5, 0.8, 1.0]
    hits = []
    for level in levels:
        engine = CacheEngine(name, survival=level, seed=7)
        reads = [run(engine, marked(p, LAST_MARK[name]), domain=d, now=t).cache_read for d, p, t in _workload()]
        hits.append({i for i, r in enumerate(reads) if r > 0})
    for lower, higher in itertools.pairwise(hits):
        assert lower <= higher
    assert len(hits[0]) == 0 and len(hits[1]) < len(hits[3]) < len(hits[4]) > 60


def test_survival_draws_are_seeded():
    def reads(seed: int) -> list[int]:
        engine = CacheEngine("openai-implicit", survival=0.5, seed=seed)
        return [run(engine, p, domain=d, now=t).cache_read for d, p, t in _workload()]

    assert reads(3) == reads(3)
    assert reads(3) != reads(4)


# --- capacity and concurrency -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", profile_names())
def test_memory_stays_bounded_under_a_flood(name):
    engine = CacheEngine(name, capacity_tokens=50_000)
    for i in range(10_000):
        prompt = marked([seg(f"flood{i}", 700), seg(f"flood{i}b", 500)], LAST_MARK[name])
        run(engine, prompt, now=float(i))
        assert engine.resident_tokens <= 50_000
    assert engine.resident_tokens > 40_000  # it holds the most recent prompts, not nothing
    assert len(engine._store) <= 50_000
    assert run(engine, prompt, now=10_000.0).cache_read > 0  # the last one is still there


def test_concurrent_requests_match_a_sequential_run():
    # One instant for every request: expiry is global on the engine's one clock (an entry expired at the
    # latest time is expired for every domain), so separate per-thread time axes would make results depend
    # on the interleaving. Without expiry, domains must not interact at all, however threads interleave.
    work = {f"domain{k}": _workload(seed=k) for k in range(6)}

    def serve(engine: CacheEngine, domain: str, out: dict) -> None:
        out[domain] = [engine.process(p, domain=domain, now=0.0) for _, p, _t in work[domain]]

    shared, concurrent = CacheEngine("openai-implicit", survival=0.7), {}
    threads = [threading.Thread(target=serve, args=(shared, d, concurrent)) for d in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for domain in work:
        alone = {}
        serve(CacheEngine("openai-implicit", survival=0.7), domain, alone)
        assert concurrent[domain] == alone[domain]
    assert shared.resident_tokens == sum(_resident(d, w) for d, w in work.items())


def _resident(domain: str, workload: list) -> int:
    engine = CacheEngine("openai-implicit")
    for _, prompt, _now in workload:
        engine.process(prompt, domain=domain, now=0.0)
    return engine.resident_tokens
