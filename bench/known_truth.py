"""Known-truth coverage study: do the kit's 95% intervals for the total-token ratio cover the true ratio?

The batch-read pack's scripted model has a known effect (``kit/tasks/batch_read.py``): on each cycle with
reads pending it issues every remaining read at once with probability ``p_batch`` (batching arm) or
``q_batch`` (placebo), else one read. So a trial is one of ``n`` paths, "k single reads, then one batched
read" (k = 0 … n−1, n = 13 files after the manifest), with P(k) = (1−π)^k π for k < n−1 and (1−π)^(n−1)
for the last, whose final read is single either way. The token count of a path is fixed up to three
small random parts: the hidden reasoning tokens (``randint(16, 96)`` per response, replaced here by
their exact mean, 56), and the tokenisation of the trial's nonce and of the server's random item ids,
averaged by running every path ``per_path`` times. The truth is then exact in the paths and Monte Carlo
only in those last two parts: E[total | arm] = Σ_k P(k) · mean tokens of path k, truth = E[batching] /
E[placebo], with its standard error.

Then ``batches`` interleaved batches (5 runs per arm, alternate order, isolation "all", sdk-openai, as
``params/demo.yaml``) run through the same provider and agent loop, and every interval method of
:func:`kit.stats.ratio` is scored on how often its 95% interval holds the truth.

Fast: the embedded provider's app is called in-process (httpx's ASGI transport, no socket, no thread,
one app for the whole study), and the agent loop sends exactly the request bodies ``kit.agents.sdk``
sends on the Responses API without the OpenAI client's per-request transformation of the whole input
(``tests/test_known_truth.py`` checks the bodies are the same, segment for segment). Per-batch
independence comes from batch-unique trial ids (the policy's randomness is keyed by seed, trial id and
cycle) and batch-unique salts (nonces).

Run: ``.venv/bin/python bench/known_truth.py [--batches 1000] [--per-path 40]`` → ``bench/known_truth.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import orjson
import pandas as pd
from openai.types.responses import Response
from scipy import stats as sps

from kit import design, metrics, stats, transcripts
from kit.agents import sdk
from kit.agents.base import TrialSpec
from kit.agents.filetools import SPECS, FileTools
from kit.provider.cache import load_profile
from kit.provider.log import RequestLog
from kit.provider.policy import Conversation, Reply
from kit.provider.server import ProviderApp
from kit.run import EMBEDDED_KEY
from kit.tasks import tooluse
from kit.tasks.batch_read import BatchReadPack, BatchReadPolicy

ARMS = ("placebo", "batching")  # baseline first, as params/demo.yaml lists them
ARM, BASELINE = "batching", "placebo"
REASONING_MEAN = (16 + 96) / 2  # BatchReadPolicy.reply draws randint(16, 96) hidden reasoning tokens per response
CONFIDENCE = 0.95
BAND = (0.93, 0.97)  # the acceptance band for the coverage of a 95% interval
METHODS = ("bootstrap-t", "BCa", "percentile")  # the new default first, then the old default
OLD_DEFAULT = "BCa"
SLOW_TEST_BATCHES = 200
# The truth of the committed run (bench/known_truth.md, standard error 0.00010); the tests score against it.
TRUTH_RATIO = 0.35633
N_RESAMPLES = 10_000  # kit.stats.ratio's default, as the analyze stage uses it
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Setup:
    """One experiment as the demo runs it (``params/demo.yaml``)."""

    preset: str = "small"
    p_batch: float = 0.9
    q_batch: float = 0.15
    runs: int = 5
    order: str = "alternate"
    isolation: str = "all"
    seed: int = 0  # the provider's seed
    model: str = "sim-agent"

    def pack(self) -> BatchReadPack:
        return BatchReadPack(preset=self.preset, p_batch=self.p_batch, q_batch=self.q_batch)

    def batch_probability(self, arm: str) -> float:
        return self.p_batch if arm == ARM else self.q_batch


@dataclass
class ScriptedPaths:
    """The pack's own policy; for trials listed in ``forced`` its batch/no-batch draws are fixed instead.

    A forced trial reads ``forced[trial_id]`` files one by one after the manifest, then all the rest at
    once: the policy is asked with p = 0 (never batch) or p = 1 (always), so every other part of its
    reply (texts, calls, reasoning draw) is the real policy's.
    """

    base: BatchReadPolicy
    forced: dict[str, int] = field(default_factory=dict)
    name: str = "batch-read"

    def reply(self, conv: Conversation) -> Reply:
        singles = self.forced.get(conv.trial_id or "")
        if singles is None:
            return self.base.reply(conv)
        done = len(tooluse.file_contents(conv)) - 1  # files read after the manifest
        p = 1.0 if done >= singles else 0.0
        return replace(self.base, p_batch=p, q_batch=p).reply(conv)


class Lab:
    """The embedded provider in-process plus the SDK agent's Responses-API loop, for many trials.

    One provider app serves the whole study (its cache state does not touch total tokens). Each trial's
    responses are recorded in the SDK agent's own format and read back through ``kit.transcripts`` and
    ``kit.metrics.trial_table``: the totals are the parse stage's, not a shortcut.
    """

    def __init__(self, setup: Setup, root: Path):
        self.setup = setup
        self.root = root
        self.pack = setup.pack()
        self.arms = self.pack.arms()
        self.policy = ScriptedPaths(self.pack.policy())
        self.workdirs = {arm: self._workdir(letter, arm) for letter, arm in zip("ab", ARMS, strict=True)}
        tick = itertools.count()
        self.app = ProviderApp(
            profile=load_profile("openai-implicit"),
            policy=self.policy,
            seed=setup.seed,
            survival=1.0,
            capacity_tokens=20_000_000,
            clock=lambda: float(next(tick)),
            log=RequestLog(root / "provider_log.jsonl"),
        )
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app.app), base_url="http://provider")
        self.loop = asyncio.new_event_loop()
        self.isolation = frozenset(design.isolation_parts(setup.isolation))

    def _workdir(self, letter: str, arm: str) -> Path:
        """The run stage's layout: one fixture copy per arm at ``repo_<letter>``, with its AGENTS.md."""
        wd = self.root / "work" / f"repo_{letter}"
        wd.mkdir(parents=True)
        self.pack.prepare(wd)
        for name in ("AGENTS.md", "CLAUDE.md"):
            (wd / name).write_text(self.arms[arm].instruction + "\n")
        return wd

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
        self.app.log.close()

    def spec(self, batch: str, slot: design.Slot) -> TrialSpec:
        """The trial as ``kit.run`` builds it, with a batch-unique trial id."""
        trial_id = f"{batch}-{slot.trial_id}"
        return TrialSpec(
            batch=batch,
            trial_id=trial_id,
            arm=self.arms[slot.arm],
            run=slot.run,
            order_index=slot.order_index,
            nonce=slot.nonce,
            isolation=self.isolation,
            prompt_cache_key=design.prompt_cache_key(batch, slot.nonce, slot.arm, slot.run)
            if "prompt_cache_key" in self.isolation
            else None,
            prompts=tuple(self.pack.prompts()),
            workdir=self.workdirs[slot.arm],
            out_dir=self.root,
            base_url="",
            api_key=EMBEDDED_KEY,
            model=self.setup.model,
        )

    async def _trial(self, spec: TrialSpec) -> list[dict]:
        """Every response body of one single-turn trial, in order (``kit.agents.sdk``'s Responses loop)."""
        if spec.arm.placement == "user_prefix" or len(spec.prompts) != 1 or getattr(spec.arm, "tools", ()):
            raise ValueError(f"arm {spec.arm.name!r}: the study's loop covers single-turn arms without extra tools")
        files = FileTools(spec.workdir)
        tools = [{"type": "function", "strict": False, **s} for s in SPECS]
        if spec.cache_bust_tool:
            bust = {"name": spec.cache_bust_tool, "description": "Never call this tool.", "parameters": sdk._EMPTY}
            tools.insert(0, {"type": "function", "strict": False, **bust})
        items: list[dict] = []
        if spec.nonce_line:
            items.append({"role": "developer", "content": spec.nonce_line})
        if context := sdk._context_text(spec):
            items.append({"role": "developer", "content": context})
        items.append({"role": "user", "content": spec.prompts[0]})
        url = f"/t/{quote(spec.trial_id, safe='')}/v1/responses"
        headers = {"authorization": f"Bearer {spec.api_key}", "content-type": "application/json"}
        bodies = []
        for _ in range(spec.max_cycles):
            body = {
                "model": spec.model,
                "instructions": sdk._system_text(spec),
                "input": items,
                "tools": tools,
                "store": False,
                "parallel_tool_calls": True,
                **({"prompt_cache_key": spec.prompt_cache_key} if spec.prompt_cache_key else {}),
            }
            answer = await self.client.post(url, content=orjson.dumps(body), headers=headers)
            if answer.status_code != 200:
                raise RuntimeError(f"trial {spec.trial_id}: provider answered {answer.status_code}: {answer.text}")
            raw = answer.json()
            bodies.append(raw)
            calls = []
            for item in Response.model_validate(raw).output:
                data = item.model_dump(mode="json", exclude_none=True)
                if data.get("type") == "function_call":
                    calls.append((data["call_id"], data["name"], sdk._args(data.get("arguments"))))
                items.append(data)
            if not calls:
                return bodies
            for call_id, name, args in calls:
                output, _ = sdk._execute(files, spec, name, args)
                items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        raise RuntimeError(f"trial {spec.trial_id}: max_cycles {spec.max_cycles} reached")

    def run(self, batch: str, slots: Sequence[design.Slot], forced: dict[str, int] | None = None) -> pd.DataFrame:
        """The trials table (``kit.metrics.trial_table``) of ``slots``, run in schedule order."""
        folder = self.root / "records" / batch
        folder.mkdir(parents=True)
        meta, paths = [], []
        for slot in slots:
            spec = self.spec(batch, slot)
            if forced is not None:
                self.policy.forced[spec.trial_id] = forced[slot.trial_id]
            bodies = self.loop.run_until_complete(self._trial(spec))
            path = folder / f"{spec.trial_id}.jsonl"
            lines = [
                {"kit_sdk": 1, "api": "responses", "turn": 1, "cycle": i, "response": b} for i, b in enumerate(bodies)
            ]
            path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
            paths.append(path)
            meta.append({"batch": batch, "arm": slot.arm, "run": slot.run, "trial_id": spec.trial_id, "status": "ok"})
        by_path = {str(p): m for p, m in zip(paths, meta, strict=True)}
        requests = transcripts.read(paths, format="sdk_record", strict=True)
        ident = requests["source_path"].map(lambda p: by_path[p])
        for key in ("batch", "arm", "run", "trial_id"):
            requests[key] = ident.map(lambda m, key=key: m[key])
        shutil.rmtree(folder)
        return metrics.trial_table(requests, pd.DataFrame(meta).astype({"run": "Int64"}))


