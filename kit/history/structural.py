"""Per session: the occupancy block, and the structural cache on real transcripts (docs/method.md#structural-cache).

Transcripts hold no prompt hashes, so each session's requests are rebuilt under the prefix-extension rule
(request k's prompt is request k−1's plus what was appended; the sizes come from the usage) and replayed
through ``kit.analysis.cachemodel``; where the rule breaks (a compaction, a context drop) it is flagged. The
modelled hits are compared with the observed cache reads, and the observed hits by idle gap give the warmth
curve of the user's own sessions (docs/method.md#warmth). The occupancy is ``kit.analysis.occupancy``, the
batch analysis's code, with a session as the trial (docs/method.md#occupancy).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kit.analysis import cachemodel, occupancy_block
from kit.analysis import occupancy as occ
from kit.history.result import COSTS, GAP_BINS, GAP_LABELS, PROFILES, SEED, History
from kit.transcripts import codex_exec

TURNS = "whole turns"  # the calibration of a session whose rows are whole turns (codex exec --json): no block
TURNS_NOTE = "codex exec --json rows are whole turns (no per-request usage): a turn's input sums its prompts"


def session_occupancy(history: History, window_tokens: int = occ.WINDOW_TOKENS) -> pd.DataFrame:
    """``kit.analysis.occupancy.measure`` of every session (trial = session), the batch analysis's code unchanged.

    Rows that are whole turns (``codex_exec.turn_rows``) and their tool results are left out: a turn's input sums
    its requests' prompts, not the last prompt occupancy measures; the report names them."""
    turns = codex_exec.turn_rows(history.requests)
    apart = _turns_apart(history.requests, turns)
    if not (~turns).any():
        return apart
    req = history.requests[~turns].drop(columns=COSTS)
    # Only the columns it reads, text as plain objects: it selects each request's results from its session's
    # (a boolean index per request), and Arrow-backed text columns cost far more per selection (bench/parse.md).
    keys = ["batch", "arm", "run", "trial_id"]
    res = history.tool_results
    res = res[~res["source_path"].isin(set(history.requests.loc[turns, "source_path"])).fillna(False).astype(bool)]
    res = res[[*keys, "cycle", "category", "chars", "framing_chars", "o200k_tokens"]]
    res = res.astype({c: object for c in ("batch", "arm", "trial_id", "category")})
    measured = occ.measure(req, res, events=history.events, window_tokens=window_tokens)
    apart = apart[~apart["trial_id"].isin(set(measured["trial_id"]))]
    if apart.empty:
        return measured
    return pd.concat([measured, apart.astype(measured.dtypes.to_dict())], ignore_index=True)


def _turns_apart(req: pd.DataFrame, turns: pd.Series) -> pd.DataFrame:
    """Occupancy rows of the sessions of whole turns: no tokens, calibration ``TURNS`` and its note, so that the
    occupancy table names every session and says why these have no block (as measure does for unknown usage)."""
    part = req[turns]
    rows = [
        {"batch": b, "arm": a, "run": r, "trial_id": t, "category": c, "calibration": TURNS, "requests": len(g)}
        | {"calibration_note": TURNS_NOTE}
        for (b, a, r, t), g in part.groupby(["batch", "arm", "run", "trial_id"], sort=True)
        for c in occ.CATEGORIES
    ]
    return pd.DataFrame(rows, columns=occ.COLUMNS).astype({"requests": "Int64"})


def occupancy_blocks(occupancy_rows: pd.DataFrame, window_tokens: int, sessions_: list[str]) -> dict[str, str]:
    """The printed occupancy block of each of ``sessions_`` (``kit.analysis.occupancy_block``) whose usage is
    known: the report prints the largest sessions' blocks."""
    known = occupancy_rows[~occupancy_rows["calibration"].isin(["usage unknown", TURNS])]
    return {
        s: occupancy_block.block(known[known["trial_id"] == s], window_tokens)
        for s in sessions_
        if s in set(known["trial_id"])
    }


def rebuilt(history: History) -> pd.DataFrame:
    """Each session's main-window requests as prompts rebuilt under the prefix-extension rule.

    Request k's prompt is request k−1's plus one new segment of ``ctx_k − ctx_{k−1}`` tokens (``ctx`` =
    ``input_tokens``, the whole prompt). Where that is negative, or a compaction came in between, the
    rule breaks (``rule_break``): the prompt becomes one fresh segment, a new lineage that shares nothing
    with the old one (an unknown prefix is not assumed to be cached). Rows that are whole turns
    (``codex_exec.turn_rows``) hold no one prompt's size and are left out.
    """
    req = history.requests
    main = req[(req["agent"] == "main") & req["input_tokens"].notna() & ~codex_exec.turn_rows(req)]
    main = main.sort_values(["trial_id", "cycle"], kind="stable")
    compacted = (
        set(zip(history.events["trial_id"], history.events["cycle"], strict=True)) if len(history.events) else set()
    )
    compacted = {(s, c) for s, c in compacted if pd.notna(c)}
    rows = []
    for session, part in main.groupby("trial_id", sort=False):
        segments: list[list] = []
        previous = None
        for cycle, ctx, t in zip(part["cycle"], part["input_tokens"], part["t"], strict=True):
            ctx = int(ctx)
            event = (session, cycle) in compacted
            broke = previous is not None and (ctx < previous or event)
            if previous is None or broke:
                segments = [[f"{session}:{cycle}:start", ctx, None]]
            elif ctx > previous:
                segments = [*segments, [f"{session}:{cycle}", ctx - previous, None]]
            rows.append({"trial_id": session, "cycle": cycle, "t": t, "rule_break": broke, "segments": list(segments)})
            previous = ctx
    out = pd.DataFrame(rows, columns=["trial_id", "cycle", "t", "rule_break", "segments"])
    keys = main[["trial_id", "cycle", "model", "backend", "cache_read_tokens", "cache_write_1h_tokens", "input_tokens"]]
    return out.merge(keys.rename(columns={"input_tokens": "observed_input"}), on=["trial_id", "cycle"], how="left")


