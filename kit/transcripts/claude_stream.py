"""``claude -p --output-format stream-json --verbose`` stdout.

Assistant events are deduped by ``message.id`` like the session file (``_claude``). The CLI emits them
at each content block's end with the usage of ``message_start``, so their ``output_tokens`` is a
partial snapshot (1 on CLI 2.1.29). With ``--include-partial-messages`` the ``message_delta`` events
give each response's final output instead.

A Task subagent's responses are events with ``parent_tool_use_id`` (rows listed in
``attrs["sidechain_ids"]``), except its last: that one reaches the stream only as the ``usage`` of the
Task tool's result (a ``user`` event whose ``tool_use_result`` has ``agentId``, ``totalTokens`` and
``usage``; CLI 2.1.41), so it is a row of its own, a sidechain row like the subagent's others, unless an
event of the subagent already shows the same input counts.

Each ``result`` event closes a turn. What it bills is compared with the turn's rows twice, and every
comparison goes to ``attrs["crosscheck"]``:

- ``modelUsage``, per model: it is what the CLI bills (``total_cost_usd`` is priced from it) and it has
  one entry per model, the subagent's included. It adds up over a session (its resumed processes
  too), so each result is differenced from the session's one before. Where a model's rows hold less output
  than it bills and some of its outputs are snapshots, the difference goes on that model's last
  snapshot response of the turn (whose share each response had is not in the stream; putting it on
  another model's rows was the 41 % under-count of a Task run's output). Whatever a model bills beyond
  its rows besides is an issue located at the result line ("billed per modelUsage but in no event":
  the CLI makes calls its stream never shows), so the file's total is never silently the smaller one.
  These comparisons are in the crosscheck (with ``model``) where ``modelUsage`` names two models or more.
- ``result.usage``, per field: it has meant per-process, per-segment, last-turn-only and (2.1.41) the
  main conversation only in different CLI versions, so it is never trusted silently. Without a
  ``modelUsage`` its output is the one figure taken from it: when it exceeds the rows' sum and their
  finals are unknown, the difference goes on the turn's last response, and the crosscheck row says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
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
MODEL_FIELDS = {  # the same canonical fields from a ``modelUsage`` entry's names
    "input_tokens": ("inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens"),
    "cache_write_tokens": ("cacheCreationInputTokens",),
    "cache_read_tokens": ("cacheReadInputTokens",),
    "output_tokens": ("outputTokens",),
}
INPUTS = FIELDS["input_tokens"]  # the counts that tell one response from another (the output may be a snapshot)
DATED = re.compile(r"-\d{8}$")  # a model id's date suffix: ``modelUsage`` may name the model without it

Billed = dict[str, dict[str, int | None]]  # per model, per canonical field


@dataclass
class _Result:
    line: int
    first_cycle: int
    end_cycle: int
    usage: dict
    model_usage: dict
    session: str  # its ``session_id`` (else which ``init`` it follows): the scope over which ``modelUsage`` adds up
    billed: Billed = field(default_factory=dict)  # this turn's own share of ``model_usage`` (``_billed``)
    checks: list[dict] = field(default_factory=list)  # its ``attrs["crosscheck"]`` rows (``_reconciled``)


def read(paths: Sequence[Path], issues: Issues, tools: bool = True) -> Parsed:
    """Rows of ``paths``; tool-result rows only with ``tools``."""
    return Parsed.of_files(paths, lambda path: _read_file(path, issues), tools)


def _read_file(path: Path, issues: Issues) -> Parsed:
    responses = Responses(path, FORMAT, issues)
    out = Parsed()
    results: list[_Result] = []
    finals: dict[str, int] = {}
    subagents: dict[str, list[tuple[str, tuple, object]]] = {}  # Task call id -> (key, input counts, model)
    current: str | None = None
    version = None
    process = 0
    for number, line in json_lines(path, issues):
        kind = text(line.get("type"))
        if kind == "assistant":
            message = line.get("message")
            if not isinstance(message, dict):
                issues.add(path, number, "assistant event without a message object; line skipped")
            elif is_synthetic(message.get("model"), line.get("isApiErrorMessage")):
                out.attrs["events"].append(_event(path, number, responses, "api_error", {"text": str(message)[:500]}))
            else:
                parent = line.get("parent_tool_use_id")
                mid, model, usage = message.get("id"), message.get("model"), message.get("usage")
                content = content_of(message.get("content"))
                responses.add(number, mid, None, model, usage, content, parent is not None, line.get("timestamp"))
                if parent is not None:
                    key = str(mid) if mid else f"line {number}"  # ``Responses.add``'s key
                    subagents.setdefault(str(parent), []).append((key, _inputs(usage), model))
        elif kind == "user":
            message = as_dict(line.get("message"))
            responses.add_results(message.get("content"))
            task = as_dict(line.get("tool_use_result"))
            if isinstance(task.get("usage"), dict) and "agentId" in task:
                _task_result(path, number, line, task, responses, subagents, finals, issues)
        elif kind == "result":
            start = results[-1].end_cycle if results else 0
            usage, model_usage = as_dict(line.get("usage")), as_dict(line.get("modelUsage"))
            session = text(line.get("session_id")) or f"init {process}"
            results.append(_Result(number, start, len(responses.by_key), usage, model_usage, session))
            keep = ("subtype", "is_error", "num_turns", "duration_ms", "total_cost_usd")
            out.attrs["events"].append(_event(path, number, responses, "result", {k: line.get(k) for k in keep}))
        elif kind == "system":
            process += line.get("subtype") == "init"
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
    out.rows = _turns(path, issues, responses, results, finals)
    out.tools = responses.tools
    out.attrs["crosscheck"] = [check for result in results for check in result.checks]
    out.attrs["sidechain_ids"] = responses.sidechain_ids()
    out.attrs["files"].append(file_summary(path, FORMAT, out.rows, cli_version=version))
    return out


def _turns(
    path: Path, issues: Issues, responses: Responses, results: list[_Result], finals: dict[str, int]
) -> list[dict]:
    """The file's rows, each with its turn (the results that close them), reconciled with what each result bills
    (``_reconciled``; its crosscheck rows kept on the result)."""
    for key, output in finals.items():
        responses.final_output(key, output)
    rows = responses.rows()
    final_cycles = {responses.by_key[k].cycle for k in finals if k in responses.by_key}
    side_cycles = {r.cycle for r in responses.by_key.values() if r.sidechain}
    _billed(path, results, issues)
    for turn, result in enumerate(results, start=1):
        segment = rows[result.first_cycle : result.end_cycle]
        for row in segment:
            row["turn"] = turn
        result.checks = _reconciled(path, issues, turn, result, segment, final_cycles, side_cycles)
    for row in rows[results[-1].end_cycle if results else 0 :]:
        row["turn"] = len(results) + 1
    return rows


def _inputs(usage: object) -> tuple:
    """A response's input counts, which every event of it repeats whole (its output may be a snapshot)."""
    found = as_dict(usage)
    return tuple(found.get(k) for k in INPUTS)


