"""The batch-read pack: deterministic fixture, real grading, a policy that works in every client."""

import shlex

import pytest

from kit.provider.policy import Conversation, Message, ToolSpec
from kit.tasks import batch_read, get
from tests.support import files_digest


def test_fixture_is_byte_for_byte_deterministic():
    assert files_digest(batch_read.generate(0, "small").files) == files_digest(batch_read.generate(0, "small").files)
    assert files_digest(batch_read.generate(0, "small").files) != files_digest(batch_read.generate(1, "small").files)
    assert files_digest(batch_read.generate(0, "small").files) != files_digest(batch_read.generate(0, "large").files)


def test_fixture_shape_and_the_word_batch_appears_nowhere():
    fx = batch_read.generate(7, "large")
    assert sorted(fx.files) == sorted(
        ["MANIFEST.txt", "config/defaults.toml", *(f"pipeline/{m}.py" for m in batch_read.MODULES)]
    )
    assert len(fx.modules) == 12 and len(fx.unused_keys) == 6
    assert all("batch" not in text.lower() for text in fx.files.values())
    assert "batch" not in batch_read.PROMPT.lower()
    assert len(fx.files["pipeline/ingest.py"]) > 3 * len(batch_read.generate(7, "small").files["pipeline/ingest.py"])


def test_ground_truth_matches_the_generated_code():
    fx = batch_read.generate(3, "small")
    for m in fx.modules:
        functions, keys, imports = batch_read.analyse_module(fx.files[f"pipeline/{m.name}.py"])
        assert tuple(functions) == m.functions and tuple(keys) == m.keys and tuple(imports) == m.imports


def test_placebo_is_length_matched():
    assert abs(len(batch_read.PLACEBO) - len(batch_read.BATCHING)) / len(batch_read.BATCHING) < 0.05
    assert batch_read.MARKER in batch_read.BATCHING and batch_read.MARKER not in batch_read.PLACEBO


@pytest.fixture
def fx():
    return batch_read.generate(0, "small")


def test_grader_good_answer(fx):
    assert batch_read.grade(batch_read.answer_from(fx.files), fx).score == 1.0


def test_grader_partial_answer(fx):
    files = dict(fx.files)
    for m in batch_read.MODULES[:3]:
        files.pop(f"pipeline/{m}.py")  # three modules never read: rows missing, their keys look unused
    grade = batch_read.grade(batch_read.answer_from(files), fx)
    assert grade.detail.startswith("modules 9/12")
    assert 0.3 < grade.score < 1.0


def test_grader_wrong_answer(fx):
    grade = batch_read.grade("I could not find anything. Unused config keys: none", fx)
    assert grade.score == 0.0 and grade.detail == "modules 0/12, unused keys 0/6"


def _tools(kind):
    return {
        "sdk": (ToolSpec("read_file"), ToolSpec("list_files")),
        "codex": (ToolSpec("exec_command"), ToolSpec("write_stdin")),
        "claude": (ToolSpec("Read"), ToolSpec("Bash")),
        "claude-bash": (ToolSpec("Bash"),),
    }[kind]


def _serve_call(call, files, cwd):
    """What each client's tool would answer (format included), from the fixture files."""
    if call.name == "read_file":
        return files[call.arguments["path"]]
    if call.name == "exec_command":
        path = shlex.split(call.arguments["cmd"])[1]
        return f"Chunk ID: ab12\nWall time: 0.01 seconds\nProcess exited with code 0\nOutput:\n{files[path]}"
    if call.name == "Read":
        rel = call.arguments["file_path"][len(cwd) + 1 :]
        return "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(files[rel].splitlines(), 1))
    if call.name == "Bash":
        return files[shlex.split(call.arguments["command"])[1]]
    raise AssertionError(call)


