"""The embedded provider's request log (``provider_log.jsonl``, written by ``kit.provider.log``).

Usage is already canonical (input holds every prompt token), so this reader only checks and copies.
The log knows the trial (``trial_id``), so cycles are numbered per trial within a file. A request the
provider refused (status other than 200) produced no model response: it is an event, not a row.
Tool results listed on a line are new in that request, so their cycle is that request's (``_tools``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kit.transcripts import _usage
from kit.transcripts._base import Issues, Parsed, Reader, as_list, file_summary, int_or_none, json_lines, text
from kit.transcripts._tools import result_row

FORMAT = "provider_log"


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of ``paths``; tool-result rows only with ``tools``."""
    return Parsed.of_files(paths, lambda path: _read_file(path, issues), tools)


def _read_file(path: Path, issues: Issues) -> Parsed:
    out = Parsed()
    cycles: dict[object, int] = {}
    for number, line in json_lines(path, issues):
        if line.get("kit_provider_log") != 1:
            issues.add(path, number, 'not a provider log line (expected "kit_provider_log": 1); line skipped')
            continue
        trial = text(line.get("trial_id"))
        if line.get("status") != 200:
            out.attrs["events"].append(
                {
                    "source_path": str(path),
                    "source_line": number,
                    "cycle": cycles.get(trial, 0),
                    "kind": "http_error",
                    "timestamp": line.get("ts"),
                    "detail": {"status": line.get("status"), "error": line.get("error"), "trial_id": trial},
                }
            )
            continue
        cycle = cycles[trial] = cycles.get(trial, -1) + 1
        try:
            usage = _usage.canonical(line.get("usage"))
        except _usage.UsageError as exc:
            issues.add(path, number, f"{exc}; usage of this request unknown")
            usage = _usage.unknown()
        server_ms = line.get("server_ms")
        out.rows.append(
            {
                "trial_id": trial,
                "cycle": cycle,
                "model": line.get("model"),
                "source_format": FORMAT,
                "source_path": str(path),
                "source_line": number,
                **usage,
                "tool_calls": int_or_none(line.get("tool_calls")),
                "started_at": line.get("ts"),
                "wall_s": server_ms / 1000 if isinstance(server_ms, int | float) else None,
            }
        )
        for result in as_list(line.get("tool_results")):
            if isinstance(result, dict):
                chars, error = int_or_none(result.get("chars")), result.get("is_error") is True
                block = int_or_none(result.get("framing_chars")), int_or_none(result.get("o200k_tokens"))
                out.tools.append(
                    result_row(cycle, result.get("name"), chars, error, trial_id=trial, block=block, path=str(path))
                )
    out.attrs["files"].append(file_summary(path, FORMAT, out.rows))
    return out


def judge(line: dict) -> bool:
    """A line of the embedded provider's log: its ``kit_provider_log`` version (``kit.provider.log``)."""
    return line.get("kit_provider_log") is not None


READER = Reader(FORMAT, judge, read)
