"""Tool results as rows: which family a tool belongs to, and how many characters its result put in context.

Categories follow the occupancy method (docs/method.md#occupancy): file access is Read + Grep/Glob + shell, and shell
counts because agents often ``cat``/``grep`` through it. ``exec`` is Codex's command tool, ``explore``
directory listing and exploration tools; everything else is ``other``. Cycle convention, for every
format: a result's ``cycle`` is the first request that carries it, i.e. the calling response's
cycle + 1 (the provider log states it directly), so ``ctx[cycle] - ctx[cycle - 1]`` contains it.
"""

from __future__ import annotations

import re

CATEGORIES = ("read", "grep", "bash", "exec", "explore", "other")

_BY_NAME = {
    "read": {"read", "read_file", "notebookread", "view_image", "open_file"},
    "grep": {
        "grep",
        "glob",
        "search",
        "rg",
        "search_files",
        "find_files",
        "file_search",
        "ls",
        "list_files",
        "list_dir",
        "list_directory",
        "tree",
    },  # finding files: the Grep/Glob family of docs/method.md#occupancy
    "bash": {"bash", "bashoutput", "shell", "shell_command", "local_shell", "run_shell", "run_command"},
    "exec": {"exec_command", "exec", "write_stdin", "command_execution"},
    "explore": {"explore"},  # a code-exploration tool returning dense excerpts (like codegraph_explore)
}
_LOOKUP = {name: category for category, names in _BY_NAME.items() for name in names}


def category(name: object) -> str:
    """The family of a tool by name; MCP tools (``mcp__server__tool``) are judged by their last part."""
    if not isinstance(name, str):
        return "other"
    short = name.rsplit("__", 1)[-1].lower()
    if short in _LOOKUP:
        return _LOOKUP[short]
    return "explore" if "explore" in short else "other"


def text_of(content: object) -> str:
    """The text a result shows the model: a string, or the text parts of a content list, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(part.get("text") if isinstance(part, dict) else part) for part in content)
    if isinstance(content, dict):
        return text_of(content.get("text", content.get("content")))
    return ""


def text_chars(content: object) -> int:
    """Characters of text a result shows the model (``text_of``)."""
    return len(text_of(content))


_EXIT = re.compile(r"(?:Process exited with code|Exit code:?)\s*(-?\d+)")


def exit_failed(text: str) -> bool:
    """Whether a shell result's text reports a non-zero exit status (Codex writes it in the output)."""
    match = _EXIT.search(text[:4096])
    return match is not None and int(match.group(1)) != 0


def result_row(
    cycle: int | None,
    name: object,
    chars: int | None,
    is_error: bool,
    trial_id: str | None = None,
    block: tuple[int | None, int | None] = (None, None),
    path: str | None = None,
) -> dict:
    """One tool result; ``block``: its framing characters and its ``o200k_base`` tokens (``result_block``),
    None where unknown; ``path``: the file it was read from, where one file holds it (``tables(tool_paths=True)``:
    the canonical table leaves it out)."""
    return {
        "source_path": path,
        "trial_id": trial_id,
        "cycle": cycle,
        "tool": name,
        "category": category(name),
        "chars": chars,
        "framing_chars": block[0],
        "o200k_tokens": block[1],
        "is_error": is_error,
    }