def _run(policy, kind, system, files, seed=0, trial="t1"):
    cwd = "/home/user/repo_a"
    system = system + f"\nPrimary working directory: {cwd}"
    messages = [Message("user", batch_read.PROMPT)]
    for cycle in range(60):
        conv = Conversation("responses", "sim", system, _tools(kind), tuple(messages), trial, seed)
        reply = policy.reply(conv)
        calls = tuple(c.__class__(c.name, c.arguments, f"c{cycle}_{i}") for i, c in enumerate(reply.tool_calls))
        messages.append(Message("assistant", reply.text, calls))
        if not calls:
            return reply.text, cycle + 1
        messages += [Message("tool", _serve_call(c, files, cwd), tool_call_id=c.call_id) for c in calls]
    raise AssertionError("policy never answered")


@pytest.mark.parametrize("kind", ["sdk", "codex", "claude", "claude-bash"])
def test_policy_answers_correctly_through_every_client_toolset(kind, fx):
    answer, cycles = _run(batch_read.BatchReadPolicy(), kind, batch_read.BATCHING, fx.files)
    assert batch_read.grade(answer, fx).score == 1.0
    assert cycles >= 3


def test_policy_effect_batching_needs_fewer_cycles(fx):
    policy = batch_read.BatchReadPolicy(p_batch=0.9, q_batch=0.15)
    with_b = [_run(policy, "sdk", batch_read.BATCHING, fx.files, trial=f"t{i}")[1] for i in range(20)]
    placebo = [_run(policy, "sdk", batch_read.PLACEBO, fx.files, trial=f"t{i}")[1] for i in range(20)]
    # expected cycles: batching ≈ 2 + 1/0.9 ≈ 3.1; placebo ≈ 2 + (1 - 0.85**13) / 0.15 ≈ 7.8
    assert sum(with_b) / 20 < 4 < 6 < sum(placebo) / 20


def test_policy_is_deterministic_per_seed_and_trial(fx):
    policy = batch_read.BatchReadPolicy(p_batch=0.5, q_batch=0.5)
    runs = [_run(policy, "sdk", batch_read.PLACEBO, fx.files, seed=1, trial=f"t{i}")[1] for i in range(10)]
    again = [_run(policy, "sdk", batch_read.PLACEBO, fx.files, seed=1, trial=f"t{i}")[1] for i in range(10)]
    assert runs == again and len(set(runs)) > 1


def test_policy_without_file_tools_says_so():
    conv = Conversation("chat", "sim", "", (), (Message("user", "hi"),))
    assert "no tool" in batch_read.BatchReadPolicy().reply(conv).text


def test_registry_rejects_unknown_task_and_options():
    from kit.experiment.design import ParamError

    with pytest.raises(ParamError, match="batch-read"):
        get("nope")
    with pytest.raises(ParamError, match="preset"):
        get("batch-read", presett="small")


def test_policy_gives_up_when_the_manifest_cannot_be_read():
    policy = batch_read.BatchReadPolicy()
    messages = [Message("user", batch_read.PROMPT)]
    for cycle in range(5):
        conv = Conversation("responses", "sim", "", _tools("sdk"), tuple(messages), "t", 0)
        reply = policy.reply(conv)
        if not reply.tool_calls:
            assert "could not read MANIFEST.txt" in reply.text and cycle == 2
            return
        call = reply.tool_calls[0].__class__(reply.tool_calls[0].name, reply.tool_calls[0].arguments, f"c{cycle}")
        messages += [
            Message("assistant", "", (call,)),
            Message("tool", "error: no such file", tool_call_id=f"c{cycle}", is_error=True),
        ]
    raise AssertionError("policy kept retrying a failing read")


def test_user_repository_mode_copies_read_only_and_reports_no_grade(tmp_path):
    repo = tmp_path / "mine"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("import os\n\ndef run(cfg):\n    return cfg.get('k')\n")
    (repo / "notes.txt").write_text("not python\n")
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    pack = get("batch-read", repo=str(repo), globs=["src/**/*.py"])
    work = tmp_path / "work"
    work.mkdir()
    pack.prepare(work)
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()) == ["src/a.py"]
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    assert pack.grade("anything").score is None and "no ground truth" in pack.grade("anything").detail
    assert "MANIFEST" not in pack.prompts_for(0)[0]
    assert pack.describe()["repo_sha256"]
