"""The occupancy block as codegraph's write-up prints it (docs/method.md#occupancy), and what it is compared by.

``python -m kit occupancy PATH…`` (``kit.cli.occupancy``) prints it for session files a user already has (each
file one session; a folder or a quoted glob lists several), and the analyze notebook and the report print it per
arm of a batch. One layout everywhere, so a number read in a report can be found again in a terminal::

    Residual context occupancy at end of run:
      final context       54,950 tok   27.5% of 200k window
      explore             13,941 tok   25.4% of ctx    7.0% of 200k win   (31,312 chars, 2 results)
      …
      measure: 2.25 chars/tok measured ±0.9% · turns 6 · compactions 0 · priced by o200k

Every figure is a value of ``analysis/occupancy_trials.csv`` (a batch's arm: the mean over its trials),
so the block never computes anything the tables do not hold. The comparison the method makes (the
with-arm tool's residual against the without-arm's file access, as a ratio with an interval) and the
fixed-overhead line (with-arm fixed base minus without-arm fixed base, medians) are here too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kit import stats
from kit.analysis import occupancy as occ
from kit.files import read_csv_as_written

LABELS = {  # occupancy category -> the block's label
    occ.CONTEXT: "final context",
    "explore tool": "explore",
    "Read": "Read",
    "Grep/Glob": "Grep/Glob",
    "Bash/exec": "Bash",
    occ.FILE_ACCESS: "→ file-access",
    occ.OTHER: "other tools",
    occ.BASE: "base (prompt+prose)",
    occ.FIXED_BASE: "  of which fixed",
}
FAMILIES = ("explore tool", "Read", "Grep/Glob", "Bash/exec", occ.FILE_ACCESS, occ.OTHER)
FIXED_NOTE = "system + tool schemas + question, before any tool answered"
COMPARISON_COLUMNS = [
    "with_arm",
    "without_arm",
    "with_category",
    "without_category",
    "with_tokens",
    "without_tokens",
    "ratio",
    "ci_low",
    "ci_high",
    "confidence",
    "n_with",
    "n_without",
    "fixed_overhead_tokens",
    "note",
]


def _win(window: int) -> str:
    return f"{window // 1000}k" if window % 1000 == 0 else f"{window:,}"


def _line(label: str, tokens: float) -> str:
    return f"  {label:<18}{round(tokens):>8,} tok"


def _num(n: float) -> str:
    """A count, or an arm's mean of counts (one decimal when it is not whole)."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def _count(n: float, word: str) -> str:
    return f"{_num(n)} {word}" + ("" if n == 1 else "s")


def _measure(trials: pd.DataFrame) -> str:
    """``measure: X chars/tok <how> ±e% · turns N · compactions N · priced by P`` (means over the trials given;
    P: what results are priced by, ``o200k`` or ``chars``, docs/method.md#calibration)."""
    cpt, rel = trials["chars_per_token"].astype(float), trials["rel_err"].astype(float)
    hows = trials["calibration"].astype(str).value_counts()
    how = hows.index[0] if len(hows) == 1 else ", ".join(f"{k} {v}/{len(trials)}" for k, v in hows.items())
    ratio = f"{cpt.mean():.2f} chars/tok {how}" if cpt.notna().any() else f"no chars/tok ({how})"
    bar = f" ±{rel.mean():.1%}" if rel.notna().any() else " ±? (no error bar: < 2 calibration gaps)"
    bar = bar if cpt.notna().any() else ""
    turns = trials["requests"].astype(float).mean()
    compactions = trials["compactions"].astype(float).sum()
    priced = [p for p in trials["priced_by"].dropna().astype(str).unique() if p] if "priced_by" in trials else []
    by = f" · priced by {', '.join(sorted(priced))}" if len(priced) else ""
    return f"  measure: {ratio}{bar} · turns {_num(turns)} · compactions {compactions:.0f}{by}"


