"""What the logged requests say of a trial's isolation and tools (kit.experiment.offered), on the shapes the
clients really send: Codex's flattened MCP namespace, Claude Code's ``mcp__server__tool``, the SDK agents'
bare name, and Codex's multi-agent v2 namespace."""

from __future__ import annotations

from kit.experiment import offered

DUMMY = "cache_bust_0123456789abcdef"


def _tools(*first: str, later: tuple[str, ...] = ()) -> offered.OfferedTools:
    records: list[dict[str, list[str] | None]] = [
        {"tools": list(first)},
        {"tools": list(later or first)},
        {"tools": None},
    ]
    return offered.offered_tools(records)


def test_the_dummy_tool_is_found_bare_or_under_its_server_and_missing_when_deferred():
    assert _tools(DUMMY, "read_file").dummy_tool_reached(DUMMY) is True
    assert _tools("exec_command", f"mcp__cachebust__{DUMMY}").dummy_tool_reached(DUMMY) is True
    assert _tools("exec", "wait").dummy_tool_reached(DUMMY) is False
    assert offered.offered_tools([{"tools": None}]).dummy_tool_reached(DUMMY) is None  # nothing logged: no claim
    assert _tools("exec").dummy_tool_reached(None) is None


def test_a_deferred_tool_the_backend_claimed_is_said_per_trial_and_a_declared_deferral_is_believed():
    facts = offered.trial_facts(_tools("exec", "wait"), offered.Expected(DUMMY, True, (), False))
    assert (
        facts["isolation.cache_bust_tool"].startswith(offered.NOT_IN_PROMPT)
        and DUMMY in facts["isolation.cache_bust_tool"]
    )
    # Claude Code: its backend already says the tool is deferred behind ToolSearch; nothing to add
    assert offered.trial_facts(_tools("Read", "ToolSearch"), offered.Expected(DUMMY, False, (), False)) == {}


def test_multi_agent_tools_are_named_only_against_the_pin():
    tools = _tools("exec", later=("exec", "collaboration__spawn_agent", "collaboration__wait_agent"))
    assert tools.multi_agent() == ["spawn_agent", "wait_agent"]
    assert offered.trial_facts(tools, offered.Expected(None, False, (), False)) == {}
    facts = offered.trial_facts(tools, offered.Expected(None, False, (), True))
    assert facts == {"multi_agent_tools": "spawn_agent, wait_agent offered despite features.multi_agent=false"}


def test_the_batch_warnings_count_the_trials_and_name_what_held():
    deferred = {"isolation.cache_bust_tool": f"{offered.NOT_IN_PROMPT}: …", "isolation_held": "nonce,prompt_cache_key"}
    agents = {"multi_agent_tools": "spawn_agent offered despite features.multi_agent=false"}
    warnings = offered.batch_warnings(
        [
            ("gpt-5.6-sol", "a", {**deferred, **agents}, True),
            ("gpt-5.6-sol", "a", deferred, True),
            ("gpt-5.6-sol", "control", {}, False),
        ]
    )
    assert warnings[0].startswith(
        "isolation: on gpt-5.6-sol the cache_bust_<id> tool did not reach the prompt in 2 of 2"
    )
    assert "isolated by nonce and prompt_cache_key alone" in warnings[0]
    assert warnings[1].startswith("multi-agent tools: Codex offered spawn_agent on gpt-5.6-sol")
    assert offered.batch_warnings([("sim-agent", "a", {"isolation_held": "nonce"}, True)]) == []


def test_an_arm_tool_no_request_offered_is_said_and_one_loaded_later_is_not():
    codex = _tools("exec", "wait")  # gpt-5.6-sol: the kit's MCP tools deferred behind the cell runtime
    assert offered.trial_facts(codex, offered.Expected(None, False, ("explore",), False)) == {
        "arm_tools_missing": "explore"
    }
    claude = _tools("Read", "ToolSearch", later=("Read", "ToolSearch", "mcp__kit__explore"))  # loaded by ToolSearch
    assert offered.trial_facts(claude, offered.Expected(None, False, ("explore",), False)) == {}
    (warning,) = offered.batch_warnings([("gpt-5.6-sol", "explore", {"arm_tools_missing": "explore"}, False)] * 2)
    assert warning.startswith("arm tools: explore reached no request of arm explore on gpt-5.6-sol in 2 trial(s)")
