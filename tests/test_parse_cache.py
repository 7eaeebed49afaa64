"""The parse cache never changes a number: cached, partly cached and cold reads agree row for row.

On copies of the real transcript fixtures (tests/fixtures/transcripts), with a resumed session that
repeats another file's responses (the deduplication across files happens after the cache), files
appended to, added, and one rewritten with the same size and its modification time put back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kit import transcripts
from kit.transcripts import cache

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
SESSION = "claude-session_spotter_tool_heavy.jsonl"


@pytest.fixture(autouse=True)
def _fresh_stores():
    cache._STORES.clear()
    yield
    cache._STORES.clear()


def history(root: Path) -> Path:
    """A folder of every fixture transcript plus a resumed session repeating most of SESSION."""
    folder = root / "history"
    folder.mkdir()
    for path in FIXTURES.glob("*"):
        if path.suffix in (".jsonl", ".txt"):
            shutil.copy(path, folder / path.name)
    lines = (FIXTURES / SESSION).read_bytes().splitlines(keepends=True)
    (folder / "resumed.jsonl").write_bytes(b"".join(lines[:-3]))
    return folder


def plain(attrs: dict) -> dict:
    return {k: list(v) for k, v in attrs.items()}


def same(got: tuple[pd.DataFrame, pd.DataFrame], want: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    for g, w in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(g, w)
        assert plain(g.attrs) == plain(w.attrs)


def cold(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return transcripts.tables(folder)


def test_cold_cached_and_memo_reads_agree(tmp_path: Path) -> None:
    folder, store = history(tmp_path), tmp_path / "cache"
    want = cold(folder)
    assert want[0].attrs["repeats"], "the resumed copy must exercise the deduplication across files"
    same(transcripts.tables(folder, cache=store), want)  # writes the cache
    same(transcripts.tables(folder, cache=store), want)  # in memory, nothing changed
    cache._STORES.clear()
    same(transcripts.tables(folder, cache=store), want)  # from Parquet, as a new process would
    pd.testing.assert_frame_equal(transcripts.read(folder, cache=store), transcripts.read(folder))


def test_changed_files_are_read_again(tmp_path: Path) -> None:
    folder, store = history(tmp_path), tmp_path / "cache"
    transcripts.tables(folder, cache=store)
    session = folder / SESSION
    lines = session.read_bytes().splitlines(keepends=True)
    with open(folder / "claude-session_ccb_harbor_paired.jsonl", "ab") as handle:
        handle.write(b"".join(lines[:4]))  # appended tail
    shutil.copy(FIXTURES / "codex-rollout_yepanywhere_codemode_0.154.0.jsonl", folder / "new-rollout.jsonl")
    stat = session.stat()
    blob = session.read_bytes()
    i = blob.index(b'"output_tokens":') + len(b'"output_tokens":')
    digit = b"1" if blob[i : i + 1] != b"1" else b"2"
    session.write_bytes(blob[:i] + digit + blob[i + 1 :])  # rewritten, same size, mtime put back
    os.utime(session, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert session.stat().st_size == stat.st_size and session.stat().st_mtime_ns == stat.st_mtime_ns
    want = cold(folder)
    same(transcripts.tables(folder, cache=store), want)
    cache._STORES.clear()
    same(transcripts.tables(folder, cache=store), want)


def test_content_check_sees_a_same_size_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"x" * 10_000)
    before = cache.file_key(path)
    path.write_bytes(b"y" + b"x" * 9_999)
    after = cache.file_key(path)
    assert before[0] == after[0] and before[-1] != after[-1]


def test_parallel_read_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = history(tmp_path)
    want = cold(folder)
    monkeypatch.setattr(cache, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(cache.os, "sched_getaffinity", lambda _: {0, 1})
    same(transcripts.tables(folder), want)  # cache=None: processes, nothing kept
    same(transcripts.tables(folder, cache=tmp_path / "cache"), want)


def test_strict_raises_from_the_cache_too(tmp_path: Path) -> None:
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "bad.jsonl").write_bytes((FIXTURES / SESSION).read_bytes() + b"{not json\n")
    with pytest.raises(transcripts.TranscriptError) as plain_error:
        transcripts.read(folder, strict=True)
    transcripts.read(folder, cache=tmp_path / "cache")
    with pytest.raises(transcripts.TranscriptError) as cached_error:
        transcripts.read(folder, strict=True, cache=tmp_path / "cache")
    assert str(cached_error.value) == str(plain_error.value)


def test_never_writes_into_the_transcript_folder(tmp_path: Path) -> None:
    folder = history(tmp_path)
    with pytest.raises(ValueError, match="inside the transcript folder"):
        transcripts.read(folder, cache=folder / ".cache")
    assert not (folder / ".cache").exists()


def test_segments_merged_when_many(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_SEGMENTS", 1)
    folder, store = history(tmp_path), tmp_path / "cache"
    transcripts.tables(folder, cache=store)
    shutil.copy(FIXTURES / SESSION, folder / "again.jsonl")  # a second pass: two segments, merged into one
    with open(folder / "again.jsonl", "ab") as handle:
        handle.write(b"\n")
    want = cold(folder)
    same(transcripts.tables(folder, cache=store), want)
    cache._settle(store.resolve())  # the files are written by a thread
    assert len({p.name.split(".")[0] for p in store.glob("seg-*")}) == 1
    cache._STORES.clear()
    same(transcripts.tables(folder, cache=store), want)
