"""Transcripts to one table with totals: what ``python -m kit parse`` (``kit.cli.parse``) reads and prints.

:func:`totals` is one line of token totals per file and overall (a file with responses of unknown usage says how
many, because its sums are then partial). A kit batch or trial folder holds every response several times (the
backend's transcripts, the provider's logs, the SDK records), so there :func:`collect` reads each response once,
from the primary source the parse stage uses (``kit.transcripts.sources``), numbered across the trial as the parse
stage numbers it; the other files are cross-checks whose disagreements are listed with the issues, as are the
transcripts' own (a total the rows do not reproduce, an output count raised to a ``result`` line's). Any other
folder is read file by file, and a file holding the same run as another (``kit.transcripts.twins``: a stream-json
capture beside its session file) is listed with the issues, since TOTAL counts both.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pandas as pd

from kit import schema
from kit.errors import InputError
from kit.files import write_table
from kit.transcripts import read, sources
from kit.transcripts._base import Shared
from kit.transcripts.twins import Twin, twins

TOTALS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "uncached_input_tokens", "output_tokens"]
TOTALS += ["total_tokens"]


def totals(df: pd.DataFrame) -> pd.DataFrame:
    """Per-file and overall sums of the token columns, with counts of responses and unknown usage."""
    grouped = df.groupby("source_path", sort=False)
    table = grouped[TOTALS].sum(min_count=1)
    table.insert(0, "unknown", grouped["usage_known"].apply(lambda s: int((~s.fillna(False)).sum())))
    table.insert(0, "rows", grouped.size())
    table.insert(0, "format", grouped["source_format"].first())
    overall = ["", len(df), int((~df["usage_known"].fillna(False)).sum()), *df[TOTALS].sum(min_count=1)]
    table.loc["TOTAL"] = overall
    return table


def write(df: pd.DataFrame, out: Path) -> None:
    if out.suffix not in (".parquet", ".csv"):
        raise InputError(f"--out {out}: expected a .parquet or .csv file name")
    write_table(out, df)


def trial_rows(trial: sources.Trial, format: str = "auto", strict: bool = False) -> tuple[pd.DataFrame, list[dict]]:
    """A trial's rows as the parse stage makes them (primary sources, numbered across the trial, the provider log's
    side requests added, identity from meta.json) and every issue: the transcripts', their own cross-checks, each
    other file's disagreement with them (the provider log request by request, other formats in sums) and the
    compactions no source holds the requests of."""
    primary = read(trial.primary, format=format, strict=strict)
    rows, numbering = sources.number(primary)
    issues = [*rows.attrs["issues"], *sources.disagreements(rows)]
    if trial.log is not None and trial.log not in trial.primary:
        logged = read([trial.log])
        rows, numbering, checks = sources.with_log(rows, numbering, logged, trial.log)
        issues += [*logged.attrs["issues"], *checks]
    rows = rows.assign(**trial.ident, backend=trial.meta.backend)
    rows.attrs["accounting"] = primary.attrs["accounting"]
    return rows, issues + sources.check_others(trial, rows) + sources.unseen_compactions(rows, numbering)


SET_ASIDE = ("_failed", "_incomplete")  # where a resume moves earlier attempts (``kit.stages.run._set_aside``)


def _batch_check(rows: pd.DataFrame, log: Path, started: dict[str, str]) -> tuple[list[dict], int]:
    """The batch-wide request log against the trials read, trial by trial; trials it has and the folder
    lacks (never finished: no meta.json) are named in one line. ``started``: each trial's start (its
    meta.json). Also how many logged responses were left out as earlier attempts' (``_earlier``)."""
    logged = read([log])
    issues = list(logged.attrs["issues"])
    earlier = _earlier(logged, started, log.parent.parent)
    logged = logged[~earlier].reset_index(drop=True)
    read_ids = set(rows["trial_id"].dropna())
    for trial_id, theirs in logged.groupby("trial_id", sort=True):
        if trial_id in read_ids:
            issues += sources.crosscheck(rows[rows["trial_id"] == trial_id], theirs.reset_index(drop=True), log)
    missing = sorted(set(logged["trial_id"].dropna()) - read_ids)
    if missing:
        reason = f"cross-check: responses logged for {len(missing)} trial(s) with no finished trial folder: "
        issues.append({"source_path": str(log), "source_line": 0, "reason": reason + ", ".join(missing)})
    return issues, int(earlier.sum())


