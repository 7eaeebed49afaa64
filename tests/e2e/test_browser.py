"""The published pages as a person sees them: headless Chromium renders an example's report.html and its
executed plot notebook's HTML from file:// URLs, takes a screenshot, and every <img> must have loaded.

Chromium is driven over the DevTools protocol through a pipe (``--remote-debugging-pipe``: no port, no
socket). Nothing leaves the machine: every http(s) request the page attempts (nbconvert's pages ask a CDN
for require.js and MathJax) is paused by ``Fetch`` and failed here before it is sent, host names do not
resolve, and, where ``unshare`` can, Chromium runs in a network namespace with no interface up at all.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from PIL import Image

from kit import charts
from kit.stages.plot import batch_figures
from tests.support import ROOT

EXAMPLE = ROOT / "outputs" / "examples" / "batch-read"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-pipe",
]
TIMEOUT_S = 60.0

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK), reason="chromium not installed (`make browser-tools` installs Debian's)"
    ),
]


def _no_network_prefix() -> list[str]:
    """``unshare --net`` where this user may create a network namespace (root here and in CI), else nothing."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net"]
    return []


class Browser:
    """Headless Chromium with the DevTools protocol on fds 3 (commands in) and 4 (replies out)."""

    def __init__(self, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire_pipes() -> None:  # in the child: the protocol's fixed descriptors, via high ones (no clash)
            high_r, high_w = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        command = [*_no_network_prefix(), CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
        self.proc = subprocess.Popen(
            command,
            preexec_fn=wire_pipes,
            pass_fds=(3, 4),  # kept open after wire_pipes ran (close_fds runs after preexec_fn)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None
        self.blocked: list[str] = []
        self.events: list[dict] = []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("no reply from chromium within the deadline")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the protocol pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return orjson.loads(message)

    def _handle_event(self, message: dict) -> None:
        if message.get("method") == "Fetch.requestPaused":  # an http(s) request: fail it, never send it
            self.blocked.append(message["params"]["request"]["url"])
            self.send("Fetch.failRequest", requestId=message["params"]["requestId"], errorReason="BlockedByClient")
        else:
            self.events.append(message)

    def send(self, method: str, *, browser: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session and not browser:
            message["sessionId"] = self.session
        os.write(self._to_chrome, orjson.dumps(message) + b"\0")
        return {"id": self._next_id}

    def call(self, method: str, *, browser: bool = False, **params) -> dict:
        sent = self.send(method, browser=browser, **params)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._read_message(deadline)
            if message.get("id") == sent["id"]:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._handle_event(message)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            message = self._read_message(deadline)
            if message.get("method") == method:
                return message
            self._handle_event(message)

    def open_page(self, width: int = 1200, height: int = 900) -> None:
        target = self.call("Target.createTarget", browser=True, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", browser=True, targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Fetch.enable", patterns=[{"urlPattern": "http://*"}, {"urlPattern": "https://*"}])
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def load(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        return base64.b64decode(data)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", browser=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


IMAGES = "Array.from(document.images).map(i => ({src: i.getAttribute('src'), complete: i.complete, w: i.naturalWidth}))"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, dict]:
    """Each page loaded once: its images, text, blocked requests and a full-page screenshot."""
    assert (EXAMPLE / "report.html").is_file(), f"{EXAMPLE}: the committed example is missing; run `make examples`"
    out = tmp_path_factory.mktemp("browser")
    browser = Browser(out / "profile")
    pages = {}
    try:
        browser.open_page()
        for name in ("report.html", "plot.html"):
            browser.blocked.clear()
            browser.load((EXAMPLE / name).as_uri())
            shot = browser.screenshot()
            (out / f"{name}.png").write_bytes(shot)
            pages[name] = {
                "images": browser.evaluate(IMAGES),
                "text": browser.evaluate("document.body.innerText"),
                "sheets": browser.evaluate("Array.from(document.styleSheets).map(s => s.href || 'inline')"),
                "blocked": list(browser.blocked),
                "screenshot": shot,
                "path": out / f"{name}.png",
            }
    finally:
        browser.close()
    return pages


def _assert_every_figure_loaded(page: dict) -> None:
    images = page["images"]
    assert sorted(Path(i["src"]).stem for i in images) == sorted(batch_figures(EXAMPLE))
    not_loaded = [i["src"] for i in images if not (i["complete"] and i["w"] > 0)]
    assert not not_loaded, f"images that did not load: {not_loaded}"
    assert all(not i["src"].startswith(("http:", "https:", "data:")) for i in images)  # linked files


def _arm_colour_pixels(png: bytes) -> dict[str, int]:
    """Pixels within a small distance of each arm's fixed colour: the figures' lines and points."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int).reshape(-1, 3)
    counts = {}
    for arm, colour in charts.arm_colors(["placebo", "batching"]).items():
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        counts[arm] = int((np.abs(pixels - rgb).sum(axis=1) < 24).sum())
    return counts


def test_report_shows_every_figure_and_the_simulation_banner(rendered):
    page = rendered["report.html"]
    _assert_every_figure_loaded(page)
    assert page["text"].startswith("SIMULATION:")
    assert "fewer total tokens" in page["text"] or "more total tokens" in page["text"]
    assert page["blocked"] == []  # the report asks nothing of the network


def test_executed_plot_notebook_shows_every_figure_with_its_stylesheet(rendered):
    page = rendered["plot.html"]
    _assert_every_figure_loaded(page)
    assert any(s.endswith("/_static/index.css") for s in page["sheets"] if s != "inline"), page["sheets"]
    assert "plot.publish" in page["text"]  # the code cells are there, not only their outputs
    # nbconvert's template asks a CDN for require.js / MathJax; each attempt was failed before it was sent
    assert all(url.startswith("https://cdnjs.cloudflare.com/") for url in page["blocked"]), page["blocked"]


def test_screenshots_show_the_figures(rendered):
    for name, page in rendered.items():
        image = Image.open(io.BytesIO(page["screenshot"]))
        assert image.format == "PNG" and image.width >= 1200 and image.height > 2000, (name, image.size)
        counts = _arm_colour_pixels(page["screenshot"])
        assert all(n > 200 for n in counts.values()), (name, counts, page["path"])
