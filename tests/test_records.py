"""The records the stages hand each other (kit.records): every field described, the committed examples' files
load and re-encode to the same JSON, older spellings read as today's, and what is written reads back equal."""

from __future__ import annotations

import ast
import re

import msgspec
import orjson
import pytest

from kit import records
from kit.errors import InputError
from kit.experiment.design import Slot
from kit.experiment.layout import BatchDir, write_design, write_record
from kit.files import write_json
from kit.stages import analyze
from tests.support import ROOT

EXAMPLES = sorted(p for p in (ROOT / "outputs" / "examples").iterdir() if (p / "manifest.json").is_file())
RECORDS = [
    records.Design,
    records.Manifest,
    records.StopRule,
    records.Decision,
    records.TrialMeta,
    records.Analysis,
    records.AnalysisFiles,
    records.ArmRecord,
    records.Published,
    analyze.Inputs,
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_field_has_a_one_line_description(record):
    described = {k: v[0] for k, v in records.docs(record).items()}
    assert described, record
    missing = [name for name, text in described.items() if not text or "\n" in text]
    assert not missing, f"{record.__name__}: fields without a one-line description: {missing}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_examples_files_load_and_encode_as_written(example):
    bd = BatchDir(example)
    manifest = bd.read_manifest()
    assert manifest.batch == example.name and manifest.status == "complete"
    assert all(isinstance(s, Slot) for s in manifest.schedule)
    assert msgspec.to_builtins(manifest) == orjson.loads(bd.manifest.read_bytes())
    design, warnings = bd.read_design()
    assert design.runs_per_arm == manifest.params.runs_per_arm and design.baseline in design.arms
    assert {**msgspec.to_builtins(design), "warnings": warnings} == orjson.loads(bd.design.read_bytes())
    for trial_dir in bd.trial_dirs():
        meta = bd.read_trial_meta(trial_dir)
        assert meta.trial_id == trial_dir.name
        assert msgspec.to_builtins(meta) == orjson.loads((trial_dir / "meta.json").read_bytes())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_examples_analysis_reads_back_as_the_plot_stage_draws_it(example):
    bd = BatchDir(example)
    files = bd.read_analysis()
    assert (files.design, files.warnings) == bd.read_design()
    assert set(files.ratios["arm"]) | {files.design.baseline} == set(files.design.arms)
    assert len(files.trials) == len(bd.trial_dirs()) and not files.requests.empty
    assert set(files.arms["arm"]) == set(files.design.arms)  # a table the batch has is read, not left empty
    trial = bd.trial_dir(files.trials["trial_id"].iloc[0])
    assert trial.is_complete() and trial.provider_log in trial.transcripts(trial.read_meta())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_examples_files_written_again_are_byte_identical(example, tmp_path):
    """What the kit writes from a record is the file it wrote before records (same keys, values and layout)."""
    source = BatchDir(example)
    copy = BatchDir(tmp_path)
    write_record(copy.manifest, source.read_manifest())
    write_design(copy.analysis, *source.read_design())
    assert copy.manifest.read_bytes() == source.manifest.read_bytes()
    assert copy.design.read_bytes() == source.design.read_bytes()
    for trial_dir in source.trial_dirs():
        written = write_record(tmp_path / trial_dir.name / "meta.json", source.read_trial_meta(trial_dir))
        assert written.read_bytes() == (trial_dir / "meta.json").read_bytes()


@pytest.mark.parametrize("old", ["n_per_arm", "n"])
def test_an_old_spelling_of_runs_per_arm_reads_as_today(tmp_path, old):
    example = BatchDir(EXAMPLES[0])
    raw = orjson.loads(example.design.read_bytes())
    raw[old] = raw.pop("runs_per_arm")
    bd = BatchDir(tmp_path)
    write_json(bd.design, raw)
    design, warnings = bd.read_design()
    assert (design, warnings) == example.read_design()
    write_design(bd.analysis, design, warnings)
    written = orjson.loads(bd.design.read_bytes())
    assert "runs_per_arm" in written and old not in written


def test_an_old_manifest_without_later_keys_loads(tmp_path):
    """A manifest written before per-arm settings, run warnings and isolation parts were recorded."""
    raw = orjson.loads(BatchDir(EXAMPLES[0]).manifest.read_bytes())
    for key in ("arm_settings", "warnings", "isolation_parts", "ended_at", "raw_sha256", "trial_errors"):
        del raw[key]
    write_json(BatchDir(tmp_path).manifest, raw)
    manifest = BatchDir(tmp_path).read_manifest()
    assert manifest.arm_settings == {} and manifest.warnings == [] and manifest.ended_at is records.UNSET
    assert analyze.design_of([manifest]).arm_settings == []
    assert "ended_at" not in msgspec.to_builtins(manifest)  # an unset key stays absent when written again


def test_written_records_read_back_equal(tmp_path):
    source = BatchDir(EXAMPLES[0])
    design, warnings = source.read_design()
    manifest = source.read_manifest()
    stop = records.StopRule(
        decisions=[records.Decision(scheduled_runs=3, arm="b", baseline="a", runs_per_arm=5, lower=0.8,
                                    upper=None, add_block=True, reason="interval too wide")],
        runs_per_arm=4,
    )  # fmt: skip
    manifest = msgspec.structs.replace(manifest, stop_rule=stop)
    meta = source.read_trial_meta(source.trial_dirs()[0])
    bd = BatchDir(tmp_path)
    write_design(bd.analysis, design, warnings)
    write_record(bd.manifest, manifest)
    write_record(bd.trial(meta.trial_id) / "meta.json", meta)
    assert bd.read_design() == (design, warnings)
    assert bd.read_manifest() == manifest
    assert bd.read_trial_meta(bd.trial(meta.trial_id)) == meta
    assert "reason" not in orjson.loads(bd.manifest.read_bytes())["stop_rule"]  # unset while the batch grows


STAGE_CONTRACTS = [
    "stages/*.py", "experiment/layout.py", "files.py", "report/*.py", "charts/*.py", "analysis/design_table.py",
    "analysis/occupancy_block.py",
]  # fmt: skip


def test_no_public_function_between_stages_returns_a_bare_dict():
    """Stage results and files are records; a dict is returned only as a typed mapping (name -> path …)."""
    bare = {"dict", "dict[str, Any]", "Dict", "Dict[str, Any]", "dict[str, object]"}
    found = []
    for pattern in STAGE_CONTRACTS:
        for path in sorted((ROOT / "kit").glob(pattern)):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                public = isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
                if public and node.returns is not None and ast.unparse(node.returns) in bare:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not found, found


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("manifest.json", '{"batch": "b"}', "missing required field `salt`"),
        ("manifest.json", '{"batch": "b", "salt": "s"', "Input data was truncated"),
        ("design.json", '{"batch": "b", "arms": "placebo"}', "$.arms"),
    ],
)
def test_a_file_that_is_not_what_the_kit_writes_is_a_located_error(tmp_path, name, text, said):
    """A hand-edited or truncated record is a KitError naming the file and the place in it, and the file stays."""
    bd = BatchDir(tmp_path / "b")
    path = bd.manifest if name == "manifest.json" else bd.design
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    read = bd.read_manifest if name == "manifest.json" else bd.read_design
    with pytest.raises(InputError, match=re.escape(str(path))) as caught:
        read()
    assert said in str(caught.value) and path.read_text() == text
