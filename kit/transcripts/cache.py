"""The incremental parse cache, and the parallel read of many files (``read(..., cache=PATH)``).

A history of many GB is read again every time a notebook cell or ``python -m kit history`` runs,
though almost all of it is unchanged. So each file's rows are kept, as the reader produced them and
before the deduplication across files, under a cache folder (segments and an index), keyed
by the file's path, size, modification and change times, inode and a content check (a CRC of its
first and last ``BLOCK`` bytes). A re-run reads only the files whose key changed: new files, rewritten
files, read whole, and grown files. The readers keep state across a file's lines (a response's later
lines, its paired usage line, the turn a prompt opens), so the Claude session and Codex rollout readers
hand back their state at the end of a file (``Reader.resume``), kept with its rows; a file that
only grew (same inode, the bytes read before unchanged: their CRC-32, ``_resumable``) has only its
appended lines read, from that state, and all its rows made again from it. What needs several
files at once — a Claude response repeated in another session file, the ``api-request`` lines
answered in another file, a Codex exec thread continued across files — is done when the tables are
assembled, by the readers' own functions, so the cache never changes a number
(tests/transcripts/test_parse_cache.py compares cached, partly cached, resumed and cold reads row for row). The
cache also stores whatever columns the readers produce; it is dropped whole when the reader code
changes (``VERSION``).

Within one process the cache stays in memory: a notebook that runs its cell again gets a copy of
the previous tables when no file changed, and the unchanged files' rows without reading its files
when some did. Files to read are split over processes when there is more than one core and enough
bytes to pay for them. Nothing is ever written next to the transcripts (raw artifacts are never
modified, docs/design.md).

Nothing in the folder can run code when read: rows are Arrow IPC files of plain columns (``_arrow``,
``_frame``: no pandas metadata, no extension type), the index, pieces and reader states MessagePack
decoded into their declared types (``_Index``, ``Piece``, the readers' ``STATE``); nothing is pickled.
The index keeps the SHA-256 of every segment file, checked before the file is decoded. As ssh does with
its own files, a folder or file not the user's own, or writable by group or others, is not used: not
read, not written. Whatever is not to be trusted (that, a digest that does not match, a file that does
not decode as written, an earlier version's pickles) means the files are read in full, and the user is
told once, by an issue naming the folder (``_tell``). The folder is made 0700, its files 0600.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import os
import stat
import threading
import time
import uuid
import warnings
import zlib
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; used for slices of string columns (_take)

from kit import schema
from kit.errors import InputError
from kit.transcripts import claude_session, parallel, readers
from kit.transcripts._base import Issues, Parsed, Shared, settled

BLOCK = 1 << 10  # the content check hashes this much of a file's start and end (see file_key)
CRC_BLOCK = 1 << 20  # a grown file's head is checked this much at a time (``_resumable``)
MAX_SEGMENTS = 16  # more segments than this are merged into one
MAX_RUNS = 64  # a gather of more runs of consecutive rows than this takes rows one by one (``_runs``)
MAX_CHUNKS = 128  # string columns gathered in more Arrow chunks than this are made one each (``_cut``)
INDEX = "index.msgpack"
NOTE_PREFIX = "parse cache: "  # how the issue that tells the user of a refused cache starts (``_tell``)
OLD = ("index.pkl", "seg-*.rows.pkl", "seg-*.pieces.pkl")  # an earlier format: pickles, never read
FOLDER_MODE, FILE_MODE = 0o700, 0o600  # the cache is the user's alone (``_own_folder``, ``_put``)
Key = tuple[int, int, int, int, int]
Blocks = dict[tuple[type, Any, Any], tuple[list[str], Any, Any]]  # columns stacked by kind (``_stacked``)
MASKED = (pd.arrays.IntegerArray, pd.arrays.FloatingArray, pd.arrays.BooleanArray)  # numpy values and a mask


def _version() -> str:
    """A hash of the reader code (with the framing and token counts the readers take from ``kit.framing`` and
    ``kit.tokens``), the canonical schema and the pandas and pyarrow versions: a cache written by other
    readers is not used, nor frames written by other libraries (``_write``)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"pandas {pd.__version__} pyarrow {pa.__version__}".encode())
    kit = here.parent
    for path in sorted([*here.glob("*.py"), kit / "schema.py", kit / "framing.py", kit / "tokens.py"]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


VERSION = _version()


def default_folder() -> Path:
    """The user cache folder: ``$XDG_CACHE_HOME/agent-ab-kit/parse``, else ``~/.cache/agent-ab-kit/parse``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agent-ab-kit" / "parse"


def file_key(path: str | Path) -> Key:
    """What must be unchanged for a file's cached rows to stand: size, mtime, ctime, inode, content check.

    The ctime and inode catch a file rewritten with the same size whose mtime was put back (``os.utime``
    cannot set ctime); the CRC of the first and last blocks catches a rewrite where those are not kept.
    The blocks are small (``BLOCK``) because the check runs on every file at every call of an unchanged
    history, where it is most of the time spent (bench/parse.md).
    Raises ``OSError`` like ``open``.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        crc = zlib.crc32(os.pread(fd, BLOCK, 0))
        if st.st_size > BLOCK:
            crc = zlib.crc32(os.pread(fd, BLOCK, st.st_size - BLOCK), crc)
    finally:
        os.close(fd)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, crc


@dataclass
class Piece:
    """One file's rows as read alone: where they sit in a segment, and what its reader said besides."""

    format: str
    key: Key
    tools: bool  # whether tool results were read (``tables``) or not (``read``)
    segment: str
    rows: tuple[int, int]
    tool_rows: tuple[int, int]
    attrs: dict[str, list]
    issues: list[dict]
    ids: claude_session.Ids | None = (
        None  # the ids of its reader's step across files (``Reader.join``: claude_session's)
    )
    state: bytes | None = None  # the reader's state at the end of the file (``Reader.resume``, MessagePack), else None
    at: tuple[int, int] | None = None  # with a state: the bytes it read and their CRC-32 (``_resumable``)


@dataclass
class Segment:
    """The request and tool-result rows of the files read in one pass."""

    requests: pd.DataFrame
    tools: pd.DataFrame
    _cycles: list | None = None
    _arrays: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = field(default_factory=dict)
    _blocks: dict[str, Blocks] = field(default_factory=dict)

    def arrays(self, part: str) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The column arrays of ``part`` (requests or tools) and their dtypes' names, taken out of the frame
        once: reaching a column through its frame costs about as much as gathering its rows (``_gather``)."""
        if part not in self._arrays:
            frame = getattr(self, part)
            found = {name: column.array for name, column in frame.items()}  # public API: pandas' internals change
            self._arrays[part] = found, tuple(str(array.dtype) for array in found.values())  # no dtypes Series
        return self._arrays[part]

    def blocks(self, part: str) -> Blocks:
        """The nullable columns of ``part`` stacked by type (``_stacked``), once per segment."""
        if part not in self._blocks:
            self._blocks[part] = _stacked(self.arrays(part)[0])
        return self._blocks[part]

    def cycles(self, rows: tuple[int, int]) -> list:
        """The ``cycle`` of the requests ``rows`` (a piece's), as plain ints; the column is taken out once."""
        if self._cycles is None:
            self._cycles = self.requests["cycle"].to_numpy(dtype=object, na_value=None).tolist()
        return self._cycles[rows[0] : rows[1]]


def _stacked(arrays: dict[str, Any]) -> Blocks:
    """The columns of ``arrays`` grouped by kind (array type, dtype, and the values' numpy or Arrow type), so
    that ``_cut`` slices each group at once: the nullable columns' (Int64, Float64, boolean) values and
    masks as 2-D arrays, a row a column, copied with one ``concatenate`` each where column by column it
    took two per column; the Arrow string columns as a table, sliced once per run where each column was sliced
    alone (both measured in bench/parse.md)."""
    groups: dict[tuple[type, Any, Any], list[str]] = {}
    for name, array in arrays.items():
        if isinstance(array, MASKED):
            groups.setdefault((type(array), array.dtype, array._data.dtype), []).append(name)
        elif isinstance(array, pd.arrays.ArrowStringArray):
            groups.setdefault((type(array), array.dtype, array.__arrow_array__().type), []).append(name)
    blocks: Blocks = {}
    for kind, names in groups.items():
        if kind[0] is pd.arrays.ArrowStringArray:
            blocks[kind] = names, pa.Table.from_arrays([arrays[n].__arrow_array__() for n in names], names=names), None
        else:
            blocks[kind] = names, np.stack([arrays[n]._data for n in names]), np.stack([arrays[n]._mask for n in names])
    return blocks


@dataclass
class Store:
    """A cache folder's index and segments, in memory; ``folder`` None keeps nothing (a plain parallel read)."""

    folder: Path | None
    pieces: dict[str, Piece] = field(default_factory=dict)
    segments: dict[str, Segment] = field(default_factory=dict)
    memo: tuple | None = None  # (signature, requests, tools, attrs, issues) of the last call
    pending: tuple | None = None  # (segments, pieces) to write
    settled: dict[str, Key] = field(default_factory=dict)  # keys whose stat alone now vouches for them (_keys)
    layout: _Layout | None = None  # where each file's rows are in the last tables of one format (``_spliced``)
    digests: dict[str, str] = field(default_factory=dict)  # each segment file's SHA-256 (``_Index``), as written

    def load(self) -> None:
        """Read the index and its segments. An outdated cache (other reader code) is ignored; one that cannot be
        trusted (a file not the user's own or writable by others, a digest that does not match, a file that does
        not decode as the kit writes it) is ignored and the user told (``_tell``); either is read again, and
        rewritten. An earlier version's pickles are removed unread (``_drop_old``)."""
        folder = self.folder
        if folder is None:
            return
        _drop_old(folder)
        try:
            index = _decoded(_read_own(folder / INDEX), _Index, INDEX)
            if index.version != VERSION:
                return
            names = set(index.live.values())
            segments = {name: _read_segment(folder, name, index.digests) for name in names}
            kept = {name: _read_pieces(folder, name, index.digests) for name in names}
            pieces = {path: kept[name][path] for path, name in index.live.items()}
        except FileNotFoundError:  # no cache yet, or another process's write removed a segment since
            return
        except (_Refused, KeyError) as exc:  # KeyError: the index names a file or piece its segments lack
            _tell(folder, str(exc) if isinstance(exc, _Refused) else f"{INDEX} and its segments disagree")
            return
        self.pieces, self.segments = pieces, segments
        self.digests = {part: index.digests[part] for name in names for part in _files(name)}

    def add(self, name: str, segment: Segment, pieces: dict[str, Piece]) -> None:
        """Take in a pass's rows, let go of segments no piece uses, and write them and the index.

        The writing is left to a thread started once the tables are assembled (``write_behind``): they are
        ready before the files are. A later pass waits for it before it changes anything, and so does
        loading the folder anew; Python waits for it at exit.
        """
        _settle(self.folder)
        self.segments[name] = segment
        self.pieces.update(pieces)
        live = {p.segment for p in self.pieces.values()}
        for old in set(self.segments) - live:
            del self.segments[old]
        if len(self.segments) > MAX_SEGMENTS:
            self._compact()
        if self.folder is not None:
            self.pending = (dict(self.segments), dict(self.pieces))

    def write_behind(self) -> None:
        """Start writing what ``add`` took in, in a thread (after the tables are built: pickling holds the
        interpreter lock, so a write alongside the assembly would slow it down)."""
        if self.pending is not None:
            thread = threading.Thread(target=self.save, args=self.pending, name="kit-parse-cache")
            _SAVING[str(self.folder)], self.pending = thread, None
            thread.start()

    def _compact(self) -> None:
        """One segment for all live pieces, so that many small passes do not leave many small files."""
        name = _name()
        self.segments = {name: self.merged(list(self.pieces), name)}

    def merged(self, paths: list[str], name: str) -> Segment:
        """A segment of the pieces of ``paths``, whose places are rewritten to point into it (one gather per
        table, ``_gather``: a slice per piece cost about 0.3 s for a thousand files)."""
        pieces = [self.pieces[path] for path in paths]
        requests = _gather(
            [_Take(p.segment, p.rows) for p in pieces], self.segments, "requests", parallel.requests_frame
        )
        tools = _gather([_Take(p.segment, p.tool_rows) for p in pieces], self.segments, "tools", parallel.tool_frame)
        at, tool_at = 0, 0
        for piece in pieces:
            n, m = piece.rows[1] - piece.rows[0], piece.tool_rows[1] - piece.tool_rows[0]
            piece.rows, piece.tool_rows, at, tool_at = (at, at + n), (tool_at, tool_at + m), at + n, tool_at + m
        for piece in self.pieces.values():
            piece.segment = name
        return Segment(requests, tools)

    def save(self, segments: dict[str, Segment], pieces: dict[str, Piece]) -> None:
        """Write new segments (rows, and their pieces once) and the index of live pieces, atomically; remove the
        files of segments no longer listed. The index names only each file's segment: rewriting every
        piece on every pass would cost more than reading the files that changed. A failure (a full disk)
        is a warning: the tables were right, only the next run reads more. A store without a folder keeps nothing."""
        if self.folder is None:
            return
        try:
            _write(self.folder, segments, pieces, self.digests)
        except (OSError, _Refused, TypeError, ValueError, msgspec.EncodeError) as exc:  # an int beyond 64 bits
            warnings.warn(f"parse cache {self.folder} not written: {exc}", stacklevel=1)


class _Index(msgspec.Struct, forbid_unknown_fields=True):
    """``INDEX``: the reader code the cache was written by (``VERSION``), each file's segment, and the digest
    (SHA-256) of each live segment's files (``_files``), checked before any of them is decoded."""

    version: str
    live: dict[str, str]
    digests: dict[str, str]


class _Refused(Exception):
    """A cache folder or file that is not to be trusted; the message says which and why."""


def _files(name: str) -> tuple[str, str, str]:
    """A segment's files: its request rows and tool rows (Arrow IPC), and its pieces (MessagePack)."""
    return f"{name}.requests.arrow", f"{name}.tools.arrow", f"{name}.pieces.msgpack"


def _untrusted(st: os.stat_result) -> str | None:
    """Why a cache folder or file with this ``stat`` is not to be used, as ssh judges its own files: not owned
    by this process's user, or writable by group or others (either could have planted what it holds)."""
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _folder_refusal(folder: Path) -> str | None:
    """Why ``folder`` is not to be used as a cache (``_untrusted``, or not a folder); None if it is, or is not there."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    return "is not a folder" if not stat.S_ISDIR(st.st_mode) else _untrusted(st)


def _read_own(path: Path) -> bytes:
    """The bytes of a cache file that is the user's own (``_untrusted``), not followed through a link.
    Raises ``FileNotFoundError`` where there is none, ``_Refused`` for any other reason not to read it."""
    try:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW)) as handle:
            st = os.fstat(handle.fileno())
            why = "is not a regular file" if not stat.S_ISREG(st.st_mode) else _untrusted(st)
            if why is not None:
                raise _Refused(f"{path.name} {why}")
            return handle.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Refused(f"{path.name} cannot be read ({exc.strerror})") from exc


def _checked(folder: Path, part: str, digests: dict[str, str]) -> bytes:
    """A segment file's bytes, once their digest is the one the index keeps (``_Refused`` if not)."""
    data = _read_own(folder / part)
    if hashlib.sha256(data).hexdigest() != digests[part]:
        raise _Refused(f"{part} does not match its digest in {INDEX} (changed since written)")
    return data


def _decoded(data: bytes, kind: Any, what: str) -> Any:
    """``data`` decoded from MessagePack into ``kind`` (``_Refused`` if it does not decode as the kit wrote it)."""
    try:
        return msgspec.msgpack.decode(data, type=kind, dec_hook=parallel.decode_hook)
    except msgspec.DecodeError as exc:
        raise _Refused(f"{what} does not decode as the kit writes it ({exc})") from exc


def _read_pieces(folder: Path, name: str, digests: dict[str, str]) -> dict[str, Piece]:
    part = _files(name)[2]
    return _decoded(_checked(folder, part, digests), dict[str, Piece], part)


def _read_segment(folder: Path, name: str, digests: dict[str, str]) -> Segment:
    requests, tools, _ = _files(name)
    return Segment(*(_frame(_checked(folder, part, digests), part) for part in (requests, tools)))


FROM_ARROW = {arrow: dtype for dtype, arrow in schema.ARROW_TYPES.items()}  # the column types the cache writes


def _arrow(frame: pd.DataFrame) -> pa.Buffer:
    """``frame`` as an Arrow IPC file: each column as its Arrow array (``schema.ARROW_TYPES``: counts, floats and
    flags with their nulls, strings as they are held), no pandas metadata. A column of another dtype raises
    ``TypeError``: nothing is written that ``_frame`` would not take back as it was."""
    arrays = []
    for name, column in frame.items():
        array, kind = column.array, str(column.dtype)
        if kind not in schema.ARROW_TYPES or not hasattr(array, "__arrow_array__"):
            raise TypeError(f"column {name!r} of dtype {kind} is not one the parse cache keeps")
        found = array.__arrow_array__()
        arrays.append(found if found.type == schema.ARROW_TYPES[kind] else found.cast(schema.ARROW_TYPES[kind]))
    table = pa.Table.from_arrays(arrays, names=[str(name) for name in frame.columns])
    if any(column.num_chunks > 1 for column in table.columns):  # one record batch: a column per batch to read back
        table = table.combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _frame(data: bytes, what: str) -> pd.DataFrame:
    """The frame ``_arrow`` wrote: each column's Arrow type must be one it writes (``FROM_ARROW``), without field
    metadata, so that no extension type (whose deserializer could run code: pyarrow's old ``PyExtensionType``
    unpickled) is ever looked up; each becomes its pandas dtype's array (``__from_arrow__``)."""
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise _Refused(f"{what} is not an Arrow file the kit wrote ({exc})") from exc
    cells: dict[str, Any] = {}
    for column, found in zip(table.schema, table.columns, strict=True):
        kind = FROM_ARROW.get(column.type) if not isinstance(column.type, pa.ExtensionType) else None
        if kind is None or column.metadata or column.name in cells:
            raise _Refused(f"{what}: column {column.name!r} ({column.type}) is not one the kit writes")
        cells[column.name] = schema.PANDAS_TYPES[kind].__from_arrow__(found)
    return pd.DataFrame(cells, columns=list(cells), copy=False)


def _write(folder: Path, segments: dict[str, Segment], pieces: dict[str, Piece], digests: dict[str, str]) -> None:
    """The new segments' rows and pieces, then the index with their digests, then the old segments' files removed.

    Rows are written as Arrow IPC, not Parquet: this runs in a thread beside the caller, and Parquet's
    conversion from pandas holds the interpreter lock about ten times as long; an Arrow file of the
    frames' own arrays is their buffers copied once. ``digests`` (the store's) gains the new files'.
    """
    _own_folder(folder)
    for name, seg in segments.items():
        parts = _files(name)
        if all(part in digests and (folder / part).exists() for part in parts):
            continue
        own = {path: piece for path, piece in pieces.items() if piece.segment == name}
        kept = msgspec.msgpack.encode(own, enc_hook=parallel.encode_hook)
        for part, data in zip(parts, (_arrow(seg.requests), _arrow(seg.tools), kept), strict=True):
            digests[part] = _put(folder / part, data)
    live = {part for name in segments for part in _files(name)}
    for part in set(digests) - live:
        del digests[part]
    index = _Index(VERSION, {path: piece.segment for path, piece in pieces.items()}, dict(digests))
    _put(folder / INDEX, msgspec.msgpack.encode(index))
    for stale in folder.glob("seg-*"):
        if stale.name.split(".")[0] not in segments:
            stale.unlink(missing_ok=True)


def _own_folder(folder: Path) -> None:
    """Make the cache folder, for this user alone (mode 0700); ``_Refused`` if it is there and not to be used."""
    why = _folder_refusal(folder)
    if why is not None:
        raise _Refused(f"{folder} {why}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        folder.mkdir(mode=FOLDER_MODE)
    why = _folder_refusal(folder)  # made by another process meanwhile
    if why is not None:
        raise _Refused(f"{folder} {why}")


def _put(target: Path, data: bytes | pa.Buffer) -> str:
    """Write ``data`` through a temporary name (mode 0600, not through a link) and rename it, so that another
    process never reads half a file; its SHA-256, for the index."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        with open(fd, "wb", closefd=False) as handle:
            handle.write(data)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, target)
    return hashlib.sha256(data).hexdigest()


def _drop_old(folder: Path) -> None:
    """Remove, unread, what an earlier version left (``OLD``: pickles, which could run code when loaded), and say
    so once."""
    old = [path for pattern in OLD for path in folder.glob(pattern)]
    for path in old:
        path.unlink(missing_ok=True)
    if old:
        _tell(folder, f"{len(old)} file(s) of an earlier cache format (pickle) removed unread")


_TOLD: set[str] = set()  # folders the user was told about in this process
_NOTES: list[dict] = []  # what to tell, for the next tables (``tables``: ``attrs["issues"]``)


def _tell(folder: Path, why: str) -> None:
    """Tell the user once per folder and process, as an issue of the next tables (one located line)."""
    if str(folder) not in _TOLD:
        _TOLD.add(str(folder))
        reason = f"{NOTE_PREFIX}{why}; the transcripts are read without it"
        _NOTES.append({"source_path": str(folder), "source_line": 0, "reason": reason})


def _name() -> str:
    return f"seg-{uuid.uuid4().hex[:12]}"


@functools.cache
def _empty_tools_with_paths() -> pd.DataFrame:
    return parallel.empty_tools().assign(source_path=pd.Series([], dtype="string"))


def _concat(frames: list[pd.DataFrame], empty: Callable[[list[dict]], pd.DataFrame]) -> pd.DataFrame:
    """Frames end to end with a fresh index; the canonical empty frame when there are none."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty([])
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    return pd.concat(frames, ignore_index=True)


_STORES: dict[str, Store] = {}
_SAVING: dict[str, threading.Thread] = {}  # folder -> its write in progress


def _settle(folder: Path | None) -> None:
    """Wait until the write of ``folder`` in progress, if any, is done."""
    thread = _SAVING.pop(str(folder), None)
    if thread is not None:
        thread.join()


def store(folder: str | Path | None) -> Store:
    """The in-memory store of ``folder`` (loaded from disk on first use in this process)."""
    if folder is None:
        return Store(None)
    folder = Path(folder).expanduser().resolve()
    if str(folder) not in _STORES:
        why = _folder_refusal(folder)
        if why is not None:  # not read, not written: each call reads the files (the user is told once)
            _tell(folder, f"{folder} {why}")
            return Store(None)
        _settle(folder)
        found = Store(folder)
        found.load()
        _STORES[str(folder)] = found
    return _STORES[str(folder)]


# --- reading files, in this process or in workers (``kit.transcripts.parallel``) ----------------------------


def _read_pass(items: list[tuple[str, Path, Key]], tools: bool, st: Store) -> tuple[str, Segment, dict[str, Piece]]:
    """Read ``items`` (format, path, key), in parallel processes where that pays, as one new segment.

    A file that grew since its piece was read, with that piece's bytes unchanged, is read from the
    piece's state: only its appended lines (``_resumable``). States are kept only in a cache folder.
    """
    keep = st.folder is not None
    work = []
    for fmt, path, key in items:
        resume = _resumable(st.pieces.get(str(path)), fmt, path, key, tools)
        state, offset = resume if resume is not None else (None, 0)
        work.append(((fmt, str(path), state), key[0] - offset))
    n = parallel.workers(sum(size for _, size in work))
    todo = [item for item, _ in work]
    results = (
        parallel.shared_work(todo, tools, keep, n)
        if n > 1 and len(todo) > 1
        else [parallel.read_chunk(todo, tools, keep)]
    )
    keys = {str(path): key for _, path, key in items}
    name, pieces, at, tool_at = _name(), {}, 0, 0
    for req, tool, metas in results:
        for meta in metas:
            (a, b), (c, d) = meta["rows"], meta["tool_rows"]
            pieces[meta["path"]] = Piece(
                meta["format"], keys[meta["path"]], tools, name, (at + a, at + b), (tool_at + c, tool_at + d),
                meta["attrs"], meta["issues"], meta["ids"], meta["state"], meta["at"],
            )  # fmt: skip
        at, tool_at = at + len(req), tool_at + len(tool)
    segment = Segment(
        _concat([r for r, _, _ in results], parallel.requests_frame),
        _concat([t for _, t, _ in results], parallel.tool_frame),
    )
    return name, segment, pieces


def _resumable(piece: Piece | None, fmt: str, path: Path, key: Key, tools: bool) -> tuple[bytes, int] | None:
    """``piece``'s reader state and the bytes it read, if the file it was read from only grew since: same
    format, tool reading and inode, a reader state kept, more bytes now, and the bytes that state read
    unchanged (their CRC-32, over all of them: a file rewritten in place with the same start and end is
    read again whole). The blocks are read with ``pread``: through a buffered file each was copied once
    more (a fifth of the check: bench/parse.md)."""
    if piece is None or piece.state is None or piece.at is None:
        return None
    offset, crc = piece.at
    if piece.format != fmt or piece.tools != tools or key[3] != piece.key[3] or key[0] <= offset:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        found, at = 0, 0
        while at < offset and (block := os.pread(fd, min(offset - at, CRC_BLOCK), at)):
            found, at = zlib.crc32(block, found), at + len(block)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (piece.state, offset) if at == offset and found == crc else None


# --- assembling the tables ---------------------------------------------------------------------------------


@dataclass
class _Take:
    """The rows of one file that go into the tables: a segment's slice, less the repeats dropped."""

    segment: str
    rows: tuple[int, int]
    keep: np.ndarray | None = None  # boolean mask over the slice; None keeps all
    path: str | None = None  # the file, where known (a tool row's own columns do not say)

    def __len__(self) -> int:
        return int(self.keep.sum()) if self.keep is not None else self.rows[1] - self.rows[0]


def _kept(piece: Piece, dropped: set[int], seg: Segment) -> tuple[_Take, list[int] | None]:
    """Which of the piece's rows and tool rows survive the repeats dropped (None: all)."""
    take = _Take(piece.segment, piece.rows)
    if not dropped:
        return take, None
    take.keep = ~np.isin(np.asarray(seg.cycles(piece.rows), dtype=np.int64), list(dropped))
    return take, [i for i, caller in enumerate(_ids(piece).callers) if caller not in dropped]


def _ids(piece: Piece) -> claude_session.Ids:
    """The ids of a piece whose reader has a step across files (every such piece has them: ``parallel.read_one``)."""
    assert piece.ids is not None, f"a {piece.format} piece keeps its ids"
    return piece.ids


def _gather(takes: list[_Take], segments: dict[str, Segment], part: str, empty: Callable) -> pd.DataFrame:
    """The rows of ``takes`` in order, as one frame: the segments used end to end, then one ``take``.

    Slicing a frame per file costs a millisecond or more each (every column is sliced); positions into
    a few segments cost one gather, made column by column on the arrays (``_take``). The common case,
    one segment taken whole in order, is returned as is.
    """
    used = list(dict.fromkeys(t.segment for t in takes))
    frames = [getattr(segments[name], part) for name in used]
    start = dict(zip(used, np.cumsum([0, *map(len, frames)]).tolist(), strict=False))
    where = _positions(takes, start)
    if len(where) == 0:
        return empty([])
    if len(frames) == 1 and len(where) == len(frames[0]) and (where == np.arange(len(where))).all():
        return frames[0].reset_index(drop=True)
    return _take([segments[name].arrays(part) for name in used], frames, where)


def _positions(takes: list[_Take], start: dict[str, int]) -> np.ndarray:
    """The rows of ``takes`` as positions into their segments end to end (``start``: where each begins).

    Made for all takes at once (a repeat of each take's first position plus a running count), then the
    rows dropped taken out: an ``arange`` per take costs more than the gather itself for a thousand files.
    """
    firsts = np.fromiter((t.rows[0] + start[t.segment] for t in takes), dtype=np.int64, count=len(takes))
    lengths = np.fromiter((t.rows[1] - t.rows[0] for t in takes), dtype=np.int64, count=len(takes))
    ends = np.cumsum(lengths)
    where = np.repeat(firsts - ends + lengths, lengths) + np.arange(ends[-1] if len(takes) else 0)
    kept = [(at, t.keep) for at, t in zip((ends - lengths).tolist(), takes, strict=True) if t.keep is not None]
    if not kept:
        return where
    mask = np.ones(len(where), dtype=bool)
    for at, keep in kept:
        mask[at : at + len(keep)] = keep
    return where[mask]


def _take(
    arrays: list[tuple[dict[str, Any], tuple[str, ...]]], frames: list[pd.DataFrame], where: np.ndarray
) -> pd.DataFrame:
    """Rows ``where`` of ``frames`` end to end (their column arrays and dtypes, ``Segment.arrays``), as a new frame.

    Rows that fall in few runs of consecutive positions (``_runs``) are cut as slices (``_cut``); else, per
    column, the arrays are joined (no copy for Arrow strings, one for the others) and taken from:
    ``pd.concat`` and ``DataFrame.take`` do the same with more bookkeeping per column, about twice the
    time. Frames whose columns or dtypes differ (none of the kit's) go that way, to get pandas' common dtypes.
    """
    if not _alike(arrays):
        return pd.concat(frames, ignore_index=True).take(where).reset_index(drop=True)
    runs = _runs(where)
    if runs is not None:
        return _cut(arrays, frames, runs)[0]
    cells = {}
    for name in frames[0].columns:
        parts = [found[name] for found, _ in arrays]
        joined = parts[0] if len(parts) == 1 else type(parts[0])._concat_same_type(parts)
        cells[name] = joined.take(where)
    return pd.DataFrame(cells, columns=frames[0].columns, copy=False)


def _alike(arrays: list[tuple[dict[str, Any], tuple[str, ...]]]) -> bool:
    """Whether the frames of ``arrays`` have the same columns with the same dtypes (each array joins the others)."""
    return all(list(found) == list(arrays[0][0]) and kinds == arrays[0][1] for found, kinds in arrays)


def _cut(
    arrays: list[tuple[dict[str, Any], tuple[str, ...]]],
    frames: list[pd.DataFrame],
    runs: list[tuple[int, int]],
    blocks: list[Blocks] | None = None,
) -> tuple[pd.DataFrame, Blocks]:
    """The runs (first, length) of rows of ``frames`` end to end, as a new frame, each column made of slices.

    A string column is made of slices of its Arrow data (no copy); the others are copied once, a slice of
    each run joined, where a take first joins the frames' whole arrays (a copy of every row) and then
    gathers from them (another). A nullable column's slices are cut from its numpy values and mask (a
    pandas slice per column and run adds up: bench/parse.md), and where ``blocks``
    (each frame's ``_stacked``) has its group in every frame, from the group's 2-D arrays at once: its
    columns are then views of the rows of new 2-D arrays, returned as the new frame's blocks. A string
    column of more than ``MAX_CHUNKS`` chunks is made one array (a copy), so that slices of slices, call
    after call, do not pile up.
    """
    cuts = _split(runs, [len(frame) for frame in frames])
    cells: dict[str, Any] = {}
    made: Blocks = {}
    stacks = blocks or []
    for kind, (names, _, _) in stacks[0].items() if stacks else ():
        if not all(kind in found and found[kind][0] == names for found in stacks):
            continue
        group = [found[kind] for found in stacks]
        if kind[0] is pd.arrays.ArrowStringArray:
            table = pa.concat_tables([group[at][1].slice(a, b - a) for at, a, b in cuts])
            if max(column.num_chunks for column in table.columns) > MAX_CHUNKS:
                table = table.combine_chunks()
            cells.update((name, kind[0](table.column(i), dtype=kind[1])) for i, name in enumerate(names))
            made[kind] = names, table, None
        else:
            values = np.concatenate([group[at][1][:, a:b] for at, a, b in cuts], axis=1)
            masks = np.concatenate([group[at][2][:, a:b] for at, a, b in cuts], axis=1)
            cells.update((name, kind[0](values[i], masks[i])) for i, name in enumerate(names))
            made[kind] = names, values, masks
    columns = frames[0].columns.tolist()  # a list: iterating an Arrow-backed Index costs a call per name
    for name in columns:
        if name in cells:
            continue
        parts = [found[name] for found, _ in arrays]
        if isinstance(parts[0], pd.arrays.ArrowStringArray):
            data = [part.__arrow_array__() for part in parts]
            chunks = [chunk for at, a, b in cuts for chunk in data[at].slice(a, b - a).chunks]
            if len(chunks) > MAX_CHUNKS:
                chunks = [pa.concat_arrays(chunks)]
            cells[name] = pd.arrays.ArrowStringArray(pa.chunked_array(chunks, type=data[0].type), dtype=parts[0].dtype)
        elif isinstance(parts[0], MASKED):  # Int64, Float64, boolean: its values and mask, as numpy
            values = np.concatenate([parts[at]._data[a:b] for at, a, b in cuts])
            cells[name] = type(parts[0])(values, np.concatenate([parts[at]._mask[a:b] for at, a, b in cuts]))
        else:
            cells[name] = type(parts[0])._concat_same_type([parts[at][a:b] for at, a, b in cuts])
    return pd.DataFrame({name: cells[name] for name in columns}, columns=frames[0].columns, copy=False), made


def _split(runs: list[tuple[int, int]], lengths: list[int]) -> list[tuple[int, int, int]]:
    """``runs`` (first, length) over sources of ``lengths`` end to end, as (source, first, stop) within a source:
    a run is split where a source ends."""
    bounds = list(itertools.accumulate(lengths, initial=0))
    cuts = []
    for first, n in runs:
        stop, source = first + n, bisect.bisect_right(bounds, first) - 1
        while first < stop:
            end = min(stop, bounds[source + 1])
            if end > first:
                cuts.append((source, first - bounds[source], end - bounds[source]))
            first, source = end, source + 1
    return cuts


def _runs(where: np.ndarray) -> list[tuple[int, int]] | None:
    """``where`` as runs of consecutive positions (first, length), if there are few (``MAX_RUNS``), else None.

    The rows are then cut as slices (``_cut``: no copy of a string, one of the other columns), where a
    take copies every string: a warm re-read that adds a few files to a history has a few dozen runs.
    """
    breaks = np.flatnonzero(np.diff(where) != 1) + 1
    if len(breaks) >= MAX_RUNS:
        return None
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [len(where)]]))
    return list(zip(where[starts].tolist(), lengths.tolist(), strict=True))