def _earlier(logged: pd.DataFrame, started: dict[str, str], raw: Path) -> pd.Series:
    """The logged responses of attempts a resume set aside (``raw/_failed/<trial>.N``, ``raw/_incomplete/<trial>.N``):
    the batch-wide log keeps every attempt's lines, the trial folder only its last attempt's, which started
    at its meta.json's ``started_at``. A line of a trial with an attempt set aside, logged before that start,
    is an earlier attempt's; one of a trial without (nothing set aside) is kept, and compared."""
    aside = {
        trial_id
        for trial_id in started
        if any(next((raw / why).glob(f"{glob.escape(trial_id)}.*"), None) is not None for why in SET_ASIDE)
    }
    if not aside or logged.empty:
        return pd.Series(False, index=logged.index)
    when = pd.to_datetime(logged["started_at"], utc=True, errors="coerce", format="ISO8601")
    start = pd.to_datetime(logged["trial_id"].map(lambda t: started.get(t) if t in aside else None), utc=True)
    return (when < start).fillna(False).astype(bool)


def collect(paths: list[Path], format: str = "auto", strict: bool = False) -> tuple[pd.DataFrame, list[dict], str]:
    """Rows of every path, every issue, and a line saying which kit folders were read and how; the rows'
    ``attrs["accounting"]``: every transcript read (a trial's primary ones, every loose file), its rows or none
    and why (``kit.transcripts.accounting``)."""
    frames, issues, loose, trials, checks, earlier = [], [], [], 0, 0, 0
    for path in paths:
        folders = sources.trial_folders(path) if path.is_dir() else None
        if folders is None:
            loose.append(path)
            continue
        read_here, started = [], {}
        for folder in folders:
            trial = sources.trial(folder)
            issues += trial.issues
            started[trial.meta.trial_id] = trial.meta.started_at
            if not trial.primary:
                issues.append({"source_path": str(folder), "source_line": 0, "reason": "no transcript in trial folder"})
                continue
            rows, found = trial_rows(trial, format, strict)
            read_here.append(rows)
            issues += found
            checks += len(trial.others) + (trial.log is not None and trial.log not in trial.primary)
        trials += len(folders)
        log = sources.batch_log(path)
        if log is not None and read_here:
            found, left_out = _batch_check(pd.concat(read_here, ignore_index=True), log, started)
            issues += found
            checks, earlier = checks + 1, earlier + left_out
        frames += read_here
    if loose:
        df = read(loose, format=format, strict=strict)
        frames.append(df)
        issues += [*df.attrs["issues"], *sources.disagreements(df), *map(_twin_issue, twins(df))]
        issues += sources.unseen_compactions(*sources.number(df))  # the files as one trial: compactions in any
    accounts = [account for frame in frames for account in frame.attrs.get("accounting", ())]
    frames = [f for f in frames if len(f)]
    df = pd.concat(frames, ignore_index=True) if frames else schema.requests_frame([])
    note = ""
    if trials:
        note = f"{trials} kit trial folder(s): each response read once, from its primary source; "
        note += f"{checks} other file(s) of the same responses cross-checked (disagreements listed below)"
        if earlier:
            note += f"; {earlier} response(s) the batch log holds of attempts set aside on resume left out"
    out = schema.requests_frame(df.to_dict("records"))
    out.attrs["accounting"] = Shared(accounts)  # each transcript read: its rows, or none and why
    return out, issues, note


def _twin_issue(twin: Twin) -> dict:
    """A file holding the same run as another, as a listed issue: TOTAL counts both (docs/method.md#transcripts)."""
    reason = (
        f"holds the same run as {twin.same_as} ({twin.responses} responses with the same input and cache counts; "
        f"{twin.format} beside {twin.same_as_format}): both are counted in TOTAL, read one"
    )
    return {"source_path": twin.path, "source_line": 0, "reason": reason}
