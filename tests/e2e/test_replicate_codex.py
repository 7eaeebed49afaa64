"""A replication on the real Codex CLI against the embedded provider, from one command (docs/method.md#replication):
three batches with a non-isolated control interleaved, one report that states the control's contamination and keeps
the Codex result labelled diagnostic, its shared head measured over the isolated trials as the provider logged them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import orjson
import pytest

from kit.agents import cli_common
from kit.cli import replicate
from kit.experiment.layout import BatchDir
from kit.provider.cache import load_profile
from tests.support import ROOT

CODEX = cli_common.TOOLS_BIN / "codex"
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not CODEX.exists(), reason=f"{CODEX} absent (make e2e-tools)")]
BATCHES = ("crep-1", "crep-2", "crep-3")


@pytest.fixture(scope="module")
def replication(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replicate-codex")
    argv = ["-f", str(ROOT / "params/demo.yaml"), "-p", "batch", "crep", "-p", "outputs_dir", str(out)]
    argv += ["-p", "backend", "codex", "-p", "runs_per_arm", "1", "-p", "timeout_s", "1800", "-p", "profile", "None"]
    argv += ["-p", "n_resamples", "1000", "--control", "placebo"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert replicate.main(argv) == 0
    return out


def _first_heads(out: Path) -> dict[bool, list[list[list]]]:
    """The provider's truth: every trial's first request's segments, by whether the trial was the control."""
    heads: dict[bool, list[list[list]]] = {True: [], False: []}
    for name in BATCHES:
        bd = BatchDir(out / name)
        for tdir in bd.trial_dirs():
            meta = bd.read_trial_meta(tdir)
            first = orjson.loads(bd.trial_dir(meta.trial_id).provider_log.read_bytes().splitlines()[0])
            heads[meta.control].append(first["segments"])
    return heads


def _common(heads: list[list[list]]) -> int:
    shared = 0
    for column in zip(*heads, strict=False):
        if len({seg[0] for seg in column}) != 1:
            break
        shared += column[0][1]
    return shared


def test_the_shared_head_is_the_isolated_trials_and_stays_diagnostic(replication: Path) -> None:
    design, _ = BatchDir(replication / BATCHES[0]).read_design()
    heads = _first_heads(replication)
    isolated, everyone = _common(heads[False]), _common(heads[False] + heads[True])
    minimum = load_profile("openai-implicit").min_tokens_for(design.model)
    assert design.shared_first_prefix_tokens == isolated >= minimum > everyone  # the control's head is shorter
    assert design.batch == list(BATCHES) and design.control_arms == ["placebo_control"]
    text = BatchDir(replication / BATCHES[0]).report_md.read_text()
    assert f"- diagnostic: every isolated trial's first request shares its first {isolated:,} tokens" in text


def test_the_report_states_the_contamination(replication: Path) -> None:
    text = BatchDir(replication / BATCHES[0]).report_md.read_text()
    first_reads = []
    for name in BATCHES:
        bd = BatchDir(replication / name)
        for tdir in bd.trial_dirs():
            meta = bd.read_trial_meta(tdir)
            if meta.control:
                line = bd.trial_dir(meta.trial_id).provider_log.read_bytes().splitlines()[0]
                first_reads.append(orjson.loads(line)["usage"]["cache_read_tokens"])
    mean = sum(first_reads) / len(first_reads)
    assert f"Contamination the control shows: placebo_control's first requests read {mean:,.0f} cached tokens" in text
    assert "this figure depends on cache warmth (diagnostic: every isolated trial's first request shares" in text
    assert "placebo_control feeds" not in text.split("## Warnings")[0]