def _extend_attrs(out: Parsed, attrs: dict[str, list]) -> None:
    for key, values in attrs.items():
        out.attrs.setdefault(key, []).extend(values)


def _joined(attrs: list[dict[str, list]]) -> dict[str, list]:
    """The files' attrs end to end, as ``Parsed.extend`` would join them one by one (keys in the order
    ``Parsed`` starts with, then as first seen), one list per key made at once: a thousand files' six
    lists each, extended one at a time, cost several milliseconds on every call."""
    keys = dict.fromkeys(Parsed().attrs)
    for found in attrs:
        keys.update(dict.fromkeys(found))
    return {key: list(itertools.chain.from_iterable(found.get(key, ()) for found in attrs)) for key in keys}


def _assemble(
    groups: dict[str, list[Path]], order: dict[str, int], st: Store, tools: bool, issues: Issues
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list]]:
    """The tables as ``kit.transcripts`` builds them without a cache: rows in file order, tool rows and
    attrs in format-group order, each group's steps across files applied. The files of one format read
    file by file (no step across files) are spliced from the last call's tables (``_spliced``)."""
    if len(groups) == 1:
        fmt, group = next(iter(groups.items()))
        reader = readers.reader(fmt)
        if not reader.across_files and reader.join is None and len(group) == len(order):
            spliced = _spliced(fmt, list(order), st, tools, issues)  # the group's files, as strings
            if spliced is not None:
                return spliced
    out = Parsed()
    takes: dict[str, _Take] = {}
    tool_takes: list[_Take] = []
    segments = dict(st.segments)
    for fmt, group in groups.items():
        reader = readers.reader(fmt)
        if reader.across_files:
            parsed = reader.read(group, issues, tools)
            name = f"uncached-{fmt}"
            segments[name] = Segment(schema.requests_frame(parsed.rows), parallel.tool_frame(parsed.tools))
            paths = segments[name].requests["source_path"].to_numpy(dtype=object)
            for path in group:
                where = np.flatnonzero(paths == str(path))
                if len(where):
                    mask = np.zeros(len(paths), dtype=bool)
                    mask[where] = True
                    takes[str(path)] = _Take(name, (0, len(paths)), mask)
            tool_takes.append(_Take(name, (0, len(parsed.tools))))
            _extend_attrs(out, parsed.attrs)
            continue
        pieces = [st.pieces[str(p)] for p in group]
        for piece in pieces:
            for item in piece.issues:
                issues.add(item["source_path"], item["source_line"], item["reason"])
        group_out = Parsed()
        attrs: list[dict[str, list]] = [piece.attrs for piece in pieces]
        dropped: list[set[int]] = [set()] * len(pieces)
        if reader.join is not None:
            rows = [piece.rows[1] - piece.rows[0] for piece in pieces]
            attrs, dropped, group_out.attrs["repeats"] = reader.join(list(map(_ids, pieces)), attrs, rows)
        for path, piece, cycles in zip(group, pieces, dropped, strict=True):
            take, kept_tools = _kept(piece, cycles, segments[piece.segment])
            takes[str(path)] = take
            if tools:
                tool_takes.append(_tool_take(piece, kept_tools, str(path)))
        _extend_attrs(group_out, _joined(attrs))
        _extend_attrs(out, group_out.attrs)
    ordered = [takes[p] for p in sorted(takes, key=order.__getitem__)]
    requests = _gather(ordered, segments, "requests", parallel.requests_frame)
    return requests, _tool_gather(tool_takes, segments), out.attrs


