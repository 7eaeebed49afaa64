"""The provider with nothing named, as a user starts it: each API's own cache rules, every model the params
use in ``/v1/models``, and the client settings ``python -m kit provider serve`` prints, used as printed."""

from __future__ import annotations

import re
import shlex
import tempfile
import tomllib
from pathlib import Path

import anthropic
import openai
import pytest
import yaml
from anthropic.types import TextBlockParam
from openai.types.responses import ResponseInputParam

from kit.provider import serve
from kit.provider.cache import load_profile
from kit.provider.log import read
from tests.support import ROOT, serve_cli, start_serve_cli

LONG = "You are a careful coding agent. Follow the repository conventions exactly. " * 150  # ~2k tokens
MODEL = "sim-agent"  # the model of every params/*.yaml
KEY = "kit-test-key"


def _cached_system(text: str) -> list[TextBlockParam]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def _anthropic_twice(c: anthropic.Anthropic) -> list:
    """The same Messages request twice, its system prompt marked with a 5-minute breakpoint."""
    system = _cached_system(LONG)
    prompt_tokens = c.messages.count_tokens(model=MODEL, system=system, messages=[{"role": "user", "content": "hi"}])
    assert prompt_tokens.input_tokens >= load_profile("anthropic").min_tokens_for(MODEL)  # long enough to cache
    return [
        c.messages.create(model=MODEL, max_tokens=50, system=system, messages=[{"role": "user", "content": "hi"}])
        for _ in range(2)
    ]


def _responses_twice(c: openai.OpenAI) -> list:
    """The same Responses request twice, its prompt longer than OpenAI's minimum cacheable length."""
    items: ResponseInputParam = [{"role": "developer", "content": LONG}, {"role": "user", "content": "hi"}]
    return [c.responses.create(model=MODEL, input=items) for _ in range(2)]


def _check_each_api_caches_its_own_way(a: anthropic.Anthropic, o: openai.OpenAI) -> None:
    """Anthropic: a write on the first request, a read of it on the second; OpenAI: implicit, no write
    reported, the repeated prompt read from the 1024-token minimum up."""
    first, second = _anthropic_twice(a)
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    first, second = _responses_twice(o)
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens_details.cached_tokens >= load_profile("openai-implicit").min_tokens


