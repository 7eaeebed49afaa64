"""The parse cache never changes a number: cached, partly cached and cold reads agree row for row.

On copies of the real transcript fixtures (tests/fixtures/transcripts), with a resumed session that
repeats another file's responses (the deduplication across files happens after the cache), files
appended to, added, and one rewritten with the same size and its modification time put back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kit import schema, transcripts
from kit.transcripts import _base, cache, parallel
from tests.support import FIXTURES, ROOT

TRANSCRIPTS = FIXTURES / "transcripts"
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
    for path in TRANSCRIPTS.glob("*"):
        if path.suffix in (".jsonl", ".txt"):
            shutil.copy(path, folder / path.name)
    lines = (TRANSCRIPTS / SESSION).read_bytes().splitlines(keepends=True)
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
    same(transcripts.tables(folder, cache=store), want)  # from its files, as a new process would
    pd.testing.assert_frame_equal(transcripts.read(folder, cache=store), transcripts.read(folder))


def test_changed_files_are_read_again(tmp_path: Path) -> None:
    folder, store = history(tmp_path), tmp_path / "cache"
    transcripts.tables(folder, cache=store)
    session = folder / SESSION
    lines = session.read_bytes().splitlines(keepends=True)
    with open(folder / "claude-session_ccb_harbor_paired.jsonl", "ab") as handle:
        handle.write(b"".join(lines[:4]))  # appended tail
    shutil.copy(TRANSCRIPTS / "codex-rollout_yepanywhere_codemode_0.154.0.jsonl", folder / "new-rollout.jsonl")
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


def test_a_plain_read_never_loads_the_cache() -> None:
    """A read without ``cache=`` (a batch's parse stage), in one process or over two, does not import the parse
    cache: it is only on the path that asked for it."""
    code = (
        "import os, sys\nfrom kit import transcripts\nfrom kit.transcripts import parallel\n"
        f"transcripts.tables({str(TRANSCRIPTS)!r}, tool_paths=True)\n"
        "parallel.PARALLEL_MIN_BYTES = 0\nos.sched_getaffinity = lambda _: {0, 1}\n"
        f"rows, _ = transcripts.tables({str(TRANSCRIPTS)!r}, tool_paths=True)\n"
        "print(len(rows) > 0, 'kit.transcripts.cache' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["True", "False"]


def test_content_check_sees_a_same_size_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"x" * 10_000)
    before = cache.file_key(path)
    path.write_bytes(b"y" + b"x" * 9_999)
    after = cache.file_key(path)
    assert before[0] == after[0] and before[-1] != after[-1]


@pytest.mark.parametrize("cores", [2, 3])
def test_parallel_read_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    """Files taken one at a time by each process (with two workers, their files interleave in the segment)."""
    folder = history(tmp_path)
    want = cold(folder)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: set(range(cores)))
    same(transcripts.tables(folder), want)  # cache=None: processes, nothing kept
    same(transcripts.tables(folder, cache=tmp_path / "cache"), want)


def test_every_process_takes_files_each_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With each file slow to read, all three processes take some (two workers from the front, this process
    from the back); every file is read once, and the tables are those of a read in one process."""
    folder = history(tmp_path)
    want = cold(folder)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: {0, 1, 2})
    real, shared = parallel.read_one, parallel.shared_work

    def slow(*args):
        time.sleep(0.05)  # longer than a worker takes to start
        return real(*args)

    order: list[str] = []
    taken: list[list[str]] = []

    def spy(items, *args):
        results = shared(items, *args)
        order.extend(path for _, path, _ in items)
        taken.extend([meta["path"] for meta in metas] for _, _, metas in results)
        return results

    monkeypatch.setattr(parallel, "read_one", slow)  # forked workers inherit it
    monkeypatch.setattr(parallel, "shared_work", spy)
    same(transcripts.tables(folder), want)
    assert len(taken) == 3 and all(taken)
    assert sorted(path for paths in taken for path in paths) == sorted(order)
    assert all(paths == sorted(paths, key=order.index) for paths in taken)  # each in file order
    assert taken[-1] == order[-len(taken[-1]) :]  # this process's, from the back


