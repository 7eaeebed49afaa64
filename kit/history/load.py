"""Your own history: the kit's analysis of the sessions already on your disk (issue #17).

``notebooks/history.ipynb`` (and ``python -m kit history [PATH…] [--out DIR]``, ``kit.cli.history``) read a
user's Claude Code sessions (``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``) and Codex rollouts
(``$CODEX_HOME/sessions`` or ``~/.codex/sessions``) — real transcripts, not a simulation — through the
same readers as the parse stage, with the incremental parse cache (``kit.transcripts.cache``) so a
re-run reads only what changed. What it adds to per-file totals:

- usage by day, session, project and model (ccusage's four views) with cost in USD and Codex credits
  from the dated rate cards (a model without a rate is NA and listed, never zero), subagent rows apart;
- per session: cycles, prompt growth, compactions, and the occupancy block (``kit.analysis.occupancy``, the batch
  analysis's code; docs/method.md#occupancy);
- the structural cache on real transcripts (docs/method.md#structural-cache): with no prompt hashes,
  each session's requests are rebuilt under the prefix-extension rule (request k's prompt is request
  k−1's plus what was appended; the sizes come from the usage) and replayed through ``kit.analysis.cachemodel``;
  where the rule breaks (a compaction, a context drop) it is flagged; the modelled hits are compared
  with the observed cache reads, and the observed hits by idle gap give the warmth curve of the user's
  own sessions (docs/method.md#warmth);
- a before/after comparison of two periods, projects or models, labelled a cross-run stitch with its
  confounds (docs/method.md#stitch): per-session totals with intervals, never a bare ratio;
- the files that hold the same run as another (``kit.transcripts.twins``: a stream-json capture beside its
  session file), named in the report since both are counted (docs/method.md#transcripts).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
from scipy import stats as scipy_stats

from kit import schema, transcripts
from kit.analysis import cachemodel, pricing
from kit.analysis import occupancy as occ
from kit.errors import InputError
from kit.stats import STITCH_LABEL
from kit.transcripts import cache as parse_cache
from kit.transcripts import sources
from kit.transcripts.twins import Twin, twins

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "COMPARE_METRICS",
    "CONFIDENCE",
    "COSTS",
    "GAP_BINS",
    "GAP_LABELS",
    "PROFILES",
    "SEED",
    "SUMS",
    "VIEWS",
    "VIEW_COLUMNS",
    "Comparison",
    "History",
    "Result",
    "analyze",
    "compare",
    "default_paths",
    "load",
    "rebuilt",
    "run",
    "session_occupancy",
    "sessions",
    "structural",
    "totals",
    "usage",
    "views",
    "warmth",
    "write",
]

VIEWS = ("day", "session", "project", "model")
SUMS = [
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "uncached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
]
COSTS = ["cost_usd", "credits"]
VIEW_COLUMNS = ["requests", *SUMS, "hit_rate", *COSTS]  # a view's columns after its key (columns.py describes them)
PROFILES = {"claude": "anthropic", "codex": "openai-implicit"}  # kit.provider.cache profiles for the replay
GAP_BINS = [0, 30, 120, 300, 900, 3600, np.inf]  # seconds; Anthropic's default cache TTL is 300 s
GAP_LABELS = ["<30 s", "30 s–2 min", "2–5 min", "5–15 min", "15–60 min", "≥1 h"]
COMPARE_METRICS = ["total_tokens", "uncached_input_tokens", "cost_usd"]
CONFIDENCE = 0.95
SEED = 20260601


def default_paths() -> list[Path]:
    """The folders Claude Code and Codex write their transcripts to, as far as they exist."""
    claude = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects" if os.environ.get("CLAUDE_CONFIG_DIR") else None
    codex = Path(os.environ["CODEX_HOME"]) / "sessions" if os.environ.get("CODEX_HOME") else None
    found = [claude or Path.home() / ".claude" / "projects", codex or Path.home() / ".codex" / "sessions"]
    return [p for p in found if p.is_dir()]


# --- reading ----------------------------------------------------------------------------------------------


@dataclass
class History:
    """A history read: canonical rows with their session, project and role, and the session-level tables."""

    requests: pd.DataFrame  # canonical rows + session, project, agent, day, t, cost_usd, credits
    tool_results: pd.DataFrame  # per session (trial_id), cycles in the session's numbering
    events: pd.DataFrame  # compactions and other events, per session
    files: list[dict]
    issues: list[dict]
    repeats: list[dict]
    paths: list[str]
    unpriced: pd.DataFrame = field(default_factory=pd.DataFrame)
    twins: list[Twin] = field(default_factory=list)


def _identity(path: str, fmt: str) -> dict:
    """Session, project and role of a transcript file, from where the CLI writes it.

    Claude Code: ``projects/<project>/<session>.jsonl``, subagents in ``<session>/subagents/``.
    Codex: ``sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``, the project being the ``cwd`` of its
    ``session_meta``. Anything else: the file is the session, its folder the project.
    """
    p = Path(path)
    role = sources.file_role(p, fmt)
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
    ident = {p: _identity(p, f) for p, f in req.groupby("source_path", sort=False)["source_format"].first().items()}
    req = req.assign(
        session=req["source_path"].map(lambda p: ident[p]["session"]).astype("string"),
        project=req["source_path"].map(lambda p: ident[p]["project"]).astype("string"),
    )
    req = _in_range(req, since, until)
    numbered, tools, events = [], [], []
    res_by_path = {p: g for p, g in res.groupby("source_path", sort=False)}
    events_by_path: dict[str, list[dict]] = {}
    for event in attrs.get("events", []):
        events_by_path.setdefault(str(event.get("source_path")), []).append(event)
    for session, part in req.groupby("session", sort=False):
        part.attrs = attrs
        rows, numbering = sources.number(part)
        key = {"batch": "history", "arm": "history", "run": 0, "trial_id": str(session)}
        numbered.append(rows.assign(**key))
        own = rows["source_path"].unique()
        found = [res_by_path[p] for p in own if p in res_by_path]
        if found:
            tools.append(sources.renumbered(pd.concat(found), numbering).assign(**key))
        events += [sources.trial_event(e, key, numbering) for p in own for e in events_by_path.get(p, [])]
    req = pd.concat(numbered, ignore_index=True) if numbered else req.iloc[:0]
    req = _derived(req)
    tool_results = pd.concat(tools, ignore_index=True) if tools else res.iloc[:0]
    event_frame = pd.DataFrame(events, columns=sources.EVENT_COLUMNS)
    history = History(
        req, tool_results, event_frame, list(attrs.get("files", [])), list(attrs.get("issues", [])),
        list(attrs.get("repeats", [])), [str(p) for p in paths],
    )  # fmt: skip
    history.unpriced = _unpriced(req)
    history.twins = twins(req)
    return history


def _in_range(req: pd.DataFrame, since: str | None, until: str | None) -> pd.DataFrame:
    if since is None and until is None:
        return req
    day = _day(req["started_at"])
    inside = pd.Series(True, index=req.index)
    if since is not None:
        inside &= day >= since
    if until is not None:
        inside &= day <= until
    keep = req.loc[inside.fillna(False).astype(bool), "session"].unique()
    return req[req["session"].isin(keep)]


def _day(started: pd.Series) -> pd.Series:
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


# --- views ------------------------------------------------------------------------------------------------


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


# --- per session ------------------------------------------------------------------------------------------


def sessions(history: History) -> pd.DataFrame:
    """Per session: cycles, prompt growth, compactions and context drops, and its sums and cost."""
    req = history.requests
    main = req[req["agent"] == "main"].sort_values(["trial_id", "cycle"], kind="stable")
    grouped = main.groupby("trial_id", sort=False)
    ctx = grouped["input_tokens"]
    out = pd.DataFrame(
        {
            "project": grouped["project"].first(),
            "started_at": grouped["started_at"].min(),
            "ended_at": grouped["started_at"].max(),
            "cycles": grouped.size(),
            "turns": grouped["turn"].max(),
            "first_context": ctx.first(),
            "last_context": ctx.last(),
            "max_context": ctx.max(),
            "context_drops": grouped["input_tokens"].apply(lambda s: int((s.diff() < 0).sum())),
        }
    )
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


def session_occupancy(history: History, window_tokens: int = occ.WINDOW_TOKENS) -> pd.DataFrame:
    """``kit.analysis.occupancy.measure`` of every session (trial = session), the batch analysis's code unchanged."""
    if history.requests.empty:
        return pd.DataFrame(columns=occ.COLUMNS)
    req = history.requests.drop(columns=COSTS)
    # Only the columns it reads, text as plain objects: it selects each request's results from its session's
    # (a boolean index per request), and Arrow-backed text columns cost ~50 µs each per selection.
    keys = ["batch", "arm", "run", "trial_id"]
    res = history.tool_results[[*keys, "cycle", "category", "chars", "framing_chars", "o200k_tokens"]]
    res = res.astype({c: object for c in ("batch", "arm", "trial_id", "category")})
    return occ.measure(req, res, events=history.events, window_tokens=window_tokens)