def _tool_gather(takes: list[_Take], segments: dict[str, Segment]) -> pd.DataFrame:
    """The tool rows of ``takes`` in order, each with its take's ``source_path`` (none: the empty frame, made once)."""
    if not takes:
        return _empty_tools_with_paths().copy(deep=False)
    tool_frame = _gather(takes, segments, "tools", parallel.tool_frame)
    paths = pd.array(np.repeat(np.array([t.path for t in takes], dtype=object), [len(t) for t in takes]))
    return tool_frame.assign(source_path=pd.Series(paths, dtype="string"))


ATTRS = tuple(Parsed().attrs)  # the attrs keys a reader starts with (``_spliced`` keeps to them)
PARTS = ("requests", "tools", *ATTRS)  # what a file gives the tables, each placed by ``_placed``


@dataclass
class _Layout:
    """The tables the files of one format made in the last call, and where each file's rows are in them.

    ``places``: each file's place; ``pieces``: the piece its rows came from; ``at`` and ``counts``: per part
    (a row each, ``PARTS``), each file's first row or entry there, and how many.
    """

    format: str
    tools: bool
    places: dict[str, int]
    pieces: list[Piece]
    tables: Segment  # the requests and tool frames returned (tool rows with their source_path)
    attrs: dict[str, list]
    at: np.ndarray
    counts: np.ndarray

    def lengths(self) -> np.ndarray:
        """Each part's rows (requests and tools tables) or entries (attrs keys), in ``PARTS`` order."""
        frames = [len(self.tables.requests), len(self.tables.tools)]
        return np.array([*frames, *(len(self.attrs[key]) for key in ATTRS)], dtype=np.int64)


