"""caveman's published table (docs/method.md#savings), reproduced exactly from its snapshot, plus the CI it lacks."""

import hashlib
import json
import math
import re
import subprocess
import sys

import pytest

from kit import stats
from kit.analysis import metrics
from kit.analysis.snapshot import (
    SnapshotError,
    fmt_pct,
    load_snapshot,
    parse_snapshot,
    snapshot_markdown,
    snapshot_table,
    snapshot_to_trials,
)
from kit.cli.snapshot import main
from tests.support import FIXTURES

RESULTS = FIXTURES / "caveman" / "results.json"
MD5 = "520f50ea115965d85a8d7e458ace147c"

# caveman's evals/measure.py run unmodified on this file (commit 2f49f0e1, tests/fixtures/SOURCES.md), row for row.
PUBLISHED = [
    "| **caveman-cn** | +54% | +49% | +10% | +93% | 27% | 951 / 2045 |",
    "| **caveman** | +50% | +46% | +0% | +88% | 25% | 1026 / 2045 |",
    "| **caveman-es** | +48% | +37% | −14% | +72% | 31% | 1218 / 2045 |",
    "| **compress** | +21% | +22% | −18% | +57% | 22% | 1624 / 2045 |",
]
HEADER = """_Generated: 2026-04-08T22:01:24.027359+00:00_
_Model: claude-opus-4-6 · CLI: 2.1.97 (Claude Code)_
_Tokenizer: tiktoken o200k_base (approximation of Claude's BPE)_
_n = 10 prompts, single run per arm_

**Reference arms (no skill):**
- baseline (no system prompt): 1948 tokens total
- terse control (`Answer concisely.`): 2045 tokens total (−5% vs baseline)
"""
PER_PROMPT = {
    "__baseline__": [163, 330, 104, 253, 231, 191, 235, 136, 171, 134],
    "__terse__": [204, 339, 82, 227, 217, 167, 328, 155, 171, 155],
    "caveman": [92, 41, 64, 226, 151, 103, 138, 50, 93, 68],
    "caveman-cn": [65, 24, 74, 190, 147, 72, 136, 43, 125, 75],
    "caveman-es": [94, 198, 84, 230, 61, 190, 146, 55, 64, 96],
    "compress": [164, 230, 42, 268, 164, 144, 255, 161, 73, 123],
}


@pytest.fixture(scope="module")
def snap():
    assert hashlib.md5(RESULTS.read_bytes()).hexdigest() == MD5
    return load_snapshot(RESULTS)


@pytest.fixture(scope="module")
def table(snap):
    return snapshot_table(snap)


def test_snapshot_loads_with_its_metadata(snap):
    assert snap.metadata["model"] == "claude-opus-4-6" and len(snap.prompts) == 10
    assert list(snap.arms) == ["__baseline__", "__terse__", "caveman", "caveman-cn", "caveman-es", "compress"]
    assert snap.skills == ["caveman", "caveman-cn", "caveman-es", "compress"]


def test_per_prompt_token_counts_match_the_recount(table):
    assert table.attrs["per_prompt_tokens"] == PER_PROMPT
    assert table.attrs["reference_totals"] == {"__baseline__": 1948, "__terse__": 2045}


def test_published_table_is_reproduced_exactly(table):
    assert list(table["skill"]) == ["caveman-cn", "caveman", "caveman-es", "compress"]  # sorted by median
    rows = [
        f"| **{r.skill}** | {fmt_pct(r.median)} | {fmt_pct(r.mean)} | {fmt_pct(r.min)} | {fmt_pct(r.max)} | "
        f"{r.stdev * 100:.0f}% | {r.tokens_skill} / {r.tokens_control} |"
        for r in table.itertuples()
    ]
    assert rows == PUBLISHED
    assert list(table["n"]) == [10] * 4 and set(table["note"]) == {""}


def test_unrounded_statistics(table):
    row = table.set_index("skill").loc["caveman"]
    savings = [1 - s / t for s, t in zip(PER_PROMPT["caveman"], PER_PROMPT["__terse__"], strict=True)]
    assert row["mean"] == pytest.approx(sum(savings) / 10, abs=1e-12)
    assert row["min"] == pytest.approx(1 - 226 / 227) and row["max"] == pytest.approx(1 - 41 / 339)


def test_markdown_reproduces_the_report_and_adds_the_ci(table):
    md = snapshot_markdown(table)
    assert md.startswith(HEADER)
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| Skill"))
    assert lines[head] == "| Skill | Median | Mean | Min | Max | Stdev | Tokens (skill / terse) | Mean 95% CI |"
    body = lines[head + 2 : head + 6]
    assert [line.rsplit(" [", 1)[0] for line in body] == PUBLISHED  # the original columns, then the CI
    assert body[0].endswith("| [+30%, +68%] |")
    assert "_Savings = 1 - skill_tokens / terse_tokens per prompt._" in lines


