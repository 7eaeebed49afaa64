"""`python -m kit ping`: one short request through a backend's whole path."""

import subprocess
import sys

import pytest

from kit import ping


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