def path_probabilities(p: float, n_files: int) -> np.ndarray:
    """P(k single reads before the batched one), k = 0 … n_files−1; the last path's final read is single anyway."""
    k = np.arange(n_files)
    probs = (1 - p) ** k * p
    probs[-1] = (1 - p) ** (n_files - 1)
    return probs


def n_files(setup: Setup) -> int:
    """Files the policy reads after the manifest (those of its paths that the manifest lists)."""
    manifest = setup.pack().fixture().files["MANIFEST.txt"]
    return sum(p in manifest for p in setup.pack().policy().paths)


def path_table(lab: Lab, per_path: int, salt: str = "paths") -> pd.DataFrame:
    """Mean tokens of every (arm, path) over ``per_path`` forced trials, reasoning at its exact mean."""
    n = n_files(lab.setup)
    rows = []
    for k in range(n):
        for rep in range(per_path):
            batch = f"{salt}-k{k:02d}-{rep:03d}"
            slots = design.schedule(list(ARMS), 1, lab.setup.order, f"{salt}|{k}|{rep}", lab.setup.seed)
            trials = lab.run(batch, slots, forced={s.trial_id: k for s in slots})
            for t in trials.itertuples():
                rows.append(
                    {
                        "arm": t.arm,
                        "k": k,
                        "cycles": int(t.cycles),
                        "reasoning": int(t.reasoning_tokens) / int(t.cycles),
                        "tokens": int(t.total_tokens) - int(t.reasoning_tokens) + REASONING_MEAN * int(t.cycles),
                    }
                )
    table = (
        pd.DataFrame(rows)
        .groupby(["arm", "k"])
        .agg(
            cycles=("cycles", "first"),
            cycles_vary=("cycles", "nunique"),
            mean=("tokens", "mean"),
            sd=("tokens", "std"),
            n=("tokens", "size"),
            reasoning_per_response=("reasoning", "mean"),
        )
        .reset_index()
    )
    table["probability"] = [
        path_probabilities(lab.setup.batch_probability(arm), n)[k]
        for arm, k in zip(table["arm"], table["k"], strict=True)
    ]
    return table