def _spliced(
    fmt: str, names: list[str], st: Store, tools: bool, issues: Issues
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list]] | None:
    """The tables of one format whose files (``names``, in order) are read alone (``_assemble``): each file's
    rows, tool rows and attrs entries end to end in file order, taken from the last call's tables
    (``Store.layout``) for the files whose piece is the same, and from their segments for the others.

    Gathering every row from the segments again cost milliseconds a call (bench/parse.md; a take of
    every string: the passes leave each grown file's rows in another segment); the unchanged files' rows
    are a few dozen runs of the last tables, cut as slices (``_cut``). None, for ``_assemble`` to gather,
    where a piece has attrs keys besides ``ATTRS``: they go in the order first seen (``_joined``).
    """
    pieces = list(map(st.pieces.__getitem__, names))
    last = st.layout if st.layout is not None and (st.layout.format, st.layout.tools) == (fmt, tools) else None
    places, kept = (last.places, last.pieces) if last is not None else ({}, [])
    where = [
        place if (place := places.get(name, -1)) >= 0 and kept[place] is piece else -1
        for name, piece in zip(names, pieces, strict=True)
    ]
    fresh = [(name, piece) for name, piece, place in zip(names, pieces, where, strict=True) if place < 0]
    old = np.array(where, dtype=np.int64)
    if any(not set(piece.attrs).issubset(ATTRS) for _, piece in fresh):
        return None
    for piece in pieces:
        for item in piece.issues:
            issues.add(item["source_path"], item["source_line"], item["reason"])
    takes = [_Take(piece.segment, piece.rows) for _, piece in fresh]
    tool_takes = [_Take(piece.segment, piece.tool_rows, path=name) for name, piece in fresh] if tools else []
    new = Segment(
        _gather(takes, st.segments, "requests", parallel.requests_frame), _tool_gather(tool_takes, st.segments)
    )
    new_attrs = _joined([piece.attrs for _, piece in fresh])
    sizes = [
        [piece.rows[1] - piece.rows[0] for _, piece in fresh],
        [len(take) for take in tool_takes] if tools else [0] * len(fresh),
        *([len(piece.attrs.get(key, ())) for _, piece in fresh] for key in ATTRS),
    ]
    added = np.array(sizes, dtype=np.int64).reshape(len(PARTS), len(fresh))
    if last is not None:
        runs, at, counts = _placed(old, last.at, last.counts, last.lengths(), added)
    else:
        none = np.zeros((len(PARTS), 0), dtype=np.int64)
        runs, at, counts = _placed(old, none, none, np.zeros(len(PARTS), dtype=np.int64), added)
    sources = [last.tables, new] if last is not None else [new]
    frames: dict[str, pd.DataFrame] = {}
    blocks: dict[str, Blocks] = {}
    for part in ("requests", "tools"):
        frames[part], blocks[part] = _spliced_frame(sources, part, runs[PARTS.index(part)])
    attrs: dict[str, list] = {}
    for key in ATTRS:
        lists = [last.attrs[key], new_attrs[key]] if last is not None else [new_attrs[key]]
        attrs[key] = []
        for source, first, stop in _split(runs[PARTS.index(key)], [len(found) for found in lists]):
            attrs[key] += lists[source][first:stop]
    tables = Segment(frames["requests"], frames["tools"], _blocks={k: found for k, found in blocks.items() if found})
    places = dict(zip(names, range(len(names)), strict=True))
    st.layout = _Layout(fmt, tools, places, pieces, tables, attrs, at, counts)
    return frames["requests"], frames["tools"], attrs


