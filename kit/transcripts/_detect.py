"""Which transcript format a file is, judged from its first readable lines (never the whole file) by the
registry's readers in turn (``kit.transcripts.readers``).

A file no reader takes gets the reason, not only the verdict: the fix differs (re-encode a UTF-16
file, skip a legacy Codex rollout that holds no usage, look at what the file is), docs/method.md#transcripts.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from kit.transcripts import readers
from kit.transcripts._base import Issues, TranscriptError, json_lines, text

SCAN_LINES = 50
HEAD = 1 << 15  # the block read first: the byte-order mark, and the first line where it is whole (``_first_line``)
# Response items a legacy rollout (Codex CLI of mid 2025) wrote bare, without the ``payload`` envelope.
_BARE_ITEMS = {"message", "reasoning", "function_call", "function_call_output", "local_shell_call"}
_WIDE_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32 (byte-order mark FF FE 00 00)",
    b"\x00\x00\xfe\xff": "UTF-32 (byte-order mark 00 00 FE FF)",
    b"\xff\xfe": "UTF-16 (byte-order mark FF FE)",
    b"\xfe\xff": "UTF-16 (byte-order mark FE FF)",
}
CANNOT = "cannot detect the transcript format"


def _legacy_rollout(line: dict) -> bool:
    """A line only a legacy Codex rollout writes: its ``record_type`` marker or a bare response item."""
    return "record_type" in line or (text(line.get("type")) in _BARE_ITEMS and "payload" not in line)


def _first_line(head: bytes) -> str | None:
    """The format, when the first line, whole in ``head``, is a JSON object that tells it: what ``json_lines``
    would give first and the registry would say (``readers.judge``). Most files are told so from the block
    ``detect`` reads anyway (half its time on a thousand rollouts); any other start is left to the line-by-line
    scan."""
    end = head.find(b"\n")
    try:
        line = orjson.loads(head[:end]) if end > 0 else None
    except orjson.JSONDecodeError:
        return None
    return readers.judge(line) if type(line) is dict else None


def detect(path: str | Path) -> str:
    """The format name of ``path``; raises ``TranscriptError`` (``file:line: reason``, why) when it cannot tell."""
    path = Path(path)
    quiet = Issues()
    first: dict | None = None
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD)
        for bom, encoding in _WIDE_BOMS.items():
            if head.startswith(bom):
                reason = f"{CANNOT}: the file is {encoding} text; transcripts are UTF-8 JSON lines (convert it first)"
                raise TranscriptError(path, 0, reason)
        if (found := _first_line(head)) is not None:
            return found
        for count, (number, line) in enumerate(json_lines(path, quiet), start=1):
            found = readers.judge(line)
            if found is not None:
                return found
            if _legacy_rollout(line):
                reason = "a legacy Codex rollout (bare response items, no session_meta/event_msg envelope)"
                raise TranscriptError(path, number, f"{CANNOT}: {reason}; it records no token usage, so no rows")
            first = first or line
            if count >= SCAN_LINES:
                break
    except OSError as exc:
        raise TranscriptError(path, 0, f"cannot read: {exc}") from exc
    if first is None:
        if quiet.items and quiet.items[0]["reason"] == "empty file":
            raise TranscriptError(path, 0, "empty file")
        bad = quiet.items[0]  # not empty and no object: its lines were reported
        why = bad["reason"].removesuffix("; line skipped")
        raise TranscriptError(path, 0, f"{CANNOT}: no JSON object in it (line {bad['source_line']}: {why})")
    keys = ", ".join(list(first)[:8]) or "none"
    raise TranscriptError(path, 0, f"{CANNOT} in the first {SCAN_LINES} lines (the first JSON object's keys: {keys})")
