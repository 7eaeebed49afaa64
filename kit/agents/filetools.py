"""The SDK agents' read-only file tools, confined to the task's fixture folder.

Paths are resolved (symlinks included) and must stay inside the root: a trial can never read
outside the repository it was given, whatever the model asks for.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

MAX_CHARS = 200_000

SPECS = [
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


class ToolError(Exception):
    """A tool call that cannot be served; its message goes back to the model as an error result."""


class FileTools:
    """Serves ``list_files``, ``read_file`` and ``grep`` over one root folder, read-only."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def call(self, name: str, args: dict) -> str:
        handler = {"list_files": self.list_files, "read_file": self.read_file, "grep": self.grep}.get(name)
        if handler is None:
            raise ToolError(f"unknown tool {name!r}")
        try:
            return handler(**args)
        except TypeError as exc:
            raise ToolError(f"bad arguments for {name}: {exc}") from exc

    def _inside(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if path != self.root and not path.is_relative_to(self.root):
            raise ToolError(f"{rel!r} is outside the repository")
        return path

    def list_files(self, path: str = ".") -> str:
        base = self._inside(path)
        if not base.is_dir():
            raise ToolError(f"{path!r} is not a directory")
        files = sorted(
            str(p.relative_to(self.root))
            for p in base.rglob("*")
            if p.is_file() and p.resolve().is_relative_to(self.root)
        )
        return "\n".join(files)

    def read_file(self, path: str) -> str:
        target = self._inside(path)
        if not target.is_file():
            raise ToolError(f"{path!r} is not a file")
        return target.read_text(errors="replace")[:MAX_CHARS]

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
