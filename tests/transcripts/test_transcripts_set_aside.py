"""``kit parse <batch>`` after a resume: the batch-wide provider log (``raw/_provider/requests.jsonl``) keeps
the lines of attempts the resume set aside (``raw/_incomplete/<trial>.N``, ``kit.stages.run._set_aside``);
the cross-check leaves them out, and says how many, instead of reporting a disagreement."""

from __future__ import annotations

from pathlib import Path

import orjson

from kit.transcripts import collect
from tests.support import trial_meta

USAGE = {"input_tokens": 1234, "cache_read_tokens": 1024, "cache_write_tokens": 0, "output_tokens": 56}
START = "2026-11-29T13:00:10.000000+00:00"  # the last attempt's start (its meta.json)


def line(ts: str, usage: dict) -> bytes:
    record = {"kit_provider_log": 1, "ts": ts, "status": 200, "model": "sim-model", "trial_id": "t1", "usage": usage}
    return orjson.dumps(record) + b"\n"


def batch(root: Path, set_aside: bool) -> Path:
    """A batch of one trial whose first attempt (one response, other counts) was interrupted and, with
    ``set_aside``, moved aside by the resume; the trial folder holds its last attempt's two responses."""
    raw = root / "b" / "raw"
    trial = raw / "t1"
    trial.mkdir(parents=True)
    meta = trial_meta(batch="b", arm="a", run=0, trial_id="t1", started_at=START, transcripts=["provider_log.jsonl"])
    (trial / "meta.json").write_bytes(orjson.dumps(meta))
    last = [line("2026-11-29T13:00:11+00:00", USAGE), line("2026-11-29T13:00:12+00:00", USAGE)]
    (trial / "provider_log.jsonl").write_bytes(b"".join(last))
    (raw / "_provider").mkdir()
    first = line("2026-11-29T13:00:01+00:00", USAGE | {"output_tokens": 9})
    (raw / "_provider" / "requests.jsonl").write_bytes(first + b"".join(last))
    if set_aside:
        (raw / "_incomplete" / "t1.1").mkdir(parents=True)
    return root / "b"


def test_attempts_set_aside_are_left_out_of_the_batch_cross_check(tmp_path: Path) -> None:
    rows, issues, note = collect.collect([batch(tmp_path, set_aside=True)])
    assert len(rows) == 2
    assert issues == []
    assert "1 response(s) the batch log holds of attempts set aside on resume left out" in note


def test_earlier_lines_without_an_attempt_set_aside_are_still_compared(tmp_path: Path) -> None:
    _, issues, note = collect.collect([batch(tmp_path, set_aside=False)])
    assert [i["reason"] for i in issues] == ["cross-check: 2 responses in the transcript, 3 in the provider log"]
    assert "set aside" not in note
