"""Many batch folders side by side, for people comparing runs in JupyterLab (``notebooks/explore.ipynb``).

Why: one batch's uncached ratio is one point on a warmth curve (docs/method.md#warmth); only several batches,
drawn on the same curve, show where each happened to sample it. So this module loads any number of
analysed batch folders by glob into one set of tables (each row keeps its ``batch``), puts every
batch's observed point on one replayed curve, and shows the same figure of each batch in a row.
Ratios across batches go through :func:`kit.stats.ratio`, so the stitch guard holds here too: arms
that never shared a batch raise :class:`kit.stats.StitchError` unless ``allow_stitch`` is passed, and
then the row is labelled a cross-run stitch.
The lean committed examples (``make examples``) are :mod:`kit.cli.examples`'s job.
"""

from __future__ import annotations

import functools
import glob
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import orjson
import pandas as pd
from matplotlib.figure import Figure

from kit import charts, stats
from kit.analysis import cachemodel
from kit.errors import InputError
from kit.experiment.layout import ROOT, BatchDir
from kit.files import read_csv_as_written
from kit.records import Design

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "TABLES",
    "Batches",
    "comparisons",
    "cross_ratios",
    "load",
    "overview",
    "show_figures",
    "show_warmth",
    "warmth_figure",
    "warmth_pairs",
]

TABLES = ("trials", "ratios", "headline", "arms", "observed", "warmth")


# ---------------------------------------------------------------- loading many batches


@dataclass(frozen=True)
class Batches:
    """Analysed batch folders, keyed by batch id, with their tables concatenated (every row has ``batch``)."""

    folders: dict[str, Path]
    designs: dict[str, Design]
    tables: dict[str, pd.DataFrame]

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    @property
    def ids(self) -> list[str]:
        return list(self.folders)


def _batch_folders(pattern: str | Path | Sequence[str | Path], root: str | Path | None = None) -> list[Path]:
    """Analysed batch folders (holding ``analysis/design.json``) matching one or more globs, sorted.

    A relative glob is tried against ``root`` (default: the working directory) and then against the
    repository, so the notebook's default ``outputs/examples/*`` works from ``notebooks/`` in JupyterLab.
    """
    patterns = [pattern] if isinstance(pattern, str | Path) else list(pattern)
    bases = [Path(root) if root else Path.cwd(), ROOT]
    found: set[Path] = set()
    for p in map(str, patterns):
        for base in [Path("/")] if os.path.isabs(p) else bases:
            hits = {Path(h).resolve() for h in glob.glob(str(base / p))}
            hits = {h for h in hits if BatchDir(h).design.is_file()}
            if hits:
                found |= hits
                break
    if not found:
        raise InputError(
            f"parameter 'batch_glob': {pattern!r} matches no analysed batch folder (one holding analysis/design.json) "
            f"under {bases[0]} or {ROOT}; accepted: a glob such as 'outputs/examples/*'"
        )
    return sorted(found)


def _batch_id(design: Design) -> str:
    return "+".join(design.batch) if isinstance(design.batch, list) else design.batch


