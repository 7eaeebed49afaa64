"""The history's written folder: its tables, figures and report (a user's own sessions, not a simulation).

``write`` lays the folder out as a batch's, and the report reuses the batch report's table and HTML helpers
(``kit.report.batch``) and the figures' writer (``kit.charts.save``), so a history folder reads like a batch
folder: ``report.md``/``report.html``, ``figures/*.png|svg``, ``analysis/*.csv``, ``tables/``. Every section
cites the method it applies.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kit import charts, schema
from kit.experiment.layout import BatchDir
from kit.files import write_table, write_text
from kit.history import result as records
from kit.history.result import Result
from kit.report.batch import html_page, interval, md_table
from kit.transcripts import codex_exec
from kit.transcripts.twins import Twin

METHOD = "docs/method.md"
TWINS_LISTED = 10  # files holding another's run named in the report; all of them are in analysis/twins.csv
BANNER = (
    "REAL SESSIONS: this report reads your own transcripts as Claude Code and Codex wrote them "
    "(not a simulation, not the embedded provider)."
)
TOKEN_PARTS = {
    "cache_read_tokens": "cache read",
    "cache_write_tokens": "cache write",
    "uncached_fresh": "uncached, not written",
    "output_tokens": "output",
}
VIEW_COLUMNS = [c for c in records.VIEW_COLUMNS if c != "cache_write_tokens"]  # the report shows the 5m/1h parts
TOP = 15  # rows of a view shown in the report (the CSV holds them all)


def _title(fig: Figure, title: str, note: str) -> Figure:
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8, color="#444444")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def daily_usage(day_view: pd.DataFrame) -> Figure:
    """Tokens per day by kind (main and subagent rows together), stacked."""
    fig = charts.figure((10, 4.5))
    ax = fig.subplots()
    days = day_view[day_view["day"] != "unknown"].groupby("day").sum(numeric_only=True).sort_index()
    if days.empty:
        charts.empty_axes(ax, "no dated responses")
        return _title(fig, "Tokens per day", "your own sessions")
    parts = days.assign(uncached_fresh=days["uncached_input_tokens"] - days["cache_write_tokens"].fillna(0))
    bottom = np.zeros(len(parts))
    for (column, label), color in zip(TOKEN_PARTS.items(), charts.CATEGORY_PALETTE, strict=False):
        values = parts[column].astype(float).fillna(0).clip(lower=0).to_numpy()
        ax.bar(parts.index, values, bottom=bottom, label=label, color=color)
        bottom += values
    ax.set_ylabel("tokens")
    charts.thousands(ax)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    return _title(fig, "Tokens per day", "your own sessions (UTC days); cache write is part of the uncached input")


def warmth_curve(warmth: pd.DataFrame) -> Figure:
    """Share of the reusable prefix read from cache by the idle gap before a request (docs/method.md#warmth)."""
    fig = charts.figure((8, 4.2))
    ax = fig.subplots()
    if warmth["requests"].sum() == 0:
        charts.empty_axes(ax, "no consecutive requests with times")
    else:
        ax.plot(warmth["gap"], warmth["share_cached"], marker="o", color=charts.REFERENCE_COLOR)
        for x, (share, n) in enumerate(zip(warmth["share_cached"], warmth["requests"], strict=True)):
            if pd.notna(share):
                ax.annotate(f"n={n}", (x, share), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of the previous prompt read from cache")
        ax.set_xlabel("idle gap before the request")
    note = "your own sessions; rule breaks (compaction, context drop) left out — docs/method.md#warmth"
    return _title(fig, "Warmth curve of your sessions", note)


def _structural_scatter(structural: pd.DataFrame) -> Figure:
    """Per session, observed cache share against the structural (ideal, prefix-extension) share."""
    fig = charts.figure((6, 5.5))
    ax = fig.subplots()
    if structural.empty:
        charts.empty_axes(ax, "no sessions")
    else:
        ax.scatter(structural["structural_share"], structural["observed_share"], s=18, alpha=0.7)
        ax.plot([0, 1], [0, 1], color=charts.REFERENCE_COLOR, lw=0.8, ls="--")
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("structural cache share (modelled, ideal)")
        ax.set_ylabel("observed cache-read share")
    note = "one dot per session; above the line: reads the session's own history cannot explain"
    return _title(fig, "Structural cache vs observed", note)


def _compare_intervals(table: pd.DataFrame, label: str) -> Figure:
    """Mean per session of each group with its interval, per metric: the comparison's figure (no ratio)."""
    metrics = list(dict.fromkeys(table["metric"]))
    fig = charts.figure((4 * len(metrics), 3.6))
    axes = fig.subplots(1, len(metrics), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        rows = table[table["metric"] == metric].reset_index(drop=True)
        for y, row in rows.iterrows():
            color = charts.ARM_PALETTE[y % len(charts.ARM_PALETTE)]
            ax.plot([row["mean"]], [y], "o", color=color)
            if pd.notna(row["lower"]):
                ax.plot([row["lower"], row["upper"]], [y, y], color=color)
        ax.set_yticks(range(len(rows)), [f"{g} (n={n})" for g, n in zip(rows["group"], rows["sessions"], strict=True)])
        ax.set_title(f"{metric} per session", fontsize=9)
        charts.thousands(ax, "x")
        ax.set_ylim(-0.7, len(rows) - 0.3)
    return _title(fig, f"Before/after — {label.upper()}", "means per session with 95% bootstrap intervals")


def figures(result: Result, folder: Path) -> dict[str, Path]:
    """Every figure as PNG and SVG under ``folder``; the PNG paths by name."""
    made = {
        "daily_usage": daily_usage(result.views["day"]) if "day" in result.views else None,
        "warmth_curve": warmth_curve(result.warmth),
        "structural_vs_observed": _structural_scatter(result.structural),
    }
    if result.comparison is not None:
        made["compare"] = _compare_intervals(result.comparison.table, result.comparison.label)
    written = {}
    for name, fig in made.items():
        if fig is not None:
            written[f"figure_{name}"] = charts.save(fig, folder, name)[0]
    return written


# --- report -----------------------------------------------------------------------------------------------


def _tokens(n: object) -> str:
    """A token count with thousands separators; NA where it is missing."""
    return f"{int(n):,}" if isinstance(n, int | float | np.number) and not pd.isna(n) else "NA"


def _view_section(by: str, view: pd.DataFrame) -> list[str]:
    lines = [f"### By {by}", ""]
    for agent, part in view.groupby("agent", sort=True):
        keys = ["session", "project", "started_at"] if by == "session" else [by]
        shown = part[[*keys, *VIEW_COLUMNS]].head(TOP)
        more = f" (first {TOP} of {len(part)}; all in `analysis/usage_by_{by}.csv`)" if len(part) > TOP else ""
        lines += [f"{agent} rows{more}:", "", md_table(shown), ""]
    return lines


def _intro(result: Result) -> list[str]:
    h, t = result.history, result.totals
    p = result.parameters
    span = f"{p['since'] or 'the start'} to {p['until'] or 'the end'}"
    return [
        "# Your own history",
        "",
        BANNER,
        "",
        f"Read: {', '.join(f'`{x}`' for x in p['paths'])}; sessions from {span} (UTC). "
        f"{t['files']:,} files, {t['sessions']:,} sessions, {t['requests']:,} responses; "
        f"{len(h.repeats):,} responses repeated in another file counted once ({METHOD}#transcripts); "
        f"{len(h.issues):,} parse issues (`tables/parse_issues.csv`).",
        "",
        *twin_lines(h.twins),
        *turn_lines(h.requests),
        "## Totals",
        "",
        "The same sums as the parse stage (`python -m kit parse`) on these files "
        f"({METHOD}#totals: input holds cache reads and writes; total = input + output).",
        "",
        md_table(pd.DataFrame([{k: _tokens(v) for k, v in t.items()}])),
        "",
    ]


def twin_lines(found: list[Twin]) -> list[str]:
    """A warning per file that holds the same run as another (``kit.transcripts.twins``): both are counted, so
    the report names them before any total."""
    if not found:
        return []
    lines = [
        f"**{len(found)} file(s) hold the same run as another file** (the same input and cache counts, response by "
        f"response) and are counted twice in every view: read one of each pair ({METHOD}#transcripts).",
        "",
    ]
    lines += [
        f"- `{t.path}` ({t.format}) = `{t.same_as}` ({t.same_as_format}), {t.responses} responses"
        for t in found[:TWINS_LISTED]
    ]
    if len(found) > TWINS_LISTED:
        lines.append(f"- … {len(found) - TWINS_LISTED:,} more in `analysis/twins.csv`")
    return [*lines, ""]


def turn_lines(req: pd.DataFrame) -> list[str]:
    """A note on the rows that are whole turns, not responses (``codex_exec.turn_rows``: ``codex exec --json``
    stdout has no per-request usage): counted in the totals and views, left out of what needs one row per
    response, so the report says which sessions those are before any total."""
    turns = req[codex_exec.turn_rows(req)]
    if turns.empty:
        return []
    per = turns.groupby("trial_id", sort=True)["total_tokens"].agg(["size", lambda s: s.sum(min_count=1)])
    lines = [
        f"**{len(turns):,} of the {len(req):,} rows are whole turns of `codex exec --json` stdout**, not responses "
        "(the stream has no per-request usage; a turn's input sums its requests' prompts): they are in the totals "
        "and views, and left out of the cycles, context growth, occupancy and structural cache, which need one row "
        f"per response ({METHOD}#transcripts).",
        "",
    ]
    lines += [f"- `{s}`: {int(n):,} turns, {_tokens(tokens)} tokens" for s, (n, tokens) in per.iterrows()]
    return [*lines, ""]


def _cost_lines(result: Result) -> list[str]:
    unpriced = result.history.unpriced
    lines = [
        "Cost from the dated rate cards (`kit/data/rates/*.yaml`; USD for every provider, Codex credits for OpenAI "
        "models used through Codex). A model without a rate has cost NA, never zero, and so has any sum that "
        "includes it:",
        "",
    ]
    if unpriced.empty:
        return [*lines, "every model is priced on both cards.", ""]
    return [*lines, md_table(unpriced), ""]


def _sessions_section(result: Result) -> list[str]:
    table = result.sessions.sort_values("total_tokens", ascending=False)
    columns = ["session", "project", "started_at", "cycles", "turns", "first_context", "last_context"]
    columns += ["growth_per_cycle", "compactions", "context_drops", "subagent_requests", "total_tokens", "cost_usd"]
    lines = [
        "## Per session",
        "",
        f"Cycles (main-window responses), prompt growth per cycle, compactions and context drops "
        f"({METHOD}#compaction); subagent requests are counted apart. The {min(TOP, len(table))} largest of "
        f"{len(table)} (all in `analysis/sessions.csv`):",
        "",
        md_table(table[columns].head(TOP)),
        "",
        "### Residual context occupancy",
        "",
        f"The batch analysis's occupancy ({METHOD}#occupancy, calibration {METHOD}#calibration) per session, "
        "every session in `analysis/occupancy_sessions.csv`; the largest sessions' blocks:",
        "",
    ]
    for session, block in result.blocks.items():
        lines += [f"`{session}`", "", "```", block, "```", ""]
    return lines


def _structural_section(result: Result) -> list[str]:
    s = result.structural
    lines = [
        "## Structural cache on your transcripts",
        "",
        f"Transcripts hold no prompt hashes, so each session's prompts are rebuilt under the prefix-extension rule "
        f"({METHOD}#structural-cache): request k's prompt is request k−1's plus what was appended, its size from "
        "the usage. Where a prompt shrinks or a compaction came in between the rule breaks; the request starts a "
        "new lineage and is flagged. The structural cache (ideal, never evicts) and a replay through the provider's "
        f"profile at full warmth (TTL and minimums, {METHOD}#warmth) are set against the observed cache reads.",
        "",
    ]
    if s.empty:
        return [*lines, "No main-window requests with usage.", ""]
    sums = s[["requests", "rule_breaks", "input_tokens", "observed_cached", "structural_cached", "replay_cached"]]
    sums = sums.sum(numeric_only=True, min_count=1)
    above = int((s["observed_over_structural"] > 1).sum())
    lines += [
        md_table(pd.DataFrame([{k: _tokens(v) for k, v in sums.items()}])),
        "",
        f"{above} of {len(s)} sessions read more from cache than their own history explains: a prefix (system "
        "prompt, tool schemas) cached by another session or an earlier run, which a per-session model cannot see. "
        "Per session in `analysis/structural_sessions.csv`; figure `figures/structural_vs_observed.png`.",
        "",
        "### Warmth curve",
        "",
        "Of the prompt the previous request left, the share read from cache, by the idle gap before the request "
        f"({METHOD}#warmth; Anthropic's default TTL is 5 minutes):",
        "",
        md_table(result.warmth),
        "",
    ]
    return lines


def _compare_section(result: Result) -> list[str]:
    c = result.comparison
    if c is None:
        return []
    table = c.table.assign(
        interval=[interval(lo, hi) for lo, hi in zip(c.table["lower"], c.table["upper"], strict=True)]
    )
    ratios = c.ratios.assign(
        interval=[interval(lo, hi) for lo, hi in zip(c.ratios["lower"], c.ratios["upper"], strict=True)]
    )
    groups = "; ".join(f"{name}: {what}" for name, what in c.groups.items())
    return [
        f"## Before/after by {c.by} — {c.label.upper()}",
        "",
        f"**This comparison is a {c.label}** ({METHOD}#stitch): the two groups are different sessions, not "
        f"paired runs of one task, so a difference may come from any of the confounds below. Groups: {groups}.",
        "",
        "Confounds:",
        "",
        *[f"- {line}" for line in c.confounds],
        "",
        f"Per-session means with 95% bootstrap intervals ({METHOD}#intervals):",
        "",
        md_table(table[["group", "metric", "sessions", "mean", "interval"]]),
        "",
        f"The ratio of means (second group / first), for reference only, with its interval and label ({c.label}):",
        "",
        md_table(ratios[["metric", "ratio", "interval", "label"]]),
        "",
    ]


def markdown(result: Result, figures_written: dict[str, Path], folder: Path) -> str:
    """The report's text."""
    lines = _intro(result)
    lines += ["## Usage views", "", *_cost_lines(result)]
    for by, view in result.views.items():
        lines += _view_section(by, view)
    lines += _sessions_section(result)
    lines += _structural_section(result)
    lines += _compare_section(result)
    lines += ["## Figures", ""]
    for name, path in figures_written.items():
        if name.startswith("figure_"):
            lines += [f"![{name[7:]}]({path.relative_to(folder).as_posix()})", ""]
    lines += [
        "## Method",
        "",
        f"Readers and deduplication: {METHOD}#transcripts; totals: {METHOD}#totals; occupancy: {METHOD}#occupancy; "
        f"structural cache: {METHOD}#structural-cache; warmth: {METHOD}#warmth; comparisons across runs: "
        f"{METHOD}#stitch. Days are UTC.",
        "",
    ]
    return "\n".join(lines)


def report(result: Result, folder: Path, written: dict[str, Path]) -> dict[str, Path]:
    """``report.md`` and ``report.html`` in ``folder``."""
    text = markdown(result, written, folder)
    return {
        "report_md": write_text(BatchDir(folder).report_md, text),
        "report_html": write_text(BatchDir(folder).report_html, html_page(text, "Your own history")),
    }


def write(result: Result, folder: str | Path) -> dict[str, Path]:
    """Tables under ``tables/``, views and analyses as CSV under ``analysis/``, figures, report.md and .html."""
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
    written |= figures(result, bd.figures)
    written |= report(result, folder, written)
    return written
