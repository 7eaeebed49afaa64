"""Wall time of `make demo`'s batch (install excluded), broken down per notebook.

Target (issue 2): the whole batch of params/demo.yaml <= 60 s on 2 cores.
Usage: .venv/bin/python bench/demo_batch.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kit.cli import pipeline

ROOT = Path(__file__).resolve().parent.parent


def one_batch(out: Path, name: str) -> dict[str, float]:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"), [], [("outputs_dir", str(out)), ("batch", name)])
    times = {}
    for stage in pipeline.STAGES:
        t0 = time.perf_counter()
        pipeline.execute(params, stages=[stage], progress=False)
        times[stage] = time.perf_counter() - t0
    times["total"] = sum(times.values())
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_batch(Path(tmp), f"bench{i}") for i in range(args.repeat)]
    print(f"demo batch (params/demo.yaml: 2 arms x 5 runs, sdk-openai on the embedded provider), {args.repeat} runs")
    print(f"| {'notebook':<8} | {'median s':>8} | {'min s':>6} | {'max s':>6} |")
    print(f"|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 8}|")
    for key in [*pipeline.STAGES, "total"]:
        vals = [r[key] for r in runs]
        print(f"| {key:<8} | {statistics.median(vals):>8.2f} | {min(vals):>6.2f} | {max(vals):>6.2f} |")
    print("target: total <= 60 s")


if __name__ == "__main__":
    main()
