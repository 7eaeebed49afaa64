"""Provider usage objects mapped onto the canonical token columns, one function per convention.

This is the one place where the conventions meet (docs/method.md#conventions): OpenAI and Codex count cached and
cache-written tokens INSIDE ``input_tokens``; Anthropic adds ``cache_creation_input_tokens`` and
``cache_read_input_tokens`` ON TOP of ``input_tokens``. Every function returns the canonical token
keys plus ``usage_known``. A usage that is absent, or all zeros (clients write zeros when a server
sent none: a real request always has a prompt), is unknown: counts are None, never zero.
"""

from __future__ import annotations

from collections.abc import Mapping

from kit.errors import KitError
from kit.transcripts._base import as_dict

TOKEN_KEYS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
)


class UsageError(KitError, ValueError):
    """A usage object that is present but malformed (a count that is not a non-negative integer)."""


def unknown() -> dict:
    return {**dict.fromkeys(TOKEN_KEYS), "usage_known": False}


def _count(obj: Mapping, key: str) -> int | None:
    value = obj.get(key)
    if type(value) is int and value >= 0:  # the common case first: this runs for every count of every row
        return value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"usage field {key!r} is not a non-negative integer: {value!r}")
    return value


def _known(inp: int | None, out: int | None, **rest: int | None) -> dict:
    if inp is None or out is None or inp + out == 0:
        return unknown()
    return {"input_tokens": inp, "output_tokens": out, **rest, "usage_known": True}


def anthropic(usage: object) -> dict:
    """Anthropic Messages usage (also Claude Code's transcripts): cache counts are on top of input.

    A null cache count means the request used no cache (the API's own convention), so it adds 0;
    the 1-hour share of the writes is known only where ``cache_creation`` breaks them down. The writes are
    the flat ``cache_creation_input_tokens`` unless it is absent or 0 while the breakdown holds writes: Claude
    Code 2.1.152 could write 0 there with the writes only in ``cache_creation`` (its CHANGELOG), so then they
    are the breakdown's 5-minute plus 1-hour counts.
    """
    if type(usage) is dict and (found := _anthropic_plain(usage)) is not None:
        return found
    return _anthropic_checked(usage)


def _anthropic_checked(usage: object) -> dict:
    """``anthropic`` of any usage, every count checked (``_count``)."""
    if not isinstance(usage, Mapping):
        return unknown()
    inp, out = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    breakdown = usage.get("cache_creation")
    write_1h = _count(breakdown, "ephemeral_1h_input_tokens") if isinstance(breakdown, Mapping) else None
    write = _count(usage, "cache_creation_input_tokens")
    if not write and isinstance(breakdown, Mapping):  # absent, or 0 beside the writes (2.1.152): the breakdown's
        write = (_count(breakdown, "ephemeral_5m_input_tokens") or 0) + (write_1h or 0)
    write, read = write or 0, _count(usage, "cache_read_input_tokens") or 0
    if inp is None or inp + write + read == 0:
        return unknown()
    return _known(
        inp + write + read,
        out,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        reasoning_tokens=_count(as_dict(usage.get("output_tokens_details")), "thinking_tokens"),
    )


def _anthropic_plain(usage: dict) -> dict | None:
    """``anthropic`` of the usage Claude Code writes on nearly every line (four counts, a ``cache_creation``
    breakdown, no ``output_tokens_details``), without the general checks; None for any other shape, which
    the general code reads (it runs once per response of a history, so it counts at 260 MB)."""
    inp, out = usage.get("input_tokens"), usage.get("output_tokens")
    write, read = usage.get("cache_creation_input_tokens"), usage.get("cache_read_input_tokens")
    breakdown = usage.get("cache_creation")
    write_1h = breakdown.get("ephemeral_1h_input_tokens") if type(breakdown) is dict else None
    if not (type(inp) is type(out) is type(write) is type(read) is int and min(inp, out, write, read) >= 0):
        return None
    if (write_1h is not None and (type(write_1h) is not int or write_1h < 0)) or "output_tokens_details" in usage:
        return None
    if write == 0 and type(breakdown) is dict:  # the writes may be only in the breakdown (``anthropic``)
        write_5m = breakdown.get("ephemeral_5m_input_tokens")
        if write_5m is not None and (type(write_5m) is not int or write_5m < 0):
            return None
        write = (write_5m or 0) + (write_1h or 0)
    side = inp + write + read
    if side == 0:  # unknown: the general code says so
        return None
    return {
        "input_tokens": side,
        "output_tokens": out,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "cache_write_1h_tokens": write_1h,
        "reasoning_tokens": None,
        "usage_known": True,
    }


def openai_responses(usage: object) -> dict:
    """OpenAI Responses usage: ``input_tokens`` already holds cached and written tokens."""
    return _openai(usage, "input_tokens", "output_tokens")


def openai_chat(usage: object) -> dict:
    """OpenAI Chat Completions usage: ``prompt_tokens`` already holds cached and written tokens."""
    return _openai(usage, "prompt_tokens", "completion_tokens")


def _openai(usage: object, prompt: str, completion: str) -> dict:
    """OpenAI's convention under one API's names: ``<prompt>_details`` and ``<completion>_details`` hold the cached,
    written and reasoning counts."""
    if not isinstance(usage, Mapping):
        return unknown()
    details = as_dict(usage.get(f"{prompt}_details"))
    return _known(
        _count(usage, prompt),
        _count(usage, completion),
        cache_read_tokens=_count(details, "cached_tokens"),
        cache_write_tokens=_count(details, "cache_write_tokens"),
        cache_write_1h_tokens=None,
        reasoning_tokens=_count(as_dict(usage.get(f"{completion}_details")), "reasoning_tokens"),
    )


def codex(usage: object) -> dict:
    """Codex CLI usage (rollout and ``--json``): OpenAI's convention with flattened field names."""
    if type(usage) is dict and (found := _codex_plain(usage)) is not None:
        return found
    return _codex_checked(usage)


def _codex_checked(usage: object) -> dict:
    """``codex`` of any usage, every count checked (``_count``)."""
    if not isinstance(usage, Mapping):
        return unknown()
    return _known(
        _count(usage, "input_tokens"),
        _count(usage, "output_tokens"),
        cache_read_tokens=_count(usage, "cached_input_tokens"),
        cache_write_tokens=_count(usage, "cache_write_input_tokens"),
        cache_write_1h_tokens=None,
        reasoning_tokens=_count(usage, "reasoning_output_tokens"),
    )


def _codex_plain(usage: dict) -> dict | None:
    """``codex`` of a usage whose counts are all non-negative integers or absent, with input and output known
    and not both zero, without the general checks; None for any other, which the general code reads (as
    ``_anthropic_plain``: it runs once per response of a history)."""
    get = usage.get
    inp, out = get("input_tokens"), get("output_tokens")
    read, write, reasoning = get("cached_input_tokens"), get("cache_write_input_tokens"), get("reasoning_output_tokens")
    if not (type(inp) is type(out) is int and inp >= 0 and out >= 0 and inp + out > 0):
        return None
    if not all(v is None or (type(v) is int and v >= 0) for v in (read, write, reasoning)):
        return None
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "cache_write_1h_tokens": None,
        "reasoning_tokens": reasoning,
        "usage_known": True,
    }


def canonical(usage: object) -> dict:
    """The embedded provider's log: already in the kit's own names and convention."""
    if not isinstance(usage, Mapping):
        return unknown()
    return _known(
        _count(usage, "input_tokens"),
        _count(usage, "output_tokens"),
        **{k: _count(usage, k) for k in TOKEN_KEYS if k not in ("input_tokens", "output_tokens")},
    )
