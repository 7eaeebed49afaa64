"""The known-truth study (bench/known_truth.py): its agent loop, its truth, and the coverage of kit.stats.ratio.

The committed table is ``bench/known_truth.md``. Here: the study's in-process loop sends the SDK agent's
exact requests; the truth reproduces from fresh forced trials; 40 simulated batches keep the interval's
coverage above a loose floor; a few grid cells, the planner, the stop rules and what few runs cannot see
run at a few hundred seeded replications (bands loose enough to hold for any seed's noise); the notes
kit.stats writes quote the committed table. The slow tests rerun the
committed grid and check the rule that chose the default.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from dataclasses import replace

import numpy as np
import pytest

from kit import stats
from kit.agents import sdk
from kit.experiment import design
from kit.provider import log as provider_log
from kit.provider import serve, wire_openai
from kit.stats import intervals, planning
from kit.stats.coverage import STUDY_COVERAGE
from tests.support import ROOT

STUDY = ROOT / "bench" / "known_truth.py"


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
    scores = kt.score(trials, kt.TRUTH_RATIO, methods=(stats.DEFAULT_METHOD,), n_resamples=2_000).set_index("method")
    new = scores.loc[stats.DEFAULT_METHOD]
    assert new["batches"] == 40 and new["no_interval"] == 0
    assert new["coverage"] >= 0.80  # the pack's arms at 5 runs: ~0.88 (bench/known_truth.md), 0.3% tail below
    assert 1.5 < new["median_width"] < 8.0


FAST_CELLS = [
    ("lognormal CV 0.5", 5, 1.3),
    ("heavy tails", 10, 1.0),
    ("bimodal", 10, 3.0),
    ("batch-read mixture", 5, 1.0),
]


def test_grid_fast():
    """A few grid cells at 400 replications (seeded): the default stays near 95% and narrower than the old one."""
    scores = kt.grid(400, FAST_CELLS)
    default = scores[scores["method"] == stats.DEFAULT_METHOD]
    old = scores[scores["method"] == "bootstrap-t paired by run (old default)"]
    assert default["coverage"].between(0.90, 0.985).all(), default.to_dict("records")  # 400 draws: sd ~1.1 points
    assert default.iloc[0]["median_width"] <= 4.0  # lognormal CV 0.5, 5 runs per arm (the bar)
    assert (default["median_width"].to_numpy() < old["median_width"].to_numpy()).all()


def test_planner_and_stop_rule_fast():
    plans = kt.planner_check(300, cases=(1, 7)).set_index("target")  # CV 0.5: precision 1.5, effect 1.3
    assert plans["error"].abs().max() <= 0.2, plans.to_dict("records")
    stops = kt.stop_study(300, cases=(1, 7, 15))  # precision 2 on lognormal and the pack's arms; pack, excludes 1
    assert stops["coverage"].min() >= 0.88 and (stops["mean runs"] <= kt.STOP_MAX).all()
    assert (stops["interval"] == ["97%", "97%", "anytime-valid"]).all() and (stops["first look"] == 15).all()


def test_few_runs_fast():
    """The ceiling a missed tail sets, and the one-arm flag, at 300 seeded samples per row."""
    unseen = kt.unseen_check(300).set_index(["data", "n"])
    bimodal = unseen.loc[("bimodal", 5)]
    assert 0.17 < bimodal["unseen"] < 0.30  # 0.75^5 = 0.237 of five-run samples hold no long run
    assert bimodal["coverage unseen"] <= 0.05 and bimodal["coverage rest"] >= 0.9
    assert unseen.loc[(kt.PACK_CELL, 5), "coverage unseen"] <= 0.05


def test_arms_of_different_shape_fast():
    """The spread flag at 300 seeded batches per row: it holds nearly every batch of arms of different shape, few of
    one shape from 10 runs, and flagged batches of different shapes cover below the band (no hard cut-off at 20)."""
    flags = kt.shape_check(300).set_index(["data", "n"])
    assert flags.loc[(kt.PACK_CELL, 5), "flagged"] >= 0.9  # the near-constant batching arm against placebo
    for n in (10, 20):
        assert flags.loc[("tight vs noisy", n), "flagged"] >= 0.9
        assert flags.loc[("lognormal CV 0.5", n), "flagged"] <= 0.2
    assert flags.loc[("tight vs noisy", 20), "coverage flagged"] < 0.95  # 0.918 at 2,000 batches
    assert flags.loc[("tight vs noisy", 5), "flagged"] > flags.loc[("tight vs noisy", 5), "old flagged"]


def _committed(section: str, row_start: str, column: int) -> float:
    """A coverage from the committed ``bench/known_truth.md``: in ``section``, the row starting so, cell ``column``."""
    text = (STUDY.parent / "known_truth.md").read_text().split(f"## {section}\n")[1].split("\n## ")[0]
    (line,) = [x for x in text.splitlines() if x.startswith(row_start)]
    return float(line.split("|")[column].split("/")[0])


def test_the_stop_rules_constants_are_the_committed_tables_choice():
    """kit.stats.planning's STOP_FIRST_LOOK and STOP_MISS_SHARE as bench/known_truth.md's stop table chose them: the
    rule as it ships covers >= 93% at the stop in every row, the fixed-n 95% interval it replaced did not."""
    text = (STUDY.parent / "known_truth.md").read_text().split("## Stopping rules\n")[1].split("\n## ")[0]
    rows = [[c.strip() for c in x.strip("|").split("|")] for x in text.splitlines() if x.startswith("| ")][1:]
    level = f"{1 - planning.STOP_MISS_SHARE * 0.05:.0%}"
    shipped = [r for r in rows if r[3] in (level, "anytime-valid") and r[4] == str(stats.STOP_FIRST_LOOK)]
    assert len(shipped) == 16 and min(float(r[5]) for r in shipped) >= 0.93, shipped
    replaced = [r for r in rows if r[3] == "95%"]
    assert replaced and min(float(r[6]) for r in replaced) < 0.93


def test_the_kits_notes_quote_the_committed_study():
    """The notes kit.stats writes on few-run intervals quote bench/known_truth.md's numbers."""
    for row in intervals.MEAN_COVERAGE:  # the per-arm note's coverage by the runs' shape class, row for row
        assert _committed("Per-arm intervals", f"| {row.method} | {row.shape} | {row.runs} |", 5) == row.coverage
    batching = [_committed("Per-arm intervals", f"| batching arm | {n} |", 3) for n in kt.ARM_N]
    assert min(batching) >= 0.93  # the near-constant arm the CV floor is for (0.41 at 5 runs without it)


