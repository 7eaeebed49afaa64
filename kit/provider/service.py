"""A loopback HTTP service running on its own thread: what the embedded provider and the recording proxy share.

Both are started the same way (a uvicorn server on a bound loopback socket, in a thread) and are used the
same way by the run stage and the tests: a base URL, a per-trial URL whose requests are logged under that
trial, a request log, and a stop that is safe to call twice.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import uvicorn

from kit.errors import InputError


def trial_base_url(base_url: str, trial_id: str) -> str:
    """Base URL whose requests are logged under ``trial_id`` (clients append ``/v1``; the prefix is stripped
    before a request is answered or forwarded). The id is quoted: an arm name may hold ``/`` or ``?``."""
    return f"{base_url}/t/{quote(trial_id, safe='')}"


def temporary_log(prefix: str) -> Path:
    """A log file in a fresh temporary folder (``prefix``), for a service started without a log path: the
    service removes the folder when it stops (``LoopbackService``'s ``owned``), so that tests, pings and notebooks
    starting one service after another leave nothing behind in the temporary folder."""
    return Path(tempfile.mkdtemp(prefix=prefix)) / "provider_log.jsonl"


def discard(folder: Path | None) -> None:
    """Remove a service's own temporary log folder (``temporary_log``), if it has one."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def bind(host: str, port: int, allow_non_loopback: bool, name: str) -> socket.socket:
    """A listening socket on ``host:port`` (``port=0``: a free one), refused unless the resolved address is
    loopback or ``allow_non_loopback`` (a name could point anywhere; ``name`` says which service refuses)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    assert isinstance(address[0], str)  # a TCP address: (ip, port) or (ip, port, flowinfo, scope_id)
    check_host(address[0], allow_non_loopback, name)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def check_host(address: str, allow_non_loopback: bool, name: str = "the simulated provider") -> None:
    """Refuse a non-loopback bind address unless allowed; warn when allowed."""
    host = address.split("%")[0]  # drop an IPv6 zone
    if ipaddress.ip_address(host).is_loopback:
        return
    if not allow_non_loopback:
        raise InputError(
            f"refusing to bind {host!r}: {name} serves loopback only "
            "(override: allow_non_loopback=True, or --allow-non-loopback on the command line)"
        )
    warnings.warn(f"{name} is listening on non-loopback {host!r}", stacklevel=3)


class LoopbackService:
    """A running service; ``app`` is its ASGI application object, which holds the request log (``app.log``).

    A context manager: ``with start(...) as p:`` stops it when the block ends. ``owned``: the temporary folder
    of a log nobody asked to keep (``temporary_log``), removed with the log when the service stops."""

    def __init__(
        self, app: Any, sock: socket.socket, server: uvicorn.Server, thread: threading.Thread, owned: Path | None
    ):
        self._app, self._sock, self._server, self._thread, self._owned = app, sock, server, thread, owned
        host, self.port = sock.getsockname()[:2]
        self.host = host
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        self.log_path: Path = app.log.path

    def trial_base_url(self, trial_id: str) -> str:
        return trial_base_url(self.base_url, trial_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving and close the log (removed with its folder if temporary); safe to call twice."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        self._app.log.close()
        discard(self._owned)

    def wait(self, banner: str) -> None:
        """Print ``banner``, then block until the service stops (Ctrl-C stops it, even while the banner is
        printed: a script that reads the banner may interrupt at once)."""
        try:
            print(banner, flush=True)
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()


def launch(
    asgi: Any, sock: socket.socket, log: Any, name: str, **config: Any
) -> tuple[uvicorn.Server, threading.Thread]:
    """Serve ``asgi`` on the bound ``sock`` from a daemon thread; return once it accepts connections.

    A server that does not come up within 10 s is stopped, its socket and ``log`` closed, and the start
    refused (``name`` says which service), so no half-started thread is left behind.
    """
    options = {"log_level": "warning", "access_log": False, "timeout_graceful_shutdown": 2, **config}
    server = uvicorn.Server(uvicorn.Config(asgi, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            log.close()
            raise RuntimeError(f"{name} did not start")
        time.sleep(0.005)
    return server, thread
