"""``python -m kit batch``: the four notebooks through papermill, in order, into the batch folder.

Every stage's parameters are checked before anything is written (``plan``): names, types and values
(``kit.params``), the arms against the task pack, a resume against the batch's own design, and the
folder a later stage works on against the batches that exist. A mistake is one line naming the
parameter, and the outputs folder is left exactly as it was.

Each stage is executed into a temporary ``<stage>.running.ipynb`` in the batch folder and moved onto
``<stage>.ipynb`` only when it succeeds, so a failed attempt never replaces a good executed notebook;
a failed one is kept as ``<stage>.failed.ipynb``, exported to HTML beside it. When the kernel itself
died (killed, out of memory) or a cell timed out, papermill saves the notebook without any error in it;
the error is then written into the cell that was running, so the saved notebook always says why the
stage stopped.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import orjson
import yaml
from jupyter_client.manager import AsyncKernelManager
from tqdm import tqdm
from traitlets import CaselessStrEnum, default

from kit import params as kit_params
from kit.agents import login
from kit.errors import InputError, KitError
from kit.experiment.backends import BACKENDS
from kit.experiment.design import ParamError
from kit.experiment.layout import ROOT, STAGES, BatchDir, from_root, latest_batch, new_batch_id, require_batch, shown
from kit.experiment.lock import batch_lock
from kit.experiment.redact import redact_text
from kit.files import atomic_write
from kit.jsontypes import ParamValues
from kit.names import NAME_RULE, is_name

NOTEBOOKS = ROOT / "notebooks"


class StageFailed(KitError, RuntimeError):
    """A notebook failed; ``notebook`` is the executed copy holding the error."""

    def __init__(self, stage: str, notebook: Path, cause: Exception) -> None:
        why = "the disk is full (No space left on device)" if _disk_full(cause) else _one_line(cause)
        super().__init__(f"stage {stage!r} failed: {why}; see {shown(notebook)} (and .html)")
        self.stage, self.notebook = stage, notebook


def _disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it came from, or the notebook's error it reports) is ENOSPC."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if "[Errno 28]" in str(getattr(seen, "evalue", "")):  # raised in the kernel, reported by papermill
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _one_line(exc: Exception) -> str:
    """The error a notebook raised, as its name and the first line of its message."""
    name, message = getattr(exc, "ename", type(exc).__name__), str(getattr(exc, "evalue", exc))
    return redact_text(f"{name}: {message.strip().splitlines()[0] if message.strip() else ''}")


class IPCKernelManager(AsyncKernelManager):
    """Kernels on Unix sockets, not TCP: ipykernel warns once per kernel that TCP runs unencrypted (the
    warning broke into ``kit batch``'s progress bar four times), and a local socket is the fix it names.
    Each kernel's sockets get a unique absolute path, so concurrent batches and any kernel cwd agree.
    Running kernels are listed (``running``), so that a Ctrl-C can reach the kernel (``run_stage``)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
    running: ClassVar[set[int]] = set()  # the pids of the kernels started here and not yet shut down

    async def _async_post_start_kernel(self, **kw: Any) -> None:
        await super()._async_post_start_kernel(**kw)
        pid = getattr(self.provisioner, "pid", None)
        if isinstance(pid, int):
            IPCKernelManager.running.add(pid)
            self._kit_pid = pid

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        try:
            await super()._async_shutdown_kernel(now=now, restart=restart)
        finally:
            IPCKernelManager.running.discard(getattr(self, "_kit_pid", -1))

    @default("ip")
    def _ip_default(self) -> str:
        return str(Path(tempfile.gettempdir()) / f"kit-kernel-{uuid.uuid4().hex}")

    async def _async_interrupt_kernel(self) -> None:
        """No interrupt on the way to shutdown: jupyter_client sends one before every shutdown, and a kernel
        still finishing a message logs ``KeyboardInterrupt caught in kernel`` into the progress bar. papermill
        shuts a kernel down only after its last cell (a timed-out cell is interrupted by nbclient first), and
        a kernel that ignores the shutdown request is killed after ``shutdown_wait_time``."""
        if not self.shutting_down:
            await super()._async_interrupt_kernel()


def _resolve_value(text: str) -> Any:
    """papermill's ``-p`` typing: True/False/None, int, float, else the string."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _yaml_mapping(text: str, where: str) -> dict[str, Any]:
    """``text`` read as a YAML mapping of parameters; a located ``ValueError`` otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict | None):
        raise InputError(f"{where}: expected a mapping of parameter names to values, got {type(data).__name__}")
    return data or {}