def bumped_at(blob: bytes, field: bytes, start: int) -> bytes:
    """``blob`` with the first character of the first ``field`` string value from ``start`` changed."""
    i = blob.index(b'"' + field + b'":"', start) + len(field) + 4
    return blob[:i] + (b"0" if blob[i : i + 1] != b"0" else b"1") + blob[i + 1 :]


def test_copies_found_as_without_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache finds copies by its content checks (first and last blocks) where a plain read hashes first
    blocks: same-size files that differ only in the middle, only at the end or only at the start, and a
    true copy, are told apart the same way, through the processes too."""
    folder = tmp_path / "h"
    folder.mkdir()
    blob = (TRANSCRIPTS / SESSION).read_bytes() * 4  # longer than the 64 KB first block
    variants = {
        "original": blob,
        "copy": blob,
        "middle": bumped_at(blob, b"uuid", len(blob) // 2),
        "end": bumped_at(blob, b"uuid", len(blob) - 300),
        "start": bumped_at(blob, b"messageId", 0),
    }
    for name, content in variants.items():
        (folder / f"{name}.jsonl").write_bytes(content)
    assert len({len(c) for c in variants.values()}) == 1 and len(set(variants.values())) == 4
    assert len(blob) // 2 > 64 << 10 and len(blob) - 300 > len(blob) - 1024
    want = cold(folder)
    duplicate = f"duplicate of {folder / 'copy.jsonl'} (same content); counted once"
    assert [i["reason"] for i in want[0].attrs["issues"]].count(duplicate) == 1
    same(transcripts.tables(folder, cache=tmp_path / "cache"), want)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: {0, 1})
    same(transcripts.tables(folder), want)


def test_strict_raises_from_the_cache_too(tmp_path: Path) -> None:
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "bad.jsonl").write_bytes((TRANSCRIPTS / SESSION).read_bytes() + b"{not json\n")
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
    shutil.copy(TRANSCRIPTS / SESSION, folder / "again.jsonl")  # a second pass: two segments, merged into one
    with open(folder / "again.jsonl", "ab") as handle:
        handle.write(b"\n")
    want = cold(folder)
    same(transcripts.tables(folder, cache=store), want)
    cache._settle(store.resolve())  # the files are written by a thread
    assert len({p.name.split(".")[0] for p in store.glob("seg-*")}) == 1
    cache._STORES.clear()
    same(transcripts.tables(folder, cache=store), want)


ROLLOUT = "codex-rollout_yepanywhere_codemode_0.154.0.jsonl"
EXEC_ROLLOUT = "codex-rollout_agent-history_codex_exec_0.135.0.jsonl"
GROWN = (SESSION, "claude-session_ccb_harbor_paired.jsonl", ROLLOUT, EXEC_ROLLOUT)


def halves(name: str) -> tuple[bytes, bytes]:
    """A fixture cut after the line in its middle: what a running session had written, and what came next."""
    lines = (TRANSCRIPTS / name).read_bytes().splitlines(keepends=True)
    return b"".join(lines[: len(lines) // 2]), b"".join(lines[len(lines) // 2 :])


def bumped(blob: bytes) -> bytes:
    """``blob`` with the first output_tokens count's first digit changed: same size, other numbers."""
    i = blob.index(b'"output_tokens":') + len(b'"output_tokens":')
    return blob[:i] + (b"1" if blob[i : i + 1] != b"1" else b"2") + blob[i + 1 :]


