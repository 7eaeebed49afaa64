"""The report's design-dependent parts: the Code Mode section, the per-arm settings table, the diagnostic label
on uncached ratios when trials share a cacheable head, and the run stage's warnings reaching the Warnings list.

Small synthetic tables in the shapes the plot stage reads (analysis/trials.csv, design.json); numbers chosen so
each expected cell can be worked out by hand.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd
import pytest

from kit import stats
from kit.experiment.layout import BatchDir, write_design
from kit.records import Design, Manifest
from kit.report import batch as report
from kit.stages import analyze
from tests.report_tables import DESIGN, ratio_row, report_headline, report_ratios, report_trials
from tests.support import run_params

CODEX = {"shared_first_prefix_tokens": 1256, "profile": "openai-implicit", "model": "gpt-5.4"}


def _code_mode_trials() -> pd.DataFrame:
    """Two arms, two ok trials each and a failed placebo trial whose counts must not enter any mean or sum.

    batching: cells 2 and 4 with 6 and 8 calls (3 and 2 per cell: 2.5); placebo: 5 and 3 cells with one call
    each (1.0). Quota: both arms' windows move as the interleaved trials run (started_at order, not row order).
    """
    rows = [
        ("batching", "ok", "t2", 2, 6, 2, 1, 0, 10.0, 11.0, 3.0, 3.0),
        ("placebo", "ok", "t1", 5, 5, 0, 0, 1, 9.0, 10.0, 3.0, 3.0),
        ("batching", "ok", "t4", 4, 8, 3, 2, 1, 12.0, 14.0, 3.0, 4.0),
        ("placebo", "ok", "t3", 3, 3, 0, 0, 2, 11.0, 12.0, 3.0, 3.0),
        ("placebo", "failed", "t5", 9, 90, 9, 9, 9, 14.0, 15.0, 4.0, 4.0),
    ]
    columns = ["arm", "status", "started_at", "exec_cells", "exec_tool_calls", "exec_multi_call_cells",
               "exec_promise_all_cells", "function_calls", "quota_primary_used_first", "quota_primary_used_last",
               "quota_secondary_used_first", "quota_secondary_used_last"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns).assign(batch="b1")


# ---------------------------------------------------------------- 1. Code Mode


def test_code_mode_section_tables_cells_per_arm_over_ok_trials():
    lines = report.code_mode_section(_code_mode_trials(), _with(simulated=False))
    assert lines[:3] == ["## Code Mode cells (Codex)", "", report.CODE_MODE_INTRO]
    text = "\n".join(lines)
    assert (
        "| arm | trials | exec cells per trial | tools.* calls per cell | cells with ≥ 2 calls "
        "| cells with Promise.all | plain function calls |" in text
    )
    assert "| batching | 2 | 3 | 2.50 | 5 | 3 | 1 |" in text
    assert "| placebo | 2 | 4 | 1 | 0 | 0 | 3 |" in text  # the failed trial's 9 cells and 90 calls are left out
    assert "simulation" not in text


def test_code_mode_intro_says_what_calls_per_cell_is():
    intro = report.CODE_MODE_INTRO
    assert intro.startswith("Codex ran with Code Mode (`backend_options: {code_mode: true}`")
    assert "`features.code_mode=true`" in intro and "each trial's `exec_tool_calls / exec_cells`" in intro
    assert intro.endswith("so reads cut from a full cell are read again.")


def test_code_mode_quota_line_first_to_last_per_arm_in_run_order():
    line = report.quota_line(stats.finished(_code_mode_trials()))
    assert line.startswith("Codex quota used: first → last per arm")
    assert "primary window batching 10% → 14%, placebo 9% → 12%" in line  # t1..t4 by start, not row order
    assert "secondary window batching 3% → 4%, placebo 3% → 3%" in line
    no_quota = _code_mode_trials().drop(columns=[c for c in _code_mode_trials() if c.startswith("quota_")])
    assert report.quota_line(no_quota) == ""
    unreported = _code_mode_trials().assign(quota_secondary_used_first=np.nan, quota_secondary_used_last=np.nan)
    assert "secondary" not in report.quota_line(unreported) and "primary window" in report.quota_line(unreported)


def test_code_mode_section_only_where_an_ok_trial_ran_a_cell():
    assert report.code_mode_section(report_trials(), DESIGN) == []  # no Code Mode columns at all
    no_cells = _code_mode_trials().assign(exec_cells=[0, 0, 0, 0, 7])  # only the failed trial ran cells
    assert report.code_mode_section(no_cells, DESIGN) == []
    simulated = report.code_mode_section(_code_mode_trials(), _with(simulated=True))
    assert any("scripted model on the embedded provider: a simulation" in line for line in simulated)


def test_unknown_counts_stay_missing_not_zero():
    trials = _code_mode_trials().astype({"function_calls": "Float64"})
    trials["function_calls"] = pd.NA
    text = "\n".join(report.code_mode_section(trials, DESIGN))
    assert "| batching | 2 | 3 | 2.50 | 5 | 3 | — |" in text


# ---------------------------------------------------------------- 2. per-arm settings


SETTINGS = [
    {"arm": "placebo", "model": "gpt-5.4", "effort": "medium", "binary": "/usr/bin/codex", "version": "0.169.0"},
    {"arm": "batching", "model": "gpt-5.4", "effort": "high", "binary": "/opt/codex", "version": "0.170.0"},
]


def _with(**facts) -> Design:
    """The report tests' design with some facts changed."""
    return msgspec.structs.replace(DESIGN, **facts)


