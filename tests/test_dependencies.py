"""pyproject.toml and environment.yml list the same dependencies with the same lower bounds."""

import tomllib

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
