"""The parse stage: every trial's raw transcripts into the canonical tables under ``tables/``.

Per trial, the backend's own transcript is the primary source (the SDK agents' response records,
the Codex rollout, the Claude session file); the embedded provider's log of the same trial is a
cross-check, and any disagreement between the two is reported in ``parse_issues``, never
silently resolved. The provider log also gives each request's prompt segments (content hashes and
token counts), which the cache model replays offline.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd

from kit import metrics, transcripts
from kit.layout import BatchDir, write_table
from kit.schema import ISSUE_COLUMNS, TOOL_RESULT_COLUMNS, TOOL_RESULT_DTYPES, frame, requests_frame
from kit.transcripts._tools import CATEGORIES

PROVIDER_LOG = "provider_log.jsonl"
META_COLUMNS = [
    "batch", "arm", "run", "trial_id", "order_index", "status", "reason", "grade", "grade_detail",
    "backend", "model", "isolation", "control", "started_at", "wall_s", "simulated",
]  # fmt: skip
SEGMENT_COLUMNS = ["batch", "arm", "run", "trial_id", "cycle", "t", "input_tokens", "segments_json"]
EVENT_COLUMNS = ["batch", "arm", "trial_id", "cycle", "kind", "source_path", "source_line", "detail"]


def trial_meta(bd: BatchDir) -> pd.DataFrame:
    """One row per completed trial (failed ones included) from ``raw/<trial_id>/meta.json``."""
    rows = []
    for tdir in bd.trial_dirs():
        meta = orjson.loads((tdir / "meta.json").read_bytes())
        row = {c: meta.get(c) for c in META_COLUMNS}
        row["isolation"] = ",".join(meta.get("isolation") or []) or "none"
        rows.append(row)
    df = pd.DataFrame(rows, columns=META_COLUMNS)
    return df.astype({"run": "Int64", "order_index": "Int64", "grade": "Float64", "wall_s": "Float64"})


def _sources(tdir: Path, meta: dict) -> tuple[list[Path], Path | None]:
    """The primary transcripts (every file in the format the backend lists first) and the provider log.

    A backend lists its transcripts best first (Codex rollouts before ``codex exec --json`` stdout,
    Claude session files before stream-json); a trial with fresh sessions has one such file per
    session. Files in the other formats describe the same responses, so reading them too would count
    every response twice.
    """
    names = [n for n in meta.get("transcripts", []) if (tdir / n).is_file()]
    log = tdir / PROVIDER_LOG if PROVIDER_LOG in names else None
    others = [tdir / n for n in names if n != PROVIDER_LOG]
    if not others:
        return ([log] if log else []), log
    best = transcripts.detect(others[0])
    return [p for p in others if transcripts.detect(p) == best], log


def parse_batch(batch_dir: Path, strict: bool = False) -> dict[str, pd.DataFrame]:
    """Read every trial; write and return requests, trials, tool_results, parse_issues, segments, events."""
    bd = BatchDir(Path(batch_dir))
    meta_df = trial_meta(bd)
    requests, tools, issues, segments, events = [], [], [], [], []
    for tdir in bd.trial_dirs():
        meta = orjson.loads((tdir / "meta.json").read_bytes())
        ident = {k: meta[k] for k in ("batch", "arm", "run", "trial_id")}
        primary, log = _sources(tdir, meta)
        if not primary:
            issues.append({"source_path": str(tdir), "source_line": 0, "reason": "no transcript in trial folder"})
            continue
        # the provider sees every tool result the client sends back; SDK response records do not
        if log is None or log in primary:
            (rows, found), checks = transcripts.tables(primary, strict=strict), []
        else:
            rows, (log_rows, found) = transcripts.read(primary, strict=strict), transcripts.tables([log])
            checks = _crosscheck(rows, log_rows, log)
        issues += rows.attrs.get("issues", []) + _disagreements(rows) + checks
        events += [_event(e, ident) for e in rows.attrs.get("events", [])]
        requests.append(rows.assign(**ident, backend=meta["backend"]))
        tools.append(found.assign(**ident))
        if log is not None:
            segments += _segments(log, ident)
    req = pd.concat(requests, ignore_index=True) if requests else requests_frame([])
    req = requests_frame(req.to_dict("records"))
    tool_results = frame(
        pd.concat(tools, ignore_index=True).to_dict("records") if tools else [], TOOL_RESULT_COLUMNS, TOOL_RESULT_DTYPES
    )
    tables = {
        "requests": req,
        "trials": _with_calls_by_category(metrics.trial_table(req, meta_df), tool_results),
        "tool_results": tool_results,
        "parse_issues": pd.DataFrame(issues, columns=ISSUE_COLUMNS).astype({"source_line": "Int64"}),
        "segments": pd.DataFrame(segments, columns=SEGMENT_COLUMNS),
        "events": pd.DataFrame(events, columns=EVENT_COLUMNS).astype({"cycle": "Int64", "source_line": "Int64"}),
    }
    for name, df in tables.items():
        write_table(bd.tables / f"{name}.parquet", df)
    return tables


def _with_calls_by_category(trials: pd.DataFrame, tool_results: pd.DataFrame) -> pd.DataFrame:
    """Tool calls per trial by family (``calls_read``, ``calls_grep`` …): how each arm got its bytes."""
    counts = tool_results.groupby(["trial_id", "category"]).size().unstack("category", fill_value=0)
    counts = counts.reindex(columns=list(CATEGORIES), fill_value=0).add_prefix("calls_")
    out = trials.merge(counts, left_on="trial_id", right_index=True, how="left")
    return out.astype({c: "Int64" for c in counts.columns}).fillna({c: 0 for c in counts.columns})


def _event(event: dict, ident: dict) -> dict:
    """A transcript event (compaction, system event, API error …) kept for the occupancy analysis."""
    detail = event.get("detail")
    return {
        "batch": ident["batch"],
        "arm": ident["arm"],
        "trial_id": ident["trial_id"],
        "cycle": event.get("cycle"),
        "kind": event.get("kind"),
        "source_path": event.get("source_path"),
        "source_line": event.get("source_line"),
        "detail": detail if isinstance(detail, str) or detail is None else orjson.dumps(detail).decode(),
    }


def _segments(log: Path, ident: dict) -> list[dict]:
    """Each logged request's prompt segments, in order, for the offline cache model."""
    out = []
    with log.open("rb") as fh:
        answered = (rec for rec in map(orjson.loads, fh) if rec.get("status") == 200)  # rows exist only for these
        for cycle, rec in enumerate(answered):
            segs = rec.get("segments") or []
            out.append(
                {
                    **ident,
                    "cycle": cycle,
                    "t": rec.get("t"),
                    "input_tokens": sum(s[1] for s in segs),
                    "segments_json": orjson.dumps(segs).decode(),
                }
            )
    return out


