"""pyproject.toml and environment.yml list the same dependencies with the same lower bounds."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert set(pip) == wanted
    assert "python>=3.11" in env["dependencies"]
    assert project["requires-python"] == ">=3.11"


def test_every_dependency_has_a_tested_lower_bound():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        assert ">=" in dep, dep


def _imported(root: Path) -> set[str]:
    """The top-level names of every absolute import under ``root`` (function-level ones too), less the
    standard library and this repository's own packages."""
    names = set()
    for path in root.rglob("*.py"):
        if "data" in path.relative_to(root).parts:
            continue  # the task packs' fixture templates: code of the fixture, not of the kit
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    local = {p.stem for folder in (root, ROOT / "bench") for p in folder.glob("*.py")} | {"kit", "tests", "bench"}
    return {n for n in names if n not in sys.stdlib_module_names and n not in local}


def _declared(*groups: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = [*project["dependencies"], *(d for g in groups for d in project["optional-dependencies"][g])]
    return {re.split(r"[<>=!~ \[;]", d)[0].lower().replace("_", "-") for d in deps}


@pytest.mark.parametrize(("folder", "groups"), [("kit", ()), ("tests", ("dev",)), ("bench", ("dev",))])
def test_every_imported_package_is_declared(folder: str, groups: tuple[str, ...]):
    """A fresh clone installs only what pyproject.toml declares: a package the kit imports because another one
    happened to bring it (nbformat with papermill, PIL with matplotlib) breaks when that one stops."""
    owners = importlib.metadata.packages_distributions()
    declared = _declared(*groups)
    missing = {
        name: owners.get(name, ["?"])
        for name in _imported(ROOT / folder)
        if not {d.lower().replace("_", "-") for d in owners.get(name, [])} & declared
    }
    assert not missing, f"{folder}/ imports packages pyproject.toml does not declare: {missing}"
