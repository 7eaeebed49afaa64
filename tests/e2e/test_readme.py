"""Every command of README.md's ```sh blocks runs, as written, in a copy of the repository.

The copy holds the files git knows (tracked, and new ones not ignored), so the commands meet what a
fresh clone has; its code is imported first (``PYTHONPATH``) and the venv's ``bin/`` is on ``PATH``, as
README asks. ``make demo`` is checked to be ``python -m kit batch -f params/demo.yaml`` and that runs;
``make test`` is this suite, checked to run pytest. A long-running command (the embedded provider) must
print its URL, and it serves the rest of its block (the proxied batch after it talks to it). The port number a
README server names may be taken on the machine running the suite: the server is started on
``--port 0`` (a free one) and the block's later commands are pointed at the URL it prints. A README command the
test has no way to run fails the suite.

The commands on ``outputs/mybatch`` build on each other and run in README order; the rest run in README
order beside them. The demo's command runs once however often README shows it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import ROOT

VENV_BIN = Path(sys.executable).parent
DEMO = "python -m kit batch -f params/demo.yaml"
SERVERS = ("python -m kit provider serve",)  # they run until interrupted
PORT = re.compile(r"--port[ =](\d+)")


def readme_commands(text: str) -> list[list[str]]:
    """The ```sh blocks of ``text``, each a list of commands (continuation lines joined, comments kept)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    out = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        out.append([line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")])
    return out


def _words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def make_recipe(target: str) -> list[str]:
    """The command lines of a Makefile target (its recipe), with ``$(BIN)/`` dropped."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, flags=re.MULTILINE)
    assert recipe, f"Makefile has no {target} target"
    return [line.strip().replace("$(BIN)/", "") for line in recipe.group(1).splitlines()]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository's files as a fresh clone has them, with the venv linked in."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True,
        check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    dest = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(VENV_BIN.parent)
    return dest


def _env(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "VIRTUAL_ENV")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(clone))
    scratch = clone.parent / "tmp"  # a served provider keeps the log it prints: here, not in the machine's /tmp
    scratch.mkdir(exist_ok=True)
    env["TMPDIR"] = str(scratch)
    return env


def _run(command: str, clone: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command], cwd=clone, env=_env(clone), capture_output=True, text=True, timeout=600
    )


def _on_a_free_port(command: str) -> tuple[str, str | None]:
    """A server command with the port README names replaced by 0, and the address README's later commands use
    for it (None when it names no port: it picks a free one already)."""
    named = PORT.search(command)
    if named is None:
        return command, None
    return PORT.sub("--port 0", command), f"http://127.0.0.1:{named.group(1)}"


@contextlib.contextmanager
def _serving(command: str, clone: Path) -> Iterator[subprocess.CompletedProcess]:
    """Start a server command and read its first line (the URL it serves); it serves the rest of its README
    block (a later command may talk to it), then it is stopped. Yields its result so far: ok once it serves."""
    served = _on_a_free_port(command)[0]
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {served}"], cwd=clone, env=_env(clone), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None  # stdout=PIPE
    try:
        first = proc.stdout.readline()
        ok = first.startswith("http://127.0.0.1:")
        yield subprocess.CompletedProcess(command, 0 if ok else 1, first, "")
    finally:
        proc.terminate()
        proc.communicate(timeout=120)


def _dispatch(command: str, clone: Path) -> subprocess.CompletedProcess:
    """Run one README command the way it has to be run; fail for a command the test cannot run."""
    words = _words(command)
    if words == ["make", "demo"]:
        assert make_recipe("demo") == [DEMO], "make demo is no longer the command this test runs"
        return _run(DEMO, clone)
    if words == ["make", "test"]:
        assert any("-m pytest" in line for line in make_recipe("test")), "make test no longer runs pytest"
        return subprocess.CompletedProcess(command, 0, "this suite", "")
    if words[0] == "make":
        pytest.fail(f"README command {command!r}: test_readme.py does not know how to run it")
    return _run(command, clone)


# One worker runs every test of this file (make test: --dist loadfile), so the README's commands run once.


@pytest.fixture(scope="module")
def ran(clone) -> dict[str, subprocess.CompletedProcess]:
    """Every README command's result, keyed by the command; the demo beside the rest."""
    blocks = readme_commands((ROOT / "README.md").read_text())
    commands = [c for block in blocks for c in block]
    demo = [c for c in commands if _words(c) in (["make", "demo"], _words(DEMO))]
    chained = [[c for c in block if "mybatch" in c] for block in blocks]
    others = [[c for c in block if "mybatch" not in c] for block in blocks]

    def run_in_order(chosen: list[list[str]]) -> dict[str, subprocess.CompletedProcess]:
        results: dict[str, subprocess.CompletedProcess] = {}
        for block in chosen:
            served: dict[str, str] = {}  # the address README gives a server of this block -> the URL it printed
            with contextlib.ExitStack() as servers:
                for command in block:
                    if command in demo[1:]:
                        results[command] = results[demo[0]]
                    elif command.startswith(SERVERS):
                        results[command] = servers.enter_context(_serving(command, clone))
                        if (named := _on_a_free_port(command)[1]) is not None:
                            served[named] = results[command].stdout.strip()
                    else:
                        results[command] = _dispatch(_pointed_at(command, served), clone)
                    if results[command].returncode:
                        return results  # later commands of the README build on this one
        return results

    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(run_in_order, [others, chained]))
    return parts[0] | parts[1]


def _pointed_at(command: str, served: dict[str, str]) -> str:
    """``command`` with each address README gives a server replaced by the URL that server printed."""
    for named, url in served.items():
        command = re.sub(rf"{re.escape(named)}(?!\d)", url, command)
    return command


def _result(ran: dict[str, subprocess.CompletedProcess], prefix: str) -> subprocess.CompletedProcess:
    """The result of the README command starting with ``prefix``; if it never ran, the command that stopped it."""
    found = [c for c in ran if c.startswith(prefix)]
    failed = [f"{c}\n{r.stdout[-1000:]}\n{r.stderr[-2000:]}" for c, r in ran.items() if r.returncode]
    assert found, f"{prefix!r} not run; failed before it: {failed}"
    return ran[found[0]]


def test_every_readme_command_runs_as_written(ran):
    commands = [c for block in readme_commands((ROOT / "README.md").read_text()) for c in block]
    assert len(commands) >= 10
    for command in commands:
        assert command in ran, f"not run (an earlier command failed): {command}"
        result = ran[command]
        assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"


def test_demo_ends_with_the_headline_and_the_report(ran, clone):
    out = _result(ran, "make demo")
    lines = out.stdout.strip().splitlines()
    report = re.fullmatch(r"report: (outputs/[A-Za-z0-9_.-]+/report\.html)", lines[-1])
    assert report and (clone / report.group(1)).is_file(), lines[-1]
    assert lines[0].startswith("batch folder: outputs/")
    sentence = re.compile(r"(fewer|more) total tokens than placebo|no difference in total tokens shown between")
    assert any(sentence.search(line) for line in lines), lines  # the headline's three forms (a random salt's batch)
    assert "total_tokens" not in out.stdout  # the sentences, not the headline table's columns
    assert "without encryption" not in out.stderr


def test_papermill_by_hand_and_a_stage_alone_stay_in_the_named_folder(ran, clone):
    batch = clone / "outputs" / "mybatch"
    for stage in ("run", "parse", "analyze", "plot"):
        assert (batch / f"{stage}.ipynb").is_file(), stage
    assert (batch / "manifest.json").is_file() and (batch / "report.html").is_file()
    named = {"examples", "mybatch", "history-fixtures", "proxied", "rep-1", "rep-2", "rep-3"}  # README's names
    replicated = re.compile(r"batch-read-\d{8}-\d{6}-[123]")  # the unnamed `kit replicate` of the README
    strays = {p.name for p in (clone / "outputs").iterdir() if not replicated.fullmatch(p.name)} - named
    assert len(strays) == 1 and re.fullmatch(r"batch-read-\d{8}-\d{6}", strays.pop())  # the demo's, nothing else
    assert not list(batch.glob("*.running.*")) and not list(batch.glob("*.failed.*"))


def test_help_lists_the_commands(ran):
    out = _result(ran, "python -m kit --help").stdout
    for name in ("batch", "provider", "parse", "ping", "snapshot"):
        assert f"  {name} " in out, name


def test_readme_names_no_folder_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    outside = ["..", "/shared"], ["DESIGN", ".md"], ["tables", "_spec"]  # in pieces: this file is grepped too
    for pieces in outside:
        assert "".join(pieces) not in text
    for link in re.findall(r"`(docs/[a-z]+\.md)(?:#[a-z-]+)?`", text):
        assert (ROOT / link).is_file(), link
