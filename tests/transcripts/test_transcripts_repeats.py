"""``read`` skips tool outputs and must change nothing by it; a response repeated across files counts once.

``read`` checks tool outputs as JSON without decoding them (only ``tool_results`` needs them). For every
fixture, for corpora written by the benchmark's generator (bench/parse.py) and for mutated transcripts,
its table and ``attrs`` equal the request table of ``tables``, which decodes them.

Across the session files of one read, a response (same ``message.id``, else ``requestId``) counts once,
as ccusage counts it: a resumed session repeating its parent's history; a subagent log replaying the
parent's responses; and the rule for which copy stays.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import tempfile
from pathlib import Path

import orjson
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit import transcripts
from tests.support import FIXTURES as TEST_FIXTURES
from tests.support import ROOT, assert_requests_alone

FIXTURES = TEST_FIXTURES / "transcripts"
TOOL_HEAVY = FIXTURES / "claude-session_spotter_tool_heavy.jsonl"
SESSION = FIXTURES / "claude-session_ccb_harbor_paired.jsonl"
ACOMPACT = FIXTURES / "claude-session_spotter_subagent_acompact.jsonl"
TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens"]


def _bench():
    """bench/parse.py, whose generator writes the benchmark's corpora (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_parse", ROOT / "bench" / "parse.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def assert_same_read(paths: transcripts.Paths) -> pd.DataFrame:
    fast = transcripts.read(paths)
    full, _ = transcripts.tables(paths)
    assert_requests_alone(fast, full)
    keys = {"accounting", "issues", "files", "events", "sidechain_ids", "repeats", "crosscheck", "rate_limits"}
    assert set(fast.attrs) == keys
    return fast


def lines_of(path: Path) -> list[dict]:
    return [orjson.loads(raw) for raw in path.read_bytes().splitlines()]


def write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def sums(df: pd.DataFrame) -> list[int]:
    return [int(df[c].sum()) for c in TOKENS]


# --- skipping tool outputs changes nothing ---------------------------------------------------------------


@pytest.mark.parametrize("path", [FIXTURES, *sorted(p for p in FIXTURES.iterdir() if p.suffix != ".md")])
def test_fixtures_read_like_tables(path):
    assert_same_read(path)


def tool_result_lines(root: Path) -> int:
    """Tool results written in a corpus: Claude ``tool_result`` blocks, Codex ``function_call_output`` items."""
    count = 0
    for path in root.rglob("*.jsonl"):
        for line in lines_of(path):
            content = line.get("message", {}).get("content") if line.get("type") == "user" else None
            count += sum(b.get("type") == "tool_result" for b in content) if isinstance(content, list) else 0
            count += line.get("type") == "response_item" and line["payload"].get("type") == "function_call_output"
    return count


def test_generated_corpora_read_like_tables_and_give_the_expected_totals(tmp_path):
    rng = random.Random(7)
    for corpus in (
        BENCH.claude_corpus(tmp_path / "claude", 1, rng),
        BENCH.codex_corpus(tmp_path / "codex", 600_000, rng),
    ):
        df = assert_same_read(corpus.root)
        assert df.attrs["issues"] == [] and df.attrs["repeats"] == []
        expected = corpus.expected
        assert sums(df) == [expected.input, expected.cache_read, expected.cache_write, expected.output, expected.total]
        assert corpus.files == len(df.attrs["files"]) >= 2
        assert len(transcripts.tool_results(corpus.root)) == tool_result_lines(corpus.root) > 0  # still all read


BASES = {path: lines_of(path) for path in (TOOL_HEAVY, SESSION, ACOMPACT)}
OPS = ["keep", "keep", "keep", "keep", "drop", "dup", "corrupt", "sidechain", "no_id", "more_output"]


