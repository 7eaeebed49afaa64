"""``python -m kit batch``: the four notebooks through papermill, in order, into the batch folder.

Each stage is executed into ``outputs/<batch>/<stage>.ipynb`` and exported to HTML beside it.
The first failure stops the pipeline; papermill has already saved the failing notebook with its
error, and we export that one to HTML too, so the failure is readable where the batch lives. When
the kernel itself died (killed, out of memory) or a cell timed out, papermill saves the notebook
without any error in it; the error is then written into the cell that was running, so the saved
notebook always says why the stage stopped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat
import papermill
import yaml
from tqdm import tqdm

from kit import htmlexport
from kit.design import ParamError
from kit.layout import atomic_write, write_text
from kit.redact import redact_text

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
STAGES = ("run", "parse", "analyze", "plot")


class StageFailed(RuntimeError):
    """A notebook failed; ``notebook`` is the executed copy holding the error."""

    def __init__(self, stage: str, notebook: Path, cause: Exception) -> None:
        super().__init__(f"stage {stage!r} failed; see {notebook} (and .html): {cause}")
        self.stage, self.notebook = stage, notebook


def resolve_value(text: str) -> Any:
    """papermill's ``-p`` typing: True/False/None, int, float, else the string."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def load_params(file: str | None, yaml_strings: Sequence[str] = (), pairs: Sequence[tuple[str, str]] = ()) -> dict:
    """Parameters with papermill's precedence: file < yaml strings < -p pairs."""
    params: dict[str, Any] = {}
    if file:
        params.update(yaml.safe_load(Path(file).read_text()) or {})
    for text in yaml_strings:
        params.update(yaml.safe_load(text) or {})
    for key, value in pairs:
        params[key] = resolve_value(value)
    return params


def new_batch_id(task: str) -> str:
    return f"{task}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"


def execute(params: dict, stages: Sequence[str] = STAGES, progress: bool = True, timeout_s: int | None = None) -> Path:
    """Run the stages in order; return the batch folder. Raises ``StageFailed`` at the first failure."""
    params = dict(params)
    params["outputs_dir"] = _kernel_path(Path(params.get("outputs_dir") or "outputs"))
    if not params.get("batch"):
        params["batch"] = new_batch_id(str(params.get("task", "batch")))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(params["batch"])):
        raise ValueError(f"parameter 'batch': {params['batch']!r} is not a folder name; accepted: letters, digits, -_.")
    declared = {stage: papermill.inspect_notebook(str(NOTEBOOKS / f"{stage}.ipynb")) for stage in STAGES}
    known = sorted({name for names in declared.values() for name in names})
    unknown = sorted(set(params) - set(known))
    if unknown:  # a typo would otherwise run the default silently: no notebook would receive it
        raise ParamError(unknown[0], "unknown parameter (no stage notebook declares it)", known)
    folder = ROOT / params["outputs_dir"] / params["batch"]  # an absolute outputs_dir stays as it is
    folder.mkdir(parents=True, exist_ok=True)
    for stage in tqdm(stages, desc=f"batch {params['batch']}", unit="notebook", disable=not progress):
        out = folder / f"{stage}.ipynb"
        source = str(NOTEBOOKS / f"{stage}.ipynb")
        try:
            papermill.execute_notebook(
                source,
                str(out),
                parameters={k: v for k, v in params.items() if k in declared[stage]},  # only what it declares
                cwd=str(ROOT),
                progress_bar=False,
                execution_timeout=timeout_s,
                kernel_name="python3",
            )
        except Exception as exc:
            if out.exists():
                record_failure(out, exc)
                export_html(out)
            raise StageFailed(stage, out, exc) from exc
        export_html(out)
    return folder


def _kernel_path(path: Path) -> str:
    """``path`` as the notebooks' kernel (cwd = the repository) should see it.

    Inside the repository it stays relative, so batch folders (and committed examples) record no
    machine-specific absolute paths; elsewhere it is absolute, resolved from the caller's directory.
    """
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(full)


def record_failure(notebook: Path, exc: Exception) -> None:
    """Make sure the saved ``notebook`` shows ``exc``: unless a cell already holds an error, the error goes
    into the last cell that started (the one that was running) and the notebook is marked as failed."""
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


def export_html(notebook: Path) -> Path:
    """The executed notebook as HTML for write-ups (images embedded; secrets redacted)."""
    nb = nbformat.read(notebook, as_version=4)
    html, _ = htmlexport.exporter(embed_images=True).from_notebook_node(nb)
    return write_text(notebook.with_suffix(".html"), redact_text(html))
