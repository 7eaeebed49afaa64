"""Cache retention (docs/method.md#retention): sent where the API takes it, logged per request, and a batch on a
model offered only a long retention warned that cross-trial isolation rests on the nonces alone."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from kit.cli import pipeline
from kit.experiment import design
from kit.experiment.design import ParamError
from kit.provider import serve
from kit.provider.cache import load_profile, profile_names
from kit.stages import run
from tests.support import ROOT


def _values(out: Path, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(out), batch="b", runs_per_arm=1, concurrency=1)
    params.update(over)
    return params


def _log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "raw/_provider/requests.jsonl").read_text().splitlines()]


def test_retention_is_sent_and_logged_per_request(tmp_path):
    asked = run.run_batch(run.configure(_values(tmp_path, retention="in_memory")), progress=False)
    assert {line["prompt_cache_retention"] for line in _log(asked)} == {"in_memory"}
    unset = run.run_batch(run.configure(_values(tmp_path, batch="none")), progress=False)
    assert {line["prompt_cache_retention"] for line in _log(unset)} == {None}  # not sent at all


def test_retention_only_on_the_backend_that_sends_it(tmp_path):
    with pytest.raises(ParamError, match="retention"):
        run.configure(_values(tmp_path, backend="codex", retention="24h"))
    with pytest.raises(ParamError, match="retention"):
        run.configure(_values(tmp_path, retention="forever"))
    assert not any(tmp_path.iterdir())


def test_the_embedded_provider_refuses_a_retention_the_api_does_not_take(tmp_path):
    with serve(log_path=tmp_path / "log.jsonl") as provider:
        client = openai.OpenAI(base_url=f"{provider.base_url}/v1", api_key=run.EMBEDDED_KEY, max_retries=0)
        with pytest.raises(openai.BadRequestError, match="prompt_cache_retention"):
            client.responses.create(model="sim-agent", input="hi", extra_body={"prompt_cache_retention": "1w"})
        client.responses.create(model="sim-agent", input="hi", prompt_cache_retention="24h")
    assert [line["prompt_cache_retention"] for line in _log_lines(provider.log_path)] == ["1w", "24h"]


def _log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_profiles_state_retention_with_sources():
    for name in profile_names():
        text = (ROOT / "kit/data/cache_profiles" / f"{name}.yaml").read_text()
        load_profile(name)  # the block is accepted by the profile loader
        if "retention:" in text:
            facts = design.retention_offered(name, "gpt-5.5" if name.startswith("openai") else "claude-opus-4-5")
            assert facts is not None and facts.offered and facts.source.startswith("https://")
    assert design.retention_offered("openai-implicit", "gpt-5.5-pro").offered == ("24h",)
    assert design.retention_offered("openai-implicit", "gpt-5.4").offered == ("in_memory", "24h")
    assert design.retention_offered("openai-implicit", "sim-agent") is None
    assert not design.retention_offered("anthropic", "claude-sonnet-4-5").long_only


def test_a_long_only_model_is_warned_in_the_notebook_and_the_manifest(tmp_path):
    cfg = run.configure(_values(tmp_path, arm_defs={"batching": {"model": "gpt-5.5"}}))
    (retention,) = [w for w in cfg.warnings if w.startswith("retention:")]  # beside the pack's own caveat
    assert "gpt-5.5 offers only 24h" in retention
    assert "nonces alone" in retention and "docs/method.md#retention" in retention
    folder = run.run_batch(cfg, progress=False)  # the embedded provider answers any model name
    assert json.loads((folder / "manifest.json").read_text())["warnings"] == list(cfg.warnings)
    nb = json.loads((ROOT / "notebooks/run.ipynb").read_text())
    assert "cfg.warnings" in "".join(nb["cells"][2]["source"])
    asked = run.configure(_values(tmp_path, batch="c", retention="in_memory", model="gpt-5.5"))
    assert any("not offered prompt_cache_retention=in_memory" in w for w in asked.warnings)
    assert not [w for w in run.configure(_values(tmp_path, batch="d")).warnings if w.startswith("retention:")]