def _occupancy_blocks(occupancy_rows: pd.DataFrame, window_tokens: int, sessions_: list[str]) -> dict[str, str]:
    """The printed occupancy block of each of ``sessions_`` (``kit.analysis.occupancy_block``), where that module
    exists."""
    try:
        from kit.analysis import occupancy_block
    except ImportError:
        return {}
    known = occupancy_rows[occupancy_rows["calibration"] != "usage unknown"]
    return {
        s: occupancy_block.block(known[known["trial_id"] == s], window_tokens)
        for s in sessions_
        if s in set(known["trial_id"])
    }


# --- structural cache -------------------------------------------------------------------------------------


def rebuilt(history: History) -> pd.DataFrame:
    """Each session's main-window requests as prompts rebuilt under the prefix-extension rule.

    Request k's prompt is request k−1's plus one new segment of ``ctx_k − ctx_{k−1}`` tokens (``ctx`` =
    ``input_tokens``, the whole prompt). Where that is negative, or a compaction came in between, the
    rule breaks (``rule_break``): the prompt becomes one fresh segment, a new lineage that shares nothing
    with the old one (an unknown prefix is not assumed to be cached).
    """
    req = history.requests
    main = req[(req["agent"] == "main") & req["input_tokens"].notna()]
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


# --- before / after ---------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """Two groups of sessions compared as a cross-run stitch (docs/method.md#stitch)."""

    label: str
    by: str
    groups: dict[str, str]  # name -> what selects it
    table: pd.DataFrame  # per group and metric: n, mean with interval
    ratios: pd.DataFrame  # per metric: b / a with interval (never the headline)
    confounds: list[str]