def test_the_study_coverage_a_ratio_prints_is_the_committed_tables():
    """kit.stats.coverage.STUDY_COVERAGE is bench/known_truth.md's *Arms of different shape* summary, row for row."""
    text = (STUDY.parent / "known_truth.md").read_text().split("## Arms of different shape\n")[1].split("\n## ")[0]
    rows = [x for x in text.splitlines() if x.startswith("| ") and ("differ in spread" in x or "alike," in x)]
    committed = {}
    for line in rows:
        band, look, *values = (c.strip() for c in line.strip("|").split("|"))
        committed[(int(band.split("–")[0].split()[0]), look.startswith("differ"))] = tuple(map(float, values))
    table = {(r.runs, r.differ): (r.coverage, r.lowest, r.highest) for r in STUDY_COVERAGE}
    assert table == committed and len(table) == 2 * len(kt.GRID_N[1:])


def _section_rows(section: str) -> list[list[str]]:
    text = (STUDY.parent / "known_truth.md").read_text().split(f"## {section}\n")[1].split("\n## ")[0]
    return [[c.strip() for c in x.strip("|").split("|")] for x in text.splitlines() if x.startswith("| ")][1:]


def test_the_quality_gate_and_the_family_hold_their_error_rates_in_the_committed_study():
    """docs/method.md#grading and #family quote these tables: the gate (Newcombe's method 11) calls parity at most
    2.5% of the time when the arm truly loses the margin, where method 10 did not; Holm keeps the family-wise error
    near 5% where the unadjusted rows do not (2,000 batches per row: 0.05 + 2 standard errors is 0.060)."""
    gate = _section_rows("Quality gate")
    assert len(gate) == len(kt.QUALITY_SHAPES) * len(kt.QUALITY_N)
    assert max(float(r[2]) for r in gate) <= 0.025 < max(float(r[4]) for r in gate)
    family = _section_rows("Family")
    assert len(family) == len(kt.FAMILY_CASES)
    assert max(float(r[3]) for r in family) <= 0.060 and min(float(r[2]) for r in family) > 0.060


