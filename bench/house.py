"""The shape of the house: modules and floors per folder, imports that go up a floor or cross a line the design
draws, private names imported across modules, run parameters read by string key, function lengths, public
functions returning a bare dict, and the type checker's findings, for the kit at any revision (issues 18 and 28's
before/after). The floors are the ones docs/design.md states ("Who imports whom"), read from its ``floors`` and
``apart`` blocks, so the same rules measure an old tree.

    .venv/bin/python bench/house.py                 # the working tree
    .venv/bin/python bench/house.py --rev b2aeb05   # a commit, unpacked into a temporary folder

Function length counts every line from ``def`` to the end of the body (docstring included), as a reader
scrolls it. "Bare dict" is a public function (no ``_`` in its name or its module's) whose return annotation
is ``dict``, ``dict[str, Any]`` or ``dict[str, object]``: a record in disguise, as opposed to a typed mapping
such as ``dict[str, Path]``. The type checker is this repository's mypy configuration, whatever the
revision (an old tree had none), so the counts compare like with like.
"""

from __future__ import annotations

import argparse
import ast
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BARE = re.compile(r"^(dict|Dict|dict\[str, (Any|object)\])( \| None)?$")


DESIGN = ROOT / "docs" / "design.md"


@dataclass(frozen=True)
class Floors:
    """docs/design.md's floors (dotted name -> floor number) and the imports it rules out besides."""

    floor: dict[str, int]
    apart: dict[str, tuple[str, ...]]

    def of(self, module: str) -> int | None:
        """The floor of ``module``: that of the longest name that covers it (None for a name outside ``kit``)."""
        return _longest(self.floor, module)


def _longest(table: dict[str, Any], module: str) -> Any:
    covering = [name for name in table if module == name or module.startswith(name + ".")]
    return table[max(covering, key=len)] if covering else None


def floors(design: Path = DESIGN) -> Floors:
    """The ``floors`` block (``N label: kit.a kit.b``) and the ``apart`` block (``kit.a -> kit.b kit.c``)."""
    text = design.read_text(encoding="utf-8")
    blocks = dict(re.findall(r"```(floors|apart)\n(.*?)```", text, flags=re.S))
    floor = {
        name: int(number)
        for number, names in re.findall(r"^(\d+) [^:]*: (.*)$", blocks.get("floors", ""), flags=re.M)
        for name in names.split()
    }
    apart = {
        source: tuple(targets.split())
        for source, targets in re.findall(r"^(\S+) -> (.*)$", blocks.get("apart", ""), flags=re.M)
    }
    return Floors(floor, apart)


def module_of(path: Path, kit: Path) -> str:
    """``kit/a/b.py`` -> ``kit.a.b``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(kit.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_imports(path: Path) -> list[tuple[int, str]]:
    """Every ``kit…`` name a file imports (line, dotted name; ``from a import b`` gives ``a.b``), at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kit"]
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "kit"
        ):
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def _sources(kit: Path) -> list[Path]:
    return sorted(p for p in kit.rglob("*.py") if "data" not in p.relative_to(kit).parts)


def wrong_imports(kit: Path, rules: Floors) -> list[str]:
    """Imports that go up a floor, or from a folder to one the ``apart`` block rules out (``path:line: a -> b``)."""
    wrong = []
    for path in _sources(kit):
        here = module_of(path, kit)
        mine, banned = rules.of(here), _longest(rules.apart, here) or ()
        for line, name in kit_imports(path):
            theirs = rules.of(name)
            up = mine is not None and theirs is not None and theirs > mine
            if up or any(name == b or name.startswith(b + ".") for b in banned):
                wrong.append(f"{path.relative_to(kit.parent)}:{line}: {here} (floor {mine}) -> {name} (floor {theirs})")
    return wrong


def _is_module(kit: Path, dotted: str) -> bool:
    base = kit.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def private_imports(kit: Path) -> list[str]:
    """Private names (``_x``) one module takes from another: ``from m import _x`` and ``m._x`` on an imported
    kit module. A package's private module imported inside that package (``from kit.transcripts import _usage``
    in kit/transcripts/) is the package's own business and is not counted."""
    found = []
    for path in _sources(kit):
        here = module_of(path, kit)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("kit"):
                for a in node.names:
                    dotted = f"{node.module}.{a.name}"
                    own_module = _is_module(kit, dotted) and node.module == package
                    if a.name.startswith("_") and not a.name.startswith("__") and not own_module:
                        found.append(
                            f"{path.relative_to(kit.parent)}:{node.lineno}: from {node.module} import {a.name}"
                        )
                    if _is_module(kit, dotted):
                        aliases[a.asname or a.name] = dotted
            elif isinstance(node, ast.Import):
                aliases |= {a.asname or a.name: a.name for a in node.names if a.asname and a.name.startswith("kit.")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.relative_to(kit.parent)}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


_RUN_PARAMETER = re.compile(r"""params\[["'][a-z_]+["']\]""")


