"""run-real on a user's repository: the arm's instruction reaches the model through the developer
instructions (``-c developer_instructions=…`` on Codex, ``--append-system-prompt`` on Claude Code), and
the repository's own AGENTS.md and CLAUDE.md stay byte-identical, in the repository and in the working
copies the agents ran in. One small batch (two arms, one run each) per real CLI against the embedded
provider, whose policy records every conversation it answered (what the CLI really sent).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kit.agents import cli_common
from kit.cli import pipeline
from kit.experiment.layout import BatchDir
from kit.provider.policy import Conversation, Reply
from kit.stages import run
from kit.tasks import batch_read, userrepo
from tests.support import ROOT

OWN = {
    "AGENTS.md": "# House rules\n\nRun `make check` before every commit. (the repository's own AGENTS.md)\n",
    "CLAUDE.md": "# Notes for Claude\n\nThe pipeline is documented in MANIFEST.txt. (the repository's own CLAUDE.md)\n",
}

pytestmark = pytest.mark.e2e


class Recording:
    """The batch-read policy, keeping each trial's conversations."""

    name = "batch-read"

    def __init__(self) -> None:
        self.inner = batch_read.BatchReadPolicy()
        self.seen: dict[str, list[Conversation]] = {}

    def reply(self, conv: Conversation) -> Reply:
        self.seen.setdefault(str(conv.trial_id), []).append(conv)
        return self.inner.reply(conv)


def _tree(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` by relative path."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """The batch-read fixture as a user's repository with its own AGENTS.md and CLAUDE.md."""
    repo = tmp_path / "their-repo"
    for rel, text in {**batch_read.generate(0, "small").files, **OWN}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    return repo


@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_user_repo_instruction_is_injected_and_its_own_files_stay(tmp_path, user_repo, backend, monkeypatch):
    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    recording = Recording()
    monkeypatch.setattr(batch_read.BatchReadPack, "policy", lambda self: recording)
    before = _tree(user_repo)
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp_path / "outputs"), batch="real", backend=backend, runs_per_arm=1, profile=None)
    params["task_options"] = {"repo": str(user_repo)}
    cfg = run.configure(params)
    assert {arm.placement for arm in cfg.arms.values()} == {userrepo.PLACEMENT}
    folder = run.run_batch(cfg, progress=False)
    summary = run.schedule_table(folder)
    assert list(summary["status"]) == ["ok", "ok"], list(summary["reason"])

    assert _tree(user_repo) == before  # the repository: not a byte written
    copies = sorted(run.work_root(BatchDir(folder)).glob("repo_*"))
    assert len(copies) == 2
    for copy in copies:  # the working copies: the repository's own instruction files, untouched
        assert {name: (copy / name).read_text() for name in OWN} == OWN
        assert {rel: digest for rel, digest in _tree(copy).items() if rel in before} == before

    instructions = {"placebo": batch_read.PLACEBO, "batching": batch_read.BATCHING}
    for _, row in summary.iterrows():
        conversations = recording.seen[row["trial_id"]]
        texts = [c.all_text() for c in conversations]
        assert all(instructions[row["arm"]] in t for t in texts), row["arm"]  # in every request of the trial
        other = instructions["batching" if row["arm"] == "placebo" else "placebo"]
        assert not any(other in t for t in texts)
        own = OWN["AGENTS.md" if backend == "codex" else "CLAUDE.md"]
        assert own.splitlines()[-1] in texts[0]  # the repository's own file is what the CLI loaded


def test_an_arm_written_as_agents_file_on_a_user_repo_is_refused_before_anything_is_written(tmp_path, user_repo):
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp_path / "outputs"), batch="real", runs_per_arm=1)
    params["task_options"] = {"repo": str(user_repo)}
    params["arm_defs"] = {"batching": {"placement": "agents_file"}}
    with pytest.raises(run.ParamError, match=r"arm_defs\.batching\.placement.*overwrite"):
        run.configure(params)
    assert not (tmp_path / "outputs").exists()
