"""Compactions on the real CLIs (issue 29, finding 4): every request of a trial is in its total tokens.

The embedded provider logs every request a CLI makes, and its scripted model knows which of them asked for a
compaction's summary: that is the known truth. A Claude Code trial with a ``/compact`` turn (2.1.328 runs it as
its command in ``-p`` mode, recording none of the summary requests in its session file) and a Codex trial past
``model_auto_compact_token_limit`` (0.169.0 compacts with a ``/v1/responses`` request of its own) must each have,
request by request, the provider log's counts in the requests table, the log's sum as ``total_tokens``, and
``side_request`` ``compaction`` on exactly the requests the scripted model answered as compaction summaries.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kit.agents import cli_common
from kit.cli import pipeline
from kit.experiment.layout import TrialDir
from kit.provider.log import read as read_log
from kit.provider.policy import Conversation, Reply
from kit.stages import parse, run
from kit.tasks import session_chain
from kit.transcripts import collect, sources
from tests.support import ROOT

pytestmark = pytest.mark.e2e

QUESTIONS = "Where does authentication happen? Name the file.||{middle}Which function checks token expiry?"


def compactions(monkeypatch: pytest.MonkeyPatch) -> dict[str | None, list[bool]]:
    """Per trial nonce, in request order, whether the scripted model was asked for a compaction's summary (the
    provider calls the policy once per request, one request at a time, in the order it logs them)."""
    seen: dict[str | None, list[bool]] = {}
    reply = session_chain.SessionChainPolicy.reply

    def spy(self: session_chain.SessionChainPolicy, conv: Conversation) -> Reply:
        seen.setdefault(conv.nonce(), []).append(session_chain.is_compaction(conv))
        return reply(self, conv)

    monkeypatch.setattr(session_chain.SessionChainPolicy, "reply", spy)
    return seen


def chain_batch(tmp_path: Path, backend: str, middle: str, arm_defs: dict | None = None) -> Path:
    """Both session-chain arms, one run each, on ``backend``, with a custom three-question chain."""
    params = pipeline.load_params(str(ROOT / "params/session-chain.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="side", backend=backend, runs_per_arm=1, concurrency=2)
    params.update(profile=None, timeout_s=1800.0, arm_defs=arm_defs or {})
    params["task_options"] = {"preset": "small", "questions": QUESTIONS.format(middle=middle)}
    return run.run_batch(run.configure(params), progress=False)


def check_against_the_log(folder: Path, seen: dict[str | None, list[bool]]) -> pd.DataFrame:
    """Each trial's rows against its provider log and the scripted model's record; the trials table."""
    tables = parse.parse_batch(folder)
    assert tables["parse_issues"].empty, tables["parse_issues"].to_dict("records")
    trials = tables["trials"].set_index("trial_id")
    assert (trials["status"] == "ok").all(), trials["reason"].tolist()
    for trial_id, rows in tables["requests"].sort_values("cycle").groupby("trial_id"):
        files = TrialDir(folder / "raw" / str(trial_id))
        logged = [line["usage"] for line in read_log(files.provider_log) if line["status"] == 200]
        assert list(zip(rows["input_tokens"], rows["output_tokens"], strict=True)) == [
            (u["input_tokens"], u["output_tokens"]) for u in logged
        ]
        assert trials.loc[trial_id, "total_tokens"] == sum(u["input_tokens"] + u["output_tokens"] for u in logged)
        asked = seen[files.read_meta().nonce]
        assert (rows["side_request"] == "compaction").fillna(False).tolist() == asked, trial_id
        side = rows[rows["side_request"].notna()]
        assert trials.loc[trial_id, "side_tokens"] == side["total_tokens"].sum()
    return trials


def test_claude_code_compact_turn_requests_are_in_total_tokens(tmp_path, monkeypatch):
    if not (cli_common.TOOLS_BIN / "claude").exists():
        pytest.skip(f"claude CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    seen = compactions(monkeypatch)
    folder = chain_batch(tmp_path, "claude", "/compact||")
    trials = check_against_the_log(folder, seen)
    builtin = trials[trials["arm"] == "builtin"].iloc[0]
    assert builtin["side_requests"] >= 1 and builtin["side_tokens"] > 10_000  # the summary request re-reads it all
    requests = pd.read_parquet(folder / "tables" / "requests.parquet")
    side = requests[requests["side_request"].notna()]
    assert set(side["source_format"]) == {"provider_log"}  # only the log holds Claude Code's summary requests

    # Without the log (as in a user's own history), the session file alone says its compaction cannot be seen.
    session = sources.trial(folder / "raw" / str(builtin.name)).primary
    _, issues, _ = collect.collect(session)
    unseen = [i for i in issues if "no request of this compaction is in the transcript" in i["reason"]]
    assert len(unseen) == 1 and unseen[0]["reason"].startswith("system:compact_boundary: "), issues


def test_codex_auto_compaction_request_is_marked_in_total_tokens(tmp_path, monkeypatch):
    if not (cli_common.TOOLS_BIN / "codex").exists():
        pytest.skip(f"codex CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    seen = compactions(monkeypatch)
    limit = {"builtin": {"session": "resume", "flags": ["-c", "model_auto_compact_token_limit=8000"]}}
    folder = chain_batch(tmp_path, "codex", "", limit)
    trials = check_against_the_log(folder, seen)
    assert trials.set_index("arm")["side_requests"].to_dict() == {
        "builtin": sum(sum(v) for v in seen.values()),
        "with_session": 0,
    }
    assert trials.set_index("arm").loc["builtin", "side_requests"] >= 1
    requests = pd.read_parquet(folder / "tables" / "requests.parquet")
    side = requests[requests["side_request"].notna()]
    assert set(side["source_format"]) == {"codex_rollout"} and side["sidechain"].all()  # the rollout holds them
