"""``python -m kit parse`` on kit folders reads each response once, as the parse stage does (issue 13).

A trial folder holds the same responses in the SDK record, the provider log and (a batch) the
batch-wide request log; the committed example batch's tables/requests.parquet is what the parse stage
made of it, so the command's totals must equal it. The example is copied before any file is changed:
raw artifacts are never modified.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts
from kit.cli import parse as cli
from kit.stages import parse
from kit.transcripts import collect, sources
from tests.support import FIXTURES, ROOT

BATCH = ROOT / "outputs" / "examples" / "batch-read"
TRIAL = BATCH / "raw" / "r00-placebo"
STREAM = FIXTURES / "transcripts" / "claude-streamjson_ccb_harbor_claude-code.txt"
TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens"]


def committed(trial_id: str | None = None) -> pd.DataFrame:
    rows = pd.read_parquet(BATCH / "tables" / "requests.parquet")
    return rows if trial_id is None else rows[rows["trial_id"] == trial_id]


def parsed(tmp_path: Path, path: Path, capsys: pytest.CaptureFixture) -> tuple[pd.DataFrame, str, str]:
    out = tmp_path / "rows.parquet"
    assert cli.main([str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    return pd.read_parquet(out), printed.out, printed.err


def test_a_trial_folder_is_read_once_with_the_parse_stage_totals(tmp_path, capsys):
    rows, out, err = parsed(tmp_path, TRIAL, capsys)
    want = committed("r00-placebo")
    assert len(rows) == len(want) == 4
    assert rows[TOKENS].sum().to_dict() == want[TOKENS].sum().to_dict()
    assert set(rows["source_path"]) == {str(TRIAL / "sdk_responses.jsonl")}  # the log only cross-checks
    assert rows[["trial_id", "arm", "run"]].drop_duplicates().values.tolist() == [["r00-placebo", "placebo", 0]]
    assert "1 kit trial folder(s)" in out and str(want["total_tokens"].sum()) in out and err == ""


def test_a_batch_folder_gives_the_tables_of_the_parse_stage(tmp_path, capsys):
    rows, out, err = parsed(tmp_path, BATCH, capsys)
    want = committed()
    assert len(rows) == len(want) == 53
    assert rows[TOKENS].sum().to_dict() == want[TOKENS].sum().to_dict()
    per_trial = rows.groupby("trial_id")[TOKENS].sum()
    assert per_trial.equals(want.groupby("trial_id")[TOKENS].sum().astype(per_trial.dtypes.to_dict()))
    assert not rows["source_path"].str.contains("provider").any() and err == ""
    assert "10 kit trial folder(s)" in out and "11 other file(s)" in out  # 10 trial logs and the batch log


def test_the_command_and_the_stage_share_one_rule(tmp_path):
    """Same rows, same numbering: the rule lives in kit.transcripts.sources and both call it."""
    copy = shutil.copytree(BATCH, tmp_path / "batch-read", ignore=shutil.ignore_patterns("tables"))
    stage = parse.parse_batch(copy)["requests"]
    command, issues, _ = collect.collect([copy])
    keys = ["trial_id", "cycle", "file_cycle", "source_line", *TOKENS]
    assert command[keys].equals(stage[keys]) and issues == []
    inside = command["source_path"].str.removeprefix(str(copy.resolve()) + "/")  # the stage's tables: batch-relative
    assert inside.tolist() == stage["source_path"].tolist() and stage["source_path"].str.startswith("raw/").all()


def test_a_nonexistent_path_exits_1_with_one_line(capsys):
    assert cli.main(["/nonexistent/trial"]) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == "error: no such file or folder: /nonexistent/trial\n"


def test_the_module_command_exits_1_on_a_missing_file():
    done = subprocess.run(
        [sys.executable, "-m", "kit", "parse", "missing.jsonl"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "error: no such file or folder: missing.jsonl\n")


def test_nothing_readable_exits_1(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a transcript\n")
    assert cli.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "notes.txt:0: cannot detect the transcript format" in err
    assert err.endswith(f"error: no API responses could be read from {tmp_path}\n")


def test_the_provider_logs_disagreement_is_printed_at_its_line(tmp_path, capsys):
    trial = shutil.copytree(TRIAL, tmp_path / "r00-placebo")
    log = trial / "provider_log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[2])
    record["usage"]["output_tokens"] += 7
    log.write_bytes(b"".join([*lines[:2], orjson.dumps(record) + b"\n", *lines[3:]]))
    assert cli.main([str(trial)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"{log}:3: cross-check: transcript ")


def test_another_format_of_the_same_responses_is_checked_in_sums(tmp_path, capsys):
    """An extra listed file in another format (a second record of the trial) only cross-checks."""
    trial = shutil.copytree(TRIAL, tmp_path / "r00-placebo")
    meta = orjson.loads((trial / "meta.json").read_bytes())
    meta["transcripts"] = ["sdk_responses.jsonl", "copy.jsonl", "provider_log.jsonl"]
    (trial / "meta.json").write_bytes(orjson.dumps(meta))
    lines = (trial / "provider_log.jsonl").read_bytes().splitlines(keepends=True)
    (trial / "copy.jsonl").write_bytes(b"".join(lines[:-1]))  # the copy lost its last response
    found = sources.trial(trial)
    assert (found.primary, found.others) == ([trial / "sdk_responses.jsonl"], [trial / "copy.jsonl"])
    assert cli.main([str(trial)]) == 0
    err = capsys.readouterr().err
    primary = int(transcripts.read([trial / "sdk_responses.jsonl"])["input_tokens"].sum())
    assert f"{trial / 'copy.jsonl'}:0: cross-check input_tokens: the primary transcripts give {primary}" in err


def test_the_transcripts_own_adjustments_are_printed(capsys):
    """A stream-json turn whose output was raised to its result line's count says so (attrs["crosscheck"])."""
    assert cli.main([str(STREAM)]) == 0
    err = capsys.readouterr().err
    assert "cross-check output_tokens: rows give 3, the transcript says 606" in err and "added to the turn" in err


def test_a_listed_file_of_no_format_is_an_issue_not_the_end_of_the_parse(tmp_path):
    """A CLI killed before it wrote a line leaves an empty transcript; the stage says where and reads on."""
    batch = shutil.copytree(BATCH, tmp_path / "batch-read", ignore=shutil.ignore_patterns("tables"))
    trial = batch / "raw" / "r00-placebo"
    meta = orjson.loads((trial / "meta.json").read_bytes())
    (trial / "killed.jsonl").write_bytes(b"")
    (trial / "meta.json").write_bytes(orjson.dumps({**meta, "transcripts": ["killed.jsonl", *meta["transcripts"]]}))
    tables = parse.parse_batch(batch)
    assert tables["parse_issues"].to_dict("records") == [
        {"source_path": "raw/r00-placebo/killed.jsonl", "source_line": 0, "reason": "empty file"}  # batch-relative
    ]
    assert len(tables["requests"]) == len(committed())
    assert sources.trial(trial).primary == [trial / "sdk_responses.jsonl"]
