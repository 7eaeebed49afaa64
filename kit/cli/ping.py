"""``python -m kit ping --backend NAME``: one short request through a backend's whole path.

A cheap plumbing check before spending a batch (docs/design.md): it starts the embedded
provider (or uses the real endpoint with ``--endpoint real``), sends one prompt through the
backend exactly as a trial would, and says what answered and with which versions. A backend
that is not available, or a real endpoint without its API key, is one line and exit code 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import msgspec

from kit.agents.base import TrialSpec
from kit.errors import KitError
from kit.experiment import design
from kit.experiment.backends import BACKENDS
from kit.experiment.design import Arm
from kit.records import field_doc


class Pong(msgspec.Struct, frozen=True, kw_only=True):
    """What one ping reached (``python -m kit ping`` prints each field on its line)."""

    backend: Annotated[str, field_doc("the backend pinged")]
    reached: Annotated[
        str,
        field_doc(
            "the endpoint that answered (the embedded provider says simulation); `nothing` and the address tried "
            "when no model response came back"
        ),
    ]
    status: Annotated[str, field_doc("`ok` or `failed`, as a trial's status")]
    reason: Annotated[str, field_doc("why it failed (empty when it finished)")]
    answer: Annotated[str, field_doc("the first 200 characters of the model's answer")]
    versions: Annotated[dict[str, str], field_doc("the backend's versions (CLI or SDK package)")]


class PingRefused(KitError, ValueError):
    """The ping cannot start (no such backend here, no API key); the message says what is missing."""


def ping(backend: str, endpoint: str = "embedded", model: str = "sim-ping") -> Pong:
    """Run a one-prompt trial; return what was reached. Raises ``PingRefused`` before any request."""
    from kit.stages import run

    if backend not in BACKENDS:
        raise PingRefused(f"backend {backend!r} is not available; accepted: {sorted(BACKENDS)}")
    chosen = BACKENDS[backend]
    if endpoint == "real" and not os.environ.get(chosen.key_env):
        raise PingRefused(f"--endpoint real needs {chosen.key_env} in the environment (the {backend} API key)")
    with tempfile.TemporaryDirectory(prefix="kit-ping-") as tmp:
        root = Path(tmp)
        (root / "repo").mkdir()
        (root / "repo" / "README.md").write_text("ping\n")
        (root / "out").mkdir()
        nonce = design.nonce(design.new_salt(), "ping", 0)

        def spec(base_url: str, key: str) -> TrialSpec:
            return TrialSpec(
                batch="ping", trial_id="ping", arm=Arm("ping"), run=0, order_index=0, nonce=nonce,
                isolation=frozenset({"nonce"}), prompt_cache_key=None, prompts=("Reply with the word pong.",),
                workdir=root / "repo", out_dir=root / "out", base_url=base_url, api_key=key, model=model,
                max_cycles=2, timeout_s=60,
            )  # fmt: skip

        if endpoint == "real":
            outcome = chosen.runner()(backend, spec(chosen.public_url, os.environ[chosen.key_env]))
            reached = chosen.public_url
        else:
            from kit.provider import serve

            with serve(profile=chosen.default_profile) as srv:
                outcome = chosen.runner()(backend, spec(srv.trial_base_url("ping"), run.EMBEDDED_KEY))
                reached = f"embedded provider at {srv.base_url} (simulation)"
    if not outcome.cycles:  # no model response: the endpoint was tried, not reached (the reason says why)
        reached = f"nothing (no model response from {reached})"
    return Pong(
        backend=backend,
        reached=reached,
        status=outcome.status,
        reason=outcome.reason,
        answer=outcome.final_answer[:200],
        versions=outcome.versions,
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m kit ping", description="One short request through a backend.")
    ap.add_argument("--backend", required=True, choices=list(BACKENDS))
    ap.add_argument("--endpoint", default="embedded", choices=("embedded", "real"))
    ap.add_argument("--model", default="sim-ping")
    args = ap.parse_args(argv)
    try:
        result = ping(args.backend, args.endpoint, args.model)
    except PingRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for key, value in msgspec.structs.asdict(result).items():
        print(f"{key:>9}: {value}")
    return 0 if result.status == "ok" else 1
