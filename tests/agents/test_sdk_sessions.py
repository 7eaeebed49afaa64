"""The SDK agents' session modes (resume / fresh with a summary) and per-arm extra tools, end to end."""

import json
import re

import pytest

from kit.agents import sdk, sessions
from kit.agents.base import TrialSpec
from kit.experiment import design
from kit.experiment.design import Arm, ParamError
from kit.provider import Reply, ToolCall, serve
from kit.tasks import tooluse

PROMPTS = ("QUESTION 1: what is in f1.txt?", "QUESTION 2: and in f2.txt?", "QUESTION 3: and in f3.txt?")
ALL = frozenset({"nonce", "cache_bust_tool", "prompt_cache_key"})
PROFILE = {"sdk-openai": "openai-implicit", "sdk-anthropic": "anthropic"}


class TurnReader:
    """Reads the file the current question names (unless it is in context already), then answers from it."""

    name = "turn-reader"

    def __init__(self, explore=False):
        self.seen = []
        self.explore = explore

    def reply(self, conv):
        self.seen.append(conv)
        k = int(re.findall(r"QUESTION (\d)", conv.last_user_text())[-1])
        contents = tooluse.file_contents(conv)
        if self.explore and not tooluse.results_this_turn(conv):
            return Reply("exploring", (ToolCall("explore", {"query": "alpha"}),))  # offered or not
        if f"f{k}.txt" not in contents:
            return Reply("reading", (tooluse.read_call(conv, f"f{k}.txt"),))
        return Reply(f"ANSWER {k}: {contents[f'f{k}.txt'].strip()}")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for k in (1, 2, 3):
        (root / f"f{k}.txt").write_text(f"content number {k}\n")
    (root / "code.py").write_text("def alpha(x):\n    return x + 1\n\n\nprint(alpha(2))\n")
    return root


def _trial(backend, arm, root, tmp_path, policy, isolation=ALL, options=None, prompts=PROMPTS):
    out = tmp_path / f"out-{arm.name}-{backend}"
    out.mkdir()
    nonce = design.nonce("salt", arm.name, 0)
    key = design.prompt_cache_key("b", "salt", arm.name, 0) if "prompt_cache_key" in isolation else None
    with serve(profile=PROFILE[backend], policy=policy) as srv:
        spec = TrialSpec(
            batch="b", trial_id=f"t-{arm.name}", arm=arm, run=0, order_index=0, nonce=nonce, isolation=isolation,
            prompt_cache_key=key,
            prompts=prompts, workdir=root, out_dir=out, base_url=srv.trial_base_url(f"t-{arm.name}"), api_key="k",
            model="sim-model", max_cycles=30, timeout_s=30, options=options or {},
        )  # fmt: skip
        outcome = sdk.run_trial(backend, spec)
        log = [json.loads(line) for line in srv.log_path.read_text().splitlines()]
    records = [json.loads(line) for line in (out / "sdk_responses.jsonl").read_text().splitlines()]
    return outcome, records, log, spec


