"""Notebook parameters: one table per notebook of what each parameter accepts, checked in the first cell.

A wrong parameter stops the notebook before any work with a message that names the parameter
and the accepted values (``kit.experiment.design.ParamError``). That includes a name no notebook declares:
papermill injects unknown parameters with only a warning (a typo such as ``runs_per_armm`` would
silently run the default), so ``collect`` reads the names papermill injected from the kernel's input
history (``In``: the cell that papermill heads ``# Parameters``) and refuses any that no stage knows,
with the closest known name. A name another stage declares passes: one parameters file
(``params/*.yaml``) serves every stage, each taking what it declares.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec
import yaml

from kit.experiment.backends import NAMES as BACKEND_NAMES
from kit.experiment.design import ISOLATION_MODES, ORDERS, ParamError
from kit.jsontypes import ParamValues
from kit.names import NAME_RULE, is_name

ENDPOINTS = ("embedded", "real")
RETENTIONS = ("in_memory", "24h")  # OpenAI's prompt_cache_retention values (openai-python 3.57 types)


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


def _http_url(v: str) -> bool:
    """An http(s) URL with a host and nothing a credential could hide in (user info, query, fragment): the
    URL is printed and recorded, a key belongs in the environment."""
    parts = urlsplit(v)
    hidden = parts.username is not None or parts.password is not None or parts.query or parts.fragment
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not hidden


# The baseline arm: analyze compares every arm with it, and a run's stop rule (``stop``) does the same.
_BASELINE = Param(
    "baseline", (str,), "an arm name present in the batch, or None for the first arm", lambda v: bool(v), optional=True
)


def _pairs_of_arms(v: Any) -> bool:
    """A non-empty list of [arm, baseline] pairs of two different names."""
    return _pairs(v) and all(a != b for a, b in v)


# The comparisons analyze makes and the report leads with (docs/method.md#controls): stored with the batch
# (design.json) and reused when the batch is analysed again without them.
_COMPARISONS = Param(
    "comparisons",
    (list,),
    "None (every arm against the baseline), or a list of [arm, baseline] pairs of the batch's arms, the report "
    "leading with the first",
    _pairs_of_arms,
    optional=True,
)


def _names(v: Any) -> bool:
    """A non-empty list of names that each become a path component (``kit.names``: arms, in trial ids)."""
    return _str_list(v) and all(is_name(x) for x in v)


# How kit.stats.should_continue names a valid stop rule: the run stage refuses every bad rule in these words.
STOP_RULE = "{max_runs_per_arm: N, precision: 1.5 and/or exclude_one: true}"
RUN = [
    Param(
        "batch",
        (str,),
        f"a folder name ({NAME_RULE}), or None for a new id",
        is_name,
        optional=True,
    ),
    Param("task", (str,), f"a task pack name ({NAME_RULE})", is_name),
    Param(
        "arms",
        (list,),
        f"a list of at least two distinct arm names, each {NAME_RULE}",
        lambda v: _names(v) and len(set(v)) == len(v) >= 2,
    ),
    Param("runs_per_arm", (int,), "an integer >= 1", lambda v: v >= 1),
    Param("order", (str,), f"one of {list(ORDERS)}", _choices(ORDERS)),
    Param("allow_blocked", (bool,), "true or false"),
    Param("backend", (str,), f"one of {list(BACKEND_NAMES)}", _choices(BACKEND_NAMES)),
    Param("endpoint", (str,), f"one of {list(ENDPOINTS)}", _choices(ENDPOINTS)),
    Param(
        "upstream_url",
        (str,),
        "None (each API's public endpoint), or with endpoint real an http(s) URL without user info, query or "
        "fragment, as OPENAI_BASE_URL or ANTHROPIC_BASE_URL name it (a trailing /v1 is dropped: clients add it)",
        _http_url,
        optional=True,
    ),
    Param("model", (str,), "a model name (sim-… on the embedded provider)", lambda v: bool(v)),
    Param(
        "retention",
        (str,),
        f"None (not sent), or one of {list(RETENTIONS)}: prompt_cache_retention on backend sdk-openai",
        _choices(RETENTIONS),
        optional=True,
    ),
    Param("isolation", (str,), f"one of {list(ISOLATION_MODES)}", _choices(ISOLATION_MODES)),
    Param("seed", (int,), "an integer >= 0", lambda v: v >= 0),
    Param("concurrency", (int,), "an integer from 1 to 16", lambda v: 1 <= v <= 16),
    Param("outputs_dir", (str,), "a folder path", lambda v: bool(v)),
    Param("task_options", (dict,), "a mapping of the task's options"),
    Param("arm_defs", (dict,), f"a mapping arm name ({NAME_RULE}) -> arm definition", lambda v: all(map(is_name, v))),
    Param("backend_options", (dict,), "a mapping of backend options (e.g. codex_bin, claude_bin, effort)"),
    Param("retry_failed", (bool,), "true or false"),
    Param("profile", (str,), "a cache profile name, or None for the backend's default", lambda v: bool(v), True),
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
    # a non-empty mapping here; its keys and values are checked by kit.stages.run (docs/method.md#planning)
    Param("stop", (dict,), STOP_RULE, lambda v: bool(v), optional=True),
    _BASELINE,
]


class RunParams(msgspec.Struct, frozen=True, kw_only=True):
    """The run notebook's parameters as checked (``RUN``), one field per ``Param`` in its order: what the run stage,
    the manifest (``Manifest.params``) and the analyze stage's design read by attribute, so a misspelt name is an
    error where it is written, not a ``KeyError`` (or a silent ``None``) where it is read. A test holds the fields'
    names and types to ``RUN``'s; an optional parameter's default is None."""

    batch: str | None = None
    task: str
    arms: list[str]
    runs_per_arm: int
    order: str
    allow_blocked: bool
    backend: str
    endpoint: str
    upstream_url: str | None = None
    model: str
    retention: str | None = None
    isolation: str
    seed: int
    concurrency: int
    outputs_dir: str
    task_options: dict[str, Any]
    arm_defs: dict[str, Any]
    backend_options: dict[str, Any]
    retry_failed: bool
    profile: str | None = None
    salt: str | None = None
    survival: int | float
    timeout_s: int | float
    max_cycles: int
    stop: dict[str, Any] | None = None
    baseline: str | None = None

    @property
    def baseline_arm(self) -> str:
        """The arm every comparison divides by: ``baseline``, or the first arm (``check_baseline``)."""
        return check_baseline(self.baseline, self.arms)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """The run notebook shows ``cfg.params`` as the mapping of names to values a parameters file holds."""
        printer.pretty(msgspec.structs.asdict(self))


def run_params(values: Mapping[str, Any]) -> RunParams:
    """The run notebook's parameters checked against ``RUN`` (``validate``), as the record the run stage reads."""
    return RunParams(**validate(values, RUN))


