"""Files read one by one by their readers, in this process or in worker processes: the parse cache's reading.

A file is read alone (``read_one``): its rows as frames, its reader's issues and, for the parse cache
(``kit.transcripts.cache``), the ids of its step across files and its reader's state at its end (``Resume``),
so that what needs several files at once is done once every file is read. Processes pay for themselves only
on many bytes (``workers``); a read below that, or on one core, is done in the caller's process, and a plain
read (``kit.transcripts.read`` without a cache folder) of that size does not come here at all.
"""

from __future__ import annotations

import functools
import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from kit import schema
from kit.transcripts import readers
from kit.transcripts._base import Issues, Parsed

PARALLEL_MIN_BYTES = 32 << 20  # below this, starting processes costs more than it saves


def encode_hook(value: object) -> object:
    """What MessagePack lacks of a reader's state or a piece: paths, as text."""
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(type(value))


def decode_hook(kind: type, value: object) -> object:
    """A path from its text; a field typed ``object`` (a value as the transcript gave it) as it decoded."""
    if kind is object:
        return value
    if kind is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(kind)


def tool_frame(rows: list[dict]) -> pd.DataFrame:
    if not rows:  # ``read`` keeps no tool rows: the empty frame is made once (bench/parse.md)
        return empty_tools().copy(deep=False)
    return schema.frame(rows, schema.TOOL_RESULT_COLUMNS, schema.TOOL_RESULT_DTYPES)


def requests_frame(rows: list[dict]) -> pd.DataFrame:
    """``schema.requests_frame``; the empty one made once (a warm call with no file changed gathers no rows)."""
    if not rows:
        return _empty_requests().copy(deep=False)
    return schema.requests_frame(rows)


@functools.cache
def _empty_requests() -> pd.DataFrame:
    return schema.requests_frame([])


@functools.cache
def empty_tools() -> pd.DataFrame:
    return schema.frame([], schema.TOOL_RESULT_COLUMNS, schema.TOOL_RESULT_DTYPES)


def read_one(
    fmt: str, path: Path, tools: bool, resume: bytes | None, keep: bool
) -> tuple[Parsed, Any, list[dict], bytes | None, tuple[int, int] | None]:
    """One file read alone by its reader: its rows, the ids its step across files needs (``Resume.finish``; else
    None), its issues, and where kept (``keep``, a reader with a ``Resume``, the file ending on a whole line)
    the reader's state at its end with the bytes read and their CRC. ``resume``: such a state, from which only
    the lines after it are read (a grown file whose head the parse cache found unchanged)."""
    reader = readers.reader(fmt)
    steps = reader.resume
    if steps is None:
        issues = Issues()
        return reader.read([path], issues, tools), None, issues.items, None, None
    state = _resumed(steps.state, resume) if resume is not None else None
    if state is None:
        state = steps.start(path, Issues(), tools, crc=keep)
    steps.scan(state)
    snapshot, at = None, None
    if keep and state.at.resumable:
        with suppress(TypeError, ValueError, msgspec.EncodeError):  # an int beyond 64 bits: no state, read whole
            snapshot, at = msgspec.msgpack.encode(state, enc_hook=encode_hook), (state.at.offset, state.at.crc)
    parsed, ids = steps.finish(state)
    return parsed, ids, state.issues.items, snapshot, at


def _resumed(kind: type, data: bytes) -> Any:
    """A kept reader state decoded into its type (MessagePack, by the reader's ``STATE``: no pickle); None, for the
    file to be read whole, if it does not decode so (its bytes matched their digest: other reader code)."""
    try:
        return msgspec.msgpack.decode(data, type=kind, dec_hook=decode_hook)
    except msgspec.DecodeError:
        return None


Work = tuple[str, str, bytes | None]  # format, path, state to resume from (``read_one``)
Read = tuple[pd.DataFrame, pd.DataFrame, list[dict]]  # files' rows as frames, and each file's meta (``_frames``)


def read_chunk(items: list[Work], tools: bool, keep: bool) -> Read:
    """Files read one by one, in order, into one request frame and one tool frame (``_frames``)."""
    return _frames([(work, read_one(work[0], Path(work[1]), tools, work[2], keep)) for work in items])


