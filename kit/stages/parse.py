"""The parse stage: every trial's raw transcripts into the canonical tables under ``tables/``.

Per trial, the backend's own transcripts are the primary source (the SDK agents' response records,
the Codex rollouts, the Claude session files: ``kit.transcripts.sources``, the one rule ``python -m kit
parse`` follows too); the embedded provider's log of the same trial is a cross-check, and any
disagreement between the two is reported in ``parse_issues``, never silently resolved
(docs/method.md#transcripts); so are the other files of the same responses (``codex exec --json``
stdout, stream-json), in sums. The log also holds the requests a CLI makes that its transcript does
not record (Claude Code's compaction summaries): they join the rows as side requests (``side_request``),
so that total tokens hold every request of the trial (``kit.transcripts.sources.with_log``,
docs/method.md#totals); a compaction whose requests no source holds is an issue. A trial's files
(fresh sessions, subagents, compactions) are numbered in start order, so ``cycle`` counts the trial's
responses (docs/tables.md). The provider log also gives each request's prompt segments (content hashes
and token counts), which the cache model
replays offline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from kit import transcripts
from kit.analysis import metrics
from kit.experiment.layout import BatchDir, batch_path
from kit.experiment.lock import batch_lock
from kit.files import write_table
from kit.schema import (
    CODE_MODE,
    ISSUE_COLUMNS,
    OUTPUT,
    QUOTA,
    TOOL_RESULT_COLUMNS,
    TOOL_RESULT_DTYPES,
    frame,
    requests_frame,
)
from kit.transcripts import sources
from kit.transcripts._tools import CATEGORIES
from kit.transcripts.sources import EVENT_COLUMNS

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "EVENT_COLUMNS",
    "META_COLUMNS",
    "QUOTA_COLUMNS",
    "RESPONSE_SUMS",
    "SEGMENT_COLUMNS",
    "SIDE_COLUMNS",
    "batch_path",
    "parse_batch",
    "totals",
]

META_COLUMNS = [
    "batch", "arm", "run", "trial_id", "order_index", "status", "reason", "grade", "grade_detail",
    "backend", "model", "isolation", "control", "started_at", "wall_s", "simulated",
]  # fmt: skip
SEGMENT_COLUMNS = ["batch", "arm", "run", "trial_id", "cycle", "t", "input_tokens", "segments_json"]
RESPONSE_SUMS = [*OUTPUT, *CODE_MODE]  # per-response counts the trials table sums
QUOTA_COLUMNS = [f"{c}_{end}" for c in QUOTA for end in ("first", "last")]  # quota at the trial's first/last response
SIDE_COLUMNS = ["side_requests", "side_tokens"]  # the trial's side requests (compactions …) and their total tokens


def _trial_meta(trials: list[sources.Trial]) -> pd.DataFrame:
    """One row per completed trial (failed ones included) from its ``raw/<trial_id>/meta.json``."""
    rows = []
    for meta in (t.meta for t in trials):
        row = {c: getattr(meta, c) for c in META_COLUMNS}
        row["isolation"] = ",".join(meta.isolation) or "none"
        rows.append(row)
    df = pd.DataFrame(rows, columns=META_COLUMNS)
    return df.astype({"run": "Int64", "order_index": "Int64", "grade": "Float64", "wall_s": "Float64"})


def parse_batch(batch_dir: Path, strict: bool = False) -> dict[str, pd.DataFrame]:
    """Read every trial; write and return requests, trials, tool_results, parse_issues, segments, events.
    Holds the batch's lock (``kit.experiment.lock``): a run still writing trials would be read half-done."""
    with batch_lock(Path(batch_dir)):
        return _parse_batch(BatchDir(Path(batch_dir)), strict)


def _parse_batch(bd: BatchDir, strict: bool) -> dict[str, pd.DataFrame]:
    trials = [sources.trial(tdir) for tdir in bd.trial_dirs()]  # each meta.json decoded once, here
    meta_df = _trial_meta(trials)
    requests, tools, issues, segments, events = [], [], [], [], []
    for trial in trials:
        ident = trial.ident
        issues += trial.issues
        if not trial.primary:
            issues.append(
                {"source_path": str(trial.folder), "source_line": 0, "reason": "no transcript in trial folder"}
            )
            continue
        log = trial.log
        rows, found, logged = _read_trial(trial, strict)
        rows, numbering = sources.number(rows)
        checks: list[dict] = []
        if logged is None:
            found = sources.renumbered(found, numbering)
        else:
            rows, numbering, checks = sources.with_log(rows, numbering, *logged)
        issues += rows.attrs.get("issues", []) + _disagreements(rows) + checks + sources.check_others(trial, rows)
        issues += sources.unseen_compactions(rows, numbering)
        events += [sources.trial_event(e, ident, numbering) for e in rows.attrs.get("events", [])]
        requests.append(rows.assign(**ident, backend=trial.meta.backend))
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
        "trials": _with_side_requests(
            _with_response_counts(_with_calls_by_category(metrics.trial_table(req, meta_df), tool_results), req), req
        ),
        "tool_results": tool_results,
        "parse_issues": pd.DataFrame(issues, columns=ISSUE_COLUMNS).astype({"source_line": "Int64"}),
        "segments": pd.DataFrame(segments, columns=SEGMENT_COLUMNS),
        "events": pd.DataFrame(events, columns=EVENT_COLUMNS).astype({"cycle": "Int64", "source_line": "Int64"}),
    }
    for name, df in tables.items():
        tables[name] = _inside(df, bd.root)
        write_table(bd.tables / f"{name}.parquet", tables[name])
    return tables