def load_params(
    file: str | None, yaml_strings: Sequence[str] = (), pairs: Sequence[tuple[str, str]] = ()
) -> ParamValues:
    """Parameters with papermill's precedence: file < yaml strings < -p pairs."""
    params: dict[str, Any] = {}
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"parameters file {file}: {(exc.strerror or str(exc)).lower()}") from None
        params.update(_yaml_mapping(text, f"parameters file {file}"))
    for text in yaml_strings:
        params.update(_yaml_mapping(text, f"-y {text!r}"))
    for key, value in pairs:
        params[key] = _resolve_value(value)
    return params


@dataclass(frozen=True)
class Plan:
    """What ``execute`` will do, all checked: the batch folder and each stage's parameters."""

    folder: Path
    stages: tuple[str, ...]
    parameters: dict[str, dict[str, Any]]


def defaults(stage: str) -> ParamValues:
    """A stage notebook's parameters cell as values (what the notebook runs with unless told otherwise).

    Read from the notebook's JSON, as papermill finds the cell (its ``parameters`` tag): importing
    papermill and nbformat costs seconds, and a mistake in the parameters must be quick to hear about.
    """
    nb = orjson.loads((NOTEBOOKS / f"{stage}.ipynb").read_bytes())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return {
        target.id: ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _stages(stages: Sequence[str]) -> tuple[str, ...]:
    unknown = [stage for stage in stages if stage not in STAGES]
    if unknown:
        problem = f"unknown stage {unknown[0]!r}{kit_params.did_you_mean(unknown[0], STAGES)}"
        raise ParamError("--stages", problem, STAGES)
    if not stages:
        raise ParamError("--stages", "empty", f"a comma-separated subset of {','.join(STAGES)}")
    return tuple(stages)


def _check_names(params: dict[str, Any]) -> None:
    """Refuse a name no stage declares (a typo would otherwise run the default silently)."""
    known = sorted({p.name for stage in STAGES for p in kit_params.NOTEBOOKS[stage]})
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ParamError(unknown[0], f"unknown parameter{kit_params.did_you_mean(unknown[0], known)}", known)


def _kernel_path(path: Path) -> str:
    """``path`` as the notebooks' kernel (cwd = the repository) should see it.

    Inside the repository it stays relative, so batch folders (and committed examples) record no
    machine-specific absolute paths; elsewhere it is absolute, resolved from the caller's directory.
    """
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(full)


@dataclass(frozen=True)
class _Given:
    """The parameters the pipeline reads itself, before any stage has checked them, as given: their values
    are unchecked (``_locate`` checks the folder's in the order its messages promise, the stages the rest)."""

    batch_dir: Any = None
    batch: Any = None
    outputs_dir: Any = None
    task: Any = "batch"  # only the start of a new batch id: the run stage checks the task itself
    baseline: Any = None
    comparisons: Any = None
    batch_dirs: Any = None

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> _Given:
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})


@dataclass(frozen=True)
class _Where:
    """The one folder every stage works on, as the notebooks are told it: ``outputs_dir`` and ``batch``."""

    outputs_dir: str
    batch: str

    @property
    def folder(self) -> Path:
        return from_root(self.outputs_dir) / self.batch


def _locate(given: _Given, stages: tuple[str, ...]) -> _Where:
    """The batch folder, from ``batch_dir`` or ``outputs_dir`` and ``batch``.

    ``batch_dir`` names the folder itself; without it and without the run stage, the latest batch is
    the one (as the notebooks do); with the run stage and no name, a new id.
    """
    batch, outputs_dir = given.batch, given.outputs_dir
    if given.batch_dir:
        folder = Path(_kernel_path(Path(given.batch_dir)))
        if batch not in (None, folder.name):
            raise ParamError("batch", f"{batch!r} differs from batch_dir's folder {folder.name!r}", "one of the two")
        outputs_dir, batch = str(folder.parent), folder.name
    outputs_dir = _kernel_path(Path(outputs_dir or "outputs"))
    if not batch and "run" in stages:
        if not is_name(given.task):  # the new id starts with it
            raise ParamError("task", f"got {given.task!r}", f"a task pack name ({NAME_RULE})")
        batch = new_batch_id(given.task)
    elif not batch:
        batch = latest_batch(from_root(outputs_dir)).name
    if not isinstance(batch, str):  # -p batch 123 arrives as a number, as papermill's -p reads it
        raise ParamError("batch", f"wrong type {type(batch).__name__} ({batch!r}): a name, not a number", NAME_RULE)
    if not is_name(batch):
        raise ParamError("batch", f"{batch!r} is not a folder name", NAME_RULE)
    return _Where(outputs_dir, batch)


