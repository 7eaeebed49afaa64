"""A synthetic analysed batch in the shapes of docs/tables.md, for the report and figure tests: three interleaved
batches of batching against placebo, numbers chosen so the expected sentences can be worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kit.records import Design

DESIGN = Design(
    batch=["b1", "b2", "b3"],
    task="batch-read",
    arms=[],  # the figures' arms come from their data
    runs_per_arm=5,
    order="balanced",
    schedule="balanced",
    isolation="nonce+key",
    backend="sdk-openai",
    endpoint="embedded",
    model="sim-model",
    simulated=True,
    baseline="placebo",
)


def report_trials() -> pd.DataFrame:
    rows = []
    schedule = ["placebo", "batching", "batching", "placebo"] * 3
    for i, arm in enumerate(schedule[:10]):
        failed = i == 7
        rows.append(
            {
                "batch": "b1",
                "arm": arm,
                "run": i // 2,
                "trial_id": f"b1-{arm}-r{i // 2}",
                "order_index": i,
                "status": "failed" if failed else "ok",
                "reason": "timeout" if failed else "",
                "grade": 0.9 if arm == "batching" else 0.8 + 0.02 * i,
                "control": False,
                "usage_known": True,
                "total_tokens": (70_000 if arm == "batching" else 100_000) + 1_000 * i,
                "uncached_input_tokens": 10_000 + 100 * i,
                "simulated": True,
            }
        )
    return pd.DataFrame(rows)


def ratio_row(metric: str, estimate: float, lower: float, upper: float, **extra) -> dict:
    row = {
        "comparison": "batching vs placebo",
        "arm": "batching",
        "baseline": "placebo",
        "metric": metric,
        "estimate": estimate,
        "lower": lower,
        "upper": upper,
        "confidence": 0.95,
        "n_arm": 5,
        "n_baseline": 5,
        "paired": True,
        "batches": 1,
        "method": "paired BCa bootstrap",
        "label": "",
        "small_n": False,
        "hit_rate_arm": 0.91,
        "hit_rate_baseline": 0.88,
        "simulated": True,
        "note": "",
    }
    return {**row, **extra}


def report_ratios(**grade) -> pd.DataFrame:
    return pd.DataFrame(
        [
            ratio_row("total_tokens", 0.7, 0.64, 0.77),
            ratio_row("uncached_input_tokens", 0.83, 0.70, 0.95),
            ratio_row("cycles", 0.5, 0.4, 0.6),
            ratio_row("cost_usd", np.nan, np.nan, np.nan),
            ratio_row("grade", *grade.get("values", (-0.02, -0.08, 0.03))),
        ]
    )


def report_headline() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"arm": "batching", "n": 5, "failed": 0, "mean": 70_000.0, "lower": 66_000.0, "upper": 74_000.0,
             "ratio": 0.7, "ratio_lower": 0.64, "ratio_upper": 0.77, "simulated": True},
            {"arm": "placebo", "n": 4, "failed": 1, "mean": 100_000.0, "lower": 92_000.0, "upper": 104_000.0,
             "ratio": np.nan, "ratio_lower": np.nan, "ratio_upper": np.nan, "simulated": True},
        ]
    )  # fmt: skip
