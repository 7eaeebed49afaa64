"""Residual context occupancy: how much of the window tool output still fills when a session ends.

A single answer's cost is a flow; occupancy is a stock that every later turn pays for, so a tool can be
cheap per call and still crowd the window. The method (docs/method.md#occupancy) is measured, not
estimated. Each request's ``input_tokens`` is its whole prompt (the canonical row already holds cache
reads and writes), so the growth from one request to the next is exactly what was appended in
between: the previous response's output, the tool results and any user text. Those parts are known
in characters (tool results, and the response's output where a reader supplies ``output_chars``) or
in tokens (the response's visible output, ``output_tokens - reasoning_tokens``, where no characters
are known). Every block's framing (type, ids, keys: ``framing_chars``, ``output_framing_chars``) counts
with what it holds, and where every result of a trial has its block's ``o200k_base`` token count the
trial's result characters are shared out by that count, so a dense result costs more than a sparse one
of the same length (``priced_by``; docs/method.md#calibration). Then:

1. Characters per token are calibrated per trial on the gaps that are >= 80% tool result by characters
   written, framing aside (docs/method.md#calibration: calibrating on every gap hands a short result a
   whole gap whose assistant text went unrecorded, so the all-gap pool is never used).
   A gap's ratio is its characters over its tokens not already known; the lower median is taken, ratios
   above 1.5 times it are dropped (shedding inflates the apparent density), and the ratio is pooled
   over the rest. A trial with no such gap borrows its arm's ratio, pooled over the arm's measured
   trials of the same batch ("arm"); with none, 3.0 chars/token ("default", the middle of the 2-4
   chars/token dense source measures at). Either way ``calibration_note`` says why, loudly.
2. The error bar is the median, over the calibration gaps that are >= 80% one tool result, of the distance between
   that result's measured growth and its price at the trial's ratio, relative to the growth.
3. Every tool result is priced at the ratio and queued in order. A compaction event (Claude's
   ``compact_boundary``, Codex's ``compacted`` / ``context_compacted``) clears the queue, and so does a
   fresh session: a trial's next main transcript file that starts its own
   conversation (``file_cycle`` 0; a resumed session's copy of its history is dropped by the reader, so
   it starts later), whose first request carries none of the earlier window (docs/method.md#compaction).
   A compaction after the last request (a session that ends in an auto-compaction) counts among the
   trial's compactions too, though no request shows what it left: the residual is the window it cleared.
   A growth smaller than expected by more than max(200 tokens, 5%) is shedding without an event
   (micro-compaction) and evicts the oldest results first, partly if need be. Below that tolerance a
   shortfall is attribution noise.

What stays queued is the residual per category; ``base`` (prompt, prose, summaries) is the final
context minus the resident tool tokens, and ``fixed base`` the first request's context (system, tool
schemas and the question, before any tool answered). Subagents and compaction requests have their own
window: their rows (``sidechain``, or ``file_role`` other than main, as the parse stage writes them;
Claude's ``attrs["sidechain_ids"]`` for a bare read) are left out (docs/method.md#occupancy).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from kit.errors import InputError
from kit.stats import require_columns

WINDOW_TOKENS = 200_000
CLEAN_SHARE = 0.80  # a gap this much tool result calibrates chars/token
SINGLE_SHARE = 0.80  # a calibration gap this much one result measures the error (docs/method.md#calibration)
MIN_GAP_CHARS = 500  # shorter gaps are too small to calibrate on
OUTLIER = 1.5  # ratios above this times the lower median are dropped (shedding inflates density)
DEFAULT_CHARS_PER_TOKEN = 3.0  # the middle of the 2-4 chars/token dense source measures at (docs/method.md#calibration)
DENSE_RANGE = (2.0, 4.0)  # a measured ratio outside it is flagged: prose runs higher, JSON or minified text lower
EVICT_MIN_TOKENS = 200
EVICT_SHARE = 0.05
COMPACTION_KINDS = frozenset(
    {"compact_boundary", "system:compact_boundary", "compaction", "system:compaction", "compacted", "context_compacted"}
)

# Tool families of kit.transcripts (read, grep, bash, exec, explore, other) as occupancy categories.
TOOL_CATEGORIES = {
    "explore": "explore tool",
    "read": "Read",
    "grep": "Grep/Glob",
    "bash": "Bash/exec",
    "exec": "Bash/exec",
}
OTHER = "other tools"
FILE_ACCESS = "file access"  # Read + Grep/Glob + Bash/exec: the without-arm's way to the same bytes
BASE = "base"
FIXED_BASE = "fixed base"
CONTEXT = "final context"
PARTS = ("explore tool", "Read", "Grep/Glob", "Bash/exec", OTHER, BASE)  # disjoint; they sum to the final context
CATEGORIES = (CONTEXT, *PARTS[:4], FILE_ACCESS, OTHER, BASE, FIXED_BASE)
_FILE_PARTS = ("Read", "Grep/Glob", "Bash/exec")

COLUMNS = [
    "batch",
    "arm",
    "run",
    "trial_id",
    "category",
    "tokens",
    "chars",
    "results",
    "contributed_tokens",
    "share_of_context",
    "share_of_window",
    "err",
    "chars_per_token",
    "priced_by",
    "calibration",
    "calibration_note",
    "rel_err",
    "requests",
    "compactions",
    "evicted_tokens",
    "output_measure",
    "sessions",
]
SUMMARY_COLUMNS = ["arm", "category", "trials", "tokens", "share_of_context", "share_of_window", "err"]


@dataclass
class _Chunk:
    """One tool result in the window: its characters, its priced tokens and how many are still resident."""

    chars: float
    tokens: float
    left: float


@dataclass
class _Gap:
    """What one request carries new: its growth over the previous prompt and the parts that explain it."""

    delta: float
    tool_chars: float
    other_chars: float
    other_tokens: float
    compacted: bool
    new_session: bool = False  # the first request of a fresh session: the window starts over
    output_in_chars: bool = True  # the previous response's output is known in characters (else in tokens)
    output_by_o200k: bool = False  # ... and priced by its blocks' ``o200k_base`` count (``_gaps``)
    unknown_text: bool = False  # a new user turn whose characters are not known
    content: float = 0.0  # the characters written (results, output text, user text): the chars less framing
    results: list[tuple[str, float, float]] = field(default_factory=list)  # (category, chars, priced chars: _units)

    @property
    def chars(self) -> float:
        return self.tool_chars + self.other_chars

    @property
    def reset(self) -> bool:
        """The window was cleared before this request (a compaction or a fresh session)."""
        return self.compacted or self.new_session

    @property
    def unknown_tokens(self) -> float:
        """Tokens of the growth not already known as tokens: what the gap's characters must explain."""
        return self.delta - self.other_tokens

    @property
    def tool_content(self) -> float:
        """The tool results' own characters (their framing aside)."""
        return sum(chars for _, chars, _ in self.results)

    def share(self, content: float) -> float:
        """The part of the growth that ``content`` characters of tool result account for, at the gap's own
        density: a share of what was written, framing aside, since every block brings its framing whatever it
        holds (docs/method.md#calibration)."""
        if self.content <= 0 or self.delta <= 0:
            return 0.0
        return content / self.content * max(0.0, 1 - self.other_tokens / self.delta)

    def measurable(self) -> bool:
        """Fit to calibrate on: nothing cleared, nothing of unknown size, growth and text enough to divide."""
        return not (self.reset or self.unknown_text) and self.unknown_tokens > 0 and self.chars > MIN_GAP_CHARS