def truth(table: pd.DataFrame) -> dict[str, float]:
    """E[total | arm] = Σ P(k)·mean(k) per arm, their ratio, and standard errors (delta method)."""
    out: dict[str, float] = {}
    for arm in ARMS:
        t = table[table["arm"] == arm]
        out[f"mean_{arm}"] = float((t["probability"] * t["mean"]).sum())
        out[f"se_{arm}"] = float(np.sqrt((t["probability"] ** 2 * t["sd"] ** 2 / t["n"]).sum()))
    r = out[f"mean_{ARM}"] / out[f"mean_{BASELINE}"]
    rel = math.hypot(out[f"se_{ARM}"] / out[f"mean_{ARM}"], out[f"se_{BASELINE}"] / out[f"mean_{BASELINE}"])
    out |= {"ratio": r, "ratio_se": r * rel}
    return out


def simulate(lab: Lab, batches: int, salt: str = "known-truth", progress: bool = False) -> pd.DataFrame:
    """``batches`` interleaved batches like the demo's, as one trials table (batch ids ``kt0000`` …)."""
    frames = []
    for i in range(batches):
        batch = f"kt{i:04d}"
        slots = design.schedule(list(ARMS), lab.setup.runs, lab.setup.order, f"{salt}|{i}", lab.setup.seed)
        frames.append(lab.run(batch, slots))
        if progress and (i + 1) % 50 == 0:
            print(f"  {i + 1} batches", file=sys.stderr, flush=True)
    return pd.concat(frames, ignore_index=True)