def both(folder: Path, tools: bool, cache_folder: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``tables``, or ``read`` with an empty tool frame in its place (what ``same`` compares)."""
    if tools:
        return transcripts.tables(folder, cache=cache_folder)
    return transcripts.read(folder, cache=cache_folder), pd.DataFrame()


@pytest.mark.parametrize("tools", [True, False], ids=["tables", "read"])
def test_grown_files_read_from_their_kept_state_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tools) -> None:
    """Each fixture written in two halves: the second read takes only the appended lines, from the state the
    first left (both formats), and every row, tool result and attr equals a cold read of the whole files."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    folder.mkdir()
    for name in GROWN:
        (folder / name).write_bytes(halves(name)[0])
    shutil.copy(TRANSCRIPTS / "claude-session_spotter_subagent_acompact.jsonl", folder / "agent-acompact-x.jsonl")
    both(folder, tools, store)
    assert all(cache.store(store).pieces[str(folder / name)].state is not None for name in GROWN)
    for name in GROWN:
        with open(folder / name, "ab") as handle:  # a bad line in one tail: read line by line, reported in place
            handle.write(halves(name)[1] + (b"{not json\n" if name == SESSION else b""))
    resumed = {}
    real = parallel.read_one

    def spy(fmt: str, path: Path, tools: bool, resume: bytes | None, keep: bool):
        resumed[path.name] = resume is not None
        return real(fmt, path, tools, resume, keep)

    monkeypatch.setattr(parallel, "read_one", spy)
    want = both(folder, tools)
    resumed.clear()
    same(both(folder, tools, store), want)
    assert resumed == dict.fromkeys(GROWN, True)  # the grown files only, from their states
    cache._STORES.clear()
    same(both(folder, tools, store), want)


def head_read(tmp_path: Path) -> tuple[Path, Path, Path, bytes, bytes]:
    """A rollout's first half written and read through a cache: its folder, the cache, the file, both halves."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    folder.mkdir()
    head, tail = halves(ROLLOUT)
    path = folder / ROLLOUT
    path.write_bytes(head)
    transcripts.tables(folder, cache=store)
    return folder, store, path, head, tail


def test_a_grown_file_whose_head_changed_is_read_whole(tmp_path: Path) -> None:
    """Rewritten in place (same inode) with other bytes before the old end, then longer: not resumed."""
    folder, store, path, head, tail = head_read(tmp_path)
    with open(path, "r+b") as handle:  # in place: the inode stays
        handle.write(bumped(head) + tail)
    piece = cache.store(store).pieces[str(path)]
    assert cache._resumable(piece, "codex_rollout", path, cache.file_key(path), True) is None
    same(transcripts.tables(folder, cache=store), cold(folder))


def test_same_size_rewrite_and_partial_last_line(tmp_path: Path) -> None:
    """A file rewritten with the same size is read whole; a file whose last line was cut (a writer still at
    it) keeps no state, and once the line is finished and more appended, reads as the whole file does."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    folder.mkdir()
    head, tail = halves(SESSION)
    cut = len(head) + len(tail.splitlines(keepends=True)[0]) // 2
    whole = (TRANSCRIPTS / SESSION).read_bytes()
    partial, rewritten = folder / "partial.jsonl", folder / "rewritten.jsonl"
    partial.write_bytes(whole[:cut])
    rollout_head, rollout_tail = halves(ROLLOUT)
    rewritten.write_bytes(rollout_head)
    found = transcripts.tables(folder, cache=store)
    assert [i["reason"].split(" (")[0] for i in found[0].attrs["issues"]] == ["truncated last line"]
    assert cache.store(store).pieces[str(partial)].state is None  # a cut line: nothing to resume from
    assert cache.store(store).pieces[str(rewritten)].state is not None
    stat = rewritten.stat()
    rewritten.write_bytes(bumped(rollout_head))
    os.utime(rewritten, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    same(transcripts.tables(folder, cache=store), cold(folder))
    with open(partial, "ab") as handle:
        handle.write(whole[cut:])
    with open(rewritten, "ab") as handle:
        handle.write(rollout_tail)
    same(transcripts.tables(folder, cache=store), cold(folder))
    assert cache.store(store).pieces[str(partial)].state is not None  # whole lines now: resumable next time
    cache._STORES.clear()
    same(transcripts.tables(folder, cache=store), cold(folder))


def test_a_state_resumed_in_another_process_counts_a_repeated_block_once(tmp_path: Path) -> None:
    """A response cut by the first read whose thinking block comes again after it: the state keeps the
    block's key, and the read that resumes it in another process (another ``hash`` seed) knows it."""
    raw = (TRANSCRIPTS / SESSION).read_bytes().splitlines(keepends=True)
    folder, store = tmp_path / "h", tmp_path / "cache"
    folder.mkdir()
    path = folder / "t.jsonl"
    path.write_bytes(b"".join(raw[:29]))  # up to a tool_use line of the response whose thinking is line 28
    script = "import sys; from kit import transcripts as t; print(t.read(*sys.argv[1:]).output_chars.tolist())"

    def read_in(seed: str) -> str:
        env = os.environ | {"PYTHONHASHSEED": seed}
        argv = [sys.executable, "-c", script, str(folder), "auto", "False", str(store)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    read_in("1")
    with open(path, "ab") as handle:
        handle.write(b"".join([raw[27], *raw[29:]]))  # the thinking line again, then the rest
    want = transcripts.read(path).output_chars.tolist()
    assert want == transcripts.read(TRANSCRIPTS / SESSION).output_chars.tolist()
    assert read_in("2") == str(want)


def test_gather_by_slices_and_by_take_agree() -> None:
    """``_take`` makes a string column of slices when the rows fall in few runs, else takes them: both equal
    ``pd.concat`` and ``DataFrame.take``, on frames already made of several Arrow chunks."""
    import numpy as np

    rows = [{"source_path": f"p{i % 7}", "cycle": i, "model": None if i % 3 else "m"} for i in range(300)]
    chunked = pd.concat([schema.requests_frame(rows[:50]), schema.requests_frame(rows[50:120])], ignore_index=True)
    frames = [chunked, schema.requests_frame(rows[120:])]
    segments = {str(n): cache.Segment(f, parallel.tool_frame([])) for n, f in enumerate(frames)}
    arrays = [segments[str(n)].arrays("requests") for n in range(len(frames))]
    few = np.concatenate([np.arange(0, 40), np.arange(200, 260), np.arange(45, 130)])
    many = np.random.default_rng(0).permutation(300)[:200]
    for where in (few, many):
        want = pd.concat(frames, ignore_index=True).take(where).reset_index(drop=True)
        pd.testing.assert_frame_equal(cache._take(arrays, frames, where), want)
    assert cache._runs(few) is not None and cache._runs(many) is None


def test_unchanged_call_returns_equal_tables_and_later_calls_leave_earlier_frames(tmp_path: Path) -> None:
    """An unchanged second call gives equal tables; a frame handed out is not changed by what its holder
    does to the next one, nor by a later call that grew a file (the gathers reuse the segments' arrays)."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    folder.mkdir()
    head, tail = halves(ROLLOUT)
    (folder / ROLLOUT).write_bytes(head)
    shutil.copy(TRANSCRIPTS / SESSION, folder / SESSION)
    first = transcripts.tables(folder, cache=store)
    kept = (first[0].copy(deep=True), first[1].copy(deep=True))
    second = transcripts.tables(folder, cache=store)
    same(second, first)
    second[0].loc[:, "input_tokens"] = 0
    second[0]["model"] = "changed"
    same(first, kept)
    with open(folder / ROLLOUT, "ab") as handle:
        handle.write(tail)
    third = transcripts.tables(folder, cache=store)
    third[0].loc[:, "source_path"] = "x"
    same(first, kept)
    same(transcripts.tables(folder, cache=store), cold(folder))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_left_as_it_was(tmp_path: Path, enabled: bool) -> None:
    """A read pauses the collector (``gc_paused``) and leaves it on or off as the caller had it, also on error."""
    import gc

    folder = history(tmp_path)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        transcripts.read(folder, cache=tmp_path / "cache")
        transcripts.tables(folder)
        assert gc.isenabled() is enabled
        with pytest.raises(transcripts.TranscriptError):
            transcripts.read(folder / "missing.jsonl", strict=True)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_settled_files_are_known_by_their_stat_and_a_rewrite_still_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose content check was made well after its last change is later checked by ``stat`` alone
    (no open); one changed just before its check is not. A same-size rewrite with the mtime put back
    still changes the change time, so a settled file rewritten is read again and agrees with a cold read."""
    folder, store = history(tmp_path), tmp_path / "cache"
    transcripts.tables(folder, cache=store)
    assert not cache.store(store).settled, "files written just now are not settled"
    monkeypatch.setattr(_base, "SETTLED_NS", -(10**15))  # as if every file had been written long ago
    transcripts.tables(folder, cache=store)
    assert len(cache.store(store).settled) == len(list(folder.iterdir()))
    opened: list[Path] = []
    real = cache.file_key

    def recorded(path: Path) -> cache.Key:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(cache, "file_key", recorded)
    before = transcripts.tables(folder, cache=store)
    same(before, cold(folder))
    assert opened == []
    session = folder / SESSION
    stat = session.stat()
    session.write_bytes(bumped(session.read_bytes()))
    os.utime(session, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    want = cold(folder)
    assert session.stat().st_size == stat.st_size
    same(transcripts.tables(folder, cache=store), want)
    assert opened == [str(session)]


def rollouts(folder: Path) -> dict[str, list[bytes]]:
    """A Codex history: prefixes of the rollout fixture of different lengths (distinct files), and the exec one."""
    lines = (TRANSCRIPTS / ROLLOUT).read_bytes().splitlines(keepends=True)
    wanted = {f"{name}.jsonl": lines[: 8 + 5 * i] for i, name in enumerate("bdfhjl")}
    wanted["n.jsonl"] = (TRANSCRIPTS / EXEC_ROLLOUT).read_bytes().splitlines(keepends=True)
    folder.mkdir()
    for name, kept in wanted.items():
        (folder / name).write_bytes(b"".join(kept))
    return {name: lines for name in wanted}


@pytest.mark.parametrize("tools", [True, False], ids=["tables", "read"])
def test_one_format_is_spliced_from_the_last_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tools) -> None:
    """Files of one format without a step across files: each call after the first takes the unchanged files'
    rows from the last call's tables and the others' from their segments (``_spliced``), and equals a cold
    read, call after call, with files grown in the middle, added before, between and after, rewritten,
    removed, and string columns made one chunk again (``MAX_CHUNKS``)."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    whole = rollouts(folder)
    monkeypatch.setattr(cache, "MAX_CHUNKS", 6)
    spliced: list[int] = []
    real = cache._spliced_frame

    def spy(sources, part, runs):
        if part == "requests":
            spliced.append(len(sources))
        return real(sources, part, runs)

    monkeypatch.setattr(cache, "_spliced_frame", spy)
    same(both(folder, tools, store), both(folder, tools))

    def grow(name: str, more: int) -> int:
        path = folder / name
        have = len(path.read_bytes().splitlines())
        with open(path, "ab") as handle:
            return handle.write(b"".join(whole.get(name, whole["b.jsonl"])[have : have + more]))

    steps = [
        lambda: (grow("d.jsonl", 4), grow("h.jsonl", 7)),
        lambda: (folder / "a.jsonl").write_bytes(b"".join(whole["b.jsonl"][:20])),
        lambda: (folder / "g.jsonl").write_bytes(b"".join(whole["b.jsonl"][:25])),
        lambda: (folder / "z.jsonl").write_bytes(b"".join(whole["b.jsonl"][:31])),
        lambda: (grow("b.jsonl", 3), grow("l.jsonl", 40)),
        lambda: (folder / "f.jsonl").write_bytes(bumped((folder / "f.jsonl").read_bytes())),
        lambda: (folder / "j.jsonl").unlink(),
        lambda: (grow("a.jsonl", 2), grow("z.jsonl", 2), (folder / "c.jsonl").write_bytes(b"")),
    ]
    for step in steps:
        step()
        spliced.clear()
        got = both(folder, tools, store)
        same(got, both(folder, tools))
        assert spliced == [2], "the unchanged files' rows come from the last call's tables"
        assert got[0]["source_path"].array.__arrow_array__().num_chunks <= 6
        assert cache.store(store).layout is not None
    cache.store(store).memo = None  # no file changed, and the last tables are not handed back whole
    same(both(folder, tools, store), both(folder, tools))
    assert spliced == [2, 2]
    cache._STORES.clear()
    same(both(folder, tools, store), both(folder, tools))  # a new process: gathered whole, then spliced again
    assert spliced == [2, 2, 1]
    grow("d.jsonl", 2)
    same(both(folder, tools, store), both(folder, tools))
    assert spliced == [2, 2, 1, 2]


def test_attrs_keys_a_reader_adds_are_gathered_in_the_order_first_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader whose files give attrs keys besides those every reader starts with: not spliced (their order
    is the order first seen, ``_joined``); the tables equal a cold read's, key order included."""
    folder, store = tmp_path / "h", tmp_path / "cache"
    rollouts(folder)
    from kit.transcripts import codex_rollout

    finish = codex_rollout._File.finish

    def extra(state):
        out = finish(state)
        if state.path.name in ("h.jsonl", "d.jsonl"):
            out.attrs[f"extra_{state.path.name[0]}"] = [state.path.name]
        return out

    monkeypatch.setattr(codex_rollout._File, "finish", extra)
    spliced: list[object] = []
    real = cache._spliced

    def recorded(*args: Any) -> object:
        spliced.append(real(*args))
        return spliced[-1]

    monkeypatch.setattr(cache, "_spliced", recorded)
    want = transcripts.tables(folder)
    assert list(want[0].attrs)[-3:] == ["extra_d", "extra_h", "issues"]
    got = transcripts.tables(folder, cache=store)
    same(got, want)
    assert list(got[0].attrs) == list(want[0].attrs) and spliced == [None]


def test_an_empty_file_given_twice_is_assembled_as_without_the_cache(tmp_path: Path) -> None:
    """An empty file has no content to be a copy of, so given twice it is read twice (``group_files``): the
    tables are then not spliced (one place per file) and equal a read without the cache."""
    folder = tmp_path / "h"
    rollouts(folder)
    (folder / "e.jsonl").write_bytes(b"")
    paths = [folder / "e.jsonl", folder / "b.jsonl", folder / "e.jsonl"]
    same(transcripts.tables(paths, cache=tmp_path / "cache"), transcripts.tables(paths))
    alone = [folder / "e.jsonl"]  # no tool rows: the empty tool table, made once, is handed back
    want = transcripts.tables(alone)
    assert len(want[1]) == 0
    same(transcripts.tables(alone, cache=tmp_path / "cache"), want)
    same(transcripts.tables(alone, cache=tmp_path / "cache"), want)


def test_split_cuts_runs_where_a_source_ends() -> None:
    assert cache._split([(0, 3), (4, 6)], [2, 0, 5, 3]) == [(0, 0, 2), (2, 0, 1), (2, 2, 5), (3, 0, 3)]
    assert cache._split([], [4]) == []


def test_files_that_cannot_be_read_are_reported_as_without_the_cache(tmp_path: Path) -> None:
    """A missing file among those given: the cache knows no size or format for it, so ``group_files`` asks the
    file system, and reports it in its place as a read without the cache does."""
    folder = tmp_path / "h"
    rollouts(folder)
    paths = [folder / "b.jsonl", folder / "missing.jsonl", folder / "d.jsonl", folder / "b.jsonl"]
    want = transcripts.tables(paths)
    duplicate = f"duplicate of {paths[0]} (same content); counted once"
    assert [i["reason"] for i in want[0].attrs["issues"]][1:] == [duplicate]
    assert want[0].attrs["issues"][0]["reason"].startswith("cannot read")
    same(transcripts.tables(paths, cache=tmp_path / "cache"), want)
    same(transcripts.tables(paths, cache=tmp_path / "cache"), want)


def test_cut_by_blocks_agrees_with_concat_and_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_cut`` with the frames' stacked columns (``_stacked``: 2-D values and masks, string tables) equals
    ``pd.concat`` and ``DataFrame.take``, with runs across frames, over frames of several Arrow chunks, and
    with string columns re-joined past ``MAX_CHUNKS``; the blocks it returns are the new frame's columns."""
    import numpy as np

    rows = [
        {"source_path": f"p{i % 7}", "cycle": i, "model": None if i % 3 else "m", "wall_s": i / 4, "sidechain": i % 2}
        for i in range(300)
    ]
    chunked = pd.concat([schema.requests_frame(rows[:50]), schema.requests_frame(rows[50:120])], ignore_index=True)
    frames = [chunked, schema.requests_frame(rows[120:])]
    segments = [cache.Segment(f, parallel.tool_frame([])) for f in frames]
    arrays = [s.arrays("requests") for s in segments]
    blocks = [s.blocks("requests") for s in segments]
    runs = [(0, 40), (200, 60), (45, 85), (290, 10), (130, 5)]
    where = np.concatenate([np.arange(first, first + n) for first, n in runs])
    want = pd.concat(frames, ignore_index=True).take(where).reset_index(drop=True)
    for limit in (128, 3):
        monkeypatch.setattr(cache, "MAX_CHUNKS", limit)
        got, made = cache._cut(arrays, frames, runs, blocks)
        pd.testing.assert_frame_equal(got, want)
        assert {kind[0] for kind in made} == {type(got[c].array) for c in ("cycle", "wall_s", "sidechain", "model")}
        for names, values, _ in made.values():
            for i, name in enumerate(names):
                column = got[name].array
                if isinstance(values, np.ndarray):
                    assert np.shares_memory(column._data, values[i])
                else:
                    assert column.__arrow_array__().num_chunks <= limit
                    assert column.__arrow_array__().equals(values.column(i))
        again = cache._cut([cache.Segment(got, parallel.tool_frame([])).arrays("requests")], [got], [(5, 100)], [made])[
            0
        ]
        pd.testing.assert_frame_equal(again, want.iloc[5:105].reset_index(drop=True))


def test_settled_folders_are_listed_from_their_last_listing_while_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_files`` keeps a settled folder's listing while its ``stat`` is unchanged: a file added, removed or
    renamed (even with the folder's times put back) is seen; a folder holding a symlink is listed anew."""
    folder = tmp_path / "h"
    rollouts(folder)
    day = folder / "2026" / "06"
    day.mkdir(parents=True)
    (day / "x.jsonl").write_bytes((folder / "b.jsonl").read_bytes())
    monkeypatch.setattr(transcripts, "_LISTINGS", {})
    monkeypatch.setattr(_base, "SETTLED_NS", -(10**15))  # every folder settled

    def listed() -> list[Path]:
        found = transcripts._files(folder)
        with monkeypatch.context() as fresh:  # the same folder listed with nothing kept
            fresh.setattr(transcripts, "_LISTINGS", {})
            fresh.setattr(_base, "SETTLED_NS", 10**18)
            assert found == transcripts._files(folder)
        return found

    assert len(listed()) == 8 and str(day) in transcripts._LISTINGS
    (day / "y.jsonl").write_bytes(b"")
    assert day / "y.jsonl" in listed()
    stat = day.stat()
    (day / "y.jsonl").rename(day / "z.jsonl")
    os.utime(day, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert day / "z.jsonl" in listed() and day / "y.jsonl" not in listed()
    (day / "x.jsonl").unlink()
    assert day / "x.jsonl" not in listed()
    (day / "link.jsonl").symlink_to(folder / "d.jsonl")
    assert day / "link.jsonl" in listed() and str(day) not in transcripts._LISTINGS
    (day / "link.jsonl").unlink()
    (day / "link.jsonl").mkdir()  # the name now a folder: not a transcript
    assert day / "link.jsonl" not in listed()
    monkeypatch.setattr(_base, "SETTLED_NS", 10**18)  # nothing settled: nothing kept
    transcripts._LISTINGS.clear()
    listed()
    assert not transcripts._LISTINGS


def test_a_grown_files_head_is_checked_block_by_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_resumable`` checks the bytes read before in blocks (``CRC_BLOCK``, here far smaller than the file):
    an unchanged head resumes, one changed byte in any block, or a file cut short, does not."""
    monkeypatch.setattr(cache, "CRC_BLOCK", 97)
    folder, store, path, head, tail = head_read(tmp_path)
    piece = cache.store(store).pieces[str(path)]
    assert piece.at is not None and piece.at[0] == len(head) > 10 * 97
    with open(path, "ab") as handle:
        handle.write(tail)
    assert cache._resumable(piece, "codex_rollout", path, cache.file_key(path), True) == (piece.state, len(head))
    same(transcripts.tables(folder, cache=store), cold(folder))
    for at in (0, 5 * 97 + 3, len(head) - 1):
        blob = bytearray(head + tail)
        blob[at] ^= 1
        with open(path, "r+b") as handle:  # in place: the inode stays
            handle.write(blob)
        assert cache._resumable(piece, "codex_rollout", path, cache.file_key(path), True) is None
    with open(path, "r+b") as handle:
        handle.truncate(len(head) - 5)
    key = cache.file_key(path)
    assert cache._resumable(piece, "codex_rollout", path, (len(head) + 1, *key[1:]), True) is None


def test_placed_makes_runs_per_part_from_the_last_call_and_the_fresh_files() -> None:
    """``_placed``: three files of the last call (counts per part, a row each) and two fresh ones; runs never
    cross from one part to the next, even where one part's rows end where the next part's begin."""
    import numpy as np

    at = np.array([[0, 2, 5], [0, 11, 12]])
    counts = np.array([[2, 3, 1], [0, 1, 4]])
    old = np.array([0, 1, -1, 2, -1])  # the last call's files 0 and 1, a fresh one, file 2, another fresh one
    added = np.array([[4, 1], [2, 0]])
    runs, first, count = cache._placed(old, at, counts, np.array([6, 16]), added)
    assert runs == [[(0, 5), (6, 4), (5, 1), (10, 1)], [(11, 1), (16, 2), (12, 4)]]  # (10, 1) then (11, 1)
    assert count.tolist() == [[2, 3, 4, 1, 1], [0, 1, 2, 4, 0]]
    assert first.tolist() == [[0, 2, 5, 9, 10], [0, 0, 1, 3, 7]]
    none = np.zeros((2, 0), dtype=np.int64)
    runs, _, _ = cache._placed(np.array([-1, -1]), none, none, np.zeros(2, dtype=np.int64), np.array([[0, 3], [0, 0]]))
    assert runs == [[(0, 3)], []]


@pytest.mark.parametrize("module", ["framing.py", "tokens.py", "schema.py", "transcripts/_claude.py"])
def test_a_change_to_what_the_readers_use_retires_the_cache(monkeypatch, module):
    """``VERSION`` hashes the readers and what they take counts from: a row pickled by other code is read again."""
    target = Path(cache.__file__).resolve().parent.parent / module
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: real(self) + (b"# changed" if self == target else b""))
    assert cache._version() != cache.VERSION
