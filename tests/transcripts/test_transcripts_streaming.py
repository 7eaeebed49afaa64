"""The machinery that makes big reads fast reads exactly what the line-by-line reader read.

Lines are cut from large chunks (a line may straddle chunks or outgrow one), copies of a file are
found by size and first block before any whole-file hash, and the side tables in ``df.attrs`` are
shared by the frames pandas derives instead of deep-copied.
"""

from __future__ import annotations

import copy
import zlib
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from kit import transcripts
from kit.transcripts import _base, claude_session
from tests.support import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "transcripts"
TOOL_HEAVY = FIXTURES / "claude-session_spotter_tool_heavy.jsonl"
ROLLOUT = FIXTURES / "codex-rollout_agent-history_codex_exec_0.135.0.jsonl"


def awkward_copy(tmp_path: Path) -> Path:
    """tool_heavy with a BOM, CRLF endings, blank lines, a bad line and a truncated last line."""
    lines = TOOL_HEAVY.read_bytes().splitlines()
    lines[:0] = [b"\xef\xbb\xbf" + lines.pop(0)]
    lines[6:6] = [b"", b"   ", b'{"type": "assistant", oops']
    blob = b"\r\n".join(lines) + b"\r\n" + lines[-1][: len(lines[-1]) // 2]
    path = tmp_path / "awkward.jsonl"
    path.write_bytes(blob)
    return path


@pytest.mark.parametrize("sizes", [(1, 1), (7, 16), (64, 4096)])
def test_any_chunk_size_reads_the_same_rows_and_issues(tmp_path, monkeypatch, sizes):
    paths = [awkward_copy(tmp_path), ROLLOUT]
    expected = transcripts.read(paths)
    assert [i["source_line"] for i in expected.attrs["issues"]] == [9, 43]
    monkeypatch.setattr(_base, "FIRST_CHUNK", sizes[0])
    monkeypatch.setattr(_base, "CHUNK", sizes[1])  # every line longer than a chunk at (1, 1)
    got = transcripts.read(paths)
    pd.testing.assert_frame_equal(got, expected)
    assert got.attrs == expected.attrs


def test_same_size_files_are_copies_only_when_the_whole_content_matches(tmp_path, monkeypatch):
    monkeypatch.setattr(transcripts, "FIRST_BLOCK", 64)  # a small first block, so the fixture has a tail beyond it
    blob = TOOL_HEAVY.read_bytes()
    original, copied, tail, head = (tmp_path / f"{n}.jsonl" for n in ("original", "copied", "tail", "head"))
    original.write_bytes(blob)
    copied.write_bytes(blob)
    tail.write_bytes(blob.replace(b"BN5jdsym", b"BN5jdsyM"))  # same size and first block, other ids at the end
    head.write_bytes(blob.replace(b'"file-history-snapshot"', b'"file-history-snapshoT"', 1))
    assert len({p.stat().st_size for p in (original, copied, tail, head)}) == 1
    df = transcripts.read([original, copied, tail, head])
    assert [(i["source_path"], i["reason"]) for i in df.attrs["issues"]] == [
        (str(copied), f"duplicate of {original} (same content); counted once"),
        (str(head), "unknown line type 'file-history-snapshoT'; ignored (further lines of this type not reported)"),
    ]
    # head repeats original's responses (same ids): each counts once, in the last file read (attrs["repeats"])
    assert sorted(set(df.source_path)) == sorted(map(str, (tail, head)))
    assert {r["source_path"] for r in df.attrs["repeats"]} == {str(original), str(tail)}


def test_side_tables_are_shared_by_derived_frames_not_copied():
    df = transcripts.read(TOOL_HEAVY)
    events = df.attrs["events"]
    assert events and events == [e for e in events]  # still an ordinary list of records
    for derived in (df[["input_tokens"]], df.groupby("model").sum(numeric_only=True), copy.deepcopy(df)):
        assert derived.attrs["events"] is events
    assert copy.deepcopy(df.attrs)["files"] is df.attrs["files"]


BAD_LINES = {
    "mixed": (5, [b'{"type": "assistant", oops', b"", b"[1, 2]", '{"type":"user","note":"caf\u00e9"}'.encode()]),
    "not utf-8": (20, [b'{"type":"user"}{"type":"user"}', b'{"type":"user","x":"\xff"}', b"  "]),
    # what decoding a chunk as whitespace-separated values (msgspec's decode_lines) would take for records:
    # two on a line, and as many values as lines but not one per line (a blank line, an object over two)
    "two on a line": (9, [b'{"type":"user"}{"type":"user"}', b'{"type":"user"} {"type":"user"}']),
    "blank and two": (9, [b"", b'{"type":"user"}{"type":"user"}']),
    "split and two": (9, [b'{"type":"user",', b'"x":{}}', b'{"type":"user"}{"type":"user"}']),
}


@pytest.mark.parametrize("chunk", [64, 4096, 1 << 22])
@pytest.mark.parametrize("bad", list(BAD_LINES))
def test_records_decoded_a_chunk_at_a_time_are_each_line_decoded_alone(tmp_path, monkeypatch, chunk, bad):
    """``records`` decodes a chunk's lines together and, where one fails, the chunk line by line: the same
    records and issues, at the same lines, as decoding each line alone; its ``Position`` is the file's end."""
    lines = TOOL_HEAVY.read_bytes().splitlines()
    at_line, inserted = BAD_LINES[bad]
    lines[at_line:at_line] = inserted
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(_base, "FIRST_CHUNK", min(chunk, 1 << 16))
    monkeypatch.setattr(_base, "CHUNK", chunk)
    decoder = claude_session.DECODER
    want, reported = [], []
    for number, line in enumerate(lines, 1):
        try:
            line.decode("utf-8")
            want.append((number, decoder.decode(line)))
        except (msgspec.DecodeError, UnicodeDecodeError):
            if line.strip():
                reported.append(number)
    assert 0 < len(reported) <= len(inserted)
    issues, at = _base.Issues(), _base.Position(crc=0)
    assert list(_base.records(path, issues, decoder, at)) == want
    assert [i["source_line"] for i in issues.items] == reported
    blob = path.read_bytes()
    assert (at.offset, at.line, at.crc, at.seen, at.complete) == (len(blob), len(lines), zlib.crc32(blob), True, True)