def _check_run(params: dict[str, Any], folder: Path) -> list[str]:
    """The run stage's checks (``run.configure``), a resume against the batch's design, and the API key
    a real endpoint needs; returns the arms."""
    from kit.stages import run

    cfg = run.configure({**defaults("run"), **_declared("run", params)})
    if BatchDir(folder).is_batch():
        run.check_resume(cfg.params, BatchDir(folder).read_manifest(), cfg.arms)
    env = BACKENDS[cfg.params.backend].key_env
    keyed = login.mode(cfg.params.backend_options) == login.API_KEY  # auth: login needs no key
    if cfg.params.endpoint == "real" and keyed and not os.environ.get(env):
        raise ParamError("endpoint", f"'real' needs {env} in the environment", "embedded, or real with the key set")
    return cfg.params.arms


def _declared(stage: str, params: dict[str, Any]) -> dict[str, Any]:
    names = {p.name for p in kit_params.NOTEBOOKS[stage]}
    return {k: v for k, v in params.items() if k in names}


def plan(params: dict[str, Any], stages: Sequence[str] = STAGES) -> Plan:
    """Check every stage's parameters and the batch folder; write nothing. Raises ``ParamError``."""
    params, stages = dict(params), _stages(stages)
    _check_names(params)
    given = _Given.of(params)
    named = "batch_dir" if given.batch_dir else "batch"  # the parameter a wrong folder is blamed on
    where = _locate(given, stages)
    if given.batch_dir:  # the stages are told the folder as outputs_dir and batch
        params.pop("batch_dir")
    params.update(outputs_dir=where.outputs_dir, batch=where.batch)
    folder = where.folder
    if "run" in stages:
        arms = _check_run(params, folder)
    else:
        arms = BatchDir(require_batch(folder, named)).read_manifest().params.arms
    for stage in stages:
        if stage != "run":
            kit_params.validate({**defaults(stage), **_declared(stage, params)}, kit_params.NOTEBOOKS[stage])
    if "analyze" in stages:
        for path in given.batch_dirs or []:  # every batch's arms: the analysis keeps each (kit.stages.analyze)
            more = BatchDir(require_batch(from_root(path), "batch_dirs")).read_manifest().params.arms
            arms = [*arms, *(a for a in more if a not in arms)]
        kit_params.check_baseline(given.baseline, arms)
        kit_params.check_comparisons(given.comparisons, given.baseline, arms)
    return Plan(folder, stages, {stage: _declared(stage, params) for stage in stages})


def execute(params: dict, stages: Sequence[str] = STAGES, progress: bool = True, timeout_s: int | None = None) -> Path:
    """Run the stages in order; return the batch folder. Raises ``ParamError`` (nothing written) for a
    mistake in the parameters, ``StageFailed`` at the first stage that fails."""
    checked = plan(params, stages)
    with batch_lock(checked.folder):  # one writer: a second run of this batch is refused here (kit.experiment.lock)
        for stage in tqdm(checked.stages, desc=f"batch {checked.folder.name}", unit="notebook", disable=not progress):
            try:
                run_stage(stage, checked.folder, checked.parameters[stage], timeout_s)
            except StageFailed:
                if stage != "plot" and "plot" in checked.stages:
                    _report_nothing_to_compare(checked.folder)
                raise
            if stage == "run":
                _say_failures(checked.folder)
    return checked.folder


def _report_nothing_to_compare(folder: Path) -> None:
    """A stage that stopped on a batch with nothing to compare (no trial succeeded, or none of one arm) still leaves
    the report the plot stage would have written, saying so (``kit.stages.plot.failure_report``)."""
    from kit.stages import plot

    try:
        path = plot.failure_report(folder)
    except (KitError, OSError) as exc:  # the stage's own error stays the one raised
        tqdm.write(f"note: no report written for the stopped batch: {exc}")
        return
    if path is not None:
        tqdm.write(f"report: {shown(path)}")


def _say_failures(folder: Path) -> None:
    """The run stage's failed trials, as it ends: before a later stage's error can stand in for their reason."""
    from kit.stages import run

    summary = run.failure_summary(folder)
    if summary:
        tqdm.write(summary)


