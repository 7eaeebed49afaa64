"""Which files of a kit trial or batch folder are read, which only cross-check, and how a trial is numbered.

A trial folder (``raw/<trial_id>/`` with ``meta.json``) holds the same responses several times: the
backend's own transcripts, the embedded provider's log of the trial (``provider_log.jsonl``), the SDK
agents' records, ``codex exec --json`` stdout beside Codex rollouts; a batch folder adds the batch-wide
request log (``raw/_provider/requests.jsonl``). Reading them all would count every response two or three
times, so one rule, here, picks the primary source of each trial for the parse stage (``kit.stages.parse``)
and for ``python -m kit parse`` alike: every file in the format the backend lists first in
``meta.json``; the rest are cross-checks (docs/method.md#transcripts).

A trial with fresh sessions, subagents or compactions has several primary files, each numbering its
responses from 0. ``number`` orders them by start time and numbers ``cycle`` across the trial (the
canonical row's contract, docs/tables.md; a file overlapping another in time, such as a subagent's,
has its responses placed where they happened, the order the provider logged them), keeping the
per-file count as ``file_cycle`` and the file's role (``main``, ``subagent``, ``compaction``) as
``file_role`` (docs/design.md).

The provider log also holds the requests a CLI makes that no transcript records (Claude Code's compaction
summaries): ``with_log`` adds them to the trial's rows as side requests, so that total tokens hold every
request, and ``unseen_compactions`` names each compaction whose request no row holds (docs/method.md#totals).
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from kit.experiment.layout import BATCH_LOG, TrialDir
from kit.jsontypes import Row
from kit.records import TrialMeta
from kit.transcripts import claude_stream, read, readers
from kit.transcripts._base import COMPACTION, COMPACTION_EVENTS, MAIN, SIDE, UNRECORDED, TranscriptError
from kit.transcripts._detect import detect

CHECKED = ["input_tokens", "cache_read_tokens", "output_tokens"]


@dataclass(frozen=True)
class Trial:
    """One trial folder's sources: ``primary`` is read, ``log`` and ``others`` describe the same responses;
    ``issues`` lists the listed files whose format could not be told (empty, cut off, unknown)."""

    folder: Path
    meta: TrialMeta
    primary: list[Path]
    log: Path | None
    others: list[Path]
    issues: list[dict]

    @property
    def ident(self) -> Row:
        """The identity columns meta.json gives every row of the trial."""
        return {"batch": self.meta.batch, "arm": self.meta.arm, "run": self.meta.run, "trial_id": self.meta.trial_id}


def is_trial(folder: Path) -> bool:
    """A finished trial's folder: the run stage writes meta.json last."""
    return TrialDir(folder).is_complete()


def trial(folder: Path) -> Trial:
    """The sources of a trial folder: the primary transcripts (every file in the format the backend lists
    first), the provider log, and the other listed files.

    A backend lists its transcripts best first (Codex rollouts before ``codex exec --json`` stdout,
    Claude session files before stream-json); a trial with fresh sessions has one such file per session.
    A file whose format cannot be told (a CLI killed before it wrote a line) is an issue at its place,
    not the end of the batch's parse. Without a transcript of its own, the provider log is the primary
    source.
    """
    files = TrialDir(folder)
    meta = files.read_meta()  # the one decoding of the trial's meta.json: the parse stage reads it from here
    listed = files.transcripts(meta)
    log = files.provider_log if files.provider_log in listed else None
    formats, issues = {}, []
    for path in (p for p in listed if p != files.provider_log):
        try:
            formats[path] = detect(path)
        except TranscriptError as exc:
            issues.append({"source_path": exc.path, "source_line": exc.line, "reason": exc.reason})
    if not formats:
        return Trial(folder, meta, [log] if log else [], log, [], issues)
    best = next(iter(formats.values()))
    primary = [p for p, fmt in formats.items() if fmt == best]
    return Trial(folder, meta, primary, log, [p for p in formats if p not in primary], issues)


def trial_folders(path: Path) -> list[Path] | None:
    """The trial folders ``path`` stands for (a trial, a batch or its ``raw/``), in name order; None when
    ``path`` is no kit folder (a folder of transcripts is then read file by file)."""
    if is_trial(path):
        return [path]
    raw = path / "raw" if (path / "raw").is_dir() else path
    found = sorted(p for p in raw.iterdir() if p.is_dir() and is_trial(p))
    return found or None


