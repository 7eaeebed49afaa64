"""Transcript readers against hostile files: bytes fuzzed anywhere, files cut at any offset, binary files, and a
single huge line. Every case is read or reported with its place, never a crash; memory stays bounded by the
reader's chunk size, not by the length of a line (a 64 MB line in CI, 1 GB in the slow version).

(The line- and value-level fuzzing of real transcripts lives in test_transcripts_bad_input.py.)
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit import transcripts
from kit.cli import pipeline
from kit.stages import run
from tests.support import FIXTURES as TEST_FIXTURES
from tests.support import ROOT

TOKENS = ["input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "total_tokens"]
REAL = sorted(p for p in (TEST_FIXTURES / "transcripts").iterdir() if p.suffix in (".jsonl", ".txt"))


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, bytes]:
    """One transcript of every format: the public ones in tests/fixtures plus the kit's own (provider log, SDK)."""
    out = {p.name: p.read_bytes() for p in REAL}
    folder = tmp_path_factory.mktemp("batch")
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(folder), batch="t", runs_per_arm=1, backend="sdk-anthropic", profile=None)
    batch = run.run_batch(run.configure(params), progress=False)
    trial = batch / "raw" / "r00-placebo"
    out["sdk_responses.jsonl"] = (trial / "sdk_responses.jsonl").read_bytes()
    out["provider_log.jsonl"] = (trial / "provider_log.jsonl").read_bytes()
    return out


def check_frame(df, path: Path, data: bytes) -> None:
    """What any read must give: located issues, no negative or invented usage."""
    lines = data.count(b"\n") + 1
    for issue in df.attrs["issues"]:
        assert issue["source_path"] == str(path)
        assert isinstance(issue["source_line"], int) and 0 <= issue["source_line"] <= lines, issue
        assert issue["reason"]
    assert (df[TOKENS].fillna(0) >= 0).all().all()
    assert not (df.usage_known.fillna(False) & df.input_tokens.isna()).any()
    assert len(df) <= lines


def read_both_ways(path: Path, data: bytes) -> None:
    df = transcripts.read(path)
    check_frame(df, path, data)
    transcripts.tool_results(path)
    try:
        strict = transcripts.read(path, strict=True)
    except transcripts.TranscriptError as exc:  # strict: the first problem, located; never another exception
        assert str(exc).startswith(f"{path}:") and df.attrs["issues"]
    else:
        assert not df.attrs["issues"] and len(strict) == len(df)


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "newline", "nul"]),
        st.floats(0, 1),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from([p.name for p in REAL] + ["sdk_responses.jsonl", "provider_log.jsonl"]), ops=MUTATIONS)
def test_bytes_fuzzed_anywhere_are_read_or_reported(samples, name, ops):
    data = bytearray(samples[name])
    for op, where, blob in ops:
        at = int(where * (len(data) - 1))
        if op == "flip":
            data[at] ^= blob[0] or 1
        elif op == "insert":
            data[at:at] = blob
        elif op == "delete":
            del data[at : at + len(blob) * 50]
        elif op == "newline":
            data[at:at] = b"\n"
        else:
            data[at:at] = b"\0" * len(blob)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(bytes(data))
        read_both_ways(path, bytes(data))


@pytest.mark.parametrize("name", [p.name for p in REAL] + ["sdk_responses.jsonl", "provider_log.jsonl"])
def test_cut_at_any_offset_the_last_line_is_reported_and_the_rest_read(samples, tmp_path, name):
    data = samples[name]
    full = transcripts.read(_write(tmp_path / f"full-{name}", data))
    for cut in sorted({1, 2, 3, len(data) - 1, *random.Random(name).sample(range(4, len(data) - 1), 12)}):
        part = data[:cut]
        path = _write(tmp_path / f"cut{cut}-{name}", part)
        df = transcripts.read(path)
        check_frame(df, path, part)
        assert len(df) <= len(full)
        tail = part.rsplit(b"\n", 1)[-1]
        if b"\n" in part and tail.strip() and not _is_json(tail):  # cut inside a line (not the first)
            last = part.count(b"\n") + 1
            reasons = [i["reason"] for i in df.attrs["issues"] if i["source_line"] == last]
            assert any(r.startswith("truncated last line") for r in reasons), (cut, df.attrs["issues"])


