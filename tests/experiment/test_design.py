"""Schedules, nonces and isolation (seeds 000, 001, 003)."""

import pytest

from kit.experiment import design
from kit.experiment.design import ParamError


@pytest.mark.parametrize("runs", [1, 2, 3, 4, 5, 7, 10])
def test_alternate_is_run_major_and_balanced(runs):
    slots = design.schedule(["a", "b"], runs, "alternate", "salt")
    # run-major: each consecutive pair of trials is one run with both arms
    for r in range(runs):
        assert {s.arm for s in slots[2 * r : 2 * r + 2]} == {"a", "b"}
        assert {s.run for s in slots[2 * r : 2 * r + 2]} == {r}
    preds = design.same_arm_predecessors(slots)
    # between-run transitions alternate b,a,b,…: equal when runs is odd, within one otherwise
    assert abs(preds["a"] - preds["b"]) <= (0 if runs % 2 else 1)
    assert [s.arm for s in slots[:6]] == ["a", "b", "b", "a", "a", "b"][: 2 * runs]


def test_alternate_first_position_balanced():
    slots = design.schedule(["a", "b"], 6, "alternate", "salt")
    firsts = [s.arm for s in slots if s.order_index % 2 == 0]
    assert firsts.count("a") == firsts.count("b") == 3


def test_random_order_is_seeded_and_run_major():
    one = design.schedule(["a", "b", "c"], 8, "random", "salt", seed=3)
    two = design.schedule(["a", "b", "c"], 8, "random", "salt", seed=3)
    other = design.schedule(["a", "b", "c"], 8, "random", "salt", seed=4)
    assert [s.arm for s in one] == [s.arm for s in two]
    assert [s.arm for s in one] != [s.arm for s in other]
    for r in range(8):
        assert sorted(s.arm for s in one if s.run == r) == ["a", "b", "c"]


def test_blocked_refused_without_override():
    with pytest.raises(ParamError, match="allow_blocked"):
        design.schedule(["a", "b"], 3, "blocked", "salt")
    slots = design.schedule(["a", "b"], 3, "blocked", "salt", allow_blocked=True)
    assert [s.arm for s in slots] == ["a", "a", "a", "b", "b", "b"]


def test_unknown_order_names_accepted_values():
    with pytest.raises(ParamError, match="alternate"):
        design.schedule(["a", "b"], 2, "zigzag", "salt")


def test_nonce_constant_within_trial_unique_across_trials_and_batches():
    assert design.nonce("s1", "a", 0) == design.nonce("s1", "a", 0)
    seen = {design.nonce(salt, arm, run) for salt in ("s1", "s2") for arm in ("a", "b") for run in range(50)}
    assert len(seen) == 2 * 2 * 50
    slots = design.schedule(["a", "b"], 5, "alternate", "s1")
    assert all(s.nonce == design.nonce("s1", s.arm, s.run) for s in slots)


def test_cache_bust_tool_name_is_a_valid_tool_name():
    name = design.cache_bust_tool_name(design.nonce("s", "arm", 0))
    assert name.startswith("cache_bust_") and len(name) <= 64
    assert all(c.isalnum() or c in "_-" for c in name)


def test_isolation_parts():
    assert design.isolation_parts("all") == {"nonce", "cache_bust_tool", "prompt_cache_key"}
    assert design.isolation_parts("none") == set()
    assert design.isolation_parts("nonce") == {"nonce"}
    with pytest.raises(ParamError, match="prompt_cache_key"):
        design.isolation_parts("everything")


def test_prompt_cache_key_per_trial():
    keys = {design.prompt_cache_key("b", "salt", arm, run) for arm in "ab" for run in range(3)}
    assert len(keys) == 6


def test_arm_from_dict_rejects_unknown_keys_and_values():
    with pytest.raises(ParamError, match="unknown keys"):
        design.Arm.from_dict("x", {"instrucion": "typo"})
    with pytest.raises(ParamError, match="placement"):
        design.Arm.from_dict("x", {"placement": "sidecar"})
    arm = design.Arm.from_dict("x", {"instruction": "hi", "env": {"SOME_TOKEN": "v"}, "control": True})
    assert arm.control and arm.to_dict()["env"] == ["SOME_TOKEN"]  # names only, never values
