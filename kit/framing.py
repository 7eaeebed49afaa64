"""A block's framing and its ``o200k_base`` token count: what a prompt carries besides a block's content.

A prompt carries every block whole: a tool result's content with its type, call id and keys, a response's
text, thinking and calls with theirs. Occupancy prices that framing with the content, and prices each result
by its block's tokens, and each response by its blocks' tokens (docs/method.md#calibration). The transcript
readers measure blocks as the client sends them back, from what the transcript holds (less what it keeps and
does not send: a Codex rollout's metadata passthrough, an SDK body's null keys); the provider log, as the
client sent them (``kit.provider.server``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import orjson

from kit.tokens import encoding

WRITTEN = frozenset({"text", "thinking", "signature", "arguments", "input", "encrypted_content", "refusal"})
OPAQUE = frozenset({"signature", "encrypted_content"})  # what no tokenizer can tell the size of as the model reads it
# a WRITTEN key holding something besides "" or {} (what ``_unwritten`` leaves): in compact JSON a key's
# quotes are the only unescaped ones around its name, so this finds keys, never text inside a string
HOLDING = re.compile(rb'"(?:' + "|".join(sorted(WRITTEN)).encode() + rb')":(?!""|\{\})')


def _unwritten(value: object) -> object:
    """``value`` with what a model wrote emptied at any depth (``WRITTEN`` keys; an object input is ``{}``)."""
    if isinstance(value, dict):
        return {k: (({} if isinstance(v, dict) else "") if k in WRITTEN else _unwritten(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwritten(v) for v in value]
    return value


def block_framing(block: Mapping[str, object]) -> int:
    """Characters of a response's block or item (a text, thinking or call block as the transcript holds it, an
    API returned it and a client sends it back) besides what the model wrote in it (``WRITTEN``), as compact
    JSON: the keys, ids and type that open every gap with it (docs/method.md#calibration).

    Most blocks come with what the model wrote already emptied (a call's input as ``{}``): those are measured
    as they are, once ``HOLDING`` finds nothing to empty, which costs a tenth of walking the block."""
    raw = orjson.dumps(block)
    return len(orjson.dumps(_unwritten(block))) if HOLDING.search(raw) else len(raw)


def response_framing(blocks: list[object]) -> int:
    """``block_framing`` summed over a response's blocks or items."""
    return sum(block_framing(block) for block in blocks if isinstance(block, dict))


def _emptied(content: object) -> object:
    """A result's ``content`` with its text taken out and its shape kept: a string is empty, a content list
    keeps its parts with their ``text`` empty."""
    if isinstance(content, str):
        return ""
    if isinstance(content, list):
        return [
            {k: "" if k == "text" else v for k, v in part.items()} if isinstance(part, dict) else "" for part in content
        ]
    return content


SAMPLE_CHARS = 1 << 15  # a longer text is counted on its first and last halves of this, scaled to its length


def result_block(block: Mapping[str, object], content: str, text: str) -> tuple[int, int]:
    """A tool result block's framing characters (the block as compact JSON with its ``content`` key's text
    emptied: type, call id and keys) and its ``o200k_base`` tokens, framing and text (``text``, the content as
    the model reads it) counted apart: the public tokenizer's measure of what it occupies, which follows content
    density where characters cannot (docs/method.md#calibration).

    A text longer than ``SAMPLE_CHARS`` (a whole log, a file dump) is counted on its head and tail and
    scaled: density is what pricing needs, and tokenising runs at about 10 MB/s, the largest cost of reading
    a history's tool results.
    """
    frame = orjson.dumps({k: _emptied(v) if k == content else v for k, v in block.items()}).decode()
    return len(frame), _tokens(frame) + _tokens(text)


def block_tokens(block: Mapping[str, object]) -> int:
    """A response's block's ``o200k_base`` tokens as compact JSON, whole (type, ids, keys and what the model
    wrote), its opaque values (``OPAQUE``) emptied as ``block_framing`` has them: what the block occupies in the
    next prompt, in the measure the results are priced by. Its characters alone, priced at the results'
    ratio, misread it by a fifth (Claude Code's call ids are dense; docs/method.md#calibration)."""
    return _tokens(orjson.dumps({k: "" if k in OPAQUE else v for k, v in block.items()}).decode())


def _tokens(text: str) -> int:
    """``o200k_base`` tokens of ``text``; one longer than ``SAMPLE_CHARS`` counted on its head and tail, scaled."""
    encode = encoding("o200k_base").encode_ordinary
    if len(text) <= SAMPLE_CHARS:
        return len(encode(text))
    half = SAMPLE_CHARS // 2
    return round((len(encode(text[:half])) + len(encode(text[-half:]))) * len(text) / SAMPLE_CHARS)
