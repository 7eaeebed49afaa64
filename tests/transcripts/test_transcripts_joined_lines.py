"""A lost newline that joins a tool output to the next record: ``read`` (which reads tool outputs past
undecoded, ``kit.transcripts._base.Unused``) and ``tables`` agree on the rows and report the line alike.

Built from the real fixtures (tests/fixtures/transcripts): the first tool-output line a read of requests
would read past, joined with the line after it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts
from kit.transcripts import _base, claude_session, codex_rollout
from tests.support import FIXTURES

CASES = {
    "claude-session_spotter_tool_heavy.jsonl": claude_session.REQUESTS_ONLY,
    "codex-rollout_yepanywhere_codemode_0.154.0.jsonl": codex_rollout.REQUESTS_ONLY,
}


def long_enough(line: bytes) -> bytes:
    """A tool-output line made ``LONG`` if it is not (the rollout fixture's outputs are short), by a last key the
    readers do not know, so that a read of requests reads it past."""
    if len(line) > _base.LONG:
        return line
    return orjson.dumps(orjson.loads(line) | {"padding": " " * _base.LONG}) + b"\n"


def joined(name: str, unused: _base.Unused) -> tuple[bytes, int]:
    """The fixture with its first line that ``unused`` reads past joined to the next one, and that line's number."""
    lines = (FIXTURES / "transcripts" / name).read_bytes().splitlines(keepends=True)
    for i, line in enumerate(lines[:-1]):
        if unused.pattern.match(line):
            body = long_enough(line).rstrip(b"\n")
            assert unused.passes(body + b"\n", 0, len(body)), "read past, once on a line of its own"
            return b"".join([*lines[:i], body + lines[i + 1], *lines[i + 2 :]]), i + 1
    raise AssertionError(f"{name}: no line read past")


@pytest.mark.parametrize("name", list(CASES))
def test_a_tool_output_joined_to_the_next_record_reads_as_tables_does(tmp_path: Path, name: str) -> None:
    blob, number = joined(name, CASES[name])
    path = tmp_path / name
    path.write_bytes(blob)
    requests, _ = transcripts.tables(path)
    read = transcripts.read(path)
    counted = ["output_o200k_tokens"]  # counted with the tool results only (docs/method.md#transcripts)
    pd.testing.assert_frame_equal(read.drop(columns=counted), requests.drop(columns=counted))
    assert read.attrs["issues"] == requests.attrs["issues"]
    assert [i["source_line"] for i in read.attrs["issues"]] == [number]  # the joined line, reported in place
