"""``python -m kit history`` on the shared transcript fixtures: views, occupancy, structural cache, report.

The totals must equal the parse stage's (``kit.transcripts.read`` summed, as ``python -m kit parse``
prints them) and ccusage's where it is installed (``make bench-peers``) on the same Claude sessions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pandas as pd
import pytest

from kit import transcripts
from kit.cli import occupancy as occupancy_cli
from kit.history import report as history_report
from kit.stages import history
from kit.transcripts import cache, twins
from kit.transcripts.collect import TOTALS
from tests.support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"
CCUSAGE = ROOT / ".tools/bench-peers/node_modules/@ccusage/ccusage-linux-x64/bin/ccusage"
PERIODS = {"by": "period", "a": [None, "2026-03-01"], "b": ["2026-03-02", None], "names": ["before", "after"]}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache._STORES.clear()
    yield
    cache._STORES.clear()


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> history.Result:
    out = tmp_path_factory.mktemp("history")
    found = history.analyze([FIXTURES], compare_spec=PERIODS, cache=out / "cache")
    history.write(found, out / "report")
    found.parameters["out"] = out / "report"
    return found


def test_totals_equal_the_parse_stage(result: history.Result) -> None:
    parsed = transcripts.read(FIXTURES)
    assert {c: result.totals[c] for c in TOTALS} == {c: int(parsed[c].sum()) for c in TOTALS}
    assert result.totals["requests"] == len(parsed)
    for view in result.views.values():  # every view splits the same rows
        assert int(view["total_tokens"].sum()) == result.totals["total_tokens"]


def test_views_cost_and_subagents(result: history.Result) -> None:
    assert set(result.views) == {"day", "session", "project", "model"}
    model = result.views["model"]
    assert {"cost_usd", "credits", "hit_rate", "cache_write_5m_tokens", "cache_write_1h_tokens"} <= set(model)
    unpriced = set(result.history.unpriced.loc[result.history.unpriced["card"] == "usd", "model"])
    assert model.loc[model["model"].isin(unpriced), "cost_usd"].isna().all()  # NA, never zero
    assert model.loc[~model["model"].isin(unpriced), "cost_usd"].notna().all()
    assert (result.views["session"]["agent"] == "subagent").any()  # the compaction request's file, apart


def test_sessions_occupancy_and_structural(result: history.Result) -> None:
    sessions = result.sessions.set_index("session")
    assert sessions.loc["claude-session_spotter_tool_heavy", "cycles"] == 4
    assert {"growth_per_cycle", "compactions", "context_drops"} <= set(sessions.columns)
    assert set(result.occupancy["trial_id"]) >= set(sessions.index)
    assert result.blocks and all("Residual context occupancy" in b for b in result.blocks.values())
    s = result.structural.set_index("session")
    assert (s["structural_cached"] <= s["input_tokens"]).all()
    assert s["observed_cached"].notna().all() and s.loc["claude-session_spotter_tool_heavy", "rule_breaks"] >= 0
    assert result.warmth["requests"].sum() > 0


def test_a_sessions_occupancy_is_priced_as_kit_occupancy_prices_it(result: history.Result) -> None:
    """The history's occupancy reads what ``python -m kit occupancy`` reads of a session: each result's framing and
    ``o200k_base`` count, and its responses' (docs/method.md#calibration), so one session gets one ratio."""
    name = "claude-session_spotter_tool_heavy"
    alone = occupancy_cli.session(FIXTURES / f"{name}.jsonl").iloc[0]
    mine = result.occupancy[result.occupancy["trial_id"] == name].iloc[0]
    assert (
        (mine["priced_by"], mine["output_measure"])
        == ("o200k", "o200k")
        == (alone["priced_by"], alone["output_measure"])
    )
    assert mine["chars_per_token"] == pytest.approx(alone["chars_per_token"])