def test_ci_is_present_and_contains_the_mean(table):
    for r in table.itertuples():
        assert math.isfinite(r.lower) and math.isfinite(r.upper)
        assert r.lower < r.mean < r.upper and r.confidence == 0.95
        assert "t-interval" in r.method
    again = snapshot_table(load_snapshot(RESULTS))
    assert list(again["lower"]) == list(table["lower"])  # the same interval every time


def test_percent_format_and_its_sign():
    assert [fmt_pct(x) for x in (0.5, -0.14, 0.0, 0.004, -0.004)] == ["+50%", "−14%", "+0%", "+0%", "−0%"]
    assert fmt_pct(float("nan")) == "n/a"


def test_snapshot_as_trials_feeds_the_ratio_machinery(snap):
    trials = snapshot_to_trials(snap)
    assert list(trials.columns) == [*metrics.META_COLUMNS, *metrics.TRIAL_COLUMNS]
    assert len(trials) == 60 and set(trials["status"]) == {"ok"} and set(trials["batch"]) == {"results"}
    cav = trials[trials["arm"] == "caveman"].sort_values("run")
    assert list(cav["output_tokens"]) == PER_PROMPT["caveman"] == list(cav["total_tokens"])
    assert cav["trial_id"].iloc[3] == "r03-caveman" and cav["input_tokens"].isna().all()
    r = stats.ratio(trials, "output_tokens", "caveman", "__terse__", matched=True)  # run i = prompt i in every arm
    assert r.estimate == pytest.approx(1026 / 2045) and r.paired and r.lower < r.estimate < r.upper


def _doc(**over):
    doc = {"metadata": {"n_prompts": 2}, "prompts": ["a?", "b?"], "arms": {"__terse__": ["x y", "z"], "s": ["x", ""]}}
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ([], r"\$: expected an object"),
        (_doc(prompts=[]), r"\$\.prompts: expected a non-empty list"),
        (_doc(prompts=["a?", 3]), r"\$\.prompts\[1\]: expected a string; got int"),
        (_doc(metadata={"n_prompts": 3}), r"\$\.metadata\.n_prompts: says 3 but \$\.prompts has 2"),
        (_doc(arms={}), r"\$\.arms: expected a non-empty object"),
        (_doc(arms={"s": ["x"]}), r"\$\.arms\.s: has 1 outputs; \$\.prompts has 2"),
        (_doc(arms={"s": ["x", None]}), r"\$\.arms\.s\[1\]: expected an output string; got NoneType"),
    ],
)
def test_bad_snapshots_are_located(doc, where):
    with pytest.raises(SnapshotError, match=r"^bad\.json: " + where):
        parse_snapshot(doc, "bad.json")


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{\n  "prompts": ["a?",]\n}\n')
    with pytest.raises(SnapshotError, match=r"results\.json:2:20: not valid JSON"):
        load_snapshot(path)


def test_missing_control_and_zero_control_prompts(tmp_path):
    snap = parse_snapshot(_doc(arms={"__terse__": ["x y z", ""], "s": ["x", "y"]}), "t.json")
    with pytest.raises(SnapshotError, match=r"control arm '__nope__' not in \$\.arms"):
        snapshot_table(snap, control="__nope__")
    row = snapshot_table(snap).iloc[0]
    # measure.py would count the empty control as a saving of 0; the kit leaves it out and says so
    assert row["n"] == 1 and row["mean"] == pytest.approx(2 / 3) and "zero control" in row["note"]
    assert "_Note: s: 1 prompt(s) with a zero control left out" in snapshot_markdown(snapshot_table(snap))


def test_json_round_trip_of_the_fixture_is_what_load_reads(snap):
    data = json.loads(RESULTS.read_text())
    assert parse_snapshot(data, str(RESULTS)) == snap


def test_command_prints_the_table_with_its_interval(capsys):
    assert main([str(RESULTS), "--confidence", "0.9"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(HEADER) and "| Mean 90% CI |" in out
    rows = [line for line in out.splitlines() if line.startswith("| **")]
    assert [line.rsplit(" [", 1)[0] for line in rows] == PUBLISHED
    assert "_Mean 90% CI: t-interval over prompts;" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.json"], r"^error: missing\.json: cannot read the snapshot"),
        ([str(RESULTS), "--control", "__nope__"], r"^error: .*control arm '__nope__' not in \$\.arms"),
    ],
)
def test_command_bad_input_is_one_line_and_exit_1(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and re.match(message, err)


def test_command_refuses_a_confidence_outside_0_1(capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(RESULTS), "--confidence", "95"])
    assert exc.value.code == 2 and "expected a confidence between 0 and 1" in capsys.readouterr().err


def test_python_m_kit_snapshot(tmp_path):
    """The public command line (docs/design.md): ``python -m kit snapshot PATH``, run as a user runs it."""
    ok = subprocess.run(
        [sys.executable, "-m", "kit", "snapshot", str(RESULTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert [line.rsplit(" [", 1)[0] for line in ok.stdout.splitlines() if line.startswith("| **")] == PUBLISHED
    argv = [sys.executable, "-m", "kit", "snapshot", str(tmp_path / "nope.json")]
    bad = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1