def batch_log(path: Path) -> Path | None:
    """The batch-wide request log of a batch folder (or its ``raw/``), if it has one."""
    for candidate in (path / BATCH_LOG, path / BATCH_LOG.relative_to("raw")):
        if candidate.is_file():
            return candidate
    return None


def file_role(path: Path, fmt: str) -> str:
    """``main``, ``subagent`` or ``compaction``: whose window a transcript file's responses fill, as the reader of
    ``fmt`` tells from the file (``Reader.role``: Claude Code's file names, a Codex rollout's ``session_meta``);
    ``main`` for a format no reader has."""
    reader = readers.get(fmt)
    return reader.role(path) if reader is not None else MAIN


@dataclass(frozen=True)
class Numbering:
    """Where each file's responses sit in the trial: per file, its kept per-file cycles (ascending; a
    reader drops a response another file holds too) and their trial cycles."""

    files: dict[str, tuple[np.ndarray, np.ndarray]]

    def first(self, source_path: str) -> int | None:
        """The file's first kept per-file cycle (None for a file without rows)."""
        own = self.files.get(source_path, (np.array([]), None))[0]
        return int(own[0]) if len(own) else None

    def gap(self, source_path: str, file_cycle: int | None) -> tuple[int, float] | None:
        """Where an event before the file's response ``file_cycle`` sits in the trial: the trial cycles of the file's
        response before it (-1 for none) and of the one at or after it (infinity past the file's last)."""
        if file_cycle is None or pd.isna(file_cycle) or source_path not in self.files:
            return None
        own, trial = self.files[source_path]
        i = int(np.searchsorted(own, file_cycle, side="left"))
        return (int(trial[i - 1]) if i else -1), (float(trial[i]) if i < len(trial) else float("inf"))

    def cycle(self, source_path: str, file_cycle: int | None) -> int | None:
        """The trial cycle of the first response of ``source_path`` at or after ``file_cycle`` (an event's
        or tool result's "next request"); past the file's last response, one past that response."""
        if file_cycle is None or pd.isna(file_cycle) or source_path not in self.files:
            return None
        own, trial = self.files[source_path]
        i = int(np.searchsorted(own, file_cycle, side="left"))
        return int(trial[i]) if i < len(trial) else int(trial[-1]) + 1


NEVER = np.iinfo(np.int64).max  # the time of a file with no timestamps: after every timed one


def _times(started: pd.Series) -> np.ndarray:
    """A file's response times in ns, a missing one taken from the response before it (or, first, after)."""
    if started.isna().all():
        return np.full(len(started), NEVER, dtype=np.int64)
    return started.ffill().bfill().astype("int64").to_numpy()


def number(rows: pd.DataFrame) -> tuple[pd.DataFrame, Numbering]:
    """One trial's rows with ``cycle`` and ``turn`` counted across its files, ``file_cycle``, ``file_role``
    and ``sidechain``, in trial order.

    Files are taken in start order (their first response's ``started_at``; files without one after the
    timed ones, in the given order) and their responses merged by time, never reordered within a file:
    files one after the other (fresh sessions) follow each other, and a subagent's responses fall
    between the parent's where they happened, as the provider logged them. A main file's turns follow
    the previous main file's; subagent and compaction responses are no user's turn (NA). ``sidechain``
    is set for those files' responses, for the responses a reader lists in ``attrs["sidechain_ids"]``
    (subagent lines inside a Claude session) and for the side requests a reader marks (``side_request``: a
    Codex rollout's compaction request); a compaction file's responses are side requests too.
    """
    attrs = rows.attrs
    started = pd.to_datetime(rows["started_at"], utc=True, errors="coerce", format="ISO8601")
    sidechain_ids = {(s["source_path"], s["cycle"]) for s in attrs.get("sidechain_ids", [])}
    files = []
    for path, part in rows.groupby("source_path", sort=False):
        part = part.sort_values("cycle", kind="stable")
        files.append((str(path), part, _times(started[part.index])))
    files.sort(key=lambda f: f[2][0])  # stable: files of equal start keep their given order
    merged = heapq.merge(*[[(t, i, pos) for pos, t in enumerate(times)] for i, (_, _, times) in enumerate(files)])
    place = {(i, pos): cycle for cycle, (_, i, pos) in enumerate(merged)}
    parts, numbering, turn = [], {}, 0
    for i, (path, part, _) in enumerate(files):
        kind = file_role(Path(path), str(part["source_format"].iloc[0]))
        own = part["cycle"]  # NA where a reader gives no cycle of its own
        trial = np.array([place[i, pos] for pos in range(len(part))], dtype=np.int64)
        numbering[path] = (np.arange(len(part)) if own.isna().any() else own.to_numpy(dtype=np.int64), trial)
        trial_turn = part["turn"] + turn if kind == "main" else pd.Series(pd.NA, index=part.index, dtype="Int64")
        side = part["side_request"].astype("string") if "side_request" in part else pd.Series(pd.NA, index=part.index)
        side = side.fillna(COMPACTION) if kind == COMPACTION else side
        marked = np.array([(path, c) in sidechain_ids for c in own], dtype=bool) | side.notna().to_numpy()
        parts.append(
            part.assign(
                file_cycle=own,
                cycle=pd.Series(trial, index=part.index, dtype="Int64").where(own.notna()),
                turn=trial_turn,
                file_role=kind,
                sidechain=marked | (kind != "main"),
                side_request=side.astype("string"),
                _order=trial,
            )
        )
        if kind == "main" and trial_turn.notna().any():
            turn = int(trial_turn.max())
    if not parts:
        out = rows.assign(file_cycle=rows["cycle"], file_role="main", sidechain=False)
    else:
        out = pd.concat(parts).sort_values("_order", kind="stable").drop(columns="_order")
    out.attrs = attrs
    return out.reset_index(drop=True), Numbering(numbering)


