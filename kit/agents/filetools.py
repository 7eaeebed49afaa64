"""The SDK agents' read-only file tools, confined to the task's fixture folder.

Paths are resolved (symlinks included) and must stay inside the root: a trial can never read
outside the repository it was given, whatever the model asks for (``..``, absolute paths, symlinks
out of the root, symlink loops and NUL bytes are refused as tool errors, which the model sees; a
listing leaves out what resolves elsewhere). A file is read only up to what a reply can hold.

``SPECS`` are offered to every trial. ``EXTRA_SPECS`` are offered only to arms that list them in
``Arm.tools``: ``explore`` is a code-exploration tool in the style of codegraph's (docs/method.md#occupancy) that
answers a symbol or a few words with the best-matching definitions as dense, line-numbered excerpts
plus the lines that reference them, so an agent gets the relevant code without reading whole files.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypedDict

from kit.errors import InputError, KitError

MAX_CHARS = 200_000
EXPLORE_LIMIT = 4  # definitions shown by default
EXPLORE_BLOCK_LINES = 40  # longest excerpt of one definition
EXPLORE_REFERENCES = 20
EXPLORE_MAX_FILE_BYTES = 1_000_000


class ToolSpec(TypedDict):
    """One tool as the kit offers it; each API's tool definition is built from these three fields."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments


SPECS: list[ToolSpec] = [
    {
        "name": "list_files",
        "description": "List files under a directory of the repository (recursive, relative paths).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "directory, default '.'"}},
            "required": [],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "file path relative to the repository"}},
            "required": ["path"],
        },
    },
    {
        "name": "grep",
        "description": "Search files for a regular expression; returns path:line:text matches.",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "glob": {"type": "string", "description": "file glob, default '*'"},
            },
            "required": ["pattern"],
        },
    },
]


EXTRA_SPECS: dict[str, ToolSpec] = {
    "explore": {
        "name": "explore",
        "description": (
            "Explore the code for a symbol name or a few words: returns the best-matching definitions as "
            "line-numbered source excerpts, then the lines that reference them. Prefer it to reading whole files."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "a symbol name or a few words"},
                "limit": {"type": "integer", "description": f"definitions to show, default {EXPLORE_LIMIT}"},
            },
            "required": ["query"],
        },
    },
}
_DEF = re.compile(r"^(\s*)(?:async\s+def|def|class|function|func|type|fn)\s+([A-Za-z_]\w*)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD_PART = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_STOP = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for", "from", "how", "in",
    "into", "is", "it", "its", "of", "on", "or", "should", "that", "the", "then", "this", "to", "was", "what",
    "when", "where", "which", "with", "would",
))  # fmt: skip


class ToolError(KitError):
    """A tool call that cannot be served; its message goes back to the model as an error result."""