def check_baseline(baseline: str | None, arms: list[str]) -> str:
    """The baseline rule, in one place for every stage that compares arms (the run stage's stop rule, analyze and
    ``kit batch`` before any stage): ``baseline`` must be an arm of the batch; None means the first arm. Returns
    the baseline arm; a wrong one is a ``ParamError`` naming the closest arm."""
    if baseline is None:
        return arms[0]
    if baseline not in arms:
        problem = f"{baseline!r} is not an arm of the batch{did_you_mean(str(baseline), arms)}"
        raise ParamError("baseline", problem, arms)
    return baseline


def check_comparisons(comparisons: list[list[str]] | None, baseline: str | None, arms: list[str]) -> list[list[str]]:
    """The comparison rule, in one place (analyze, and ``kit batch`` before any stage): each pair's two arms are
    arms of the batch; None means every other arm against the baseline (``check_baseline``). Returns the pairs;
    a wrong arm is a ``ParamError`` naming the closest."""
    if comparisons is None:
        base = check_baseline(baseline, arms)
        return [[arm, base] for arm in arms if arm != base]
    for pair in comparisons:
        for arm in pair:
            if arm not in arms:
                problem = f"{arm!r} in {pair} is not an arm of the batch{did_you_mean(str(arm), arms)}"
                raise ParamError("comparisons", problem, arms)
    return [list(pair) for pair in comparisons]