def clopper_pearson(hits: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval of a coverage estimated from ``n`` batches."""
    ci = sps.binomtest(hits, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def score(
    trials: pd.DataFrame, true_ratio: float, methods: Sequence[str] = METHODS, n_resamples: int = N_RESAMPLES
) -> pd.DataFrame:
    """One row per method: how often its interval, computed batch by batch, holds ``true_ratio``."""
    rows = []
    groups = list(trials.groupby("batch", sort=True))
    for method in methods:
        hits, widths, misses_low, no_interval = 0, [], 0, 0
        for i, (_, batch) in enumerate(groups):
            row = stats.ratio(batch, "total_tokens", ARM, BASELINE, method=method, n_resamples=n_resamples, seed=i)
            lo, hi = row["lower"], row["upper"]
            if not (np.isfinite(lo) and np.isfinite(hi)):
                no_interval += 1
                continue
            hits += lo <= true_ratio <= hi
            misses_low += hi < true_ratio
            widths.append(hi - lo)
        n = len(groups)
        low, high = clopper_pearson(hits, n)
        rows.append(
            {
                "method": method,
                "batches": n,
                "covered": hits,
                "coverage": hits / n,
                "coverage_low": low,
                "coverage_high": high,
                "truth_above": misses_low,
                "truth_below": n - hits - misses_low - no_interval,
                "no_interval": no_interval,
                "mean_width": float(np.mean(widths)) if widths else float("nan"),
                "median_width": float(np.median(widths)) if widths else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def band_verdict(row: pd.Series, band: tuple[float, float] = BAND) -> str:
    """Whether the coverage is honest at what a finite study can tell: its binomial interval meets the band."""
    if band[0] <= row["coverage"] <= band[1]:
        return "in band"
    if row["coverage_high"] >= band[0] and row["coverage_low"] <= band[1]:
        return "consistent with band"
    return "under" if row["coverage_high"] < band[0] else "over"


def report(setup: Setup, table: pd.DataFrame, t: dict, trials: pd.DataFrame, scores: pd.DataFrame, took: dict) -> str:
    """The committed markdown table."""
    ok = trials[trials["status"] == "ok"]
    pooled = ok.loc[ok["arm"] == ARM, "total_tokens"].mean() / ok.loc[ok["arm"] == BASELINE, "total_tokens"].mean()
    lines = [
        "# Known-truth coverage study (batch-read pack, embedded provider)",
        "",
        f"Generated by `bench/known_truth.py` ({took['total']:.0f} s on this machine). Setup as `params/demo.yaml`: "
        f"preset `{setup.preset}`, p_batch {setup.p_batch}, q_batch {setup.q_batch}, {setup.runs} runs per arm, "
        f"`{setup.order}` order, isolation `{setup.isolation}`, sdk-openai (Responses API) agent loop, provider seed "
        f"{setup.seed}.",
        "",
        "## The truth",
        "",
        f"True ratio of mean total tokens (batching / placebo): **{t['ratio']:.5f}** ± {t['ratio_se']:.5f} (standard "
        f"error). Exact over the policy's {table['k'].nunique()} paths (k single reads, then one batched read); the "
        f"per-path token counts are means of {int(table['n'].iloc[0])} forced trials each (nonce and random item-id "
        f"tokenisation), with the hidden reasoning at its exact mean of {REASONING_MEAN:g} tokens per response.",
        "",
        f"E[total | batching] = {t[f'mean_{ARM}']:,.1f} ± {t[f'se_{ARM}']:.1f}; "
        f"E[total | placebo] = {t[f'mean_{BASELINE}']:,.1f} ± {t[f'se_{BASELINE}']:.1f} tokens per trial.",
        "",
        f"Cross-check: the pooled ratio of the {trials['batch'].nunique()} simulated batches' means "
        f"({len(ok)} trials) is {pooled:.4f}.",
        "",
        "| k (single reads first) | responses | P(k) placebo | P(k) batching | tokens placebo | tokens batching |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    wide = table.pivot(index="k", columns="arm", values=["probability", "mean", "cycles"])
    for k in wide.index:
        lines.append(
            f"| {k} | {int(wide.loc[k, ('cycles', BASELINE)])} | {wide.loc[k, ('probability', BASELINE)]:.5f} | "
            f"{wide.loc[k, ('probability', ARM)]:.3g} | {wide.loc[k, ('mean', BASELINE)]:,.1f} | "
            f"{wide.loc[k, ('mean', ARM)]:,.1f} |"
        )
    lines += [
        "",
        '## Coverage of the 95% interval of `kit.stats.ratio(trials, "total_tokens", "batching", "placebo")`',
        "",
        f"One interval per simulated batch ({setup.runs} paired runs per arm, {N_RESAMPLES:,} resamples seeded by "
        f"batch index); coverage with its exact (Clopper–Pearson) 95% interval; widths in ratio units; acceptance "
        f"band {BAND[0]:.2f}–{BAND[1]:.2f}. "
        '"truth above" counts intervals entirely below the truth, "below" entirely above it.',
        "",
        "| batches | method | default | covered | coverage | 95% CI of coverage | truth above / below | mean width | "
        "median width | verdict |",
        "|---:|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    roles = {stats.DEFAULT_METHOD: "new", OLD_DEFAULT: "old"}
    for r in scores.itertuples():
        lines.append(
            f"| {r.batches} | {r.method} | {roles.get(r.method, '')} | {r.covered}/{r.batches} | {r.coverage:.3f} | "
            f"{r.coverage_low:.3f}–{r.coverage_high:.3f} | {r.truth_above} / {r.truth_below} | {r.mean_width:.4f} | "
            f"{r.median_width:.4f} | {band_verdict(pd.Series(r._asdict()))} |"
        )
    lines += [
        "",
        "Methods are `kit.stats.ratio(method=...)`: `bootstrap-t` is the studentized paired bootstrap of the log "
        f"ratio (resample standard errors floored at {stats.SE_FLOOR:g} of the sample's); `BCa` and `percentile` "
        "are `scipy.stats.bootstrap`'s paired intervals. The first rows score the first 200 batches alone (what "
        "`tests/test_known_truth.py`'s slow test runs), the last rows all of them.",
        "",
        f"Timings: truth {took['truth']:.0f} s, simulation {took['simulate']:.0f} s, scoring {took['score']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000, help="simulated batches (>= 200)")
    parser.add_argument("--per-path", type=int, default=40, help="forced trials per (arm, path) for the truth")
    parser.add_argument("--out", type=Path, default=HERE / "known_truth.md")
    args = parser.parse_args(argv)
    setup = Setup()
    root = Path(tempfile.mkdtemp(prefix="kit-known-truth-"))
    lab = Lab(setup, root)
    took = {}
    try:
        t0 = time.perf_counter()
        table = path_table(lab, args.per_path)
        t = truth(table)
        took["truth"] = time.perf_counter() - t0
        print(f"truth {t['ratio']:.5f} ± {t['ratio_se']:.5f} (TRUTH_RATIO {TRUTH_RATIO})", file=sys.stderr)
        if abs(t["ratio"] - TRUTH_RATIO) > 4 * t["ratio_se"] + 1e-5:
            print("the truth moved: update TRUTH_RATIO with this run's value", file=sys.stderr)
        t0 = time.perf_counter()
        trials = simulate(lab, args.batches, progress=True)
        took["simulate"] = time.perf_counter() - t0
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    first = trials[trials["batch"].isin(sorted(trials["batch"].unique())[:SLOW_TEST_BATCHES])]
    scores = pd.concat([score(first, t["ratio"]), score(trials, t["ratio"])])
    took["score"] = time.perf_counter() - t0
    took["total"] = sum(took.values())
    text = report(setup, table, t, trials, scores, took)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
