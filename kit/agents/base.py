"""What every backend receives to run one trial, and what it reports back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kit.experiment.design import Arm, cache_bust_tool_name
from kit.provider.policy import NONCE_LINE

# The kit's own agents' system prompt: as long as a real harness's guidance, so the shared prefix is
# cacheable (>= 1,024 tokens) and cache isolation between trials is measurable.
SYSTEM_PROMPT = (Path(__file__).resolve().parent.parent / "data" / "agent_system_prompt.md").read_text()


@dataclass(frozen=True)
class TrialSpec:
    """One (arm, run) session: everything a backend needs, nothing it must look up."""

    batch: str
    trial_id: str
    arm: Arm
    run: int
    order_index: int
    nonce: str
    isolation: frozenset[str]
    prompt_cache_key: str | None
    prompts: tuple[str, ...]
    workdir: Path
    out_dir: Path
    base_url: str  # the provider root, e.g. http://127.0.0.1:PORT (no /v1)
    api_key: str
    model: str
    effort: str | None = None
    retention: str | None = None  # prompt_cache_retention to send (sdk-openai), None: not sent
    max_cycles: int = 40
    timeout_s: float = 600.0
    system_prompt: str = field(default_factory=lambda: SYSTEM_PROMPT)
    options: Mapping[str, Any] = field(default_factory=dict)  # backend_options: binaries, effort, …
    # the batch's provider log, which a CLI trial watches for its upstream's failure (cli_common.UpstreamWatch)
    provider_log: Path | None = None
    attempt: int = 1  # 1, or how many times the trial has started (a rerun's CLI home is not an earlier one's)

    @property
    def cache_bust_tool(self) -> str | None:
        return cache_bust_tool_name(self.nonce) if "cache_bust_tool" in self.isolation else None

    @property
    def nonce_line(self) -> str | None:
        return NONCE_LINE.format(self.nonce) if "nonce" in self.isolation else None

    def system_addition(self) -> str:
        """What a CLI adds to its system side (Claude Code's ``--append-system-prompt``, Codex's developer
        instructions): the arm's instruction when placed there, then the nonce line. Either placement means the
        same slot on both CLIs, so the repository's own AGENTS.md / CLAUDE.md is never touched."""
        parts = []
        if self.arm.instruction and self.arm.placement in ("append_system", "developer_instructions"):
            parts.append(self.arm.instruction)
        if self.nonce_line:
            parts.append(self.nonce_line)
        return "\n\n".join(parts)


@dataclass
class TrialOutcome:
    """How the trial ended; ``status`` is "ok" or "failed" (with ``reason``)."""

    status: str
    reason: str = ""
    answers: list[str] = field(default_factory=list)  # each finished turn's final answer, in order
    turns: int = 0
    cycles: int = 0
    transcripts: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)

    @property
    def final_answer(self) -> str:
        return self.answers[-1] if self.answers else ""


class JsonlWriter:
    """Append-only JSONL, flushed per line, so a killed trial keeps every line it wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("ab")

    def write(self, record: dict) -> None:
        self._fh.write(orjson.dumps(record) + b"\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
