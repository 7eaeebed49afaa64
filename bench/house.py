"""The shape of the house: modules per folder, function lengths, public functions returning a bare dict, and
the type checker's findings, for the kit at any revision (issue 18's before/after).

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

ROOT = Path(__file__).resolve().parent.parent
BARE = re.compile(r"^(dict|Dict|dict\[str, (Any|object)\])( \| None)?$")


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
    print(f"| mypy findings | {mypy_findings(tree)} |\n")
    print("| folder | modules |\n|---|---|")
    for folder, n in sorted(modules_per_folder(kit).items()):
        print(f"| {folder} | {n} |")
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
