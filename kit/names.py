"""Names that become path components, and paths checked to lie inside their root.

An arm, a batch, a task pack or a trial id ends up in a folder name (``outputs/<batch>/raw/r00-<arm>/``,
a CLI's private home ``.homes/r00-<arm>-codex``), and some of those folders are removed before they are
made again. A name such as ``../../x`` or ``/tmp/victim`` would then write or delete outside the batch, a
name with ``/`` would nest a trial where no table looks, and a newline would break the line-oriented
logs. So every such name passes one rule (``NAME_RULE``) when its parameter is checked, before anything
is written, and every path the kit removes or creates from a name is checked to lie inside its root
(``inside``), so a rule missed somewhere still cannot reach outside.
"""

from __future__ import annotations

import re
from pathlib import Path

from kit.errors import KitError

MAX_NAME = 64  # a tool name's limit (OpenAI, Anthropic); trial ids and homes add a few characters to it
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}")
NAME_RULE = f"1 to {MAX_NAME} ASCII letters, digits, '-', '_' or '.', starting with a letter or digit, without '..'"


def is_name(value: object) -> bool:
    """Whether ``value`` can be one path component anywhere the kit puts it (``NAME_RULE``).

    ASCII only: a name is compared byte for byte in logs and folder listings, where two spellings of one
    accented letter would be two arms. No leading '.', so no name is hidden or means the folder itself.
    """
    return isinstance(value, str) and _NAME.fullmatch(value) is not None and ".." not in value


class OutsideRoot(KitError, ValueError):
    """A path built from a name resolved outside the folder it must stay in (a bug or a hostile name)."""


def inside(root: Path, path: Path) -> Path:
    """``path`` resolved, if it lies strictly inside ``root`` (resolved too, links followed); else
    ``OutsideRoot``. Called before a write or a removal that a name led to."""
    base, full = root.resolve(), path.resolve()
    if full == base or not full.is_relative_to(base):
        raise OutsideRoot(f"{path} is not inside {root}: refused (a name must be {NAME_RULE})")
    return full


def child(root: Path, name: str) -> Path:
    """``root / name`` (as given, not resolved: callers record paths relative to the repository) for a
    ``name`` that obeys ``NAME_RULE`` and, links followed, lies inside ``root``."""
    if not is_name(name):
        raise OutsideRoot(f"{name!r} cannot name a folder in {root}: a name must be {NAME_RULE}")
    inside(root, root / name)
    return root / name
