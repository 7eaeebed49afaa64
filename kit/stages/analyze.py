"""The analyze stage: trials of one or more batches into honest ratios under ``analysis/``.

docs/method.md is the specification (#totals, #warmth): total tokens is the headline; uncached tokens are a separate
figure carrying each arm's observed hit rate; a deterministic structural-cache figure is computed
from the prompts themselves; the warmth sweep replays the recorded requests through the same
cache engine the provider uses, so a reader sees that one uncached ratio is a point on a curve.
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, NamedTuple

import msgspec
import orjson
import pandas as pd

from kit import stats
from kit.analysis import cachemodel, metrics, occupancy, occupancy_block, pricing
from kit.analysis.design_table import arm_settings
from kit.experiment.design import ParamError
from kit.experiment.layout import DESIGN_JSON, BatchDir, batch_paths, write_design
from kit.experiment.lock import batch_lock
from kit.files import write_table
from kit.params import check_baseline, check_comparisons
from kit.records import UNSET, Analysis, Decision, Design, Manifest, StopRule, decode_design
from kit.stats.planning import STOP_METRIC

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "CACHE_METRICS",
    "PRICED",
    "RATIO_METRICS",
    "Analysis",
    "Choice",
    "Inputs",
    "Options",
    "analyze_batches",
    "arms_of",
    "batch_paths",
    "choose",
    "compare",
    "controls_of",
    "design_of",
    "load",
    "matched_runs",
    "observed",
    "quality",
    "savings",
    "shared_first_prefix",
    "structural_requests",
]

RATIO_METRICS = ["total_tokens", "uncached_input_tokens", "structural_uncached", "cycles", "output_tokens"]
PRICED = ["cost_usd", "credits", "structural_cost_usd"]
# The metrics of the family judged together (docs/method.md#family): the ones the report's opening sentences state.
FAMILY_METRICS = frozenset(stats.HEADLINE_METRICS)
# Figures that ride the provider cache's warmth: across batches they stay per batch (docs/method.md#warmth).
CACHE_METRICS = frozenset({"uncached_input_tokens", "cost_usd", "credits"})


class Inputs(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """The parse stage's tables of every batch analysed together, concatenated, and each batch's manifest."""

    trials: Annotated[pd.DataFrame, msgspec.Meta(description="tables/trials.parquet of every batch")]
    requests: Annotated[pd.DataFrame, msgspec.Meta(description="tables/requests.parquet of every batch")]
    segments: Annotated[pd.DataFrame, msgspec.Meta(description="tables/segments.parquet of every batch")]
    tool_results: Annotated[pd.DataFrame, msgspec.Meta(description="tables/tool_results.parquet of every batch")]
    events: Annotated[pd.DataFrame | None, msgspec.Meta(description="tables/events.parquet where written, else None")]
    manifests: Annotated[list[Manifest], msgspec.Meta(description="each batch's manifest.json, in the given order")]


def load(batch_dirs: list[Path]) -> Inputs:
    """Tables and manifests of every batch, concatenated."""
    trials, requests, segments, tools, events, manifests = [], [], [], [], [], []
    for path in batch_dirs:
        bd = BatchDir(Path(path))
        if not bd.table("trials").exists():
            raise FileNotFoundError(f"{bd.table('trials')}: missing; run the parse stage on {bd.root} first")
        trials.append(pd.read_parquet(bd.table("trials")))
        requests.append(pd.read_parquet(bd.table("requests")))
        segments.append(pd.read_parquet(bd.table("segments")))
        tools.append(pd.read_parquet(bd.table("tool_results")))
        if bd.table("events").exists():
            events.append(pd.read_parquet(bd.table("events")))
        manifests.append(bd.read_manifest())
    return Inputs(
        trials=pd.concat(trials, ignore_index=True),
        requests=pd.concat(requests, ignore_index=True),
        segments=pd.concat(segments, ignore_index=True),
        tool_results=pd.concat(tools, ignore_index=True),
        events=pd.concat(events, ignore_index=True) if events else None,
        manifests=manifests,
    )


def design_of(manifests: list[Manifest]) -> Design:
    """The design facts every figure and the report state (schedule, isolation, versions, …).

    ``arm_settings`` (one row per arm: model, effort, binary, version) and ``run_warnings`` come from the
    manifests because the plot stage reads only ``design.json``, never a manifest.
    """
    first = manifests[0]
    p = first.params
    stop = first.stop_rule if isinstance(first.stop_rule, StopRule) else None
    return Design(
        batch=[m.batch for m in manifests] if len(manifests) > 1 else first.batch,
        task=p.task,
        arms=arms_of(manifests),
        runs_per_arm=stop.runs_per_arm if stop else p.runs_per_arm,  # as grown
        order=p.order,
        schedule=p.order + (" (BLOCKED: arms separated in time)" if first.blocked else ", run-major"),
        isolation=p.isolation,
        isolation_parts=first.isolation_parts,
        backend=p.backend,
        endpoint=p.endpoint,
        model=p.model,
        profile=p.profile,
        simulated=any(m.simulated for m in manifests),
        true_effect=first.task.get("true_effect"),
        versions=first.versions,
        salts=[m.salt for m in manifests],
        controls=controls_of(manifests),
        arm_settings=arm_settings(manifests).to_dict("records"),
        run_warnings=list(dict.fromkeys(w for m in manifests for w in m.warnings)),
        stop_rule=stop.reason if stop else UNSET,  # why the batch stopped
    )


def arms_of(manifests: list[Manifest]) -> list[str]:
    """Every arm of every batch, in the order of first mention: an arm the first batch lacks is analysed where it
    ran (a batch contributes to the comparisons whose arms it holds), never dropped."""
    return list(dict.fromkeys(arm for m in manifests for arm in m.params.arms))


def controls_of(manifests: list[Manifest]) -> list[str]:
    """The arms any batch ran as its non-isolated control (``control: true``), in the order of first mention."""
    found = [arm for m in manifests for arm in m.params.arms if arm in m.arms and m.arms[arm].control]
    return list(dict.fromkeys(found))


def shared_first_prefix(segments: pd.DataFrame, trials: pd.DataFrame | None = None) -> int | None:
    """Tokens at the head of EVERY isolated trial's first request: what isolation cannot (or did not) separate.

    docs/method.md#isolation: with a ``cache_bust_<id>`` tool at the top of the prefix this is 0; with only a nonce at
    the system→task boundary it is the tools + system prompt, which the report states. The trials of a control
    (``trials``' ``control`` column) are left out: a control runs without isolation by design, and counting its
    prefix in would measure the control, not isolation (measured on Codex: 1,256 shared tokens became 518, below
    the cacheable minimum, and the uncached ratios lost their diagnostic label).
    """
    if trials is not None and "control" in trials.columns:
        controls = trials.loc[trials["control"].fillna(False).astype(bool), ["batch", "trial_id"]]
        keys = pd.MultiIndex.from_frame(segments[["batch", "trial_id"]])
        segments = segments[~keys.isin(pd.MultiIndex.from_frame(controls))]
    firsts = segments[segments["cycle"] == 0]
    if len(firsts) < 2:
        return None
    lists = [orjson.loads(s) for s in firsts["segments_json"]]
    shared = 0
    for column in zip(*lists, strict=False):
        if len({seg[0] for seg in column}) != 1:
            break
        shared += column[0][1]
    return shared


def structural_requests(segments: pd.DataFrame) -> pd.DataFrame:
    """Each request's structural cache (docs/method.md#structural-cache: ``input_tokens`` of its segments,
    ``structural_cached``, ``structural_uncached``), keyed by ``batch``, ``trial_id`` and ``cycle``.

    Trial ids repeat across batches (``r00-placebo`` in each), so the model keys each trial by its batch: keyed by
    the id alone, a later batch's trials read an earlier batch's same-named trial as cached (measured on three
    demo batches: structural uncached 65,282 tokens instead of 68,699 in the second).
    """
    if segments.empty:
        return pd.DataFrame(columns=["batch", "trial_id", "cycle", "input_tokens", *_STRUCTURAL])
    keyed = segments.assign(
        segments=segments["segments_json"].map(orjson.loads),
        trial_id=segments["batch"].astype(str) + "/" + segments["trial_id"].astype(str),
    )
    out = cachemodel.structural(keyed)
    return out.assign(trial_id=segments["trial_id"])[["batch", "trial_id", "cycle", "input_tokens", *_STRUCTURAL]]


_STRUCTURAL = ["structural_cached", "structural_uncached"]


def _structural(trials: pd.DataFrame, per_request: pd.DataFrame) -> pd.DataFrame:
    if per_request.empty:
        return trials.assign(structural_uncached=pd.NA)
    per_trial = per_request.groupby(["batch", "trial_id"])["structural_uncached"].sum().rename("structural_uncached")
    return trials.merge(per_trial.reset_index(), on=["batch", "trial_id"], how="left")


def _priced(trials: pd.DataFrame, requests: pd.DataFrame, per_request: pd.DataFrame) -> pd.DataFrame:
    """Each trial's price at the dated rate cards: as the provider billed it (``cost_usd``, ``credits``), and as an
    ideal per-trial prefix cache would (``structural_cost_usd``, docs/method.md#structural-cache); NA, with a
    warning, where a model has no rate."""
    out = trials.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cards: tuple[tuple[pricing.Card, str], ...] = (("usd", "cost_usd"), ("credits", "credits"))
        keys = out["batch"] + "/" + out["trial_id"]
        for card, column in cards:
            keyed = requests.assign(trial_id=requests["batch"] + "/" + requests["trial_id"])
            per_trial = pricing.price_by_trial(keyed, card) if len(keyed) else pd.Series(dtype="Float64")
            out[column] = keys.map(per_trial).astype("Float64")
        billed = requests[["batch", "trial_id", "cycle", "model", "output_tokens"]]
        ideal = per_request.merge(billed, on=["batch", "trial_id", "cycle"], how="left")
        ideal = ideal.assign(trial_id=ideal["batch"] + "/" + ideal["trial_id"])
        structural = pricing.structural_price_by_trial(ideal) if len(ideal) else pd.Series(dtype="Float64")
        out["structural_cost_usd"] = keys.map(structural).astype("Float64")
    out.attrs["pricing_warnings"] = sorted({str(w.message) for w in caught})
    return out


def compare(
    trials: pd.DataFrame,
    pairs: list[tuple[str, str]],
    metrics_used: list[str],
    family: list[tuple[str, str]] | None = None,
    stopped: dict[tuple[str, str], Stopped] | None = None,
    **options,
) -> pd.DataFrame:
    """``analysis/ratios.csv``: each (arm, baseline) pair on every metric, total and uncached tokens always.

    Across several batches a cache-dependent figure (``CACHE_METRICS``) gets one row per batch holding both arms,
    at that batch's own observed warmth (``from_batch`` names it), never one pooled ratio over batches of different
    warmth (docs/method.md#warmth); the cache-independent figures pool every batch that holds both arms
    (``kit.stats.ratio``: the others are left out, and the row's note says which). A pair the stop rule grew
    (``stopped``, :func:`_stop_decisions`) publishes on its ``STOP_METRIC`` row the interval the rule stopped on, at
    its level (:func:`_stopped_row`). The rows of the ``family`` pairs (the treatments; every pair when None) on the
    headline metrics are judged together by Holm's step-down (:func:`kit.stats.holm`, docs/method.md#family), a
    stopped row never at a level below its own. ``options`` go to :func:`kit.stats.ratio`.
    """
    batches = sorted(trials["batch"].astype(str).unique())
    stopped = stopped or {}
    rows: list[tuple[stats.Comparison, pd.DataFrame]] = []
    for arm, base in pairs:
        for metric in dict.fromkeys([*stats.HEADLINE_METRICS, *metrics_used]):
            if metric == STOP_METRIC and (arm, base) in stopped:
                rows.append((_stopped_row(trials, stopped[arm, base], options), trials))
            elif len(batches) < 2 or metric not in CACHE_METRICS:
                rows.append((stats.ratio(trials, metric, arm, base, **options), trials))
            else:
                for batch in batches:
                    one = trials[trials["batch"].astype(str) == batch]
                    if {arm, base} <= set(one["arm"]):
                        row = stats.ratio(one, metric, arm, base, **options)
                        rows.append((msgspec.structs.replace(row, from_batch=batch), one))
    judged = {tuple(p) for p in (pairs if family is None else family)}
    members = [i for i, (r, _) in enumerate(rows) if (r.arm, r.baseline) in judged and r.metric in FAMILY_METRICS]
    sources = {id(r): t for r, t in rows}

    def again(row: stats.Comparison, level: float) -> stats.Comparison:
        floor = row.confidence if row.looks else 0.0  # the stop rule's interval is the narrowest it may publish
        return stats.ratio(
            sources[id(row)], row.metric, row.arm, row.baseline, **{**options, "confidence": max(level, floor)}
        )

    adjusted = stats.holm([rows[i][0] for i in members], again, confidence=options.get("confidence", 0.95))
    out = [r for r, _ in rows]
    for i, row in zip(members, adjusted, strict=True):
        out[i] = row
    return pd.DataFrame([msgspec.structs.asdict(r) for r in out])


class Stopped(NamedTuple):
    """The stop rule's last look at one comparison of a batch it grew, and whether its interval is the anytime-valid
    one (``exclude_one``, unless the batch stopped on width)."""

    decision: Decision
    anytime: bool


def _stop_decisions(manifests: list[Manifest]) -> dict[tuple[str, str], Stopped]:
    """The stop rule's last decision per (arm, baseline) of a batch it grew, where the decision records its level;
    none across several batches (pooled, they are not the sequence the rule looked at)."""
    if len(manifests) != 1 or not isinstance(manifests[0].stop_rule, StopRule):
        return {}
    exclude_one = bool((manifests[0].params.stop or {}).get("exclude_one"))
    last = {(d.arm, d.baseline): d for d in manifests[0].stop_rule.decisions}
    return {
        pair: Stopped(d, exclude_one and not d.reason.startswith("precision reached"))
        for pair, d in last.items()
        if d.confidence is not None
    }


def _stopped_row(trials: pd.DataFrame, stop: Stopped, options: dict) -> stats.Comparison:
    """The ``STOP_METRIC`` row of a pair the stop rule grew: the interval the rule stopped on, at its level at the last
    look (the anytime-valid one with ``exclude_one``), not the fixed-n 95% one, which after looking until it
    excluded 1 claimed a difference in 6.5-8.4% of batches without one (docs/method.md#planning)."""
    d = stop.decision
    row = stats.ratio(trials, STOP_METRIC, d.arm, d.baseline, **{**options, "confidence": d.confidence})
    looks = f"{d.look} look" + "s" * (d.look != 1)
    if stop.anytime:
        said = f"anytime-valid over {looks} ({d.confidence:.2%} interval at the last)"
    else:
        said = f"the precision stop's {d.confidence:.0%} interval over {looks} (it stopped on its width)"
    return msgspec.structs.replace(row, looks=d.look, note="; ".join(n for n in (said, row.note) if n))


def observed(trials: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """One point per batch: both arms' observed hit rates and the uncached and total ratios."""
    rows = []
    ok = stats.finished(trials)
    for batch, g in ok.groupby("batch", sort=True):
        ga, gb = g[g["arm"] == a], g[g["arm"] == b]
        if ga.empty or gb.empty:
            continue
        rows.append(
            {
                "batch": batch,
                "arm_a": a,
                "arm_b": b,
                "hit_rate_a": stats.hit_rate(ga),
                "hit_rate_b": stats.hit_rate(gb),
                "uncached_ratio": ga["uncached_input_tokens"].mean() / gb["uncached_input_tokens"].mean(),
                "total_ratio": ga["total_tokens"].mean() / gb["total_tokens"].mean(),
            }
        )
    return pd.DataFrame(
        rows, columns=["batch", "arm_a", "arm_b", "hit_rate_a", "hit_rate_b", "uncached_ratio", "total_ratio"]
    )


class Options(msgspec.Struct, frozen=True, kw_only=True):
    """How the analysis computes (the analyze notebook's parameters besides the batches and the comparisons)."""

    n_resamples: int = 10_000
    confidence: float = 0.95
    allow_stitch: bool = False
    warmth_levels: int = 21
    window_tokens: int = 200_000
    seed: int = 0
    quality_margin: float = stats.QUALITY_MARGIN


def analyze_batches(
    batch_dirs: list[Path],
    *,
    baseline: str | None = None,
    comparisons: list[list[str]] | None = None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    allow_stitch: bool = False,
    warmth_levels: int = 21,
    window_tokens: int = 200_000,
    seed: int = 0,
    quality_margin: float = stats.QUALITY_MARGIN,
    out_dir: Path | None = None,
) -> Analysis:
    """Compute and write ``analysis/*.csv`` (into the first batch unless ``out_dir``), holding that batch's
    lock (``kit.experiment.lock``) while it does. Without ``baseline`` and ``comparisons`` the ones the batch
    stored are reused (:func:`choose`)."""
    options = Options(
        n_resamples=n_resamples,
        confidence=confidence,
        allow_stitch=allow_stitch,
        warmth_levels=warmth_levels,
        window_tokens=window_tokens,
        seed=seed,
        quality_margin=quality_margin,
    )
    with nullcontext() if out_dir is not None else batch_lock(Path(batch_dirs[0])):
        folder = Path(out_dir) if out_dir else BatchDir(Path(batch_dirs[0])).analysis
        return _analyze(load(batch_dirs), folder, baseline, comparisons, options)


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    """The comparisons an analysis makes: the baseline, the [arm, baseline] pairs in the report's order, and where
    they came from (``Design.comparisons_from``)."""

    baseline: str
    pairs: list[list[str]]
    source: str

    @property
    def treatments(self) -> list[tuple[str, str]]:
        """The pairs that compare treatments (neither side a control): what savings and warmth checks take."""
        return [(a, b) for a, b in self.pairs if a not in self.controls and b not in self.controls]

    controls: list[str] = []


def choose(
    folder: Path, manifests: list[Manifest], design: Design, baseline: str | None, comparisons: list[list[str]] | None
) -> Choice:
    """The baseline and comparisons: as given; else as the batch stored them, so that an analysis run again
    without its parameters file compares what the first one did (the terse example's headline had become baseline
    vs terse): the analysis folder's last ``design.json``, else the run's parameters (``manifest.json``, the first
    batch's ``baseline``), else every arm against the first isolated arm. A stored value that no longer fits the
    batches is refused with where it came from."""
    source = "given" if baseline is not None or comparisons is not None else "default"
    if source == "default":
        stored = decode_design((folder / DESIGN_JSON).read_bytes())[0] if (folder / DESIGN_JSON).is_file() else None
        if stored is not None and stored.baseline is not None:
            baseline, source = stored.baseline, f"analysis/{DESIGN_JSON}"
            comparisons = None if isinstance(stored.comparisons, msgspec.UnsetType) else stored.comparisons
        elif manifests[0].params.baseline is not None:
            baseline, source = manifests[0].params.baseline, "manifest.json"
    arms, controls = list(design.arms), design.control_arms
    try:
        if baseline is None and comparisons:
            baseline = comparisons[0][1]
        base = _baseline(baseline, arms, controls)
        pairs = check_comparisons(comparisons, base, arms)
        leaning = [b for _, b in pairs if b in controls]
        if leaning:
            problem = f"{leaning[0]!r} is the non-isolated control; it is compared with a baseline, never one"
            raise ParamError("comparisons", problem, [a for a in arms if a not in controls])
    except ParamError as exc:
        if source in ("given", "default"):
            raise
        raise ParamError(exc.name, f"{exc} (stored in {source}; pass baseline or comparisons)", arms) from None
    return Choice(baseline=base, pairs=pairs, source=source, controls=list(controls))


def _analyze(
    data: Inputs, folder: Path, baseline: str | None, comparisons: list[list[str]] | None, options: Options
) -> Analysis:
    design = design_of(data.manifests)
    choice = choose(folder, data.manifests, design, baseline, comparisons)
    per_request = structural_requests(data.segments)
    trials = _priced(_structural(data.trials, per_request), data.requests, per_request)
    design = msgspec.structs.replace(
        design,
        shared_first_prefix_tokens=shared_first_prefix(data.segments, data.trials),
        first_requests=metrics.first_requests(data.requests, data.trials),
        unable_arms=metrics.unable_arms(data.trials),
        baseline=choice.baseline,
        comparisons=choice.pairs,
        comparisons_from=choice.source,
    )
    metrics_used = [*RATIO_METRICS, *[c for c in PRICED if trials[c].notna().any()]]
    if trials["grade"].notna().any():
        metrics_used.append("grade")
    pairs = [(a, b) for a, b in choice.pairs]
    ratios = compare(
        trials, pairs, metrics_used, choice.treatments, _stop_decisions(data.manifests),
        matched=matched_runs(data.manifests), confidence=options.confidence, n_resamples=options.n_resamples,
        seed=options.seed, allow_stitch=options.allow_stitch,
    )  # fmt: skip
    ratios["simulated"] = design.simulated
    per_trial_occupancy = occupancy.measure(
        data.requests, data.tool_results, events=data.events, window_tokens=options.window_tokens
    )
    invariance = _warmth_invariance(trials, choice.treatments, options.confidence)
    tables = {
        **_occupancy_tables(per_trial_occupancy, choice.baseline, options),
        **_warmth_tables(data.segments, trials, choice.treatments, design.profile, options),
        "trials": trials,
        "ratios": ratios,
        "arms": metrics.arm_summary(
            trials, metrics_used, options.confidence, options.seed, n_resamples=options.n_resamples
        ),
        "headline": metrics.headline(trials, choice.baseline, ratios, confidence=options.confidence, seed=options.seed),
        "savings": _savings(trials, choice.treatments, options) if matched_runs(data.manifests) else _NO_SAVINGS,
        "warmth_invariance": invariance,
        "quality": quality(trials, choice.treatments, margin=options.quality_margin, confidence=options.confidence),
    }
    warnings = _warnings(design) + trials.attrs.get("pricing_warnings", [])
    warnings += occupancy_block.warnings(per_trial_occupancy)
    warnings += [
        f"uncached {r['arm']} vs {r['baseline']}: {r['verdict']}" + (f" ({r['reason']})" if r["reason"] else "")
        for r in invariance.to_dict("records")
        if r["n_batches"] >= 2
    ]
    _write(tables, design, warnings, folder)
    block = occupancy_block.for_batch(folder)  # the tables' own numbers, as the report quotes them
    return Analysis(
        design=design, warnings=warnings, window_tokens=options.window_tokens, occupancy_block=block, **tables
    )


def _warmth_tables(
    segments: pd.DataFrame, trials: pd.DataFrame, pairs: list[tuple[str, str]], profile: str | None, options: Options
) -> dict[str, pd.DataFrame]:
    """The warmth sweep and each batch's observed point, for every comparison of treatments (docs/method.md#warmth).

    Trial ids repeat across batches (``r00-placebo`` in each), so the replay keys each trial by its batch: each
    trial its own cache domain."""
    sweep = segments.assign(
        segments=segments["segments_json"].map(orjson.loads),
        trial_id=segments["batch"].astype(str) + "/" + segments["trial_id"].astype(str),
    )
    warmth = cachemodel.warmth_sweeps(
        sweep, pairs, levels=options.warmth_levels, profile=profile or "openai-implicit", seed=options.seed
    )
    points = [observed(trials, a, b) for a, b in pairs]
    return {"warmth": warmth, "observed": pd.concat(points, ignore_index=True) if points else observed(trials, "", "")}


def _baseline(baseline: str | None, arms: list[str], controls: list[str]) -> str:
    """The baseline: the one given, else the first arm that is not a control. A control ran without isolation, so
    every ratio against it would carry its contamination: refused as a baseline (docs/method.md#controls)."""
    isolated = [a for a in arms if a not in controls]
    if baseline is not None and baseline in controls:
        problem = f"{baseline!r} is the non-isolated control; it is compared with the baseline, never used as one"
        raise ParamError("baseline", problem, isolated)
    if len(isolated) < 2:
        raise ParamError("arms", f"{len(isolated)} isolated arm(s) beside the control(s) {controls}", "two or more")
    return check_baseline(baseline, isolated if baseline is None else arms)


def _occupancy_tables(per_trial: pd.DataFrame, baseline: str, options: Options) -> dict[str, pd.DataFrame]:
    """Occupancy per arm, per trial, and each arm's tool residual against the baseline's file access."""
    return {
        "occupancy": occupancy.arm_means(per_trial),
        "occupancy_trials": per_trial,
        "occupancy_comparison": occupancy_block.comparisons(
            per_trial, baseline, confidence=options.confidence, n_resamples=options.n_resamples, seed=options.seed
        ),
    }


_TABLES: tuple[str, ...] = ("trials", "ratios", "arms", "headline", "warmth", "observed", "occupancy")
_TABLES += ("occupancy_trials", "occupancy_comparison", "warmth_invariance", "savings", "quality")


def _write(tables: dict[str, pd.DataFrame], design: Design, warnings: list[str], folder: Path) -> None:
    """``<table>.csv`` for every table, and ``design.json`` (the design, with the baseline, and the warnings),
    into the analysis folder (a batch's ``analysis/``, or ``out_dir``)."""
    for name in _TABLES:
        write_table(folder / f"{name}.csv", tables[name])
    write_design(folder, design, warnings)


def savings(
    trials: pd.DataFrame, baseline: str, others: list[str], *, confidence: float, n_resamples: int, seed: int
) -> pd.DataFrame:
    """The per-prompt savings ``1 - arm/baseline`` (docs/method.md#savings), one prompt per run index (the
    question-bank packs ask question i in run i of every arm), for output and total tokens: median/mean/min/max/stdev
    across runs plus a bootstrap CI on the mean. The analysis calls it for prompt banks only (:func:`_savings`)."""
    ok = stats.finished(trials)
    rows = []
    for arm in others:
        for metric in ("output_tokens", "total_tokens"):
            values = ok.rename(columns={"run": "prompt", metric: "value"})[["prompt", "arm", "value"]]
            values = values[values["arm"].isin([arm, baseline])].astype({"value": "Float64"})
            if values["value"].notna().sum() < 2:
                continue
            savings = stats.per_prompt_savings(
                values, arm, baseline, confidence=confidence, n_resamples=n_resamples, seed=seed
            )
            rows.append({"arm": arm, "baseline": baseline, "metric": metric, **msgspec.structs.asdict(savings)})
    return pd.DataFrame(rows)


_NO_SAVINGS = pd.DataFrame(
    columns=["arm", "baseline", "metric", *(f for f in stats.Savings.__struct_fields__ if f != "arm")]
)


def _savings(trials: pd.DataFrame, pairs: list[tuple[str, str]], options: Options) -> pd.DataFrame:
    """:func:`savings` for every comparison of treatments, grouped by their baseline. Only for a prompt bank
    (:func:`matched_runs`): with one prompt repeated, run i of one arm has nothing to do with run i of another, so
    savings "per run" would pair trials by an index that means nothing (issue #30 item 6); the one prompt's saving
    is 1 − the ratio the headline gives."""
    frames = []
    for base in dict.fromkeys(b for _, b in pairs):
        others = [a for a, b in pairs if b == base]
        frames.append(
            savings(
                trials, base, others, confidence=options.confidence, n_resamples=options.n_resamples, seed=options.seed
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def quality(trials: pd.DataFrame, pairs: list[tuple[str, str]], *, margin: float, confidence: float) -> pd.DataFrame:
    """``analysis/quality.csv``: each treatment's grade against its baseline's, the non-inferiority gate the headline
    states beside the efficiency claim (``kit.stats.quality_gate``, docs/method.md#grading)."""
    rows = [stats.quality_gate(trials, a, b, margin=margin, confidence=confidence) for a, b in pairs]
    columns = list(stats.QualityGate.__struct_fields__)
    return pd.DataFrame([msgspec.structs.asdict(r) for r in rows], columns=columns)


def _warmth_invariance(trials: pd.DataFrame, pairs: list[tuple[str, str]], confidence: float) -> pd.DataFrame:
    """docs/method.md#replication: does each uncached ratio move with the batches' hit rates? (needs >= 3 batches)."""
    keys = ["arm", "baseline", "n_batches", "slope", "slope_lower", "slope_upper", "slope_df", "dependence",
            "batches_to_tell", "has_control", "control_hit_rate", "isolated_hit_rate", "claim_ok", "reason",
            "verdict"]  # fmt: skip
    rows = [stats.warmth_invariance(trials, arm, base, confidence=confidence) for arm, base in pairs]
    return pd.DataFrame([{k: getattr(r, k) for k in keys} for r in rows], columns=keys)


def matched_runs(manifests: list[Manifest]) -> bool:
    """Whether run i asked the same question in every arm: the pack has a bank of prompts (``n_prompts`` > 1).

    Only then may trials pair by run (docs/method.md#intervals); a single prompt repeated makes runs
    independent, and pairing them by index widens the interval for nothing.
    """
    return all(m.n_prompts > 1 for m in manifests)


def _warnings(design: Design) -> list[str]:
    """Warnings the report cannot derive from the tables (it adds simulation, small-n, stitch itself): the
    schedule, and what the run stage knew before any trial (``manifest["warnings"]``, such as a model offered only
    a long prompt-cache retention, docs/method.md#retention), which no table records."""
    out = []
    if "BLOCKED" in design.schedule:
        out.append("Blocked schedule: arms ran in separate time blocks, so provider-cache drift is confounded.")
    return out + list(design.run_warnings)
