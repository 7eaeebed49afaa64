"""``framing_chars``, ``output_framing_chars`` and ``o200k_tokens``: each block's framing and a result's tokenizer
count (docs/method.md#calibration), checked on the real public transcripts against an independent count.

A block's framing is the block as the transcript holds it, as compact JSON, with what it holds emptied: a
result's content (a string becomes ``""``, a content list keeps its parts with their text emptied), a call's
input. The expected figures are computed here from the raw lines with the standard library (``json``), never
through the readers.
"""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from kit import tokens, transcripts
from kit.framing import WRITTEN, _unwritten, block_framing
from tests.support import CODE_MODE, SESSION, STREAM, TOOL_HEAVY


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def records(path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def emptied(content: object) -> object:
    if isinstance(content, list):
        return [{**part, "text": ""} if "text" in part else part for part in content]
    return "" if isinstance(content, str) else content


def claude_results(path) -> list[tuple[int, int]]:
    """(framing characters, o200k tokens) of every tool_result block, in file order."""
    out = []
    for record in records(path):
        content = record.get("message", {}).get("content") if record.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                frame = compact({**block, "content": emptied(block.get("content"))})
                body = block.get("content")
                text = body if isinstance(body, str) else "".join(p.get("text", "") for p in body or [])
                out.append((len(frame), tokens.count(frame) + tokens.count(text)))
    return out


def test_claude_session_results_are_framed_and_counted_as_their_blocks():
    for path in (TOOL_HEAVY, SESSION):
        got = transcripts.tool_results(path)
        assert list(zip(got["framing_chars"], got["o200k_tokens"], strict=True)) == claude_results(path), path


def test_claude_stream_json_results_match_the_session_of_the_same_run():
    """stream-json holds the same blocks as the session file of the same run: the same framing."""
    stream, session = transcripts.tool_results(STREAM), transcripts.tool_results(SESSION)
    assert len(stream) and stream["framing_chars"].notna().all()
    assert list(stream["framing_chars"]) == list(session["framing_chars"][: len(stream)])


def test_claude_response_framing_is_its_blocks_less_what_they_hold():
    """tool_heavy's third response, spelled out: a thinking block, a text block and two tool_use blocks."""
    requests = transcripts.read(TOOL_HEAVY)
    blocks: dict[str, dict[str, str]] = {}
    for record in records(TOOL_HEAVY):
        if record.get("type") == "assistant":
            for block in record["message"]["content"]:
                kind = block["type"]
                key = block.get("id") or block.get(kind) or kind
                held = {"text": {"text": ""}, "thinking": {"thinking": "", "signature": ""}, "tool_use": {"input": {}}}
                if kind in held:
                    frame = {"type": kind, **held[kind]} if kind != "tool_use" else {**block, "input": {}}
                    blocks.setdefault(record["message"]["id"], {})[key] = compact(frame)
    expected = [sum(map(len, seen.values())) for seen in blocks.values()]
    assert list(requests["output_framing_chars"]) == expected


def test_claude_response_blocks_are_counted_whole_with_the_tool_results_only():
    """``output_o200k_tokens``: each response's blocks (a block repeated on a later line of the response once) as
    compact JSON, a thinking block's signature emptied, counted by ``o200k_base``; counted by ``tables`` (with
    the tool results), missing from a read of requests alone (docs/method.md#calibration)."""
    for path in (TOOL_HEAVY, SESSION):
        blocks: dict[str, dict[str, str]] = {}
        for record in records(path):
            if record.get("type") == "assistant" and record["message"].get("model") != "<synthetic>":
                for block in record["message"]["content"]:
                    kind = block["type"]
                    if kind in ("text", "thinking", "tool_use"):
                        key = block.get("id") or block.get(kind)
                        shown = {k: "" if k == "signature" else v for k, v in block.items()}
                        blocks.setdefault(record["message"]["id"], {})[key] = compact(shown)
        expected = [sum(map(tokens.count, seen.values())) for seen in blocks.values()]
        full, _ = transcripts.tables(path)
        assert list(full["output_o200k_tokens"]) == expected, path
        assert transcripts.read(path)["output_o200k_tokens"].isna().all()


PASSTHROUGH = "internal_chat_message_metadata_passthrough"  # kept in the rollout, not sent (docs/method.md#calibration)


def test_codex_rollout_results_and_calls_are_framed_as_the_cli_sends_them():
    """A result's framing is its payload with the output emptied (Code Mode cells' outputs: content lists); a
    response's includes each call's payload with its input emptied; neither holds the rollout's passthrough."""
    got = transcripts.tool_results(CODE_MODE)
    expected, calls = [], []
    for record in records(CODE_MODE):
        payload = {k: v for k, v in record.get("payload", {}).items() if k != PASSTHROUGH}
        if record.get("type") != "response_item":
            continue
        if payload.get("type") == "custom_tool_call_output":
            output = payload["output"]
            frame = compact({**payload, "output": emptied(output)})
            text = output if isinstance(output, str) else "".join(p.get("text", "") for p in output)
            expected.append((len(frame), tokens.count(frame) + tokens.count(text)))
        if payload.get("type") == "custom_tool_call":
            calls.append(len(compact({**payload, "input": ""})))
    assert len(expected) == 5 and list(zip(got["framing_chars"], got["o200k_tokens"], strict=True)) == expected
    framed = transcripts.read(CODE_MODE)["output_framing_chars"]
    assert framed.sum() >= sum(calls) and (framed > 0).all()


def test_codex_response_items_are_counted_whole_as_sent_with_the_tool_results_only():
    """``output_o200k_tokens`` of a rollout: each model item (reasoning, assistant message, call) as compact JSON
    without the passthrough, encrypted reasoning emptied, counted by ``o200k_base``; summed here over the file."""
    expected = 0
    for record in records(CODE_MODE):
        payload = record.get("payload", {})
        kind = payload.get("type")
        model = kind in ("function_call", "custom_tool_call", "reasoning") or (
            kind == "message" and payload.get("role") == "assistant"
        )
        if record.get("type") == "response_item" and model:
            shown = {k: "" if k == "encrypted_content" else v for k, v in payload.items() if k != PASSTHROUGH}
            expected += tokens.count(compact(shown))
    full, _ = transcripts.tables(CODE_MODE)
    assert full["output_o200k_tokens"].notna().all() and int(full["output_o200k_tokens"].sum()) == expected
    assert transcripts.read(CODE_MODE)["output_o200k_tokens"].isna().all()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["type", "id", "text", "input", "caller", "note"]), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["type", "id", "name", *WRITTEN]), JSON_VALUES, max_size=6))
def test_block_framing_measures_what_walking_the_block_gives(block):
    """The shortcut for blocks with nothing to empty (``kit.framing.HOLDING``) gives the walked block's length,
    whatever the keys hold (a written key holding ``[]`` or text, nested, or its name inside a string)."""
    assert block_framing(block) == len(orjson.dumps(_unwritten(block)))
