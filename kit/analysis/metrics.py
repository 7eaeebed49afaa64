"""Per-trial and per-arm tables (``tables/trials.parquet``, ``analysis/arms.csv``, ``analysis/headline.csv``).

A trial is the unit every comparison resamples, so request rows are summed per trial here, once.
Two honesty rules shape the code: a trial whose usage is partly unknown has NA token sums (missing is
never zero, and a partial sum would look like a cheap trial), and a failed trial stays in the table
with its status so the failure count is reported, while only finished trials enter the means.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kit import stats
from kit.errors import InputError
from kit.records import FirstRequests, UnableArm
from kit.schema import TOKENS

META_COLUMNS = [
    "batch",
    "arm",
    "run",
    "trial_id",
    "order_index",
    "status",
    "reason",
    "grade",
    "grade_detail",
    "backend",
    "model",
    "isolation",
    "control",
    "started_at",
    "wall_s",
    "simulated",
]
META_REQUIRED = ["batch", "arm", "run", "trial_id", "status"]
STATUSES = frozenset({"ok", "failed"})
DERIVED_COLUMNS = ["cycles", "tool_calls", "hit_rate", "calls_per_response", "multi_call_share", "usage_known"]
TRIAL_COLUMNS = [*TOKENS, *DERIVED_COLUMNS]
_IDENTITY = ("batch", "arm", "run")
CONTROL_LABEL = "control (not isolated)"  # a control arm's headline label (docs/method.md#controls)


def _check_meta(meta: pd.DataFrame) -> None:
    stats.require_columns(meta, META_REQUIRED, "trial_table(meta)")
    dup = meta.loc[meta["trial_id"].duplicated(), "trial_id"]
    if not dup.empty:
        raise InputError(f"trial_table(meta): trial_id repeated: {', '.join(map(str, dup.unique()))}")
    bad = meta.loc[~meta["status"].isin(STATUSES), ["trial_id", "status"]]
    if not bad.empty:
        trial, status = bad.iloc[0]
        raise InputError(f"trial_table(meta): trial {trial}: status {status!r}, expected one of {sorted(STATUSES)}")


def _where(requests: pd.DataFrame, i: int) -> str:
    """A request row's place in its source transcript, for error messages."""
    row = requests.loc[i]
    path, line = row.get("source_path"), row.get("source_line")
    return f"{path}:{line}" if pd.notna(path) else f"requests row {i}"


def _check_requests(requests: pd.DataFrame, meta: pd.DataFrame) -> None:
    stats.require_columns(requests, ["trial_id", "usage_known", "tool_calls", *TOKENS], "trial_table(requests)")
    known_ids = set(meta["trial_id"])
    stray = requests.index[~requests["trial_id"].isin(known_ids)]
    if len(stray):
        i = stray[0]
        raise InputError(
            f"{_where(requests, i)}: trial_id {requests.loc[i, 'trial_id']!r} has no meta row "
            f"({len(stray)} request row(s) without a trial)"
        )
    by_id = meta.set_index("trial_id")
    for col in _IDENTITY:
        if col not in requests.columns:
            continue
        given, expected = requests[col], requests["trial_id"].map(by_id[col])
        if pd.api.types.is_numeric_dtype(given) and pd.api.types.is_numeric_dtype(expected):
            differ = given.astype("Float64") != expected.astype("Float64")  # run 1 in JSON may read back as 1.0
        else:
            differ = given.astype(str) != expected.astype(str)
        wrong = requests.index[(given.notna() & expected.notna() & differ).fillna(False)]
        if len(wrong):
            i = wrong[0]
            raise InputError(
                f"{_where(requests, i)}: trial {requests.loc[i, 'trial_id']}: {col} is "
                f"{requests.loc[i, col]!r} in requests but {expected[i]!r} in meta"
            )


