"""The session-chain pack: deterministic fixture with a real seeded bug, graders, a policy for every client in
both session modes, the builtin / with_session effect measured end to end, and the user-repository mode."""

import json
import shlex
import statistics

import pytest

from kit.agents import sdk, sessions
from kit.agents.base import TrialSpec
from kit.agents.filetools import FileTools
from kit.experiment import design
from kit.experiment.design import ParamError
from kit.provider import Message, ToolSpec, serve
from kit.provider.policy import Conversation, ToolCall
from kit.tasks import session_chain as sc
from kit.tasks import tooluse, userrepo
from tests.support import files_digest, pack_batch, write_files

CWD = "/home/user/repo_a"
ALL = frozenset({"nonce", "cache_bust_tool", "prompt_cache_key"})
PROFILE = {"sdk-openai": "openai-implicit", "sdk-anthropic": "anthropic"}


@pytest.fixture(scope="module")
def fx():
    return sc.generate(0, "small")


@pytest.fixture(scope="module")
def repo(fx, tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("chain"), fx.files)


# ---------------------------------------------------------------- fixture and its bug


def test_fixture_is_byte_for_byte_deterministic():
    assert (
        files_digest(sc.generate(0, "small").files)
        == "bb8998d9a5a1c6f2157377347c842d37266e36a2752a2e60f8178d74cbb33673"
    )
    assert (
        files_digest(sc.generate(0, "large").files)
        == "0de46f63f822515bee3267f68bc5bf6ccd6ac83ce87446ca5691ca2dcd3c09a9"
    )
    assert files_digest(sc.generate(2, "small").files) != files_digest(sc.generate(0, "small").files)
    assert sc.generate(4, "small").truth == sc.generate(4, "large").truth
    assert sc.SessionChainPack().describe()["fixture_sha256"] == files_digest(sc.generate(0, "small").files)


@pytest.mark.parametrize("seed", range(8))
def test_ground_truth_matches_the_generated_code(seed):
    fx = sc.generate(seed, "small")
    t = fx.truth
    seen = {path: dict(enumerate(text.splitlines(), 1)) for path, text in fx.files.items()}
    f = sc.facts_from(seen, "")
    assert f.paths == {role: t.paths[role] for role in ("session", "tokens", "config", "tests")}
    assert f.names["authenticate"] == t.names["authenticate"] and f.names["is_expired"] == t.names["is_expired"]
    assert f.check == (t.line, t.buggy) and f.ttl == t.ttl and f.test_now == sc.TEST_NOW
    assert fx.files[t.paths["tokens"]].splitlines()[t.line - 1] == f"    return {t.buggy}"


@pytest.mark.parametrize(("buggy", "fixed"), sc.BUGS)
def test_the_seeded_bug_is_a_real_off_by_one_and_the_fix_removes_it(buggy, fixed):
    assert sc.fix_of(buggy) == fixed and sc.fix_of(fixed) is None
    exp = 1_000

    def expired(expression, now):
        return eval(expression, {}, {"now": now, "claims": {"exp": exp}})  # the fixture's own expressions

    assert [expired(buggy, now) for now in (exp - 1, exp, exp + 1)] == [False, False, True]  # accepted at exp
    assert [expired(fixed, now) for now in (exp - 1, exp, exp + 1)] == [False, True, True]


# ---------------------------------------------------------------- graders (seed 0: identity.py, is_expired, line 32)

GOOD = [
    "Authentication happens in `current_user()` in `app/auth/identity.py`.",
    "The expiry check is `is_expired()` in `app/auth/credentials.py`, line 32.",
    'In `is_expired()`, `now - claims["exp"] > 0` is false when now equals exp exactly, so the token still works '
    "at its expiry second.",
    '```diff\n--- a/app/auth/credentials.py\n+++ b/app/auth/credentials.py\n-    return now - claims["exp"] > 0\n'
    '+    return now - claims["exp"] >= 0\n```',
    "In `tests/test_credentials.py`, with TTL 900 from NOW = 1_700_000_000: `is_expired` must be false at "
    "1700000899, true at 1_700_000_900 and true at 1,700,000,901.",
]
PARTIAL = [
    "It happens in `app/auth/identity.py`.",
    "It is `is_expired()`, somewhere in the auth package.",
    "`is_expired()` uses the wrong comparison.",
    '```diff\n--- a/app/auth/credentials.py\n-    return now - claims["exp"] > 0\n'
    '+    return now - claims["exp"] > 1\n```',
    "Add tests to `tests/test_credentials.py` for `is_expired` around 1700000900.",
]
WRONG = [
    "Authentication is done by `require_auth()` in `app/auth/middleware.py`.",
    "The check is `read_claims()` in `app/auth/identity.py`, line 12.",
    "There is no bug.",
    "Restart the server.",
    "Test the login page by hand.",
]