@dataclass(frozen=True)
class Calibration:
    """A trial's chars per token of tool output, how it was found and, unless plainly measured, why."""

    chars_per_token: float
    how: str  # "measured", "arm" (the arm's other trials), "default", or "none" (no tool result to price)
    note: str = ""
    kept: tuple[_Gap, ...] = ()  # the gaps it was measured on


def _clean(gaps: list[_Gap]) -> list[_Gap]:
    return [g for g in gaps if g.measurable() and g.share(g.tool_content) >= CLEAN_SHARE]


def _kept(gaps: list[_Gap]) -> list[_Gap]:
    """The calibration gaps: >= 80% tool result, less those denser than 1.5 times the lower median (shed)."""
    clean = _clean(gaps)
    if not clean:
        return []
    ratios = sorted(g.chars / g.unknown_tokens for g in clean)
    lower_median = ratios[(len(ratios) - 1) // 2]
    return [g for g in clean if g.chars / g.unknown_tokens <= OUTLIER * lower_median]


def _measured(gaps: list[_Gap]) -> Calibration | None:
    """The ratio over the calibration gaps, flagged when outside what dense source measures; None if none."""
    kept = _kept(gaps)
    if not kept:
        return None
    cpt = sum(g.chars for g in kept) / sum(g.unknown_tokens for g in kept)
    low, high = DENSE_RANGE
    note = "" if low <= cpt <= high else f"{cpt:.2f} chars/token is outside the {low:g}-{high:g} of dense source"
    return Calibration(cpt, "measured", note, tuple(kept))


def _no_gap(gaps: list[_Gap]) -> str:
    """Why no gap calibrates, with the nearest miss, for the warning."""
    measurable = [g for g in gaps if g.measurable()]
    if not measurable:
        return f"no gap of {MIN_GAP_CHARS}+ characters and known growth ({len(gaps)} gaps)"
    best = max(g.share(g.tool_content) for g in measurable)
    return f"no gap >= {CLEAN_SHARE:.0%} tool result (the most: {best:.0%}, of {len(measurable)} measurable gaps)"


def _borrowed(gaps: list[_Gap], pool: list[Calibration]) -> Calibration:
    """No calibration gap: the arm's ratio pooled over its measured trials, else the named default."""
    if not any(chars for g in gaps for _, chars, _ in g.results):
        return Calibration(float("nan"), "none", "no tool result to price")
    reason = _no_gap(gaps)
    kept = [g for c in pool for g in c.kept]
    if kept:
        cpt = sum(g.chars for g in kept) / sum(g.unknown_tokens for g in kept)
        return Calibration(cpt, "arm", f"{reason}; priced at the arm's ratio over its {len(pool)} measured trial(s)")
    return Calibration(DEFAULT_CHARS_PER_TOKEN, "default", f"{reason}; {DEFAULT_CHARS_PER_TOKEN:g} chars/token assumed")


def _relative_error(calibration: Calibration) -> float:
    """Median, over calibration gaps that are >= 80% one tool result, of |price - growth| / growth; NaN if none.

    Each such gap is priced at the ratio of the other calibration gaps (leave one out): a gap inside the ratio
    it is checked against partly prices itself (a lone gap exactly), so the in-sample error read low, about a
    third to a half of the measured error on the CLIs' explore trials (docs/method.md#calibration). A result's
    growth is its gap's growth less the gap's other characters at that ratio, and its price its characters at
    that ratio. With fewer than two calibration gaps, there is no other gap and no error bar.
    """
    kept = calibration.kept
    if len(kept) < 2:
        return float("nan")
    chars, tokens = sum(g.chars for g in kept), sum(g.unknown_tokens for g in kept)
    errors = []
    for g in kept:
        content, result = max((size, units) for _, size, units in g.results)
        if g.share(content) < SINGLE_SHARE:
            continue
        cpt = (chars - g.chars) / (tokens - g.unknown_tokens)
        growth = g.unknown_tokens - (g.chars - result) / cpt
        errors.append(abs(result / cpt - growth) / growth)
    return float(np.median(errors)) if errors else float("nan")


def _evict(queue: deque[_Chunk], tokens: float) -> float:
    """Remove ``tokens`` from the oldest resident chunks first; returns what was removed."""
    removed = 0.0
    for chunk in queue:
        if removed >= tokens:
            break
        take = min(chunk.left, tokens - removed)
        chunk.left -= take
        removed += take
    while queue and queue[0].left <= 0:
        queue.popleft()
    return removed


def _attribute(gaps: list[_Gap], cpt: float) -> tuple[dict[str, list[_Chunk]], float, int]:
    """Pass 2: chunks per category (with what is left of each), tokens evicted, compactions."""
    queue: deque[_Chunk] = deque()
    every: dict[str, list[_Chunk]] = {c: [] for c in PARTS[:5]}
    evicted, compactions = 0.0, 0
    for g in gaps:
        compactions += g.compacted
        if g.reset:
            evicted += _evict(queue, sum(c.left for c in queue))
        added = 0.0
        for category, chars, units in g.results:
            tokens = units / cpt
            chunk = _Chunk(chars, tokens, tokens)
            queue.append(chunk)
            every[category].append(chunk)
            added += chunk.tokens
        if g.reset:
            continue
        expected = added + g.other_chars / cpt + g.other_tokens
        shortfall = expected - g.delta
        if shortfall > max(EVICT_MIN_TOKENS, EVICT_SHARE * expected):
            evicted += _evict(queue, shortfall)
    return every, evicted, compactions


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A nullable count column as floats, NaN where missing or where the column is absent."""
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return frame[column].astype("Float64").to_numpy(dtype=float, na_value=np.nan)


def _new_sessions(req: pd.DataFrame) -> np.ndarray:
    """Requests that open a fresh session: the first of another transcript file, at its own cycle 0."""
    if "source_path" not in req.columns or "file_cycle" not in req.columns:
        return np.zeros(len(req), dtype=bool)
    paths = req["source_path"].astype("string").fillna("").to_numpy(dtype=object)
    changed = np.r_[False, paths[1:] != paths[:-1]]
    return changed & (_floats(req, "file_cycle") == 0)


class _Units(NamedTuple):
    """What a trial's results are priced by (``_units``)."""

    priced: np.ndarray  # each result's priced characters
    how: str  # "chars", "o200k", or "" (no result)
    scale: float  # with "o200k": the results' characters per ``o200k_base`` token (else NaN)


def _units(res: pd.DataFrame, framed: bool) -> _Units:
    """What each result is priced by, in characters, and how: its block's characters (content and framing),
    or, where every result of the trial has its ``o200k_base`` token count and the responses' framing is known
    too (``framed``: the whole exchange measured alike), that count in the trial's characters per such token
    (the trial's characters are kept, shared out by the tokenizer's measure), so that a dense result costs
    more than a sparse one of the same length (docs/method.md#calibration)."""
    chars = (res["chars"] + res["framing"]).to_numpy(dtype=float)
    o200k = res["o200k"].to_numpy(dtype=float)
    if len(res) == 0:
        return _Units(chars, "", np.nan)
    if not framed or np.isnan(o200k).any() or o200k.sum() <= 0:
        return _Units(chars, "chars", np.nan)
    scale = chars.sum() / o200k.sum()
    return _Units(o200k * scale, "o200k", scale)


def _framed(req: pd.DataFrame) -> bool:
    """Whether every response's framing is known (``output_framing_chars``; an SDK record does not give it)."""
    return "output_framing_chars" in req and bool(req["output_framing_chars"].notna().all())


def _gaps(req: pd.DataFrame, res: pd.DataFrame, units: _Units, compact_cycles: np.ndarray) -> list[_Gap]:
    """Gap k holds what request k carries new: request k-1's output, tool results with cycle in (c[k-1], c[k]];
    ``units``: what each result is priced by (``_units``). Where the results are priced by ``o200k_base`` and
    every response's blocks have their count too (``output_o200k_tokens``), a response is priced by its count
    in the same characters per such token, not by its characters (docs/method.md#calibration)."""
    cycles = req["cycle"].to_numpy(dtype=np.int64)
    ctx = _floats(req, "input_tokens")
    out_chars = _floats(req, "output_chars")
    framing = np.nan_to_num(_floats(req, "output_framing_chars"))  # the response's blocks besides what they hold
    out_o200k = _floats(req, "output_o200k_tokens")
    by_o200k = units.how == "o200k" and not np.isnan(out_o200k).any()
    block = out_o200k * units.scale if by_o200k else out_chars + framing  # a response's blocks, priced
    visible = _floats(req, "output_tokens") - np.nan_to_num(_floats(req, "reasoning_tokens"))
    user_known = _floats(req, "user_chars")
    user = np.nan_to_num(user_known)
    turns = _floats(req, "turn")
    new_turn = np.r_[False, turns[1:] != turns[:-1]] & ~np.isnan(turns) & np.isnan(user_known)
    new_session = _new_sessions(req)
    slot = np.searchsorted(cycles, res["cycle"].to_numpy(dtype=np.int64), side="left")  # first request with c >= cycle
    gaps = []
    for k in range(1, len(req)):
        mine = res[slot == k]
        priced = units.priced[slot == k]
        known_chars = not np.isnan(out_chars[k - 1])
        other_tokens = 0.0 if known_chars else (0.0 if np.isnan(visible[k - 1]) else max(visible[k - 1], 0.0))
        gaps.append(
            _Gap(
                delta=ctx[k] - ctx[k - 1],
                tool_chars=float(priced.sum()),
                other_chars=(block[k - 1] if known_chars else 0.0) + user[k],
                content=float(mine["chars"].sum()) + (out_chars[k - 1] if known_chars else 0.0) + user[k],
                other_tokens=other_tokens,
                compacted=bool(((compact_cycles > cycles[k - 1]) & (compact_cycles <= cycles[k])).any()),
                new_session=bool(new_session[k]),
                output_in_chars=known_chars,
                output_by_o200k=by_o200k,
                unknown_text=bool(new_turn[k]),
                results=list(zip(mine["part"], mine["chars"], priced, strict=True)),
            )
        )
    return gaps


def _measure(gaps: list[_Gap]) -> str:
    """How the responses' own output was known: "o200k" (their blocks' ``o200k_base`` count), "chars", "tokens"
    (visible output tokens) or "mixed"."""
    kinds = {("o200k" if g.output_by_o200k else "chars") if g.output_in_chars else "tokens" for g in gaps}
    return "mixed" if len(kinds) > 1 else next(iter(kinds), "")


def _trial_rows(req: pd.DataFrame, gaps: list[_Gap], calibration: Calibration, window: int, late: bool) -> list[dict]:
    """The trial's rows; ``late``: a compaction after its last request (``_TrialGaps.late``), which counts
    among its compactions though no request shows what it left: the residual is the window it cleared."""
    ctx_final, ctx_first = float(req["input_tokens"].iloc[-1]), float(req["input_tokens"].iloc[0])
    cpt, rel = calibration.chars_per_token, _relative_error(calibration)
    every, evicted, compactions = _attribute(gaps, cpt)
    compactions += late
    parts = {}
    for category, chunks in every.items():
        tokens = sum(c.left for c in chunks)
        parts[category] = {
            "tokens": tokens,
            "chars": sum(c.chars * c.left / c.tokens for c in chunks if c.tokens > 0),
            "results": sum(c.left > 0 for c in chunks),
            "contributed_tokens": sum(c.tokens for c in chunks),
        }
    tool_tokens = sum(p["tokens"] for p in parts.values())
    summed = {k: sum(parts[c][k] for c in _FILE_PARTS) for k in ("tokens", "chars", "results", "contributed_tokens")}

    def err(tokens: float) -> float:
        """One calibration prices every result, so errors scale with the tokens priced (none: no error)."""
        return rel * tokens if tokens else 0.0

    rows = {
        CONTEXT: {"tokens": ctx_final, "err": 0.0},
        **{c: {**parts[c], "err": err(parts[c]["tokens"])} for c in PARTS[:4]},
        FILE_ACCESS: {**summed, "err": err(summed["tokens"])},
        OTHER: {**parts[OTHER], "err": err(parts[OTHER]["tokens"])},
        BASE: {"tokens": ctx_final - tool_tokens, "err": err(tool_tokens)},  # base is what the tools are not
        FIXED_BASE: {"tokens": ctx_first, "err": 0.0},
    }
    common = {
        "chars_per_token": cpt,
        "calibration": calibration.how,
        "calibration_note": calibration.note,
        "rel_err": rel,
        "requests": len(req),
        "compactions": compactions,
        "evicted_tokens": evicted,
        "output_measure": _measure(gaps),
        "sessions": 1 + sum(g.new_session for g in gaps),
    }
    return [
        {
            "category": category,
            "chars": np.nan,
            "results": pd.NA,
            "contributed_tokens": np.nan,
            **values,
            "share_of_context": values["tokens"] / ctx_final if ctx_final else np.nan,
            "share_of_window": values["tokens"] / window,
            **common,
        }
        for category, values in rows.items()
    ]


def _check(requests: pd.DataFrame, tool_results: pd.DataFrame, keys: list[str]) -> None:
    require_columns(requests, [*keys, "cycle", "input_tokens", "output_tokens"], "measure(requests)")
    require_columns(tool_results, [*keys, "cycle", "category", "chars"], "measure(tool_results)")
    for name, frame in (("requests", requests), ("tool_results", tool_results)):
        bad = frame.index[frame["trial_id"].isna() | frame["cycle"].isna()]
        if len(bad):
            raise InputError(f"measure({name}): row {bad[0]} has no trial_id or cycle; fill them (parse stage) first")
    dup = requests.duplicated([*keys, "cycle"])
    if dup.any():
        row = requests[dup].iloc[0]
        where = f" ({row['source_path']}:{row['source_line']})" if "source_path" in requests else ""
        raise InputError(
            f"measure(requests): trial {row['trial_id']} has cycle {row['cycle']} twice{where}; one window per "
            "trial is measured, so number a trial's transcript files across the trial (the parse stage does) and "
            "mark subagent responses (sidechain)"
        )
    bad_chars = tool_results.index[tool_results["chars"].isna() | (tool_results["chars"] < 0)]
    if len(bad_chars):
        raise InputError(f"measure(tool_results): row {bad_chars[0]}: chars must be a known count >= 0")


def _compactions(events: pd.DataFrame | None, keys: list[str]) -> pd.DataFrame:
    if events is None or events.empty:
        return pd.DataFrame(columns=[*keys, "cycle"])
    require_columns(events, [*keys, "cycle"], "measure(events)")
    if "kind" in events.columns:
        events = events[events["kind"].isin(COMPACTION_KINDS)]
    return events[[*keys, "cycle"]]


def _main_window(
    requests: pd.DataFrame, tool_results: pd.DataFrame, keys: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The main conversation's requests, and the tool results they carry: a result first carried by a
    subagent's or compaction's request is in that window, not the parent's."""
    side = pd.Series(False, index=requests.index)
    if "sidechain" in requests.columns:
        side |= requests["sidechain"].astype("boolean").fillna(False)
    if "file_role" in requests.columns:
        side |= requests["file_role"].astype("string").fillna("main") != "main"
    if not side.any():
        return requests, tool_results
    theirs = pd.MultiIndex.from_frame(requests.loc[side, [*keys, "cycle"]])
    carried = pd.MultiIndex.from_frame(tool_results[[*keys, "cycle"]]).isin(theirs)
    return requests[~side], tool_results[~carried]


class _TrialGaps(NamedTuple):
    ident: dict[str, Any]  # the trial's keys (arm, batch, trial_id, run)
    requests: pd.DataFrame
    gaps: list[_Gap] | None  # None: usage unknown
    measured: Calibration | None  # None: not measured on this trial (borrowed from its arm)
    priced_by: str  # what its results are priced by (``_units``)
    late: bool = False  # a compaction event after the last request (an auto-compaction the session ended in)


def _prepared(tool_results: pd.DataFrame) -> pd.DataFrame:
    """Tool results with what pricing reads: occupancy category, characters, framing, ``o200k_base`` tokens."""
    return tool_results.assign(
        part=tool_results["category"].map(TOOL_CATEGORIES).fillna(OTHER),
        chars=tool_results["chars"].astype(float),
        framing=np.nan_to_num(_floats(tool_results, "framing_chars")),
        o200k=_floats(tool_results, "o200k_tokens"),
    )


def _trials(
    requests: pd.DataFrame, results: pd.DataFrame, compactions: pd.DataFrame, keys: list[str]
) -> list[_TrialGaps]:
    """Every trial's gaps and own calibration (none where a request's usage is unknown)."""
    by_trial = {k: g for k, g in results.groupby(keys, sort=False, dropna=False)}
    by_event = {k: g["cycle"].to_numpy(dtype=np.int64) for k, g in compactions.groupby(keys, sort=False)}
    trials: list[_TrialGaps] = []
    for key, req in requests.groupby(keys, sort=False, dropna=False):
        req = req.sort_values("cycle")
        ident = {"arm": req["arm"].iloc[0] if "arm" in req else pd.NA, **dict(zip(keys, key, strict=True))}
        if "run" in req:
            ident["run"] = req["run"].iloc[0]
        mine = by_trial.get(key, results.iloc[:0])
        units = _units(mine, _framed(req))
        if req["input_tokens"].isna().any() or req["output_tokens"].isna().any():
            trials.append(_TrialGaps(ident, req, None, None, units.how))
            continue
        cycles = by_event.get(key, np.array([], dtype=np.int64))
        found = _gaps(req, mine, units, cycles)
        late = bool((cycles > req["cycle"].max()).any())  # no gap holds it: no request follows
        trials.append(_TrialGaps(ident, req, found, _measured(found), units.how, late))
    return trials


def result_prices(tool_results: pd.DataFrame, occ: pd.DataFrame) -> pd.Series:
    """Each tool result's tokens as ``measure`` priced it when it entered the window (``occ``: its rows, one
    trial per ``trial_id``): for checking the attribution against counts a provider knows."""
    results = _prepared(tool_results)
    trials = occ.drop_duplicates("trial_id").set_index("trial_id")
    ratio, priced_by = trials["chars_per_token"].astype(float), trials["priced_by"]
    prices = pd.Series(np.nan, index=results.index)
    for trial, mine in results.groupby("trial_id", sort=False):
        prices[mine.index] = _units(mine, priced_by.get(trial) == "o200k").priced / ratio.get(trial, np.nan)
    return prices


def measure(
    requests: pd.DataFrame,
    tool_results: pd.DataFrame,
    *,
    events: pd.DataFrame | None = None,
    window_tokens: int = WINDOW_TOKENS,
) -> pd.DataFrame:
    """Residual occupancy at the end of every trial, one row per trial and category (``CATEGORIES``).

    ``requests``: canonical rows (``trial_id``, ``cycle``, ``input_tokens``, ``output_tokens``; optional
    ``batch``, ``arm``, ``reasoning_tokens``, ``output_chars`` = characters of the response's output as the
    next prompt carries it, ``user_chars`` = characters of user text new in the request, ``sidechain``).
    ``tool_results``: ``kit.transcripts.tool_results`` rows (``cycle`` = first request carrying the result).
    ``events``: compactions (``trial_id``, ``cycle`` = first request after it, past the last request for one
    after it, which counts too; rows with a ``kind`` other than a compaction's, ``COMPACTION_KINDS``, are
    ignored; several events before the same request are one compaction). A trial with no calibration gap
    borrows the ratio of its arm's measured trials in the same batch (``calibration`` "arm"), else the default.
    Trials are keyed by (batch, trial_id) when both tables have a ``batch`` column (filled): trial ids
    repeat across batches. A trial with a request of unknown usage gets NaN tokens and ``calibration``
    "usage unknown": missing is never zero.
    """
    batched = "batch" in requests.columns and "batch" in tool_results.columns and requests["batch"].notna().any()
    keys = ["batch", "trial_id"] if batched else ["trial_id"]
    _check(requests, tool_results, keys)
    requests, tool_results = _main_window(requests, tool_results, keys)
    trials = _trials(requests, _prepared(tool_results), _compactions(events, keys), keys)
    pools: dict[tuple, list[Calibration]] = {}
    for trial in trials:
        if trial.measured is not None:
            pools.setdefault((trial.ident.get("batch"), trial.ident["arm"]), []).append(trial.measured)
    rows = []
    for ident, req, gaps, measured, priced_by, late in trials:
        if gaps is None:
            rows += [{**ident, "category": c, "calibration": "usage unknown", "requests": len(req)} for c in CATEGORIES]
            continue
        calibration = measured or _borrowed(gaps, pools.get((ident.get("batch"), ident["arm"]), []))
        trial_rows = _trial_rows(req, gaps, calibration, window_tokens, late)
        rows += [{**ident, **r, "priced_by": priced_by} for r in trial_rows]
    out = pd.DataFrame(rows, columns=COLUMNS)
    if not batched:
        out["batch"] = requests["batch"].iloc[0] if "batch" in requests.columns and len(requests) else pd.NA
    return out.astype({"results": "Int64", "requests": "Int64", "compactions": "Int64", "sessions": "Int64"})


def arm_means(occ: pd.DataFrame, *, parts_only: bool = True) -> pd.DataFrame:
    """Per arm and category, the mean over trials (what ``kit.charts.occupancy_bars`` stacks).

    ``parts_only`` keeps the disjoint categories (``PARTS``), which sum to the final context, so a
    stacked bar is the whole window's use; ``False`` adds the totals (final context, file access, fixed
    base). ``err`` is the mean of the trials' attribution errors (one calibration method for all).
    """
    require_columns(occ, ["arm", "category", "tokens", "share_of_context", "share_of_window", "err"], "arm_means(occ)")
    wanted = PARTS if parts_only else CATEGORIES
    frame = occ[occ["category"].isin(wanted)].assign(arm=occ["arm"].astype("string"))
    grouped = frame.groupby(["arm", "category"], sort=False, dropna=False)
    out = grouped.agg(
        trials=("tokens", "count"),
        tokens=("tokens", "mean"),
        share_of_context=("share_of_context", "mean"),
        share_of_window=("share_of_window", "mean"),
        err=("err", "mean"),
    ).reset_index()
    order = {c: i for i, c in enumerate(CATEGORIES)}
    out = out.sort_values(["arm", "category"], key=lambda s: s.map(order) if s.name == "category" else s)
    return out[SUMMARY_COLUMNS].reset_index(drop=True)
