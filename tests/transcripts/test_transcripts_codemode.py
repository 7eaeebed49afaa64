"""Codex Code Mode counts, quota and usage sources on the real Code Mode rollout (CLI 0.154.0).

Every expected figure is counted here from the raw lines with ``json`` and ``re`` (not through the
reader). Edits to the real file are minimal and stated: a cell's code, a line left out, lines swapped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pandas as pd

from kit import transcripts
from kit.stages import parse
from tests.support import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "transcripts"
CODE_MODE = FIXTURES / "codex-rollout_yepanywhere_codemode_0.154.0.jsonl"
ROLLOUT = FIXTURES / "codex-rollout_agent-history_codex_exec_0.135.0.jsonl"
SESSION = FIXTURES / "claude-session_ccb_harbor_paired.jsonl"
COUNTS = ["exec_cells", "exec_tool_calls", "exec_multi_call_cells", "exec_promise_all_cells", "function_calls"]
TOOLS_CALL = re.compile(r"\btools\.[A-Za-z_][\w]*\s*\(")


def lines(path: Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def write(path: Path, raw: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in raw))
    return path


def expected_counts(raw: list[dict]) -> list[dict[str, int]]:
    """Per response (items up to its ``token_usage_record``): the Code Mode counts."""
    out, current = [], dict.fromkeys(COUNTS, 0)
    for line in raw:
        payload = line["payload"]
        if line["type"] == "token_usage_record":
            out.append(current)
            current = dict.fromkeys(COUNTS, 0)
        elif line["type"] == "response_item" and payload["type"] == "custom_tool_call" and payload["name"] == "exec":
            calls = len(TOOLS_CALL.findall(payload["input"]))
            current["exec_cells"] += 1
            current["exec_tool_calls"] += calls
            current["exec_multi_call_cells"] += calls >= 2
            current["exec_promise_all_cells"] += "Promise.all" in payload["input"]
        elif line["type"] == "response_item" and payload["type"] == "function_call":
            current["function_calls"] += 1
    return out


def counts(df: pd.DataFrame) -> list[dict[str, int]]:
    return [{c: int(row[c]) for c in COUNTS} for _, row in df.iterrows()]


def test_code_mode_counts_per_response():
    raw = lines(CODE_MODE)
    expected = expected_counts(raw)
    assert sum(e["exec_cells"] for e in expected) == 5 and sum(e["exec_tool_calls"] for e in expected) == 5
    df = transcripts.read(CODE_MODE)
    assert counts(df) == expected
    assert df.exec_cells.tolist() == [1, 1, 1, 1, 0, 1, 0] and df.function_calls.sum() == 0


def test_a_cell_calling_several_tools_at_once(tmp_path):
    """The failing cell's code (line 30) rewritten to run two commands through ``Promise.all``."""
    raw = lines(CODE_MODE)
    assert raw[30 - 1]["payload"]["type"] == "custom_tool_call"
    code = (
        'const [a, b] = await Promise.all([tools.exec_command({cmd:"cat a"}), tools.exec_command ({cmd:"cat b"})]);'
        "\ntext(a.output + b.output); // not a call: tools.exec_command"
    )
    raw[30 - 1]["payload"]["input"] = code
    df = transcripts.read(write(tmp_path / "r.jsonl", raw))
    assert counts(df) == expected_counts(raw)
    row = df.iloc[3]
    assert (row.exec_cells, row.exec_tool_calls, row.exec_multi_call_cells, row.exec_promise_all_cells) == (1, 2, 1, 1)
    assert row.output_chars == len(code)


def test_plain_function_calls_are_counted_apart(tmp_path):
    """The 0.135 rollout has none; a ``function_call`` item put in place of its answer counts as one."""
    raw = lines(ROLLOUT)
    where = next(i for i, line in enumerate(raw) if line["payload"].get("role") == "assistant")
    arguments = '{"cmd":"ls"}'
    raw[where] = raw[where] | {"payload": {"type": "function_call", "name": "exec_command", "arguments": arguments}}
    df = transcripts.read(write(tmp_path / "r.jsonl", raw))
    assert (df.function_calls.tolist(), df.exec_cells.tolist(), df.tool_calls.tolist()) == ([1], [0], [1])
    assert df.output_chars.tolist() == [len(arguments)]


def test_counts_are_missing_outside_codex_rollouts():
    df = transcripts.read(SESSION)
    assert df[COUNTS].isna().all().all() and df.output_chars.notna().all()