def test_graders_on_hand_written_answers(fx):
    assert [sc.grade_turn(t, a, fx.truth).score for t, a in enumerate(GOOD)] == [1.0] * 5
    assert [sc.grade_turn(t, a, fx.truth).score for t, a in enumerate(PARTIAL)] == [0.5, 0.3333, 0.3333, 0.6667, 0.6]
    assert [sc.grade_turn(t, a, fx.truth).score for t, a in enumerate(WRONG)] == [0.0] * 5
    assert sc.grade_turn(3, PARTIAL[3], fx.truth).detail == "turn 4: 2/3 (missing added line)"
    assert sc.grade_turns(GOOD, fx.truth).score == 1.0 and sc.grade_turns(GOOD[:4], fx.truth).score == 0.8
    pack = sc.SessionChainPack()
    assert (
        pack.grade(GOOD[4]).score == 1.0 and pack.grade(PARTIAL[4]).detail == "turn 5: 3/5 (missing exp - 1, exp + 1)"
    )


# ---------------------------------------------------------------- the policy, in every client, in both session modes

TOOLS = {
    "sdk": ("read_file", "list_files", "grep"),
    "codex": ("exec_command", "write_stdin"),
    "claude": ("Read", "Grep", "Bash"),
    "claude-bash": ("Bash",),
}


def _serve(call, tools):
    args = call.arguments
    if call.name in ("read_file", "grep", "list_files"):
        return tools.call(call.name, args)
    if call.name == "Read":
        text = tools.read_file(args["file_path"][len(CWD) + 1 :])
        return "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(text.splitlines(), 1))
    if call.name == "Grep":
        return "\n".join(f"{CWD}/{hit}" for hit in tools.grep(args["pattern"]).splitlines())
    words = shlex.split(args.get("cmd") or args.get("command"))
    out = (
        tools.read_file(words[1])
        if words[0] == "cat"
        else "\n".join(f"./{h}" for h in tools.grep(words[2]).splitlines())
    )
    return f"Process exited with code 0\nOutput:\n{out}" if call.name == "exec_command" else out


def _chain(policy, kind, root, session, trial="t1"):
    """A five-turn chain in-process, resumed or fresh (summary as the SDK agent writes it)."""
    tools, specs = FileTools(root), tuple(ToolSpec(n) for n in TOOLS[kind])
    messages, answers, calls_made, cycles = [], [], [], 0
    for turn, question in enumerate(sc.QUESTIONS):
        if session == "fresh" and turn:
            summary = sessions.session_summary(sc.QUESTIONS[:turn], answers)
            messages = [Message("user", f"{summary}\n\nNew question:\n{question}")]
        else:
            messages.append(Message("user", question))
        for _ in range(20):
            conv = Conversation(
                "messages", "sim", f"sys\nPrimary working directory: {CWD}", specs, tuple(messages), trial
            )
            reply = policy.reply(conv)
            cycles += 1
            calls = tuple(ToolCall(c.name, c.arguments, f"c{cycles}_{i}") for i, c in enumerate(reply.tool_calls))
            messages.append(Message("assistant", reply.text, calls))
            if not calls:
                answers.append(reply.text)
                break
            for c in calls:
                calls_made.append((turn, c))
                messages.append(Message("tool", _serve(c, tools), tool_call_id=c.call_id))
        else:
            raise AssertionError("the policy never answered")
    return answers, calls_made, cycles


@pytest.mark.parametrize("session", ["resume", "fresh"])
@pytest.mark.parametrize("kind", list(TOOLS))
def test_policy_answers_every_turn_correctly_through_every_client(kind, session, fx, repo):
    answers, calls, _ = _chain(sc.SessionChainPolicy(), kind, repo, session)
    assert sc.grade_turns(answers, fx.truth).score == 1.0, sc.grade_turns(answers, fx.truth).detail
    assert len(calls) >= 4


@pytest.mark.parametrize("seed", [1, 3, 6])
def test_policy_is_right_across_seeds(seed, tmp_path):
    fx = sc.generate(seed, "large")
    root = write_files(tmp_path, fx.files)
    for session in ("resume", "fresh"):
        assert sc.grade_turns(_chain(sc.SessionChainPolicy(), "sdk", root, session)[0], fx.truth).score == 1.0


