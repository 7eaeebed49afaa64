"""A tiny stdio MCP server: how the kit puts its own tools into a CLI's tool list.

Neither CLI has a flag that adds a function tool, but both load MCP servers. Two uses:

- ``cache-bust NAME``: the trial's ``cache_bust_<id>`` (docs/method.md#isolation), described "Never call this tool." and
  answering ``{"success": true}`` if a model calls it anyway, so a trial never fails because of it.
  Standard library only, so it starts in milliseconds with whatever Python runs the kit.
- ``kit-tools WORKDIR TOOL…``: the kit's extra tools (``Arm.tools``, e.g. ``explore``) over the work
  dir, with the SDK agents' own implementation and confinement (kit/agents/filetools.py), so an arm
  offers the same tool whichever agent runs it.

Protocol: newline-delimited JSON-RPC 2.0 over stdin/stdout (MCP's stdio transport), implementing
``initialize``, ``ping``, ``tools/list`` and ``tools/call``; notifications are accepted silently. A
tool's own failure (a path outside the work dir, say) is a result with ``isError``, which the model sees.

Usage: ``python kit/agents/mcp_server.py cache-bust cache_bust_<id>`` or
``python kit/agents/mcp_server.py kit-tools /path/to/workdir explore`` (the file path, as the CLIs start it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kit.jsontypes import JsonObject

if TYPE_CHECKING:  # not at run time: the cache-bust server imports nothing from the package
    from kit.agents.base import TrialSpec

PROTOCOL = "2025-06-18"
CACHE_BUST_SERVER, KIT_SERVER = "cachebust", "kit"
CACHE_BUST_DESCRIPTION = "Never call this tool."
CACHE_BUST_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}


def servers(spec: TrialSpec) -> dict[str, list[str]]:
    """The MCP servers a trial gives its CLI, by name: each one's arguments for ``sys.executable``."""
    found = {}
    if spec.cache_bust_tool:
        found[CACHE_BUST_SERVER] = [__file__, "cache-bust", spec.cache_bust_tool]
    if spec.arm.tools:
        found[KIT_SERVER] = [__file__, "kit-tools", str(spec.workdir.resolve()), *spec.arm.tools]
    return found


def tool_name(server: str, tool: str) -> str:
    """The name a client gives an MCP tool (Claude Code's, and the embedded provider's for Codex's)."""
    return f"mcp__{server}__{tool}"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    call: Callable[[dict[str, Any]], tuple[str, bool]]  # arguments -> (text, whether it is an error)


CACHE_BUST_RESULT = json.dumps({"success": True})
CALLS_KEY = "cache_bust_tool.calls"  # meta ``versions``: how often the dummy tool was called, what each call got


def calls_record(answers: list[str]) -> dict[str, str]:
    """The trial's record of its dummy-tool calls (``CALLS_KEY``), from what each call answered the model, in
    order; nothing when it was never called. Each distinct answer once, with its count: ``1 call, answered
    {"success": true}``; a refusal ("MCP tool call requires approval") would show here as the answer."""
    if not answers:
        return {}
    counts = {a: answers.count(a) for a in answers}
    shown = "; ".join(a if len(counts) == 1 else f"{a} ({n})" for a, n in counts.items())
    return {CALLS_KEY: f"{len(answers)} call{'s' if len(answers) > 1 else ''}, answered {shown}"[:500]}


def result_text(content: object) -> str:
    """A tool result's text as a transcript keeps it: a string, or the text of each block of a list (Claude Code's
    ``text`` blocks, Codex's ``input_text`` items), joined by newlines."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and "text" in b)


def cache_bust(name: str) -> dict[str, Tool]:
    return {name: Tool(name, CACHE_BUST_DESCRIPTION, CACHE_BUST_SCHEMA, lambda _: (CACHE_BUST_RESULT, False))}


def kit_tools(workdir: str, names: list[str]) -> dict[str, Tool]:
    """The kit's extra tools over ``workdir`` (imported here: the cache-bust server needs no package import)."""
    from kit.agents.filetools import EXTRA_SPECS, FileTools, ToolError

    files = FileTools(Path(workdir), tuple(names))  # refuses an unknown tool before the CLI asks for any

    def caller(name: str) -> Callable[[dict[str, Any]], tuple[str, bool]]:
        def call(arguments: dict[str, Any]) -> tuple[str, bool]:
            try:
                return files.call(name, arguments), False
            except ToolError as exc:
                return str(exc), True

        return call

    return {n: Tool(n, EXTRA_SPECS[n]["description"], EXTRA_SPECS[n]["parameters"], caller(n)) for n in names}


def handle(message: dict[str, Any], tools: dict[str, Tool]) -> JsonObject | None:
    """The JSON-RPC response to one message, or None for a notification."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion") or PROTOCOL,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "kit", "version": "1"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        listed = [{"name": t.name, "description": t.description, "inputSchema": t.schema} for t in tools.values()]
        result = {"tools": listed}
    elif method == "tools/call":
        name = params.get("name")
        tool = tools.get(name) if isinstance(name, str) else None
        if tool is None:
            known = f"unknown tool {params.get('name')!r}; this server has {sorted(tools)}"
            return _error(message["id"], -32602, known)
        arguments = params.get("arguments")
        text, is_error = tool.call(arguments if isinstance(arguments, dict) else {})
        result = {"content": [{"type": "text", "text": text}], "isError": is_error}
    else:
        return _error(message["id"], -32601, f"method not found: {method}")
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def _error(request_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def serve(tools: dict[str, Tool], stdin: TextIO, stdout: TextIO) -> None:
    """Answer messages until stdin closes (the CLI ends the server by closing the pipe)."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            reply: dict[str, Any] | None = _error(None, -32700, f"parse error: {exc}")
        else:
            reply = handle(message, tools) if isinstance(message, dict) else _error(None, -32600, "not an object")
        if reply is not None:
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()


USAGE = "usage: mcp_server.py cache-bust TOOL_NAME | mcp_server.py kit-tools WORKDIR TOOL..."


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "cache-bust" and argv[1]:
        tools = cache_bust(argv[1])
    elif len(argv) >= 3 and argv[0] == "kit-tools":
        tools = kit_tools(argv[1], argv[2:])
    else:
        print(USAGE, file=sys.stderr)
        return 2
    serve(tools, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
