"""The registry of transcript formats: one ``Reader`` (``kit.transcripts._base``) per format, in one tuple.

Everything that names a format asks here: detection (``kit.transcripts._detect``, readers asked in this
order: the formats marked by a key of the kit's own first, Claude's stream-json, whose lines may carry
Claude session keys too, last), the reading by format (``kit.transcripts``), a file's role in a trial
(``kit.transcripts.sources``), which formats the parse cache resumes or leaves uncached
(``kit.transcripts.cache``), what ``python -m kit parse --format`` accepts (``kit.cli.parse``). A new format
is its module, exporting ``READER``, and a line in ``READERS`` (CONTRIBUTING.md; tests/transcripts/
test_transcripts_registry.py registers one from the test).
"""

from __future__ import annotations

from kit.transcripts import claude_session, claude_stream, codex_exec, codex_rollout, provider_log, sdk_record
from kit.transcripts._base import Reader

READERS: tuple[Reader, ...] = (
    provider_log.READER,
    sdk_record.READER,
    codex_rollout.READER,
    codex_exec.READER,
    claude_session.READER,
    claude_stream.READER,
)


def formats() -> tuple[str, ...]:
    """The format names, in the registry's order (read at each call: a test may register a format)."""
    return tuple(reader.format for reader in READERS)


def get(fmt: str) -> Reader | None:
    """The reader of ``fmt``, or None for a name no reader has."""
    return next((reader for reader in READERS if reader.format == fmt), None)


def reader(fmt: str) -> Reader:
    """The reader of ``fmt``, a name detection or a check of ``format`` gave (``KeyError`` if none has it)."""
    found = get(fmt)
    if found is None:
        raise KeyError(fmt)
    return found


def judge(line: dict) -> str | None:
    """The format of the first reader that takes ``line`` (a JSON object among a file's first lines), or None."""
    return next((reader.format for reader in READERS if reader.judge(line)), None)
