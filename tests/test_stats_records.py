"""kit.stats's records: every field described once, and the column dictionary reading those descriptions.

Why: ``docs/tables.md`` documents ``analysis/ratios.csv``, ``savings.csv`` and ``warmth_invariance.csv``
from the fields of ``Comparison``, ``Savings`` and ``WarmthInvariance``; a field without a description would
leave a column undocumented, and a second copy of a meaning in kit/cli/columns.py would drift from the first.
"""

from __future__ import annotations

import ast
import inspect
import re

import msgspec
import numpy as np
import pandas as pd
import pytest
from msgspec.structs import asdict

from kit import records, stats
from kit.cli import columns

RECORDS = (stats.Comparison, stats.Interval, stats.Savings, stats.WarmthInvariance)


def _table(path: str) -> dict[str, tuple[str, str]]:
    (table,) = [t for t in columns.TABLES if t.path == path]
    return {c.name: (c.meaning, c.unit) for c in table.columns}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_field_has_a_one_line_description_and_a_unit(record: type[msgspec.Struct]):
    names = [f.name for f in msgspec.structs.fields(record)]
    docs = records.docs(record)
    assert list(docs) == names, f"{record.__name__}: fields without a description: {set(names) - set(docs)}"
    for name, (meaning, unit) in docs.items():
        assert meaning.strip() and unit.strip() and "\n" not in meaning, (record.__name__, name)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_records_are_frozen(record: type[msgspec.Struct]):
    assert record.__struct_config__.frozen


def test_ratios_csv_columns_are_the_comparison_fields_with_their_descriptions():
    assert _table("analysis/ratios.csv") == records.docs(stats.Comparison)


def test_savings_and_warmth_columns_take_the_records_descriptions():
    savings = _table("analysis/savings.csv")
    assert {k: v for k, v in savings.items() if k in records.docs(stats.Savings)} == records.docs(stats.Savings)
    warmth = _table("analysis/warmth_invariance.csv")
    assert warmth == {k: v for k, v in records.docs(stats.WarmthInvariance).items() if k not in ("metric", "per_batch")}


def test_columns_py_does_not_repeat_a_record_fields_description():
    """One description in one place: no string literal of kit/cli/columns.py is a record field's meaning."""
    literals = {
        node.value
        for node in ast.walk(ast.parse(inspect.getsource(columns)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    described = (*RECORDS, records.TrialMeta, records.Design, records.Manifest)
    repeated = {m for r in described for m, _ in records.docs(r).values()} & literals
    assert not repeated, f"kit/cli/columns.py repeats record field descriptions: {sorted(repeated)}"


def test_a_record_becomes_a_row_with_its_fields_in_order():
    trials = pd.DataFrame(
        {
            "batch": "b0",
            "arm": ["a"] * 6 + ["b"] * 6,
            "run": list(range(6)) * 2,
            "status": "ok",
            "total_tokens": np.r_[np.linspace(100, 150, 6), np.linspace(200, 260, 6)],
            "uncached_input_tokens": np.r_[np.linspace(10, 15, 6), np.linspace(20, 26, 6)],
        }
    )
    c = stats.ratio(trials, "total_tokens", "a", "b")
    assert list(asdict(c)) == list(records.docs(stats.Comparison))
    assert asdict(c)["estimate"] == c.estimate
    assert list(stats.ratios(trials, "b", ["a"], ["total_tokens"]).columns) == list(records.docs(stats.Comparison))
    with pytest.raises(AttributeError):
        c.estimate = 1.0  # type: ignore[misc]


def test_no_public_function_of_kit_stats_returns_a_bare_dict():
    """No public function or method returns ``dict``, ``dict[str, Any]`` or ``dict[str, object]`` (bench/house.py's
    rule): a record in disguise. ``msgspec.structs.asdict`` is how a record becomes a table row."""
    bare = re.compile(r"^(dict|Dict|dict\[str, (Any|object)\])( \| None)?$")
    found = [
        node.name
        for node in ast.walk(ast.parse(inspect.getsource(stats)))
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and node.returns is not None
        and bare.match(ast.unparse(node.returns))
    ]
    assert not found, f"kit.stats functions returning a bare dict: {found}"
