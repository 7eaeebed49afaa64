"""Reading a history: a user's Claude Code sessions and Codex rollouts through ``kit.transcripts``.

The same readers as the parse stage, with the incremental parse cache (``kit.transcripts.cache``) so a
re-run reads only what changed; each session numbered as the parse stage numbers a trial
(``kit.transcripts.sources.number``), each row given its day, role and cost from the dated rate cards
(a model without a rate is NA and listed in ``History.unpriced``, never zero).
"""

from __future__ import annotations

import os
import warnings
from datetime import UTC
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from kit import transcripts
from kit.analysis import pricing
from kit.history.result import History
from kit.transcripts import codex_exec, sources
from kit.transcripts.twins import twins


def default_paths() -> list[Path]:
    """The folders Claude Code and Codex write their transcripts to, as far as they exist."""
    claude = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" if os.environ.get("CLAUDE_CONFIG_DIR") else None
    codex = Path(os.environ["CODEX_HOME"]) / "sessions" if os.environ.get("CODEX_HOME") else None
    found = [claude or Path.home() / ".claude" / "projects", codex or Path.home() / ".codex" / "sessions"]
    return [p for p in found if p.is_dir()]


def _identity(path: str, fmt: str, trial: object) -> dict:
    """Session, project and role of a transcript file, from where the CLI writes it.

    Claude Code: ``projects/<project>/<session>.jsonl``, subagents in ``<session>/subagents/``.
    Codex: ``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``, the project being the ``cwd`` of its
    ``session_meta``. ``codex exec --json`` stdout: the thread its reader names (``trial``), which a resumed
    run's files share. Anything else: the file is the session, its folder the project.
    """
    p = Path(path)
    role = sources.file_role(p, fmt)
    if fmt == codex_exec.FORMAT and isinstance(trial, str):
        return {"session": trial, "project": p.parent.name, "role": role}
    if fmt == "claude_session" and p.parent.name == "subagents":
        return {"session": p.parent.parent.name, "project": p.parent.parent.parent.name, "role": role}
    if fmt == "codex_rollout":
        session = p.stem[len("rollout-YYYY-MM-DDTHH-MM-SS-") :] if p.stem.startswith("rollout-") else p.stem
        return {"session": session or p.stem, "project": _cwd(p), "role": role}
    return {"session": p.stem, "project": p.parent.name, "role": role}


def _cwd(path: Path) -> str:
    """The working folder a Codex session ran in (its first line), or ``codex`` where it does not say."""
    try:
        with open(path, "rb") as handle:
            first = orjson.loads(handle.readline())
        cwd = first.get("payload", {}).get("cwd")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        cwd = None
    return cwd if isinstance(cwd, str) and cwd else "codex"


def load(
    paths: list[str | Path], since: str | None = None, until: str | None = None, cache: str | Path | None = None
) -> History:
    """Read the history in ``paths`` (files or folders) and number each session as the parse stage numbers a
    trial (``kit.transcripts.sources.number``): a session is a main file and its subagent files.

    ``since``/``until`` (``YYYY-MM-DD``, UTC, inclusive) keep the sessions with a response in that range,
    each whole: a session cut in two would have no start for its context.
    """
    req, res = transcripts.tables(list(paths), cache=cache, tool_paths=True)
    attrs = req.attrs
    firsts = req.groupby("source_path", sort=False)[["source_format", "trial_id"]].first()
    ident = {p: _identity(str(p), f, t) for p, f, t in firsts.itertuples()}
    req = req.assign(
        session=req["source_path"].map(lambda p: ident[p]["session"]).astype("string"),
        project=req["source_path"].map(lambda p: ident[p]["project"]).astype("string"),
    )
    req = _in_range(req, since, until)
    numbered, tools, events, unseen = [], [], [], []
    res_by_path = {p: g for p, g in res.groupby("source_path", sort=False)}
    events_by_path: dict[str, list[dict]] = {}
    for event in attrs.get("events", []):
        events_by_path.setdefault(str(event.get("source_path")), []).append(event)
    for session, part in req.groupby("session", sort=False):
        part.attrs = attrs
        rows, numbering = _numbered(part)
        key = {"batch": "history", "arm": "history", "run": 0, "trial_id": str(session)}
        numbered.append(rows.assign(**key))
        own = rows["source_path"].unique()
        found = [res_by_path[p] for p in own if p in res_by_path]
        if found:
            tools.append(sources.renumbered(pd.concat(found), numbering).assign(**key))
        mine = [e for p in own for e in events_by_path.get(p, [])]
        events += [sources.trial_event(e, key, numbering) for e in mine]
        unseen += sources.unseen_compactions(rows, numbering, mine)  # no provider log: such requests cannot be seen
    req = pd.concat(numbered, ignore_index=True) if numbered else req.iloc[:0]
    req = _derived(req)
    tool_results = pd.concat(tools, ignore_index=True) if tools else res.iloc[:0]
    event_frame = pd.DataFrame(events, columns=sources.EVENT_COLUMNS)
    history = History(
        req, tool_results, event_frame, list(attrs.get("files", [])), [*attrs.get("issues", []), *unseen],
        list(attrs.get("repeats", [])), [str(p) for p in paths],
    )  # fmt: skip
    history.unpriced = _unpriced(req)
    history.twins = twins(req)
    return history