def block(rows: pd.DataFrame, window_tokens: int | None = None) -> str:
    """The block of one session, or of an arm's trials (then each figure is the mean over them).

    ``rows``: ``kit.analysis.occupancy.measure`` rows of one trial or of several (one arm). Calibration notes
    (a borrowed or default ratio, a ratio outside the range of dense source) follow as ``! …`` lines.
    ``window_tokens`` defaults to the one the rows were computed with (final context / its window share).
    """
    per = rows.assign(results=rows["results"].astype("Float64")).groupby("category", sort=False)
    mean = per[["tokens", "chars", "results", "share_of_context", "share_of_window"]].mean()
    ctx = mean.loc[occ.CONTEXT]
    win = _win(window_tokens or round(ctx["tokens"] / ctx["share_of_window"]))
    lines = [
        "Residual context occupancy at end of run:",
        f"{_line(LABELS[occ.CONTEXT], ctx['tokens'])} {ctx['share_of_window']:>7.1%} of {win} window",
    ]
    for category in FAMILIES:
        m = mean.loc[category]
        shares = f" {m['share_of_context']:>7.1%} of ctx {m['share_of_window']:>7.1%} of {win} win"
        detail = f"({round(m['chars']):,} chars, {_count(float(m['results']), 'result')})"
        lines.append(f"{_line(LABELS[category], m['tokens'])}{shares}   {detail}")
    base = mean.loc[occ.BASE]
    lines.append(
        f"{_line(LABELS[occ.BASE], base['tokens'])} {base['share_of_context']:>7.1%} of ctx "
        f"{base['share_of_window']:>7.1%} of {win} win"
    )
    lines.append(f"{_line(LABELS[occ.FIXED_BASE], mean.loc[occ.FIXED_BASE, 'tokens'])}  {FIXED_NOTE}")
    trials = rows[rows["category"] == occ.CONTEXT]
    lines.append(_measure(trials))
    notes = trials["calibration_note"].astype("string").fillna("")
    lines += [f"  ! {n}" for n in dict.fromkeys(notes[notes != ""])]
    return "\n".join(lines)


def arms(occupancy_trials: pd.DataFrame, window_tokens: int | None = None) -> dict[str, str]:
    """Each arm's block (means over its trials with known usage), by arm name."""
    known = occupancy_trials[occupancy_trials["calibration"] != "usage unknown"]
    return {
        str(arm): block(rows, window_tokens)
        for arm, rows in known.groupby(known["arm"].astype(str), sort=True)
        if (rows["category"] == occ.CONTEXT).any()
    }


def _per_trial(occupancy_trials: pd.DataFrame, category: str) -> pd.Series:
    rows = occupancy_trials[occupancy_trials["category"] == category]
    return rows.set_index(["batch", "arm", "run"])["tokens"]