def _placed(
    old: np.ndarray, at: np.ndarray, counts: np.ndarray, bases: np.ndarray, added: np.ndarray
) -> tuple[list[list[tuple[int, int]]], np.ndarray, np.ndarray]:
    """Each part's rows (or entries) of the files, as runs (first, length) over the last call's ones, then the
    fresh files' from ``bases``; and each file's first row and count in the new tables, a row per part.

    ``old``: each file's place in the last call (-1: fresh); ``at``, ``counts``: the last call's, a row per
    part; ``bases``: each part's length in the last call; ``added``: each fresh file's counts, a column
    each, in order. Files next to each other in the same source make one run; files without rows make
    none. All parts at once, not one by one (bench/parse.md).
    """
    kept = old >= 0
    count = np.empty((len(at), len(old)), dtype=np.int64)
    first = np.empty_like(count)
    count[:, kept], first[:, kept] = counts[:, old[kept]], at[:, old[kept]]
    count[:, ~kept], first[:, ~kept] = added, bases[:, None] + np.cumsum(added, axis=1) - added
    some = count > 0
    part = np.nonzero(some)[0]  # each file's rows by part, the parts one after the other
    starts, lengths = first[some], count[some]
    runs: list[list[tuple[int, int]]] = [[] for _ in range(len(at))]
    if len(starts):
        joined = (part[1:] == part[:-1]) & (starts[1:] == starts[:-1] + lengths[:-1])
        opens = np.flatnonzero(np.concatenate([[True], ~joined]))
        found = zip(part[opens].tolist(), starts[opens].tolist(), np.add.reduceat(lengths, opens).tolist(), strict=True)
        for index, first_row, n in found:
            runs[index].append((first_row, n))
    return runs, np.cumsum(count, axis=1) - count, count


