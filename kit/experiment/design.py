"""Experimental design: arms, interleaved schedules, salts, nonces and trial ids.

Seeds 000, 001 and 003 are the specification. A batch runs every arm ``runs_per_arm`` times,
run-major (for each run index, every arm once) so both arms see the same provider warmth; orders
are balanced (``alternate``) or seeded-random; a blocked order re-introduces the time-drift
confound and is refused unless explicitly allowed. Each (batch, arm, run) gets a nonce that is
constant within the trial (its own turns still cache against each other) and unique across
trials and batches (no trial reads another's cache).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from kit.errors import KitError
from kit.jsontypes import JsonObject
from kit.names import NAME_RULE, is_name
from kit.provider.policy import CACHE_BUST_TOOL

ORDERS = ("alternate", "random", "blocked")
ISOLATION_MODES = ("none", "nonce", "cache_bust_tool", "prompt_cache_key", "all")
Placement = Literal["agents_file", "system", "append_system", "developer_instructions", "user_prefix"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)
SESSIONS = ("fresh", "resume")
SETTINGS = ("model", "effort", "codex_bin", "claude_bin")  # what an arm may set for itself (Arm fields)
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TRIAL_ID = "r{run:02d}-{arm}"  # a trial's id (``trial_id``), which names its folder


class ParamError(KitError, ValueError):
    """A parameter is wrong; the message names it and the accepted values."""

    def __init__(self, name: str, problem: str, accepted: object) -> None:
        super().__init__(f"parameter {name!r}: {problem}; accepted: {accepted}")
        self.name = name


@dataclass(frozen=True)
class Arm:
    """A configuration under test: an instruction, where it goes, and how the session runs."""

    name: str
    instruction: str = ""
    placement: Placement = "system"
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    session: Literal["fresh", "resume"] = "resume"
    control: bool = False
    description: str = ""
    tools: tuple[str, ...] = ()  # extra tools this arm offers (e.g. "explore"), beyond the backend's own
    # Per-arm settings (None: the batch's ``model`` / ``backend_options``), so a model, effort or binary-vs-binary
    # comparison runs interleaved in one batch instead of as a cross-run stitch (docs/method.md#stitch).
    model: str | None = None
    effort: str | None = None
    codex_bin: str | None = None
    claude_bin: str | None = None

    @classmethod
    def from_dict(cls, name: str, spec: Mapping[str, Any]) -> Arm:
        known = {f for f in cls.__dataclass_fields__ if f != "name"}
        unknown = set(spec) - known
        if unknown:
            raise ParamError(f"arm_defs.{name}", f"unknown keys {sorted(unknown)}", sorted(known))
        tools = spec.get("tools", ())
        if not isinstance(tools, list | tuple) or not all(isinstance(t, str) and _TOOL_NAME.match(t) for t in tools):
            raise ParamError(f"arm_defs.{name}.tools", f"got {tools!r}", "a list of tool names like [explore]")
        for key in SETTINGS:
            value = spec.get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise ParamError(f"arm_defs.{name}.{key}", f"got {value!r}", "a non-empty string, or leave it out")
        flags, env = tuple(spec.get("flags", ())), dict(spec.get("env", {}))
        arm = cls(name=name, **{**spec, "flags": flags, "env": env, "tools": tuple(tools)})
        _check_choice(f"arm_defs.{name}.placement", arm.placement, PLACEMENTS)
        _check_choice(f"arm_defs.{name}.session", arm.session, SESSIONS)
        return arm

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["flags"] = list(self.flags)
        d["tools"] = list(self.tools)
        d["env"] = sorted(self.env)  # names only: values may be secrets
        return d

    def settings(self) -> dict[str, str | None]:
        """The per-arm settings (``SETTINGS``): what a resumed batch must keep and the manifest records."""
        return {key: getattr(self, key) for key in SETTINGS}


@dataclass(frozen=True)
class Slot:
    """One trial of the schedule, in the order it starts."""

    order_index: int
    run: int
    arm: str
    trial_id: str
    nonce: str

    @property
    def cache_bust_tool(self) -> str:
        return cache_bust_tool_name(self.nonce)


def new_salt() -> str:
    """A fresh random batch salt (recorded in the manifest; reused when a batch resumes)."""
    return secrets.token_hex(8)


def nonce(salt: str, arm: str, run: int) -> str:
    """H(batch_salt, arm, run): constant within a trial, unique across trials and batches."""
    return hashlib.sha256(f"{salt}|{arm}|{run}".encode()).hexdigest()[:16]


def cache_bust_tool_name(trial_nonce: str) -> str:
    """``cache_bust_<id>``: at the top of the prefix, so no trial matches another's first tokens."""
    name = CACHE_BUST_TOOL.format(trial_nonce)
    assert _TOOL_NAME.match(name), name
    return name


def trial_id(arm: str, run: int) -> str:
    """``r<run>-<arm>``: a trial's folder name (``raw/<trial_id>/``) and its key in the provider log, so the
    arm must be a name that is one path component (``kit.names``; the parameters are checked first)."""
    if not is_name(arm):
        raise ParamError("arms", f"{arm!r} cannot name a trial", f"arm names of {NAME_RULE}")
    return TRIAL_ID.format(run=run, arm=arm)


