"""Nothing in a parse cache folder runs code or changes a number (issue 27).

A pickle planted where an earlier version of the cache unpickled one (``index.pkl``, a segment's
``*.rows.pkl`` and ``*.pieces.pkl``, a reader's resumable state), an Arrow column whose extension type's
deserializer would unpickle, an edited rows file, a folder others can write or another user owns: each
is read past. Nothing runs (the payload's marker file stays absent), the tables equal a cold read, and
the user is told once, by one issue naming the folder.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from pathlib import Path

import msgspec
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; rewrites a cached Arrow file
import pytest

from kit import transcripts
from kit.transcripts import cache, parallel
from tests.support import FIXTURES

TRANSCRIPTS = FIXTURES / "transcripts"
GROWN = ("claude-session_spotter_tool_heavy.jsonl", "codex-rollout_yepanywhere_codemode_0.154.0.jsonl")


@pytest.fixture(autouse=True)
def _fresh_stores():
    cache._STORES.clear()
    yield
    cache._STORES.clear()


class _Payload:
    """Unpickling this creates ``marker`` (``open(marker, "w")``): a stand-in for any command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def payload(marker: Path) -> bytes:
    """A pickle whose load creates ``marker``, checked to be live on another marker (so the test can fail)."""
    probe = marker.with_name(marker.name + ".probe")
    pickle.loads(pickle.dumps(_Payload(probe))).close()
    assert probe.exists()
    probe.unlink()
    return pickle.dumps(_Payload(marker))


def history(root: Path) -> Path:
    folder = root / "history"
    folder.mkdir()
    for path in TRANSCRIPTS.glob("*.jsonl"):
        shutil.copy(path, folder / path.name)
    return folder


def written(folder: Path, store: Path) -> Path:
    """``folder`` read through a new cache at ``store``, its files written; the resolved cache folder."""
    transcripts.tables(folder, cache=store)
    where = store.resolve()
    cache._settle(where)
    cache._STORES.clear()
    return where


def notes(frames: tuple[pd.DataFrame, pd.DataFrame], store: Path) -> list[str]:
    return [i["reason"] for i in frames[0].attrs["issues"] if i["source_path"] == str(store.resolve())]


def same_as_cold(got: tuple[pd.DataFrame, pd.DataFrame], folder: Path, store: Path) -> None:
    """The tables equal a cold read's, the cache's notes aside."""
    want = transcripts.tables(folder)
    for g, w in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(g, w)
        issues = [i for i in g.attrs["issues"] if i["source_path"] != str(store.resolve())]
        assert issues == list(w.attrs["issues"])
        assert {k: list(v) for k, v in g.attrs.items() if k != "issues"} == {
            k: list(v) for k, v in w.attrs.items() if k != "issues"
        }


def told_once(folder: Path, store: Path, first: tuple[pd.DataFrame, pd.DataFrame], word: str) -> None:
    """One line about the folder on the first read, naming why (``word``), none on the next."""
    found = notes(first, store)
    assert len(found) == 1 and word in found[0], found
    assert notes(transcripts.tables(folder, cache=store), store) == []


def part(store: Path, suffix: str) -> Path:
    (found,) = [p for p in store.iterdir() if p.name.endswith(suffix)]
    return found


def rewrite(store: Path, path: Path, data: bytes) -> None:
    """``path`` given ``data`` and the index its digest: a change the digest check cannot see."""
    path.write_bytes(data)
    index = msgspec.msgpack.decode((store / cache.INDEX).read_bytes())
    index["digests"][path.name] = hashlib.sha256(data).hexdigest()
    (store / cache.INDEX).write_bytes(msgspec.msgpack.encode(index))