def structural(history: History) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per request and per session: observed cache reads against the structural (ideal) cache and a replay
    through the provider's profile at full warmth (its TTL and minimums apply; docs/method.md#warmth)."""
    prompts = rebuilt(history)
    if prompts.empty:
        return prompts, pd.DataFrame()
    ideal = cachemodel.structural(prompts)
    prompts["structural_cached"] = ideal["structural_cached"].to_numpy()
    prompts["replay_cached"] = 0
    timed = prompts["t"].notna()
    for backend, profile in PROFILES.items():
        mask = timed & (prompts["backend"] == backend)
        if mask.any():
            replayed = cachemodel.replay(_marked(prompts[mask], backend), profile, survival=1.0, seed=SEED)
            prompts.loc[mask, "replay_cached"] = replayed["cache_read"].to_numpy()
    prompts.loc[~timed | ~prompts["backend"].isin(list(PROFILES)), "replay_cached"] = pd.NA
    per = prompts.groupby("trial_id", sort=False)
    summary = pd.DataFrame(
        {
            "requests": per.size(),
            "rule_breaks": per["rule_break"].sum(),
            "input_tokens": per["observed_input"].sum(),
            "observed_cached": per["cache_read_tokens"].sum(min_count=1),
            "structural_cached": per["structural_cached"].sum(),
            "replay_cached": per["replay_cached"].sum(min_count=1),
        }
    )
    summary["observed_share"] = summary["observed_cached"] / summary["input_tokens"]
    summary["structural_share"] = summary["structural_cached"] / summary["input_tokens"]
    summary["observed_over_structural"] = summary["observed_cached"] / summary["structural_cached"].where(
        summary["structural_cached"] > 0
    )  # above 1: reads the session's own history cannot explain (a prefix cached by another session)
    summary.index.name = "session"
    return prompts.drop(columns="segments"), summary.reset_index()


def _marked(prompts: pd.DataFrame, backend: str) -> pd.DataFrame:
    """Claude Code's cache breakpoint on the last segment (1 h where the session wrote 1-hour entries, else the
    default 5 min); Codex caches implicitly, without breakpoints."""
    if backend != "claude":
        return prompts
    hour = prompts.groupby("trial_id")["cache_write_1h_tokens"].transform(lambda s: s.fillna(0).sum() > 0)
    marks = np.where(hour, "1h", "5m")
    return prompts.assign(
        segments=[[*s[:-1], [*s[-1][:2], m]] for s, m in zip(prompts["segments"], marks, strict=True)]
    )


def warmth(prompts: pd.DataFrame) -> pd.DataFrame:
    """The warmth curve of the user's own sessions: of the prefix the previous request left (the smaller of the
    two prompts), the share read from cache, by the idle gap before the request. Rule breaks are left out."""
    if prompts.empty:
        return pd.DataFrame(columns=["gap", "requests", "reusable_tokens", "cached_tokens", "share_cached"])
    p = prompts.sort_values(["trial_id", "cycle"], kind="stable")
    previous = p.groupby("trial_id")["observed_input"].shift()
    gap = p["t"] - p.groupby("trial_id")["t"].shift()
    reusable = np.minimum(previous, p["observed_input"])
    usable = previous.notna() & gap.notna() & ~p["rule_break"].astype(bool) & (reusable > 0)
    frame = pd.DataFrame(
        {
            "gap": pd.cut(gap[usable], GAP_BINS, labels=GAP_LABELS, right=False),
            "reusable": reusable[usable].astype(float),
            "cached": np.minimum(p.loc[usable, "cache_read_tokens"].astype(float), reusable[usable].astype(float)),
        }
    )
    grouped = frame.groupby("gap", observed=False)
    out = pd.DataFrame(
        {
            "requests": grouped.size(),
            "reusable_tokens": grouped["reusable"].sum(),
            "cached_tokens": grouped["cached"].sum(),
        }
    )
    out["share_cached"] = out["cached_tokens"] / out["reusable_tokens"].where(out["reusable_tokens"] > 0)
    out.index = out.index.astype(str)
    out.index.name = "gap"
    return out.reset_index()