EVENT_COLUMNS = ["batch", "arm", "trial_id", "cycle", "kind", "source_path", "source_line", "detail"]


def renumbered(found: pd.DataFrame, numbering: Numbering) -> pd.DataFrame:
    """Tool results of the transcripts, their per-file cycles mapped onto the trial's.

    A result of a response another file holds too (a resumed session's copy of its history, dropped by
    the reader) comes before the file's first kept response and is dropped with it.
    """
    if found.empty:
        return found
    first = [numbering.first(p) for p in found["source_path"]]
    keep = [f is not None and pd.notna(c) and c >= f for f, c in zip(first, found["cycle"], strict=True)]
    found = found[keep]
    cycles = [numbering.cycle(p, c) for p, c in zip(found["source_path"], found["cycle"], strict=True)]
    return found.assign(cycle=pd.array(cycles, dtype="Int64"))


def trial_event(event: Row, ident: Row, numbering: Numbering) -> Row:
    """A transcript event (compaction, system event, API error …) kept for the occupancy analysis, at the
    trial's cycle of the request after it (a row of ``EVENT_COLUMNS``); the parse stage and the history both
    keep them."""
    detail = event.get("detail")
    return {
        "batch": ident["batch"],
        "arm": ident["arm"],
        "trial_id": ident["trial_id"],
        "cycle": numbering.cycle(str(event.get("source_path")), event.get("cycle")),
        "kind": event.get("kind"),
        "source_path": event.get("source_path"),
        "source_line": event.get("source_line"),
        "detail": detail if isinstance(detail, str) or detail is None else orjson.dumps(detail).decode(),
    }


def crosscheck(primary: pd.DataFrame, logged: pd.DataFrame, log: Path) -> list[dict]:
    """Client-side and server-side usage must agree request by request; the places where they do not."""
    if len(primary) != len(logged):
        reason = f"cross-check: {len(primary)} responses in the transcript, {len(logged)} in the provider log"
        return [{"source_path": str(log), "source_line": 0, "reason": reason}]
    lines = logged["source_line"] if "source_line" in logged else pd.Series(range(1, len(logged) + 1))
    pairs = zip(primary[CHECKED].to_dict("records"), logged[CHECKED].to_dict("records"), lines, strict=True)
    return [
        {"source_path": str(log), "source_line": int(line), "reason": f"cross-check: transcript {a} != log {b}"}
        for a, b, line in pairs
        if a != b
    ]