def run_stage(stage: str, folder: Path, parameters: dict[str, Any], timeout_s: int | None = None) -> Path:
    """Execute one notebook into ``folder``; on success it becomes ``<stage>.ipynb``, on failure
    ``<stage>.failed.ipynb`` (both exported to HTML), leaving an earlier ``<stage>.ipynb`` untouched.
    A Ctrl-C interrupts the kernel's cell (the run stage then ends its trials' CLIs) and, once the notebook is
    saved, raises ``KeyboardInterrupt``; a second one kills the kernel."""
    import papermill  # here, not at the top: it takes seconds to import, and a refused batch needs none of it

    from kit.report.notebook_html import export_html

    running, out = folder / f"{stage}.running.ipynb", folder / f"{stage}.ipynb"
    error, interrupted = _interruptible(
        lambda: papermill.execute_notebook(
            str(NOTEBOOKS / f"{stage}.ipynb"),
            str(running),
            parameters=parameters,
            cwd=str(ROOT),
            progress_bar=False,
            execution_timeout=timeout_s,
            kernel_name="python3",
            kernel_manager_class=IPCKernelManager,
        )
    )
    if error is None:
        try:
            _move(running, out)
            export_html(out)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            error = exc
    if error is not None:
        failed = folder / f"{stage}.failed.ipynb"
        if running.exists() and _disk_full(error):  # no room to rewrite it: kept as papermill saved it
            os.replace(running, failed)
        if stage == "run" and _disk_full(error):  # the kernel may have died before it could say so
            from kit.stages import run

            run.mark_failed(BatchDir(folder))
        elif running.exists():
            _move(running, failed)
            _record_failure(failed, error)
            export_html(failed)
        if interrupted:
            raise KeyboardInterrupt
        raise StageFailed(stage, failed, error) from error
    if interrupted:
        raise KeyboardInterrupt
    return out


def _interruptible(work: Any) -> tuple[Exception | None, bool]:
    """Run ``work`` (papermill) in a thread, so that a Ctrl-C reaches this one: papermill's own handler would
    shut the kernel down mid-cell, leaving the run stage no chance to end its CLIs. The first Ctrl-C is passed
    on to the kernels as SIGINT (a ``KeyboardInterrupt`` in the running cell), a later one kills them. Returns
    what ``work`` raised and whether an interrupt came."""
    raised: list[Exception] = []

    def target() -> None:
        try:
            work()
        except Exception as exc:  # handed to the caller
            raised.append(exc)

    thread = threading.Thread(target=target, name="kit-stage", daemon=True)
    thread.start()
    interrupts, kernels = 0, set()
    while thread.is_alive():
        try:
            thread.join(0.2)
        except KeyboardInterrupt:
            interrupts += 1
            kernels |= IPCKernelManager.running
            for pid in kernels:
                _signal_group(pid, signal.SIGINT if interrupts == 1 else signal.SIGKILL)
    end = time.monotonic() + KERNEL_EXIT_S
    while kernels and time.monotonic() < end:  # the command ends after its kernels, which would say they lost it
        kernels = {pid for pid in kernels if _alive(pid)}
        time.sleep(0.05)
    for pid in kernels:
        _signal_group(pid, signal.SIGKILL)
    return (raised[0] if raised else None), interrupts > 0


KERNEL_EXIT_S = 10.0


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet waited for, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _move(running: Path, dest: Path) -> None:
    """Put an executed notebook at ``dest``, its papermill ``output_path`` naming where it now is."""
    import nbformat

    nb = nbformat.read(running, as_version=4)
    record = nb.metadata.setdefault("papermill", {})
    record["output_path"] = shown(dest)  # repository-relative: a committed notebook names no machine's folders
    record["input_path"] = shown(Path(record["input_path"]))
    atomic_write(dest, lambda tmp: nbformat.write(nb, tmp))
    running.unlink()


def _record_failure(notebook: Path, exc: Exception) -> None:
    """Make sure the saved ``notebook`` shows ``exc``: unless a cell already holds an error, the error goes
    into the last cell that started (the one that was running) and the notebook is marked as failed."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    if not cells or any(o.get("output_type") == "error" for c in cells for o in c.get("outputs", [])):
        return
    started = [c for c in cells if c.metadata.get("papermill", {}).get("start_time")]
    cell = started[-1] if started else cells[0]
    name, message = type(exc).__name__, redact_text(str(exc))
    cell.outputs.append(nbformat.v4.new_output("error", ename=name, evalue=message, traceback=[f"{name}: {message}"]))
    cell.metadata.setdefault("papermill", {}).update(exception=True, status="failed")
    nb.metadata.setdefault("papermill", {})["exception"] = True
    atomic_write(notebook, lambda tmp: nbformat.write(nb, tmp))