def edited_rows(path: Path) -> bytes:
    """The rows file with 1,000,000 more ``total_tokens`` on its first row, as an Arrow file."""
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    at = table.schema.get_field_index("total_tokens")
    values = table.column(at).to_pylist()
    values[0] += 1_000_000
    table = table.set_column(at, "total_tokens", pa.array(values, type=pa.int64()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("names", [["index.pkl"], ["seg-0123456789ab.rows.pkl", "seg-0123456789ab.pieces.pkl"]])
def test_pickles_named_as_the_old_cache_never_load(tmp_path: Path, names: list[str]) -> None:
    """Planted beside a good cache (or alone): removed unread, the user told, the numbers a cold read's."""
    folder, marker = history(tmp_path), tmp_path / "ran"
    store = written(folder, tmp_path / "cache")
    for name in names:
        (store / name).write_bytes(payload(marker))
    got = transcripts.tables(folder, cache=store)
    assert not marker.exists()
    assert not any((store / name).exists() for name in names)
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "pickle")


def test_a_pickle_in_a_kept_reader_state_never_loads(tmp_path: Path) -> None:
    """A grown file is read from its piece's state; a pickle there (its digest made to match) is not unpickled:
    it does not decode as the reader's state, so the file is read whole."""
    folder, marker = tmp_path / "h", tmp_path / "ran"
    folder.mkdir()
    halves = {}
    for name in GROWN:
        lines = (TRANSCRIPTS / name).read_bytes().splitlines(keepends=True)
        halves[name] = b"".join(lines[: len(lines) // 2]), b"".join(lines[len(lines) // 2 :])
        (folder / name).write_bytes(halves[name][0])
    store = written(folder, tmp_path / "cache")
    pieces_file = part(store, ".pieces.msgpack")
    pieces = msgspec.msgpack.decode(pieces_file.read_bytes())
    for piece in pieces.values():
        assert piece["state"] is not None
        piece["state"] = payload(marker)
    rewrite(store, pieces_file, msgspec.msgpack.encode(pieces))
    for name in GROWN:
        with open(folder / name, "ab") as handle:
            handle.write(halves[name][1])
    resumed = {}
    real = parallel.read_one

    def spy(fmt, path, tools, resume, keep):
        resumed[path.name] = resume is not None
        return real(fmt, path, tools, resume, keep)

    parallel.read_one, saved = spy, real
    try:
        got = transcripts.tables(folder, cache=store)
    finally:
        parallel.read_one = saved
    assert resumed == dict.fromkeys(GROWN, True)  # the planted states were handed to the readers
    assert not marker.exists()
    same_as_cold(got, folder, store)


def test_an_extension_type_column_is_refused(tmp_path: Path) -> None:
    """An Arrow field marked as pyarrow's old pickled extension type (``arrow.py_extension_type``, whose
    deserializer unpickled its metadata), its digest made to match: the file is refused, nothing runs."""
    folder, marker = history(tmp_path), tmp_path / "ran"
    store = written(folder, tmp_path / "cache")
    rows = part(store, ".requests.arrow")
    table = pa.ipc.open_file(pa.py_buffer(rows.read_bytes())).read_all()
    meta = {b"ARROW:extension:name": b"arrow.py_extension_type", b"ARROW:extension:metadata": payload(marker)}
    column = pa.array([b"x"] * len(table), type=pa.binary())
    table = table.append_column(pa.field("planted", pa.binary(), metadata=meta), column)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    rewrite(store, rows, sink.getvalue().to_pybytes())
    got = transcripts.tables(folder, cache=store)
    assert not marker.exists()
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "not one the kit writes")


def test_an_edited_rows_file_is_dropped_by_its_digest(tmp_path: Path) -> None:
    """+1,000,000 on one row's ``total_tokens``, the index left as it was: the digest differs, the cache is
    dropped, and the total is a cold read's."""
    folder = history(tmp_path)
    store = written(folder, tmp_path / "cache")
    rows = part(store, ".requests.arrow")
    rows.write_bytes(edited_rows(rows))
    got = transcripts.tables(folder, cache=store)
    assert int(got[0]["total_tokens"].sum()) == int(transcripts.read(folder)["total_tokens"].sum())
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "does not match its digest")


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_cache_others_can_write_is_neither_read_nor_written(tmp_path: Path, what: str) -> None:
    """A folder (or one of its files) writable by group and others, holding rows edited with their digest made to
    match: not read (the numbers are a cold read's), not written (its files stay as they were), told once."""
    folder = history(tmp_path)
    store = written(folder, tmp_path / "cache")
    rows = part(store, ".requests.arrow")
    rewrite(store, rows, edited_rows(rows))
    (store / cache.INDEX if what == "file" else store).chmod(0o666 if what == "file" else 0o777)
    before = {p.name: p.stat().st_mtime_ns for p in store.iterdir()}
    shutil.copy(TRANSCRIPTS / GROWN[0], folder / "new.jsonl")  # a file the cache would take in
    got = transcripts.tables(folder, cache=store)
    cache._settle(store)
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "writable by group or others")
    if what == "folder":
        assert {p.name: p.stat().st_mtime_ns for p in store.iterdir()} == before


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_cache_another_user_owns_is_not_read(tmp_path: Path) -> None:
    folder = history(tmp_path)
    store = written(folder, tmp_path / "cache")
    rows = part(store, ".requests.arrow")
    rewrite(store, rows, edited_rows(rows))
    os.chown(store, 4242, -1)
    got = transcripts.tables(folder, cache=store)
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "owned by uid 4242")


def test_an_undecodable_pieces_file_is_dropped(tmp_path: Path) -> None:
    folder = history(tmp_path)
    store = written(folder, tmp_path / "cache")
    rewrite(store, part(store, ".pieces.msgpack"), b"\x93not pieces")
    got = transcripts.tables(folder, cache=store)
    same_as_cold(got, folder, store)
    told_once(folder, store, got, "does not decode")


def test_the_cache_is_made_for_its_user_alone(tmp_path: Path) -> None:
    folder = history(tmp_path)
    store = written(folder, tmp_path / "made" / "cache")
    assert store.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in store.iterdir()} == {0o600}
    assert {p.suffix for p in store.iterdir()} == {".arrow", ".msgpack"}


def test_nothing_in_the_readers_unpickles() -> None:
    root = Path(cache.__file__).resolve().parent
    for path in root.glob("*.py"):
        code = path.read_text()
        assert "import pickle" not in code and "pickle.load" not in code, path


@pytest.mark.e2e
def test_kit_history_runs_no_planted_pickle_and_says_so_on_the_terminal(tmp_path: Path) -> None:
    """As the probe did it: a pickle planted in the user's cache folder, then ``python -m kit history``. Nothing
    runs, the command succeeds, and its terminal says once which folder was not used and why."""
    import subprocess
    import sys

    from tests.support import ROOT, cli_env

    folder, marker = history(tmp_path), tmp_path / "ran"
    store = tmp_path / "xdg" / "agent-ab-kit" / "parse"
    store.mkdir(parents=True, mode=0o700)
    (store / "index.pkl").write_bytes(payload(marker))
    argv = [sys.executable, "-m", "kit", "history", str(folder), "--out", str(tmp_path / "out")]
    env = cli_env() | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    told = [line for line in done.stderr.splitlines() if line.startswith("note: ")]
    assert len(told) == 1 and str(store) in told[0] and "parse cache: " in told[0], done.stderr