_BATCH = Param(
    "batch",
    (str,),
    f"a batch folder name under outputs_dir ({NAME_RULE}), or None for the latest batch",
    is_name,
    optional=True,
)
_OUTPUTS_DIR = Param("outputs_dir", (str,), "a folder path", lambda v: bool(v))
_BATCH_DIR = Param("batch_dir", (str,), "an existing batch folder path, or None", lambda v: bool(v), optional=True)
_SEED = Param("seed", (int,), "an integer >= 0", lambda v: v >= 0)
_N_RESAMPLES = Param("n_resamples", (int,), "an integer >= 100", lambda v: v >= 100)
_CONFIDENCE = Param("confidence", (float,), "a number strictly between 0 and 1", lambda v: 0 < v < 1)
_ALLOW_STITCH = Param("allow_stitch", (bool,), "true or false")
BATCH_DIR = [_BATCH_DIR]
# The stages after run: which batch folder they work on.
PARSE = [_BATCH, _OUTPUTS_DIR, _BATCH_DIR, Param("strict", (bool,), "true or false")]
ANALYZE = [
    _BATCH,
    _OUTPUTS_DIR,
    _BATCH_DIR,
    Param("batch_dirs", (list,), "None, or a non-empty list of batch folder paths", _str_list, optional=True),
    _BASELINE,
    _COMPARISONS,
    _N_RESAMPLES,
    _CONFIDENCE,
    _ALLOW_STITCH,
    Param("warmth_levels", (int,), "an integer from 2 to 101", lambda v: 2 <= v <= 101),
    Param("window_tokens", (int,), "an integer >= 1000", lambda v: v >= 1000),
    _SEED,
    Param("quality_margin", (float,), "a grade difference strictly between 0 and 1, e.g. 0.1", lambda v: 0 < v < 1),
]
PLOT = [_BATCH, _OUTPUTS_DIR, _BATCH_DIR]


def _globs(v: Any) -> bool:
    return (isinstance(v, str) and bool(v)) or _str_list(v)


def _pairs(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(_str_list(p) and len(p) == 2 for p in v)


def _name(v: str) -> bool:
    return bool(v) and all(c.isalnum() or c in "-_" for c in v)


EXPLORE = [
    Param("batch_glob", (str, list), "a glob of batch folders, or a non-empty list of globs", _globs),
    Param("pairs", (list,), "None (every comparison), or a non-empty list of [arm, baseline] pairs", _pairs, True),
    Param(
        "metrics",
        (list,),
        "a non-empty list of trial metric names (total_tokens, uncached_input_tokens, …)",
        lambda v: _str_list(v) and all(_name(m) for m in v),
    ),
    _ALLOW_STITCH,
    Param("curve", (str,), "a batch id, 'pooled', or None (the first batch with the pair)", lambda v: bool(v), True),
    Param("figure", (str,), "a figure name such as ratio_forest (figures/<name>.png)", _name),
    _N_RESAMPLES,
    _CONFIDENCE,
    _SEED,
]
NOTEBOOKS = {"run": RUN, "parse": PARSE, "analyze": ANALYZE, "plot": PLOT, "explore": EXPLORE}
INJECTED_HEADER = "# Parameters\n"  # how papermill heads the cell it injects (its Python translator)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``candidates`` to a mistyped ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _wrong_type(p: Param, v: Any) -> str:
    """The problem of a value of the wrong type; a list or mapping written as text (papermill's and
    ``kit batch``'s ``-p`` always pass text) is told to use ``-y``, which reads YAML."""
    problem = f"wrong type {type(v).__name__} ({v!r})"
    if isinstance(v, str) and {list, dict} & set(p.types):
        try:
            parsed = yaml.safe_load(v)
        except yaml.YAMLError:
            return problem
        if isinstance(parsed, list | dict):
            as_yaml = yaml.safe_dump({p.name: parsed}, default_flow_style=True, width=1 << 16).strip()[1:-1]
            return f'{problem}: -p passes text; give a list or mapping with -y "{as_yaml}"'
    return problem


def validate(values: Mapping[str, Any], spec: list[Param]) -> ParamValues:
    """Check every parameter of ``spec`` in ``values``; return them as a dict."""
    out: dict[str, Any] = {}
    for p in spec:
        if p.name not in values and not p.optional:
            raise ParamError(p.name, "missing", p.accepted)
        v = values.get(p.name)
        if v is None and p.optional:
            out[p.name] = v
            continue
        if not isinstance(v, p.types) or (isinstance(v, bool) and bool not in p.types):
            raise ParamError(p.name, _wrong_type(p, v), p.accepted)
        if not p.check(v):
            raise ParamError(p.name, f"got {v!r}", p.accepted)
        out[p.name] = v
    return out


def injected_names(history: list[str] | None) -> list[str]:
    """The names papermill's injected cell(s) assigned, from a kernel's input history (``In``), in order."""
    names: list[str] = []
    for source in history or []:
        if isinstance(source, str) and source.startswith(INJECTED_HEADER):
            for node in ast.parse(source).body:
                targets = node.targets if isinstance(node, ast.Assign) else []
                names += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in names]
    return names