def _is_json(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def binaries() -> dict[str, bytes]:
    rng = random.Random(7)
    noise = bytes(rng.getrandbits(8) for _ in range(1 << 20))
    json_line = b'{"type": "session_meta", "payload": {"id": "x"}}\n'
    return {
        "random.jsonl": noise,
        "random_no_newline.jsonl": noise.replace(b"\n", b" "),
        "nul.jsonl": b"\0" * (1 << 20),
        "png.jsonl": b"\x89PNG\r\n\x1a\n" + noise[:4096],
        "utf16.jsonl": ("\ufeff" + json_line.decode()).encode("utf-16-le") * 10,
        "gzip.jsonl": gzip.compress(json_line * 100),
        "half_binary.jsonl": json_line * 3 + noise[:2048] + b"\n" + json_line,
        "latin1.jsonl": '{"type": "session_meta", "payload": {"id": "caf\xe9"}}\n'.encode("latin-1"),
    }


@pytest.mark.parametrize("name", sorted(binaries()))
def test_binary_files_are_reported_with_their_place_never_a_crash(tmp_path, name):
    data = binaries()[name]
    path = _write(tmp_path / name, data)
    read_both_ways(path, data)
    df = transcripts.read(path)
    assert df.attrs["issues"], name  # something in every one of these files is not a transcript line
    folder_read = transcripts.read(tmp_path)  # the same file found by a folder walk
    assert [i["source_path"] for i in folder_read.attrs["issues"]] == [str(path)] * len(folder_read.attrs["issues"])


# ------------------------------------------------------------------ one huge line: bounded memory


def huge_line_file(path: Path, size: int, *, complete: bool) -> Path:
    """A valid first line, then one line of ``size`` bytes (valid JSON when ``complete``, then a valid line)."""
    first = b'{"type": "session_meta", "payload": {"id": "huge", "cli_version": "0.135.0"}}\n'
    last = b'{"type": "event_msg", "payload": {"type": "agent_message", "message": "after"}}\n'
    head = b'{"type": "response_item", "payload": {"type": "message", "content": "'
    with path.open("wb") as fh:
        fh.write(first + head)
        block = b"a" * (1 << 20)
        for _ in range(size // len(block)):
            fh.write(block)
        if complete:
            fh.write(b'"}}\n' + last)
    return path


RSS_SCRIPT = """
import resource, sys
from kit import transcripts
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
df = transcripts.read(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(after - before, [i["source_line"] for i in df.attrs["issues"]])
"""


def rss_growth(path: Path) -> tuple[int, list[int]]:
    """Peak RSS growth (bytes) of a fresh process while it reads ``path``, and the lines its issues name."""
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    growth_kb, lines = done.stdout.split(maxsplit=1)
    return int(growth_kb) * 1024, json.loads(lines)


# A line over kit/transcripts/_base.py MAX_LINE (8 MB) is reported and read past without being held: before,
# a 64 MB line grew the reader's RSS by ~58 MB (valid) to ~185 MB (cut), and a 1 GB line by 2.7 GB.


@pytest.mark.parametrize("complete", [True, False], ids=["with-newline", "truncated"])
def test_a_64mb_line_is_reported_in_bounded_memory(tmp_path, complete):
    size = 64 << 20
    growth, lines = rss_growth(huge_line_file(tmp_path / "rollout-huge.jsonl", size, complete=complete))
    assert growth < size // 4, f"RSS grew {growth / 2**20:.0f} MB while reading a 64 MB line"
    assert lines == [2]  # the huge line is reported with its place, and only it: the line after it is read


@pytest.mark.slow
def test_a_1gb_line_is_reported_in_bounded_memory(tmp_path):
    size = 1 << 30
    growth, lines = rss_growth(huge_line_file(tmp_path / "rollout-huge.jsonl", size, complete=True))
    assert growth < size // 16, f"RSS grew {growth / 2**20:.0f} MB while reading a 1 GB line"
    assert 2 in lines


def test_long_lines_within_the_chunk_are_read_exactly(tmp_path):
    """The control for the two tests above: a 3 MB line (under the 4 MB chunk) is read, not reported."""
    first = orjson.loads(REAL[0].read_bytes().splitlines()[0])
    lines = [orjson.dumps(first), orjson.dumps({**first, "pad": "b" * (3 << 20)})]
    path = _write(tmp_path / REAL[0].name, b"\n".join(lines) + b"\n")
    df = transcripts.read(path)
    assert all(i["source_line"] != 2 or "unknown" in i["reason"] for i in df.attrs["issues"])


@pytest.mark.parametrize(("size_mb", "reported"), [(6, []), (9, [2])])
def test_lines_over_a_chunk_are_joined_up_to_the_limit_and_reported_past_it(tmp_path, size_mb, reported):
    """A 6 MB line spans two 4 MB reads and is read; a 9 MB one is over MAX_LINE (8 MB): reported, then read past."""
    path = huge_line_file(tmp_path / "rollout-long.jsonl", size_mb << 20, complete=True)
    df = transcripts.read(path)
    assert [i["source_line"] for i in df.attrs["issues"]] == reported
    assert df.attrs["files"][0]["cli_version"] == "0.135.0"  # the first line was read either way
    with (
        pytest.raises(transcripts.TranscriptError, match=r"rollout-long\.jsonl:2: line longer than 8 MB")
        if reported
        else nullcontext()
    ):
        transcripts.read(path, strict=True)