def _spliced_frame(sources: list[Segment], part: str, runs: list[tuple[int, int]]) -> tuple[pd.DataFrame, Blocks]:
    """The rows ``runs`` of the ``part`` frames of ``sources`` end to end, and its nullable columns' blocks
    where cut from the sources' (``_cut``); a source's frame itself where the runs are all of it, and the
    last source's where there are none (it has no rows then either)."""
    frames = [getattr(source, part) for source in sources]
    if not runs:
        return frames[-1], {}
    starts = itertools.accumulate(map(len, frames), initial=0)
    whole = [frame for frame, first in zip(frames, starts, strict=False) if runs == [(first, len(frame))]]
    if whole:
        return whole[0], {}
    arrays = [source.arrays(part) for source in sources]
    if not _alike(arrays):  # ``_take``'s way for frames of other columns or dtypes
        return _take(arrays, frames, np.concatenate([np.arange(first, first + n) for first, n in runs])), {}
    return _cut(arrays, frames, runs, [source.blocks(part) for source in sources])


def _tool_take(piece: Piece, kept: list[int] | None, path: str) -> _Take:
    take = _Take(piece.segment, piece.tool_rows, path=path)
    if kept is not None:
        take.keep = np.zeros(piece.tool_rows[1] - piece.tool_rows[0], dtype=bool)
        take.keep[kept] = True
    return take