def _manifest(batch: str, warnings: list[str] | None = None) -> Manifest:
    params = run_params(order="balanced", backend="codex", endpoint="real", model="gpt-5.4")
    settings: dict[str, dict[str, str | None]] = {
        row["arm"]: {k: v for k, v in row.items() if k != "arm"} for row in SETTINGS
    }
    return Manifest(batch=batch, params=params, salt="s", simulated=False, arm_settings=settings,
                    warnings=warnings or [], started_at="2026-12-01T00:00:00+00:00", status="complete")  # fmt: skip


def test_design_records_each_arm_and_the_report_tables_it(tmp_path):
    design = analyze.design_of([_manifest("b1")])
    assert design.arm_settings == SETTINGS
    write_design(BatchDir(tmp_path).analysis, design, [])  # as analyze writes it: each row's keys sorted
    design, _ = BatchDir(tmp_path).read_design()
    md = _write(tmp_path, msgspec.structs.replace(design, simulated=True, baseline="placebo"))
    assert "| arm | model | effort | binary | version |" in md
    assert "| batching | gpt-5.4 | high | /opt/codex | 0.170.0 |" in md
    assert "| arm_settings |" not in md and "| run_warnings |" not in md  # not repeated as raw facts
    assert md.index("## Design") < md.index("| arm | model |") < md.index("## Per arm (total tokens)")


def test_several_batches_name_the_batch_of_each_arm_row():
    design = analyze.design_of([_manifest("b1"), _manifest("b2")])
    assert [row["batch"] for row in design.arm_settings] == ["b1", "b1", "b2", "b2"]
    shuffled = _with(arm_settings=[dict(sorted(row.items())) for row in design.arm_settings])
    assert "| batch | arm | model | effort | binary | version |" in "\n".join(report._arm_settings_lines(shuffled))


def test_a_batch_without_arm_settings_has_no_table():
    old = msgspec.structs.replace(_manifest("b1"), arm_settings={})
    assert analyze.design_of([old]).arm_settings == []
    assert report._arm_settings_lines(_with(arm_settings=[])) == []


# ---------------------------------------------------------------- 3. shared prefix: uncached ratios diagnostic


def test_a_shared_cacheable_prefix_labels_every_uncached_sentence_and_warns(tmp_path):
    design = _with(**CODEX)
    (uncached, structural) = report.uncached_sentences(_structural_ratios(), design)
    assert uncached.endswith(
        "this figure depends on cache warmth (diagnostic: every trial's first request shares its first 1,256 "
        "tokens, so another trial's cache can serve them; docs/method.md#isolation)."
    )
    assert "diagnostic" not in structural  # each trial is its own cache domain there
    md = _write(tmp_path, design)
    warnings = md[md.index("## Warnings") : md.index("## Design")]
    assert "- diagnostic: every trial's first request shares its first 1,256 tokens" in warnings
    assert "(docs/method.md#isolation)" in warnings
    assert md.splitlines()[0] == report.SIMULATION_BANNER  # an embedded batch still says it is a simulation


