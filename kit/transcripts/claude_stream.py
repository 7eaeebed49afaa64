"""``claude -p --output-format stream-json --verbose`` stdout.

Assistant events are deduped by ``message.id`` like the session file (``_claude``). The CLI emits them
at each content block's end with the usage of ``message_start``, so their ``output_tokens`` is a
partial snapshot (1 on CLI 2.1.29). Each ``result`` event closes a turn; its usage (``modelUsage``
where usage lacks output) is compared field by field with the turn's per-response sums, and every
comparison goes to ``attrs["crosscheck"]``: ``result.usage`` has meant per-process, per-segment and
last-turn-only in different CLI versions, so it is never trusted silently. The one thing taken from it
is output: when it exceeds the per-response sum and the responses' finals are unknown, the
difference is added to the turn's last response, and the crosscheck row says so. With
``--include-partial-messages`` the ``message_delta`` events give each response's final output instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.transcripts._base import Issues, Parsed, Reader, as_dict, file_summary, json_lines, text
from kit.transcripts._claude import Responses, content_of, file_role, is_synthetic

FORMAT = "claude_stream"
KNOWN = {"system", "assistant", "user", "result", "stream_event"}
FIELDS = {
    "input_tokens": ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
    "cache_write_tokens": ("cache_creation_input_tokens",),
    "cache_read_tokens": ("cache_read_input_tokens",),
    "output_tokens": ("output_tokens",),
}


@dataclass
class _Result:
    line: int
    first_cycle: int
    end_cycle: int
    usage: dict
    model_usage: dict


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of ``paths``; tool-result rows only with ``tools``."""
    return Parsed.of_files(paths, lambda path: _read_file(path, issues), tools)


def _read_file(path: Path, issues: Issues) -> Parsed:
    responses = Responses(path, FORMAT, issues)
    out = Parsed()
    results: list[_Result] = []
    finals: dict[str, int] = {}
    current: str | None = None
    version = None
    for number, line in json_lines(path, issues):
        kind = text(line.get("type"))
        if kind == "assistant":
            message = line.get("message")
            if not isinstance(message, dict):
                issues.add(path, number, "assistant event without a message object; line skipped")
            elif is_synthetic(message.get("model"), line.get("isApiErrorMessage")):
                out.attrs["events"].append(_event(path, number, responses, "api_error", {"text": str(message)[:500]}))
            else:
                sidechain = line.get("parent_tool_use_id") is not None
                mid, model, usage = message.get("id"), message.get("model"), message.get("usage")
                content = content_of(message.get("content"))
                responses.add(number, mid, None, model, usage, content, sidechain, line.get("timestamp"))
        elif kind == "user":
            responses.add_results(as_dict(line.get("message")).get("content"))
        elif kind == "result":
            start = results[-1].end_cycle if results else 0
            usage, model_usage = as_dict(line.get("usage")), as_dict(line.get("modelUsage"))
            results.append(_Result(number, start, len(responses.by_key), usage, model_usage))
            keep = ("subtype", "is_error", "num_turns", "duration_ms", "total_cost_usd")
            out.attrs["events"].append(_event(path, number, responses, "result", {k: line.get(k) for k in keep}))
        elif kind == "system":
            version = line.get("claude_code_version") or version
            detail = {k: line[k] for k in ("model", "claude_code_version", "compact_metadata") if k in line}
            out.attrs["events"].append(_event(path, number, responses, f"system:{line.get('subtype')}", detail))
        elif kind == "stream_event":
            event = as_dict(line.get("event"))
            if event.get("type") == "message_start":
                current = text(as_dict(event.get("message")).get("id"))
            elif event.get("type") == "message_delta" and current is not None:
                output = as_dict(event.get("usage")).get("output_tokens")
                if isinstance(output, int):
                    finals[current] = output
        else:
            issues.unknown_type(path, number, kind)
    for key, output in finals.items():
        responses.final_output(key, output)
    out.rows = responses.rows()
    final_cycles = {responses.by_key[k].cycle for k in finals if k in responses.by_key}
    for turn, result in enumerate(results, start=1):
        for row in out.rows[result.first_cycle : result.end_cycle]:
            row["turn"] = turn
        out.attrs["crosscheck"] += _crosscheck(path, turn, result, out.rows, final_cycles)
    for row in out.rows[results[-1].end_cycle if results else 0 :]:
        row["turn"] = len(results) + 1
    out.tools = responses.tools
    out.attrs["sidechain_ids"] = responses.sidechain_ids()
    out.attrs["files"].append(file_summary(path, FORMAT, out.rows, cli_version=version))
    return out


def _reported(result: _Result, field: str) -> int | None:
    """The result's figure for a canonical field; output falls back to the sum over ``modelUsage``."""
    parts = [result.usage.get(k) for k in FIELDS[field]]
    counts = [p for p in parts if isinstance(p, int)]
    if len(counts) == len(parts):
        return sum(counts)
    if field == "output_tokens":
        outs = [as_dict(m).get("outputTokens") for m in result.model_usage.values()]
        out_counts = [o for o in outs if isinstance(o, int)]
        if outs and len(out_counts) == len(outs):
            return sum(out_counts)
    return None


def _crosscheck(path: Path, turn: int, result: _Result, rows: list[dict], final_cycles: set[int]) -> list[dict]:
    segment = rows[result.first_cycle : result.end_cycle]
    checks = []
    for field in FIELDS:
        values = [r[field] for r in segment]
        rows_sum = sum(values) if all(v is not None for v in values) else None
        reported = _reported(result, field)
        note = ""
        partial = segment and not {r["cycle"] for r in segment} <= final_cycles
        if (
            field == "output_tokens"
            and partial
            and rows_sum is not None
            and reported is not None
            and reported > rows_sum
        ):
            segment[-1]["output_tokens"] += reported - rows_sum
            note = (
                f"per-event output_tokens are partial streaming snapshots (sum {rows_sum}); "
                f"the difference {reported - rows_sum} was added to the turn's last response"
            )
        elif rows_sum is None or reported is None:
            note = "not comparable: a figure is missing"
        elif rows_sum != reported:
            note = "result.usage disagrees with the per-response sum; rows keep the per-response values"
        checks.append(
            {
                "source_path": str(path),
                "source_line": result.line,
                "turn": turn,
                "field": field,
                "rows_sum": rows_sum,
                "reported": reported,
                "agree": rows_sum is not None and rows_sum == reported,
                "note": note,
            }
        )
    return checks


def _event(path: Path, number: int, responses: Responses, kind: str, detail: dict) -> dict:
    return {
        "source_path": str(path),
        "source_line": number,
        "cycle": len(responses.by_key),
        "kind": kind,
        "timestamp": None,
        "detail": detail,
    }


def judge(line: dict) -> bool:
    """A ``claude -p --output-format stream-json`` line: a ``session_id`` and one of its line types."""
    return "session_id" in line and text(line.get("type")) in KNOWN


READER = Reader(FORMAT, judge, read, role=file_role)
