"""The column dictionary of every table the stages write: the source of ``docs/tables.md``.

Why in code: a hand-written column list drifts the moment a stage gains a column. Here the column
lists come from the modules that write the tables wherever such a list exists (``kit.schema``,
``kit.analysis.metrics``, ``kit.stages.parse``, ``kit.analysis.occupancy``, ``kit.stages.analyze``), and each column
needs a one-line meaning and a unit below, or building the dictionary fails. Columns that are fields of a record
(``kit.stats``'s ``Comparison``, ``Savings``, ``WarmthInvariance``, ``QualityGate``; ``kit.records.TrialMeta``) take
both from the field's description, written once there.
``tests/test_docs.py`` checks that ``docs/tables.md`` is exactly :func:`render`'s output and that every column of
the committed example batches is described. Regenerate with ``python -m kit.cli.columns > docs/tables.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kit import records, schema, stats
from kit.analysis import metrics, occupancy, occupancy_block
from kit.stages import analyze, history, parse
from kit.transcripts._tools import CATEGORIES


@dataclass(frozen=True)
class Column:
    """One column: its name, what a value means, and the unit values are in."""

    name: str
    meaning: str
    unit: str


@dataclass(frozen=True)
class Table:
    """One table a stage writes, relative to the batch folder (``tables/…`` or ``analysis/…``)."""

    path: str
    writer: str
    purpose: str
    method: str  # anchor of docs/method.md that explains the table's figures
    columns: tuple[Column, ...]


# The columns that are fields of kit.stats's records, described on the fields.
_COMPARISON = records.docs(stats.Comparison)
_SAVINGS = records.docs(stats.Savings)
_WARMTH = records.docs(stats.WarmthInvariance)
_QUALITY = records.docs(stats.QualityGate)
_TRIAL = records.docs(records.TrialMeta)  # the trial columns the run stage writes in meta.json

# Meanings shared by every table that has the column; a table overrides where its column differs.
_COMMON: dict[str, tuple[str, str]] = {
    "turn": ("user prompt the response answers, within its trial", "index from 1"),
    "cycle": (
        "model response within the trial, across all its transcript files in start order",
        "index from 0",
    ),
    "file_cycle": ("model response within its own transcript file (`cycle` counts across the trial)", "index from 0"),
    "file_role": (
        "whose context window the file's responses fill: `main`, `subagent` or `compaction`; `side` for a request "
        "only the provider log holds, at no compaction",
        "text",
    ),
    "sidechain": ("the response belongs to a subagent or a compaction request, not the main conversation", "boolean"),
    "side_request": (
        "a request the client made besides the conversation's, counted in the totals: `compaction` (a compaction's "
        "summary request: a Codex rollout's own, a compaction file's, or one only the provider log holds) or "
        "`unrecorded` (only the provider log holds it, at no compaction); empty for the conversation's and its "
        "subagents' responses (docs/method.md#totals)",
        "text",
    ),
    "model": ("model name as the source reports it", "text"),
    "source_format": ("transcript format the row was read from (`kit.transcripts.FORMATS`)", "text"),
    "source_path": ("file the row was read from (in a batch's tables: relative to the batch folder)", "path"),
    "source_line": ("line of that file", "line number from 1"),
    "input_tokens": ("every prompt token, cached or not (docs/method.md#conventions)", "tokens"),
    "cache_read_tokens": ("prompt tokens served from the provider's cache; part of input", "tokens"),
    "cache_write_tokens": ("prompt tokens written to the cache; part of input", "tokens"),
    "cache_write_1h_tokens": ("the part of the cache writes with a 1-hour lifetime, where known", "tokens"),
    "uncached_input_tokens": ("input − cache reads: rides the cache's warmth (docs/method.md#warmth)", "tokens"),
    "output_tokens": ("generated tokens, reasoning included", "tokens"),
    "reasoning_tokens": ("the reasoning part of output", "tokens"),
    "total_tokens": ("input + output: the cache-independent headline (docs/method.md#totals)", "tokens"),
    "tool_calls": ("tool calls the response asked for", "count"),
    "output_chars": (
        "characters the response wrote, from the transcript's content: text, visible reasoning, tool-call inputs "
        "as sent; encrypted or redacted reasoning not counted; missing where the source lacks the content "
        "(docs/method.md#transcripts)",
        "characters",
    ),
    "output_framing_chars": (
        "characters of the response's blocks besides what the model wrote in them (text, thinking, call inputs): "
        "types, ids, names and the other keys as the transcript holds them, compact JSON; missing where the "
        "output is (docs/method.md#calibration)",
        "characters",
    ),
    "output_o200k_tokens": (
        "`o200k_base` tokens of the response's blocks whole (what the model wrote and its framing; a signature or "
        "encrypted reasoning emptied), as the client sends them back: counted with the tool results (the parse "
        "stage, `tables`, a history), missing from a read of requests alone and where the reader does not hold "
        "them as sent back (Claude Code session files, Codex rollouts and the SDK agents' records only) "
        "(docs/method.md#calibration)",
        "tokens",
    ),
    "exec_cells": (
        "Codex Code Mode cells (`exec` custom tool calls) the response wrote (docs/method.md#transcripts)",
        "count",
    ),
    "exec_tool_calls": ("`tools.<name>(` calls written in those cells", "count"),
    "exec_multi_call_cells": ("cells with two or more `tools.<name>(` calls", "count"),
    "exec_promise_all_cells": ("cells using `Promise.all` or `Promise.allSettled`", "count"),
    "function_calls": ("plain Codex function calls (`function_call` items), made without a cell", "count"),
    "quota_primary_used": (
        "Codex plan quota used in the primary window, as the response's `token_count` event reports it",
        "percent",
    ),
    "quota_secondary_used": ("Codex plan quota used in the secondary window, likewise", "percent"),
    "usage_known": ("false where the source gave no usage: token counts are then missing, never zero", "boolean"),
    "started_at": ("when the response (or trial) started", "ISO-8601 time"),
    "wall_s": ("wall-clock duration", "seconds"),
    "isolation": (
        "isolation mechanisms applied, comma-separated, or `none` (docs/method.md#isolation)",
        "text",
    ),
    "hit_rate": ("cache reads / input tokens", "fraction 0–1"),
    "calls_per_response": ("tool calls per response, over responses that called a tool", "count"),
    "multi_call_share": ("share of tool-calling responses that made two or more calls", "fraction 0–1"),
    "structural_uncached": (
        "input minus the longest prefix shared with an earlier request of the trial (docs/method.md#structural-cache)",
        "tokens",
    ),
    "cost_usd": ("price at the dated API rate card for the model (`kit/data/rates/`); empty when unpriced", "USD"),
    "credits": ("price at the Codex credit rate card; empty when the model has no card row", "credits"),
    "structural_cost_usd": (
        "price at the dated USD rate card as an ideal per-trial prefix cache bills it: structural cached tokens at "
        "the cached rate, every other prompt token written (docs/method.md#structural-cache); empty when unpriced",
        "USD",
    ),
    # written once, on kit.records.TrialMeta's fields of the same name
    **{
        k: _TRIAL[k]
        for k in (
            "batch",
            "run",
            "trial_id",
            "backend",
            "order_index",
            "status",
            "reason",
            "grade",
            "grade_detail",
            "control",
            "simulated",
            "cycles",
        )
    },
    # written once, on kit.stats.Comparison's fields of the same name
    **{
        k: _COMPARISON[k]
        for k in ("arm", "baseline", "metric", "confidence", "method", "lower", "upper", "note", "label")
    },
    "category": ("tool family", "text"),
    "chars": ("characters of the tool results", "characters"),
    "tokens": ("tokens still resident at the end of the session", "tokens"),
    "share_of_context": ("tokens / the final context", "fraction 0–1"),
    "share_of_window": ("tokens / the nominal context window", "fraction 0–1"),
    "err": ("attribution error of `tokens` (docs/method.md#calibration)", "tokens"),
    **{f"calls_{c}": (f"tool calls of the `{c}` family (`kit.transcripts` categories)", "count") for c in CATEGORIES},
}


def _table(
    path: str,
    writer: str,
    purpose: str,
    method: str,
    names: Sequence[str],
    own: Mapping[str, tuple[str, str]] | None = None,
) -> Table:
    """A table whose columns are ``names`` in order; meanings from ``own``, else the shared ones."""
    described = {**_COMMON, **(own or {})}
    missing = [n for n in names if n not in described]
    if missing:
        raise KeyError(f"{path}: no description for column(s) {missing}; add them to kit/cli/columns.py")
    return Table(path, writer, purpose, method, tuple(Column(n, *described[n]) for n in names))


_TRIALS = [
    *metrics.META_COLUMNS,
    *metrics.TRIAL_COLUMNS,
    *(f"calls_{c}" for c in CATEGORIES),
    *parse.RESPONSE_SUMS,
    *parse.QUOTA_COLUMNS,
    *parse.SIDE_COLUMNS,
]
_TRIAL_SUMS = (
    {
        c: (f"{_COMMON[c][0]}, summed over the trial's responses; missing if any response's usage is unknown", "tokens")
        for c in schema.TOKENS
    }
    | {"tool_calls": ("tool calls over the trial's responses", "count")}
    | {
        c: (f"{_COMMON[c][0].split(' (docs/')[0]}, summed over the trial's responses; missing if any is", _COMMON[c][1])
        for c in parse.RESPONSE_SUMS
    }
    | {
        f"{c}_{end}": (f"{_COMMON[c][0].split(',')[0]}, at the trial's {end} response that reported it", "percent")
        for c in schema.QUOTA
        for end in ("first", "last")
    }
    | {
        "side_requests": ("the trial's side requests (`side_request`); missing for a trial without responses", "count"),
        "side_tokens": (
            "their total tokens, part of `total_tokens` (docs/method.md#totals); missing if any one's usage is unknown",
            "tokens",
        ),
    }
)

TABLES: tuple[Table, ...] = (
    _table(
        "tables/requests.parquet",
        "parse (`kit.stages.parse`, `kit.transcripts`)",
        "The canonical request row: one row per model API response.",
        "transcripts",
        schema.REQUEST_COLUMNS,
    ),
    _table(
        "tables/trials.parquet",
        "parse (`kit.analysis.metrics.trial_table`)",
        "One row per trial, failed ones included: its design facts and the sums of its responses.",
        "totals",
        _TRIALS,
        {**_TRIAL_SUMS, "started_at": ("when the trial started", "ISO-8601 time")},
    ),
    _table(
        "tables/tool_results.parquet",
        "parse (`kit.transcripts.tool_results`)",
        "One row per tool result a trial's transcript carries.",
        "occupancy",
        schema.TOOL_RESULT_COLUMNS,
        {
            "cycle": ("first response whose prompt carries the result", "index from 0"),
            "tool": ("tool name as the transcript gives it", "text"),
            "category": ("tool family: " + ", ".join(f"`{c}`" for c in CATEGORIES), "text"),
            "chars": ("characters of the result", "characters"),
            "framing_chars": (
                "characters of the result's block besides its content (type, call id and the other keys as the "
                "transcript holds them, compact JSON); NA where the format does not show it "
                "(docs/method.md#calibration)",
                "characters",
            ),
            "o200k_tokens": (
                "the result's block in `o200k_base` tokens (the framing's JSON and the content's text counted apart): "
                "the OpenAI models' own tokenizer, a proxy for Claude's (docs/method.md#calibration); NA where unknown",
                "tokens",
            ),
            "is_error": ("the tool reported a failure", "boolean"),
        },
    ),
    _table(
        "tables/parse_issues.parquet",
        "parse (`kit.stages.parse`)",
        "What could not be read, or disagreed between a trial's sources; nothing is silently dropped.",
        "transcripts",
        schema.ISSUE_COLUMNS,
        {
            "source_path": ("file (or trial folder) with the problem", "path"),
            "source_line": ("line of the problem; 0 for the whole file", "line number"),
            "reason": ("what is wrong there", "text"),
        },
    ),
    _table(
        "tables/segments.parquet",
        "parse (`kit.stages.parse`, from the embedded provider's log)",
        "Each request's prompt as hashed segments, which the cache model replays.",
        "structural-cache",
        parse.SEGMENT_COLUMNS,
        {
            "t": ("request time since the provider started", "seconds"),
            "input_tokens": ("tokens of the whole prompt (sum of the segments)", "tokens"),
            "segments_json": ("JSON list of `[content hash, tokens, cache breakpoint]` in prefix order", "JSON"),
        },
    ),
    _table(
        "tables/events.parquet",
        "parse (`kit.stages.parse`)",
        "Transcript events that are not responses (compaction boundaries, system events, API errors).",
        "compaction",
        parse.EVENT_COLUMNS,
        {
            "cycle": ("response the event precedes", "index from 0"),
            "kind": ("event kind, e.g. `compact_boundary`", "text"),
            "detail": ("the event's details as the transcript gives them", "JSON or text"),
        },
    ),
    _table(
        "analysis/trials.csv",
        "analyze (`kit.stages.analyze`)",
        "The trials table of every analysed batch, plus the structural-cache figure and prices.",
        "totals",
        [*_TRIALS, "structural_uncached", *analyze.PRICED],
        {**_TRIAL_SUMS, "started_at": ("when the trial started", "ISO-8601 time")},
    ),
    _table(
        "analysis/ratios.csv",
        "analyze (`kit.stats.ratios`)",
        "Every arm against the baseline on every metric; total and uncached tokens always get their own rows.",
        "stitch",
        list(_COMPARISON),
        _COMPARISON,
    ),
    _table(
        "analysis/arms.csv",
        "analyze (`kit.analysis.metrics.arm_summary`)",
        "Per arm and metric: the mean of finished trials with its bootstrap interval.",
        "intervals",
        [
            "batches",
            "arm",
            "metric",
            "n",
            "failed",
            "missing",
            "mean",
            "lower",
            "upper",
            "median",
            "confidence",
            "method",
            "note",
            "bound_beyond_data",
        ],
        {
            "batches": ("the batches pooled, joined by `+`", "text"),
            "bound_beyond_data": (
                "the interval's model reached past the runs: a lower bound below the smallest run is raised to it, "
                "an upper one above the largest is kept and the note says so (docs/method.md#intervals)",
                "boolean",
            ),
            "n": ("finished trials with a value", "count"),
            "failed": ("failed trials of the arm", "count"),
            "missing": ("finished trials whose value is unknown", "count"),
            "mean": ("mean over the finished trials", "as the metric"),
            "median": ("median over the finished trials", "as the metric"),
        },
    ),
    _table(
        "analysis/headline.csv",
        "analyze (`kit.analysis.metrics.headline`)",
        "The headline: total tokens per arm and its ratio to the baseline.",
        "totals",
        [
            "arm",
            "n",
            "failed",
            "total_tokens_mean",
            "total_tokens_lower",
            "total_tokens_upper",
            "ratio",
            "ratio_lower",
            "ratio_upper",
            "label",
            "simulated",
        ],
        {
            "n": ("finished trials with a total", "count"),
            "failed": ("failed trials of the arm", "count"),
            "total_tokens_mean": ("mean total tokens per trial", "tokens"),
            "total_tokens_lower": ("lower bound of its bootstrap interval", "tokens"),
            "total_tokens_upper": ("upper bound of its bootstrap interval", "tokens"),
            "ratio": ("mean total tokens of the arm / of the baseline (empty on the baseline's row)", "ratio"),
            "ratio_lower": ("lower bound of the ratio's interval", "ratio"),
            "ratio_upper": ("upper bound of the ratio's interval", "ratio"),
            "simulated": ("the arm's trials ran on the embedded provider", "boolean"),
        },
    ),
    _table(
        "analysis/warmth.csv",
        "analyze (`kit.analysis.cachemodel.warmth_sweep`)",
        "The uncached ratio as a function of cache warmth: the batch replayed through the cache engine.",
        "warmth",
        [
            "survival",
            "arm_a",
            "arm_b",
            "n_a",
            "n_b",
            "hit_rate_a",
            "hit_rate_b",
            "mean_uncached_a",
            "mean_uncached_b",
            "ratio",
            "ratio_lower",
            "ratio_upper",
            "total_ratio",
        ],
        {
            "survival": ("chance a cache entry outlives an interval: 0 is cold, 1 an ideal cache", "fraction 0–1"),
            "arm_a": ("the arm", "id"),
            "arm_b": ("the baseline", "id"),
            "n_a": ("trials of arm a", "count"),
            "n_b": ("trials of arm b", "count"),
            "hit_rate_a": ("replayed hit rate of arm a", "fraction 0–1"),
            "hit_rate_b": ("replayed hit rate of arm b", "fraction 0–1"),
            "mean_uncached_a": ("mean replayed uncached input per trial of arm a", "tokens"),
            "mean_uncached_b": ("mean replayed uncached input per trial of arm b", "tokens"),
            "ratio": ("mean uncached a / b at this warmth", "ratio"),
            "ratio_lower": ("lower bound of the percentile bootstrap band", "ratio"),
            "ratio_upper": ("upper bound of the percentile bootstrap band", "ratio"),
            "total_ratio": ("mean input a / b; `ratio` equals it at survival 0", "ratio"),
        },
    ),
    _table(
        "analysis/observed.csv",
        "analyze (`kit.stages.analyze.observed`)",
        "Each batch's observed point: both arms' hit rates and the uncached and total ratios.",
        "warmth",
        ["batch", "arm_a", "arm_b", "hit_rate_a", "hit_rate_b", "uncached_ratio", "total_ratio"],
        {
            "arm_a": ("the arm", "id"),
            "arm_b": ("the baseline", "id"),
            "hit_rate_a": ("observed hit rate of arm a", "fraction 0–1"),
            "hit_rate_b": ("observed hit rate of arm b", "fraction 0–1"),
            "uncached_ratio": ("mean uncached input a / b", "ratio"),
            "total_ratio": ("mean total tokens a / b", "ratio"),
        },
    ),
    _table(
        "analysis/occupancy.csv",
        "analyze (`kit.analysis.occupancy.arm_means`)",
        "Residual context occupancy per arm and category, averaged over trials.",
        "occupancy",
        occupancy.SUMMARY_COLUMNS,
        {
            "category": ("occupancy category: " + ", ".join(f"`{c}`" for c in occupancy.CATEGORIES), "text"),
            "trials": ("trials averaged", "count"),
            "tokens": ("mean resident tokens at the end of the session", "tokens"),
            "share_of_context": ("mean share of the final context", "fraction 0–1"),
            "share_of_window": ("mean share of the nominal window", "fraction 0–1"),
            "err": ("mean attribution error of the trials", "tokens"),
        },
    ),
    _table(
        "analysis/occupancy_trials.csv",
        "analyze (`kit.analysis.occupancy.measure`)",
        "Residual context occupancy per trial and category, with the calibration behind it.",
        "occupancy",
        occupancy.COLUMNS,
        {
            "category": ("occupancy category: " + ", ".join(f"`{c}`" for c in occupancy.CATEGORIES), "text"),
            "results": ("tool results of the category", "count"),
            "contributed_tokens": ("tokens the category's results added, resident or not", "tokens"),
            "chars_per_token": ("the trial's calibrated ratio (docs/method.md#calibration)", "characters per token"),
            "priced_by": (
                "what each result is priced by: `o200k` (its block's `o200k_base` tokens, the trial's characters "
                "shared out by them, where the responses' framing is known too) or `chars` (its block's "
                "characters); empty without results "
                "(docs/method.md#calibration)",
                "text",
            ),
            "calibration": (
                "how the ratio was found: `measured` (its own >= 80% tool-result gaps), `arm` (its arm's measured "
                "trials), `default` (3 chars/token), `none` (no tool result), `usage unknown`",
                "text",
            ),
            "calibration_note": ("why the ratio is borrowed, assumed or out of the 2–4 range; empty if not", "text"),
            "rel_err": (
                "median relative error of >= 80% one-result calibration gaps, each priced at the other such gaps' "
                "ratio (leave one out)",
                "fraction",
            ),
            "requests": ("requests of the trial (the block's turns)", "count"),
            "compactions": ("compaction events seen (docs/method.md#compaction)", "count"),
            "evicted_tokens": ("tokens that left the window (micro-compaction, compactions, fresh sessions)", "tokens"),
            "sessions": ("sessions the trial's window started over in (a fresh session clears it)", "count"),
            "output_measure": (
                "how the responses' own output was known: `o200k` (their blocks' `o200k_base` count), `chars`, "
                "`tokens` or `mixed`",
                "text",
            ),
        },
    ),
    _table(
        "analysis/occupancy_comparison.csv",
        "analyze (`kit.analysis.occupancy_block.comparisons`)",
        "Each arm's explore residual against the baseline's file-access residual, and the fixed overhead.",
        "occupancy",
        occupancy_block.COMPARISON_COLUMNS,
        {
            "with_arm": ("the arm that left explore output resident", "id"),
            "without_arm": ("the baseline", "id"),
            "with_category": ("the with-arm's category compared", "text"),
            "without_category": ("the baseline's category compared", "text"),
            "with_tokens": ("mean resident tokens of `with_category` in the with-arm", "tokens"),
            "without_tokens": ("mean resident tokens of `without_category` in the baseline", "tokens"),
            "ratio": ("with_tokens / without_tokens (`kit.stats.ratio`)", "ratio"),
            "ci_low": ("lower bound of the interval", "ratio"),
            "ci_high": ("upper bound of the interval", "ratio"),
            "confidence": ("interval level", "fraction 0–1"),
            "n_with": ("trials of the with-arm", "count"),
            "n_without": ("trials of the baseline", "count"),
            "fixed_overhead_tokens": ("median fixed base of the with-arm minus the baseline's", "tokens"),
            "note": ("why there is no ratio or interval, if so", "text"),
        },
    ),
    _table(
        "analysis/warmth_invariance.csv",
        "analyze (`kit.stats.warmth_invariance`)",
        "Whether each uncached ratio moves with the batches' hit rates, and whether a cache claim holds.",
        "replication",
        [c for c in _WARMTH if c not in ("metric", "per_batch")],
        _WARMTH,
    ),
    _table(
        "analysis/quality.csv",
        "analyze (`kit.stages.analyze.quality`, `kit.stats.quality_gate`)",
        "Each treatment's grade against its baseline's: the non-inferiority gate the headline states.",
        "grading",
        list(_QUALITY),
        _QUALITY,
    ),
    _table(
        "analysis/savings.csv",
        "analyze (`kit.stages.analyze.savings`, `kit.stats.per_prompt_savings`)",
        "Per-prompt savings of each arm over the baseline, summarised across prompts.",
        "savings",
        ["arm", "baseline", "metric", *(c for c in _SAVINGS if c != "arm")],
        {**_SAVINGS, "metric": ("`output_tokens` or `total_tokens`", "column name")},
    ),
)

# ``python -m kit history`` (kit/stages/history.py): paths relative to a history folder, not a batch folder.
_VIEW_SUMS = history.VIEW_COLUMNS
_HISTORY_COMMON = {
    "agent": ("`main`, or `subagent` for subagent and compaction requests (their own window), shown apart", "text"),
    "requests": ("model responses", "count"),
    "cache_write_5m_tokens": ("cache writes with the 5-minute lifetime (writes less the 1-hour ones)", "tokens"),
    "cost_usd": ("price at the dated API rate card; empty when any row of the sum is unpriced (listed)", "USD"),
    "credits": ("price at the Codex credit card; empty when any row of the sum has no credit rate", "credits"),
    "session": ("the session: a Claude Code session file and its subagents, or a Codex rollout", "id"),
    "project": ("Claude Code's project folder name, or the Codex session's working folder", "text"),
    "started_at": ("first response of the session (UTC)", "ISO 8601"),
}


def _history(path: str, writer: str, purpose: str, method: str, names: Sequence[str], own: dict | None = None) -> Table:
    return _table(f"history/{path}", writer, purpose, method, names, {**_HISTORY_COMMON, **(own or {})})


_VIEWS = {
    "day": ("day", "UTC day of the response (`unknown` where the transcript gives no time)", "YYYY-MM-DD"),
    "session": ("session", None, None),
    "project": ("project", None, None),
    "model": ("model", "model the response names", "id"),
}
_OCCUPANCY = next(t for t in TABLES if t.path == "analysis/occupancy_trials.csv")
TABLES += (
    *tuple(
        _history(
            f"analysis/usage_by_{view}.csv",
            "history (`kit.stages.history.usage`)",
            f"Usage by {view}, main and subagent rows apart (ccusage's `{view}` view, with cost and hit rate).",
            "totals",
            [key, *(["project", "started_at"] if view == "session" else []), "agent", *_VIEW_SUMS],
            {key: (meaning, unit)} if meaning else None,
        )
        for view, (key, meaning, unit) in _VIEWS.items()
    ),
    _history(
        "analysis/sessions.csv",
        "history (`kit.stages.history.sessions`)",
        "Per session: cycles, prompt growth, compactions and context drops, sums (subagents included) and cost.",
        "compaction",
        [
            "session",
            "project",
            "started_at",
            "ended_at",
            "cycles",
            "turns",
            "first_context",
            "last_context",
            "max_context",
            "context_drops",
            "growth_per_cycle",
            "compactions",
            "subagent_requests",
            *_VIEW_SUMS[1:],
        ],
        {
            "ended_at": ("last main-window response (UTC)", "ISO 8601"),
            "cycles": ("main-window responses", "count"),
            "turns": ("user prompts", "count"),
            "first_context": ("prompt size of the first main-window request", "tokens"),
            "last_context": ("prompt size of the last main-window request", "tokens"),
            "max_context": ("largest prompt of the session", "tokens"),
            "context_drops": (
                "requests whose prompt is smaller than the one before (compaction, a cleared context)",
                "count",
            ),
            "growth_per_cycle": ("(last − first context) / (cycles − 1)", "tokens per cycle"),
            "compactions": ("compaction events the transcript records (docs/method.md#compaction)", "count"),
            "subagent_requests": ("responses of the session's subagents and compaction requests", "count"),
        },
    ),
    Table(
        "history/analysis/occupancy_sessions.csv",
        "history (`kit.analysis.occupancy.measure`, trial = session)",
        "Residual context occupancy per session, the batch analysis's table.",
        "occupancy",
        _OCCUPANCY.columns,
    ),
    _history(
        "analysis/structural_sessions.csv",
        "history (`kit.stages.history.structural`, `kit.analysis.cachemodel`)",
        "Per session, observed cache reads against prompts rebuilt under the prefix-extension rule and replayed.",
        "structural-cache",
        [
            "session",
            "requests",
            "rule_breaks",
            "input_tokens",
            "observed_cached",
            "structural_cached",
            "replay_cached",
            "observed_share",
            "structural_share",
            "observed_over_structural",
        ],
        {
            "requests": ("main-window requests with known usage", "count"),
            "rule_breaks": (
                "requests where the prefix-extension rule breaks (a smaller prompt, a compaction)",
                "count",
            ),
            "observed_cached": ("cache reads the provider reported", "tokens"),
            "structural_cached": ("cache reads of the ideal never-evicting cache on the rebuilt prompts", "tokens"),
            "replay_cached": (
                "cache reads of a replay through the provider's profile at full warmth (TTL, minimums)",
                "tokens",
            ),
            "observed_share": ("observed_cached / input_tokens", "fraction 0–1"),
            "structural_share": ("structural_cached / input_tokens", "fraction 0–1"),
            "observed_over_structural": ("above 1: reads the session's own history cannot explain", "ratio"),
        },
    ),
    _history(
        "analysis/warmth.csv",
        "history (`kit.stages.history.warmth`)",
        "The warmth curve of the user's sessions: the previous prompt's share read from cache, by idle gap.",
        "warmth",
        ["gap", "requests", "reusable_tokens", "cached_tokens", "share_cached"],
        {
            "gap": ("idle time since the session's previous request", "interval"),
            "requests": ("requests after such a gap (rule breaks left out)", "count"),
            "reusable_tokens": ("the smaller of the previous and the current prompt, summed", "tokens"),
            "cached_tokens": ("cache reads, at most the reusable part, summed", "tokens"),
            "share_cached": ("cached_tokens / reusable_tokens", "fraction 0–1"),
        },
    ),
    _history(
        "analysis/unpriced_models.csv",
        "history (`kit.stages.history.load`)",
        "Models with known usage but no rate on a card: their cost is empty, never zero.",
        "totals",
        ["card", "model", "requests", "tokens"],
        {"card": ("`usd` or `credits`", "text"), "tokens": ("total tokens of those requests", "tokens")},
    ),
    _history(
        "analysis/twins.csv",
        "history (`kit.transcripts.twins`)",
        "Files holding the same run as an earlier file (a stream-json capture beside its session file): both are "
        "counted in every view, so read one.",
        "transcripts",
        ["path", "format", "same_as", "same_as_format", "responses"],
        {
            "path": ("the later file", "path"),
            "format": ("its reader's format", "text"),
            "same_as": ("the earlier file with the same input and cache counts, response by response", "path"),
            "same_as_format": ("that file's format", "text"),
            "responses": ("responses alike (at least 2)", "count"),
        },
    ),
    _history(
        "analysis/compare.csv",
        "history (`kit.stages.history.compare`)",
        "A before/after comparison of two groups of sessions: per-session means with intervals (a cross-run stitch).",
        "stitch",
        ["group", "metric", "sessions", "mean", "lower", "upper"],
        {
            "group": ("the group's name", "text"),
            "metric": ("`total_tokens`, `uncached_input_tokens` or `cost_usd`, per session", "column name"),
            "sessions": ("sessions of the group with the metric known (an unpriced session has no cost)", "count"),
            "mean": ("mean per session", "as the metric"),
            "lower": ("lower bound of the 95% percentile bootstrap interval of the mean", "as the metric"),
            "upper": ("upper bound of that interval", "as the metric"),
        },
    ),
    _history(
        "analysis/compare_ratios.csv",
        "history (`kit.stages.history.compare`)",
        "The ratio of the groups' means (second / first), for reference only, with its interval and stitch label.",
        "stitch",
        ["metric", "ratio", "lower", "upper", "label"],
        {
            "metric": ("the per-session column compared", "column name"),
            "ratio": ("mean of the second group / mean of the first", "ratio"),
            "lower": ("lower bound of the 95% percentile bootstrap interval", "ratio"),
            "upper": ("upper bound", "ratio"),
            "label": ("always `cross-run stitch` (docs/method.md#stitch)", "text"),
        },
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _record_file(path: str, writer: str, purpose: str, method: str, record: type) -> Table:
    """A JSON file the stages write as one record: its fields are its "columns", described on the record."""
    return Table(path, writer, purpose, method, tuple(Column(n, m, u) for n, (m, u) in records.docs(record).items()))


RECORD_FILES: tuple[Table, ...] = (
    _record_file(
        "manifest.json", "run (`kit.stages.run`)", "The batch as planned and as it went: one record "
        "(`kit.records.Manifest`).", "interleaving", records.Manifest,
    ),
    _record_file(
        "raw/<trial_id>/meta.json", "run (`kit.stages.run`)", "One finished trial, written last: one record "
        "(`kit.records.TrialMeta`).", "isolation", records.TrialMeta,
    ),
    _record_file(
        "analysis/design.json", "analyze (`kit.stages.analyze`)", "The design facts every figure and the report "
        "state, with the analysis warnings: one record (`kit.records.Design`).", "totals", records.Design,
    ),
)  # fmt: skip


def render() -> str:
    """``docs/tables.md``: every table, its writer and purpose, and one line per column."""
    lines = [
        "# Tables: every column the stages write",
        "",
        "<!-- Generated by `python -m kit.cli.columns > docs/tables.md` from kit/cli/columns.py; "
        "do not edit by hand. -->",
        "",
        "Paths are relative to a batch folder `outputs/<batch>/`. Token columns are nullable: a missing",
        "value means the source did not report it, never zero. The method behind each table is in",
        "[method.md](method.md); the shape of the code in [design.md](design.md). After the tables, the fields of",
        "the JSON records the stages write (`kit.records`), from the same descriptions the code carries.",
        "",
        *(f"- [`{t.path}`](#{_slug(t.path)})" for t in (*TABLES, *RECORD_FILES)),
    ]
    for t in (*TABLES, *RECORD_FILES):
        lines += [
            "",
            f"## {t.path}",
            "",
            f"{t.purpose} Written by {t.writer}; method: [method.md#{t.method}](method.md#{t.method}).",
            "",
            "| column | meaning | unit |" if t in TABLES else "| field | meaning | unit |",
            "|---|---|---|",
            *(f"| `{c.name}` | {_cell(c.meaning)} | {_cell(c.unit)} |" for c in t.columns),
        ]
    return "\n".join(lines) + "\n"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than ``-`` and ``_`` dropped."""
    return "".join(ch for ch in heading.lower().replace(" ", "-") if ch.isalnum() or ch in "-_")


if __name__ == "__main__":
    print(render(), end="")
