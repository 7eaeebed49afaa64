"""The run stage's own overhead per trial, against the backend's own time, for each backend.

Per-trial overhead = a trial's span in the kit (folder, spec, log-line copy, grading, answer and
meta writes: meta ``ended_at - started_at``) minus the time inside the backend's runner
(``wall_s``). Target (issue 4): <= 5% of the trial's wall time. The one-time batch start-up
(provider start with its tokenizer, fixture generation, manifest) is reported apart: it does not
grow with trials. CLI backends are measured when their binaries are installed (`make e2e-tools`).
Usage: .venv/bin/python bench/run_overhead.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime
from pathlib import Path

from kit.cli import pipeline
from kit.stages import run

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("sdk-openai", "sdk-anthropic", "codex", "claude")


def measure(backend: str, runs: int, out: Path) -> dict[str, float] | None:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch=f"ovh-{backend}", backend=backend, runs_per_arm=runs, concurrency=1)
    try:
        cfg = run.configure(params)
    except ValueError as exc:  # backend not available in this checkout
        print(f"# {backend}: skipped ({exc})")
        return None
    t0 = time.perf_counter()
    folder = run.run_batch(cfg, progress=False)
    wall = time.perf_counter() - t0
    metas = [json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json")]
    if any(m["status"] != "ok" for m in metas):
        print(f"# {backend}: failed trials: {[m['reason'] for m in metas if m['status'] != 'ok']}")
        return None
    inside = sum(m["wall_s"] for m in metas)
    span = sum(
        (datetime.fromisoformat(m["ended_at"]) - datetime.fromisoformat(m["started_at"])).total_seconds() for m in metas
    )
    n = len(metas)
    return {
        "trials": n,
        "trial_s": inside / n,
        "overhead_ms": 1000 * (span - inside) / n,
        "pct": 100 * (span - inside) / span,
        "startup_s": wall - span,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in BACKENDS:
            rows[backend] = measure(backend, args.runs, Path(tmp))
    print(f"run-stage overhead, batch-read demo arms, {args.runs} runs per arm, concurrency 1")
    print("| backend | trials | backend s/trial | kit overhead ms/trial | overhead % of trial | batch start-up s |")
    print("|---|---|---|---|---|---|")
    for backend, r in rows.items():
        if r:
            print(
                f"| {backend} | {r['trials']} | {r['trial_s']:.3f} | {r['overhead_ms']:.1f} | {r['pct']:.1f}% "
                f"| {r['startup_s']:.2f} |"
            )
    print("target: overhead <= 5% of the trial's wall time")


if __name__ == "__main__":
    main()