def _task_result(
    path: Path,
    number: int,
    line: dict,
    task: dict,
    responses: Responses,
    subagents: dict[str, list[tuple[str, tuple, object]]],
    finals: dict[str, int],
    issues: Issues,
) -> None:
    """The subagent's last response, which only its Task result's ``usage`` shows (``tool_use_result``): a
    sidechain row, or, where an event of the subagent has the same input counts, that row's final output."""
    usage = task["usage"]
    blocks = [b for b in as_dict(line.get("message")).get("content") or [] if isinstance(b, dict)]
    call = next((str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"), None)
    seen = subagents.get(call, []) if call is not None else []
    output = usage.get("output_tokens")
    same = next((key for key, counts, _ in seen if counts == _inputs(usage)), None)
    if same is None:
        model = text(task.get("resolvedModel")) or next((m for _, _, m in reversed(seen) if isinstance(m, str)), None)
        if model is None:
            issues.add(
                path,
                number,
                "Task result: the subagent's model is stated nowhere; its last response is a row without one",
            )
        responses.add(number, None, None, model, usage, content_of(task.get("content")), True, line.get("timestamp"))
        same = f"line {number}"  # ``Responses.add``'s key of a response without an id
    if isinstance(output, int):
        finals[same] = max(output, finals.get(same, output))


def _figures(entry: object) -> dict[str, int | None]:
    """A ``modelUsage`` entry's canonical fields (None where a part is missing)."""
    found = as_dict(entry)
    out: dict[str, int | None] = {}
    for name, parts in MODEL_FIELDS.items():
        counts = [c for c in (found.get(p) for p in parts) if type(c) is int]
        out[name] = sum(counts) if len(counts) == len(parts) else None
    return out


def _billed(path: Path, results: list[_Result], issues: Issues) -> None:
    """Each result's own share of ``modelUsage``: its figures less the previous result's of the same session. The
    CLI's cost state adds up over a session, across the ``claude -p --resume`` processes that continue it, and
    starts again in a new one (measured on Claude Code 2.1.328 against the embedded provider: five processes of
    one resumed session in one stdout kept adding; five of five new sessions each started from 0). A figure
    below the previous one is taken as the turn's own, and said."""
    before: Billed = {}
    session = None
    for result in results:
        if result.session != session:
            before, session = {}, result.session
        now = {str(model): _figures(entry) for model, entry in result.model_usage.items()}
        for model, figures in now.items():
            prev = before.get(model)
            own = figures
            if prev is not None:
                own = {f: v - p if v is not None and (p := prev[f]) is not None else None for f, v in figures.items()}
                if any(v is not None and v < 0 for v in own.values()):
                    reason = (
                        f"modelUsage of {model} is below the previous result's: read as this turn's own, not cumulative"
                    )
                    issues.add(path, result.line, reason)
                    own = figures
            result.billed[model] = own
        before.update(now)


def _sums(rows: list[dict]) -> dict[str, int | None]:
    """The rows' sum of each field, None where a row's is unknown."""
    out: dict[str, int | None] = {}
    for name in FIELDS:
        values = [r[name] for r in rows]
        out[name] = sum(values) if all(v is not None for v in values) else None
    return out


def _of_models(rows: list[dict], models: Sequence[str]) -> dict[str, list[dict]]:
    """The rows of each model ``modelUsage`` names: the same id, else the same id without its date suffix; the
    rows of a model it does not name under their own."""
    found: dict[str, list[dict]] = {m: [] for m in models}
    plain = {DATED.sub("", m): m for m in models}
    for row in rows:
        model = row["model"]
        if model is None:
            continue
        name = model if model in found else plain.get(DATED.sub("", model), model)
        found.setdefault(name, []).append(row)
    return found


def _reconciled(
    path: Path,
    issues: Issues,
    turn: int,
    result: _Result,
    segment: list[dict],
    final_cycles: set[int],
    side_cycles: set[int],
) -> list[dict]:
    """The turn's rows against what its result bills: output raised per model, gaps reported (module doc)."""
    before, main = _sums(segment), [r for r in segment if r["cycle"] not in side_cycles]
    before_main = _sums(main)
    checks, raised = [], {}
    per_model = _of_models(segment, list(result.billed)) if result.billed else {}  # no modelUsage: result.usage alone
    for model, rows in per_model.items():
        billed, sums = result.billed.get(model), _sums(rows)
        partial = [r for r in rows if r["cycle"] not in final_cycles]
        notes = dict.fromkeys(FIELDS, "")
        out, have = (billed or {}).get("output_tokens"), sums["output_tokens"]
        if out is not None and have is not None and out > have and partial:
            partial[-1]["output_tokens"] += out - have
            raised[model] = out - have
            notes["output_tokens"] = f"per-event output is partial: {out - have} added to this model's last response"
        gaps = {
            name: bill - count
            for name, count in sums.items()
            if (bill := (billed or {}).get(name)) is not None and count is not None and bill > count
            if not (name == "output_tokens" and model in raised)  # raised: the difference is on the rows
        }
        if gaps:
            _gap_issue(path, issues, result.line, model, gaps, model in raised)
        if len(result.billed) > 1 or billed is None:
            for name in FIELDS:
                reported = None if billed is None else billed[name]
                detail = notes[name] or ("not in modelUsage" if billed is None else "")
                detail = detail or ("billed per modelUsage but in no event" if name in gaps else "")
                note = "; ".join(p for p in (f"modelUsage of {model}", detail) if p)  # the printed line names it
                checks.append(_check(path, result.line, turn, name, sums[name], reported, note, model))
    return _usage_checks(path, turn, result, segment, main, before, before_main, final_cycles, raised) + checks


# How a modelUsage gap's issue is worded: ``kit.transcripts.sources.with_log`` finds it there, and takes it back
# when the provider log holds the requests the stream did not show (a compaction's summary request).
GAP = "billed per modelUsage but in no event"


def _gap_issue(path: Path, issues: Issues, line: int, model: str, gaps: dict, raised: bool) -> None:
    counts = ", ".join(f"{name} {count:,}" for name, count in gaps.items())
    reason = (
        f"{model}: {counts} {GAP} (calls the CLI made that its stream does not show, such as a compaction's "
        "summary request); not in the rows"
    )
    if raised:
        reason += "; the output added to this model's last response may hold theirs"
    issues.add(path, line, reason)


def _usage_checks(
    path: Path,
    turn: int,
    result: _Result,
    segment: list[dict],
    main: list[dict],
    before: dict[str, int | None],
    before_main: dict[str, int | None],
    final_cycles: set[int],
    raised: dict[str, int],
) -> list[dict]:
    """``result.usage`` against the turn's rows (before any output was raised), or against the main
    conversation's where the turn has subagent rows and it covers those only (CLI 2.1.41)."""
    scope, sums, covered = "", before, segment
    inputs = _reported(result, "input_tokens")
    if (
        len(main) < len(segment)
        and inputs is not None
        and inputs == before_main["input_tokens"] != before["input_tokens"]
    ):
        scope = f"result.usage covers the main conversation only, not the {len(segment) - len(main)} subagent responses"
        sums, covered = before_main, main
    checks = []
    for name in FIELDS:
        rows_sum, reported = sums[name], _reported(result, name)
        partial = covered and not {r["cycle"] for r in covered} <= final_cycles
        note = ""
        if name == "output_tokens" and raised:
            added = ", ".join(f"{m} +{n}" for m, n in raised.items())
            note = (
                f"per-event output_tokens are partial streaming snapshots (sum {rows_sum}); modelUsage's output "
                f"per model was added to the turn's last response of that model: {added}"
            )
        elif (
            name == "output_tokens"
            and not result.billed
            and partial
            and rows_sum is not None
            and reported is not None
            and reported > rows_sum
        ):
            covered[-1]["output_tokens"] += reported - rows_sum
            note = (
                f"per-event output_tokens are partial streaming snapshots (sum {rows_sum}); "
                f"the difference {reported - rows_sum} was added to the turn's last response"
            )
        elif rows_sum is None or reported is None:
            note = "not comparable: a figure is missing"
        elif rows_sum != reported:
            note = "result.usage disagrees with the per-response sum; rows keep the per-response values"
        checks.append(
            _check(path, result.line, turn, name, rows_sum, reported, "; ".join(p for p in (scope, note) if p))
        )
    return checks


def _check(
    path: Path,
    line: int,
    turn: int,
    name: str,
    rows_sum: int | None,
    reported: int | None,
    note: str,
    model: str | None = None,
) -> dict:
    """One ``attrs["crosscheck"]`` row; ``model`` names a ``modelUsage`` entry (None: ``result.usage``)."""
    return {
        "source_path": str(path),
        "source_line": line,
        "turn": turn,
        "field": name,
        "rows_sum": rows_sum,
        "reported": reported,
        "agree": rows_sum is not None and rows_sum == reported,
        "note": note,
        "model": model,
    }


def _reported(result: _Result, name: str) -> int | None:
    """The result's figure for a canonical field; output falls back to the sum over ``modelUsage``."""
    parts = [result.usage.get(k) for k in FIELDS[name]]
    counts = [p for p in parts if isinstance(p, int)]
    if len(counts) == len(parts):
        return sum(counts)
    if name == "output_tokens":
        outs = [as_dict(m).get("outputTokens") for m in result.model_usage.values()]
        out_counts = [o for o in outs if isinstance(o, int)]
        if outs and len(out_counts) == len(outs):
            return sum(out_counts)
    return None


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