def _group_sessions(table: pd.DataFrame, by: str, value: Any) -> pd.Series:
    """Which sessions a compare group selects: a period ``[since, until]``, or project/model name(s)."""
    if by == "period":
        since, until = [*value, None, None][:2]
        day = _day(table["started_at"])
        inside = pd.Series(True, index=table.index)
        if since:
            inside &= day >= str(since)
        if until:
            inside &= day <= str(until)
        return inside.fillna(False).astype(bool)
    values = [value] if isinstance(value, str) else list(value)
    return table[by].isin(values)


def _mean_interval(values: np.ndarray) -> tuple[float, float, float]:
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return np.nan, np.nan, np.nan
    if len(values) < 2 or np.ptp(values) == 0:
        return float(values.mean()), np.nan, np.nan
    found = scipy_stats.bootstrap(
        (values,), np.mean, confidence_level=CONFIDENCE, method="percentile", random_state=SEED, n_resamples=5000
    )
    return float(values.mean()), float(found.confidence_interval.low), float(found.confidence_interval.high)


def _ratio_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2 or a.mean() == 0:
        return np.nan, np.nan, np.nan
    found = scipy_stats.bootstrap(
        (b, a),
        lambda x, y, axis=-1: np.mean(x, axis=axis) / np.mean(y, axis=axis),
        confidence_level=CONFIDENCE, method="percentile", random_state=SEED, n_resamples=5000, vectorized=True,
    )  # fmt: skip
    return float(b.mean() / a.mean()), float(found.confidence_interval.low), float(found.confidence_interval.high)


