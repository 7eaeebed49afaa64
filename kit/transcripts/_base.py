"""What every reader shares: located issues, streamed JSON lines, and the result a reader returns.

Transcripts are written by processes that get killed, edited by hand and copied around, so a reader
never stops at a bad line: it reports the line's place and reads on (``strict`` turns the first
report into an exception instead, for pipelines that must not go on with a partial table).
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import orjson

from kit.errors import KitError

BOM = b"\xef\xbb\xbf"


class TranscriptError(KitError, ValueError):
    """A transcript line (or file, line 0) that could not be read; the message is ``file:line: reason``."""

    def __init__(self, path: str | Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = str(path)
        self.line = line
        self.reason = reason


@dataclass
class Issues:
    """Collects what could not be read, each with its place; line 0 means the file as a whole."""

    strict: bool = False
    items: list[dict] = field(default_factory=list)
    _once: set[tuple[str, object]] = field(default_factory=set)

    def add(self, path: str | Path, line: int, reason: str) -> None:
        if self.strict:
            raise TranscriptError(path, line, reason)
        self.items.append({"source_path": str(path), "source_line": line, "reason": reason})

    def unknown_type(self, path: str | Path, line: int, kind: object) -> None:
        """Report a line type the reader does not know, once per type and file: new CLI versions add some."""
        if (str(path), kind) not in self._once:
            self._once.add((str(path), kind))
            self.add(path, line, f"unknown line type {kind!r}; ignored (further lines of this type not reported)")


class Shared(list):
    """A side table in ``df.attrs`` that copies of the frame share instead of deep-copying.

    pandas deep-copies ``attrs`` into the result of every operation (a column, a sum, each group of a
    groupby); with the thousands of events of a big read that copy cost more than the operation (0.07 s
    per column on 260 MB of sessions; 84 s for the per-file totals of ``python -m kit parse``, now 3 s).
    The records are not meant to be changed, so one object serves every copy.
    """

    def __deepcopy__(self, memo: dict) -> Shared:
        return self


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off for a read (back as it was after), in this process and the workers it forks.

    A read allocates a great many objects (decoded lines, row dicts) that refcounting frees, and each
    allocation burst triggers collections that walk every tracked object of the process, the parse
    cache's kept pieces included: a sixth of a warm re-read (bench/parse.md), and more of a cold one. The few
    cycles a read makes are collected once the collector is back on.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Parsed:
    """A reader's output: canonical request rows, tool-result rows and side tables for ``df.attrs``."""

    rows: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    attrs: dict[str, list] = field(
        default_factory=lambda: {
            k: [] for k in ("files", "events", "sidechain_ids", "repeats", "crosscheck", "rate_limits")
        }
    )

    def extend(self, other: Parsed) -> None:
        self.rows += other.rows
        self.tools += other.tools
        for key, values in other.attrs.items():
            self.attrs.setdefault(key, []).extend(values)

    @classmethod
    def of_files(cls, paths: Sequence[Path], read_file: Callable[[Path], Parsed], tools: bool) -> Parsed:
        """``read_file`` of each path, in order, as one; tool-result rows only with ``tools`` (the small formats
        build them anyway: they have few, so dropping them after costs less than a second code path)."""
        out = cls()
        for path in paths:
            out.extend(read_file(path))
        if not tools:
            out.tools = []
        return out


MAIN = "main"  # the role of a file whose responses fill the trial's own context window (``Reader.role``)
COMPACTION = "compaction"  # a file's role, and a row's ``side_request``: a request that summarises a context window
UNRECORDED = "unrecorded"  # a row's ``side_request``: a request only the provider log holds, at no compaction
SIDE = "side"  # the role of the provider log's requests no transcript holds (``kit.transcripts.sources.with_log``)
# The events that say a context window was replaced by a summary: Claude Code's, Codex's (two CLI generations)
COMPACTION_EVENTS = frozenset({"system:compact_boundary", "compacted", "context_compacted"})


def main_role(path: Path) -> str:
    """The role of a file of a format that writes one context window per file: ``main``."""
    return MAIN


