"""The history's views: usage by day, session, project and model (ccusage's four), and the per-session table.

Each view sums the canonical rows per value and role (main rows apart from subagent rows); a cost is NA
where any of its rows is unpriced, so an unpriced model never reads as free.
"""

from __future__ import annotations

import pandas as pd

from kit.analysis import occupancy as occ
from kit.errors import InputError
from kit.history.result import COSTS, SUMS, VIEWS, History
from kit.transcripts import codex_exec


def usage(req: pd.DataFrame, by: str) -> pd.DataFrame:
    """One view (``day``, ``session``, ``project`` or ``model``): sums per value and role, main rows first.

    ``hit_rate`` is cache reads over input tokens; a cost is NA where any of its rows is unpriced.
    """
    keys = [by, "project", "agent"] if by == "session" else [by, "agent"]
    frame = req.assign(**{by: req[by].fillna("(none)")}) if by == "model" else req
    grouped = frame.groupby(keys, sort=False, dropna=False)
    out = grouped[SUMS].sum(min_count=1)
    out.insert(0, "requests", grouped.size())
    out["hit_rate"] = out["cache_read_tokens"] / out["input_tokens"]
    for column in COSTS:
        out[column] = grouped[column].sum(skipna=False, min_count=1)
    out = out.reset_index()
    order = ["agent", by] if by == "day" else ["agent", "total_tokens"]
    out = out.sort_values(order, ascending=[True, by == "day"], kind="stable", ignore_index=True)
    if by == "session":
        first = req.groupby("session")["started_at"].min()
        out.insert(2, "started_at", out["session"].map(first))
    return out


def views(req: pd.DataFrame, group_by: list[str] | tuple[str, ...] = VIEWS) -> dict[str, pd.DataFrame]:
    """The views named in ``group_by``, by name; an unknown name is the user's mistake, said as one line."""
    unknown = set(group_by) - set(VIEWS)
    if unknown:
        raise InputError(f"group_by: unknown view(s) {sorted(unknown)}; expected some of {list(VIEWS)}")
    return {by: usage(req, by) for by in group_by}


def totals(req: pd.DataFrame) -> dict[str, int]:
    """The history's sums: what the parse stage's totals and ccusage's report for the same files."""
    out = {c: int(req[c].sum()) for c in ("input_tokens", "cache_read_tokens", "cache_write_tokens")}
    out |= {c: int(req[c].sum()) for c in ("uncached_input_tokens", "output_tokens", "total_tokens")}
    out |= {"requests": len(req), "sessions": int(req["session"].nunique()), "files": int(req["source_path"].nunique())}
    return out


def sessions(history: History) -> pd.DataFrame:
    """Per session: cycles, prompt growth, compactions and context drops, and its sums and cost.

    Rows that are whole turns (``codex_exec.turn_rows``) count in the turns and sums but are no cycle and no
    context: a turn's input sums its requests' prompts, so a session of only such rows has these NA."""
    req = history.requests
    main = req[req["agent"] == "main"].sort_values(["trial_id", "cycle"], kind="stable")
    grouped = main.groupby("trial_id", sort=False)
    responses = main[~codex_exec.turn_rows(main)].groupby("trial_id", sort=False)
    ctx = responses["input_tokens"]
    out = pd.DataFrame(
        {
            "project": grouped["project"].first(),
            "started_at": grouped["started_at"].min(),
            "ended_at": grouped["started_at"].max(),
            "cycles": responses.size(),
            "turns": grouped["turn"].max(),
            "first_context": ctx.first(),
            "last_context": ctx.last(),
            "max_context": ctx.max(),
            "context_drops": ctx.apply(lambda s: int((s.diff() < 0).sum())),
        }
    ).astype({"cycles": "Int64", "context_drops": "Int64"})  # NA for a session of whole turns, whatever else is read
    out["growth_per_cycle"] = (out["last_context"] - out["first_context"]) / (out["cycles"] - 1).where(
        out["cycles"] > 1
    )
    compactions = history.events[history.events["kind"].isin(occ.COMPACTION_KINDS)].groupby("trial_id").size()
    out["compactions"] = compactions.reindex(out.index).fillna(0).astype(int)
    everything = req.groupby("trial_id", sort=False)
    out["subagent_requests"] = (req["agent"] == "subagent").groupby(req["trial_id"]).sum().reindex(out.index)
    sums = everything[SUMS].sum(min_count=1)
    out = out.join(sums, how="left")
    out["hit_rate"] = out["cache_read_tokens"] / out["input_tokens"]
    for column in COSTS:
        out[column] = everything[column].sum(skipna=False, min_count=1)
    out.index.name = "session"
    return out.reset_index().sort_values("started_at", kind="stable", ignore_index=True)
