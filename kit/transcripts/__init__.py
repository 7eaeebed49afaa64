"""Transcript readers: every agent's record of its API calls, as canonical request rows (kit/schema.py).

One reader per format resolves its provider's usage convention once (``_usage``); this module finds
the files, tells their formats apart, skips a file whose content was already read, and assembles the
tables. Nothing unreadable is dropped silently: ``df.attrs["issues"]`` lists each problem with its
place (``source_line`` 0 is the file as a whole), and ``strict=True`` raises on the first one.

``df.attrs`` also carries what the canonical columns cannot: ``files`` (format, CLI version, counts per
file), ``events`` (compactions, errors, ``result`` events), ``sidechain_ids`` (responses of subagent
contexts, by source_path and cycle), ``repeats`` (copies of a response in another session file, as in
a resumed session's history: counted once, see ``claude_session``), ``crosscheck`` (a transcript's own
totals against the sum of its rows), ``rate_limits`` (Codex used-percent, first and last) and, for ``read``
and ``tables``, ``accounting`` (``kit.transcripts.accounting``: every input file, its rows or none and why,
so that no file leaves the table unsaid). Identity
columns (batch, arm, run, trial_id, turn) stay NA unless the source states them; the parse stage fills
them from meta.json.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from pathlib import Path

import pandas as pd

from kit import schema
from kit.errors import InputError
from kit.transcripts import accounting, readers
from kit.transcripts._base import Issues, Parsed, Shared, TranscriptError, gc_paused, settled
from kit.transcripts._detect import detect

FORMATS = readers.formats()  # the formats of the registry (``kit.transcripts.readers``), in detection order
SUFFIXES = (".jsonl", ".ndjson", ".txt")

__all__ = ["FORMATS", "TranscriptError", "detect", "read", "tables", "tool_results"]

Paths = str | Path | Iterable[str | Path]


def read(paths: Paths, format: str = "auto", strict: bool = False, cache: str | Path | None = None) -> pd.DataFrame:
    """Canonical request rows of every transcript in ``paths`` (files, or folders searched for *.jsonl/*.txt).

    Tool outputs are checked as JSON but not decoded: use ``tables`` where the tool results are wanted too.
    ``cache``: a folder for the incremental parse cache (``kit.transcripts.cache``): a re-read then reads
    only new and changed files, with the same result.
    """
    return _tables(paths, format, strict, False, cache)[0]


def tool_results(paths: Paths, format: str = "auto") -> pd.DataFrame:
    """One row per tool result (schema.TOOL_RESULT_COLUMNS); ``cycle`` is the first request carrying it."""
    return _tool_results(_parse(paths, format, strict=False, tools=True))


def tables(
    paths: Paths,
    format: str = "auto",
    strict: bool = False,
    cache: str | Path | None = None,
    tool_paths: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``read`` and ``tool_results`` of the same files in one pass; ``cache`` as in read. ``tool_paths`` adds each
    tool result's file (``source_path``), which the parse stage and a history need to tell a trial's or a
    session's files apart."""
    return _tables(paths, format, strict, True, cache, tool_paths)


def _tables(
    paths: Paths, format: str, strict: bool, tools: bool, cache: str | Path | None, tool_paths: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read in this process, or over several when many bytes are worth them (``parallel.workers``); through
    ``kit.transcripts.cache`` only with a cache folder, so that a plain read (a batch's parse stage) imports and
    runs none of it. With the cycle collector paused (``gc_paused``)."""
    from kit.transcripts import parallel

    _check_format(format)
    with gc_paused():
        files = _files(paths)
        if cache is not None:
            from kit.transcripts import cache as parse_cache

            found, tool_frame = parse_cache.tables(files, format, strict, tools, cache, tool_paths)
            return _accounted(files, found), tool_frame
        n = parallel.workers(sum(_size(p) for p in files))
        if n == 1:
            parsed = _parse(files, format, strict, tools)
            return _accounted(files, _requests(parsed)), _tool_results(parsed, tool_paths)
        issues = Issues(strict=strict)
        groups, order = group_files(files, format, issues)
        requests, tool_rows, tool_files, attrs = parallel.read_groups(groups, order, issues, tools, n)
        return _accounted(files, _requests(Parsed(attrs={**attrs, "issues": issues.items}), requests)), _tool_results(
            Parsed(tools=[], attrs={"issues": issues.items}), tool_paths, tool_rows, tool_files
        )


def _accounted(files: list[Path], df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``attrs["accounting"]`` (first): each input file's rows, or none and why (``accounting``)."""
    df.attrs = {"accounting": Shared(accounting.accounts(files, df)), **df.attrs}
    return df


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _requests(parsed: Parsed, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The request table of ``parsed`` (its rows, or ``frame`` where they were made elsewhere) with its attrs."""
    df = schema.requests_frame(parsed.rows) if frame is None else frame
    df.attrs = {k: Shared(v) for k, v in parsed.attrs.items()}
    return df


def _tool_results(
    parsed: Parsed, tool_paths: bool = False, frame: pd.DataFrame | None = None, files: list[str | None] | None = None
) -> pd.DataFrame:
    """The tool-result rows (of ``parsed``, or ``frame`` with each row's file in ``files``); ``tool_paths``: each
    with the file it was read from (``source_path``, NA where a result belongs to no one file: Codex exec turns
    are differenced across files), as the parse cache gives it."""
    df = schema.frame(parsed.tools, schema.TOOL_RESULT_COLUMNS, schema.TOOL_RESULT_DTYPES) if frame is None else frame
    if tool_paths:
        found = files if files is not None else [t.get("source_path") for t in parsed.tools]
        df = df.assign(source_path=pd.Series(found, dtype="string", index=df.index))
    df.attrs = {"issues": Shared(parsed.attrs["issues"])}
    return df


def _files(paths: Paths) -> list[Path]:
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    found: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            found += map(_path, sorted(_walk(str(item)), key=_parts_order))
        else:
            found.append(item)
    return found


def _parts_order(name: str) -> str:
    """A key that sorts names as ``Path`` sorts them, part by part: the separator becomes the one character
    below any a name can hold, so that one string comparison (in C) does what a list of parts would."""
    return name.replace(os.sep, "\0")


@functools.lru_cache(maxsize=1 << 17)
def _path(name: str) -> Path:
    """``Path(name)``, kept: pathlib parses each name anew, the largest cost of listing an unchanged history."""
    return Path(name)


def _walk(folder: str) -> list[str]:
    """The transcript files below ``folder``, in no order, as ``rglob`` finds them (symlinked folders not
    followed); ``os.scandir`` tells files apart without a ``stat`` each (a history holds thousands)."""
    found: list[str] = []
    todo = [folder]
    while todo:
        files, folders = _listing(todo.pop())
        found += files
        todo += folders
    return found


_LISTINGS: dict[str, tuple[tuple[int, int, int], list[str], list[str]]] = {}  # folder: (stat, files, folders)


def _listing(folder: str) -> tuple[list[str], list[str]]:
    """The transcript files and the folders (not symlinked) in ``folder``; the last listing where its ``stat``
    shows no change since.

    Adding, removing or renaming an entry changes its folder's modification and change times, so a
    settled folder (``_base.settled``, as the parse cache's file keys) whose ``stat`` is unchanged holds the
    same entries: listing every folder of a history again was most of ``_files`` (bench/parse.md). A folder
    holding a symlink is listed every time (its target can change from file to folder with the folder
    unchanged).
    """
    found = os.stat(folder)
    stamp = (found.st_mtime_ns, found.st_ctime_ns, found.st_ino)
    kept = _LISTINGS.get(folder)
    if kept is not None and kept[0] == stamp:
        return kept[1], kept[2]
    checked = time.time_ns()
    files: list[str] = []
    folders: list[str] = []
    linked = False
    with os.scandir(folder) as entries:
        for entry in entries:
            linked = linked or entry.is_symlink()
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.name.endswith(SUFFIXES) and entry.is_file() and "." in entry.name.lstrip("."):
                files.append(entry.path)
    if not linked and settled(found.st_mtime_ns, found.st_ctime_ns, checked):
        _LISTINGS[folder] = stamp, files, folders
    else:
        _LISTINGS.pop(folder, None)
    return files, folders


def _check_format(format: str) -> None:
    if format != "auto" and readers.get(format) is None:
        known = ", ".join(readers.formats())
        raise InputError(f"unknown transcript format {format!r}; expected 'auto' or one of {known}")


def _parse(paths: Paths, format: str, strict: bool, tools: bool) -> Parsed:
    _check_format(format)
    issues = Issues(strict=strict)
    groups, order = group_files(_files(paths), format, issues)
    out = Parsed()
    for fmt, group in groups.items():
        out.extend(readers.reader(fmt).read(group, issues, tools))
    out.rows.sort(key=lambda r: order[r["source_path"]])
    out.attrs["issues"] = issues.items
    return out


def group_files(
    files: list[Path],
    format: str,
    issues: Issues,
    head: Callable[[Path], str] | None = None,
    sizes: Sequence[int | None] | None = None,
    formats: Sequence[str | None] | None = None,
) -> tuple[dict[str, list[Path]], dict[str, int]]:
    """The files to read by format, skipping a file whose content was already given (reported), and each
    file's place in the row order: how every read groups its files (here, in one process or over several, and
    in the parse cache). The parse cache knows most of what this needs from its own checks: ``head``, the hash
    of a file's first block (``first_block_hash``); ``sizes`` and ``formats``, per file, its size and its
    format, None where not known (then ``stat`` and ``detect`` tell). A callback per file for these cost
    more than the rest of a warm call's grouping (bench/parse.md)."""
    groups: dict[str, list[Path]] = {}
    order: dict[str, int] = {}
    digests: dict[object, Path] = {}
    head = head or first_block_hash
    lengths, failed = _sizes(files, sizes)
    shared = _shared(files, lengths, head)
    formats = formats or [None] * len(files)
    for path, length, known in zip(files, lengths, formats, strict=True):
        try:
            if length < 0:
                raise failed[str(path)]
            digest = ("size", length) if length and length not in shared else _digest(path, length, shared, head)
            if digest in digests:
                issues.add(path, 0, f"duplicate of {digests[digest]} (same content); counted once")
                continue
            fmt = format if format != "auto" else known if known is not None else detect(path)
        except OSError as exc:
            issues.add(path, 0, f"cannot read: {exc}")
            continue
        except TranscriptError as exc:
            issues.add(path, exc.line, exc.reason)
            continue
        if digest is not None:
            digests[digest] = path
        order.setdefault(str(path), len(order))
        groups.setdefault(fmt, []).append(path)
    return groups, order


def _sizes(files: list[Path], known: Sequence[int | None] | None) -> tuple[list[int], dict[str, OSError]]:
    """Each file's size (``known``, else its ``stat``), -1 where it cannot be had, and why."""
    lengths: list[int] = []
    failed: dict[str, OSError] = {}
    for path, length in zip(files, known or [None] * len(files), strict=True):
        if length is None:
            try:
                length = _stat_size(path)
            except OSError as exc:
                failed[str(path)], length = exc, -1
        lengths.append(length)
    return lengths, failed


FIRST_BLOCK = 1 << 16


def _shared(files: list[Path], lengths: list[int], head: Callable[[Path], str]) -> set[object]:
    """The sizes, and (size, first-block hash) pairs, that more than one file has: only such files can be copies.

    Hashing every file would read a whole corpus once more before parsing it; most files differ in size,
    and files of the same size mostly differ in their first block already.
    """
    counts = Counter(lengths)
    shared: set[object] = {n for n, count in counts.items() if count > 1 and n >= 0}
    heads: set[tuple[int, str]] = set()
    for path, n in zip(files, lengths, strict=True):
        if n in shared:
            with suppress(OSError):
                key = (n, head(path))
                (shared if key in heads else heads).add(key)
    return shared


def _stat_size(path: Path) -> int:
    return os.stat(path).st_size


def first_block_hash(path: Path) -> str:
    """The SHA-256 of the file's first ``FIRST_BLOCK`` bytes: what tells files of one size apart (``_shared``)."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read(FIRST_BLOCK)).hexdigest()


def _digest(path: Path, length: int, shared: set[object], head: Callable[[Path], str]) -> object:
    """What identifies the file's content (of ``length`` bytes), for spotting the same transcript given twice;
    None if empty.

    The size where no other file has it, else the hash of the first block where no other file of that
    size starts the same, else the hash of the whole content (streamed).
    """
    if length == 0:
        return None
    if length not in shared:
        return ("size", length)
    first = head(path)
    if (length, first) not in shared:
        return ("head", length, first)
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