def with_log(
    rows: pd.DataFrame, numbering: Numbering, logged: pd.DataFrame, log: Path
) -> tuple[pd.DataFrame, Numbering, list[dict]]:
    """A trial's numbered rows with the provider log's requests that no transcript holds, and the cross-check.

    The log holds every request the client made (the embedded provider's, and the recording proxy's in front of
    a real endpoint); a transcript holds the conversation's. A CLI makes requests besides it that its transcript
    does not record: Claude Code's summary requests of a compaction (measured on 2.1.328: a ``/compact`` turn
    made two, about 12,800 input tokens each, that only the log holds), title or other side requests. Left out,
    they would make total tokens understate the trial (docs/method.md#totals). So where the log has more
    requests than the transcripts, each transcript response is matched, in order, to the first later logged
    request with the same counts (``CHECKED``; the input count alone where no such request is left), and the
    requests left over join the rows as side requests (``side_request``: ``compaction`` where a compaction event
    of the transcript falls between them and the transcript's next response, else ``unrecorded``), read from
    the log (``source_format`` ``provider_log``, ``file_role`` ``compaction`` or ``side``, no user's turn).
    ``cycle`` is then the log's order, as ``segments`` and the log's tool results number it, and ``numbering``
    follows. Where the transcript's responses cannot all be matched, nothing is added and the issue says how
    many tokens the log holds beyond the rows. Otherwise the pairs are compared as ``crosscheck`` does.
    """
    if len(logged) <= len(rows):
        return rows, numbering, crosscheck(rows, logged, log)
    logged = logged.reset_index(drop=True)
    matched = _matched(rows, logged)
    if matched is None:
        beyond = logged["total_tokens"].sum(min_count=1) - rows["total_tokens"].sum(min_count=1)
        reason = (
            f"cross-check: {len(rows)} responses in the transcript, {len(logged)} in the provider log, which the "
            f"transcript's responses cannot be matched to in order: the log's {beyond} further tokens are not "
            "in the rows"
        )
        return rows, numbering, [{"source_path": str(log), "source_line": 0, "reason": reason}]
    cycles = np.asarray(matched, dtype=np.int64)
    files = {path: (own, cycles[trial]) for path, (own, trial) in numbering.files.items()}
    extra = np.setdiff1d(np.arange(len(logged)), cycles)
    files[str(log)] = (logged["cycle"].to_numpy(dtype=np.int64)[extra], extra)
    numbering = Numbering(files)
    kinds = _side_kinds(rows.attrs.get("events", []), numbering, extra)
    side = logged.iloc[extra].assign(
        file_cycle=logged["cycle"].iloc[extra],
        cycle=extra,
        turn=pd.NA,
        file_role=[COMPACTION if k == COMPACTION else SIDE for k in kinds],
        sidechain=True,
        side_request=kinds,
    )
    mine = rows.assign(cycle=cycles)
    out = pd.concat([mine, side.reindex(columns=rows.columns)], ignore_index=True).sort_values("cycle", kind="stable")
    out = out.astype({c: rows[c].dtype for c in rows.columns}).reset_index(drop=True)
    out.attrs = {**rows.attrs, "issues": _explained_gaps(rows.attrs.get("issues", []), side)}
    return out, numbering, crosscheck(rows, logged.iloc[cycles].reset_index(drop=True), log)


_GAP_INPUT = re.compile(r"input_tokens ([\d,]+)")


def _explained_gaps(issues: list[dict], side: pd.DataFrame) -> list[dict]:
    """The trial's issues less the stream's modelUsage gaps (``claude_stream.GAP``) that the log's side requests
    account for: the CLI billed calls its stream did not show, and the log holds them, now rows of their own.
    Measured on Claude Code 2.1.328: a ``/compact`` turn's stream-json billed 12,788 input tokens in no event; the
    log's summary request held 12,797. A gap larger than what the side requests hold stays an issue."""
    room = int(pd.to_numeric(side["input_tokens"], errors="coerce").fillna(0).sum())
    kept = []
    for issue in issues:
        found = _GAP_INPUT.search(issue["reason"]) if claude_stream.GAP in issue["reason"] else None
        gap = int(found.group(1).replace(",", "")) if found else None
        if gap is not None and gap <= room:
            room -= gap
            continue
        kept.append(issue)
    return kept


def _matched(rows: pd.DataFrame, logged: pd.DataFrame) -> list[int] | None:
    """For each transcript response in trial order, the logged request it is (``with_log``): the first one after
    the previous response's with the same counts, else with the same input count; None where one has neither."""
    key = [tuple(None if pd.isna(v) else int(v) for v in values) for values in logged[CHECKED].itertuples(index=False)]
    found, start = [], 0
    for values in rows[CHECKED].itertuples(index=False):
        mine = tuple(None if pd.isna(v) else int(v) for v in values)
        if mine[0] is None:
            return None
        later = range(start, len(key))
        at = next((j for j in later if key[j] == mine), None)
        at = at if at is not None else next((j for j in later if key[j][0] == mine[0]), None)
        if at is None:
            return None
        found.append(at)
        start = at + 1
    return found