class FileTools:
    """Serves ``list_files``, ``read_file`` and ``grep`` over one root folder, read-only, plus the
    ``extra`` tools (names of ``EXTRA_SPECS``) the trial's arm offers."""

    def __init__(self, root: Path, extra: tuple[str, ...] = ()) -> None:
        self.root = root.resolve()
        unknown = sorted(set(extra) - set(EXTRA_SPECS))
        if unknown:
            raise InputError(f"unknown extra tools {unknown}; accepted: {sorted(EXTRA_SPECS)}")
        self.extra = tuple(extra)

    def call(self, name: str, args: dict) -> str:
        handlers: dict[str, Callable[..., str]] = {
            "list_files": self.list_files,
            "read_file": self.read_file,
            "grep": self.grep,
        }
        if "explore" in self.extra:
            handlers["explore"] = self.explore
        handler = handlers.get(name)
        if handler is None:
            raise ToolError(f"unknown tool {name!r}")
        try:
            return handler(**args)
        except TypeError as exc:
            raise ToolError(f"bad arguments for {name}: {exc}") from exc

    def _inside(self, rel: str) -> Path:
        try:
            path = (self.root / rel).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an embedded NUL byte
            raise ToolError(f"{rel!r} cannot be resolved: {exc}") from None
        if path != self.root and not path.is_relative_to(self.root):
            raise ToolError(f"{rel!r} is outside the repository")
        return path

    def _listed(self, path: Path) -> bool:
        try:
            return path.is_file() and path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False

    def list_files(self, path: str = ".") -> str:
        base = self._inside(path)
        if not base.is_dir():
            raise ToolError(f"{path!r} is not a directory")
        return "\n".join(sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if self._listed(p)))

    def read_file(self, path: str) -> str:
        target = self._inside(path)
        if not target.is_file():
            raise ToolError(f"{path!r} is not a file")
        with target.open(errors="replace") as handle:  # never the whole of a huge file
            return handle.read(MAX_CHARS)

    def grep(self, pattern: str, glob: str = "*") -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"bad pattern: {exc}") from exc
        hits = []
        for rel in self.list_files().splitlines():
            if not fnmatch.fnmatch(rel, glob):
                continue
            for i, line in enumerate(self.read_file(rel).splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{rel}:{i}:{line}")
        return "\n".join(hits)[:MAX_CHARS]

    def explore(self, query: str, limit: int = EXPLORE_LIMIT) -> str:
        """Best-matching definitions for ``query`` as line-numbered excerpts, then their references."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 20:
            raise ToolError(f"limit must be an integer from 1 to 20, got {limit!r}")
        terms = _terms(str(query)) - _STOP
        if not terms:
            raise ToolError("query needs at least one word or symbol name")
        sources = self._sources
        chosen = _best_definitions(sources, str(query).strip(), terms, limit)
        if not chosen:
            return _matching_lines(sources, str(query), terms)
        parts = []
        for d in chosen:
            lines = sources[d.path][d.start - 1 : d.end]
            parts.append(f"{d.path}:{d.start}-{d.end} {d.name}")
            parts += [f"{d.start + i} {line}" for i, line in enumerate(lines) if line.strip()]
        refs = _references(sources, chosen)
        head = f"explore {query!r}: {len(chosen)} definitions, {len(refs)} references"
        return "\n".join([head, *parts, *(["references:", *refs] if refs else [])])[:MAX_CHARS]

    @cached_property
    def _sources(self) -> dict[str, list[str]]:
        """Every text file of the repository (hidden folders, binaries and huge files skipped) as lines;
        read once per trial (the repository is read-only)."""
        out = {}
        for rel in self.list_files().splitlines():
            path = self.root / rel
            if any(part.startswith(".") for part in Path(rel).parts) or path.stat().st_size > EXPLORE_MAX_FILE_BYTES:
                continue
            data = path.read_bytes()
            if b"\0" not in data:
                out[rel] = data.decode(errors="replace").splitlines()
        return out


@dataclass(frozen=True)
class _Definition:
    path: str
    name: str
    start: int  # 1-based, inclusive
    end: int
    score: int


def _terms(text: str) -> set[str]:
    """Lower-case words of a query or a name: ``run_chain`` and ``runChain`` both give {run, chain}."""
    return {w.lower() for ident in _IDENT.findall(text) for w in _WORD_PART.findall(ident) if len(w) > 1}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _definitions(path: str, lines: list[str]) -> list[tuple[str, int, int]]:
    """(name, start, end) of each definition: its line through the end of its indented block."""
    out = []
    for i, line in enumerate(lines):
        match = _DEF.match(line)
        if not match:
            continue
        end = i
        for j in range(i + 1, min(len(lines), i + EXPLORE_BLOCK_LINES)):
            if lines[j].strip() and _indent(lines[j]) <= len(match.group(1)) and not lines[j].lstrip().startswith(")"):
                break
            if lines[j].strip():
                end = j
        out.append((match.group(2), i + 1, end + 1))
    return out


def _best_definitions(sources: dict[str, list[str]], query: str, terms: set[str], limit: int) -> list[_Definition]:
    """The ``limit`` best definitions, shown in file order: ranked by an exact name first, then by the
    query words in the name (each x3) and in the body; one nested in an already chosen one is skipped."""
    found = []
    for path, lines in sources.items():
        for name, start, end in _definitions(path, lines):
            body = _terms("\n".join(lines[start - 1 : end]))
            score = 3 * len(terms & _terms(name)) + len(terms & body) + (100 if name == query else 0)
            if score > 1 or name == query:
                found.append(_Definition(path, name, start, end, score))
    found.sort(key=lambda d: (-d.score, d.path, d.start))
    chosen: list[_Definition] = []
    for d in found:
        if len(chosen) == limit:
            break
        if not any(c.path == d.path and c.start <= d.start and d.end <= c.end for c in chosen):
            chosen.append(d)
    return sorted(chosen, key=lambda d: (d.path, d.start))


def _references(sources: dict[str, list[str]], chosen: list[_Definition]) -> list[str]:
    """Lines naming a chosen definition outside the excerpts shown, as ``path:line text``."""
    names = re.compile(r"\b(?:" + "|".join(sorted({re.escape(d.name) for d in chosen})) + r")\b")
    refs = []
    for path, lines in sorted(sources.items()):
        for i, line in enumerate(lines, 1):
            inside = any(d.path == path and d.start <= i <= d.end for d in chosen)
            if not inside and names.search(line):
                refs.append(f"{path}:{i} {line.strip()}")
                if len(refs) == EXPLORE_REFERENCES:
                    return refs
    return refs


def _matching_lines(sources: dict[str, list[str]], query: str, terms: set[str]) -> str:
    """No definition matches: the lines that contain a query word, as ``path:line text``."""
    hits = [
        f"{path}:{i} {line.strip()}"
        for path, lines in sorted(sources.items())
        for i, line in enumerate(lines, 1)
        if terms & _terms(line)
    ][: EXPLORE_REFERENCES + 10]
    if not hits:
        return f"explore {query!r}: nothing matches"
    return "\n".join([f"explore {query!r}: no definitions; {len(hits)} matching lines", *hits])
