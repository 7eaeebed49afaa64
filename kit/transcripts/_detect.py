"""Which transcript format a file is, judged from its first readable lines (never the whole file)."""

from __future__ import annotations

from pathlib import Path

from kit.transcripts._base import Issues, TranscriptError, json_lines, text

SCAN_LINES = 50
_ROLLOUT = {"session_meta", "response_item", "event_msg", "turn_context", "token_usage_record", "compacted"}
_STREAM = {"system", "assistant", "user", "result", "stream_event"}


def _judge(line: dict) -> str | None:
    kind = text(line.get("type"))
    if line.get("kit_provider_log") is not None:
        return "provider_log"
    if line.get("kit_sdk") is not None:
        return "sdk_record"
    if kind in _ROLLOUT and "payload" in line:
        return "codex_rollout"
    if kind is not None and kind.split(".")[0] in ("thread", "turn", "item"):
        return "codex_exec"
    if "parentUuid" in line or "sessionId" in line or "isSidechain" in line:
        return "claude_session"
    if "session_id" in line and kind in _STREAM:
        return "claude_stream"
    return None


def detect(path: str | Path) -> str:
    """The format name of ``path``; raises ``TranscriptError`` (``file:line: reason``) when it cannot tell."""
    path = Path(path)
    quiet = Issues()
    try:
        for count, (_, line) in enumerate(json_lines(path, quiet), start=1):
            found = _judge(line)
            if found is not None:
                return found
            if count >= SCAN_LINES:
                break
    except OSError as exc:
        raise TranscriptError(path, 0, f"cannot read: {exc}") from exc
    reason = quiet.items[0]["reason"] if quiet.items and quiet.items[0]["reason"] == "empty file" else None
    raise TranscriptError(path, 0, reason or f"cannot detect the transcript format in the first {SCAN_LINES} lines")
