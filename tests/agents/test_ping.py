"""`python -m kit ping`: one short request through a backend's whole path."""

import socket
import subprocess
import sys

import pytest

from kit.cli import ping


def test_ping_sdk_backends_reach_the_embedded_provider():
    for backend in ("sdk-openai", "sdk-anthropic"):
        result = ping.ping(backend)
        assert result.status == "ok", result
        assert "embedded provider" in result.reached and "simulation" in result.reached
        assert result.versions["openai"] and result.answer


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_ping_cli_backends(backend):
    from kit.agents import cli_common

    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    result = ping.ping(backend)
    assert result.status == "ok", result
    assert result.versions, result


def test_ping_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "kit", "ping", "--backend", "sdk-openai"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "reached" in out.stdout and "status: ok" in out.stdout


def test_ping_real_without_its_key_is_refused_before_any_request(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ping.PingRefused, match="--endpoint real needs ANTHROPIC_API_KEY in the environment"):
        ping.ping("sdk-anthropic", endpoint="real")


def test_ping_real_says_reached_only_when_an_answer_came(monkeypatch):
    """A real endpoint that does not answer (a loopback port bound but not listening: refused at once) is named as
    tried, not as reached; before, ``reached: https://api.openai.com`` stood above the connection error."""
    from kit.experiment import backends

    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{dead.getsockname()[1]}"
        monkeypatch.setitem(backends.PUBLIC_URL, "openai", url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
        result = ping.ping("sdk-openai", endpoint="real")
    assert result.status == "failed" and "Connection" in result.reason, result
    assert result.reached == f"nothing (no model response from {url})"
