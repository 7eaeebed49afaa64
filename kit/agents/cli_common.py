"""What the Codex and Claude Code backends share: running a CLI safely and keeping its records.

A CLI trial is one or more processes (one per turn). Each runs in its own process group with its
output written straight to files, so a trial killed at its deadline keeps every byte it printed and
leaves no stray children (MCP servers, shell commands) behind. The environment is built from a short
allow-list, never inherited wholesale: a user's keys, proxies or CLI settings must not leak into a
trial (a planted OPENAI_API_KEY would otherwise reach a CLI talking to the embedded provider).
Command lines are recorded with secrets masked; binaries are probed once for their version.

Network: against the embedded provider a CLI reaches nothing but loopback. The model endpoint is the
provider's loopback URL (Codex: ``model_provider=kit`` with ``base_url``; Claude Code:
``ANTHROPIC_BASE_URL``); no proxy variable is passed on; Codex runs with analytics, plugins, memories
and multi-agent off, no MCP server but the kit's stdio one, and a read-only sandbox; Claude Code runs
with ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` and ``DISABLE_TELEMETRY=1`` (no update check,
telemetry or error reporting) and ``--strict-mcp-config``. tests/test_security.py runs both CLIs in a
network namespace that has only loopback, with every proxy variable pointing at a loopback trap that
records any connection, and checks that every request reached the provider's log.

No CLI outlives the kit. Each CLI starts through util-linux's ``setpriv --pdeathsig KILL``, which asks the
kernel (``prctl(PR_SET_PDEATHSIG)``) to SIGKILL it when its parent goes, then execs it: the CLI keeps
setpriv's pid, so the group it leads is the CLI's. Not ``preexec_fn``: that runs Python between fork and
exec in a process with threads (trials run in worker threads), which the subprocess docs call unsafe. The
signal fires when the *thread* that forked the CLI exits; that is the trial's worker thread, which waits
for the CLI, so only the kit's death fires it. The leader's children are the CLI's MCP servers (they end
at the end of their stdin) and commands. For what survives anyway (a window between fork and prctl, a
child in a group of its own, a machine without setpriv), each process writes its group, start time and
home into the trial folder (``GROUP_FILE``), and a resume calls ``reap`` on an interrupted attempt before
setting it aside: it kills that group, if it is still the same one, and every process holding the home,
and waits for them to go. ``stop_all`` ends every running CLI group (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import orjson

import kit
from kit.agents.base import TrialOutcome, TrialSpec
from kit.experiment.redact import MASK, SECRET_NAME, redact
from kit.files import atomic_write
from kit.names import OutsideRoot, child, inside

TOOLS_BIN = Path(kit.__file__).resolve().parents[1] / ".tools" / "node_modules" / ".bin"
# Inherited by every CLI: enough for a shell, a locale and a temp dir, nothing that configures the CLI.
BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM")
# Inherited only when talking to a real endpoint (a corporate proxy or CA); never for loopback.
NETWORK_ENV = (
    "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
)  # fmt: skip
KILL_GRACE_S = 2.0
RUNS_FILE = "cli_runs.json"
GROUP_FILE = "cli_group.json"  # the running CLI's process group, start time and home (``reap``)
SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None
POLL_S = 0.2  # how often a running CLI's upstream is checked (``UpstreamWatch``)
REAP_WAIT_S = 30.0
# A proxied trial's upstream could not be reached (kit.provider.proxy_server writes this error, as a 502).
UNREACHABLE = "the kit's proxy could not reach the upstream"
_running: dict[int, int] = {}  # pgid -> pid of every CLI group the kit runs now (``stop_all``)
_running_lock = threading.Lock()


@dataclass
class Completed:
    """One CLI process: how it ended and how long it took."""

    command: list[str]  # redacted, with the environment the kit set as leading NAME=value words
    returncode: int | None
    timed_out: bool
    wall_s: float
    stopped: str = ""  # why the kit ended it before its deadline (its upstream unreachable), "" otherwise

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self, name: str) -> str:
        """Why the process counts as failed, in words ("" when it did not)."""
        if self.stopped:
            return self.stopped
        if self.timed_out:
            return f"{name} killed at the trial deadline (timeout_s) after {self.wall_s:.1f} s"
        if self.returncode is not None and self.returncode < 0:
            return f"{name} killed by signal {-self.returncode}"
        if self.returncode:
            return f"{name} exited with code {self.returncode}"
        return ""


def is_loopback(base_url: str) -> bool:
    """True for the embedded provider (127.0.0.0/8, ::1, localhost): decides keys and network env."""
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def find_binary(spec: TrialSpec, option: str, name: str) -> str | None:
    """``spec.options[option]``, else the pinned CLI in ``.tools``, else ``name`` on PATH; None if absent."""
    return resolve_binary(spec.options.get(option), name)


def resolve_binary(chosen: str | None, name: str) -> str | None:
    """``chosen`` (a path, or a name on PATH), else the pinned CLI ``name`` in ``.tools``, else ``name`` on PATH;
    None if absent. The run stage checks an arm's binary with it before anything is written."""
    if chosen:
        path = Path(str(chosen)).expanduser()
        return str(path.resolve()) if path.exists() else shutil.which(str(chosen))
    pinned = TOOLS_BIN / name
    return str(pinned) if pinned.exists() else shutil.which(name)