def trial_table(requests: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """One row per trial: the meta row plus per-trial sums of the request rows.

    Every meta row appears, failed or not, and a trial with no request rows gets ``cycles`` 0 and NA
    counts. Token sums are NA when any request of the trial has unknown usage (or the count itself is
    missing). ``hit_rate`` is cache_read / input; ``calls_per_response`` and ``multi_call_share``
    (responses with >= 2 tool calls) are taken over the responses that called a tool at all, so a
    final answer does not dilute how well the model batched its calls.
    """
    _check_meta(meta)
    requests = requests.reset_index(drop=True)
    _check_requests(requests, meta)
    ids = requests["trial_id"]
    grouped = requests.groupby(ids, sort=False)
    sums = grouped[[*TOKENS, "tool_calls"]].sum(skipna=False).astype("Int64")
    known = requests["usage_known"].fillna(False).astype(bool).groupby(ids, sort=False).all()
    sums.loc[~known, TOKENS] = pd.NA
    calls = requests["tool_calls"].astype("Int64")
    calling = (calls >= 1).groupby(ids, sort=False).sum(skipna=False)
    multi = (calls >= 2).groupby(ids, sort=False).sum(skipna=False)
    derived = pd.DataFrame(
        {
            "cycles": grouped.size(),
            "calls_per_response": sums["tool_calls"].astype("Float64") / calling.where(calling > 0).astype("Float64"),
            "multi_call_share": multi.astype("Float64") / calling.where(calling > 0).astype("Float64"),
            "usage_known": known,
        }
    )
    per_trial = pd.concat([sums, derived], axis=1)
    out = meta.reset_index(drop=True).merge(per_trial, left_on="trial_id", right_index=True, how="left")
    out["cycles"] = out["cycles"].fillna(0)
    out["usage_known"] = out["usage_known"].astype("boolean").fillna(False)
    inp = out["input_tokens"].astype("Float64")
    out["hit_rate"] = out["cache_read_tokens"].astype("Float64") / inp.where(inp > 0)
    dtypes = {c: "Int64" for c in [*TOKENS, "cycles", "tool_calls"]}
    dtypes |= {"hit_rate": "Float64", "calls_per_response": "Float64", "multi_call_share": "Float64"}
    out = out.astype(dtypes | {"usage_known": "boolean"})
    return out[[*meta.columns, *TRIAL_COLUMNS]]


def arm_summary(
    trials: pd.DataFrame,
    metrics: Sequence[str],
    confidence: float = 0.95,
    seed: int = 0,
    *,
    n_resamples: int = 10_000,
) -> pd.DataFrame:
    """``analysis/arms.csv``: per arm and metric, the mean of finished trials with a bootstrap interval.

    ``n`` counts finished trials with a value, ``failed`` the failed trials, ``missing`` finished
    trials whose value is unknown; ``batches`` names the batch set the row pools.
    """
    stats.require_columns(trials, ["batch", "arm", "status", *metrics], "arm_summary()")
    rows = []
    for arm, group in trials.groupby("arm", sort=False):
        ok = stats.finished(group)
        failed = int((group["status"] == "failed").sum())
        batch_set = "+".join(sorted(map(str, group["batch"].unique())))
        for metric in metrics:
            have = ok[ok[metric].notna()]
            values = have[metric].to_numpy(dtype=float)
            ci = stats.mean_interval(
                values, have["batch"].tolist(), confidence=confidence, n_resamples=n_resamples, seed=seed
            )
            rows.append(
                {
                    "batches": batch_set,
                    "arm": arm,
                    "metric": metric,
                    "n": len(values),
                    "failed": failed,
                    "missing": len(ok) - len(have),
                    "mean": ci.mean,
                    "lower": ci.lower,
                    "upper": ci.upper,
                    "median": float(pd.Series(values).median()) if len(values) else float("nan"),
                    "confidence": confidence,
                    "method": ci.method,
                    "note": ci.note,
                    "bound_beyond_data": ci.bound_beyond_data,
                }
            )
    return pd.DataFrame(rows)


def headline(
    trials: pd.DataFrame, baseline: str, ratios: pd.DataFrame, *, confidence: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """``analysis/headline.csv``: total tokens per arm, then its ratio to ``baseline`` (docs/method.md#totals).

    ``ratios`` is :func:`kit.stats.ratios` output; the baseline's own ratio columns stay empty. A control arm's row
    is labelled ``CONTROL_LABEL``: it measures contamination, and the report never quotes it as a treatment.
    """
    if not (trials["arm"] == baseline).any():
        raise InputError(f"headline(): baseline arm {baseline!r} not in trials; arms: {sorted(trials['arm'].unique())}")
    summary = arm_summary(trials, ["total_tokens"], confidence=confidence, seed=seed)
    chosen = ratios[(ratios["metric"] == "total_tokens") & (ratios["baseline"] == baseline)].set_index("arm")
    order = [baseline, *[a for a in summary["arm"] if a != baseline]]
    controls = set(trials.loc[trials["control"].fillna(False).astype(bool), "arm"]) if "control" in trials else set()
    rows = []
    for arm in order:
        s = summary[summary["arm"] == arm].iloc[0]
        r = chosen.loc[arm] if arm in chosen.index else None
        label = r["label"] if r is not None else ""
        rows.append(
            {
                "arm": arm,
                "n": s["n"],
                "failed": s["failed"],
                "total_tokens_mean": s["mean"],
                "total_tokens_lower": s["lower"],
                "total_tokens_upper": s["upper"],
                "ratio": r["estimate"] if r is not None else float("nan"),
                "ratio_lower": r["lower"] if r is not None else float("nan"),
                "ratio_upper": r["upper"] if r is not None else float("nan"),
                "label": "; ".join(x for x in (CONTROL_LABEL if arm in controls else "", label) if x),
                "simulated": stats.any_simulated(trials[trials["arm"] == arm]),
            }
        )
    return pd.DataFrame(rows)


def first_requests(requests: pd.DataFrame, trials: pd.DataFrame) -> list[FirstRequests]:
    """Per arm, what its finished trials' first requests read from the provider cache (docs/method.md#controls).

    A trial's first request comes before the trial wrote anything, so whatever it reads another trial left: for a
    non-isolated control that is the contamination isolation removes (measured on the embedded provider: the
    control's first requests read 1,024 tokens from earlier control trials), for an isolated arm it should be 0.
    Only requests of the main conversation count (a subagent's first request follows its parent's); a trial whose
    first request's usage is unknown is left out, not read as 0.
    """
    ok = stats.finished(trials)
    if ok.empty or requests.empty:
        return []
    main = requests[~requests["sidechain"].fillna(False).astype(bool)] if "sidechain" in requests else requests
    main = main.sort_values("cycle", kind="stable").drop_duplicates(["batch", "trial_id"])
    main = main[main["usage_known"].fillna(False).astype(bool) & main["cache_read_tokens"].notna()]
    firsts = ok[["batch", "trial_id", "arm"]].merge(main[["batch", "trial_id", "cache_read_tokens"]])
    control = ok["control"].fillna(False).astype(bool) if "control" in ok else pd.Series(False, index=ok.index)
    controls = set(ok.loc[control, "arm"].astype(str))
    out = []
    for arm in dict.fromkeys(ok["arm"].astype(str)):
        read = firsts.loc[firsts["arm"].astype(str) == arm, "cache_read_tokens"].astype(float)
        out.append(
            FirstRequests(
                arm=arm,
                control=arm in controls,
                trials=len(read),
                cached_mean=float(read.mean()) if len(read) else None,
                reading=int((read > 0).sum()),
            )
        )
    return out


def unable_arms(trials: pd.DataFrame) -> list[UnableArm]:
    """The arms whose finished trials show they could not do the task (docs/method.md#grading).

    Two signs, from the trials table alone: every graded trial of the arm graded 0, or no trial of the arm called a
    tool while another arm's trials did (a task the others needed tools for). Measured: Codex on a model whose tools
    the provider did not see answered "no tool" in every trial, graded 0, finished ``ok``, and the report printed
    "1.00× fewer total tokens". An arm that cannot do the task makes every ratio a comparison with a failure, so
    such a batch gets no efficiency headline.
    """
    ok = stats.finished(trials)
    if ok.empty:
        return []
    calls = ok["tool_calls"].astype("Float64") if "tool_calls" in ok else pd.Series(pd.NA, index=ok.index)
    out = []
    for arm in dict.fromkeys(ok["arm"].astype(str)):
        mine = ok["arm"].astype(str) == arm
        grades = ok.loc[mine, "grade"].dropna().astype(float) if "grade" in ok else pd.Series(dtype=float)
        graded_zero = len(grades) > 0 and bool((grades == 0).all())
        others = calls[~mine].dropna()
        no_tool = bool(calls[mine].notna().all() and (calls[mine] == 0).all() and (others > 0).any())
        if not (graded_zero or no_tool):
            continue
        n = int(mine.sum())
        shown = [f"its {_trials(len(grades))} graded 0" + (" each" if len(grades) > 1 else "")] if graded_zero else []
        if no_tool:
            shown.append(f"no trial of it called a tool (the other arms' made {others.mean():.1f} calls per trial)")
        elif calls[mine].notna().all() and (calls[mine] == 0).all():
            shown.append("no trial of it called a tool")
        reason = f"{arm}: " + " and ".join(shown)
        out.append(UnableArm(arm=arm, trials=n, graded_zero=graded_zero, no_tool=no_tool, reason=reason))
    return out


def _trials(n: int) -> str:
    return "1 finished trial" if n == 1 else f"{n} finished trials"