def _read_folder(folder: Path) -> tuple[Design, dict[str, pd.DataFrame]]:
    bd = BatchDir(folder)
    design, _warnings = bd.read_design()
    frames = {}
    for name in TABLES:
        path = bd.analysis_csv(name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run the analyze stage on {folder} again")
        # ratios.csv: an empty label means "not a stitch", not missing (as kit.stages.plot reads it)
        frames[name] = read_csv_as_written(path) if name == "ratios" else pd.read_csv(path)
    return design, frames


def load(pattern: str | Path | Sequence[str | Path], root: str | Path | None = None) -> Batches:
    """Every analysed batch folder matching ``pattern``: designs and concatenated tables.

    Tables without their own ``batch`` column (ratios, headline, arms, warmth) get the folder's batch id;
    trials and observed keep theirs. A trial read from two folders raises rather than counting twice.
    """
    folders: dict[str, Path] = {}
    designs: dict[str, Design] = {}
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for folder in _batch_folders(pattern, root):
        design, frames = _read_folder(folder)
        bid = _batch_id(design)
        if bid in folders:
            raise InputError(f"batch {bid!r} is in two folders, {folders[bid]} and {folder}; glob only one of them")
        folders[bid], designs[bid] = folder, design
        for name, frame in frames.items():
            if "batch" not in frame.columns:
                frame.insert(0, "batch", bid)
            parts[name].append(frame)
    tables = {name: pd.concat(frames, ignore_index=True) for name, frames in parts.items()}
    twice = tables["trials"][tables["trials"].duplicated(["batch", "trial_id"], keep=False)]
    if len(twice):
        first = twice.iloc[0]
        raise InputError(
            f"trial {first['batch']}/{first['trial_id']} is read from more than one folder (a batch analysed "
            "alone and inside a multi-batch analysis?); glob only one of them"
        )
    return Batches(folders, designs, tables)


# ---------------------------------------------------------------- tables


def overview(b: Batches) -> pd.DataFrame:
    """One row per (batch, comparison): total and uncached ratios apart, uncached with its hit rates."""
    r = b["ratios"]
    rows = []
    for (batch, comparison), g in r.groupby(["batch", "comparison"], sort=True):
        design = b.designs.get(batch)
        by_metric = {m: row for m, row in g.set_index("metric").iterrows()}
        row = {
            "batch": batch,
            "task": design.task if design else None,
            "comparison": comparison,
            "schedule": design.schedule if design else None,
            "isolation": design.isolation if design else None,
            "simulated": design.simulated if design else None,
        }
        for metric, short in (("total_tokens", "total"), ("uncached_input_tokens", "uncached")):
            m = by_metric.get(metric)
            row |= {f"{short}_ratio": None, f"{short}_lower": None, f"{short}_upper": None}
            if m is not None:
                row |= {f"{short}_ratio": m["estimate"], f"{short}_lower": m["lower"], f"{short}_upper": m["upper"]}
                row |= {"n_arm": m["n_arm"], "n_baseline": m["n_baseline"]}
                if metric == "uncached_input_tokens":
                    row |= {"hit_rate_arm": m["hit_rate_arm"], "hit_rate_baseline": m["hit_rate_baseline"]}
        rows.append(row)
    return pd.DataFrame(rows)


def comparisons(b: Batches) -> list[tuple[str, str]]:
    """Every (arm, baseline) pair some batch compared, in first-seen order."""
    pairs = b["ratios"][["arm", "baseline"]].astype(str).drop_duplicates()
    return list(pairs.itertuples(index=False, name=None))


def cross_ratios(
    b: Batches,
    metrics: Sequence[str] = ("total_tokens", "uncached_input_tokens"),
    pairs: Sequence[Sequence[str]] | None = None,
    *,
    allow_stitch: bool = False,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Ratios over all loaded batches that hold both arms (a t over the batches' means), via :func:`kit.stats.ratio`.

    ``pairs`` defaults to every comparison some batch made. A pair whose arms never shared a batch raises
    :class:`kit.stats.StitchError` unless ``allow_stitch``; then its rows say "cross-run stitch".
    """
    pairs = comparisons(b) if pairs is None else [tuple(map(str, p)) for p in pairs]
    ratio = functools.partial(
        stats.ratio, b["trials"], allow_stitch=allow_stitch, confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    rows = [msgspec.structs.asdict(ratio(metric, arm, base)) for arm, base in pairs for metric in metrics]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- figures


def _pair(b: Batches, arm_a: str | None, arm_b: str | None) -> tuple[str, str]:
    present = warmth_pairs(b)
    if arm_a is not None and arm_b is not None:
        return str(arm_a), str(arm_b)
    if len(present) == 1:
        return present[0]
    raise InputError(
        f"parameters 'arm_a'/'arm_b': the loaded batches compare several pairs; accepted: one of {present}"
    )


def _merged_design(b: Batches, batches: list[str], arms: tuple[str, str]) -> tuple[Design, dict[str, int]]:
    """What the cross-batch figure states: the batches, their schedules and isolations (the first batch's
    design for the rest), and n per arm as the loaded trials count it."""
    designs = [b.designs[x] for x in batches]
    schedule = "; ".join(dict.fromkeys(d.schedule for d in designs)) or "not given"
    isolation = "; ".join(dict.fromkeys(d.isolation for d in designs)) or "not given"
    trials = b["trials"]
    ok = stats.finished(trials)
    ok = ok[ok["batch"].isin(batches) & ok["arm"].isin(arms)]
    merged = msgspec.structs.replace(
        designs[0],
        batch=batches,
        arms=list(arms),
        schedule=schedule,
        isolation=isolation,
        simulated=any(d.simulated for d in designs),
    )
    return merged, {arm: int((ok["arm"] == arm).sum()) for arm in arms}


def _pooled_warmth(b: Batches, arms: tuple[str, str], batches: list[str], seed: int = 0) -> pd.DataFrame:
    """The warmth sweep replayed over the recorded requests of several batches together (one curve).

    Trial ids repeat across batches (r00-placebo …), so they are prefixed with the batch; each trial
    stays its own cache domain, as in :func:`kit.stages.analyze.analyze_batches`.
    """
    profiles = {b.designs[x].profile or "openai-implicit" for x in batches}
    if len(profiles) != 1:
        raise InputError(f"pooled warmth: the batches use different cache profiles {sorted(profiles)}; pool one")
    segments = pd.concat(
        [pd.read_parquet(BatchDir(b.folders[x]).table("segments")) for x in batches], ignore_index=True
    )
    segments = segments.assign(
        trial_id=segments["batch"].astype(str) + "/" + segments["trial_id"].astype(str),
        segments=segments["segments_json"].map(orjson.loads),
    )
    levels = int(b["warmth"].groupby("batch")["survival"].count().max())
    return cachemodel.warmth_sweep(segments, arms, levels=levels, profile=profiles.pop(), seed=seed)


def warmth_figure(
    b: Batches, arm_a: str | None = None, arm_b: str | None = None, curve: str | None = None, seed: int = 0
) -> Figure:
    """One replayed warmth curve with EVERY loaded batch's observed point for the same pair of arms.

    ``curve``: a batch id (that batch's replayed curve), ``"pooled"`` (all those batches replayed
    together), or None (the first batch, sorted). Batches comparing another pair are left out, and the
    figure says so in its legend; they have their own curve.
    """
    arm_a, arm_b = _pair(b, arm_a, arm_b)
    observed = b["observed"]
    observed = observed[(observed["arm_a"].astype(str) == arm_a) & (observed["arm_b"].astype(str) == arm_b)]
    warmth = b["warmth"][(b["warmth"]["arm_a"].astype(str) == arm_a) & (b["warmth"]["arm_b"].astype(str) == arm_b)]
    with_curve = sorted(set(warmth["batch"]))
    points = sorted(set(observed["batch"].astype(str)))
    if not with_curve:
        raise InputError(f"no loaded batch has a warmth sweep of {arm_a} / {arm_b}; pairs: {comparisons(b)}")
    if curve == "pooled":
        source, warmth = f"pooled over {len(with_curve)} batches", _pooled_warmth(b, (arm_a, arm_b), with_curve, seed)
    else:
        curve = curve or with_curve[0]
        if curve not in with_curve:
            raise InputError(f"parameter 'curve': {curve!r} has no {arm_a}/{arm_b} sweep; accepted: {with_curve}")
        source, warmth = f"batch {curve}", warmth[warmth["batch"] == curve]
    design, n = _merged_design(b, points or with_curve, (arm_a, arm_b))
    fig = charts.warmth_vs_ratio(warmth, observed, design, n=n)
    ax = fig.axes[0]
    for line in ax.lines:
        label = str(line.get_label())
        if label.startswith("replayed"):
            line.set_label(f"{label} — curve: {source}")
    others = len(b.ids) - len(points)
    handles, labels = ax.get_legend_handles_labels()
    title = f"{others} loaded batch(es) compare other arms: not drawn" if others else None
    ax.legend(handles, labels, loc="best", fontsize=8, title=title, title_fontsize=7)
    return fig


def warmth_pairs(b: Batches) -> list[tuple[str, str]]:
    """The (arm_a, arm_b) pairs some loaded batch has a warmth sweep of."""
    pairs = b["warmth"][["arm_a", "arm_b"]].astype(str).drop_duplicates()
    return list(pairs.itertuples(index=False, name=None))


def _warmth_figures(b: Batches, curve: str | None = None, seed: int = 0) -> list[Figure]:
    """:func:`warmth_figure` for every pair of arms with a sweep. A ``curve`` batch id applies to the
    pairs that batch has; the others take their first batch's curve (each figure names its curve)."""
    figures = []
    for arm_a, arm_b in warmth_pairs(b):
        has = b["warmth"][(b["warmth"]["arm_a"].astype(str) == arm_a) & (b["warmth"]["arm_b"].astype(str) == arm_b)]
        use = curve if curve == "pooled" or curve in set(has["batch"]) else None
        figures.append(warmth_figure(b, arm_a, arm_b, use, seed))
    return figures


def show_warmth(b: Batches, curve: str | None = None, seed: int = 0) -> None:
    """Display :func:`_warmth_figures` as PNG (a bare ``Figure`` has no notebook formatter without pyplot)."""
    from IPython.display import Image, display

    for fig in _warmth_figures(b, curve, seed):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        display(Image(data=buffer.getvalue()))


def _figure_paths(b: Batches, name: str) -> dict[str, Path]:
    """The same figure (``figures/<name>.png``) of every loaded batch that has it."""
    paths = {bid: BatchDir(folder).figure(name) for bid, folder in b.folders.items()}
    return {bid: p for bid, p in paths.items() if p.is_file()}


def show_figures(b: Batches, name: str) -> None:
    """Display one figure of every batch in turn, each under its batch id (notebook use)."""
    from IPython.display import Image, Markdown, display

    paths = _figure_paths(b, name)
    if not paths:
        display(Markdown(f"_No loaded batch has `figures/{name}.png`._"))
    for bid, png in paths.items():
        display(Markdown(f"**{bid}** — `{name}`"), Image(filename=str(png)))