def compare(history: History, spec: dict, session_table: pd.DataFrame | None = None) -> Comparison:
    """Compare two groups of sessions (``spec``: ``{"by": "period"|"project"|"model", "a": …, "b": …}``, optional
    ``"names": [a, b]``). Main sessions only; each session's totals include its subagents."""
    by = spec.get("by", "period")
    if by not in ("period", "project", "model"):
        raise InputError(f"compare.by: expected period, project or model, got {by!r}")
    if "a" not in spec or "b" not in spec:
        raise InputError("compare: expected keys 'a' and 'b' (a period [since, until], or project/model names)")
    table = session_table if session_table is not None else sessions(history)
    if by == "model":
        main = history.requests[history.requests["agent"] == "main"]
        table = table.assign(
            model=table["session"].map(main.groupby("trial_id")["model"].agg(lambda s: s.mode().iat[0]))
        )
    described = [_describe(by, spec["a"]), _describe(by, spec["b"])]
    names = list(spec.get("names") or described)
    picked = {name: table[_group_sessions(table, by, spec[key])] for name, key in zip(names, ("a", "b"), strict=True)}
    rows = []
    for name, part in picked.items():
        for metric in COMPARE_METRICS:
            values = part[metric].astype(float).to_numpy()
            mean, low, high = _mean_interval(values)
            n = int(np.isfinite(values).sum())  # sessions with the metric known (an unpriced one has no cost)
            rows.append({"group": name, "metric": metric, "sessions": n, "mean": mean, "lower": low, "upper": high})
    ratio_rows = []
    for metric in COMPARE_METRICS:
        a, b = (picked[n][metric].astype(float).to_numpy() for n in names)
        est, low, high = _ratio_interval(a, b)
        ratio_rows.append({"metric": metric, "ratio": est, "lower": low, "upper": high, "label": STITCH_LABEL})
    return Comparison(
        STITCH_LABEL, by, dict(zip(names, described, strict=True)),
        pd.DataFrame(rows), pd.DataFrame(ratio_rows), _confounds(history, picked),
    )  # fmt: skip


def _describe(by: str, value: Any) -> str:
    """A group as the report names it: a period by its ends (an open end said as such), else its names."""
    if isinstance(value, str):
        return value
    if by != "period":
        return ", ".join(map(str, value))
    first, last = [*value, None, None][:2]
    if first and last:
        return f"{first} to {last}"
    return f"from {first}" if first else f"up to {last}" if last else "all days"


def _confounds(history: History, picked: dict[str, pd.DataFrame]) -> list[str]:
    """What differs between the groups besides the change being judged (docs/method.md#stitch)."""
    req, versions = history.requests, {f["source_path"]: f.get("cli_version") for f in history.files}
    lines = ["different tasks: the sessions of each group did different work; per-session totals follow the task"]
    warm, vers, models = [], [], []
    for name, part in picked.items():
        rows = req[req["trial_id"].isin(part["session"])]
        hit = rows["cache_read_tokens"].sum() / rows["input_tokens"].sum() if len(rows) else np.nan
        warm.append(f"{name}: hit rate {hit:.1%}" if np.isfinite(hit) else f"{name}: no requests")
        found = sorted({str(versions.get(p)) for p in rows["source_path"].unique() if versions.get(p)})
        vers.append(f"{name}: {', '.join(found) or 'unknown'}")
        models.append(f"{name}: {', '.join(sorted(rows['model'].dropna().unique())) or 'unknown'}")
    lines.append("different warmth: cache hits depend on idle gaps and the provider (" + "; ".join(warm) + ")")
    lines.append("different versions: CLI versions " + "; ".join(vers))
    lines.append("different models: " + "; ".join(models))
    small = [f"{n} has {len(p)} sessions" for n, p in picked.items() if len(p) < 5]
    if small:
        lines.append("few sessions: " + "; ".join(small) + " (intervals are wide or missing)")
    return lines


# --- the whole analysis -----------------------------------------------------------------------------------


