"""kit.stats's records: every field described once, and the column dictionary reading those descriptions.

Why: ``docs/tables.md`` documents ``analysis/ratios.csv``, ``savings.csv`` and ``warmth_invariance.csv``
from the fields of ``Comparison``, ``Savings`` and ``WarmthInvariance``; a field without a description would
leave a column undocumented, and a second copy of a meaning in kit/cli/columns.py would drift from the first.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
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
        c.estimate = 1.0


def test_no_public_function_of_kit_stats_returns_a_bare_dict():
    """No public function or method returns ``dict``, ``dict[str, Any]`` or ``dict[str, object]`` (bench/house.py's
    rule): a record in disguise. ``msgspec.structs.asdict`` is how a record becomes a table row."""
    bare = re.compile(r"^(dict|Dict|dict\[str, (Any|object)\])( \| None)?$")
    modules = [importlib.import_module(f"kit.stats.{m.name}") for m in pkgutil.iter_modules(stats.__path__)]
    assert {m.__name__ for m in modules} >= {"kit.stats.compare", "kit.stats.intervals", "kit.stats.records"}
    found = [
        node.name
        for module in modules
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and node.returns is not None
        and bare.match(ast.unparse(node.returns))
    ]
    assert not found, f"kit.stats functions returning a bare dict: {found}"


def test_finished_trials_are_those_with_status_ok_and_a_table_without_status_is_all_finished():
    trials = pd.DataFrame({"status": ["ok", "failed", "ok", None], "x": [1, 2, 3, 4]})
    assert stats.finished(trials)["x"].tolist() == [1, 3]
    assert stats.finished(trials.drop(columns="status"))["x"].tolist() == [1, 2, 3, 4]


# The package's floors, lowest first: a module imports only modules of earlier floors (docs/design.md, Layout).
FLOORS = (("records",), ("intervals",), ("coverage", "quality"), ("compare",), ("warmth", "planning", "family"))


def test_the_stats_modules_import_only_lower_floors_and_no_private_name():
    floor = {name: level for level, names in enumerate(FLOORS) for name in names}
    for name, level in floor.items():
        tree = ast.parse(inspect.getsource(importlib.import_module(f"kit.stats.{name}")))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kit.stats"):
                below = node.module.removeprefix("kit.stats.")
                assert floor.get(below, level) < level, f"kit.stats.{name} imports {node.module}"
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"kit.stats.{name} imports private {private} from {node.module}"
    assert set(floor) == {m.name for m in pkgutil.iter_modules(stats.__path__)}