def test_report_and_stitch_label(result: history.Result) -> None:
    folder = result.parameters["out"]
    text = (folder / "report.md").read_text()
    assert "REAL SESSIONS" in text and "not a simulation" in text
    assert "CROSS-RUN STITCH" in text and "docs/method.md#stitch" in text
    assert "different tasks" in text and "different warmth" in text and "different versions" in text
    for anchor in ("#occupancy", "#structural-cache", "#warmth", "#totals", "#transcripts"):
        assert f"docs/method.md{anchor}" in text
    assert (folder / "report.html").read_text().startswith("<!DOCTYPE html>")
    for name in ("usage_by_day", "usage_by_session", "usage_by_project", "usage_by_model", "sessions", "compare"):
        assert (folder / "analysis" / f"{name}.csv").exists()
    for name in ("daily_usage", "warmth_curve", "structural_vs_observed", "compare"):
        assert (folder / "figures" / f"{name}.png").exists() and (folder / "figures" / f"{name}.svg").exists()
    compare = pd.read_csv(folder / "analysis" / "compare_ratios.csv")
    assert (compare["label"] == "cross-run stitch").all()


def test_one_run_captured_twice_is_named_in_the_report(result: history.Result) -> None:
    """The fixtures hold one harbor run twice, as its stream-json capture and its session file: counted in both,
    and named (their output counts differ: the session file keeps a streamed snapshot)."""
    pair = [(t.path, t.format, t.same_as, t.same_as_format, t.responses) for t in result.history.twins]
    session = str(FIXTURES / "claude-session_ccb_harbor_paired.jsonl")
    stream = str(FIXTURES / "claude-streamjson_ccb_harbor_claude-code.txt")
    assert len(pair) == 1 and sorted(pair[0][0:3:2]) == sorted([session, stream]) and pair[0][4] == 3
    assert {pair[0][1], pair[0][3]} == {"claude_session", "claude_stream"}
    text = (result.parameters["out"] / "report.md").read_text()
    assert "1 file(s) hold the same run as another file" in text and "counted twice" in text
    assert f"`{pair[0][0]}`" in text and f"`{pair[0][2]}`" in text
    table = pd.read_csv(result.parameters["out"] / "analysis" / "twins.csv")
    assert list(table.itertuples(index=False, name=None)) == pair


def test_a_long_list_of_twins_is_cut_in_the_report_and_kept_whole_in_its_table() -> None:
    many = [twins.Twin(f"b{i}", "claude_session", f"a{i}", "claude_session", 2) for i in range(12)]
    lines = history_report.twin_lines(many)
    assert sum(line.startswith("- `b") for line in lines) == history_report.TWINS_LISTED == 10
    assert "- … 2 more in `analysis/twins.csv`" in lines and "**12 file(s)" in lines[0]


def test_twins_need_the_same_counts_in_every_response_and_two_of_them() -> None:
    def rows(path: str, usage: list[tuple[int, int, int]]) -> pd.DataFrame:
        frame = pd.DataFrame(usage, columns=["input_tokens", "cache_read_tokens", "cache_write_tokens"])
        return frame.assign(source_path=path, source_format="claude_session")

    run = [(100, 90, 5), (140, 100, 30)]
    req = pd.concat([rows("a", run), rows("b", run), rows("c", [run[0], (140, 100, 31)]), rows("d", run[:1])])
    req = pd.concat([req, rows("e", run[:1])])
    assert [(t.path, t.same_as, t.responses) for t in twins.twins(req)] == [("b", "a", 2)]  # d and e: one each


def test_compare_groups_are_named_by_their_open_or_closed_ends_or_their_names(result: history.Result) -> None:
    assert result.comparison is not None
    assert result.comparison.groups == {"before": "up to 2026-03-01", "after": "from 2026-03-02"}
    closed = history.compare(result.history, {"by": "period", "a": ["2026-02-01", "2026-02-28"], "b": [None, None]})
    assert list(closed.groups) == ["2026-02-01 to 2026-02-28", "all days"]
    names = history.compare(result.history, {"by": "project", "a": ["transcripts", "/fixture/project"], "b": "x"})
    assert list(names.groups) == ["transcripts, /fixture/project", "x"]


