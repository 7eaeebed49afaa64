"""Every input file of a read accounted for: its rows, or none and why (``df.attrs["accounting"]``).

A file can give no row for reasons that are not a damaged line: Claude Code writes a client-error stand-in
(model ``<synthetic>``, ``isApiErrorMessage``, the kind in ``error``: ``authentication_failed``,
``billing_error``) where a request never reached the model; a session may hold nothing but ``/login``; every
response of a file may be a copy of another file's (counted there, ``attrs["repeats"]``); a stream may be cut
inside its turn (its reader's issue). A folder read file by file used to leave such files out of its table
without a word, so the totals looked complete. ``accounts`` builds one ``FileAccount`` per input file from what
the read gathered anyway (its rows, ``attrs["files"]``, ``["events"]``, ``["repeats"]``, ``["issues"]``), so a
read from the parse cache, over processes or in one process gives the same account; ``python -m kit parse``
prints one line for each file with no rows (docs/method.md#transcripts).

The records are NamedTuples: typed, and written as JSON arrays where pandas writes a frame's attrs
(``to_parquet`` stores them as JSON).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import pandas as pd

ISSUE = "issue"  # a problem its reader (or the grouping of files) reported at a place in the file
REPEATS = "repeats"  # responses counted in another file, which ``detail`` names
CLIENT_ERROR = "client_error"  # a CLI's stand-in for a request that failed before the model (``detail``: its kind)
FAILED = "failed"  # an error event of a stream (``codex exec --json`` ``turn.failed``, ``error``)
TURNS_ELSEWHERE = "turns_elsewhere"  # ``codex exec --json`` turns whose cumulative usage another file gave first
NO_RESPONSE = "no_response"  # read, and no API response in it (``detail``: the local commands it ran, if any)
STAND_INS = frozenset({"api_error"})  # the event kinds of client-error stand-ins (Claude session and stream-json)
FAILURES = frozenset({"turn.failed", "error"})
SHOWN_LINES = 5  # line numbers named per kind of stand-in before "and N more"


class Reason(NamedTuple):
    """One reason a file gave no rows: ``kind`` (one of the constants above), the line it is at (0: the file as
    a whole), what it says (``detail``) and how many responses or turns it stands for (``number``)."""

    kind: str
    line: int
    detail: str
    number: int = 1


class FileAccount(NamedTuple):
    """One input file of a read: the format it was read as (None where no reader took it), its rows, and where
    there are none, every reason found (``Reason``)."""

    source_path: str
    format: str | None
    rows: int
    reasons: tuple[Reason, ...] = ()

    def text(self) -> str:
        """The file's line in ``python -m kit parse``: ``path: N rows``, or ``path: 0 rows: why; why``."""
        if self.rows:
            return f"{self.source_path}: {self.rows} rows"
        return f"{self.source_path}: 0 rows: " + "; ".join(_said(self.reasons))


def accounts(files: Sequence[Path], df: pd.DataFrame) -> list[FileAccount]:
    """One ``FileAccount`` per distinct input file, in the order given, from the read's table ``df`` and its attrs."""
    counts = df["source_path"].value_counts(sort=False).to_dict() if len(df) else {}
    attrs = df.attrs
    summaries: dict[str, dict] = {}
    for summary in attrs.get("files", ()):
        summaries.setdefault(summary["source_path"], summary)
    found: dict[str, list[Reason]] = {}
    for event in attrs.get("events", ()):
        if event["kind"] in STAND_INS:
            detail = event.get("detail") or {}
            found.setdefault(event["source_path"], []).append(
                Reason(CLIENT_ERROR, event["source_line"], detail.get("error") or "no error kind named")
            )
        elif event["kind"] in FAILURES:
            message = str((event.get("detail") or {}).get("message") or "")[:160]
            found.setdefault(event["source_path"], []).append(
                Reason(FAILED, event["source_line"], f"{event['kind']}: {message}")
            )
    for path, reasons in _repeats(attrs.get("repeats", ())).items():
        found.setdefault(path, []).extend(reasons)
    issues: dict[str, list[Reason]] = {}
    for issue in attrs.get("issues", ()):
        issues.setdefault(issue["source_path"], []).append(Reason(ISSUE, issue["source_line"], issue["reason"]))
    out = []
    for path in dict.fromkeys(map(str, files)):
        summary = summaries.get(path)
        fmt = summary["format"] if summary is not None else None
        rows = int(counts.get(path, 0))
        if rows:
            out.append(FileAccount(path, fmt, rows))
            continue
        reasons = list(found.get(path, ()))
        turns = summary.get("turns", 0) if summary is not None else 0
        if turns:
            reasons.append(Reason(TURNS_ELSEWHERE, 0, "another file of the same thread", turns))
        reasons += issues.get(path, ())
        if summary is not None and not any(r.kind in (REPEATS, CLIENT_ERROR, TURNS_ELSEWHERE, ISSUE) for r in reasons):
            reasons.append(Reason(NO_RESPONSE, 0, " ".join(summary.get("local_commands", ()))))
        out.append(FileAccount(path, fmt, 0, tuple(reasons)))
    return out


def _repeats(repeats: Iterable[dict]) -> dict[str, list[Reason]]:
    """Per file, one ``REPEATS`` reason per file holding the copies counted (its first copy's line, their number)."""
    kept: dict[str, dict[str, list[int]]] = {}
    for entry in repeats:
        kept.setdefault(entry["source_path"], {}).setdefault(entry["kept_path"], []).append(entry["source_line"])
    return {
        path: [Reason(REPEATS, min(lines), other, len(lines)) for other, lines in others.items()]
        for path, others in kept.items()
    }


def _said(reasons: Iterable[Reason]) -> list[str]:
    """The reasons as words, the stand-ins grouped by kind (a login wall can write hundreds)."""
    said: list[str] = []
    stand_ins: dict[str, list[int]] = {}
    for reason in reasons:
        if reason.kind == CLIENT_ERROR:
            stand_ins.setdefault(reason.detail, []).append(reason.line)
        elif reason.kind == REPEATS:
            said.append(f"all {reason.number} response(s) repeated in {reason.detail} (counted there)")
        elif reason.kind == TURNS_ELSEWHERE:
            said.append(f"its {reason.number} turn(s) repeat the cumulative usage of {reason.detail} (counted there)")
        elif reason.kind == NO_RESPONSE:
            ran = f": the session ran only local command(s) {reason.detail}" if reason.detail else ""
            said.append(f"no API response in the file{ran}")
        else:
            said.append(f"line {reason.line}: {reason.detail}" if reason.line else reason.detail)
    if stand_ins:
        total = sum(map(len, stand_ins.values()))
        kinds = ", ".join(f"{kind} \u00d7{len(lines)} ({_lines(lines)})" for kind, lines in stand_ins.items())
        said.insert(0, f"{total} client-error stand-in(s) (written by the CLI, model <synthetic>, no usage): {kinds}")
    return said


def _lines(lines: list[int]) -> str:
    named = ", ".join(map(str, lines[:SHOWN_LINES]))
    more = f" and {len(lines) - SHOWN_LINES} more" if len(lines) > SHOWN_LINES else ""
    return f"line {named}" if len(lines) == 1 else f"lines {named}{more}"
