"""The run stage on the embedded provider: parameters, isolation, resume, failures, secrets."""

import json
import shutil
from pathlib import Path

import pytest

from kit.cli import pipeline
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.stages import run
from tests.support import ROOT


def _values(tmp_path, **over):
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp_path), batch="b1", runs_per_arm=2, concurrency=1)
    params.update(over)
    return params


BAD = [
    ("arms", ["placebo", "nope"], "arms"),
    ("arms", ["placebo"], "arms"),
    ("arms", "placebo", "arms"),
    ("task", "no-such-task", "task"),
    ("runs_per_arm", -1, "runs_per_arm"),
    ("runs_per_arm", 0, "runs_per_arm"),
    ("runs_per_arm", "3", "runs_per_arm"),
    ("runs_per_arm", 2.5, "runs_per_arm"),
    ("order", "zigzag", "order"),
    ("order", "blocked", "order"),
    ("backend", "gpt", "backend"),
    ("isolation", "some", "isolation"),
    ("concurrency", 0, "concurrency"),
    ("seed", True, "seed"),
    ("survival", 1.5, "survival"),
    ("batch", "../escape", "batch"),
    ("task_options", {"presett": "x"}, "task_options"),
    ("arm_defs", {"x": {"placement": "nowhere"}}, "arm_defs.x.placement"),
    ("backend_options", {"efort": "high"}, "backend_options"),
    ("backend_options", {"codex_bin": "/opt/codex"}, "backend_options"),  # the demo's backend is sdk-openai
]


@pytest.mark.parametrize(("name", "value", "named"), BAD)
def test_bad_parameters_name_themselves_and_the_accepted_values(tmp_path, name, value, named):
    with pytest.raises(ParamError) as err:
        run.configure(_values(tmp_path, **{name: value}))
    assert err.value.name == named
    assert "accepted" in str(err.value)


def test_missing_parameter_is_named(tmp_path):
    values = _values(tmp_path)
    del values["model"]
    with pytest.raises(ParamError, match="'model': missing"):
        run.configure(values)


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    cfg = run.configure(_values(out))
    return run.run_batch(cfg, progress=False), out


def test_batch_completes_with_graded_trials(done):
    folder, _ = done
    table = run.schedule_table(folder)
    assert list(table["arm"]) == ["placebo", "batching", "batching", "placebo"]
    assert set(table["status"]) == {"ok"} and (table["grade"] == 1.0).all()
    assert (table["total_tokens"] > 0).all()


def test_each_trial_has_its_own_isolation(done):
    folder, _ = done
    metas = [json.loads(p.read_text()) for p in sorted(folder.glob("raw/*/meta.json"))]
    assert len({m["nonce"] for m in metas}) == 4
    assert len({m["prompt_cache_key"] for m in metas}) == 4
    assert all(m["cache_bust_tool"] == f"cache_bust_{m['nonce']}" for m in metas)
    for m in metas:  # every request of the trial carried its trial id and its own cache key
        lines = [
            json.loads(x) for x in (folder / "raw" / m["trial_id"] / "provider_log.jsonl").read_text().splitlines()
        ]
        assert lines and {x["trial_id"] for x in lines} == {m["trial_id"]}
        assert {x["prompt_cache_key"] for x in lines} == {m["prompt_cache_key"]}


def test_isolated_first_requests_never_read_another_trials_cache(done):
    folder, _ = done
    for log in folder.glob("raw/*/provider_log.jsonl"):
        first = json.loads(log.read_text().splitlines()[0])
        assert first["usage"]["cache_read_tokens"] == 0, log


def test_resume_runs_only_missing_trials(done, tmp_path):
    folder, _ = done
    copy = tmp_path / "b1"
    shutil.copytree(folder, copy)
    before = {p.parent.name: p.read_bytes() for p in (copy / "raw").glob("*/meta.json")}
    (copy / "raw/r01-batching/meta.json").unlink()  # as if killed mid-trial: no meta yet
    cfg = run.configure(_values(tmp_path))
    run.run_batch(cfg, progress=False)
    metas = sorted(p.parent.name for p in (copy / "raw").glob("*/meta.json"))
    assert metas == ["r00-batching", "r00-placebo", "r01-batching", "r01-placebo"]
    aside = list((copy / "raw/_incomplete").iterdir())
    assert [p.name for p in aside] == ["r01-batching.1"] and (aside[0] / "sdk_responses.jsonl").exists()
    for name in ("r00-batching", "r00-placebo", "r01-placebo"):
        assert (copy / "raw" / name / "meta.json").read_bytes() == before[name]


def test_resume_refuses_changed_identity(done, tmp_path):
    folder, _ = done
    shutil.copytree(folder, tmp_path / "b1")
    with pytest.raises(ParamError, match="seed"):
        run.run_batch(run.configure(_values(tmp_path, seed=7)), progress=False)


