"""The report of a batch that has nothing to compare: no trial succeeded, or none of one arm.

Such a batch has no ratio, interval, warmth curve or per-arm distribution to draw (the analyze stage stops on
it), yet its reader still needs the report: why it failed, trial by trial. So this report is written from the
run stage's own records (each trial's ``meta.json``, the manifest), and its first lines say what happened:
``N of N trials failed: reasons``, the commonest reasons first with their counts, as the run stage says it when it
ends. No figure is drawn: each needs finished trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kit.experiment.layout import BatchDir
from kit.files import write_text
from kit.records import Manifest
from kit.report.batch import SIMULATION_BANNER, html_page, md_table

COLUMNS = ["trial_id", "arm", "run", "status", "reason"]


def outcomes(batch_dir: Path) -> pd.DataFrame:
    """One row per recorded trial (``COLUMNS``) from its ``meta.json``, in run then arm order."""
    bd = BatchDir(Path(batch_dir))
    rows = [bd.read_trial_meta(d) for d in bd.trial_dirs()]
    frame = pd.DataFrame([{c: getattr(m, c) for c in COLUMNS} for m in rows], columns=COLUMNS)
    return frame.sort_values(["run", "arm"], kind="stable").reset_index(drop=True)


def reasons(failed: pd.DataFrame, shown: int = 3) -> str:
    """The commonest distinct reasons, each with its count: ``2 × turn 1: …; 1 × …``."""
    counts = failed["reason"].fillna("").replace("", "no reason recorded").value_counts()
    listed = [f"{n} × {why}" for why, n in counts.head(shown).items()]
    more = len(counts) - shown
    return "; ".join(listed) + (f"; and {more} other reason(s)" if more > 0 else "")


@dataclass(frozen=True)
class NothingToCompare:
    """Why a batch has no comparison: ``what`` ("no trial succeeded", "no trial of arm 'x' succeeded"), how many
    trials failed and why; ``message`` is the run stage's ``NoTrialSucceeded`` text."""

    what: str
    failed: int
    reasons: str

    @property
    def message(self) -> str:
        return f"{self.what} ({self.failed} failed): {self.reasons}" if self.failed else f"{self.what} (none ran)"


def nothing_to_compare(trials: pd.DataFrame, arms: list[str]) -> NothingToCompare | None:
    """Whether the batch is left without a comparison: no trial succeeded, or no trial of one of ``arms``; None
    when every arm has a finished trial, or no trial is recorded at all (none may have run yet)."""
    if trials.empty:
        return None
    failed = trials[trials["status"] != "ok"]
    if len(failed) == len(trials):
        return NothingToCompare("no trial succeeded", len(failed), reasons(failed))
    for arm in arms:
        mine = trials[trials["arm"] == arm]
        if (mine["status"] != "ok").all():  # an arm with no recorded trial too
            return NothingToCompare(f"no trial of arm {arm!r} succeeded", len(mine), reasons(mine) if len(mine) else "")
    return None


def write_failed_report(batch_dir: Path, manifest: Manifest, trials: pd.DataFrame, nothing: NothingToCompare) -> Path:
    """``report.md`` and ``report.html`` for a batch with nothing to compare (module docstring); the markdown path."""
    bd = BatchDir(Path(batch_dir))
    failed = trials[trials["status"] != "ok"]
    p = manifest.params
    lines = [
        f"# Token-cost report: {manifest.batch}: {nothing.what}",
        "",
        f"**{len(failed)} of {len(trials)} trials failed: {reasons(failed)}.**",
        "",
        f"No comparison, interval or figure: {nothing.what}, so there is nothing to measure. Fix the "
        "cause, then run the batch again with `-p retry_failed True`: the failed trials are set aside and run "
        "again, the finished ones kept.",
        "",
    ]
    lines += [SIMULATION_BANNER, ""] if manifest.simulated else []
    unrecorded = manifest.trial_errors if isinstance(manifest.trial_errors, dict) else {}
    if unrecorded:
        listed = "; ".join(f"{t}: {why}" for t, why in sorted(unrecorded.items()))
        lines += [f"{len(unrecorded)} more trial(s) could not be recorded: {listed}.", ""]
    design = {
        "batch": manifest.batch, "status": manifest.status, "task": p.task, "arms": ", ".join(p.arms),
        "runs_per_arm": p.runs_per_arm, "backend": p.backend, "endpoint": p.endpoint,
        "upstream_url": p.upstream_url, "model": p.model, "started_at": manifest.started_at,
    }  # fmt: skip
    facts = pd.DataFrame([{"fact": k, "value": v} for k, v in design.items() if v is not None])
    lines += ["## Trials", "", md_table(trials), "", "## Design", "", md_table(facts), ""]
    markdown = "\n".join(lines)
    write_text(bd.report_md, markdown)
    write_text(bd.report_html, html_page(markdown, f"Token-cost report: {manifest.batch}"))
    return bd.report_md
