"""The history's records and constants: what a read holds, what a comparison holds, what the report shows.

The lowest module of ``kit.history``: the reading (``load``), the views, the structural cache, the comparison
and the report all take these records, so none of them imports another for a type or a column list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kit.transcripts.twins import Twin

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


@dataclass
class Comparison:
    """Two groups of sessions compared as a cross-run stitch (docs/method.md#stitch)."""

    label: str
    by: str
    groups: dict[str, str]  # name -> what selects it
    table: pd.DataFrame  # per group and metric: n, mean with interval
    ratios: pd.DataFrame  # per metric: b / a with interval (never the headline)
    confounds: list[str]


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