@dataclass(frozen=True)
class Resume:
    """How a reader reads a file in steps, for the parse cache to keep its state and read only a grown file's
    appended lines (``kit.transcripts.cache``): ``start`` the state before the first line (``crc``: keep a CRC of
    the bytes read), ``scan`` the lines after ``state.at``, ``finish`` the file's ``Parsed`` and the ids its
    step across files needs (None where it has none), ``state`` the type a kept state is decoded into."""

    state: type
    start: Callable[..., Any]
    scan: Callable[[Any], Any]
    finish: Callable[[Any], tuple[Parsed, Any]]


@dataclass(frozen=True)
class Reader:
    """What the kit knows of one transcript format, in one place (``kit.transcripts.readers.READERS``): a new
    format is its module's ``READER`` and a line there.

    ``format``: its name (the rows' ``source_format``). ``judge``: whether a JSON object among a file's first
    lines (``kit.transcripts._detect``) is this format's; readers are asked in the registry's order.
    ``read``: the rows of files of this format, the steps across its files included. ``role``: whose context
    window a file's responses fill (``main``, ``subagent``, ``compaction``; ``kit.transcripts.sources``).
    ``across_files``: its rows depend on all its files at once (a thread continued across files), so the parse
    cache cannot keep them per file. ``resume``: how the parse cache resumes a grown file (None: read whole).
    ``join``: ``read``'s step across files on the files' ids (``Resume.finish``'s), for the parse cache, which
    keeps each file's rows: each file's attrs, the cycles dropped per file (copies another file holds, the
    identity being the reader's: a response id), and ``attrs["repeats"]``; None where files are independent.
    """

    format: str
    judge: Callable[[dict], bool]
    read: Callable[[Sequence[Path], Issues, bool], Parsed]
    role: Callable[[Path], str] = main_role
    across_files: bool = False
    resume: Resume | None = None
    join: (
        Callable[
            [list[Any], list[dict[str, list]], list[int]], tuple[list[dict[str, list]], list[set[int]], list[dict]]
        ]
        | None
    ) = None


def json_lines(path: Path, issues: Issues) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each JSON-object line, as plain dicts (orjson).

    For the small formats; the big ones use ``records``, which decodes only the fields a reader uses.
    """
    return _decoded(path, issues, orjson.loads, typed=False)


@dataclass
class Position:
    """Where a read of a file stopped, so that lines appended later can be read alone (``records``).

    ``offset`` bytes and ``line`` lines were consumed; ``seen``: some line held a value (else the file
    was reported empty); ``complete``: the bytes ended with a newline (a partial last line is read
    again whole once the writer finishes it, so a file ending in one cannot be resumed); ``crc``: the
    CRC-32 of those bytes when asked for (not None), which proves a grown file's head unchanged.
    """

    offset: int = 0
    line: int = 0
    seen: bool = False
    complete: bool = True
    crc: int | None = None

    @property
    def resumable(self) -> bool:
        return self.seen and self.complete and self.crc is not None


def records(
    path: Path,
    issues: Issues,
    decoder: msgspec.json.Decoder,
    at: Position | None = None,
    unused: Unused | None = None,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number, record)`` for each line, decoded by a typed ``msgspec`` decoder.

    Session files run to hundreds of MB, mostly text the usage table never needs. A decoder for a
    ``msgspec.Struct`` naming only the fields a reader uses still checks that every byte is JSON but
    builds no objects for the rest. It does not check that skipped strings are UTF-8, so lines are
    checked here, a 4 MB chunk at a time (``_lines``). (Its ``decode_lines`` is no faster here, and it
    takes ``{}{}`` on one line for two records, so lines are cut here and decoded one by one; decoding
    a file's lines as one JSON array was slower still, 0.51 s against 0.36 s for 260 MB of rollouts.)
    ``at``: start after the bytes and lines it holds (a grown file's appended lines), and leave it at
    the end.

    ``unused``: the lines it matches are read past, neither decoded nor checked (``Unused``).
    """
    return _decoded(path, issues, decoder.decode, typed=True, at=at, unused=unused)


