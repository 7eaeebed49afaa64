"""One writer per batch: a lock on the batch folder, held while any stage writes into it.

Two runs of one batch at once corrupt it without a word: each sets aside the trials the other is
running, one trial's provider log gathers both processes' requests, and the manifest still says
``complete`` (a batch name typed in JupyterLab while the same name runs in a terminal is enough). So
``kit batch`` and every stage take ``<batch>/.lock`` first and a second writer is refused in one line
naming the process that holds it.

The lock is ``flock`` on that file, so it goes with its holder: a process killed with ``kill -9`` holds
nothing, and the next run takes the lock over, saying whose it was. A stage that runs inside a
notebook kernel which ``kit batch`` (or papermill) started finds the lock held by its own ancestor
and goes on: the batch is still one writer.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from kit.errors import KitError

LOCK = ".lock"


class BatchBusy(KitError, RuntimeError):
    """Another process is writing into the batch folder."""


class Holder(msgspec.Struct, frozen=True):
    """Who holds a batch's lock, as written into the lock file for the next comer to read."""

    pid: int
    command: str
    since: str


def _ancestors() -> set[int]:
    """This process and its parents, up to init: the processes a stage runs on behalf of."""
    pids, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command in parentheses
    return pids


def _read(fd: int) -> Holder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, 1 << 16)
    try:
        return msgspec.json.decode(data, type=Holder) if data.strip() else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a torn or foreign record names nobody; the flock alone decides


def _command() -> str:
    try:
        raw = Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
    except OSError:
        return sys.argv[0]
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)[:300]


@contextmanager
def batch_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock while the block writes into it; ``BatchBusy`` if another process holds it.

    Held by this process or one of its ancestors (``kit batch`` running a stage's notebook), the block
    runs under that holder's lock. A lock file left by a process that is gone is taken over with a note
    on standard error, since a batch it left half-written will be resumed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            if holder is not None and holder.pid in _ancestors():
                yield
                return
            who = f"process {holder.pid} ({holder.command}, since {holder.since})" if holder else "another process"
            raise BatchBusy(
                f"batch {folder} is in use by {who}: one run at a time writes a batch; "
                "wait for it to end (or stop it), then run the same command again"
            ) from None
        left = _read(fd)
        if left is not None:
            print(f"note: batch {folder}: process {left.pid} that held it is gone; taking it over", file=sys.stderr)
        record = msgspec.json.encode(Holder(os.getpid(), _command(), datetime.now(UTC).isoformat(timespec="seconds")))
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released cleanly: nothing for the next comer to take over
    finally:
        os.close(fd)