@lru_cache(maxsize=16)
def _version(binary: str, mtime_ns: int) -> str:
    """Run in a throwaway home with the allow-listed environment: a CLI writes its state even to say its
    version (measured: Codex 0.169 puts helper binaries in ``$CODEX_HOME/tmp``), never into the user's."""
    try:
        with tempfile.TemporaryDirectory(prefix="kit-version-") as home:
            env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
            env.update(HOME=home, CODEX_HOME=str(Path(home) / ".codex"), CLAUDE_CONFIG_DIR=str(Path(home) / ".claude"))
            env.setdefault("PATH", os.defpath)
            done = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                env=env, cwd=home,
            )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    words = (done.stdout or done.stderr).split()
    # "codex-cli 0.169.0" / "2.1.328 (Claude Code)": the first word with a digit and a dot
    return next((w for w in words if any(c.isdigit() for c in w) and "." in w), " ".join(words) or "unknown")


def version(binary: str) -> str:
    """``binary --version``, reduced to the version number; cached per binary file."""
    return _version(binary, Path(binary).stat().st_mtime_ns)


def child_env(spec: TrialSpec, kit_env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed environment, plus what the backend sets, plus the arm's own variables."""
    names = BASE_ENV if is_loopback(spec.base_url) else BASE_ENV + NETWORK_ENV
    env = {k: os.environ[k] for k in names if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(kit_env)
    env.update(spec.arm.env)
    return env


def shown_command(argv: Sequence[str], kit_env: Mapping[str, str], arm_env: Mapping[str, str]) -> list[str]:
    """The command as a reader would retype it: ``NAME=value`` words first, secrets masked."""
    shown = {**kit_env, **arm_env}
    words = [f"{k}={MASK if SECRET_NAME.search(k) else v}" for k, v in shown.items()]
    return redact([*words, *argv])


def _run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    shown: list[str],
    cwd: Path,
    stdout: Path,
    stderr: Path,
    deadline: float,
    watch: Callable[[], str] = lambda: "",
) -> Completed:
    """Run ``argv`` until it exits, ``deadline`` (time.monotonic) passes or ``watch`` names a reason to stop it
    (checked every ``POLL_S``); appends to the two files, and records its group in ``GROUP_FILE`` beside them.

    The process leads its own group, which is signalled as a whole: SIGTERM at the deadline, SIGKILL
    after a grace period, and SIGKILL to any straggler once the leader has exited.
    """
    t0 = time.perf_counter()
    leader = [SETPRIV, "--pdeathsig", "KILL", "--", *argv] if SETPRIV else list(argv)
    with stdout.open("ab") as out, stderr.open("ab") as err:
        try:
            proc = subprocess.Popen(
                leader,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            err.write(f"kit: cannot start {argv[0]}: {exc}\n".encode())
            return Completed(shown, 127, False, time.perf_counter() - t0)
        with _running_lock:
            _running[proc.pid] = proc.pid
        try:
            _record_group(stdout.parent / GROUP_FILE, proc.pid, env.get("HOME"))
            stopped = _wait(proc, deadline, watch)
            timed_out = proc.returncode is None and not stopped
            if proc.returncode is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
        finally:  # an exception here (KeyboardInterrupt) must not leave the group running either
            _signal_group(proc.pid, signal.SIGKILL)  # children the CLI left behind
            if proc.returncode is None:
                proc.wait()
            with _running_lock:
                _running.pop(proc.pid, None)
    return Completed(shown, proc.returncode, timed_out, time.perf_counter() - t0, stopped)


def _wait(proc: subprocess.Popen, deadline: float, watch: Callable[[], str]) -> str:
    """Wait until ``proc`` exits or ``deadline`` passes, asking ``watch`` every ``POLL_S``; its reason to stop
    the process, or "" (exited, or the deadline: ``proc.returncode`` tells which)."""
    while True:
        try:
            proc.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
            return ""
        except subprocess.TimeoutExpired:
            stopped = watch()
            if stopped or time.monotonic() >= deadline:
                return stopped


def stop_all() -> None:
    """SIGKILL every CLI group this process runs now (an interrupted batch); their trials then end as killed."""
    with _running_lock:
        groups = list(_running)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)


class UpstreamWatch:
    """Whether a proxied trial's requests found their upstream unreachable, read from the provider log as it grows.

    Claude Code retries a 5xx answer with back-off until its deadline, Codex a few times; the proxy's first
    "could not reach" line for the trial is reason enough to end the CLI at once, with the proxy's words.
    """

    def __init__(self, log: Path | None, trial_id: str) -> None:
        self.log, self.needle = log, b'"trial_id":' + orjson.dumps(trial_id)  # as the log's JSON encodes it
        self.offset = log.stat().st_size if log is not None and log.exists() else 0
        self.partial = b""

    def __call__(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        with self.log.open("rb") as fh:
            fh.seek(self.offset)
            data = self.partial + fh.read()
        self.offset += len(data) - len(self.partial)
        *lines, self.partial = data.split(b"\n")
        for line in lines:
            if self.needle in line and UNREACHABLE.encode() in line:
                with contextlib.suppress(orjson.JSONDecodeError):
                    return str(orjson.loads(line).get("error") or UNREACHABLE)
        return ""


def _stat(pid: int) -> tuple[int, int] | None:
    """A process's group and start time (clock ticks since boot: ``/proc/<pid>/stat`` fields 5 and 22); None once
    it is gone or a zombie (a zombie runs nothing and writes nothing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[2]), int(fields[19]))


def _start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _record_group(path: Path, pid: int, home: str | None) -> None:
    """Say which process group runs the trial now: its id, its leader's start time (so a reused pid is not taken
    for it) and boot, and the CLI's home (every process the CLI starts inherits it)."""
    record = {"pgid": pid, "start_time": _start_time(pid), "boot_id": _boot_id(), "home": home}
    data = orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n"
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def _leftovers(record: Mapping[str, object]) -> set[int]:
    """The live processes an earlier attempt left: its group, while its leader is the same process (by start
    time), and any process whose environment names the attempt's home (the CLI's children inherit it).

    Not the group id alone once its leader is gone: when every member has ended, the id can be given to a new
    process that leads a session of its own (another trial's CLI, under a busy machine's pid churn: pid_max is
    32,768 here), and killing by that id killed a running trial (seen as "claude killed by signal 9")."""
    pgid, started, home = record.get("pgid"), record.get("start_time"), record.get("home")
    if record.get("boot_id") != _boot_id() or not isinstance(pgid, int) or not isinstance(started, int):
        return set()
    leader = _start_time(pgid)
    group_ours = leader == started
    marker = f"HOME={home}\0".encode() if isinstance(home, str) and home else None
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None or pid == os.getpid():
            continue
        if group_ours and stat[0] == pgid and stat[1] >= started:
            found.add(pid)
        elif marker is not None:
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes():
                    found.add(pid)
    return found


def reap(trial_dir: Path, homes: Path, wait_s: float = REAP_WAIT_S) -> None:
    """Kill what an interrupted attempt of a trial left running (its ``GROUP_FILE``) and wait until it is gone,
    then remove its home; before the attempt is set aside, so nothing writes into its files afterwards.

    The record is read, not trusted (a batch folder can come from elsewhere): its home is used, to find
    processes and to be removed, only if it lies inside ``homes`` (``homes_root``), and its group only if
    this boot's process of that id started when the record says."""
    path = trial_dir / GROUP_FILE
    if not path.is_file():
        return
    try:
        record = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return
    if not isinstance(record, dict):
        return
    try:
        record["home"] = str(inside(homes, Path(record["home"])))
    except (KeyError, TypeError, OSError, OutsideRoot):
        record["home"] = None
    end = time.monotonic() + wait_s
    while True:
        left = _leftovers(record)
        if not left:
            break
        if time.monotonic() > end:
            raise OSError(f"{trial_dir}: processes {sorted(left)} of an earlier attempt survive SIGKILL")
        _signal_group(int(record["pgid"]), signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    if isinstance(record.get("home"), str) and record["home"]:
        shutil.rmtree(record["home"], ignore_errors=True)


@dataclass
class Turns:
    """How a trial's prompts become CLI processes: one per turn, stopping at the first failed turn."""

    program: str  # the name failures are reported under
    argv: Callable[[int], list[str]]  # the command line of a turn (its prompt from the answers so far)
    events: Callable[[list[dict]], tuple[str, str]]  # a turn's new stdout events -> (failure or "", answer)
    env: Mapping[str, str]
    kit_env: Mapping[str, str]
    stdout: Path
    stderr: Path


def run_turns(spec: TrialSpec, outcome: TrialOutcome, turns: Turns, runs: list[Completed]) -> None:
    """Run each prompt of ``spec`` by ``turns``, appending to ``runs`` (so a caller's cleanup sees every run).

    The outcome gets one answer per completed turn; the first failure (the process's, else the one
    its events report) marks it failed with the turn's number, and the later turns are not run.
    """
    deadline = time.monotonic() + spec.timeout_s
    watch = UpstreamWatch(spec.provider_log, spec.trial_id)
    for turn in range(len(spec.prompts)):
        argv = turns.argv(turn)
        seen = len(read_jsonl(turns.stdout))
        run = _run_process(
            argv,
            env=turns.env,
            shown=shown_command(argv, turns.kit_env, spec.arm.env),
            cwd=spec.workdir.resolve(),
            stdout=turns.stdout,
            stderr=turns.stderr,
            deadline=deadline,
            watch=watch,
        )
        runs.append(run)
        reported, answer = turns.events(read_jsonl(turns.stdout)[seen:])
        failure = run.failure(turns.program) or reported
        if failure:
            outcome.status, outcome.reason = "failed", f"turn {turn + 1}: {failure}"
            return
        outcome.turns = turn + 1
        outcome.answers.append(answer)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, sig)


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a CLI's stdout; lines that are not JSON objects (banners, warnings) are skipped."""
    if not path.exists():
        return []
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def copy_transcripts(files: Iterable[tuple[Path, str]], out_dir: Path) -> list[str]:
    """Copy each (source, name relative to out_dir); return the names copied, in the given order."""
    names = []
    for source, name in files:
        if not source.is_file():
            continue
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        names.append(name)
    return names


def write_runs(out_dir: Path, runs: list[Completed]) -> None:
    """Every process of the trial (redacted command, exit, timing) for the record and the bench."""
    records = [
        {"turn": i + 1, "command": r.command, "returncode": r.returncode, "timed_out": r.timed_out, "wall_s": r.wall_s}
        | ({"stopped": r.stopped} if r.stopped else {})
        for i, r in enumerate(runs)
    ]
    data = orjson.dumps(records, option=orjson.OPT_INDENT_2) + b"\n"
    atomic_write(out_dir / RUNS_FILE, lambda tmp: tmp.write_bytes(data))


def trial_home(spec: TrialSpec, cli: str) -> Path:
    """A fresh per-trial home beside the work dirs (``work/.homes/<trial>-<cli>``), outside ``raw/``.

    Outside ``raw/`` because a home is CLI state, not a record (machine and user ids, caches, SQLite
    databases; with a login, credentials); not under /tmp when avoidable, because Codex refuses to
    create its helper binaries there. It is deleted once the transcripts are copied.
    """
    home = child(homes_root(spec), f"{spec.trial_id}-{cli}").resolve()  # removed below: never outside its root
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    return home


def homes_root(spec: TrialSpec) -> Path:
    """Where a trial's CLI homes go: ``home_root``, else ``.homes`` beside the work dirs."""
    return Path(str(spec.options.get("home_root") or spec.workdir.resolve().parent / ".homes"))


def home_name(spec: TrialSpec, cli: str) -> str:
    """The name ``trial_home`` gives a home: the CLI's, with the attempt after the first (``codex.2``), so a rerun
    never shares a path with an attempt whose processes may still run (``reap`` kills them, removes it)."""
    return cli if spec.attempt == 1 else f"{cli}.{spec.attempt}"


def remove_home(spec: TrialSpec, home: Path) -> None:
    if not spec.options.get("keep_home"):
        shutil.rmtree(home, ignore_errors=True)


def effort(spec: TrialSpec) -> str | None:
    value = spec.effort or spec.options.get("effort")
    return str(value) if value else None
