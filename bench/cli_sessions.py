"""Bench the CLI backends: a 3-request tool session of the real Codex CLI and Claude Code, offline.

    .venv/bin/python bench/cli_sessions.py [--runs 5]

Each CLI runs a fixed session against the embedded provider (read MANIFEST.txt, read
config/defaults.toml, answer: exactly three model requests) through the kit's own backend
(``run_trial``), with every isolation part on, as a batch trial would. Per CLI it prints the median
over ``--runs`` trials (after one warm-up, which also pays the one-off ``--version`` probe) of: the
CLI's own wall time (its process, from ``cli_runs.json``), the whole trial's wall time, and the kit's
overhead per trial (trial minus CLI: home set-up, transcript copies, clean-up). Target: CLI session
≤ 1.3 s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from kit import tasks
from kit.agents import claude, cli_common, codex
from kit.agents.base import TrialSpec
from kit.experiment.design import Arm
from kit.provider import Conversation, Reply, serve
from kit.stages import run
from kit.tasks import tooluse

TARGET_S = 1.3
BACKENDS = {"codex": (codex.run_trial, "openai-implicit"), "claude": (claude.run_trial, "anthropic")}


class ThreeRequests:
    """Read two files, one per request, then answer: a fixed 3-request session for any client."""

    name = "bench-three-requests"

    def reply(self, conv: Conversation) -> Reply:
        paths = ("MANIFEST.txt", "config/defaults.toml")
        if conv.cycle < len(paths):
            return Reply(f"Reading {paths[conv.cycle]}.", (tooluse.read_call(conv, paths[conv.cycle]),), 8)
        return Reply("Done: the project has 12 pipeline modules and one config file.", (), 8)


def bench(backend: str, runs: int, root: Path) -> dict[str, float]:
    runner, profile = BACKENDS[backend]
    workdir = root / backend / "work" / "repo_a"
    workdir.mkdir(parents=True)
    tasks.get("batch-read").prepare(workdir)
    cli_s, trial_s, requests = [], [], []
    with serve(profile=profile, policy=ThreeRequests(), log_path=root / f"{backend}.jsonl") as provider:
        for i in range(runs + 1):  # the first is a warm-up
            trial_id = f"{backend}-{i}"
            out = root / backend / "raw" / trial_id
            out.mkdir(parents=True)
            spec = TrialSpec(
                batch="bench", trial_id=trial_id, arm=Arm("a"), run=i, order_index=i, nonce=f"bench{i:04d}",
                isolation=frozenset({"nonce", "cache_bust_tool", "prompt_cache_key"}), prompt_cache_key=None,
                prompts=("Look at the manifest and the config, then summarise.",), workdir=workdir, out_dir=out,
                base_url=provider.trial_base_url(trial_id), api_key=run.EMBEDDED_KEY, model="sim-model", timeout_s=60,
            )  # fmt: skip
            t0 = time.perf_counter()
            outcome = runner(backend, spec)
            wall = time.perf_counter() - t0
            if outcome.status != "ok":
                raise SystemExit(f"{backend} trial {trial_id} failed: {outcome.reason}")
            process = sum(r["wall_s"] for r in orjson.loads((out / cli_common.RUNS_FILE).read_bytes()))
            if i:
                cli_s.append(process)
                trial_s.append(wall)
                requests.append(outcome.cycles)
    return {
        "requests": statistics.median(requests),
        "cli_s": statistics.median(cli_s),
        "trial_s": statistics.median(trial_s),
        "overhead_s": statistics.median(t - c for t, c in zip(trial_s, cli_s, strict=True)),
        "cli_min_s": min(cli_s),
        "cli_max_s": max(cli_s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kit-bench-cli-") as tmp:
        rows = {b: bench(b, args.runs, Path(tmp)) for b in BACKENDS}
    print(f"3-request CLI sessions against the embedded provider, median of {args.runs} (target CLI <= {TARGET_S} s)")
    print(f"{'backend':<8} {'requests':>8} {'CLI s':>7} {'min-max':>11} {'trial s':>8} ", end="")
    print(f"{'kit overhead s':>15} {'target':>7}")
    for backend, r in rows.items():
        spread = f"{r['cli_min_s']:.2f}-{r['cli_max_s']:.2f}"
        verdict = "ok" if r["cli_s"] <= TARGET_S else "MISSED"
        print(
            f"{backend:<8} {r['requests']:>8.0f} {r['cli_s']:>7.3f} {spread:>11} {r['trial_s']:>8.3f} "
            f"{r['overhead_s']:>15.3f} {verdict:>7}"
        )


if __name__ == "__main__":
    main()