def test_default_server_gives_each_api_its_own_cache_rules():
    with serve() as p:
        assert {api: profile.name for api, profile in p.profiles.items()} == {
            "responses": "openai-implicit",
            "chat": "openai-implicit",
            "messages": "anthropic",
        }
        assert p.engines["responses"] is p.engines["chat"] and p.engines["messages"] is not p.engines["chat"]
        with pytest.raises(ValueError, match="no single cache profile"):
            _ = p.profile
        a = anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0)
        o = openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0)
        _check_each_api_caches_its_own_way(a, o)
        # Same caller, same text, separate engines: Chat Completions (OpenAI's cache) reads nothing Messages wrote.
        chat = o.chat.completions.create(
            model=MODEL, messages=[{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
        )
        assert chat.usage.prompt_tokens_details.cached_tokens == 0
        lines = read(p.log_path)
        assert [(line["api"], line["profile"]) for line in lines] == [
            *[("messages", "anthropic")] * 2,
            *[("responses", "openai-implicit")] * 2,
            ("chat", "openai-implicit"),
        ]
        assert p.engines["messages"].resident_tokens > 0


def test_named_profile_still_applies_to_every_route():
    """The run stage names a profile: Messages then follows it too (OpenAI's implicit rules: no writes)."""
    with serve(profile="openai-implicit") as p:
        assert p.profile.name == "openai-implicit" and len({id(e) for e in p.engines.values()}) == 1
        first, second = _anthropic_twice(anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0))
        assert first.usage.cache_creation_input_tokens == 0 == second.usage.cache_creation_input_tokens
        assert second.usage.cache_read_input_tokens >= 1024
        assert {line["profile"] for line in read(p.log_path)} == {"openai-implicit"}


def _params_models() -> set[str]:
    files = sorted((ROOT / "params").glob("*.yaml"))
    assert files, "no params/*.yaml"
    models = {yaml.safe_load(f.read_text(encoding="utf-8")).get("model") for f in files}
    return models - {None}


def test_models_list_names_every_params_model_in_each_sdks_shape():
    with serve() as p:
        openai_models = list(openai.OpenAI(base_url=p.base_url + "/v1", api_key=KEY, max_retries=0).models.list())
        anthropic_models = list(anthropic.Anthropic(base_url=p.base_url, api_key=KEY, max_retries=0).models.list())
    wanted = _params_models() | {"sim-ping"}  # sim-ping: the default model of ``python -m kit ping``
    assert wanted <= {m.id for m in openai_models}
    assert all(m.object == "model" and m.owned_by == "agent-ab-kit" for m in openai_models)
    assert [m.id for m in anthropic_models] == [m.id for m in openai_models]
    assert all(m.type == "model" and m.display_name == m.id and m.created_at.year >= 2026 for m in anthropic_models)


@pytest.fixture
def cli_server():
    with serve_cli() as lines:
        yield lines


def test_cli_serve_without_profile_prints_settings_that_work(cli_server, monkeypatch):
    base_url = cli_server[0]
    assert base_url.startswith("http://127.0.0.1:")
    env = dict(m.groups() for line in cli_server[1:] if (m := re.fullmatch(r"([A-Z_]+)=(\S+)", line)))
    assert env == {
        "OPENAI_BASE_URL": base_url + "/v1",
        "OPENAI_API_KEY": env["OPENAI_API_KEY"],
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": env["ANTHROPIC_API_KEY"],
    }
    assert env["OPENAI_API_KEY"] and env["ANTHROPIC_API_KEY"]
    others = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in cli_server[1:] if ": " in line}
    assert others["profiles"].startswith(
        "/v1/responses openai-implicit, /v1/chat/completions openai-implicit, /v1/messages anthropic"
    )
    # Codex: the provider entry the kit gives it (Responses wire API, key read from OPENAI_API_KEY).
    codex = shlex.split(others["codex"])
    assert codex[:3] == [f"OPENAI_API_KEY={env['OPENAI_API_KEY']}", "codex", "exec"]
    assert codex[codex.index("-m") + 1] == MODEL
    assert codex[codex.index("-c") + 1] == "model_provider=kit"
    entry = tomllib.loads(codex[codex.index("-c") + 3])["model_providers"]["kit"]
    assert entry == {
        "name": "kit",
        "base_url": env["OPENAI_BASE_URL"],
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
    }
    # Claude Code: the base URL and key in its environment, as the kit sets them.
    claude = shlex.split(others["claude"])
    claude_env = dict(word.split("=", 1) for word in claude[: claude.index("claude")])
    assert claude_env["ANTHROPIC_BASE_URL"] == env["ANTHROPIC_BASE_URL"]
    assert claude_env["ANTHROPIC_API_KEY"] == env["ANTHROPIC_API_KEY"]
    assert claude[claude.index("--model") + 1] == MODEL

    for name, value in env.items():  # exactly the printed values, read by each SDK from the environment
        monkeypatch.setenv(name, value)
    a, o = anthropic.Anthropic(max_retries=0), openai.OpenAI(max_retries=0)
    assert MODEL in {m.id for m in o.models.list()} and MODEL in {m.id for m in a.models.list()}
    _check_each_api_caches_its_own_way(a, o)


def test_cli_named_profile_applies_to_every_route():
    proc, lines = start_serve_cli("--profile", "anthropic")
    try:
        profiles = next(line for line in lines if line.startswith("profiles: "))
        assert profiles == ("profiles: /v1/responses anthropic, /v1/chat/completions anthropic, /v1/messages anthropic")
    finally:
        proc.kill()
        proc.communicate()


def test_a_service_started_without_a_log_path_removes_its_temporary_log_when_it_stops(tmp_path):
    from kit.provider import proxy

    for start in (serve, proxy):
        with start() as running:
            log = running.log_path
            assert log.parent.is_dir() and log.parent.parent == Path(tempfile.gettempdir())
        assert not log.parent.exists(), f"{start.__name__} left {log.parent}"
        kept = tmp_path / f"{start.__name__}.jsonl"
        with start(log_path=kept):
            pass
        assert kept.exists()  # a log the caller named is the caller's


def test_cli_keeps_the_log_it_prints_after_ctrl_c():
    with serve_cli() as lines:
        log = Path(next(line for line in lines if line.startswith("log: ")).removeprefix("log: "))
    assert log.exists()  # the user was told where to read it