def test_failed_trial_is_recorded_and_retried_only_on_request(tmp_path):
    cfg = run.configure(_values(tmp_path, max_cycles=2))  # too few cycles to finish: every trial fails
    folder = cfg.batch_dir.root
    with pytest.raises(run.NoTrialSucceeded, match=r"no trial succeeded \(4 failed\): 4 × max_cycles 2 reached"):
        run.run_batch(cfg, progress=False)  # said where the run stage ends, not by a later stage's empty table
    assert json.loads((folder / "manifest.json").read_text())["status"] == "failed"
    table = run.schedule_table(folder)
    assert len(table) == 4 and set(table["status"]) == {"failed"}
    assert table["reason"].str.contains("max_cycles").all()
    with pytest.raises(run.NoTrialSucceeded):
        run.run_batch(run.configure(_values(tmp_path, max_cycles=40)), progress=False)
    assert set(run.schedule_table(folder)["status"]) == {"failed"}  # skipped: not asked to retry
    run.run_batch(run.configure(_values(tmp_path, max_cycles=40, retry_failed=True)), progress=False)
    assert set(run.schedule_table(folder)["status"]) == {"ok"}
    assert len(list((folder / "raw/_failed").iterdir())) == 4  # the failed attempts kept, untouched


def test_an_arm_without_a_successful_trial_ends_the_run_stage_with_the_reason(tmp_path, capsys):
    """An arm whose every trial fails the same way (a tool no backend offers) is said as the run stage ends, with
    the failed count and the reason, not later as an analysis of an arm with no trials."""
    cfg = run.configure(_values(tmp_path, arm_defs={"batching": {"tools": ["nope"]}}))
    with pytest.raises(run.NoTrialSucceeded) as raised:
        run.run_batch(cfg, progress=False)
    reason = "2 × InputError: unknown extra tools ['nope']"
    assert str(raised.value).startswith(f"no trial of arm 'batching' succeeded (2 failed): {reason}")
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(f"2 of 4 trial(s) failed: {reason}")
    manifest = json.loads((cfg.batch_dir.manifest).read_text())
    assert manifest["status"] == "failed" and manifest["raw_sha256"]


def test_no_isolation_leaks_between_trials(tmp_path):
    cfg = run.configure(_values(tmp_path, isolation="none", batch="leaky"))
    folder = run.run_batch(cfg, progress=False)
    metas = sorted((json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json")), key=lambda m: m["order_index"])
    later = metas[1:]
    reads = [json.loads((folder / "raw" / m["trial_id"] / "provider_log.jsonl").read_text().splitlines()[0])
             ["usage"]["cache_read_tokens"] for m in later]  # fmt: skip
    assert max(reads) > 0  # without isolation a later trial's first request reads an earlier trial's prefix


def test_report_states_the_prefix_every_first_request_shares(done, tmp_path):
    from kit.stages import parse
    from kit.stages.analyze import shared_first_prefix

    folder, _ = done
    assert shared_first_prefix(parse.parse_batch(folder)["segments"]) == 0  # cache-bust tool heads the prefix
    cfg = run.configure(_values(tmp_path, isolation="nonce", batch="nonce-only"))
    segments = parse.parse_batch(run.run_batch(cfg, progress=False))["segments"]
    first = json.loads(segments["segments_json"].iloc[0])
    tools_and_system = sum(tokens for _digest, tokens, _bp in first[:4])  # 3 file tools + the system prompt
    assert shared_first_prefix(segments) == tools_and_system > 900  # shared by all trials; the report says so


@pytest.mark.parametrize("backend", ["sdk-openai", "sdk-anthropic"])
def test_small_batch_parses_and_agrees_with_the_provider_log(tmp_path, backend):
    from kit.stages import parse

    cfg = run.configure(_values(tmp_path, backend=backend, profile=None, batch=f"small-{backend}"))
    tables = parse.parse_batch(run.run_batch(cfg, progress=False))
    assert tables["parse_issues"].empty  # includes the request-by-request cross-check against the provider log
    assert set(tables["trials"]["status"]) == {"ok"} and len(tables["trials"]) == 4
    per_trial = tables["requests"].groupby("trial_id")["cycle"].count()
    assert (per_trial == tables["trials"].set_index("trial_id")["cycles"]).all()
    # one SDK record per trial: its own cycles are the trial's, all in the main window
    requests = tables["requests"]
    assert requests["cycle"].equals(requests["file_cycle"]) and (requests["file_role"] == "main").all()
    assert not requests["sidechain"].any()
    assert (tables["tool_results"]["category"] == "read").sum() >= 4 * 13  # manifest, config and 12 modules


def test_work_dirs_do_not_reveal_the_experiment(done):
    folder, _ = done
    for meta in (json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json")):
        path = meta["workdir"].lower()
        assert Path(path).name in ("repo_a", "repo_b")
        for word in ("batch", "placebo", "read", str(folder).lower()):
            assert word not in path, (word, path)
        assert meta["batch"] not in Path(path).parts


def test_a_batch_run_again_where_a_deleted_one_was_gets_its_own_fixture(tmp_path):
    """The work root derives from the batch folder (a resumed batch finds its copies); a new batch at the same
    folder with another preset must not inherit the old batch's repository."""

    def files(preset: str) -> dict[str, int]:
        params = _values(tmp_path, task="occupancy", arms=["explore", "files"], runs_per_arm=1)
        params["task_options"] = {"preset": preset}
        folder = run.run_batch(run.configure(params), progress=False)
        copy = run.work_root(BatchDir(folder)) / "repo_a"
        sizes = {str(p.relative_to(copy)): p.stat().st_size for p in copy.rglob("*.py")}
        shutil.rmtree(folder)
        return sizes

    large, small = files("large"), files("small")
    assert large.keys() == small.keys() and sum(large.values()) > 2 * sum(small.values())
