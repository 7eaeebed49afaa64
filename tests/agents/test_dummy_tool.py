"""The isolation's dummy tool answered harmlessly on every backend (docs/method.md#isolation).

``task_options.call_dummy_tool`` makes the scripted model call the trial's ``cache_bust_<nonce>`` tool in its
first reply (Claude Code defers it behind ToolSearch: a load first). The technique needs the call answered
``{"success": true}`` and the trial to go on. The truth is what the agent sent back to the provider: the log's
tool result for the call (not an error, its length that of the transcript's text) and, for the CLIs, the result
the CLI recorded for that call id, independently of the kit's own record in meta ``versions``. Before the
approval on Codex and ``--allowedTools`` on Claude Code, Codex answered "MCP tool call requires approval, but
approval policy is never" and Claude Code "Claude requested permissions to use …, but you haven't granted it yet".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kit import tasks
from kit.agents import cli_common, mcp_server
from kit.cli import pipeline
from kit.experiment.layout import BatchDir, TrialDir
from kit.provider import Conversation, Message, ToolCall, ToolSpec
from kit.provider.log import read as read_log
from kit.provider.policy import CallsDummyTool, EchoPolicy
from kit.records import TrialMeta
from kit.stages import run
from tests.support import ROOT

ANSWER = mcp_server.CACHE_BUST_RESULT  # '{"success": true}'
BACKENDS = ("sdk-openai", "sdk-anthropic", "codex", "claude")


def smallest_batch(tmp_path: Path, backend: str) -> Path:
    """The demo batch cut to one run of its two arms (a batch has two at least), its model calling the dummy tool
    first."""
    params = pipeline.load_params(str(ROOT / "params" / "demo.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="dummy", backend=backend, runs_per_arm=1)
    params.update(timeout_s=600.0, task_options={**params["task_options"], "call_dummy_tool": True})
    return run.run_batch(run.configure(params), progress=False)


def _results(value: Any, call_id: str) -> list[Any]:
    """Every tool-result block for ``call_id`` anywhere in a transcript line (Codex's ``function_call_output``,
    Claude Code's ``tool_result``), as the content the CLI gave the model."""
    found = []
    if isinstance(value, dict):
        if value.get("type") == "function_call_output" and value.get("call_id") == call_id:
            found.append(value.get("output"))
        if value.get("type") == "tool_result" and value.get("tool_use_id") == call_id:
            found.append(value.get("content"))
        value = list(value.values())
    for inner in value if isinstance(value, list) else []:
        found += _results(inner, call_id)
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("backend", BACKENDS)
def test_dummy_tool_answered_success_and_the_trial_goes_on(tmp_path, backend):
    if backend in ("codex", "claude") and not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    folder = smallest_batch(tmp_path, backend)
    bd = BatchDir(folder)
    assert bd.read_manifest().task["call_dummy_tool"] is True
    logged = [r for r in read_log(bd.request_log) if r.get("status") == 200]
    trial_dirs = bd.trial_dirs()
    assert len(trial_dirs) == 2
    for trial_dir in trial_dirs:
        meta = TrialDir(trial_dir).read_meta()
        assert meta.status == "ok", meta.reason
        assert meta.grade is not None and meta.grade > 0  # the pack's own policy went on to answer the task
        _check_answered(backend, trial_dir, meta, [r for r in logged if r["trial_id"] == meta.trial_id])


def _check_answered(backend: str, trial_dir: Path, meta: TrialMeta, lines: list[dict]) -> None:
    # the provider's truth: one result came back for the dummy tool, and it is not an error
    assert lines[0]["tool_calls"] == 1  # the first reply: the call (Claude Code: the ToolSearch that loads it)
    dummy = [t for line in lines for t in line["tool_results"] if str(t["name"]).endswith(str(meta.cache_bust_tool))]
    assert len(dummy) == 1 and dummy[0]["is_error"] is False, dummy
    if backend.startswith("sdk-"):  # the kit's own loop answers the call itself
        assert dummy[0]["chars"] == len(ANSWER)
    else:  # what the CLI gave the model for that call, in its own transcript
        blocks = [
            block
            for name in meta.transcripts
            for line in cli_common.read_jsonl(trial_dir / name)
            for block in _results(line, dummy[0]["call_id"])
        ]
        texts = {mcp_server.result_text(b) for b in blocks}
        assert texts and all(t.endswith(ANSWER) for t in texts), texts  # Codex puts "Wall time: … Output:" first
        assert len(min(texts, key=len)) <= dummy[0]["chars"] <= len("\n".join(sorted(texts)))
    assert meta.versions[mcp_server.CALLS_KEY] == f"1 call, answered {ANSWER}"


# ---------------------------------------------------------------- the wrapper alone (no agent)

NONCE = "0123456789abcdef"


def conv(tools: list[str], messages: list[Message], system: str = "") -> Conversation:
    return Conversation("messages", "m", system, tuple(ToolSpec(t) for t in tools), tuple(messages))


class Seen:
    """A pack policy that keeps what it was shown and answers "done"."""

    name = "seen"

    def __init__(self) -> None:
        self.shown: list[Conversation] = []

    def reply(self, conversation: Conversation):
        self.shown.append(conversation)
        return EchoPolicy().reply(conversation)


def test_first_reply_calls_the_offered_tool_then_the_pack_sees_none_of_it():
    pack = Seen()
    policy = CallsDummyTool(pack)
    tool = f"mcp__cachebust__cache_bust_{NONCE}"
    user = Message("user", "QUESTION")
    first = policy.reply(conv(["Read", tool], [user]))
    assert first.tool_calls == (ToolCall(tool, {}),) and not pack.shown
    call = ToolCall(tool, {}, "c1")
    after = [user, Message("assistant", tool_calls=(call,)), Message("tool", ANSWER, tool_call_id="c1")]
    policy.reply(conv(["Read", tool], after))
    assert pack.shown[-1].messages == (user,) and pack.shown[-1].cycle == 0
    assert policy.name == "seen+call_dummy_tool"


def test_a_deferred_tool_is_loaded_once_then_called():
    policy = CallsDummyTool(Seen())
    tool = f"mcp__cachebust__cache_bust_{NONCE}"
    env = Message("user", f'Use ToolSearch with query "select:<name>" to load them:\n{tool}\n\nQUESTION')
    load = policy.reply(conv(["ToolSearch", "Read"], [env]))
    assert load.tool_calls == (ToolCall("ToolSearch", {"query": f"select:{tool}", "max_results": 1}),)
    asked = [env, Message("assistant", tool_calls=(ToolCall("ToolSearch", load.tool_calls[0].arguments, "s1"),))]
    asked.append(Message("tool", "", tool_call_id="s1"))
    assert policy.reply(conv(["ToolSearch", "Read", tool], asked)).tool_calls == (ToolCall(tool, {}),)
    # not loaded after all: the pack answers rather than asking again
    assert policy.reply(conv(["ToolSearch", "Read"], asked)).text


def test_no_dummy_tool_offered_leaves_the_pack_alone():
    pack = Seen()
    assert CallsDummyTool(pack).reply(conv(["Read"], [Message("user", "Q")])).text
    assert len(pack.shown) == 1


def test_the_option_is_every_packs_and_checked():
    for name in tasks.names():
        assert tasks.get(name, call_dummy_tool=True).describe()["call_dummy_tool"] is True
        assert "call_dummy_tool" not in tasks.get(name, call_dummy_tool=False).describe()
    with pytest.raises(ValueError, match=r"call_dummy_tool.*true or false"):
        tasks.get("batch-read", call_dummy_tool="yes")


def test_calls_record_counts_each_answer():
    assert mcp_server.calls_record([]) == {}
    assert mcp_server.calls_record([ANSWER, ANSWER]) == {mcp_server.CALLS_KEY: f"2 calls, answered {ANSWER}"}
    mixed = mcp_server.calls_record([ANSWER, "refused"])[mcp_server.CALLS_KEY]
    assert mixed == f"2 calls, answered {ANSWER} (1); refused (1)"
    assert json.loads(ANSWER) == {"success": True}
