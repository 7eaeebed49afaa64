"""Reading files through whichever tools the client offers.

A scripted policy must behave like a coding agent in every client: the kit's SDK agents offer
``read_file``, Codex offers ``exec_command``, Claude Code offers ``Read`` and ``Bash``. This module
turns "read these paths" into that client's tool calls, and the tool results of a conversation
back into file contents, so a pack's policy is written once. Searches (``grep``, ``Grep``, ``grep -rnE``
through a shell) and the SDK agents' ``explore`` tool are handled the same way, and ``seen_lines`` /
``blocks`` give a policy the source it has in context, whichever way it got there.

Codex with Code Mode on (``features.code_mode``, kit/agents/codex.py) also offers ``exec``, a custom
tool whose input is a JavaScript cell; Codex runs the cell and the ``tools.<name>(…)`` calls in it
itself, and answers with the cell's ``text(…)`` output. ``read_cell`` writes such a cell and
``file_contents`` reads the files back out of its output. On Codex's ``code_mode_only`` models (the
GPT-5.6 family) ``exec`` is the only tool that runs a command, so every read and search is a cell.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass

from kit.provider.policy import Conversation, Message, ToolCall

_CWD = re.compile(r"(?:Primary working directory|[Ww]orking directory|cwd)\s*[:=]\s*(/[^\s`'\"<>]+)")
_NUMBERED = re.compile(r"^\s*\d+\t", re.MULTILINE)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def _working_directory(conv: Conversation) -> str | None:
    """The absolute working directory the client announced (Claude Code's environment block)."""
    for text in (conv.system, *(m.text for m in conv.messages if m.role in ("system", "user"))):
        match = _CWD.search(text)
        if match:
            return match.group(1).rstrip(".,;")
    return None


def can_read(conv: Conversation) -> bool:
    return bool(conv.tool_names() & {"read_file", "exec_command", "Read", "Bash", CELL_TOOL})


def read_call(conv: Conversation, path: str) -> ToolCall:
    """One tool call that shows the file at ``path`` (relative to the repository root)."""
    names = conv.tool_names()
    if cells_only(conv):
        return read_cell([path])
    if "read_file" in names:
        return ToolCall("read_file", {"path": path})
    if "exec_command" in names:
        return ToolCall("exec_command", {"cmd": f"cat {shlex.quote(path)}", "login": False})
    cwd = _working_directory(conv)
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
        cwd = _working_directory(conv)
        return posixpath.relpath(path, cwd) if cwd and path.startswith(cwd) else path or None
    return None


def _reads(conv: Conversation) -> list[tuple[str, str | None]]:
    """Every (path, content) read so far in order; content None where the read failed."""
    out: list[tuple[str, str | None]] = []
    for call, result in conv.results():
        if call.name == CELL_TOOL:
            out += cell_reads(call, result).items()
            continue
        path = requested_path(conv, call)
        if path:
            out.append((path, None if result.is_error else _clean(call, result)))
    return out


def file_contents(conv: Conversation) -> dict[str, str]:
    """Every file read so far (successful results only), cleaned of the client's decorations."""
    return {path: text for path, text in _reads(conv) if text is not None}


def failed_reads(conv: Conversation) -> dict[str, int]:
    """How many times each path's read came back as an error (so a policy can stop retrying)."""
    out: dict[str, int] = {}
    for path, text in _reads(conv):
        if text is None:
            out[path] = out.get(path, 0) + 1
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


# ---------------------------------------------------------------- Code Mode cells (Codex ``exec``)

CELL_TOOL = "exec"
_CELL_READ = re.compile(r"\btools\.exec_command\((\{.*?\})\)")
_CELL_HEAD = re.compile(r"^==> (.+) \(exit (-?\d+)\) <==$", re.MULTILINE)
_CUT = re.compile(r"…\d+ (?:tokens|chars) truncated…")
_OMITTED = re.compile(r"\n?^\[omitted \d+ text items \.\.\.\]$", re.MULTILINE)


def code_mode(conv: Conversation) -> bool:
    """Whether the client offers Codex's Code Mode tool ``exec`` (the kit's SDK agents, which offer
    ``read_file``, never do): a policy then reads through cells, as a model given the tool would."""
    names = conv.tool_names()
    return CELL_TOOL in names and "read_file" not in names


def cells_only(conv: Conversation) -> bool:
    """Whether ``exec`` is the only way to run a command: Codex's ``code_mode_only`` models (its catalog's
    ``tool_mode`` for the GPT-5.6 family) nest ``exec_command`` and the rest inside the cell runtime, so every
    read and search is a cell."""
    return code_mode(conv) and "exec_command" not in conv.tool_names()


def read_cell(paths: list[str] | tuple[str, ...]) -> ToolCall:
    """One ``exec`` cell that reads ``paths``: one awaited ``tools.exec_command`` call for one path,
    ``Promise.all`` over one explicit call per path for several (so the cell's ``tools.*(`` calls count
    its reads), each output printed under a ``==> path (exit N) <==`` header, the way ``head`` shows
    several files."""
    calls = [f"tools.exec_command({json.dumps({'cmd': f'cat {shlex.quote(p)}', 'login': False})})" for p in paths]
    if len(calls) == 1:
        lines = [f"const results = [await {calls[0]}];"]
    else:
        lines = ["const results = await Promise.all([", *(f"  {c}," for c in calls), "]);"]
    lines += [
        f"const paths = {json.dumps(list(paths))};",
        "results.forEach((r, i) => text(`==> ${paths[i]} (exit ${r.exit_code}) <==\\n${r.output}`));",
    ]
    return ToolCall(CELL_TOOL, {"input": "\n".join(lines) + "\n"})


def cell_reads(call: ToolCall, result: Message) -> dict[str, str | None]:
    """Each path a ``read_cell`` asked for and its content from the cell's output; None where the read
    failed or the cell printed nothing ("Script failed").

    Codex caps each tool output in the model's context (``tool_output_token_limit``; measured on 0.169.0
    with the kit's model: a cell's 17.6 KB output reached the request as about 12 KB, while the rollout
    kept all of it): a cell's outputs share that one budget, where separate calls get one each. In a cell
    of several reads, a read cut in the middle ("…N tokens truncated…") or dropped ("[omitted N text items
    ...]") is left out, neither read nor failed, so a policy reads it again as a model that saw the marker
    would; a cell of one read is taken as cut, like a single call's output.
    """
    return _cell_output(call, result)[0]


def cell_capacity(conv: Conversation) -> int | None:
    """How many reads came through whole in the most crowded cut cell so far (at least 1), or None if no
    cell was cut: a model that saw its cell cut puts fewer reads in the next one."""
    counts = []
    for call, result in conv.results():
        if call.name == CELL_TOOL:
            reads, cut = _cell_output(call, result)
            if cut:
                counts.append(sum(text is not None for text in reads.values()))
    return max(1, min(counts)) if counts else None


def _cell_output(call: ToolCall, result: Message) -> tuple[dict[str, str | None], bool]:
    """``cell_reads`` and whether Codex cut the cell's output (see there)."""
    asked = [_cat_path(m.group(1)) for m in _CELL_READ.finditer(str(call.arguments.get("input", "")))]
    text, omitted = _OMITTED.subn("", result.text)
    heads = list(_CELL_HEAD.finditer(text))
    found: dict[str, str | None] = {}
    for i, head in enumerate(heads):
        last = i + 1 == len(heads)
        body = text[head.end() + 1 : len(text) if last else heads[i + 1].start()]
        body = body if last else body.removesuffix("\n")  # the newline that joins two text items
        if len(asked) == 1 or not _CUT.search(body):
            found[head.group(1)] = body if head.group(2) == "0" else None
    cut = len(asked) > 1 and (omitted > 0 or len(found) < len(heads))
    return {path: found.get(path) for path in asked if path and (path in found or not cut)}, cut


def _cell_commands(call: ToolCall) -> list[str]:
    """The command of each ``tools.exec_command({"cmd": …})`` call a cell makes, in order."""
    return [_cell_command(m.group(1)) for m in _CELL_READ.finditer(str(call.arguments.get("input", "")))]


def _cell_command(raw: str) -> str:
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError:
        return ""
    return str(arguments.get("cmd", "")) if isinstance(arguments, dict) else ""


def _cat_path(raw: str) -> str | None:
    """The path of a cell's ``tools.exec_command({"cmd": "cat PATH", …})`` call (None for any other call)."""
    words = _words(_cell_command(raw))
    return words[1] if len(words) == 2 and words[0] == "cat" else None


# ---------------------------------------------------------------- searching and exploring

_GREP_LINE = re.compile(r"^(.+?):(\d+):(.*)$")
_EXPLORE_HEAD = re.compile(r"^(\S+):(\d+)-(\d+) \S+$")
_EXPLORE_LINE = re.compile(r"^(\d+) (.*)$")


def _explore_name(names: set[str]) -> str | None:
    """The exploration tool offered: ``explore`` (SDK agents) or an MCP tool named ``…__explore``."""
    return next((n for n in sorted(names) if n == "explore" or n.endswith("__explore")), None)


_DEFERRED_INTRO = 'Use ToolSearch with query "select:'


def deferred_tools(conv: Conversation) -> set[str]:
    """Tools Claude Code names but defers behind ToolSearch (its MCP tools, by default).

    Measured on 2.1.328: the environment message lists them one per line after "Use ToolSearch with
    query "select:<name>[,<name>...]" to load tool schemas before calling them:"; a ToolSearch call with
    ``select:<name>`` puts the tool in the next request's ``tools``.
    """
    if "ToolSearch" not in conv.tool_names():
        return set()
    text = conv.all_text()
    start = text.find(_DEFERRED_INTRO)
    if start < 0:
        return set()
    names = text[text.index("\n", start) + 1 :].split("\n\n", 1)[0]
    return {line.strip() for line in names.splitlines() if line.strip()}


def _loadable_explore(conv: Conversation) -> str | None:
    """A deferred exploration tool that ToolSearch has not been asked for yet (asking twice would loop)."""
    name = _explore_name(deferred_tools(conv))
    asked = {str(c.arguments.get("query")) for m in conv.messages for c in m.tool_calls if c.name == "ToolSearch"}
    return name if name and f"select:{name}" not in asked else None


def can_explore(conv: Conversation) -> bool:
    return _explore_name(conv.tool_names()) is not None or _loadable_explore(conv) is not None


def explore_call(conv: Conversation, query: str, limit: int | None = None) -> ToolCall:
    """One call of the client's exploration tool for a symbol or a few words (first loading it if deferred)."""
    name = _explore_name(conv.tool_names())
    if name is None:
        deferred = _loadable_explore(conv)
        if deferred is None:
            raise LookupError(f"no explore tool among {sorted(conv.tool_names())}")
        return ToolCall("ToolSearch", {"query": f"select:{deferred}", "max_results": 5})
    return ToolCall(name, {"query": query, **({"limit": limit} if limit else {})})


def can_grep(conv: Conversation) -> bool:
    return bool(conv.tool_names() & {"grep", "Grep", "exec_command", "Bash"}) or cells_only(conv)


def grep_call(conv: Conversation, pattern: str) -> ToolCall:
    """One recursive search for an extended regular expression (``a|b``), with line numbers."""
    names = conv.tool_names()
    if cells_only(conv):
        command = json.dumps({"cmd": f"grep -rnE {shlex.quote(pattern)} .", "login": False})
        return ToolCall(CELL_TOOL, {"input": f"const r = await tools.exec_command({command});\ntext(r.output);\n"})
    if "grep" in names:
        return ToolCall("grep", {"pattern": pattern})
    if "exec_command" in names:
        return ToolCall("exec_command", {"cmd": f"grep -rnE {shlex.quote(pattern)} .", "login": False})
    if "Grep" in names:
        return ToolCall("Grep", {"pattern": pattern, "output_mode": "content", "-n": True})
    if "Bash" in names:
        return ToolCall("Bash", {"command": f"grep -rnE {shlex.quote(pattern)} .", "description": "Search the code"})
    raise LookupError(f"no search tool among {sorted(names)}")


def words_pattern(text: str) -> str:
    """A search for the three longest words of a question (what an agent without a script looks for first)."""
    words = sorted(set(re.findall(r"[A-Za-z_]{5,}", text)), key=lambda w: (-len(w), w))[:3]
    return "|".join(re.escape(w) for w in words) or "def "


def is_search(call: ToolCall) -> bool:
    """Whether a call is a recursive search (``grep_call`` in any client's form)."""
    if call.name in ("grep", "Grep"):
        return True
    if call.name in ("exec_command", "Bash"):
        return _words(str(call.arguments.get("cmd") or call.arguments.get("command") or ""))[:1] == ["grep"]
    if call.name == CELL_TOOL:
        return any(_words(cmd)[:1] == ["grep"] for cmd in _cell_commands(call))
    return False


def grep_hits(conv: Conversation, results: list[tuple[ToolCall, Message]] | None = None) -> list[tuple[str, int, str]]:
    """Every (repository-relative path, line, text) a search returned, in ``results`` (default: all of them)."""
    cwd = _working_directory(conv)
    hits = []
    for call, result in conv.results() if results is None else results:
        if result.is_error or not is_search(call):
            continue
        for line in _clean(call, result).splitlines():
            match = _GREP_LINE.match(line)
            if match:
                path = match.group(1)
                if cwd and path.startswith(cwd + "/"):
                    path = path[len(cwd) + 1 :]
                hits.append((path.removeprefix("./"), int(match.group(2)), match.group(3)))
    return hits


def seen_lines(conv: Conversation) -> dict[str, dict[int, str]]:
    """Source lines in this conversation's context by path and line number: whole files read, plus the
    line-numbered excerpts of exploration results (their reference lists are left out: they lose indentation)."""
    seen: dict[str, dict[int, str]] = {}
    for path, text in file_contents(conv).items():
        seen.setdefault(path, {}).update(enumerate(text.splitlines(), 1))
    name = _explore_name(conv.tool_names()) or "explore"
    for call, result in conv.results():
        if call.name != name or result.is_error:
            continue
        excerpt_of: str | None = None  # the file whose excerpt the next numbered lines belong to
        for line in result.text.splitlines():
            if line == "references:":
                break
            if head := _EXPLORE_HEAD.match(line):
                excerpt_of = head.group(1)
            elif excerpt_of and (numbered := _EXPLORE_LINE.match(line)):
                seen.setdefault(excerpt_of, {})[int(numbered.group(1))] = numbered.group(2)
    return seen


# ---------------------------------------------------------------- turns and definitions


def current_question(conv: Conversation, questions: list[str] | tuple[str, ...]) -> int | None:
    """Index of the question the latest user message asks: the one written last in it, since a fresh
    session's first message quotes the earlier questions in its summary before the new one."""
    text = conv.last_user_text()
    found = [(text.rfind(q), i) for i, q in enumerate(questions) if q and q in text]
    return max(found)[1] if found else None


def results_this_turn(conv: Conversation) -> list[tuple[ToolCall, Message]]:
    """Tool results since the latest user message (the current turn's own work)."""
    last_user = max((i for i, m in enumerate(conv.messages) if m.role == "user" and m.text), default=-1)
    calls = conv.calls_by_id()
    return [
        (calls[m.tool_call_id], m)
        for m in conv.messages[last_user + 1 :]
        if m.role == "tool" and m.tool_call_id in calls
    ]


@dataclass(frozen=True)
class Block:
    """A Python definition as seen in context: its path, name, first line and the seen lines of its body."""

    path: str
    name: str
    line: int
    lines: tuple[tuple[int, str], ...]

    @property
    def text(self) -> str:
        return "\n".join(t for _, t in self.lines)


def blocks(seen: dict[str, dict[int, str]]) -> list[Block]:
    """Every ``def``/``class`` in the seen lines with its body: the lines after it that are indented deeper
    (or blank), stopping at a gap of more than 3 unseen lines (an excerpt of some other place)."""
    out = []
    for path, lines in sorted(seen.items()):
        numbers = sorted(lines)
        for i, n in enumerate(numbers):
            match = _PY_DEF.match(lines[n])
            if not match:
                continue
            body, prev = [(n, lines[n])], n
            for k in numbers[i + 1 :]:
                text = lines[k]
                if k - prev > 4 or (text.strip() and len(text) - len(text.lstrip()) <= len(match.group(1))):
                    break
                body.append((k, text))
                prev = k
            out.append(Block(path, match.group(2), n, tuple(body)))
    return out


def definitions_answer(seen: dict[str, dict[int, str]]) -> str:
    """What a careful agent says to a question it has no script for: the definitions it looked at."""
    defs = blocks(seen)
    if not defs:
        return "I found nothing relevant to the question in what I read."
    shown = [f"- `{b.name}` ({b.path}:{b.line})" for b in defs[:20]]
    return "\n".join(["From what I read, the relevant definitions are:", *shown])


_PY_DEF = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+([A-Za-z_]\w*)")