@dataclass
class Result:
    """Everything the report shows, and what is written under the output folder."""

    history: History
    totals: dict[str, int]  # sum name -> tokens, requests, sessions or files
    views: dict[str, pd.DataFrame]
    sessions: pd.DataFrame
    occupancy: pd.DataFrame
    blocks: dict[str, str]
    prompts: pd.DataFrame
    structural: pd.DataFrame
    warmth: pd.DataFrame
    comparison: Comparison | None
    parameters: dict[str, Any]


def analyze(
    paths: list[str | Path] | None = None,
    since: str | None = None,
    until: str | None = None,
    group_by: list[str] | tuple[str, ...] = VIEWS,
    compare_spec: dict | None = None,
    window_tokens: int = occ.WINDOW_TOKENS,
    cache: str | Path | None = None,
    top: int = 5,
) -> Result:
    """Read and analyse a history (``paths`` None: ``default_paths()``); ``top`` sessions get their block printed."""
    paths = [Path(p).expanduser() for p in (paths or default_paths())]
    if not paths:
        raise InputError("no transcript folder found: pass PATH (defaults: ~/.claude/projects, ~/.codex/sessions)")
    history = load(paths, since, until, cache)
    session_table = sessions(history)
    occupancy_rows = session_occupancy(history, window_tokens)
    biggest = session_table.sort_values("total_tokens", ascending=False)["session"].head(top).tolist()
    prompts, structural_table = structural(history)
    parameters: dict[str, Any] = {"paths": [str(p) for p in paths], "since": since, "until": until}
    parameters |= {"group_by": list(group_by), "compare": compare_spec, "window_tokens": window_tokens}
    return Result(
        history, totals(history.requests), views(history.requests, group_by), session_table, occupancy_rows,
        _occupancy_blocks(occupancy_rows, window_tokens, biggest), prompts, structural_table, warmth(prompts),
        compare(history, compare_spec, session_table) if compare_spec else None, parameters,
    )  # fmt: skip


def write(result: Result, folder: str | Path) -> dict[str, Path]:
    """Tables under ``tables/``, views and analyses as CSV under ``analysis/``, figures, report.md and .html."""
    from kit.history import report as history_report
    from kit.experiment.layout import BatchDir
    from kit.files import write_table

    folder = Path(folder)
    bd = BatchDir(folder)  # the history folder is laid out as a batch's: tables/, analysis/, figures/, report
    req = result.history.requests
    written = {
        "requests": write_table(bd.table("requests"), req),
        "tool_results": write_table(bd.table("tool_results"), result.history.tool_results),
        "issues": write_table(
            bd.tables / "parse_issues.csv", pd.DataFrame(result.history.issues, columns=schema.ISSUE_COLUMNS)
        ),
    }
    named = {f"usage_by_{by}": view for by, view in result.views.items()}
    named |= {
        "sessions": result.sessions,
        "occupancy_sessions": result.occupancy,
        "structural_sessions": result.structural,
    }
    named |= {"warmth": result.warmth, "unpriced_models": result.history.unpriced}
    named["twins"] = pd.DataFrame([asdict(t) for t in result.history.twins], columns=[f.name for f in fields(Twin)])
    if result.comparison is not None:
        named |= {"compare": result.comparison.table, "compare_ratios": result.comparison.ratios}
    for name, frame in named.items():
        written[name] = write_table(bd.analysis_csv(name), frame)
    written |= history_report.figures(result, bd.figures)
    written |= history_report.report(result, folder, written)
    return written


def run(
    paths: list[str | Path] | None = None,
    since: str | None = None,
    until: str | None = None,
    group_by: list[str] | tuple[str, ...] = VIEWS,
    compare: dict | None = None,
    window_tokens: int = occ.WINDOW_TOKENS,
    outputs_dir: str | Path = "outputs/history",
    cache: str | Path | None = None,
) -> Result:
    """The notebook's call: analyse and write everything under ``outputs_dir`` (cache: the user cache folder)."""
    result = analyze(paths, since, until, group_by, compare, window_tokens, cache or parse_cache.default_folder())
    write(result, outputs_dir)
    return result