def _frames(done: list[tuple[Work, tuple]]) -> Read:
    """Files' ``read_one`` results, in the order given, as one request frame and one tool frame, with each
    file's place in them: frames travel back from a worker process far faster than row dicts."""
    rows: list[dict] = []
    tool_rows: list[dict] = []
    metas = []
    for (fmt, path, _), (parsed, ids, issues, state, at) in done:
        meta = {"path": path, "format": fmt, "attrs": parsed.attrs, "issues": issues, "ids": ids}
        meta |= {"state": state, "at": at}
        meta |= {"rows": (len(rows), len(rows) + len(parsed.rows))}
        meta |= {"tool_rows": (len(tool_rows), len(tool_rows) + len(parsed.tools))}
        rows += parsed.rows
        tool_rows += parsed.tools
        metas.append(meta)
    return schema.requests_frame(rows), tool_frame(tool_rows), metas


def workers(nbytes: int) -> int:
    """Processes worth starting for ``nbytes`` of transcripts: 1 on one core or for a small read."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 1 if nbytes < PARALLEL_MIN_BYTES else max(1, cores)


_SHARED: tuple[list[Work], Any] | None = None  # in a worker: the read's work and its bounds (``shared_work``)


def _share(items: list[Work], bounds: Any) -> None:
    """A worker's initializer: keep the work and bounds it inherited when forked (nothing is pickled)."""
    global _SHARED
    _SHARED = items, bounds


def _claim(bounds: Any, front: bool) -> int | None:
    """The index of the next file to read, from the front or the back of what is left; None when nothing is."""
    with bounds.get_lock():
        ends = bounds.get_obj()
        if ends[0] >= ends[1]:
            return None
        if front:
            ends[0] += 1
            return int(ends[0] - 1)
        ends[1] -= 1
        return int(ends[1])


def _claimed(items: list[Work], bounds: Any, front: bool, tools: bool, keep: bool) -> Read:
    """Files taken one at a time (``_claim``) and read until none is left, as one result in file order."""
    done = []
    while (index := _claim(bounds, front)) is not None:
        fmt, path, resume = items[index]
        done.append((index, items[index], read_one(fmt, Path(path), tools, resume, keep)))
    done.sort(key=lambda found: found[0])
    return _frames([(work, result) for _, work, result in done])


def _worker_read(tools: bool, keep: bool) -> Read:
    """``_claimed`` from the front, in a worker process (its work is ``_SHARED``)."""
    assert _SHARED is not None, "run by a worker that _share set up"
    return _claimed(*_SHARED, front=True, tools=tools, keep=keep)


def shared_work(items: list[Work], tools: bool, keep: bool, n: int) -> list[Read]:
    """``items`` read by ``n - 1`` worker processes and this one, each taking the next file as it is free.

    Work cut in advance into chunks of equal bytes came out uneven: the cost of a byte differs between
    files and between processes (a forked worker runs slower than this one), and the executor hands a
    worker its next chunk before it is free, out of this process's reach (1.29 s against 0.82 s on 260 MB
    of sessions). So the workers take files from the front of a shared pair of bounds and this process
    from the back, one at a time, until they meet: the processes finish within a file of each other. With
    one worker the rows come back in file order (its files, then this process's); with more, the
    workers' files interleave, which the assembly's gather puts in order. Workers are forked: they start
    at once with the kit imported (a spawned one would import pandas again) and inherit the work.
    """
    import multiprocessing  # here: a read in one process (most reads) does not load the process machinery
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    bounds = context.Array("q", [0, len(items)])
    with ProcessPoolExecutor(n - 1, context, initializer=_share, initargs=(items, bounds)) as pool:
        futures = [pool.submit(_worker_read, tools, keep) for _ in range(n - 1)]
        mine = _claimed(items, bounds, front=False, tools=tools, keep=keep)
        return [*(future.result() for future in futures), mine]


