"""Reading files through whichever tools the client offers.

A scripted policy must behave like a coding agent in every client: the kit's SDK agents offer
``read_file``, Codex offers ``exec_command``, Claude Code offers ``Read`` and ``Bash``. This module
turns "read these paths" into that client's tool calls, and the tool results of a conversation
back into file contents, so a pack's policy is written once.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from kit.provider.policy import Conversation, Message, ToolCall

_CWD = re.compile(r"(?:Primary working directory|[Ww]orking directory|cwd)\s*[:=]\s*(/[^\s`'\"<>]+)")
_NUMBERED = re.compile(r"^\s*\d+\t", re.MULTILINE)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def working_directory(conv: Conversation) -> str | None:
    """The absolute working directory the client announced (Claude Code's environment block)."""
    for text in (conv.system, *(m.text for m in conv.messages if m.role in ("system", "user"))):
        match = _CWD.search(text)
        if match:
            return match.group(1).rstrip(".,;")
    return None


def can_read(conv: Conversation) -> bool:
    return bool(conv.tool_names() & {"read_file", "exec_command", "Read", "Bash"})


def read_call(conv: Conversation, path: str) -> ToolCall:
    """One tool call that shows the file at ``path`` (relative to the repository root)."""
    names = conv.tool_names()
    if "read_file" in names:
        return ToolCall("read_file", {"path": path})
    if "exec_command" in names:
        return ToolCall("exec_command", {"cmd": f"cat {shlex.quote(path)}", "login": False})
    cwd = working_directory(conv)
    if "Read" in names and cwd:
        return ToolCall("Read", {"file_path": posixpath.join(cwd, path)})
    if "Bash" in names:
        return ToolCall("Bash", {"command": f"cat {shlex.quote(path)}", "description": f"Show {path}"})
    raise LookupError(f"no file-reading tool among {sorted(names)}")


def requested_path(conv: Conversation, call: ToolCall) -> str | None:
    """The repository-relative path a read call asked for, or None for other calls."""
    args = call.arguments
    if call.name == "read_file":
        return str(args.get("path", "")) or None
    if call.name in ("exec_command", "Bash"):
        words = _words(str(args.get("cmd") or args.get("command") or ""))
        return words[1] if len(words) == 2 and words[0] == "cat" else None
    if call.name == "Read":
        path = str(args.get("file_path", ""))
        cwd = working_directory(conv)
        return posixpath.relpath(path, cwd) if cwd and path.startswith(cwd) else path or None
    return None


def file_contents(conv: Conversation) -> dict[str, str]:
    """Every file read so far (successful results only), cleaned of the client's decorations."""
    out: dict[str, str] = {}
    for call, result in conv.results():
        path = requested_path(conv, call)
        if path and not result.is_error:
            out[path] = _clean(call, result)
    return out


def _clean(call: ToolCall, result: Message) -> str:
    text = result.text
    if call.name == "exec_command" and "\nOutput:\n" in text:
        text = text.split("\nOutput:\n", 1)[1]
    if call.name == "Read":
        text = _NUMBERED.sub("", _REMINDER.sub("", text))
    return text


def _words(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError:
        return []