LONG = 1 << 10  # shorter lines are decoded even where ``Unused`` would read them past
MARKER_WINDOW = 1 << 12  # where ``Unused.marker`` is looked for: a line's first 4 kB
CLOSE = ord("}")  # a line read past must end as an object does (``Unused``)
SCALAR_PAIR = rb'"[A-Za-z_][A-Za-z0-9_]*":(?:"[^"\\]*"|-?[0-9][0-9.eE+-]*|true|false|null),'
# Where one record ends and another begins on the same line (``Unused``): a record is an object whose first key
# is a string, and inside a JSON string the quote would be escaped, so one record's line holds it only where a
# string value ends in ``}{`` (then the line is merely decoded)
JOINED = b'}{"'


@dataclass(frozen=True)
class Unused:
    """Lines a read never uses, to be read past without decoding (``records``): the tool output a read of
    requests alone has no use for is most of a history's bytes, and decoding it was a large part of a cold
    read. Only lines of ``LONG`` bytes or more are looked at, and one is read past when ``pattern``
    matches from its start (``lines``): decoding costs by the byte, and looking at every line, or searching
    the bytes once more for a marker, cost more than the decoding it saved. A line read past is not checked
    as JSON, only for looking whole: it must end with ``}`` and a newline, else it is decoded and reported
    (a killed writer's partial line, a line cut short). So a read of requests alone may pass over a damaged
    tool output that a read of the tool results (``tables``, the parse stage, a history) reports at its line;
    no request row depends on it (docs/method.md#transcripts).

    ``marker``: bytes that any line ``pattern`` matches holds in its first ``MARKER_WINDOW`` bytes, looked for
    first. A Claude Code line opens with a dozen keys before its type, which the pattern walks one by one
    on every long line; a search for the marker is one pass in C, and most long lines (the model's own) lack
    it (the saving is measured in bench/parse.md). The marker only
    narrows: a line it misses is decoded, as any line the pattern does not match.

    A line that holds ``JOINED`` is decoded too, though the pattern matched: a lost newline (a crash, a
    concatenation) joins a tool output and the next record, which may be a line the read needs (an
    assistant line, a prompt). Decoding it reports it where it is, as a read of the tool results does, so
    that the two reads agree on rows and issues; read past, the record would be lost unsaid.
    """

    pattern: re.Pattern[bytes]
    marker: bytes | None = None

    @classmethod
    def lines(cls, line_type: str, marker: bytes | None = None) -> Unused:
        """Object lines whose keys before ``"type"`` hold scalars only, then ``"type":`` and what ``line_type``
        (a regular expression over the raw bytes) matches after it. Because every value before ``"type"``
        is a scalar without escapes, the match is the line's own ``type`` key, never one inside a nested
        object or a string (whose quotes would be escaped); a line written in another order, or with
        escapes there, is decoded."""
        return cls(re.compile(rb"\{(?:" + SCALAR_PAIR + rb')*"type":' + line_type.encode()), marker)

    def passes(self, chunk: bytes, start: int, end: int) -> bool:
        """Whether the line ``chunk[start:end]`` is one to read past: ``marker`` in its window, then ``pattern``."""
        marker = self.marker
        if marker is not None and chunk.find(marker, start, min(end, start + MARKER_WINDOW)) < 0:
            return False
        return self.pattern.match(chunk, start, end) is not None and chunk.find(JOINED, start, end) < 0


def _advance(at: Position, chunk: bytes) -> None:
    """Move ``at`` past the bytes of ``chunk`` (not empty)."""
    at.offset += len(chunk)
    at.complete = chunk.endswith(b"\n")
    if at.crc is not None:
        at.crc = zlib.crc32(chunk, at.crc)


