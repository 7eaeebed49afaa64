"""Files written safely and read as written: the ground floor every stage, report and command writes through.

Every write goes to a temporary name in the target's folder and is renamed into place, so a crash never leaves a
half-written table, manifest or report behind; nothing here knows what a batch is (``kit.experiment.layout`` does).
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pandas as pd


def atomic_write(path: Path, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp)`` then rename ``tmp`` onto ``path`` (same folder, so rename is atomic).

    The temporary file is created as a plain ``open`` would (mode 0666 less the umask, so 0644 as a rule):
    ``tempfile.mkstemp`` makes it 0600, and the rename would leave reports unreadable to anyone else.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
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
            for chunk in iter(functools.partial(fh.read, 1 << 20), b""):
                h.update(chunk)
        out[str(path.relative_to(root))] = h.hexdigest()
    return out


def read_csv_as_written(path: Path) -> pd.DataFrame:
    """An analysis CSV as the kit wrote it: only an empty cell is missing, so a text cell holding "NA" or
    "None" (a label, an arm's name) stays text, and an empty label means "none" rather than unknown."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""])
