"""The plot stage: a batch's tables and analysis into figures and the report to attach.

Reads only files (``tables/``, ``analysis/``), so it re-runs alone on any committed batch folder.
A batch with nothing to compare (no trial succeeded, or none of one arm: the run stage's ``NoTrialSucceeded``)
has no analysis to read; for it the stage writes the report that says so from the trials' own records
(``kit.report.failed``), draws no figure, and ends with the run stage's error, so a notebook or ``kit batch``
stops on it as the run stage did (exit 1) rather than on a missing table.
Paths come back as the caller gave the folder (relative stays relative), so a notebook run from the
repository shows ``outputs/<batch>/report.md`` rather than one machine's absolute path.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kit import charts
from kit.errors import NoTrialSucceeded
from kit.experiment.layout import BatchDir, batch_path, shown
from kit.experiment.lock import batch_lock
from kit.records import AnalysisFiles, Design, Published
from kit.report import batch as report
from kit.report import failed

__all__ = [  # the stage's surface: what its notebook, the CLI and the other stages use
    "CODE_MODE_FIGURES",
    "FIGURES",
    "OCCUPANCY_FIGURES",
    "OCCUPANCY_TASKS",
    "Published",
    "batch_figures",
    "batch_path",
    "code_mode_ran",
    "failure_report",
    "figures_for",
    "headline_for",
    "occupancy_is_the_question",
    "publish",
    "report_path",
    "show",
    "shown",
]

# The figures the plot stage can draw (besides CODE_MODE_FIGURES); figures_for() picks those the batch needs.
FIGURES = (
    "warmth_vs_ratio",
    "ratio_forest",
    "arm_distributions",
    "cycle_growth",
    "occupancy_bars",
    "occupancy_comparison",
    "quality_parity",
)
OCCUPANCY_FIGURES = ("occupancy_bars", "occupancy_comparison")  # drawn only where occupancy is the question
OCCUPANCY_TASKS = frozenset({"occupancy"})
CODE_MODE_FIGURES = ("code_mode_cells",)  # after FIGURES, for batches whose trials ran Codex Code Mode cells


def occupancy_is_the_question(design: Design, occupancy: pd.DataFrame) -> bool:
    """Whether the batch asks about residual context occupancy, so the occupancy figure belongs in its report.

    The rule: the design's task is the occupancy task (``OCCUPANCY_TASKS``), or some arm left output of
    the kit's explore tool resident (an explore-vs-files comparison, whatever the task is called). Any
    batch with tool calls has *some* occupancy, so "nonzero occupancy" would draw it everywhere; in a
    batch-read or terse batch the question is the tokens per answer, and the figure would only distract.
    """
    if design.task in OCCUPANCY_TASKS:
        return True
    if occupancy.empty or not {"category", "tokens"} <= set(occupancy.columns):
        return False
    explore = occupancy[occupancy["category"].astype(str) == "explore tool"]
    return bool(pd.to_numeric(explore["tokens"], errors="coerce").fillna(0).gt(0).any())


def code_mode_ran(trials: pd.DataFrame) -> bool:
    """Whether some trial ran a Code Mode ``exec`` cell (Codex with ``code_mode``): only then do calls per
    cell say how an arm batched, so only then is the Code Mode figure drawn."""
    if "exec_cells" not in trials.columns:
        return False
    return bool(pd.to_numeric(trials["exec_cells"], errors="coerce").fillna(0).gt(0).any())


def _chosen(data: AnalysisFiles) -> tuple[str, ...]:
    return figures_for(data.design, data.occupancy) + (CODE_MODE_FIGURES if code_mode_ran(data.trials) else ())


def batch_figures(batch_dir: Path) -> tuple[str, ...]:
    """The figures the plot stage draws for an analysed batch folder: what its report must show, no more."""
    return _chosen(BatchDir(batch_dir).read_analysis())


def figures_for(design: Design, occupancy: pd.DataFrame) -> tuple[str, ...]:
    """The figures this batch's report shows, in ``FIGURES`` order."""
    wanted = set(FIGURES)
    if not occupancy_is_the_question(design, occupancy):
        wanted -= set(OCCUPANCY_FIGURES)
    return tuple(name for name in FIGURES if name in wanted)