def _decoded(
    path: Path,
    issues: Issues,
    loads: Callable[[Any], Any],
    typed: bool,
    at: Position | None = None,
    unused: Unused | None = None,
) -> Iterator[tuple[int, Any]]:
    """Lines of ``path`` decoded by ``loads``, with every problem reported at its place; ``at`` as in ``records``.

    Tolerates a UTF-8 BOM, CRLF endings and blank lines; reports invalid JSON, a truncated last line
    (no final newline: the writer was killed mid-line), non-object lines, lines too long to hold in
    bounded memory, and an empty file. A line is decoded straight from its chunk; one that fails is
    judged again on a cleaned copy (BOM, line end). With a typed decoder (``records``: a whole file is
    read), a chunk's lines known to be UTF-8 are first decoded in one go, without the generator step,
    ``try`` and checks of each line; if any of them fails, the chunk is read line by line as above, so
    that each problem is reported at its line. (``json_lines`` stays line by line: format detection
    stops after a few lines.)
    """
    at = at if at is not None else Position()
    seen_any = at.seen
    with open(path, "rb") as handle:
        handle.seek(at.offset)
        for first, lines, ended, utf8 in _lines(handle, path, issues, at, unused):
            if typed and utf8:
                try:
                    if unused is None:
                        found = list(enumerate([loads(line) for line in lines], first))
                    else:
                        found = [(n, loads(line)) for n, line in enumerate(lines, first) if line is not None]
                except msgspec.DecodeError:
                    pass
                else:
                    seen_any = True
                    yield from found
                    continue
            for number, line in enumerate(lines, first):
                if line is None:  # read past (``Unused``)
                    seen_any = True
                    continue
                try:
                    if not utf8:
                        codecs.utf_8_decode(line, "strict", True)
                    obj = loads(line)
                except (orjson.JSONDecodeError, msgspec.DecodeError, UnicodeDecodeError):
                    obj = _retry(path, issues, loads, number, line, ended)
                    seen_any |= obj is not BLANK
                    if obj is None or obj is BLANK:
                        continue
                seen_any = True
                if not typed and type(obj) is not dict:
                    issues.add(path, number, f"expected a JSON object, got {type(obj).__name__}; line skipped")
                    continue
                yield number, obj
    at.seen = seen_any
    if not seen_any:
        issues.add(path, 0, "empty file")


BLANK = object()


def _retry(path: Path, issues: Issues, loads: Callable, number: int, line: memoryview, ended: bool) -> Any:
    """A line that did not decode, judged again without BOM and line end: the object, BLANK, or None (reported)."""
    text = bytes(line[len(BOM) :] if number == 1 and line[: len(BOM)] == BOM else line).rstrip(b"\r\n")
    if not text.strip():
        return BLANK
    try:
        text.decode("utf-8")  # msgspec does not check the strings it skips
        return loads(text)  # a first line is valid once its BOM is gone
    except msgspec.ValidationError as shape:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = {}
        if type(value) is not dict:
            issues.add(path, number, f"expected a JSON object, got {type(value).__name__}; line skipped")
        else:
            issues.add(path, number, f"unexpected shape ({shape}); line skipped")
    except (orjson.JSONDecodeError, msgspec.DecodeError, UnicodeDecodeError) as error:
        bad = f"invalid JSON ({error})" if ended else "truncated last line (no final newline: writer killed?)"
        issues.add(path, number, f"{bad}; line skipped")
    return None


FIRST_CHUNK, CHUNK = 1 << 16, 1 << 22
UTF8_BLOCK = 1 << 14
MAX_LINE = 8 << 20