@pytest.mark.parametrize("shared", [0, 900, None])  # 900: below the 1,024-token minimum, never cacheable
def test_no_label_without_a_cacheable_shared_prefix(shared):
    design = _with(**{**CODEX, "shared_first_prefix_tokens": shared})
    assert all("diagnostic" not in s for s in report.uncached_sentences(report_ratios(), design))
    assert all("diagnostic" not in w for w in report.derived_warnings(report_ratios(), report_trials(), design))


def _structural_ratios() -> pd.DataFrame:
    ratios = report_ratios()
    extra = ratios[ratios["metric"] == "uncached_input_tokens"].assign(metric="structural_uncached")
    return pd.concat([ratios, extra], ignore_index=True)


# ---------------------------------------------------------------- 4. the run stage's warnings


RETENTION = (
    "retention: gpt-5.5 offers only 24h prompt_cache_retention (profile openai-implicit: …); cached prefixes "
    "outlive the batch, so cross-trial isolation rests on the nonces alone (docs/method.md#retention)"
)


def test_run_stage_warnings_reach_the_report_once(tmp_path):
    design = analyze.design_of([_manifest("b1", [RETENTION]), _manifest("b2", [RETENTION])])
    assert design.run_warnings == [RETENTION]  # the same warning from two batches, once
    warnings = analyze._warnings(design)
    assert warnings == [RETENTION]
    md = _write(tmp_path, msgspec.structs.replace(design, simulated=True, baseline="placebo"), warnings)
    assert f"- {RETENTION}" in md[md.index("## Warnings") : md.index("## Design")]
    blocked = analyze._warnings(msgspec.structs.replace(design, schedule="blocked (BLOCKED: arms separated in time)"))
    assert blocked[0].startswith("Blocked schedule") and blocked[1:] == [RETENTION]


def _write(folder, design: Design, warnings: list[str] | None = None) -> str:
    return report.write_report(
        folder, design=design, headline=report_headline(), ratios=report_ratios(), trials=report_trials(), figures={},
        warnings=warnings or [],
    ).read_text()  # fmt: skip


# ---------------------------------------------------------------- 5. a bound near 1 shows its side of 1


@pytest.mark.parametrize(
    ("estimate", "lower", "upper", "printed", "includes"),
    [
        (1.5, 1.0041, 2.0, "95% CI 1.004–2.00", False),  # issue #30 item 7: both printed "1.00"
        (1.5, 0.9976, 2.0, "95% CI 0.998–2.00", True),
        (0.7, 0.5, 0.9976, "95% CI 1.002–2.00", False),  # fewer: bounds invert (1 / 0.9976 = 1.0024)
        (0.7, 0.5, 1.0041, "ratio 0.70; 95% CI 0.50–1.004", True),  # a null result stays in the ratio's units
        (1.5, 1.3, 2.0, "95% CI 1.30–2.00", False),  # away from 1: two decimals as before
    ],
)
def test_no_difference_verdict_agrees_with_the_printed_bounds(estimate, lower, upper, printed, includes):
    """The verdict is decided on the unrounded bounds and the bound near 1 carries the digit that shows it."""
    row = ratio_row("total_tokens", estimate, lower, upper)
    sentence = report.total_sentences(pd.DataFrame([row]), DESIGN)[0]
    assert printed in sentence
    assert ("which includes no difference" in sentence) is includes


def test_a_table_cell_never_prints_a_bound_that_is_not_1_as_1():
    """The ratios table's cells: 0.9996 read "1.00" in 3 significant digits, 1.0041 "1.00" in 2 decimals."""
    assert report.interval(1.0041, 2.0) == "1.004–2.00"
    assert report.interval(0.9996, 1.5) == "0.9996–1.50"
    assert report.interval(0.85, 1.0) == "0.850–1.00"
    assert report.interval(11_283, 11_396) == "11,283–11,396"