def mutate(lines: list[dict], ops: list[str]) -> list[bytes]:
    """Mutated copy of a session: lines dropped, doubled, cut, flagged sidechain, without message.id…"""
    out = []
    for line, op in zip(lines, ops, strict=False):
        line = orjson.loads(orjson.dumps(line))
        message = line.get("message") if line.get("type") == "assistant" else None
        if op == "drop":
            continue
        if op == "sidechain":
            line["isSidechain"] = True
        elif op == "no_id" and message is not None:
            del message["id"]  # grouped by requestId then
        elif op == "more_output" and message is not None:
            message["usage"]["output_tokens"] += 100
        raw = orjson.dumps(line) + b"\n"
        out += [raw[: len(raw) // 2] + b"\n"] if op == "corrupt" else [raw] * (2 if op == "dup" else 1)
    return out


def response_keys(raw_lines: list[bytes]) -> set[str]:
    keys = set()
    for raw in raw_lines:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if line.get("type") == "assistant":
            keys.add(line["message"].get("id") or line["requestId"])
    return keys


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_mutated_sessions_read_like_tables_and_count_each_response_once(data):
    files = []
    for _ in range(data.draw(st.integers(1, 3))):
        base = BASES[data.draw(st.sampled_from(sorted(BASES)))]
        files.append(mutate(base, data.draw(st.lists(st.sampled_from(OPS), min_size=len(base), max_size=len(base)))))
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for number, raw_lines in enumerate(files):
            path = Path(folder) / f"s{number}" / "session.jsonl"
            path.parent.mkdir()
            path.write_bytes(b"".join(raw_lines))
            paths.append(path)
        df = assert_same_read(paths)
        read_files = {entry["source_path"] for entry in df.attrs["files"]}
        keys = set().union(*(response_keys(raw) for raw, p in zip(files, paths, strict=True) if str(p) in read_files))
        assert len(df) == len(keys)  # every response once: none lost, none counted twice
        assert {r["message_id"] for r in df.attrs["repeats"]} <= keys
        for entry in df.attrs["files"]:
            alone = transcripts.read(entry["source_path"])
            assert entry["rows"] + entry["repeats"] == len(alone)
            assert entry["rows"] == int((df.source_path == entry["source_path"]).sum())


# --- each response once across files ------------------------------------------------------------


def test_response_repeated_in_another_session_file_counts_once(tmp_path):
    lines = lines_of(TOOL_HEAVY)
    parent = write(tmp_path / "p" / "a.jsonl", lines)
    resumed = write(tmp_path / "p" / "b.jsonl", lines[:-3])  # ends before BN5jdsym's final 173 line
    alone = transcripts.read(parent)
    df = transcripts.read(tmp_path / "p")
    assert sums(df) == sums(alone) == [105_981, 88_231, 17_696, 212, 106_193]  # ccusage 20.0.24 agrees
    # equal copies: the last read stays (b); BN5jdsym's larger output (173, in a) beats b's partial 25
    assert df[["source_path", "cycle", "output_tokens"]].values.tolist() == [
        [str(parent), 3, 173],
        [str(resumed), 0, 27],
        [str(resumed), 1, 1],
        [str(resumed), 2, 11],
    ]
    assert [(r["source_path"], r["cycle"], r["kept_path"]) for r in df.attrs["repeats"]] == [
        (str(parent), 0, str(resumed)),
        (str(parent), 1, str(resumed)),
        (str(parent), 2, str(resumed)),
        (str(resumed), 3, str(parent)),
    ]
    repeat = df.attrs["repeats"][-1]
    assert (repeat["message_id"], repeat["source_line"], repeat["kept_line"]) == (
        "msg_019BN3FRqb7NU4DgBN5jdsym",
        34,
        37,
    )
    assert df.attrs["issues"] == []  # repeats are expected, not problems
    files = {f["source_path"]: (f["rows"], f["repeats"]) for f in df.attrs["files"]}
    assert files == {str(parent): (1, 3), str(resumed): (3, 1)}
    # the tool results go with their responses: each once
    tools = transcripts.tool_results(tmp_path / "p")
    assert sorted(tools.tool) == sorted(transcripts.tool_results(parent).tool) and len(tools) == 6


def test_subagent_replaying_parent_responses_keeps_the_parents_copy(tmp_path):
    lines = lines_of(TOOL_HEAVY)
    parent = write(tmp_path / "p" / "a.jsonl", lines)
    replay = [line | {"isSidechain": True} for line in lines if line["type"] == "assistant"]
    write(tmp_path / "p" / "a" / "subagents" / "agent-x.jsonl", replay)  # read first: it sorts before a.jsonl
    df = transcripts.read(tmp_path / "p")
    assert sums(df) == sums(transcripts.read(parent))
    assert set(df.source_path) == {str(parent)}
    assert df.attrs["sidechain_ids"] == []  # the kept copies are the parent's own
    assert len(df.attrs["repeats"]) == 4 and {r["kept_path"] for r in df.attrs["repeats"]} == {str(parent)}


def test_sidechain_copies_alone_stay_sidechain(tmp_path):
    compaction = lines_of(ACOMPACT)
    first = write(tmp_path / "x" / "agent-1.jsonl", compaction)
    second = write(tmp_path / "y" / "agent-1.jsonl", [*compaction, {"type": "last-prompt", "sessionId": "s"}])
    df = transcripts.read([first, second])
    assert len(df) == 1 and df.source_path.tolist() == [str(second)]
    assert df.attrs["sidechain_ids"] == [
        {"source_path": str(second), "cycle": 0, "message_id": "msg_01EmKCTGA88TYu4RzLxm2E5i"}
    ]


def test_larger_output_wins_across_files_in_either_order(tmp_path):
    lines = lines_of(TOOL_HEAVY)
    complete = write(tmp_path / "complete.jsonl", lines)
    partial = write(tmp_path / "partial.jsonl", lines[:-3])
    for order in ([complete, partial], [partial, complete]):
        df = transcripts.read(order)
        kept = df[df.output_tokens == 173]
        assert kept.source_path.tolist() == [str(complete)] and int(df.output_tokens.sum()) == 212


def test_responses_without_ids_are_never_matched_across_files(tmp_path):
    lines = lines_of(SESSION)
    for line in lines:
        if line["type"] == "assistant":
            del line["message"]["id"], line["requestId"]
    first = write(tmp_path / "a.jsonl", lines)
    second = write(tmp_path / "b.jsonl", [*lines, {"type": "last-prompt", "sessionId": "s"}])
    df = transcripts.read([first, second])
    assert len(df) == 2 * len(transcripts.read(first)) and df.attrs["repeats"] == []


def test_files_without_shared_responses_read_as_if_alone():
    paths = [TOOL_HEAVY, SESSION, ACOMPACT]
    df = transcripts.read(paths)
    separate = pd.concat([transcripts.read(p) for p in paths], ignore_index=True)
    pd.testing.assert_frame_equal(df, separate, check_exact=True)
    assert df.attrs["repeats"] == []


def test_stream_json_and_session_of_one_run_are_not_matched():
    """The parse stage reads one format per trial; across formats, ``read`` keeps both (as before)."""
    df = transcripts.read([FIXTURES / "claude-streamjson_ccb_harbor_claude-code.txt", SESSION])
    assert len(df) == 6 and df.attrs["repeats"] == []
