"""The docs cannot drift from the code, and a fresh clone stands alone.

docs/tables.md is generated from kit/cli/columns.py and must describe every column the committed example
batches have; every section of docs/method.md the code cites must exist; every test fixture must be
listed with its source and checksum; nothing in the repository may point at files outside it; and the
import rules docs/design.md states must hold.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pyarrow.parquet as pq  # type: ignore[import-untyped]  # no stubs; reads the example tables
import pytest

from bench import house
from kit.cli import columns
from tests.support import FIXTURES, ROOT

DOCS = ROOT / "docs"
EXAMPLES = ROOT / "outputs" / "examples"
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".ipynb", ".txt", ".json", ".jsonl", ".toml", ".cfg", ".sh"}
METHOD_ANCHORS = [
    "totals", "warmth", "stitch", "interleaving", "isolation", "retention", "replication", "structural-cache",
    "controls", "grading", "savings", "intervals", "transcripts", "occupancy", "calibration", "compaction",
    "conventions", "sources",
]  # fmt: skip


def _files(*folders: str) -> list[Path]:
    """Text files under ``folders`` of the repository (caches and binaries skipped)."""
    out = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                out.append(path)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(markdown: Path) -> set[str]:
    text = markdown.read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {_slug(h) for h in headings} | set(re.findall(r'<a id="([^"]+)"', text))


def test_tables_md_is_generated_from_kit_columns():
    assert (DOCS / "tables.md").read_text(encoding="utf-8") == columns.render(), (
        "docs/tables.md is stale: run `python -m kit.cli.columns > docs/tables.md`"
    )


def _example_tables() -> list[Path]:
    return sorted([*EXAMPLES.glob("*/tables/*.parquet"), *EXAMPLES.glob("*/analysis/*.csv")])


@pytest.mark.parametrize("path", _example_tables(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_column_of_the_example_batches_is_documented(path: Path):
    documented = {t.path: {c.name for c in t.columns} for t in columns.TABLES}
    key = f"{path.parent.name}/{path.name}"
    assert key in documented, f"{key} is written by a stage but has no entry in kit/cli/columns.py"
    if path.suffix == ".parquet":
        names = pq.read_schema(path).names
    else:
        with path.open(newline="", encoding="utf-8") as handle:
            names = next(csv.reader(handle), [])
    assert set(names) <= documented[key], f"{key}: undocumented columns {sorted(set(names) - documented[key])}"


def test_the_example_batches_exist():
    assert len(_example_tables()) >= 10  # the test above must have something to check


def test_method_md_defines_every_anchor_the_code_cites():
    defined = _anchors(DOCS / "method.md")
    assert set(METHOD_ANCHORS) <= defined, f"missing sections: {sorted(set(METHOD_ANCHORS) - defined)}"
    cited: dict[str, list[str]] = {}
    for path in [*_files("kit", "tests", "bench", "params", "notebooks", "docs"), ROOT / "README.md"]:
        for anchor in re.findall(r"method\.md#([A-Za-z0-9_-]+)", path.read_text(encoding="utf-8")):
            cited.setdefault(anchor, []).append(str(path.relative_to(ROOT)))
    dangling = {a: files for a, files in cited.items() if a not in defined}
    assert not dangling, f"docs/method.md has no section for: {dangling}"


def test_links_between_the_docs_resolve():
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text):
            if target.startswith(("http://", "https://")):
                continue
            linked = (doc.parent / target) if target else doc
            assert linked.exists(), f"{doc.name}: link to missing {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{doc.name}: {target}#{anchor} has no such section"


def test_every_fixture_is_listed_with_its_source_and_checksum():
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        rel = path.relative_to(FIXTURES).as_posix()
        if rel == "SOURCES.md" or rel.startswith("LICENSES/") or "__pycache__" in rel:
            continue
        assert f"`{rel}`" in sources, f"tests/fixtures/{rel} is not listed in tests/fixtures/SOURCES.md"
        if not rel.endswith("README.md"):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert digest in sources, f"tests/fixtures/{rel}: SHA-256 {digest} differs from SOURCES.md"


def test_nothing_points_outside_the_repository():
    """A user's clone has nothing beside it: no sibling folder, no developer paths, no private notes."""
    pieces = [r"seed 00[0-9] ?" + "\u00a7", r"\.\./" + "shared", "/" + "work/", r"DESIGN\." + "md", "tables_" + "spec"]
    pattern = re.compile("|".join(pieces))
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in _files("kit", "tests", "notebooks", "bench", "params")
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, "references a fresh clone cannot follow:\n" + "\n".join(hits)


def test_every_import_goes_down_the_floors_docs_design_md_states():
    """docs/design.md's ``floors`` and ``apart`` blocks are the layering; every import of kit/ (function-level
    ones included) keeps to them, and every module of kit/ is on a floor."""
    rules = house.floors()
    assert rules.floor and rules.apart, "docs/design.md lost its floors or apart block"
    unplaced = [house.module_of(p, ROOT / "kit") for p in house._sources(ROOT / "kit")]
    assert [m for m in unplaced if rules.of(m) is None] == []
    wrong = house.wrong_imports(ROOT / "kit", rules)
    assert not wrong, "imports against docs/design.md's floors:\n" + "\n".join(wrong)


