"""The usage readers' shortcuts for the common shape (``_anthropic_plain``, ``_codex_plain``) give what the checked
reading gives, for any usage object they accept: they run once per response of a history, the checked code
is the rule (docs/method.md#conventions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.transcripts import _usage

COUNTS = st.one_of(
    st.integers(0, 10**9), st.integers(-5, 5), st.none(), st.booleans(), st.floats(0, 9), st.just("7"), st.just([])
)
ANTHROPIC = ["input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
CODEX = ["input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens", "reasoning_output_tokens"]


PLAIN = st.one_of(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), COUNTS)  # mostly valid


def usage(keys: list[str], nested: dict) -> st.SearchStrategy[dict]:
    """Usage objects with input and output mostly valid (so the shortcut is taken often), the rest of any kind."""
    rest = {key: COUNTS for key in keys[2:]} | nested
    return st.fixed_dictionaries({key: PLAIN for key in keys[:2]}, optional=rest)


def same_as_checked(plain, checked, value: dict) -> None:
    found = plain(value)
    if found is not None:
        assert found == checked(value) and list(found) == list(checked(value))


@settings(max_examples=500, deadline=None)
@given(
    usage(
        ANTHROPIC,
        {
            "cache_creation": st.fixed_dictionaries(
                {}, optional={"ephemeral_1h_input_tokens": COUNTS, "ephemeral_5m_input_tokens": COUNTS}
            ),
            "output_tokens_details": st.just({"thinking_tokens": 3}),
        },
    )
)
def test_anthropic_shortcut_reads_as_the_checked_code(value):
    same_as_checked(_usage._anthropic_plain, _usage._anthropic_checked, value)


@settings(max_examples=500, deadline=None)
@given(usage(CODEX, {"total_tokens": COUNTS}))
def test_codex_shortcut_reads_as_the_checked_code(value):
    same_as_checked(_usage._codex_plain, _usage._codex_checked, value)


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        ({"input_tokens": 10, "output_tokens": 2, "cached_input_tokens": 8}, True),
        ({"input_tokens": 10, "output_tokens": True}, False),  # a bool is not a count: the checked code says so
        ({"input_tokens": 0, "output_tokens": 0}, False),  # all zero: unknown, as the checked code says
    ],
)
def test_codex_shortcut_takes_only_plain_counts(value, taken):
    assert (_usage._codex_plain(value) is not None) is taken