def _arm_order(arms: list[str], run: int, order: str, seed: int) -> list[str]:
    """The arms of one run in the order they start."""
    if order == "alternate":
        return list(arms) if run % 2 == 0 else list(reversed(arms))
    if order == "random":
        rng = _rng(seed, run)
        shuffled = list(arms)
        rng.shuffle(shuffled)
        return shuffled
    raise ParamError("order", f"{order!r} has no per-run order", ["alternate", "random"])


def schedule(
    arms: list[str], runs_per_arm: int, order: str, salt: str, seed: int = 0, allow_blocked: bool = False
) -> list[Slot]:
    """Run-major schedule (or blocked, only with ``allow_blocked``) with per-trial nonces."""
    _check_choice("order", order, ORDERS)
    if order == "blocked":
        if not allow_blocked:
            raise ParamError(
                "order",
                "'blocked' separates arms in time (drift: docs/method.md#interleaving); allow_blocked: true insists",
                ["alternate", "random"],
            )
        pairs = [(run, arm) for arm in arms for run in range(runs_per_arm)]
    else:
        pairs = [(run, arm) for run in range(runs_per_arm) for arm in _arm_order(arms, run, order, seed)]
    return [Slot(i, run, arm, trial_id(arm, run), nonce(salt, arm, run)) for i, (run, arm) in enumerate(pairs)]


def same_arm_predecessors(slots: Iterable[Slot]) -> dict[str, int]:
    """Per arm, how many of its trials directly follow a trial of the same arm (balance check)."""
    counts: dict[str, int] = {}
    prev = None
    for slot in slots:
        counts.setdefault(slot.arm, 0)
        if prev == slot.arm:
            counts[slot.arm] += 1
        prev = slot.arm
    return counts


def isolation_parts(mode: str) -> set[str]:
    """Which isolation mechanisms a mode turns on."""
    _check_choice("isolation", mode, ISOLATION_MODES)
    if mode == "all":
        return {"nonce", "cache_bust_tool", "prompt_cache_key"}
    return set() if mode == "none" else {mode}


def prompt_cache_key(batch: str, salt: str, arm: str, run: int) -> str:
    """docs/method.md#isolation: a fresh key per (batch, arm, run), constant for every turn of the trial."""
    return f"kit:{batch}:{salt}:{arm}:run{run}"


@dataclass(frozen=True)
class Retention:
    """What a cache profile records of a model's prompt-cache retention (its ``retention`` block)."""

    parameter: str  # the request field that chooses it (prompt_cache_retention, cache_control.ttl)
    offered: tuple[str, ...]  # the values the API accepts for the model
    long: tuple[str, ...]  # those that outlive a batch
    source: str  # the first source URL and the date the facts were checked

    @property
    def long_only(self) -> bool:
        return bool(self.offered) and set(self.offered) <= set(self.long)


def retention_offered(profile: str, model: str) -> Retention | None:
    """The retention facts of ``profile`` (a shipped name or a .yaml path) for ``model``, by its longest
    matching name prefix; None when the profile records none for the model."""
    from kit.provider.cache import PROFILE_DIR

    path = Path(profile) if profile.endswith((".yaml", ".yml")) else files("kit") / PROFILE_DIR / f"{profile}.yaml"
    facts = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("retention") or {}
    matches = [prefix for prefix in facts.get("by_model", {}) if model.startswith(prefix)]
    if not matches:
        return None
    offered = facts["by_model"][max(matches, key=len)]
    source = f"{facts['source_urls'][0]} (checked {facts['checked']})"
    return Retention(facts["parameter"], tuple(offered), tuple(facts.get("long", ())), source)


def retention_warnings(profile: str, models: Iterable[str], requested: str | None) -> list[str]:
    """Why cross-trial isolation may rest on nonces alone (docs/method.md#retention): a model offered only a
    long retention, or a long retention asked for; and a requested retention the model is not offered."""
    out = []
    for model in dict.fromkeys(models):
        facts = retention_offered(profile, model)
        if facts is None:
            continue
        if facts.long_only:
            out.append(
                f"retention: {model} offers only {'/'.join(facts.offered)} {facts.parameter} (profile {profile}: "
                f"{facts.source}); cached prefixes outlive the batch, so cross-trial isolation rests on the "
                "nonces alone (docs/method.md#retention)"
            )
        elif requested in facts.long:
            out.append(
                f"retention: {facts.parameter}={requested} asked for on {model}; cached prefixes outlive the batch, "
                "so cross-trial isolation rests on the nonces alone (docs/method.md#retention)"
            )
        if requested is not None and requested not in facts.offered:
            out.append(
                f"retention: {model} is not offered {facts.parameter}={requested} (it is offered "
                f"{'/'.join(facts.offered)}: {facts.source}); a real endpoint may refuse the requests"
            )
    return out


def _check_choice(name: str, value: object, accepted: Iterable[object]) -> None:
    accepted = list(accepted)
    if value not in accepted:
        raise ParamError(name, f"got {value!r}", accepted)


def _rng(seed: int, run: int):
    import random

    return random.Random(int.from_bytes(hashlib.sha256(f"order|{seed}|{run}".encode()).digest()[:8], "big"))
