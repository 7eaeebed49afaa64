"""A tiny stdio MCP server offering one tool, the trial's ``cache_bust_<id>`` (seed 003).

Neither CLI has a flag that adds a function tool, but both load MCP servers, so the cache-bust tool
reaches the request's tool list this way. The tool is described "Never call this tool." and answers
``{"success": true}`` if a model calls it anyway, so a trial never fails because of it.

Protocol: newline-delimited JSON-RPC 2.0 over stdin/stdout (MCP's stdio transport), implementing
``initialize``, ``ping``, ``tools/list`` and ``tools/call``; notifications are accepted silently.
Standard library only, so it starts in milliseconds with whatever Python runs the kit.

Usage: ``python -m kit.agents.mcp_cache_bust cache_bust_<id>`` (or the file path, which avoids
importing the package).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

PROTOCOL = "2025-06-18"
DESCRIPTION = "Never call this tool."
RESULT = json.dumps({"success": True})


def handle(message: dict[str, Any], tool: str) -> dict[str, Any] | None:
    """The JSON-RPC response to one message, or None for a notification."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion") or PROTOCOL,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "kit-cache-bust", "version": "1"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        schema = {"type": "object", "properties": {}, "additionalProperties": False}
        result = {"tools": [{"name": tool, "description": DESCRIPTION, "inputSchema": schema}]}
    elif method == "tools/call":
        if params.get("name") != tool:
            return _error(message["id"], -32602, f"unknown tool {params.get('name')!r}; this server has {tool!r}")
        result = {"content": [{"type": "text", "text": RESULT}], "structuredContent": {"success": True}}
    else:
        return _error(message["id"], -32601, f"method not found: {method}")
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def _error(request_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def serve(tool: str, stdin: TextIO, stdout: TextIO) -> None:
    """Answer messages until stdin closes (the CLI ends the server by closing the pipe)."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            reply: dict[str, Any] | None = _error(None, -32700, f"parse error: {exc}")
        else:
            reply = handle(message, tool) if isinstance(message, dict) else _error(None, -32600, "not an object")
        if reply is not None:
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: mcp_cache_bust.py TOOL_NAME", file=sys.stderr)
        return 2
    serve(argv[0], sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