def _lines(
    handle: BinaryIO, path: Path, issues: Issues, at: Position, unused: Unused | None = None
) -> Iterator[tuple[int, list[memoryview | None], bool, bool]]:
    """``(number of the first line, lines without their newline, whether a newline ended them, whether they
    are known to be UTF-8)``, numbered after ``at.line``; ``at`` is moved past every chunk read, and its
    line count set at the end. Lines come a batch at a time, one line first, then twice as many each time
    up to a chunk's lines: a reader that stops after a few (format detection) does not cut up a whole
    chunk, and one that reads them all gets them a chunk at a time.

    Transcripts run to hundreds of MB in many short lines. Reading line by line copies every line (twice
    the cost of this on 260 MB), so lines are views into chunks of up to 4 MB, and the first chunks are
    small for format detection. A line split across chunks is joined and given alone; one longer than
    ``MAX_LINE`` is reported and read past without being held, so memory stays bounded (a 1 GB line
    would otherwise take several GB). The whole lines of a chunk are checked
    as UTF-8 together (``_utf8``); lines that check cannot vouch for are checked one by one. A line read
    past (``Unused``) is given as None; one joined across chunks or without a final newline never is.
    """
    number, held, size, skipping, batch = at.line, 0, FIRST_CHUNK, False, 1  # batch: lines given at once (above)
    pending: list[bytes] = []  # the start of a line that runs on into the next chunk
    while chunk := handle.read(size):
        _advance(at, chunk)
        size = min(2 * size, CHUNK)
        find, start = chunk.find, 0
        if (end := find(b"\n")) < 0:
            if held + len(chunk) > MAX_LINE:
                pending, held, skipping = [], 0, True
            elif not skipping:
                pending.append(chunk)
                held += len(chunk)
            continue
        if skipping or held + end > MAX_LINE:
            number += 1
            issues.add(path, number, f"line longer than {MAX_LINE >> 20} MB; skipped (read past in bounded memory)")
            start = end + 1
        elif pending:
            number += 1
            yield number, [memoryview(b"".join([*pending, chunk[:end]]))], True, False
            start = end + 1
        pending, held, skipping = [], 0, False
        view = memoryview(chunk)
        utf8 = _utf8(chunk, view[start : chunk.rfind(b"\n") + 1])
        lines: list[memoryview | None] = []
        skip = unused.passes if unused is not None else None
        while (end := find(b"\n", start)) >= 0:
            passed = skip and end - start >= LONG and chunk[end - 1] == CLOSE and skip(chunk, start, end)
            lines.append(None if passed else view[start:end])
            start = end + 1
            if len(lines) == batch:
                yield number + 1, lines, True, utf8
                number, lines, batch = number + batch, [], 2 * batch
        if lines:
            yield number + 1, lines, True, utf8
            number += len(lines)
        if start < len(chunk):
            pending, held = [chunk[start:]], len(chunk) - start
    at.line = number + 1 if skipping or pending else number  # a partial last line counts
    if skipping:
        issues.add(path, number + 1, f"truncated last line longer than {MAX_LINE >> 20} MB; skipped")
    elif pending:
        yield number + 1, [memoryview(b"".join(pending))], False, False


def _utf8(chunk: bytes, lines: memoryview) -> bool:
    """Whether ``lines`` (whole lines of ``chunk``) are valid UTF-8; False sends each line to its own check.

    Checked a block at a time: most blocks of a transcript are ASCII (checked at memory speed) even when
    its chunk is not, and decoding the others alone writes far less than decoding the chunk whole.
    """
    if chunk.isascii():
        return True
    at, end = 0, len(lines)
    try:
        while at < end:
            block = bytes(lines[at : at + UTF8_BLOCK])
            if block.isascii():
                at += len(block)
            else:  # a character cut at the block's end is decoded with the next block; at the data's end, an error
                at += codecs.utf_8_decode(block, "strict", at + len(block) >= end)[1]
    except UnicodeDecodeError:
        return False
    return True


SETTLED_NS = 5 * 10**9  # how long before a check a file or folder must have last changed to be known by its stat


def settled(mtime_ns: int, ctime_ns: int, checked_ns: int) -> bool:
    """Whether what a ``stat`` with these times describes, checked at ``checked_ns``, can from then on be known by
    an equal ``stat`` alone (the parse cache's file keys, a folder's listing): its last change was ``SETTLED_NS``
    before the check, so a write in the same tick of the file system's clock cannot have left every time equal,
    and any later change gives a later change time, which no call can set back. A change time before the
    modification time means a file system that does not keep change times (POSIX sets it on every write): never."""
    return mtime_ns <= ctime_ns < checked_ns - SETTLED_NS


def as_dict(value: object) -> dict:
    """``value`` if it is a dict, else an empty one: optional nested objects are often null or absent."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list:
    """``value`` if it is a list, else an empty one (content may be a string, null or absent)."""
    return value if isinstance(value, list) else []


def text(value: object) -> str | None:
    """A string field, or None: type tags and ids become set members and keys, so they must be strings."""
    return value if isinstance(value, str) else None


def int_or_none(value: object) -> int | None:
    """An integer field as the canonical columns accept it (bools and other types are not counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sum_or_none(values: Sequence[int | None]) -> int | None:
    """The sum of ``values``, or None if any of them is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def file_summary(path: Path, fmt: str, rows: list[dict], **extra: object) -> dict:
    """One ``attrs["files"]`` entry: what a file was read as and what came out of it."""
    return {"source_path": str(path), "format": fmt, "rows": len(rows), **extra}
