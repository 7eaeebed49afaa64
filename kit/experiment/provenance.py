"""What produced a batch: kit version and commit, Python and package versions."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

import kit

PACKAGES = ("openai", "anthropic", "tiktoken", "pandas", "numpy", "scipy", "papermill", "seaborn", "pyarrow")


def _git_commit(path: Path | None = None) -> str | None:
    """The commit of the kit's checkout (None when not a git checkout)."""
    root = path or Path(kit.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = out.stdout.strip()
    if out.returncode != 0 or not commit:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--", "kit"], capture_output=True, text=True
    )
    return commit + ("+dirty" if dirty.stdout.strip() else "")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {
        "kit": kit.__version__,
        "kit_commit": _git_commit(),
        "python": platform.python_version(),
    }
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
