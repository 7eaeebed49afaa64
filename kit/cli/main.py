"""``python -m kit``: which command, and the list of commands (batch, replicate, provider, parse, ping, snapshot,
history, occupancy; docs/design.md). Each command is a module of ``kit.cli`` with a ``main(argv)``, imported only
when run.

Every command answers ``--help``. A mistake is one line on stderr starting ``error:`` and exit code 1;
a command line argparse cannot read is its usage message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, str] = {
    "batch": "run the stage notebooks into outputs/<batch>/ (params/*.yaml, -p, -y, --stages)",
    "replicate": "several batches with a non-isolated control, analysed into one report (docs/method.md#replication)",
    "provider": "provider serve: the embedded (simulated) provider on 127.0.0.1; provider proxy: a "
    "recording proxy in front of a real endpoint",
    "parse": "any agent transcript -> canonical request rows (one per model response)",
    "occupancy": "residual context occupancy of session files, as docs/method.md#occupancy prints it",
    "history": "your own Claude Code and Codex sessions: usage views, cost, occupancy, cache, before/after",
    "ping": "one short request through a backend's whole path",
    "snapshot": "recount a published three-arm snapshot (results.json) with a bootstrap interval",
}  # each is kit.cli.<name>.main


def parser() -> argparse.ArgumentParser:
    """The top level: which command, and the list of commands for ``--help``."""
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items())
    ap = argparse.ArgumentParser(
        prog="python -m kit",
        description="Measure the token cost of LLM agent configurations (see README.md).",
        epilog=f"commands:\n{listing}\n\npython -m kit COMMAND --help shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = importlib.import_module(f"kit.cli.{args.command}")
    return command.main(args.args) or 0