def string_keyed_parameter_reads(kit: Path) -> int:
    """Reads of a run parameter by string key (``params["backend"]``, ``cfg.params["arms"]``), which a typed
    record makes attribute reads."""
    return sum(len(_RUN_PARAMETER.findall(p.read_text(encoding="utf-8"))) for p in _sources(kit))


def floors_per_folder(kit: Path, rules: Floors) -> dict[str, set[int | None]]:
    """For each folder, the floors its modules are on (one floor per folder is the shape docs/design.md asks)."""
    out: dict[str, set[int | None]] = {}
    for path in _sources(kit):
        out.setdefault(str(path.parent.relative_to(kit.parent)), set()).add(rules.of(module_of(path, kit)))
    return out


@dataclass(frozen=True)
class Function:
    """One function or method of the kit."""

    where: str  # path:line
    name: str
    lines: int
    bare_dict: bool


def functions(kit: Path) -> list[Function]:
    """Every function and method under ``kit`` (task-pack fixture templates are data, not code)."""
    found = []
    for path in sorted(kit.rglob("*.py")):
        if "data" in path.relative_to(kit).parts:
            continue
        private_module = path.stem.startswith("_") and path.stem != "__init__"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                returns = ast.unparse(node.returns) if node.returns else ""
                public = not (private_module or node.name.startswith("_"))
                where = f"{path.relative_to(kit.parent)}:{node.lineno}"
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append(Function(where, node.name, span, public and bool(BARE.match(returns))))
    return found


def modules_per_folder(kit: Path) -> Counter[str]:
    """Python modules per package folder (``kit`` for the top level)."""
    counts: Counter[str] = Counter()
    for path in kit.rglob("*.py"):
        rel = path.relative_to(kit.parent)
        if "data" not in rel.parts:
            counts[str(rel.parent)] += 1
    return counts


def mypy_findings(tree: Path) -> str:
    """The number of errors this repository's mypy settings report on ``tree/kit`` (or why there is none)."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(tree / "kit")]
    try:
        out = subprocess.run(command, capture_output=True, text=True, cwd=tree, timeout=900).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"not run ({error})"
    summary = out.strip().splitlines()[-1] if out.strip() else "no output"
    found = re.search(r"Found (\d+) errors? in (\d+) files?", summary)
    return f"{found.group(1)} in {found.group(2)} files" if found else ("0" if "Success" in summary else summary)


def unpacked(rev: str, into: Path) -> Path:
    """The ``kit/`` folder of commit ``rev``, written under ``into`` (the working tree is not touched)."""
    archive = subprocess.run(["git", "archive", rev, "kit"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def report(tree: Path, label: str, top: int) -> None:
    kit = tree / "kit"
    funcs = functions(kit)
    lengths = [f.lines for f in funcs]
    longest = sorted(funcs, key=lambda f: -f.lines)[:top]
    print(f"## {label}\n")
    print("| measure | value |\n|---|---|")
    print(f"| modules | {sum(modules_per_folder(kit).values())} |")
    print(f"| functions | {len(funcs)} (median {statistics.median(lengths):.0f} lines) |")
    print(f"| functions over 60 lines | {sum(n > 60 for n in lengths)} |")
    print(f"| public functions returning a bare dict | {sum(f.bare_dict for f in funcs)} |")
    print(f"| mypy findings | {mypy_findings(tree)} |")
    rules = floors()
    wrong, private = wrong_imports(kit, rules), private_imports(kit)
    print(f"| imports up a floor or across an `apart` line | {len(wrong)} |")
    print(f"| private names imported across modules | {len(private)} |")
    print(f"| run parameters read by string key | {string_keyed_parameter_reads(kit)} |\n")
    print("| folder | modules | floors |\n|---|---|---|")
    spread = floors_per_folder(kit, rules)
    for folder, n in sorted(modules_per_folder(kit).items()):
        print(f"| {folder} | {n} | {', '.join(str(f) for f in sorted(spread.get(folder, set()), key=str))} |")
    for title, rows in (("import against the floors", wrong), ("private name imported", private)):
        if rows:
            print(f"\n| {title} |\n|---|")
            for row in rows:
                print(f"| {row} |")
    print("\n| longest functions | lines |\n|---|---|")
    for f in longest:
        print(f"| {f.where} {f.name} | {f.lines} |")
    bare = [f for f in funcs if f.bare_dict]
    if bare:
        print("\n| public function returning a bare dict | where |\n|---|---|")
        for f in bare:
            print(f"| {f.name} | {f.where} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="a commit to measure instead of the working tree")
    parser.add_argument("--top", type=int, default=5, help="how many of the longest functions to list")
    args = parser.parse_args(argv)
    if args.rev is None:
        report(ROOT, "working tree", args.top)
        return 0
    with tempfile.TemporaryDirectory(prefix="kit-house-") as tmp:
        report(unpacked(args.rev, Path(tmp)), f"commit {args.rev}", args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