def publish(batch_dir: Path) -> Published:
    """Draw the batch's figures (PNG + SVG) and write ``report.md``/``report.html``.

    Returns the report (the markdown path), the figures (name -> PNG) and the headline text. Figure
    files of a figure this batch no longer gets (see :func:`figures_for`) are removed, so a re-run
    leaves no stale figure beside the report. A batch with nothing to compare gets the report that says so
    and no figure, then ``NoTrialSucceeded`` (module docstring).
    """
    batch_dir = Path(batch_dir)
    with batch_lock(batch_dir):
        stopped = _failure_report(batch_dir)
        if stopped is not None:
            path, nothing = stopped
            raise NoTrialSucceeded(f"{nothing.message}; the report says so: {shown(path)}")
        return _publish(batch_dir)


def failure_report(batch_dir: Path) -> Path | None:
    """For a batch with nothing to compare, the report that says so (written, figures removed): its path; None,
    writing nothing, for a batch whose every arm has a finished trial. ``kit batch`` calls it when a stage stopped
    on such a batch before the plot stage could run."""
    batch_dir = Path(batch_dir)
    with batch_lock(batch_dir):
        stopped = _failure_report(batch_dir)
    return stopped[0] if stopped else None


def _failure_report(batch_dir: Path) -> tuple[Path, failed.NothingToCompare] | None:
    bd = BatchDir(batch_dir.resolve())
    if not bd.is_batch():
        return None
    trials = failed.outcomes(bd.root)
    if (trials["status"] == "ok").all():  # the common case, decided without the manifest
        return None
    manifest = bd.read_manifest()
    nothing = failed.nothing_to_compare(trials, manifest.params.arms)
    if nothing is None:
        return None
    for name in FIGURES + CODE_MODE_FIGURES:  # every figure needs finished trials: none is left from before
        for suffix in (".png", ".svg"):
            (bd.figures / f"{name}{suffix}").unlink(missing_ok=True)
    path = failed.write_failed_report(bd.root, manifest, trials, nothing)
    return batch_dir / path.name, nothing


def _publish(batch_dir: Path) -> Published:
    bd = BatchDir(batch_dir.resolve())
    d = bd.read_analysis()
    design = d.design
    draw = {
        "warmth_vs_ratio": lambda: charts.warmth_vs_ratio(d.warmth, d.observed, design),
        "ratio_forest": lambda: charts.ratio_forest(d.ratios, design),
        "arm_distributions": lambda: charts.arm_distributions(d.trials, design),
        "cycle_growth": lambda: charts.cycle_growth(d.requests, design),
        "occupancy_bars": lambda: charts.occupancy_bars(d.occupancy, design),
        "occupancy_comparison": lambda: charts.occupancy_comparison(d.occupancy_comparison, design),
        "quality_parity": lambda: charts.quality_parity(d.trials, design, d.arms),
        "code_mode_cells": lambda: charts.code_mode_cells(d.trials, design),
    }
    chosen = _chosen(d)
    saved = {}
    for name in FIGURES + CODE_MODE_FIGURES:
        if name in chosen:
            saved[name] = charts.save(draw[name](), bd.figures, name)[0]
            continue
        for suffix in (".png", ".svg"):
            (bd.figures / f"{name}{suffix}").unlink(missing_ok=True)
    path = report.write_report(
        bd.root,
        design=design,
        headline=d.headline,
        ratios=d.ratios,
        trials=d.trials,
        figures=saved,
        warnings=d.warnings,
        arms=d.arms,
        savings=d.savings,
        quality=d.quality,
    )
    return Published(
        report=batch_dir / path.name,
        figures={name: BatchDir(batch_dir).figures / png.name for name, png in saved.items()},
        headline=report.headline_text(d.headline, d.ratios, design, d.quality),
    )


def report_path(batch_dir: Path) -> Path | None:
    """The batch's ``report.md`` as a path relative to the current directory when it lies below it.

    For ``python -m kit batch`` to end with ``report: <path>``; None when the plot stage has not written
    one (a run that stopped before plotting).
    """
    path = BatchDir(Path(batch_dir).resolve()).report_md
    if not path.is_file():
        return None
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def show(published: Published) -> None:
    """Display the headline and every figure inline (for the executed notebook and its HTML)."""
    from IPython.display import Image, Markdown, display

    display(Markdown(published.headline.replace("\n", "\n\n")))
    for png in published.figures.values():
        display(Image(filename=str(png)))


def headline_for(batch_dir: Path) -> str:
    """The headline text and table of an analysed batch (what ``python -m kit batch`` prints)."""
    bd = BatchDir(Path(batch_dir))
    d = bd.read_analysis()
    return report.headline_text(d.headline, d.ratios, d.design, d.quality) + "\n\n" + d.headline.to_string(index=False)