def test_compare_by_project_lists_confounds(result: history.Result) -> None:
    spec = {"by": "project", "a": "transcripts", "b": "/fixture/project"}
    found = history.compare(result.history, spec)
    assert found.label == "cross-run stitch" and len(found.confounds) >= 4
    with pytest.raises(ValueError, match=r"compare\.by"):
        history.compare(result.history, {"by": "weekday", "a": 1, "b": 2})


def test_a_grown_history_reads_as_a_cold_one(tmp_path: Path) -> None:
    """Sessions still running: each Claude session and Codex rollout first half-written, read through the
    cache, then finished: the second load reads each from the state its first read kept, and equals a load
    without the cache, table for table."""
    claude = tmp_path / "claude" / "projects" / "-fixture"
    codex = tmp_path / "codex" / "sessions" / "2026" / "06" / "01"
    whole = {}
    for path in FIXTURES.glob("*.jsonl"):
        if path.name.startswith(("claude-session_", "codex-rollout_")):
            folder = claude if path.name.startswith("claude") else codex
            target = folder / (path.name if folder is claude else f"rollout-2026-06-01T08-00-00-{path.stem}.jsonl")
            lines = path.read_bytes().splitlines(keepends=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"".join(lines[: len(lines) // 2]))
            whole[target] = b"".join(lines[len(lines) // 2 :])
    roots: list[str | Path] = [claude.parent, codex.parents[2]]
    store = tmp_path / "cache"
    history.load(roots, cache=store)
    for target, rest in whole.items():
        with open(target, "ab") as handle:
            handle.write(rest)
    got, want = history.load(roots, cache=store), history.load(roots)
    assert all(cache.store(store).pieces[str(t)].state is not None for t in whole)
    for part in ("requests", "tool_results", "events"):
        pd.testing.assert_frame_equal(getattr(got, part), getattr(want, part))
    assert (got.files, got.issues, got.repeats) == (want.files, want.issues, want.repeats)


@pytest.mark.skipif(not os.access(CCUSAGE, os.X_OK), reason="ccusage not installed (make bench-peers)")
def test_totals_equal_ccusage(tmp_path: Path) -> None:
    project = tmp_path / "claude" / "projects" / "-fixture"
    project.mkdir(parents=True)
    for path in FIXTURES.glob("claude-session_*.jsonl"):  # ccusage reads compact JSON lines, as Claude Code writes
        lines = [orjson.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]
        (project / path.name).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    done = subprocess.run(
        [str(CCUSAGE), "session", "--json", "--offline"], env=env | {"TZ": "UTC"}, capture_output=True
    )
    peer = orjson.loads(done.stdout)["totals"]
    mine = history.totals(history.load([project]).requests)
    assert mine["cache_read_tokens"] == peer["cacheReadTokens"]
    assert mine["cache_write_tokens"] == peer["cacheCreationTokens"]
    assert mine["output_tokens"] == peer["outputTokens"] and mine["total_tokens"] == peer["totalTokens"]


@pytest.mark.e2e
def test_command_line_writes_the_folder(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "history")
    out = tmp_path / "out"
    argv = [str(ROOT / ".venv/bin/python"), "-m", "kit", "history", str(tmp_path / "history"), "--out", str(out)]
    argv += ["--compare", orjson.dumps(PERIODS).decode()]
    env = os.environ | {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for name in ("report.md", "report.html", "history.ipynb", "history.html", "tables/requests.parquet"):
        assert (out / name).exists(), name
    assert not any(p.suffix == ".parquet" for p in (tmp_path / "history").rglob("*"))  # transcripts untouched
