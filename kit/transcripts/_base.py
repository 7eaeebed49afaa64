"""What every reader shares: located issues, streamed JSON lines, and the result a reader returns.

Transcripts are written by processes that get killed, edited by hand and copied around, so a reader
never stops at a bad line: it reports the line's place and reads on (``strict`` turns the first
report into an exception instead, for pipelines that must not go on with a partial table).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

BOM = b"\xef\xbb\xbf"


class TranscriptError(ValueError):
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


@dataclass
class Parsed:
    """A reader's output: canonical request rows, tool-result rows and side tables for ``df.attrs``."""

    rows: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    attrs: dict[str, list] = field(
        default_factory=lambda: {k: [] for k in ("files", "events", "sidechain_ids", "crosscheck", "rate_limits")}
    )

    def extend(self, other: Parsed) -> None:
        self.rows += other.rows
        self.tools += other.tools
        for key, values in other.attrs.items():
            self.attrs.setdefault(key, []).extend(values)


def json_lines(path: Path, issues: Issues) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each JSON-object line, one line in memory at a time.

    Tolerates a UTF-8 BOM, CRLF endings and blank lines; reports invalid JSON, a truncated last line
    (no final newline: the writer was killed mid-line), non-object lines and an empty file.
    """
    seen_any = False
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            text = raw[len(BOM) :] if number == 1 and raw.startswith(BOM) else raw
            text = text.rstrip(b"\r\n")
            if not text.strip():
                continue
            seen_any = True
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                if raw.endswith(b"\n"):
                    issues.add(path, number, f"invalid JSON ({exc}); line skipped")
                else:
                    issues.add(path, number, "truncated last line (no final newline: writer killed?); line skipped")
                continue
            if not isinstance(obj, dict):
                issues.add(path, number, f"expected a JSON object, got {type(obj).__name__}; line skipped")
                continue
            yield number, obj
    if not seen_any:
        issues.add(path, 0, "empty file")


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


def file_summary(path: Path, fmt: str, rows: list[dict], **extra: object) -> dict:
    """One ``attrs["files"]`` entry: what a file was read as and what came out of it."""
    return {"source_path": str(path), "format": fmt, "rows": len(rows), **extra}