# --- the entry point ---------------------------------------------------------------------------------------


def _check_folder(folder: str | Path | None, files: Sequence[str]) -> None:
    """The cache never goes into a transcript folder (raw artifacts are never modified). Checked for the files
    about to be read: the others were when they were read, into the same folder (a store is per folder)."""
    if folder is None:
        return
    where = str(Path(folder).expanduser().resolve())
    for parent in {os.path.abspath(d) for d in {os.path.dirname(p) for p in files}}:
        if where == parent or where.startswith(parent + os.sep):
            raise InputError(f"cache folder {folder} is inside the transcript folder {parent}; choose another")


def _keys(names: list[str], st: Store) -> dict[str, Key]:
    """``file_key`` of every file that can be opened (one that cannot is reported by the grouping), or, for a
    file whose key was found settled (``Store.settled``) and whose ``stat`` still matches it, that key.

    Opening a file and reading its two blocks costs several times a ``stat``: for a history of unchanged
    files that is most of a warm call (bench/parse.md). A key is kept so once the file
    had settled when it was checked (``_base.settled``): an equal ``stat`` then means what an equal CRC
    would; a file changed shortly before its check keeps having its content checked.
    """
    keys: dict[str, Key] = {}
    kept = st.settled
    for name in names:
        known = kept.get(name)
        if known is not None:
            try:
                found = os.stat(name)
            except OSError:
                continue
            if known[:4] == (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino):
                keys[name] = known
                continue
        checked = time.time_ns()
        with suppress(OSError):
            key = keys[name] = file_key(name)
            if settled(key[1], key[2], checked):
                kept[name] = key
    return keys


