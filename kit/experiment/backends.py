"""What the kit knows about each backend, in one place: its API family (and so its public endpoint, the
environment variable holding its key and the cache profile it gets by default), the ``kit.agents`` module
that runs its trials, the ``backend_options`` it reads and, for a CLI, the option naming its binary.

The run stage, ``kit ping``, the parameter checks and the pipeline's pre-flight all read this table, so a
backend is added or changed here alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kit.agents.base import TrialOutcome, TrialSpec

Family = Literal["openai", "anthropic"]

# Each API family's public endpoint, its key's environment variable and its cache rules (a profile in
# kit/data/cache_profiles/).
PUBLIC_URL: dict[Family, str] = {"openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com"}
KEY_ENV: dict[Family, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_PROFILE: dict[Family, str] = {"openai": "openai-implicit", "anthropic": "anthropic"}

_SHARED_OPTIONS = frozenset({"effort", "summary_chars"})
_CLI_OPTIONS = _SHARED_OPTIONS | {"home_root", "keep_home", "auth"}  # auth: kit/agents/login.py


@dataclass(frozen=True)
class Cli:
    """A CLI backend's binary."""

    option: str  # the backend option (and per-arm setting) naming the binary
    program: str  # the binary's name


@dataclass(frozen=True)
class Backend:
    """One backend: how its trials run and what it accepts."""

    name: str
    family: Family
    module: str  # the kit.agents module with its ``run_trial``, imported on first use (the SDKs take seconds)
    options: frozenset[str]  # the backend_options it reads; any other name would be ignored, so it is refused
    cli: Cli | None = None  # a CLI backend's binary; None for the SDK backends

    @property
    def public_url(self) -> str:
        return PUBLIC_URL[self.family]

    @property
    def key_env(self) -> str:
        return KEY_ENV[self.family]

    @property
    def default_profile(self) -> str:
        return DEFAULT_PROFILE[self.family]

    @property
    def is_cli(self) -> bool:
        return self.cli is not None

    def runner(self) -> Callable[[str, TrialSpec], TrialOutcome]:
        """The function that runs one trial on this backend."""
        return importlib.import_module(f"kit.agents.{self.module}").run_trial


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("sdk-openai", "openai", "sdk", _SHARED_OPTIONS),
        Backend("sdk-anthropic", "anthropic", "sdk", _SHARED_OPTIONS),
        Backend("codex", "openai", "codex", _CLI_OPTIONS | {"codex_bin", "code_mode"}, Cli("codex_bin", "codex")),
        Backend(
            "claude",
            "anthropic",
            "claude",
            _CLI_OPTIONS | {"claude_bin", "claude_cache_ttl", "claude_tool_search"},
            Cli("claude_bin", "claude"),
        ),
    )
}
NAMES = tuple(BACKENDS)
