"""The known-truth study (bench/known_truth.py): its agent loop, its truth, and the coverage of kit.stats.ratio.

The committed table is ``bench/known_truth.md``. Here: the study's in-process loop sends the SDK agent's
exact requests; the truth reproduces from fresh forced trials; 40 simulated batches (CI) keep the default
interval's coverage above a loose floor; 200 batches (slow) check the acceptance band as far as 200
batches can: a coverage estimated from 200 batches has a binomial standard error of about 1.5 points, so
the test asks that its exact 95% interval meets the 93-97% band, and that the old default (BCa), whose
interval lies wholly below it, is told apart.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kit import design
from kit.agents import sdk
from kit.provider import log as provider_log
from kit.provider import serve, wire_openai

STUDY = Path(__file__).resolve().parent.parent / "bench" / "known_truth.py"


def _load():
    spec = importlib.util.spec_from_file_location("known_truth", STUDY)
    module = importlib.util.module_from_spec(spec)
    sys.modules["known_truth"] = module
    spec.loader.exec_module(module)
    return module


kt = _load()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = kt.Lab(kt.Setup(), tmp_path_factory.mktemp("lab"))
    yield lab
    lab.close()


def test_path_probabilities():
    probs = kt.path_probabilities(0.15, 13)
    assert probs.sum() == pytest.approx(1.0)
    assert probs[0] == pytest.approx(0.15) and probs[1] == pytest.approx(0.85 * 0.15)
    assert probs[-1] == pytest.approx(0.85**12)  # twelve single reads: the last file is read alone either way
    assert kt.n_files(kt.Setup()) == 13


def test_study_loop_sends_the_sdk_agents_requests(lab, tmp_path, monkeypatch):
    """Same trial through kit.agents.sdk (real OpenAI client, HTTP) and the study's loop: identical prompts."""
    counter = itertools.count()
    monkeypatch.setattr(wire_openai, "new_id", lambda prefix: f"{prefix}_{next(counter):024d}")
    slot = design.schedule(list(kt.ARMS), 1, "alternate", "equivalence", 0)[0]
    spec = lab.spec("eq", slot)
    lab.policy.forced[spec.trial_id] = 2  # two single reads, then the rest at once
    bodies = lab.loop.run_until_complete(lab._trial(spec))
    ours = [r for r in provider_log.read(lab.root / "provider_log.jsonl") if r["trial_id"] == spec.trial_id]

    counter = itertools.count()
    real_log = tmp_path / "real.jsonl"
    with serve(
        profile="openai-implicit", policy=kt.ScriptedPaths(lab.pack.policy(), {spec.trial_id: 2}), log_path=real_log
    ) as srv:
        outcome = sdk.run_trial(
            "sdk-openai", replace(spec, base_url=srv.trial_base_url(spec.trial_id), out_dir=tmp_path)
        )
    theirs = provider_log.read(real_log)
    assert outcome.status == "ok" and len(bodies) == len(theirs) == 5  # manifest, 2 single reads, the batch, the answer
    assert [r["segments"] for r in ours] == [r["segments"] for r in theirs]
    assert [r["usage"] for r in ours] == [r["usage"] for r in theirs]
    assert [r["tool_results"] for r in ours] == [r["tool_results"] for r in theirs]


def test_truth_reproduces_from_fresh_forced_trials(lab):
    table = kt.path_table(lab, per_path=1, salt="ci-paths")
    assert len(table) == 2 * 13
    assert (table["cycles"] == table["k"] + 3).all() and (table["cycles_vary"] == 1).all()
    assert table["reasoning_per_response"].between(16, 96).all()
    for arm in kt.ARMS:
        assert table.loc[table["arm"] == arm, "probability"].sum() == pytest.approx(1.0)
    t = kt.truth(table)
    assert t["ratio"] == pytest.approx(kt.TRUTH_RATIO, abs=0.003)  # one trial per path: ~0.0006 standard error
    assert t[f"mean_{kt.BASELINE}"] == pytest.approx(32_500, rel=0.01)


def test_coverage_40_batches(lab):
    """CI: 40 batches through the provider; a 95% interval missing more than 6 of 40 would be undercovering."""
    trials = kt.simulate(lab, 40, salt="ci-batches")
    assert len(trials) == 40 * 10 and (trials["status"] == "ok").all()
    ok = trials.groupby("arm")["total_tokens"].mean()
    assert ok[kt.ARM] / ok[kt.BASELINE] == pytest.approx(kt.TRUTH_RATIO, rel=0.12)  # pooled 200 runs per arm
    scores = kt.score(trials, kt.TRUTH_RATIO, methods=("bootstrap-t", "BCa"), n_resamples=2_000).set_index("method")
    new, old = scores.loc["bootstrap-t"], scores.loc["BCa"]
    assert new["batches"] == 40 and new["no_interval"] == 0
    assert new["coverage"] >= 0.85  # at a true 95%, 7+ misses of 40 happen 0.3% of the time
    assert old["coverage"] < 0.85  # the old default (BCa, ~83%) misses 10 of these seeded 40
    assert 0.1 < new["median_width"] < 2.0


@pytest.mark.slow
def test_coverage_200_batches(lab):
    trials = kt.simulate(lab, kt.SLOW_TEST_BATCHES)  # the committed table's first 200 batches
    scores = kt.score(trials, kt.TRUTH_RATIO, methods=("bootstrap-t", "BCa")).set_index("method")
    new, old = scores.loc["bootstrap-t"], scores.loc["BCa"]
    low, high = kt.BAND
    assert new["coverage_low"] <= high and new["coverage_high"] >= low, new.to_dict()
    assert old["coverage_high"] < low, old.to_dict()  # the old default's undercoverage is resolved, not noise
    assert np.isfinite(new["mean_width"])