@pytest.mark.parametrize(
    ("covered", "clause"),
    [
        (0.903, "(such intervals covered about 90% in the known-truth study, 85%–95% by shape, not 95%)"),
        (0.96, "(such intervals covered about 96% in the known-truth study, 94%–100% by shape)"),
    ],
)
def test_the_interval_says_what_the_study_measured_for_its_case(covered, clause):
    """Issue 30: the headline said "95% CI" where intervals of arms of different shape held about 90%."""
    flagged = "placebo" if covered < 0.93 else ""  # the flagged case quotes the study's range by shape
    row = ratio_row("total_tokens", 0.4, 0.25, 0.8, study_coverage=covered, family_size=2, family_level=0.975,
                    family_lower=0.22, family_upper=0.9, decisive=True, interval_rests_on=flagged)  # fmt: skip
    sentence = report.total_sentences(pd.DataFrame([row]), DESIGN)[0]
    assert f"ratio 0.40, 95% CI 0.25–0.80 {clause}; decisive among the family's 2 comparisons (Holm: 97.5% CI " in (
        sentence
    )
    table = report._ratios_table(pd.DataFrame([row]))
    assert (
        table.loc[0, "study coverage"] == f"{covered:.1%}"
        and table.loc[0, "family (Holm)"] == "decisive at 97.5% (of 2)"
    )


def test_a_per_arm_interval_past_the_runs_is_flagged_in_the_per_arm_table():
    """Issue 30 item 7: placebo's five trials were 11,309–76,661 tokens and its mean's CI read 5,927–130,264 with no
    flag; arms.csv's ``bound_beyond_data`` now reaches the report's per-arm table."""
    arms = pd.DataFrame(
        [
            {"arm": "placebo", "metric": "total_tokens", "bound_beyond_data": True},
            {"arm": "batching", "metric": "total_tokens", "bound_beyond_data": False},
            {"arm": "batching", "metric": "cycles", "bound_beyond_data": True},  # another metric: not this table's
        ]
    )
    table = report._headline_table(report_headline(), arms=arms).set_index("arm")
    assert table.loc["placebo", "flag"] == "CI reaches past the runs (arms.csv note)"
    assert table.loc["batching", "flag"] == ""
    assert (report._headline_table(report_headline())["flag"] == "").all()  # an older arms.csv: no column, no flag


def test_a_stopped_batch_names_the_interval_it_published():
    """The stop rule's ``exclude_one`` publishes its anytime-valid interval (ratios.csv ``looks``); the sentence
    says which interval it quotes, at its own level, not "95% CI"."""
    note = "anytime-valid over 9 looks (99.39% interval at the last)"
    row = ratio_row("total_tokens", 0.4, 0.25, 0.8, confidence=0.9939, looks=9, note=note)
    sentence = report.total_sentences(pd.DataFrame([row]), DESIGN)[0]
    assert "(99.39% anytime-valid CI over 9 looks 1.25–4.00× fewer; ratio 0.40, 99.39% CI 0.25–0.80;" in sentence
    precision = ratio_row("total_tokens", 1.5, 1.2, 1.9, confidence=0.97, looks=3, note="the precision stop's …")
    assert (
        "(ratio 1.50; 97% CI of the precision stop, over 3 looks 1.20–1.90;"
        in report.total_sentences(pd.DataFrame([precision]), DESIGN)[0]
    )


def test_a_capped_bound_is_named_a_limit_of_the_data_not_a_confidence_bound():
    """Issue 30 item 6: a capped bound is the sample's most extreme ratio, not a confidence bound."""
    capped = ratio_row("total_tokens", 0.4, 0.2477, 0.80, bound_beyond_data=True, paired=False, resample_min=0.2477,
                       resample_max=0.84)  # fmt: skip
    sentence = report.total_sentences(pd.DataFrame([capped]), DESIGN)[0]
    assert (
        "ratio 0.40, 95% CI 0.25–0.80, its lower bound 0.248 capped: the smallest ratio any resample of these runs "
        "gives, a limit of the data, not a confidence bound" in sentence
    )
    paired = {**capped, "paired": True}  # flagged, not capped: its bounds stay the model's
    assert "capped" not in report.total_sentences(pd.DataFrame([paired]), DESIGN)[0]
