"""``python -m kit snapshot --export``: a committed example batch written as a caveman-style ``results.json``
whose numbers are the batch's own tables, and which the snapshot recount reads back to the batch's savings."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from kit import tasks
from kit.analysis.snapshot import SnapshotError, load_snapshot, snapshot_table
from kit.analysis.snapshot_export import TOKENS, export_batch, write_export
from kit.cli.snapshot import main
from kit.experiment.layout import BatchDir
from tests.support import ROOT

EXAMPLES = sorted(p for p in (ROOT / "outputs" / "examples").iterdir() if (p / "analysis" / "design.json").exists())


def test_every_committed_example_is_exported():
    assert [p.name for p in EXAMPLES] == ["batch-read", "occupancy", "session-chain", "terse"]


@pytest.mark.parametrize("folder", EXAMPLES, ids=lambda p: p.name)
def test_export_holds_the_batchs_own_numbers(folder, tmp_path):
    out = write_export(export_batch(folder), tmp_path / "results.json")
    data = json.loads(out.read_bytes())
    snap = load_snapshot(out)  # caveman's shape: the recount reads it
    bd = BatchDir(folder)
    manifest, (design, _) = bd.read_manifest(), bd.read_design()
    trials = pd.read_csv(bd.analysis_csv("trials"))
    keys = data["metadata"]["arm_keys"]
    assert sorted(keys) == sorted(design.arms) and set(snap.arms) == set(keys.values())
    runs = sorted(trials["run"].unique())
    pack = tasks.get(manifest.params.task, **manifest.params.task_options)
    assert list(snap.prompts) == ["\n\n".join(pack.prompts_for(r)) for r in runs]
    for arm, key in keys.items():
        for i, run in enumerate(runs):
            row = trials[(trials["arm"] == arm) & (trials["run"] == run)].iloc[0]
            got = data["trials"][key][i]
            answer = (folder / "raw" / row["trial_id"] / "answer.md").read_text()
            assert got["trial_id"] == row["trial_id"] and snap.arms[key][i] == answer
            assert {c: got[c] for c in TOKENS} == {c: int(row[c]) for c in TOKENS}, (arm, run)
            assert got["answer_chars"] == len(answer) and got["grade"] == (
                None if pd.isna(row["grade"]) else row["grade"]
            )
    meta = data["metadata"]
    assert meta["simulated"] is True and meta["true_effect"] == design.true_effect  # the embedded provider's
    assert (meta["batch"], meta["salt"], meta["backend"], meta["endpoint"]) == (
        manifest.batch, manifest.salt, design.backend, design.endpoint,
    )  # fmt: skip
    assert (
        meta["kit_commit"] == design.versions["kit_commit"]
        and meta["fixture_sha256"] == manifest.task["fixture_sha256"]
    )
    assert meta["n_prompts"] == len(runs) and meta["excluded_runs"] == [] and meta["baseline"] == keys[design.baseline]


def test_terse_export_recounts_to_the_batchs_savings_table(tmp_path):
    folder = ROOT / "outputs" / "examples" / "terse"
    out = write_export(export_batch(folder), tmp_path / "results.json")
    snap = load_snapshot(out)
    assert list(snap.arms) == ["__baseline__", "__terse__", "skill"] and snap.skills == ["skill"]  # caveman's names
    table = snapshot_table(snap)  # default control: __terse__, as caveman's measure.py
    trials = pd.read_csv(folder / "analysis" / "trials.csv").sort_values("run")
    counted = table.attrs["per_prompt_tokens"]
    for arm, key in {"baseline": "__baseline__", "terse": "__terse__", "skill": "skill"}.items():
        # on the embedded provider the o200k recount of the answer is the provider's own output count
        assert counted[key] == trials[trials["arm"] == arm]["output_tokens"].tolist()
    savings = pd.read_csv(folder / "analysis" / "savings.csv")
    own = savings[(savings["arm"] == "skill") & (savings["metric"] == "output_tokens")].iloc[0]
    row = table.iloc[0]
    for stat in ("median", "mean", "min", "max", "stdev", "lower", "upper"):
        assert row[stat] == pytest.approx(own[stat], rel=1e-12), stat
    assert (row["median"], row["mean"]) == pytest.approx((0.3529, 0.2708), abs=1e-4)


def test_cli_exports_then_recounts_and_says_it_is_a_simulation(tmp_path, capsys):
    out = tmp_path / "terse.json"
    assert main(["--export", str(ROOT / "outputs/examples/terse"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"wrote {out}: 5 runs x 3 arms of batch terse (SIMULATED")
    assert "_SIMULATED: a scripted model on the embedded provider" in printed
    assert "| **skill** | +35% | +27% | +5% | +41% | 15% | 714 / 990 |" in printed
    assert main([str(out)]) == 0 and "| **skill** | +35% |" in capsys.readouterr().out  # the file alone recounts


def test_a_run_with_a_failed_trial_is_left_out_and_named(tmp_path, capsys):
    folder = shutil.copytree(ROOT / "outputs/examples/terse", tmp_path / "terse")
    trials = pd.read_csv(folder / "analysis" / "trials.csv", dtype={"reason": "string"})
    failed = trials["trial_id"] == "r02-skill"
    trials.loc[failed, ["status", "reason"]] = ["failed", "model returned HTTP 500"]
    trials.to_csv(folder / "analysis" / "trials.csv", index=False)
    exported = export_batch(folder)
    meta = exported.metadata
    assert meta.excluded_runs == [2] and meta.n_prompts == 4
    assert [(t.trial_id, t.status, t.reason) for t in meta.unfinished_trials] == [
        ("r02-skill", "failed", "model returned HTTP 500")
    ]
    assert [t.run for t in exported.trials["skill"]] == [0, 1, 3, 4]
    assert main(["--export", str(folder), "-o", str(tmp_path / "r.json")]) == 0
    assert (
        "left out runs [2]: not every arm finished (r02-skill failed: model returned HTTP 500)"
        in capsys.readouterr().out
    )


def test_batches_that_cannot_be_exported_are_refused_with_their_place(tmp_path, capsys):
    folder = shutil.copytree(ROOT / "outputs/examples/terse", tmp_path / "terse")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["task"]["fixture_sha256"] = "0" * 64  # as if the prompts had changed since the batch ran
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        SnapshotError, match=r"terse: task 'terse' changed since the batch ran .*would not be the ones answered"
    ):
        export_batch(folder)
    shutil.rmtree(folder / "analysis")
    assert main(["--export", str(folder)]) == 1
    assert "analysis/design.json missing: run the analyze stage first" in capsys.readouterr().err
    assert not (folder / "results.json").exists()
    with pytest.raises(SnapshotError, match="not a batch folder"):
        export_batch(tmp_path)