BACKENDS = ["sdk-openai", "sdk-anthropic"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_carries_one_conversation(backend, repo, tmp_path):
    policy = TurnReader()
    outcome, records, _, _ = _trial(backend, Arm("builtin", session="resume"), repo, tmp_path, policy)
    assert outcome.status == "ok" and outcome.turns == 3 and outcome.final_answer == "ANSWER 3: content number 3"
    assert [(r["turn"], r["session"]) for r in records] == [(t, 1) for t in (1, 1, 2, 2, 3, 3)]
    last = policy.seen[-1]
    assert [m.text for m in last.messages if m.role == "user"] == list(PROMPTS)
    assert sorted(tooluse.file_contents(last)) == ["f1.txt", "f2.txt", "f3.txt"]  # every earlier read is carried


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_starts_each_turn_anew_with_a_summary(backend, repo, tmp_path):
    policy = TurnReader()
    outcome, records, _, _ = _trial(backend, Arm("with_session", session="fresh"), repo, tmp_path, policy)
    assert outcome.status == "ok" and outcome.final_answer == "ANSWER 3: content number 3"
    assert [(r["turn"], r["session"]) for r in records] == [(1, 1), (1, 1), (2, 2), (2, 2), (3, 3), (3, 3)]
    first_of_3 = policy.seen[4]
    assert [m.role for m in first_of_3.messages] == ["user"]  # nothing of sessions 1-2 but the summary
    text = first_of_3.messages[0].text
    assert text.startswith(sessions.SUMMARY_HEADER)
    assert "Turn 1 question: QUESTION 1" in text and "Turn 1 answer: ANSWER 1: content number 1" in text
    assert "Turn 2 answer: ANSWER 2: content number 2" in text
    assert text.endswith("New question:\n" + PROMPTS[2])
    assert sorted(tooluse.file_contents(policy.seen[-1])) == ["f3.txt"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_is_per_trial_not_per_session(backend, repo, tmp_path):
    policy = TurnReader()
    _, _, log, spec = _trial(backend, Arm("with_session", session="fresh"), repo, tmp_path, policy)
    assert len(policy.seen) == 6
    for conv in policy.seen:
        assert conv.tools[0].name == spec.cache_bust_tool
        assert spec.nonce_line in conv.system
    if backend == "sdk-openai":
        assert {line["prompt_cache_key"] for line in log} == {spec.prompt_cache_key}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("session", ["fresh", "resume"])
def test_user_prefix_and_agents_file_open_every_session(backend, session, repo, tmp_path):
    prefixed = TurnReader()
    _trial(backend, Arm("p", "PREFIX-TEXT", "user_prefix", session=session), repo, tmp_path, prefixed)
    firsts = [c.messages[0].text for c in prefixed.seen if c.cycle == 0]
    assert len(firsts) == (3 if session == "fresh" else 1)
    assert all(t.startswith("PREFIX-TEXT") for t in firsts)
    agents = TurnReader()
    _trial(backend, Arm("a", "AGENTS-TEXT", "agents_file", session=session), repo, tmp_path, agents)
    assert all("AGENTS-TEXT" in c.all_text() for c in agents.seen)


def test_session_summary_is_bounded_and_keeps_every_turn():
    questions = [f"question {i} " + "q" * 500 for i in range(4)]
    answers = [f"answer {i} " + "a" * 10_000 for i in range(4)]
    summary = sessions.session_summary(questions, answers, limit=1500)
    assert len(summary) <= 1500
    assert all(f"Turn {i + 1} answer: answer {i}" in summary for i in range(4))
    short = sessions.session_summary(["Q?"], ["A short\n  answer."])
    assert short == f"{sessions.SUMMARY_HEADER}\n\nTurn 1 question: Q?\nTurn 1 answer: A short answer."
    with pytest.raises(ValueError, match="too small"):
        sessions.session_summary(questions * 10, answers * 10, limit=1000)


def test_summary_chars_option_is_checked_before_any_request(repo, tmp_path):
    policy = TurnReader()
    with pytest.raises(ValueError, match="summary_chars"):
        _trial("sdk-openai", Arm("f", session="fresh"), repo, tmp_path, policy, options={"summary_chars": 10})
    assert policy.seen == []
    fresh = Arm("g", session="fresh")
    outcome, _, _, _ = _trial("sdk-openai", fresh, repo, tmp_path, policy, options={"summary_chars": 800})
    assert outcome.status == "ok" and all(len(c.messages[0].text) < 800 + 200 for c in policy.seen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explore_is_offered_only_to_arms_that_list_it(backend, repo, tmp_path):
    with_tool = TurnReader(explore=True)
    outcome, _, _, _ = _trial(backend, Arm("x", tools=("explore",)), repo, tmp_path, with_tool, prompts=PROMPTS[:1])
    assert outcome.status == "ok" and "explore" in with_tool.seen[0].tool_names()
    result = next(m.text for m in with_tool.seen[1].messages if m.role == "tool")
    assert result.splitlines()[:3] == [
        "explore 'alpha': 1 definitions, 1 references",
        "code.py:1-2 alpha",
        "1 def alpha(x):",
    ]
    assert "code.py:5 print(alpha(2))" in result
    without = TurnReader(explore=True)
    _trial(backend, Arm("y"), repo, tmp_path, without, prompts=PROMPTS[:1])
    assert "explore" not in without.seen[0].tool_names()
    refused = next(m for m in without.seen[1].messages if m.role == "tool")
    assert refused.text == "error: unknown tool 'explore'"


def test_unknown_extra_tool_fails_before_any_request(repo, tmp_path):
    policy = TurnReader()
    with pytest.raises(ValueError, match="nope"):
        _trial("sdk-openai", Arm("z", tools=("nope",)), repo, tmp_path, policy)
    assert policy.seen == []


def test_arm_tools_round_trip_and_bad_values():
    arm = Arm.from_dict("explore", {"tools": ["explore"], "session": "resume"})
    assert arm.tools == ("explore",) and arm.to_dict()["tools"] == ["explore"]
    again = arm.to_dict()
    again.pop("name")
    again["env"] = {}
    assert Arm.from_dict("explore", again) == arm
    assert Arm.from_dict("plain", {}).tools == ()
    for bad in ("explore", 3, ["has space"], [None]):
        with pytest.raises(ParamError) as err:
            Arm.from_dict("a", {"tools": bad})
        assert err.value.name == "arm_defs.a.tools"
