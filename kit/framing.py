"""A block's framing and its ``o200k_base`` token count: what a prompt carries besides a block's content.

A prompt carries every block whole: a tool result's content with its type, call id and keys, a response's
text, thinking and calls with theirs. Occupancy prices that framing with the content, and prices each result
by its block's tokens (docs/method.md#calibration). The transcript readers measure blocks as the transcript
holds them; the provider log, as the client sent them (``kit.provider.server``).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from kit.tokens import encoding


def _emptied(content: object) -> object:
    """``content`` with its text taken out and its shape kept: a string is empty, a content list keeps its
    parts with their ``text`` empty, an object (a call's input) is ``{}``."""
    if isinstance(content, str):
        return ""
    if isinstance(content, list):
        return [
            {k: "" if k == "text" else v for k, v in part.items()} if isinstance(part, dict) else "" for part in content
        ]
    return {} if isinstance(content, dict) else content


def skeleton(block: Mapping[str, object], content: str) -> str:
    """``block`` (a tool result or call as the transcript holds it or the client sent it) as compact JSON with
    its ``content`` key's text emptied: the keys, ids and type that travel with every result and call.

    A model's prompt carries them too, so they are part of what a result occupies, and a response's own
    blocks (its calls above all) open every gap with them; pricing them beside the content keeps a short
    result from being credited with its call's framing (docs/method.md#calibration).
    """
    return orjson.dumps({k: _emptied(v) if k == content else v for k, v in block.items()}).decode()


def framing(block: Mapping[str, object], content: str) -> int:
    """Characters of ``block``'s ``skeleton``: its framing."""
    return len(skeleton(block, content))


SAMPLE_CHARS = 1 << 15  # a longer text is counted on its first and last halves of this, scaled to its length


def result_block(block: Mapping[str, object], content: str, text: str) -> tuple[int, int]:
    """A result block's framing characters and its ``o200k_base`` tokens, skeleton and text (``text``, the
    content as the model reads it) counted apart: the public tokenizer's measure of what it occupies, which
    follows content density where characters cannot (docs/method.md#calibration).

    A text longer than ``SAMPLE_CHARS`` (a whole log, a file dump) is counted on its head and tail and
    scaled: density is what pricing needs, and tokenising runs at about 10 MB/s, the largest cost of reading
    a history's tool results.
    """
    frame = skeleton(block, content)
    encode = encoding("o200k_base").encode_ordinary
    if len(text) <= SAMPLE_CHARS:
        tokens = len(encode(text))
    else:
        half = SAMPLE_CHARS // 2
        tokens = round((len(encode(text[:half])) + len(encode(text[-half:]))) * len(text) / SAMPLE_CHARS)
    return len(frame), len(encode(frame)) + tokens


WRITTEN = frozenset({"text", "thinking", "signature", "arguments", "input", "encrypted_content", "refusal"})


def _unwritten(value: object) -> object:
    """``value`` with what a model wrote emptied at any depth (``WRITTEN`` keys; an object input is ``{}``)."""
    if isinstance(value, dict):
        return {k: (({} if isinstance(v, dict) else "") if k in WRITTEN else _unwritten(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwritten(v) for v in value]
    return value


def response_framing(blocks: list[object]) -> int:
    """Characters of a response's blocks or items (as an API returned them, and a client sends them back)
    besides what the model wrote in them: text, thinking, call arguments and inputs, encrypted reasoning."""
    return sum(len(orjson.dumps(_unwritten(block))) for block in blocks if isinstance(block, dict))
