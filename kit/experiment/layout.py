"""The batch folder: where each stage reads and writes.

``outputs/<batch>/`` holds ``manifest.json``, ``raw/<trial_id>/`` (never modified after its
trial), ``tables/``, ``analysis/``, ``figures/``, the executed notebooks and ``report.md``.
Every write goes through ``kit.files`` (a temporary name renamed into place), so a crash never leaves a
half-written table or manifest behind.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pandas as pd

from kit.errors import InputError
from kit.experiment.design import ParamError
from kit.files import read_csv_as_written, write_json
from kit.names import child
from kit.records import (
    AnalysisFiles,
    Design,
    Manifest,
    TrialMeta,
    decode_design,
    decode_manifest,
    decode_trial_meta,
)

ROOT = Path(__file__).resolve().parents[2]  # kit/experiment/layout.py -> the repository root
STAGES = ("run", "parse", "analyze", "plot")  # a batch folder holds each stage's executed <stage>.ipynb
DESIGN_JSON = "design.json"  # in the analysis folder: the analyze stage's design, warnings and baseline
TRIAL_META = "meta.json"  # in a trial folder, written last: its presence marks the trial complete
PROVIDER_LOG = "provider_log.jsonl"  # in a trial folder: the trial's lines of the provider's request log
BATCH_LOG = Path("raw") / "_provider" / "requests.jsonl"  # in a batch folder: the request log of every trial


@dataclass(frozen=True)
class TrialDir:
    """A trial folder, ``raw/<trial_id>/``: the one place its files are named. The run stage writes them (``meta.json``
    last); the parse stage and ``kit.transcripts.sources`` read them. The backend's own transcripts are named by
    the backend and listed in ``meta.json`` (``transcripts``); ``transcripts`` finds those present."""

    root: Path

    @property
    def meta(self) -> Path:
        """``meta.json``, the trial's record (``kit.records.TrialMeta``)."""
        return self.root / TRIAL_META

    @property
    def provider_log(self) -> Path:
        """The provider's request-log lines of this trial, copied out of the batch's log by the run stage."""
        return self.root / PROVIDER_LOG

    @property
    def answer(self) -> Path:
        """``answer.md``: the agent's answers, one per turn."""
        return self.root / "answer.md"

    @property
    def error(self) -> Path:
        """``error.txt``: the traceback of a backend that raised instead of ending the trial."""
        return self.root / "error.txt"

    def is_complete(self) -> bool:
        """Whether the trial was recorded: the run stage writes meta.json last."""
        return self.meta.is_file()

    def read_meta(self) -> TrialMeta:
        """The trial's ``meta.json`` as a record: the one place it is decoded."""
        return _decoded(self.meta, decode_trial_meta)

    def transcripts(self, meta: TrialMeta) -> list[Path]:
        """The files ``meta.transcripts`` lists that are present, in its order (the backend's best first)."""
        return [self.root / name for name in meta.transcripts if (self.root / name).is_file()]


@dataclass(frozen=True)
class BatchDir:
    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def request_log(self) -> Path:
        """The provider's (or recording proxy's) request log of every trial of the batch."""
        return self.root / BATCH_LOG

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def analysis(self) -> Path:
        return self.root / "analysis"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def design(self) -> Path:
        """The analyze stage's ``design.json``: its presence marks an analysed batch."""
        return self.analysis / DESIGN_JSON

    @property
    def report_md(self) -> Path:
        return self.root / "report.md"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    def table(self, name: str) -> Path:
        """A parse-stage table: ``tables/<name>.parquet``."""
        return self.tables / f"{name}.parquet"

    def analysis_csv(self, name: str) -> Path:
        """An analyze-stage table: ``analysis/<name>.csv``."""
        return self.analysis / f"{name}.csv"

    def figure(self, name: str, suffix: str = ".png") -> Path:
        return self.figures / f"{name}{suffix}"

    def is_batch(self) -> bool:
        return self.manifest.is_file()

    def trial(self, trial_id: str) -> Path:
        """``raw/<trial_id>``, refused (``OutsideRoot``) unless the id is one path component inside ``raw/``."""
        return child(self.raw, trial_id)

    def trial_dir(self, trial_id: str) -> TrialDir:
        """The trial folder of ``trial_id`` (:meth:`trial`) and its files."""
        return TrialDir(self.trial(trial_id))

    def trial_dirs(self) -> list[Path]:
        """Completed trial folders (those with a meta.json), in name order."""
        if not self.raw.exists():
            return []
        return sorted(p for p in self.raw.iterdir() if p.is_dir() and (p / TRIAL_META).exists())

    def read_manifest(self) -> Manifest:
        """The batch's ``manifest.json`` as a record: the one place it is decoded."""
        return _decoded(self.manifest, decode_manifest)

    def read_design(self) -> tuple[Design, list[str]]:
        """The analyze stage's design and warnings (``analysis/design.json``): the one place it is decoded."""
        return _decoded(self.design, decode_design)

    def read_analysis(self) -> AnalysisFiles:
        """The analyze stage's files as the plot stage reads them: the one place they are read back."""
        if not self.design.exists():
            raise FileNotFoundError(f"{self.design}: missing; run the analyze stage on {self.root} first")
        design, warnings = self.read_design()

        def optional(name: str) -> pd.DataFrame:
            return pd.read_csv(self.analysis_csv(name)) if self.analysis_csv(name).exists() else pd.DataFrame()

        return AnalysisFiles(
            design=design,
            warnings=warnings,
            trials=pd.read_csv(self.analysis_csv("trials")),
            ratios=read_csv_as_written(self.analysis_csv("ratios")),
            headline=pd.read_csv(self.analysis_csv("headline")),
            warmth=pd.read_csv(self.analysis_csv("warmth")),
            observed=pd.read_csv(self.analysis_csv("observed")),
            arms=optional("arms"),
            savings=optional("savings"),
            occupancy=optional("occupancy"),
            occupancy_comparison=optional("occupancy_comparison"),
            quality=optional("quality"),
            requests=pd.read_parquet(self.table("requests")),
        )

    def read_trial_meta(self, trial_dir: Path) -> TrialMeta:
        """A completed trial's ``meta.json`` (``trial_dir`` from :meth:`trial_dirs`) as a record."""
        return TrialDir(trial_dir).read_meta()