def test_quota_per_response():
    """Each response keeps the ``used_percent`` of its own ``token_count`` event (0.154: no secondary)."""
    raw = lines(CODE_MODE)
    seen = [
        (line["payload"]["rate_limits"]["primary"] or {}).get("used_percent")
        for line in raw
        if line["type"] == "event_msg" and line["payload"]["type"] == "token_count"
    ]
    df = transcripts.read(CODE_MODE)
    assert df.quota_primary_used.tolist() == seen == [18] * 7
    assert df.quota_secondary_used.isna().all()
    old = transcripts.read(ROLLOUT)
    assert (old.quota_primary_used.tolist(), old.quota_secondary_used.tolist()) == ([15.0], [5.0])


def test_trials_table_sums_counts_and_takes_quota_first_and_last(tmp_path):
    raw = lines(CODE_MODE)
    last_count = max(i for i, line in enumerate(raw) if line["payload"].get("type") == "token_count")
    raw[last_count]["payload"]["rate_limits"]["primary"]["used_percent"] = 19  # the quota moved during the trial
    codex = transcripts.read(write(tmp_path / "r.jsonl", raw)).assign(trial_id="r0-codex")
    claude = transcripts.read(SESSION).assign(trial_id="r0-claude")
    req = pd.concat([claude, codex], ignore_index=True).sample(frac=1, random_state=0)  # any row order
    trials = pd.DataFrame({"trial_id": ["r0-codex", "r0-claude", "r0-none"]})
    out = parse._with_response_counts(trials, req).set_index("trial_id")
    expected = expected_counts(raw)
    for column in COUNTS:
        assert out.loc["r0-codex", column] == sum(e[column] for e in expected)
    assert out.loc["r0-codex", "output_chars"] == codex.output_chars.sum()
    assert out.loc["r0-claude", "output_chars"] == claude.output_chars.sum()
    first, last = out.loc["r0-codex", ["quota_primary_used_first", "quota_primary_used_last"]]
    assert (first, last) == (18, 19)
    assert out.loc["r0-claude", COUNTS + parse.QUOTA_COLUMNS].isna().all()  # not zero: another backend
    assert out.loc["r0-none"].drop("trial_id", errors="ignore").isna().all()  # a trial without responses
    assert list(out.reset_index().columns) == ["trial_id", *parse.RESPONSE_SUMS, *parse.QUOTA_COLUMNS]


def test_records_covering_some_responses_keep_every_response_once(tmp_path):
    """The first turn's ``token_usage_record`` lines left out (as a CLI writing none would): its two
    responses come from their ``token_count`` events, the other five from their records, each once."""
    raw = lines(CODE_MODE)
    records = [i for i, line in enumerate(raw) if line["type"] == "token_usage_record"]
    kept = [line for i, line in enumerate(raw) if i not in records[:2]]
    df = transcripts.read(write(tmp_path / "r.jsonl", kept))
    assert len(df) == 7
    full = transcripts.read(CODE_MODE)
    assert df.output_tokens.tolist() == full.output_tokens.tolist()
    assert df.input_tokens.sum() == 109_047 and counts(df) == counts(full)
    mix = [c for c in df.attrs["crosscheck"] if c["field"] == "responses"]
    assert [(c["rows_sum"], c["reported"], c["agree"]) for c in mix] == [(7, 5, False)]
    assert "5 responses from token_usage_record lines, 2 known only from token_count" in mix[0]["note"]
    summary = df.attrs["files"][0]
    assert (summary["usage_from"], summary["from_records"], summary["from_token_count_only"]) == ("mixed", 5, 2)
    assert all(c["agree"] for c in df.attrs["crosscheck"] if c["field"] != "responses")


def test_usage_lines_in_either_order_pair(tmp_path):
    """A record written after its ``token_count`` still pairs with it: 7 responses, not 14."""
    raw = lines(CODE_MODE)
    swapped = list(raw)
    counts_at = [i for i, line in enumerate(raw) if line["payload"].get("type") == "token_count"]
    records_at = [i for i, line in enumerate(raw) if line["type"] == "token_usage_record"]
    for record, count in zip(records_at, counts_at, strict=True):
        swapped[record], swapped[count] = raw[count], raw[record]
    df = transcripts.read(write(tmp_path / "r.jsonl", swapped))
    assert len(df) == 7 and df.output_tokens.sum() == 577
    assert df.attrs["files"][0]["usage_from"] == "token_usage_record"


def test_records_alone_give_every_response_without_quota(tmp_path):
    raw = [line for line in lines(CODE_MODE) if line["payload"].get("type") != "token_count"]
    df = transcripts.read(write(tmp_path / "r.jsonl", raw))
    assert len(df) == 7 and df.output_tokens.sum() == 577 and df.quota_primary_used.isna().all()