def _reads(calls, path, root=None):
    return sum(1 for _, c in calls if c.name == "read_file" and c.arguments["path"] == path)


def test_policy_effect_rereads_in_fresh_sessions_only(fx, repo):
    tokens = fx.truth.paths["tokens"]
    steady = sc.SessionChainPolicy(p_reread=0.0, p_rediscover=0.0)
    _, resumed, resumed_cycles = _chain(steady, "sdk", repo, "resume")
    _, fresh, fresh_cycles = _chain(steady, "sdk", repo, "fresh")
    assert _reads(resumed, tokens) == 1 and _reads(fresh, tokens) == 4  # T2-T5 each re-read it
    assert [t for t, c in fresh if c.name == "grep"] == [0] == [t for t, c in resumed if c.name == "grep"]
    assert resumed_cycles == 9 and fresh_cycles == 12
    restless = sc.SessionChainPolicy(p_reread=1.0, p_rediscover=1.0)
    assert _reads(_chain(restless, "sdk", repo, "resume")[1], tokens) == 4  # re-opened in T3-T5 though in context
    assert [t for t, c in _chain(restless, "sdk", repo, "fresh")[1] if c.name == "grep"] == [0, 1, 2, 3, 4]


def test_policy_defaults_vary_per_trial_and_are_deterministic(repo):
    runs = [len(_chain(sc.SessionChainPolicy(), "sdk", repo, "fresh", trial=f"t{i}")[1]) for i in range(10)]
    again = [len(_chain(sc.SessionChainPolicy(), "sdk", repo, "fresh", trial=f"t{i}")[1]) for i in range(10)]
    assert runs == again and len(set(runs)) > 1


def test_policy_without_file_tools_says_so():
    conv = Conversation("chat", "sim", "", (), (Message("user", sc.QUESTIONS[0]),))
    assert "no tool" in sc.SessionChainPolicy().reply(conv).text


# ---------------------------------------------------------------- end to end through the SDK agents


def run_pack(pack, backend, root, runs=3):
    """Interleaved trials of both arms through ``sdk.run_trial``; one row per trial."""
    rows = []
    with serve(profile=PROFILE[backend], policy=pack.policy()) as srv:
        work = {}
        for arm in pack.arms():
            work[arm] = root / f"repo_{arm}"
            pack.prepare(work[arm])
        for run in range(runs):
            for name, arm in pack.arms().items():
                tid, nonce = design.trial_id(name, run), design.nonce("salt", name, run)
                out = root / tid
                out.mkdir()
                spec = TrialSpec(
                    batch="b", trial_id=tid, arm=arm, run=run, order_index=0, nonce=nonce, isolation=ALL,
                    prompt_cache_key=design.prompt_cache_key("b", "salt", name, run), prompts=tuple(pack.prompts()),
                    workdir=work[name], out_dir=out, base_url=srv.trial_base_url(tid), api_key="k", model="sim-model",
                    max_cycles=60, timeout_s=60,
                )  # fmt: skip
                outcome = sdk.run_trial(backend, spec)
                log = [json.loads(x) for x in srv.log_path.read_text().splitlines() if f'"trial_id":"{tid}"' in x]
                records = [json.loads(x) for x in (out / "sdk_responses.jsonl").read_text().splitlines()]
                usage = [x["usage"] for x in log]
                rows.append(
                    {
                        "arm": name,
                        "status": outcome.status,
                        "final": outcome.final_answer,
                        "sessions": len({r["session"] for r in records}),
                        "total": sum(u["input_tokens"] + u["output_tokens"] for u in usage),
                        "uncached": sum(u["input_tokens"] - u["cache_read_tokens"] for u in usage),
                        "hit": sum(u["cache_read_tokens"] for u in usage) / sum(u["input_tokens"] for u in usage),
                        "reads": sum(r["name"] == "read_file" for x in log for r in x["tool_results"]),
                    }
                )
    return rows


def _mean(rows, arm, key):
    return statistics.mean(r[key] for r in rows if r["arm"] == arm)