def tables(
    files: Sequence[Path], format: str, strict: bool, tools: bool, cache: str | Path | None, tool_paths: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``kit.transcripts.tables`` through the cache (``cache`` None: the parallel read alone, nothing kept).

    ``tool_paths`` adds each tool result's ``source_path`` (NA for Codex exec JSON, read across files),
    which the canonical table leaves out: a history's sessions need their own tool results. When the
    same files have the same keys as in the previous call (``Store.memo``), that call's tables are
    returned (and its issues reported again) without grouping or assembling anything.
    """
    st = store(cache)
    issues = Issues(strict=strict)
    names = [str(p) for p in files]
    keys = _keys(names, st)
    signature = (tuple(names), tuple(keys.get(n) for n in names), format, tools)
    if st.memo is not None and st.memo[0] == signature:
        requests, tool_frame, attrs, found = st.memo[1:]
        for item in found:
            issues.add(item["source_path"], item["source_line"], item["reason"])
    else:
        requests, tool_frame, attrs, memo = _tables(files, names, format, tools, st, keys, issues)
        st.memo = (signature, requests, tool_frame, attrs, list(issues.items)) if memo else None
    while _NOTES:  # what the cache has to tell, once (``_tell``): not a transcript's issue, so never strict
        issues.items.append(_NOTES.pop(0))
    attrs = {**attrs, "issues": issues.items}
    requests = requests.copy(deep=False)  # copy-on-write (pandas 3)
    if tool_paths:
        tool_frame = tool_frame.copy(deep=False)
    elif len(tool_frame):
        tool_frame = tool_frame.drop(columns="source_path")
    else:  # as dropped, made once (``read`` keeps no tool rows, and hands back none)
        tool_frame = parallel.empty_tools().copy(deep=False)
    requests.attrs = {k: Shared(v) for k, v in attrs.items()}
    tool_frame.attrs = {"issues": Shared(issues.items)}
    st.write_behind()
    return requests, tool_frame


def _tables(
    files: Sequence[Path], names: list[str], format: str, tools: bool, st: Store, keys: dict[str, Key], issues: Issues
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list], bool]:
    """Group the files as ``kit.transcripts`` does, read those not cached, assemble; whether the result may be
    kept for the next call (not when a format read across files, uncached, is among them:
    ``Reader.across_files``). ``names``: the files as strings. Each file's size and, for a file whose piece still
    holds, its format are known here (``group_files`` asks the others' of the file system)."""
    from kit import transcripts

    def head(path: Path) -> str:
        """The file's content check (``file_key``: a CRC of its first and last blocks) in place of the hash of
        its first 64 KB (``transcripts.first_block_hash``), to find copies: equal content gives equal checks,
        and
        files whose checks are equal too have their whole content hashed, as with equal first blocks. No
        file is read again (the cost is measured in bench/parse.md). A file without a key cannot be opened;
        ``first_block_hash`` says why."""
        key = keys.get(str(path))
        return f"crc {key[4]}" if key is not None else transcripts.first_block_hash(path)

    found = [keys.get(name) for name in names]
    pieces = [st.pieces.get(name) for name in names]
    formats = [
        piece.format if piece is not None and piece.key == key and piece.tools == tools else None
        for piece, key in zip(pieces, found, strict=True)
    ]
    sizes = [key[0] if key is not None else None for key in found]
    groups, order = transcripts.group_files(list(files), format, issues, head, sizes, formats)
    cached = dict(zip(names, formats, strict=True))
    stale = [
        (fmt, p, keys[str(p)])
        for fmt, group in groups.items()
        if not readers.reader(fmt).across_files
        for p in group
        if cached[str(p)] != fmt  # no piece, or one of another format, key or tool reading (``Store.fresh``)
    ]
    if stale:
        _check_folder(st.folder, [str(p) for _, p, _ in stale])  # before anything is written
        st.add(*_read_pass(stale, tools, st))
    requests, tool_frame, attrs = _assemble(groups, order, st, tools, issues)
    return requests, tool_frame, attrs, not any(readers.reader(fmt).across_files for fmt in groups)