def test_the_quality_gate_and_the_family_fast():
    """The two studies' functions at a small size: the same verdicts the committed tables give, on the kit's own
    quality_gate interval and kit.stats.holm."""
    gate = kt.quality_study(400)
    assert (gate["loses the margin"] <= 0.05).all() and (gate["scores alike"] >= 0).all()
    family = kt.family_study(100)
    assert (family["Holm"] <= family["unadjusted"]).all()


@pytest.mark.slow
def test_grid_full_chooses_the_default():
    """The committed table's rule: the default is in band in every n >= 5 cell of the issue's grid."""
    scores = kt.grid()
    choice = kt.choose_default(scores)
    assert choice.iloc[0]["method"] == stats.DEFAULT_METHOD and bool(choice.iloc[0]["qualifies"]), choice
    cell = scores[
        (scores["data"] == "lognormal CV 0.5") & (scores["n"] == 5) & (scores["method"] == stats.DEFAULT_METHOD)
    ]
    assert (cell["median_width"] <= 4.0).all()


@pytest.mark.slow
def test_planner_and_stop_rule_full():
    plans = kt.planner_check(kt.GRID_REPLICATIONS)
    stated = plans[(plans["from"] == "stated CV") & plans["data"].str.startswith("lognormal")]
    assert stated["error"].abs().max() <= 0.15, stated.to_dict("records")
    pilots = plans[(plans["from"] == "pilot of 5") & (plans["data"] != "heavy tails")]
    assert (pilots["met"] >= 0.8).all(), pilots.to_dict("records")  # Pareto tails: see docs/method.md#planning
    stops = kt.stop_study(kt.GRID_REPLICATIONS)
    shipped = stops[(stops["interval"] != "95%") & (stops["first look"] == stats.STOP_FIRST_LOOK)]
    assert (shipped["coverage"] >= 0.93).all(), shipped.to_dict("records")  # the pack's arms too, looking from 15
    null = (shipped["rule"] == "excludes 1") & (shipped["true ratio"] == 1)  # its stops are false claims
    assert (shipped.loc[null, "reached"] <= 0.05).all()
    # precision stops that stopped on the target, where enough did to score (the anytime rule's guarantee is over
    # every sequence: its early stops at a small effect are the overshooting ones)
    judged = shipped[shipped["rule"].str.startswith("precision") & (shipped["reached"] * kt.GRID_REPLICATIONS >= 100)]
    assert (judged["when reached"] >= 0.93).all(), judged.to_dict("records")


@pytest.mark.slow
def test_coverage_200_batches(lab):
    trials = kt.simulate(lab, kt.SLOW_TEST_BATCHES)  # the committed table's first 200 batches
    scores = kt.score(trials, kt.TRUTH_RATIO).set_index("method")
    new, first = scores.loc[stats.DEFAULT_METHOD], scores.loc["BCa paired by run (first default)"]
    assert new["coverage"] >= first["coverage"], scores.to_dict("records")
    assert np.isfinite(new["median_width"])
