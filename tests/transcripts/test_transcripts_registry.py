"""A new transcript format is one module and one registry line (``kit.transcripts.readers``).

The toy format below is what such a module holds: a reader built from the shared parts
(``_base.json_lines``, ``Parsed``, ``file_summary``) and its ``READER``. Registered from the test, with no
other change, it is detected, read by ``kit.transcripts.read``/``tables``, given a role, accepted as a
``format``, and read past the parse cache (whose pieces it also fills).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from kit import transcripts
from kit.transcripts import _base, cache, readers, sources

FORMAT = "toy_log"


def _read(paths: Sequence[Path], issues: _base.Issues, tools: bool = True) -> _base.Parsed:
    """One row per ``{"toy": 1, "in": N, "out": M}`` line; one tool result per ``"tool"`` key."""
    out = _base.Parsed()
    for path in paths:
        rows: list[dict] = []
        for number, line in _base.json_lines(path, issues):
            rows.append(
                {
                    "cycle": len(rows),
                    "source_format": FORMAT,
                    "source_path": str(path),
                    "source_line": number,
                    "input_tokens": _base.int_or_none(line.get("in")),
                    "cache_read_tokens": 0,
                    "cache_write_tokens": 0,
                    "output_tokens": _base.int_or_none(line.get("out")),
                    "usage_known": True,
                }
            )
            if tools and "tool" in line:
                out.tools.append({"cycle": len(rows), "tool": line["tool"], "chars": 3, "source_path": str(path)})
        out.rows += rows
        out.attrs["files"].append(_base.file_summary(path, FORMAT, rows))
    return out


TOY = _base.Reader(FORMAT, lambda line: line.get("toy") == 1, _read, role=lambda path: "subagent")


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy format registered (the one line a new format adds), and a folder with one file of it."""
    monkeypatch.setattr(readers, "READERS", (*readers.READERS, TOY))
    folder = tmp_path / "toys"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"toy": 1, "in": 100, "out": 7}\n{"toy": 1, "in": 150, "out": 9, "tool": "ls"}\n')
    return folder


def test_a_registered_format_is_detected_and_read(toy: Path) -> None:
    path = toy / "a.jsonl"
    assert transcripts.detect(path) == FORMAT
    rows = transcripts.read(toy)
    assert rows["source_format"].tolist() == [FORMAT, FORMAT]
    assert rows["input_tokens"].tolist() == [100, 150] and rows["output_tokens"].tolist() == [7, 9]
    assert rows["uncached_input_tokens"].tolist() == [100, 150]  # the canonical columns derived as for any format
    assert rows.attrs["issues"] == [] and rows.attrs["files"][0]["format"] == FORMAT
    _, tool_rows = transcripts.tables(toy, tool_paths=True)
    assert tool_rows["tool"].tolist() == ["ls"] and tool_rows["source_path"].tolist() == [str(path)]
    assert transcripts.read(path, format=FORMAT)["input_tokens"].sum() == 250
    assert sources.file_role(path, FORMAT) == "subagent"


def test_a_registered_format_goes_through_the_parse_cache(toy: Path, tmp_path: Path) -> None:
    cache._STORES.clear()
    try:
        want = transcripts.read(toy)
        got = transcripts.read(toy, cache=tmp_path / "cache")
        assert got.equals(want)
        assert cache.store(tmp_path / "cache").pieces[str(toy / "a.jsonl")].format == FORMAT
    finally:
        cache._STORES.clear()


def test_an_unregistered_format_is_refused_with_the_registered_names() -> None:
    with pytest.raises(ValueError, match="unknown transcript format 'toy_log'; expected 'auto' or one of provider_log"):
        transcripts.read([], format=FORMAT)
    assert readers.formats() == transcripts.FORMATS
    assert set(transcripts.FORMATS) == {
        "provider_log",
        "sdk_record",
        "codex_rollout",
        "codex_exec",
        "claude_session",
        "claude_stream",
    }
