"""Per-arm model, effort and binary: an effort or binary-vs-binary comparison interleaved in one batch.

The manifest records each arm's settings and its binary's version (the design table's rows,
``kit.analysis.design_table.arm_settings``); a missing binary is refused before anything is written; a resumed batch
refuses changed per-arm settings.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from kit.agents import cli_common
from kit.analysis import design_table
from kit.cli import pipeline
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.stages import parse, run
from tests.report_tables import DESIGN
from tests.support import ROOT

CODEX = cli_common.TOOLS_BIN / "codex"


def _values(out: Path, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch="b", runs_per_arm=1, concurrency=1, timeout_s=90.0, **over)
    return params


def test_per_arm_model_and_effort_reach_the_requests_and_the_manifest(tmp_path):
    arm_defs = {"batching": {"model": "sim-gpt", "effort": "high"}}
    folder = run.run_batch(run.configure(_values(tmp_path, arm_defs=arm_defs)), progress=False)
    requests = parse.parse_batch(folder)["requests"]
    assert requests.groupby("arm")["model"].unique().map(list).to_dict() == {
        "batching": ["sim-gpt"],
        "placebo": ["sim-agent"],
    }
    rows = design_table.arm_settings([BatchDir(folder).read_manifest()]).set_index("arm")
    assert rows.loc["batching", ["model", "effort"]].tolist() == ["sim-gpt", "high"]
    assert rows.loc["placebo", "model"] == "sim-agent" and pd.isna(rows.loc["placebo", "effort"])
    assert rows.loc["placebo", "binary"] == "openai" and rows.loc["placebo", "version"]
    metas = {m["arm"]: m for m in (json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json"))}
    assert metas["batching"]["effort"] == "high" and metas["batching"]["model"] == "sim-gpt"


def test_a_missing_arm_binary_is_one_line_naming_the_arm_before_anything_is_written(tmp_path):
    values = _values(tmp_path, backend="codex", arm_defs={"batching": {"codex_bin": str(tmp_path / "no-codex")}})
    with pytest.raises(ParamError) as err:
        pipeline.plan(values)
    assert err.value.name == "arm_defs.batching.codex_bin" and "arm 'batching'" in str(err.value)
    assert "\n" not in str(err.value) and not any(tmp_path.iterdir())


def test_a_binary_of_another_backend_is_refused(tmp_path):
    with pytest.raises(ParamError, match="arm 'placebo' sets claude_bin"):
        run.configure(_values(tmp_path, backend="codex", arm_defs={"placebo": {"claude_bin": "claude"}}))
    with pytest.raises(ParamError, match=r"arm_defs\.placebo\.model"):
        run.configure(_values(tmp_path, arm_defs={"placebo": {"model": 5}}))


def test_resume_refuses_a_changed_arm_setting(tmp_path):
    run.run_batch(run.configure(_values(tmp_path, arm_defs={"batching": {"effort": "low"}})), progress=False)
    changed = run.configure(_values(tmp_path, arm_defs={"batching": {"effort": "high"}}))
    with pytest.raises(ParamError) as err:
        run.run_batch(changed, progress=False)
    assert err.value.name == "arm_defs.batching.effort"
    with pytest.raises(ParamError, match="effort='low'"):
        pipeline.plan(_values(tmp_path, arm_defs={"batching": {"effort": "high"}}))


@pytest.mark.skipif(not CODEX.exists(), reason=f"codex binary absent from {cli_common.TOOLS_BIN} (make e2e-tools)")
def test_binary_vs_binary_on_codex_records_both_binaries(tmp_path):
    wrapper = tmp_path / "bin" / "codex-patched"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{CODEX}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    arm_defs = {"batching": {"codex_bin": str(wrapper)}}
    values = _values(tmp_path / "out", backend="codex", profile=None, arm_defs=arm_defs)
    folder = run.run_batch(run.configure(values), progress=False)
    assert set(run.schedule_table(folder)["status"]) == {"ok"}
    rows = pd.DataFrame(json.loads((folder / "manifest.json").read_text())["arm_settings"]).T
    assert rows.loc["batching", "binary"] == str(wrapper) and rows.loc["placebo", "binary"] == str(CODEX)
    assert rows.loc["batching", "version"] == rows.loc["placebo", "version"] == cli_common.version(str(CODEX))
    metas = {m["arm"]: m for m in (json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json"))}
    assert metas["batching"]["versions"]["codex_bin"] == str(wrapper)


def test_a_shared_cacheable_first_prefix_labels_uncached_ratios_diagnostic():
    codex = msgspec.structs.replace(DESIGN, shared_first_prefix_tokens=1256, profile="openai-implicit", model="gpt-5.4")
    label = design_table.shared_prefix_label(codex)
    assert label.startswith("diagnostic:") and "1,256 tokens" in label and "docs/method.md#isolation" in label
    assert design_table.shared_prefix_label(msgspec.structs.replace(codex, shared_first_prefix_tokens=0)) is None
    never = msgspec.structs.replace(codex, shared_first_prefix_tokens=900)  # below the minimum: never cacheable
    assert design_table.shared_prefix_label(never) is None
    assert design_table.shared_prefix_label(msgspec.structs.replace(DESIGN, shared_first_prefix_tokens=None)) is None