def test_the_floor_rules_can_fail(tmp_path: Path):
    """The checker sees an import up a floor, one across an ``apart`` line, and a private name, function-level too."""
    kit = tmp_path / "kit"
    (kit / "provider").mkdir(parents=True)
    (kit / "analysis").mkdir()
    (kit / "__init__.py").write_text("")
    (kit / "provider" / "__init__.py").write_text("")
    (kit / "provider" / "cache.py").write_text("def f():\n    from kit.stages import run\n")
    (kit / "analysis" / "__init__.py").write_text("")
    (kit / "analysis" / "m.py").write_text("import kit.transcripts.x\nfrom kit.provider.cache import _y\n")
    rules = house.floors()
    wrong = house.wrong_imports(kit, rules)
    assert any("kit.provider.cache (floor 1) -> kit.stages.run (floor 5)" in w for w in wrong), wrong
    assert any("kit.analysis.m (floor 3) -> kit.transcripts.x" in w for w in wrong), wrong
    assert [p.split(": ", 1)[1] for p in house.private_imports(kit)] == ["from kit.provider.cache import _y"]


def test_no_module_imports_a_private_name_of_another():
    found = house.private_imports(ROOT / "kit")
    assert not found, "private names imported across modules:\n" + "\n".join(found)


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_import_only_the_stages_and_params(notebook: Path):
    """A notebook is parameters, calls into its stage and displays (docs/design.md): every kit import it makes is
    ``kit.params`` or a stage of ``kit.stages``, so what a stage needs lives in the stage, not in a cell."""
    nb = nbformat.read(notebook, as_version=4)
    imported = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names if a.name.split(".")[0] == "kit"}
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "kit":
                    imported |= {f"{node.module}.{a.name}" for a in node.names}
    assert imported, f"{notebook.name} imports nothing from kit"
    wrong = sorted(m for m in imported if m != "kit.params" and not m.startswith("kit.stages."))
    assert not wrong, f"{notebook.name} imports {wrong}; only kit.params and kit.stages.<stage>"


@pytest.mark.parametrize("stage", ["run", "parse", "analyze", "plot", "explore", "history"])
def test_each_stage_lists_its_surface(stage: str):
    """A stage's ``__all__`` names what exists, once, and holds every public function the module defines."""
    module = importlib.import_module(f"kit.stages.{stage}")
    listed = module.__all__
    assert len(listed) == len(set(listed)) and all(hasattr(module, name) for name in listed)
    defined = {n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__}
    assert {n for n in defined if not n.startswith("_")} <= set(listed)


def test_the_house_keeps_its_shape():
    """bench/house.py's measures that issue 18 fixed stay fixed: no function over 60 lines (kit.stats.ratio under
    30), and no public function returning a bare dict (a record in disguise; JSON and parameter mappings say whose
    shape they are: kit/jsontypes.py)."""
    spec = importlib.util.spec_from_file_location("house", ROOT / "bench" / "house.py")
    assert spec and spec.loader
    house = importlib.util.module_from_spec(spec)
    sys.modules["house"] = house  # its dataclass looks its module up there
    spec.loader.exec_module(house)
    functions = house.functions(ROOT / "kit")
    assert len(functions) > 500
    assert not [f"{f.where} {f.name}: {f.lines}" for f in functions if f.lines > 60]
    assert not [f"{f.where} {f.name}" for f in functions if f.bare_dict]
    (ratio,) = [f for f in functions if f.name == "ratio" and f.where.startswith("kit/stats/compare.py:")]
    assert ratio.lines < 30, "kit.stats.ratio: selection, pairing, interval and row live in their own functions"


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_are_committed_without_outputs(notebook: Path):
    """A notebook in notebooks/ is the source a batch executes; its outputs belong to the batch folder."""
    nb = nbformat.read(notebook, as_version=4)
    ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not ran, f"{notebook.name}: cells {ran} hold outputs or execution counts; clear them before committing"


def test_the_pre_commit_hooks_are_a_valid_configuration():
    done = subprocess.run(
        [str(ROOT / ".venv/bin/pre-commit"), "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _recipes() -> dict[str, str]:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", text, flags=re.M | re.S))


def test_contributing_has_five_recipes_each_with_a_test_to_copy_and_a_worked_example():
    recipes = _recipes()
    assert list(recipes) == ["A backend", "A transcript format", "A task pack", "A figure", "A statistic"]
    for name, body in recipes.items():
        copy = re.search(r"Test to copy: `([^`]+)`", body)
        assert copy and (ROOT / copy.group(1)).is_file(), f"{name}: no test to copy, or it is gone"
        assert "Worked example:" in body, name


def test_every_path_contributing_names_exists_or_its_worked_example_touched_it():
    """A recipe's files are today's; a path of another day is one its worked-example commit touched."""
    for name, body in _recipes().items():
        commits = re.findall(r"commit `([0-9a-f]{7,40})`", body)
        touched: set[str] = set()
        for commit in commits:
            shown = subprocess.run(
                ["git", "show", "--name-only", "--format=", commit], cwd=ROOT, capture_output=True, text=True
            )
            assert shown.returncode == 0, f"{name}: commit {commit} is not in this repository's history"
            touched |= set(shown.stdout.split())
        for path in re.findall(r"`((?:kit|tests|params|bench|docs)/[^`\s<]*)`", body):  # <name>: a placeholder
            assert (ROOT / path).exists() or path in touched, f"{name}: {path} neither exists nor was touched"