def _inside(df: pd.DataFrame, root: Path) -> pd.DataFrame:
    """``source_path`` relative to the batch folder (``raw/<trial>/<file>``): the tables then name the same file
    wherever the folder is copied or committed, and record no machine's absolute paths."""
    if "source_path" not in df.columns or df.empty:
        return df
    prefix = str(root.resolve()) + "/"
    return df.assign(source_path=df["source_path"].astype("string").str.removeprefix(prefix))


def _with_calls_by_category(trials: pd.DataFrame, tool_results: pd.DataFrame) -> pd.DataFrame:
    """Tool calls per trial by family (``calls_read``, ``calls_grep`` …): how each arm got its bytes."""
    counts = tool_results.groupby(["trial_id", "category"]).size().unstack("category", fill_value=0)
    counts = counts.reindex(columns=list(CATEGORIES), fill_value=0).add_prefix("calls_")
    out = trials.merge(counts, left_on="trial_id", right_index=True, how="left")
    return out.astype({c: "Int64" for c in counts.columns}).fillna({c: 0 for c in counts.columns})


def _with_response_counts(trials: pd.DataFrame, req: pd.DataFrame) -> pd.DataFrame:
    """Per trial, the sums of the responses' output characters and Code Mode counts, and the Codex quota
    used at its first and last response that reported one (docs/method.md#transcripts).

    A sum is missing where any response's count is (a trial of another backend has none): never zero.
    """
    ordered = req.sort_values(["trial_id", "cycle"], kind="stable")
    grouped = ordered.groupby("trial_id", sort=False)
    sums = grouped[RESPONSE_SUMS].sum(skipna=False, min_count=1)
    quota = pd.concat(
        {f"{c}_{end}": getattr(grouped[c], end)() for c in QUOTA for end in ("first", "last")}, axis=1
    )  # GroupBy.first/last skip missing values: the first and last response that reported the window
    out = trials.merge(pd.concat([sums, quota], axis=1), left_on="trial_id", right_index=True, how="left")
    return out.astype({**{c: "Int64" for c in RESPONSE_SUMS}, **{c: "Float64" for c in QUOTA_COLUMNS}})


def _with_side_requests(trials: pd.DataFrame, req: pd.DataFrame) -> pd.DataFrame:
    """Per trial, how many of its requests were side requests (``side_request``: compactions, requests only the
    provider log holds) and their total tokens, which ``total_tokens`` includes: what the report can say of them.
    0 for a trial with rows and none of them; missing for a trial without rows, and the tokens where a side
    request's usage is unknown."""
    side = req[req["side_request"].notna()].groupby("trial_id", sort=False)
    ids, read = trials["trial_id"], trials["trial_id"].isin(req["trial_id"])
    count = ids.map(side.size()).fillna(0).astype("Int64")
    tokens = ids.map(side["total_tokens"].sum(skipna=False)).astype("Int64")
    return trials.assign(
        side_requests=count.where(read), side_tokens=tokens.where(count > 0, 0).astype("Int64").where(read)
    )


def _read_trial(
    trial: sources.Trial, strict: bool
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[pd.DataFrame, Path] | None]:
    """A trial's primary rows, its tool results, and the provider log's rows and path where the log is a cross-check.

    The provider sees every tool result the client sends back (SDK response records have none), in
    request order across the trial's files, so its tool results are taken where there is a log, with the
    blocks' framing the transcripts show (``_framed``). Without one, the transcripts' own, with the file each
    came from, since with several files their per-file cycles must be mapped onto the trial's (``sources.renumbered``).
    """
    primary, log = trial.primary, trial.log
    if log is not None and log not in primary:
        (rows, shown), (logged, found) = transcripts.tables(primary, strict=strict), transcripts.tables([log])
        return rows, _framed(found, shown), (logged, log)
    rows, found = transcripts.tables(primary, strict=strict, tool_paths=True)
    return rows, found, None


def _framed(logged: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    """The provider log's tool results with each block's framing and ``o200k_base`` tokens as the transcripts
    hold them, where the two list the same tools in the same order with the same characters (within 1%: the
    log joins a content list's parts with newlines); else the log's own (the block as the client sent it; an
    SDK agent's trials have no transcript of their tool results), NA where it has none.

    The transcripts' come first: on the CLIs' batches they priced Codex's explore results closer to the
    provider's counts (median error 4-7% against 8-10% from the blocks as sent; docs/method.md#calibration)."""
    columns = ["framing_chars", "o200k_tokens"]
    if len(logged) != len(shown) or list(logged["tool"]) != list(shown["tool"]) or shown[columns].isna().any().any():
        return logged
    a, b = logged["chars"].to_numpy(dtype=float), shown["chars"].to_numpy(dtype=float)
    same = bool((abs(a - b) <= np.maximum(0.01 * a, 2)).all())
    return logged.assign(**{c: shown[c].to_numpy() for c in columns}) if same else logged


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


_disagreements = sources.disagreements  # the name tests and notebooks have used


def totals(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per arm: trials, failed, requests and token sums (what the parse notebook shows)."""
    trials = tables["trials"]
    cols = ["input_tokens", "cache_read_tokens", "output_tokens", "total_tokens", "side_tokens"]
    g = trials.groupby("arm", dropna=False)
    out = g[cols].sum(min_count=1)
    out.insert(0, "failed", g["status"].apply(lambda s: int((s != "ok").sum())))
    out.insert(0, "trials", g.size())
    out["requests"] = g["cycles"].sum()
    return out.reset_index()
