"""Notebook parameters: one table of what each parameter accepts, checked in the first cell.

A wrong parameter stops the notebook before any work with a message that names the parameter
and the accepted values (``kit.design.ParamError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kit.design import ISOLATION_MODES, ORDERS, ParamError

BACKENDS = ("sdk-openai", "sdk-anthropic", "codex", "claude")
ENDPOINTS = ("embedded", "real")


@dataclass(frozen=True)
class Param:
    name: str
    types: tuple[type, ...]
    accepted: str
    check: Callable[[Any], bool] = lambda v: True
    optional: bool = False  # None is accepted, and so is leaving the parameter out


def _choices(values: tuple[str, ...]) -> Callable[[Any], bool]:
    return lambda v: v in values


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(isinstance(x, str) and x for x in v)


RUN = [
    Param(
        "batch",
        (str,),
        "a folder name (letters, digits, '-', '_', '.') or None for a new id",
        lambda v: all(c.isalnum() or c in "-_." for c in v) and v not in ("", ".", ".."),
        optional=True,
    ),
    Param("task", (str,), "a task pack name"),
    Param(
        "arms",
        (list,),
        "a non-empty list of arm names, at least two distinct",
        lambda v: _str_list(v) and len(set(v)) == len(v) >= 2,
    ),
    Param("runs_per_arm", (int,), "an integer >= 1", lambda v: v >= 1),
    Param("order", (str,), f"one of {list(ORDERS)}", _choices(ORDERS)),
    Param("allow_blocked", (bool,), "true or false"),
    Param("backend", (str,), f"one of {list(BACKENDS)}", _choices(BACKENDS)),
    Param("endpoint", (str,), f"one of {list(ENDPOINTS)}", _choices(ENDPOINTS)),
    Param("model", (str,), "a model name (sim-… on the embedded provider)", lambda v: bool(v)),
    Param("isolation", (str,), f"one of {list(ISOLATION_MODES)}", _choices(ISOLATION_MODES)),
    Param("seed", (int,), "an integer >= 0", lambda v: v >= 0),
    Param("concurrency", (int,), "an integer from 1 to 16", lambda v: 1 <= v <= 16),
    Param("outputs_dir", (str,), "a folder path", lambda v: bool(v)),
    Param("task_options", (dict,), "a mapping of the task's options"),
    Param("arm_defs", (dict,), "a mapping arm name -> arm definition"),
    Param("backend_options", (dict,), "a mapping of backend options (e.g. codex_bin, claude_bin, effort)"),
    Param("retry_failed", (bool,), "true or false"),
    Param("profile", (str,), "a cache profile name, or None for the backend's default", optional=True),
    Param(
        "salt",
        (str,),
        "None for a fresh random salt, or a fixed string (reproducible examples); a resumed batch keeps its own",
        lambda v: 4 <= len(v) <= 64 and all(c.isalnum() or c in "-_" for c in v),
        optional=True,
    ),
    Param("survival", (int, float), "a number from 0 to 1", lambda v: 0 <= v <= 1),
    Param("timeout_s", (int, float), "seconds > 0", lambda v: v > 0),
    Param("max_cycles", (int,), "an integer >= 1", lambda v: v >= 1),
]
BATCH_DIR = [Param("batch_dir", (str,), "an existing batch folder path", lambda v: bool(v))]
ANALYZE = [
    Param("batch_dirs", (list,), "a non-empty list of batch folder paths", _str_list),
    Param("baseline", (str,), "an arm name present in the batch, or None for the first arm", optional=True),
    Param("n_resamples", (int,), "an integer >= 100", lambda v: v >= 100),
    Param("confidence", (float,), "a number strictly between 0 and 1", lambda v: 0 < v < 1),
    Param("allow_stitch", (bool,), "true or false"),
    Param("warmth_levels", (int,), "an integer from 2 to 101", lambda v: 2 <= v <= 101),
    Param("window_tokens", (int,), "an integer >= 1000", lambda v: v >= 1000),
]


def validate(values: Mapping[str, Any], spec: list[Param]) -> dict[str, Any]:
    """Check every parameter of ``spec`` in ``values``; return them as a dict."""
    out = {}
    for p in spec:
        if p.name not in values and not p.optional:
            raise ParamError(p.name, "missing", p.accepted)
        v = values.get(p.name)
        if v is None and p.optional:
            out[p.name] = v
            continue
        if not isinstance(v, p.types) or (isinstance(v, bool) and bool not in p.types):
            raise ParamError(p.name, f"wrong type {type(v).__name__} ({v!r})", p.accepted)
        if not p.check(v):
            raise ParamError(p.name, f"got {v!r}", p.accepted)
        out[p.name] = v
    return out