def read_groups(
    groups: dict[str, list[Path]], order: dict[str, int], issues: Issues, tools: bool, n: int
) -> tuple[pd.DataFrame, pd.DataFrame, list[str | None], dict[str, list]]:
    """The files of ``groups`` (by format, as ``kit.transcripts`` groups them; ``order``: each file's place) read
    over ``n`` processes without a parse cache: the request rows in file order, the tool rows in group order with
    each one's file (None where it belongs to no one file), and the attrs, as a read in one process gives them.

    Each file is read alone in some process (``shared_work``), then each format's step across files is applied
    on the ids the files gave (``Reader.join``); a format read across files (``Reader.across_files``) is read
    here, whole. The rows are taken from the processes' frames in one gather per table (``_Gathered``).
    """
    work: list[Work] = [
        (fmt, str(p), None) for fmt, group in groups.items() if not readers.reader(fmt).across_files for p in group
    ]
    results = shared_work(work, tools, False, n) if len(work) > 1 else [read_chunk(work, tools, False)]
    out = _Gathered(order, tools)
    metas = {}
    for req, tool, found in results:
        for meta in found:
            (a, b), (c, d) = meta["rows"], meta["tool_rows"]
            metas[meta["path"]] = meta | {
                "rows": (out.at + a, out.at + b),
                "tool_rows": (out.tool_at + c, out.tool_at + d),
            }
        out.frames(req, tool)
    cycles = pd.concat(out.requests)["cycle"].to_numpy(dtype="float64", na_value=-1) if out.at else np.array([])
    for fmt, group in groups.items():
        reader = readers.reader(fmt)
        if reader.across_files:
            out.across(reader.read(group, issues, tools), group)
            continue
        found = [metas[str(p)] for p in group]
        for meta in found:
            for item in meta["issues"]:
                issues.add(item["source_path"], item["source_line"], item["reason"])
        attrs = [meta["attrs"] for meta in found]
        dropped: list[set[int]] = [set()] * len(found)
        joined = Parsed()
        if reader.join is not None:
            counts = [meta["rows"][1] - meta["rows"][0] for meta in found]
            attrs, dropped, joined.attrs["repeats"] = reader.join([meta["ids"] for meta in found], attrs, counts)
        for path, meta, gone in zip(group, found, dropped, strict=True):
            out.file(str(path), meta, gone, cycles)
        for own in attrs:
            joined.extend(Parsed(attrs=own))
        out.attrs.extend(Parsed(attrs=joined.attrs))
    return out.tables()


@dataclass
class _Gathered:
    """What ``read_groups`` takes into the tables: the frames the rows come from (end to end), the positions of
    each file's rows in them (with the file's place), the tool rows' positions and files, and the attrs."""

    order: dict[str, int]
    tools: bool
    requests: list[pd.DataFrame] = field(default_factory=list)
    tool_frames: list[pd.DataFrame] = field(default_factory=list)
    rows: list[tuple[int, np.ndarray]] = field(default_factory=list)
    tool_rows: list[np.ndarray] = field(default_factory=list)
    paths: list[str | None] = field(default_factory=list)
    attrs: Parsed = field(default_factory=Parsed)
    at: int = 0
    tool_at: int = 0

    def frames(self, requests: pd.DataFrame, tools: pd.DataFrame) -> None:
        """A source of rows, after the others."""
        self.requests.append(requests)
        self.tool_frames.append(tools)
        self.at, self.tool_at = self.at + len(requests), self.tool_at + len(tools)

    def across(self, parsed: Parsed, group: list[Path]) -> None:
        """A format's files read across files, here: its rows by ``source_path``, its tool rows of no one file."""
        frame, tools = schema.requests_frame(parsed.rows), tool_frame(parsed.tools)
        files = frame["source_path"].to_numpy(dtype=object)
        self.rows += [(self.order[str(p)], self.at + np.flatnonzero(files == str(p))) for p in group]
        self.tool_rows.append(self.tool_at + np.arange(len(tools)))
        self.paths += [None] * len(tools)
        self.frames(frame, tools)
        self.attrs.extend(Parsed(attrs=parsed.attrs))

    def file(self, path: str, meta: dict, gone: set[int], cycles: np.ndarray) -> None:
        """A file read alone (its ``meta``, placed in the frames), less the responses ``gone`` (``Reader.join``)."""
        where, tool_where = np.arange(*meta["rows"]), np.arange(*meta["tool_rows"])
        if gone:
            where = where[~np.isin(cycles[where], list(gone))]
            tool_where = tool_where[[caller not in gone for caller in meta["ids"].callers]]
        self.rows.append((self.order[path], where))
        if self.tools:
            self.tool_rows.append(tool_where)
            self.paths += [path] * len(tool_where)

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame, list[str | None], dict[str, list]]:
        """The request rows in file order (stable: a file's rows stay in their order), the tool rows, their files
        and the attrs."""
        rows = [where for _, where in sorted(self.rows, key=lambda found: found[0])]
        requests = _taken(self.requests, rows, requests_frame)
        return requests, _taken(self.tool_frames, self.tool_rows, tool_frame), self.paths, self.attrs.attrs


def _taken(frames: list[pd.DataFrame], where: list[np.ndarray], empty: Any) -> pd.DataFrame:
    """The rows ``where`` (positions into ``frames`` end to end) as one frame; the canonical empty one if none."""
    frames = [frame for frame in frames if len(frame)]
    positions = np.concatenate(where) if where else np.array([], dtype=np.int64)
    if not frames or not len(positions):
        return empty([])
    return pd.concat(frames, ignore_index=True).take(positions).reset_index(drop=True)
