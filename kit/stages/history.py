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

This module is the stage the notebook calls: ``analyze`` and ``run`` put together the parts of
``kit.history`` (``load``, ``views``, ``structural``, ``compare``, ``report``), whose names it re-exports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.analysis import occupancy as occ
from kit.errors import InputError
from kit.history.compare import compare
from kit.history.load import default_paths, load
from kit.history.report import write
from kit.history.result import (
    COMPARE_METRICS,
    CONFIDENCE,
    COSTS,
    GAP_BINS,
    GAP_LABELS,
    PROFILES,
    SEED,
    SUMS,
    VIEW_COLUMNS,
    VIEWS,
    Comparison,
    History,
    Result,
)
from kit.history.structural import occupancy_blocks, rebuilt, session_occupancy, structural, warmth
from kit.history.views import sessions, totals, usage, views
from kit.transcripts import cache as parse_cache

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
        occupancy_blocks(occupancy_rows, window_tokens, biggest), prompts, structural_table, warmth(prompts),
        compare(history, compare_spec, session_table) if compare_spec else None, parameters,
    )  # fmt: skip


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