def _comparison_row(
    occupancy_trials: pd.DataFrame,
    with_arm: str,
    without_arm: str,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """One row of ``occupancy_comparison.csv``: the with-arm's explore residual over the without-arm's
    file-access residual, with its interval.

    The two ways an agent gets the same bytes into its head (docs/method.md#occupancy). The interval is
    ``kit.stats.ratio``'s on per-trial values (paired by run where the runs match), and the fixed overhead
    is the with-arm's median fixed base minus the without-arm's: paid whether or not the tool is called.
    """
    known = occupancy_trials[occupancy_trials["calibration"] != "usage unknown"]
    mine = _per_trial(known[known["arm"] == with_arm], "explore tool")
    theirs = _per_trial(known[known["arm"] == without_arm], occ.FILE_ACCESS)
    values = pd.concat([mine, theirs]).rename("residual").reset_index().assign(status="ok")
    fixed = known[known["category"] == occ.FIXED_BASE].groupby("arm")["tokens"].median()
    row = {
        "with_arm": with_arm,
        "without_arm": without_arm,
        "with_category": "explore tool",
        "without_category": occ.FILE_ACCESS,
        "with_tokens": float(mine.mean()) if len(mine) else np.nan,
        "without_tokens": float(theirs.mean()) if len(theirs) else np.nan,
        "n_with": len(mine),
        "n_without": len(theirs),
        "confidence": confidence,
        "fixed_overhead_tokens": float(fixed.get(with_arm, np.nan) - fixed.get(without_arm, np.nan)),
    }
    if not (len(mine) and len(theirs)):
        return {**row, "ratio": np.nan, "ci_low": np.nan, "ci_high": np.nan, "note": "an arm has no trial to compare"}
    r = stats.ratio(
        values, "residual", with_arm, without_arm, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    return {**row, "ratio": r.estimate, "ci_low": r.lower, "ci_high": r.upper, "note": r.note}


def comparisons(
    occupancy_trials: pd.DataFrame, baseline: str, *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> pd.DataFrame:
    """``analysis/occupancy_comparison.csv``: every arm that left explore output resident against ``baseline``."""
    explore = occupancy_trials[occupancy_trials["category"] == "explore tool"]
    with_arms = sorted({str(a) for a, t in explore.groupby("arm")["tokens"] if t.mean() > 0} - {baseline})
    rows = [
        _comparison_row(occupancy_trials, arm, baseline, confidence=confidence, n_resamples=n_resamples, seed=seed)
        for arm in with_arms
    ]
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def warnings(occupancy_trials: pd.DataFrame) -> list[str]:
    """Per arm, the trials whose chars/token was not measured on their own gaps, or was flagged: said loudly."""
    trials = occupancy_trials[occupancy_trials["category"] == occ.CONTEXT]
    flagged = trials[trials["calibration_note"].fillna("").astype(str) != ""]
    out = []
    for arm, rows in flagged.groupby(flagged["arm"].astype(str)):
        hows = ", ".join(f"{n} {how}" for how, n in rows["calibration"].value_counts().items())
        out.append(
            f"occupancy of {arm}: {len(rows)} of {(trials['arm'].astype(str) == arm).sum()} trial(s) flagged "
            f"({hows}): {rows['calibration_note'].iloc[0]} (calibration_note in analysis/occupancy_trials.csv)"
        )
    return out


def _comparison_lines(row: dict) -> list[str]:
    """The comparison and the fixed-overhead line, as the block's continuation."""
    level = f"{row['confidence']:.0%} CI"
    if np.isnan(row["ratio"]):
        compared = f"({row['note']})"
    elif np.isnan(row["ci_low"]):
        compared = f"= {row['ratio']:.2f}x (no interval: {row['note']})"
    else:
        compared = f"= {row['ratio']:.2f}x ({level} {row['ci_low']:.2f}–{row['ci_high']:.2f})"
    return [
        f"{row['with_arm']} explore residual {round(row['with_tokens']):,} tok vs {row['without_arm']} file-access "
        f"{round(row['without_tokens']):,} tok {compared}",
        f"fixed overhead: {row['fixed_overhead_tokens']:+,.0f} tok of context before any tool is called "
        f"({row['with_arm']} minus {row['without_arm']} median fixed base)",
    ]


def for_batch(analysis_dir: Path) -> str:
    """Every arm's block and each comparison of an analysed batch, from its tables ("" when it has none).

    What the analyze notebook displays and the report quotes: read from ``occupancy_trials.csv`` and
    ``occupancy_comparison.csv``, so both show the tables' own numbers.
    """
    trials_csv, compared_csv = (
        Path(analysis_dir) / "occupancy_trials.csv",
        Path(analysis_dir) / "occupancy_comparison.csv",
    )
    if not trials_csv.is_file():
        return ""
    trials = read_csv_as_written(trials_csv)
    parts = [f"arm {arm}:\n{text}" for arm, text in arms(trials).items()]
    if compared_csv.is_file():
        for row in read_csv_as_written(compared_csv).to_dict("records"):
            parts.append("\n".join(_comparison_lines(row)))
    return "\n\n".join(parts)