def _numbered(part: pd.DataFrame) -> tuple[pd.DataFrame, sources.Numbering]:
    """``sources.number`` of one session, whose ``codex exec --json`` rows (whole turns, without times) keep the
    thread's turn their reader gave them.

    ``number`` takes untimed files in their given order and starts each main file's turns after the previous
    one's; a thread's turns read from several files (a run and its ``exec resume``) are already numbered
    across them (``codex_exec``), so its files are given in turn order and the turn is the reader's.
    """
    turns = codex_exec.turn_rows(part)
    if not turns.any():
        return sources.number(part)
    ordered = part.sort_values("cycle", kind="stable")
    ordered.attrs = part.attrs
    rows, numbering = sources.number(ordered)
    mine = codex_exec.turn_rows(rows)
    rows["turn"] = rows["turn"].mask(mine, rows["file_cycle"] + 1)
    return rows, numbering


def _in_range(req: pd.DataFrame, since: str | None, until: str | None) -> pd.DataFrame:
    if since is None and until is None:
        return req
    day = utc_day(req["started_at"])
    inside = pd.Series(True, index=req.index)
    if since is not None:
        inside &= day >= since
    if until is not None:
        inside &= day <= until
    keep = req.loc[inside.fillna(False).astype(bool), "session"].unique()
    return req[req["session"].isin(keep)]


def utc_day(started: pd.Series) -> pd.Series:
    """Each response's UTC day as ``YYYY-MM-DD`` (NA where its time is unknown): how ``since``/``until`` and a
    compare period select sessions."""
    return pd.to_datetime(started, utc=True, errors="coerce", format="ISO8601").dt.strftime("%Y-%m-%d")


def _derived(req: pd.DataFrame) -> pd.DataFrame:
    """Day, seconds since the epoch, role (main or subagent), 5-minute writes and the cost of each row."""
    started = pd.to_datetime(req["started_at"], utc=True, errors="coerce", format="ISO8601")
    out = req.assign(
        day=started.dt.strftime("%Y-%m-%d").fillna("unknown").astype("string"),
        t=(started - pd.Timestamp(0, tz=UTC)).dt.total_seconds(),
        agent=np.where(req["sidechain"].fillna(False).astype(bool), "subagent", "main"),
        cache_write_5m_tokens=req["cache_write_tokens"] - req["cache_write_1h_tokens"].fillna(0),
    )
    with warnings.catch_warnings():  # the unpriced models are listed (History.unpriced), not warned about
        warnings.simplefilter("ignore")
        return out.assign(
            cost_usd=pricing.price(out, "usd").to_numpy(), credits=pricing.price(out, "credits").to_numpy()
        )


def _unpriced(req: pd.DataFrame) -> pd.DataFrame:
    """Models whose rows have known usage but no rate on a card: their cost is NA, never zero."""
    known = req["usage_known"].fillna(False).astype(bool)
    rows = []
    for column, card in (("cost_usd", "usd"), ("credits", "credits")):
        missing = req[known & req[column].isna()]
        for model, part in missing.groupby(missing["model"].fillna("(none)"), sort=True):
            rows.append(
                {"card": card, "model": model, "requests": len(part), "tokens": int(part["total_tokens"].sum())}
            )
    return pd.DataFrame(rows, columns=["card", "model", "requests", "tokens"])