def _compaction_gaps(events: list[Row], numbering: Numbering) -> list[tuple[Row, tuple[int, float]]]:
    """Each compaction event (``COMPACTION_EVENTS``) with its gap in the trial (``Numbering.gap``): the response
    of its file before it, whose request a Codex compaction is, to the next one, which Claude Code's precede."""
    found = []
    for event in events:
        if event.get("kind") in COMPACTION_EVENTS:
            gap = numbering.gap(str(event.get("source_path")), event.get("cycle"))
            if gap is not None:
                found.append((event, gap))
    return found


def _side_kinds(events: list[Row], numbering: Numbering, cycles: np.ndarray) -> list[str]:
    """``compaction`` for each side request (by trial cycle) inside a compaction event's gap, else ``unrecorded``."""
    gaps = [gap for _, gap in _compaction_gaps(events, numbering)]
    return [COMPACTION if any(a <= c < b for a, b in gaps) else UNRECORDED for c in cycles]


def unseen_compactions(rows: pd.DataFrame, numbering: Numbering, events: list[Row] | None = None) -> list[dict]:
    """The compactions whose requests are in none of the rows, as issues: their tokens are missing from the totals.

    A compaction is seen where a row marked ``side_request`` ``compaction`` lies in its gap (``_compaction_gaps``):
    a Codex rollout's own summary request, a compaction file's responses, or the provider log's requests
    (``with_log``). Claude Code writes none of its summary requests into its transcripts (measured on 2.1.328),
    so a user's own history, which has no provider log, cannot see them: the issue says so, once per gap
    (a Codex compaction has two events in older CLIs), at the event's line. ``events``: the readers' events of
    the rows' files (default ``rows.attrs["events"]``; a history passes each session's own).
    """
    side = rows["side_request"].astype("string") if "side_request" in rows else pd.Series(dtype="string")
    marked = rows.loc[(side == COMPACTION).fillna(False).to_numpy(), "cycle"].dropna().astype(int).tolist()
    issues, told = [], set()
    found = rows.attrs.get("events", []) if events is None else events
    for event, (a, b) in _compaction_gaps(found, numbering):
        if (a, b) in told or any(a <= c < b for c in marked):
            continue
        told.add((a, b))
        reason = (
            f"{event['kind']}: no request of this compaction is in the transcript and no provider log gives it "
            "(Claude Code records none of its summary requests; a Codex rollout names its own): its tokens are "
            "not in the total tokens, which understate the session (docs/method.md#totals)"
        )
        issues.append({"source_path": event["source_path"], "source_line": event["source_line"], "reason": reason})
    return issues


def check_others(trial: Trial, rows: pd.DataFrame) -> list[dict]:
    """The trial's other files of the same responses against its rows: their own issues and every sum
    they disagree on (``_totals_check``). The side requests taken from the provider log (``with_log``) are
    in none of those files, so the transcripts' own rows are compared."""
    issues = []
    side = rows.iloc[0:0]
    if trial.log is not None and trial.log not in trial.primary:
        side = rows[rows["source_path"] == str(trial.log)]
        rows = rows[rows["source_path"] != str(trial.log)]
    for other in trial.others:
        theirs = read([other])
        issues += [*_explained_gaps(theirs.attrs["issues"], side), *_totals_check(rows, theirs, other)]
    return issues


def _totals_check(primary: pd.DataFrame, other: pd.DataFrame, path: Path) -> list[dict]:
    """Another file of the same responses (``codex exec --json`` turns, stream-json, SDK records) must give
    the same token sums; the fields where it does not. Its rows may be turns, so only sums compare."""
    out = []
    for column in CHECKED:
        mine, theirs = primary[column].sum(min_count=1), other[column].sum(min_count=1)
        if pd.isna(mine) and pd.isna(theirs):
            continue
        if pd.isna(mine) or pd.isna(theirs) or mine != theirs:
            reason = f"cross-check {column}: the primary transcripts give {mine}, this file {theirs}"
            out.append({"source_path": str(path), "source_line": 0, "reason": reason})
    return out


def disagreements(rows: pd.DataFrame) -> list[dict]:
    """A transcript's own totals that its rows do not reproduce, and the adjustments made to match them
    (``attrs["crosscheck"]``: a stream-json turn's output raised to its ``result`` line's), as issues."""
    return [
        {
            "source_path": c["source_path"],
            "source_line": c["source_line"],
            "reason": f"cross-check {c['field']}: rows give {c['rows_sum']}, the transcript says {c['reported']}"
            + (f"; {c['note']}" if c["note"] else ""),
        }
        for c in rows.attrs.get("crosscheck", [])
        if not c["agree"]
    ]
