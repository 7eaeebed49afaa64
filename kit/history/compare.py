"""A before/after comparison of two periods, projects or models of a history (docs/method.md#stitch).

Labelled a cross-run stitch with its confounds: the groups are different sessions, not paired runs of one
task, so it gives per-session means with intervals and a ratio of means for reference, never a bare ratio.

The intervals are the history's own percentile bootstrap (5,000 resamples, seeded), not ``kit.stats``'s
``mean_interval``: that one gives no interval below ``kit.stats.MIN_RUNS`` (5) values, where a history's
groups are often 2–4 sessions, and draws its resamples from another generator, so every interval the
report prints would change.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from kit.errors import InputError
from kit.history.load import utc_day
from kit.history.result import COMPARE_METRICS, CONFIDENCE, SEED, Comparison, History
from kit.history.views import sessions
from kit.stats import STITCH_LABEL


def _group_sessions(table: pd.DataFrame, by: str, value: Any) -> pd.Series:
    """Which sessions a compare group selects: a period ``[since, until]``, or project/model name(s)."""
    if by == "period":
        since, until = [*value, None, None][:2]
        day = utc_day(table["started_at"])
        inside = pd.Series(True, index=table.index)
        if since:
            inside &= day >= str(since)
        if until:
            inside &= day <= str(until)
        return inside.fillna(False).astype(bool)
    values = [value] if isinstance(value, str) else list(value)
    return table[by].isin(values)


def _mean_interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean of the finite values with a 95% percentile bootstrap interval; NaN bounds below two values or with
    no spread."""
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
    """mean(b) / mean(a) with a 95% percentile bootstrap interval (the groups resampled apart); NaN where a group
    has under two values or a zero mean."""
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
