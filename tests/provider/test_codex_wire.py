"""The Responses wire as Codex 0.169.0 sends it for its ``code_mode_only`` models (the GPT-5.6 family): no
``tools``, an ``additional_tools`` input item of namespaces.

The body below keeps the shape of a request captured from ``codex exec -m gpt-5.6-sol`` against a loopback
server (docs/design.md, "The embedded provider"), with the descriptions shortened.
"""

from __future__ import annotations

from kit.provider import wire_openai
from kit.provider.policy import Reply, ToolCall
from kit.tasks import tooluse


def _body(thread: str) -> dict:
    function = {"type": "function", "strict": False, "parameters": {"type": "object", "properties": {}}}
    return {
        "model": "gpt-5.6-sol",
        "stream": True,
        "prompt_cache_key": thread,
        "input": [
            {
                "type": "additional_tools",
                "id": f"at_{thread}",
                "role": "developer",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "functions",
                        "description": "",
                        "tools": [
                            {
                                "type": "custom",
                                "name": "exec",
                                "description": "Run JavaScript code to orchestrate "
                                "tool calls.\n### `exec_command`\nRuns a command.",
                                "format": {"type": "grammar"},
                            },
                            {**function, "name": "wait", "description": "Waits on a yielded exec cell."},
                        ],
                    },
                    {
                        "type": "namespace",
                        "name": "collaboration",
                        "description": "Tools for spawning and managing sub-agents.",
                        "tools": [{**function, "name": "spawn_agent", "description": "Spawn a sub-agent."}],
                    },
                ],
            },
            {
                "type": "message",
                "id": f"msg_{thread}_1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex, an agent based on GPT-5. " * 40}],
            },
            {
                "type": "message",
                "id": f"msg_{thread}_2",
                "role": "user",
                "content": [{"type": "input_text", "text": "Read MANIFEST.txt"}],
            },
        ],
    }


def test_tools_in_an_additional_tools_item_are_offered_under_the_names_the_model_calls():
    parsed = wire_openai.parse_responses(_body("t1"))
    names = parsed.conversation.tool_names()
    assert {"exec", "wait", "collaboration__spawn_agent"} <= names  # ``functions`` is the default namespace
    assert parsed.custom_tools == {"exec"} and parsed.namespaced == {
        "collaboration__spawn_agent": ("collaboration", "spawn_agent")
    }
    conv = parsed.conversation
    assert tooluse.cells_only(conv) and tooluse.can_read(conv) and tooluse.can_grep(conv)
    assert tooluse.read_call(conv, "MANIFEST.txt").name == "exec"  # a read is a cell: exec_command is nested


def test_a_cell_is_answered_as_a_custom_tool_call_and_a_namespaced_call_names_its_namespace():
    parsed = wire_openai.parse_responses(_body("t1"))
    cell = tooluse.read_cell(["MANIFEST.txt"])
    items = wire_openai.responses_items(
        Reply("", (cell, ToolCall("collaboration__spawn_agent", {}))), parsed.custom_tools, parsed.namespaced
    )
    assert items[0]["type"] == "custom_tool_call" and items[0]["name"] == "exec" and "namespace" not in items[0]
    assert items[0]["input"] == cell.arguments["input"]
    assert (items[1]["type"], items[1]["name"], items[1]["namespace"]) == (
        "function_call",
        "spawn_agent",
        "collaboration",
    )


def test_a_grep_in_a_cell_is_a_search_whose_hits_are_read_back():
    conv = wire_openai.parse_responses(_body("t1")).conversation
    call = tooluse.grep_call(conv, "ingest|dedupe")
    assert call.name == "exec" and tooluse.is_search(call)
    assert not tooluse.is_search(tooluse.read_cell(["a.py"]))
