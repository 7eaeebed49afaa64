"""An arm that cannot do the task is flagged in the report's first lines and the batch gets no efficiency headline
(issue 29): the real Claude Code with its file-reading tools disallowed in one arm, against the embedded provider,
whose scripted model then answers that it has no tool to read (grade 0, every trial ``ok``)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kit.agents import cli_common
from kit.experiment.layout import BatchDir
from kit.stages import analyze, parse, plot
from kit.tasks import batch_read
from tests.support import pack_batch

CLAUDE = cli_common.TOOLS_BIN / "claude"
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not CLAUDE.exists(), reason=f"{CLAUDE} absent (make e2e-tools)")]
NOREAD = {"instruction": batch_read.BATCHING, "placement": "agents_file", "flags": ["--disallowedTools", "Read,Bash"]}


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unable")
    folder = pack_batch(
        "demo", out, batch="noread", backend="claude", runs_per_arm=2, concurrency=2, profile=None,
        timeout_s=1800.0, arms=["placebo", "noread"], arm_defs={"noread": NOREAD},
    )  # fmt: skip
    parse.parse_batch(folder)
    analyze.analyze_batches([folder], baseline="placebo", n_resamples=1_000)
    plot.publish(folder)
    return folder


def _calls(folder: Path, arm: str) -> list[int]:
    """The provider's truth: the tool calls the scripted model made in each of the arm's requests."""
    bd, calls = BatchDir(folder), []
    for tdir in bd.trial_dirs():
        if bd.read_trial_meta(tdir).arm == arm:
            calls += [
                orjson.loads(line)["tool_calls"] for line in (tdir / "provider_log.jsonl").read_bytes().splitlines()
            ]
    return calls


def test_the_arm_that_cannot_read_is_flagged_first(batch: Path) -> None:
    metas = [BatchDir(batch).read_trial_meta(t) for t in BatchDir(batch).trial_dirs()]
    noread = [m for m in metas if m.arm == "noread"]
    assert all(m.status == "ok" and m.grade == 0 for m in noread)  # finished, counted ok, and wrong
    assert sum(_calls(batch, "noread")) == 0 < sum(_calls(batch, "placebo"))
    design, _ = BatchDir(batch).read_design()
    (unable,) = design.unable
    assert unable.arm == "noread" and unable.graded_zero and unable.no_tool and unable.trials == 2
    lines = BatchDir(batch).report_md.read_text().splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("# Token-cost report"))
    assert lines[title + 2].startswith("**Cannot do the task: noread: its 2 finished trials graded 0 each")
    assert lines[title + 3].startswith("**No efficiency headline:")
    opening = "\n".join(lines[: lines.index("## Warnings")])
    assert "fewer total tokens" not in opening and "more total tokens" not in opening
    printed = plot.headline_for(batch).split("\n\n", 1)[0]  # what kit batch prints
    assert "Cannot do the task: noread" in printed and "total tokens than" not in printed