_T = TypeVar("_T")


def _decoded(path: Path, decode: Callable[[bytes], _T]) -> _T:
    """``decode`` of the file's bytes; a file that is not what the kit writes is an error naming the file and the
    place inside it (``$.field``), never a traceback: raw records are read, not trusted."""
    try:
        return decode(path.read_bytes())
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise InputError(f"{path}: {error} (expected the {path.name} the run and analyze stages write)") from None


def write_record(path: Path, record: msgspec.Struct, mask: Callable[[Any], Any] | None = None) -> Path:
    """A record as JSON (its unset fields left out), through ``mask`` first if given: the run stage masks
    secrets in the manifest and a trial's meta.json (``kit.experiment.redact.redact``)."""
    obj = msgspec.to_builtins(record)
    return write_json(path, mask(obj) if mask else obj)


def write_design(folder: Path, design: Design, warnings: list[str]) -> Path:
    """``design.json`` in an analysis folder: the design's fields and the analysis warnings beside them (the
    plot stage reads both; :meth:`BatchDir.read_design` splits them again)."""
    return write_json(folder / DESIGN_JSON, {**msgspec.to_builtins(design), "warnings": warnings})


def from_root(path: str | Path) -> Path:
    """``path`` with a relative one taken from the repository root, not the working folder.

    JupyterLab starts a notebook's kernel in ``notebooks/``; papermill and ``kit batch`` start it in the
    root. Resolving here makes ``outputs_dir = "outputs"`` the same folder in both.
    """
    return ROOT / path  # an absolute path stays as it is


def shown(path: Path) -> str:
    """``path`` as a message shows it: relative to the repository root when inside it."""
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(full)


def _batches_in(outputs_dir: Path) -> list[str]:
    """The names of the batch folders (those with a manifest.json) directly under ``outputs_dir``."""
    return sorted(p.parent.name for p in outputs_dir.glob("*/manifest.json"))


def require_batch(path: Path, name: str = "batch_dir") -> Path:
    """``path`` if it is a batch folder; else a ``ParamError`` for parameter ``name`` listing the batches
    beside it, so a misspelled name is refused instead of reading nothing and writing empty tables."""
    if BatchDir(path).is_batch():
        return path
    here = _batches_in(path.parent)
    close = difflib.get_close_matches(path.name, here, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    accepted = f"a batch in {shown(path.parent)}: {', '.join(here)}" if here else f"none in {shown(path.parent)} yet"
    raise ParamError(name, f"{shown(path)} is not a batch folder (no manifest.json){hint}", accepted)


def batch_path(batch_dir: str | None, outputs_dir: str, batch: str | None) -> Path:
    """The batch folder a notebook works on: ``batch_dir`` if given, else ``outputs_dir/batch``, else the
    latest batch; relative paths from the repository root (``from_root``). It must hold a manifest."""
    if batch_dir:
        return require_batch(from_root(batch_dir), "batch_dir")
    if batch:
        return require_batch(from_root(outputs_dir) / batch, "batch")
    return latest_batch(from_root(outputs_dir))


def latest_batch(outputs_dir: Path) -> Path:
    """The most recently started batch under ``outputs_dir`` (interactive use: run, then parse …)."""
    found = sorted(outputs_dir.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ParamError("batch", f"missing and no batch under {shown(outputs_dir)!r}", "a batch name or batch_dir")
    return found[-1].parent


def batch_paths(
    batch_dirs: list[str] | None, outputs_dir: str, batch: str | None, batch_dir: str | None = None
) -> list[Path]:
    """Several batch folders (for cross-batch analysis), defaulting to the one batch."""
    if batch_dirs is None:
        return [batch_path(batch_dir, outputs_dir, batch)]
    if not isinstance(batch_dirs, list) or not batch_dirs:
        raise InputError("parameter 'batch_dirs': accepted: a non-empty list of batch folder paths, or None")
    return [require_batch(from_root(p), "batch_dirs") for p in batch_dirs]


def new_batch_id(task: str) -> str:
    """A new batch's folder name: the task and the UTC time it started (``batch-read-20261201-014530``)."""
    return f"{task}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"