def _disagreements(rows: pd.DataFrame) -> list[dict]:
    """A transcript's own totals that its rows do not reproduce (``attrs["crosscheck"]``), as issues."""
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


def _crosscheck(primary: pd.DataFrame, logged: pd.DataFrame, log: Path) -> list[dict]:
    """Client-side and server-side usage must agree request by request; report where they do not."""
    cols = ["input_tokens", "cache_read_tokens", "output_tokens"]
    if len(primary) != len(logged):
        reason = f"cross-check: {len(primary)} responses in the transcript, {len(logged)} in the provider log"
        return [{"source_path": str(log), "source_line": 0, "reason": reason}]
    out = []
    for i, (a, b) in enumerate(zip(primary[cols].to_dict("records"), logged[cols].to_dict("records"), strict=True)):
        if a != b:
            out.append(
                {"source_path": str(log), "source_line": i + 1, "reason": f"cross-check: transcript {a} != log {b}"}
            )
    return out


def totals(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per arm: trials, failed, requests and token sums (what the parse notebook shows)."""
    trials = tables["trials"]
    cols = ["input_tokens", "cache_read_tokens", "output_tokens", "total_tokens"]
    g = trials.groupby("arm", dropna=False)
    out = g[cols].sum(min_count=1)
    out.insert(0, "failed", g["status"].apply(lambda s: int((s != "ok").sum())))
    out.insert(0, "trials", g.size())
    out["requests"] = g["cycles"].sum()
    return out.reset_index()
