"""``python -m kit provider serve`` in a child process, as a user starts it, for tests that need it running."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

from tests.paths import ROOT


def start_serve_cli(*args: str) -> tuple[subprocess.Popen, list[str]]:
    """The child and the lines it prints before serving (read by a thread, so that a child that hangs before
    printing fails the test instead of blocking it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit", "provider", "serve", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    done = threading.Event()

    def read_banner() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("policy:"):
                break
        done.set()

    threading.Thread(target=read_banner, daemon=True).start()
    if not done.wait(60) or not lines or not lines[-1].startswith("policy:"):
        proc.kill()
        raise AssertionError(f"serve printed {lines} then stopped; stderr: {proc.communicate()[1]}")
    return proc, lines


@contextlib.contextmanager
def serve_cli(*args: str) -> Iterator[list[str]]:
    """The child serving for the ``with`` block (its banner lines), then stopped by Ctrl-C, which must exit 0."""
    proc, lines = start_serve_cli(*args)
    try:
        yield lines
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the CLI stops the server and closes the log
        try:
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