@pytest.mark.parametrize("backend", ["sdk-openai", "sdk-anthropic"])
def test_end_to_end_with_session_sends_fewer_tokens_but_reads_more(backend, tmp_path):
    pack = sc.SessionChainPack()
    rows = run_pack(pack, backend, tmp_path, runs=6)
    assert all(r["status"] == "ok" and pack.grade(r["final"]).score == 1.0 for r in rows)
    assert {r["sessions"] for r in rows if r["arm"] == "builtin"} == {1}
    assert {r["sessions"] for r in rows if r["arm"] == "with_session"} == {5}
    total = _mean(rows, "builtin", "total") / _mean(rows, "with_session", "total")
    reads = _mean(rows, "with_session", "reads") / _mean(rows, "builtin", "reads")
    # measured (preset small, 6 runs per arm, five salts): total 1.14-1.41x (openai) / 1.08-1.33x (anthropic);
    # reads 1.62-2.08x
    assert 1.0 < total < 1.8 and 1.3 < reads < 2.4, (total, reads)
    # builtin's carried transcript caches well, so at this warmth its uncached ratio is far below the total ratio
    uncached = _mean(rows, "builtin", "uncached") / _mean(rows, "with_session", "uncached")
    assert _mean(rows, "builtin", "hit") > _mean(rows, "with_session", "hit") + 0.2 and uncached < 0.8 * total


# ---------------------------------------------------------------- the user's own repository


def test_user_repository_mode(tmp_path):
    user = write_files(tmp_path / "user", {"lib/auth.py": "def login(user):\n    return True\n", "README.md": "# x\n"})
    before = sorted((p.as_posix(), p.stat().st_mtime_ns, p.read_bytes()) for p in user.rglob("*") if p.is_file())
    pack = sc.SessionChainPack(repo=str(user), globs=["lib/**/*.py"], questions="Where is login?||Is it safe?")
    rows = run_pack(pack, "sdk-anthropic", tmp_path, runs=1)
    assert all(r["status"] == "ok" and r["sessions"] == (2 if r["arm"] == "with_session" else 1) for r in rows)
    assert sorted(p.name for p in (tmp_path / "repo_builtin").rglob("*") if p.is_file()) == ["auth.py"]
    after = sorted((p.as_posix(), p.stat().st_mtime_ns, p.read_bytes()) for p in user.rglob("*") if p.is_file())
    assert after == before
    assert pack.grade(rows[0]["final"]) == userrepo.NO_TRUTH
    assert sc.SessionChainPack(repo=str(user)).grade_turns(["a"]) == userrepo.NO_TRUTH
    with pytest.raises(ParamError) as err:
        sc.SessionChainPack(repo=str(user), globs=["*.rs"])
    assert err.value.name == "task_options.globs"


def test_generic_questions_get_answers_from_what_was_read(tmp_path):
    user = write_files(tmp_path, {"lib/auth.py": "def login(user):\n    return True\n"})
    policy = sc.SessionChainPolicy(questions=("Where is login handled?",))
    messages = [Message("user", "Where is login handled?")]
    tools = FileTools(user)
    for cycle in range(5):
        reply = policy.reply(
            Conversation("responses", "sim", "", (ToolSpec("read_file"), ToolSpec("grep")), tuple(messages))
        )
        if not reply.tool_calls:
            break
        calls = tuple(ToolCall(c.name, c.arguments, f"c{cycle}{i}") for i, c in enumerate(reply.tool_calls))
        messages += [Message("assistant", reply.text, calls)]
        messages += [Message("tool", tools.call(c.name, c.arguments), tool_call_id=c.call_id) for c in calls]
    assert "`login` (lib/auth.py:1)" in reply.text
    assert [c.name for m in messages for c in m.tool_calls] == ["grep", "read_file"]
    assert tooluse.file_contents(Conversation("responses", "sim", "", (), tuple(messages))) == {
        "lib/auth.py": user.joinpath("lib/auth.py").read_text()
    }


def test_params_file_runs_a_graded_batch(tmp_path, monkeypatch):
    from kit import tasks
    from kit.stages import run

    monkeypatch.setitem(tasks.PACKS, "session-chain", sc.SessionChainPack)  # the registry line the lead adds
    folder = pack_batch(
        "session-chain",
        tmp_path,
        batch="chain",
        runs_per_arm=1,
        concurrency=1,
        backend="sdk-anthropic",
        salt="chain-e2e",
    )
    table = run.schedule_table(folder)
    assert list(table["status"]) == ["ok", "ok"] and list(table["grade"]) == [1.0, 1.0]
    metas = {m["arm"]: m for m in (json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json"))}
    assert metas["builtin"]["turns"] == metas["with_session"]["turns"] == 5
    assert metas["with_session"]["cycles"] > metas["builtin"]["cycles"]
