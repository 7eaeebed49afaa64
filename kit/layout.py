"""The batch folder: where each stage reads and writes, and how files are written safely.

``outputs/<batch>/`` holds ``manifest.json``, ``raw/<trial_id>/`` (never modified after its
trial), ``tables/``, ``analysis/``, ``figures/``, the executed notebooks and ``report.md``.
Every write goes to a temporary name and is renamed into place, so a crash never leaves a
half-written table or manifest behind.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pandas as pd


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
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def analysis(self) -> Path:
        return self.root / "analysis"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    def trial(self, trial_id: str) -> Path:
        return self.raw / trial_id

    def trial_dirs(self) -> list[Path]:
        """Completed trial folders (those with a meta.json), in name order."""
        if not self.raw.exists():
            return []
        return sorted(p for p in self.raw.iterdir() if p.is_dir() and (p / "meta.json").exists())

    def read_manifest(self) -> dict[str, Any]:
        return orjson.loads(self.manifest.read_bytes())


def atomic_write(path: Path, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp)`` then rename ``tmp`` onto ``path`` (same folder, so rename is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json(path: Path, obj: Any) -> Path:
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return atomic_write(path, lambda tmp: tmp.write_bytes(data + b"\n"))


def write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_table(path: Path, df: pd.DataFrame) -> Path:
    """Parquet or CSV by suffix, atomically."""
    if path.suffix == ".parquet":
        return atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))
    return atomic_write(path, lambda tmp: df.to_csv(tmp, index=False))


def sha256_tree(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root``, keyed by its path relative to ``root``."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
        out[str(path.relative_to(root))] = h.hexdigest()
    return out


def batch_path(batch_dir: str | None, outputs_dir: str, batch: str | None) -> Path:
    """The batch folder a notebook works on: ``batch_dir`` if given, else ``outputs_dir/batch``."""
    if batch_dir:
        path = Path(batch_dir)
    elif batch:
        path = Path(outputs_dir) / batch
    else:
        path = latest_batch(Path(outputs_dir))
    if not path.is_dir():
        raise ValueError(f"parameter 'batch_dir': {str(path)!r} is not a folder; accepted: an existing batch folder")
    return path


def latest_batch(outputs_dir: Path) -> Path:
    """The most recently started batch under ``outputs_dir`` (interactive use: run, then parse …)."""
    found = sorted(outputs_dir.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ValueError(
            f"parameter 'batch': missing and no batch under {str(outputs_dir)!r}; accepted: a batch name or batch_dir"
        )
    return found[-1].parent


def batch_paths(
    batch_dirs: list[str] | None, outputs_dir: str, batch: str | None, batch_dir: str | None = None
) -> list[Path]:
    """Several batch folders (for cross-batch analysis), defaulting to the one batch."""
    if batch_dirs is None:
        return [batch_path(batch_dir, outputs_dir, batch)]
    if not isinstance(batch_dirs, list) or not batch_dirs:
        raise ValueError("parameter 'batch_dirs': accepted: a non-empty list of batch folder paths, or None")
    return [batch_path(p, outputs_dir, None) for p in batch_dirs]