def _known_names() -> set[str]:
    """Every parameter some notebook declares: what a shared parameters file may hold."""
    return {p.name for spec in NOTEBOOKS.values() for p in spec}


def check_names(names: list[str], spec: list[Param]) -> None:
    """Refuse a parameter name no notebook declares, suggesting the closest; a name another stage declares
    passes (one parameters file serves every stage), and so do papermill's own ``PAPERMILL_*`` paths."""
    everywhere = _known_names()
    for name in names:
        if name not in everywhere and not name.startswith("PAPERMILL_"):
            raise ParamError(name, f"unknown parameter{did_you_mean(name, everywhere)}", [p.name for p in spec])


def check_batch_named(names: list[str], values: Mapping[str, Any]) -> None:
    """A papermill run names its batch: papermill writes the executed notebook where it is told, and a new
    batch id would put the data in another folder. Interactive runs (nothing injected) may leave it out."""
    if names and all(values.get(k) is None for k in ("batch", "batch_dir", "batch_dirs")):
        accepted = "-p batch NAME, the folder the executed notebook goes into (outputs/NAME/<stage>.ipynb)"
        raise ParamError("batch", "missing in a papermill run (the data would go to a new folder of its own)", accepted)


def collect(namespace: Mapping[str, Any], spec: list[Param]) -> ParamValues:
    """A notebook's first step (``params.collect(globals(), params.X)``): the injected names checked, then
    every declared parameter's value; returns the values. Interactive runs have no injected cell."""
    names = injected_names(namespace.get("In"))
    check_names(names, spec)
    values = validate({p.name: namespace[p.name] for p in spec if p.name in namespace}, spec)
    if "batch" in values:  # the run, parse, analyze and plot notebooks; explore reads batches by glob
        check_batch_named(names, values)
    return values


def add_parameter_options(parser: Any) -> None:
    """``-f FILE``, ``-y YAML`` and ``-p KEY VALUE``: how every command takes a batch's parameters (an
    ``argparse`` parser or argument group; read with ``pipeline.load_params(file, yaml, pairs)``)."""
    parser.add_argument("-f", "--parameters-file", dest="file", help="YAML parameter file (params/*.yaml)")
    parser.add_argument("-y", "--parameters-yaml", dest="yaml", action="append", default=[], help="YAML string")
    parser.add_argument(
        "-p", "--parameters", dest="pairs", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
        help="one parameter (text, a number, True/False/None; a list or mapping goes in -y)",
    )  # fmt: skip
