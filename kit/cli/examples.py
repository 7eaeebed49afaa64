"""Make pipeline-written batch folders lean committed examples (``make examples``, its last step).

Why: four example batches are committed and must stay under 5 MB together. The executed plot notebook links
its ``figures/*.png`` instead of embedding a second copy, its HTML export links one shared copy of
nbconvert's stylesheet, the PNGs are re-encoded with a 256-colour palette (a third of the size; no pixel
moves by more than a few levels of antialiasing), and the SVG twins of the PNGs and the HTML exports of the
other three notebooks (their ``.ipynb`` stay) are dropped. Raw records, tables, analysis, executed notebooks
and the report stay as the pipeline wrote them.
"""

from __future__ import annotations

import base64
import shutil
import sys
from pathlib import Path

import nbformat
from PIL import Image

from kit.experiment.layout import STAGES, BatchDir
from kit.files import atomic_write
from kit.report import notebook_html

HTML_KEPT = ("plot",)  # the one notebook export an example keeps: it shows the figures
LEAN_MARK = "image outputs link figures/*.png (the same images, then palette-encoded) instead of embedding them"


def _link_figures(notebook: Path) -> int:
    """Replace embedded PNG outputs that are byte-identical to a ``figures/*.png`` beside the notebook
    by an ``<img>`` linking that file; returns how many were replaced. Other images stay embedded."""
    figures = {p.read_bytes(): p for p in sorted(BatchDir(notebook.parent).figures.glob("*.png"))}
    nb = nbformat.read(notebook, as_version=4)
    replaced = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            png = figures.get(base64.b64decode(data["image/png"])) if "image/png" in data else None
            if png is None:
                continue
            rel = png.relative_to(notebook.parent).as_posix()
            out["data"] = {"text/html": f'<img src="{rel}" alt="{png.stem}">', "text/plain": f"[figure {rel}]"}
            replaced += 1
    if replaced:
        nb.metadata.setdefault("kit", {})["lean_snapshot"] = LEAN_MARK
        atomic_write(notebook, lambda tmp: nbformat.write(nb, tmp))
    return replaced


def _palette_png(png: Path) -> bool:
    """Re-encode an opaque RGB(A) PNG with a 256-colour palette, in place; False if left alone.

    Figures are flat colours plus antialiased edges, so a median-cut palette without dithering keeps
    them visually identical at about a third of the bytes. Transparent or already paletted images stay.
    """
    with Image.open(png) as im:
        im.load()
    if im.mode not in ("RGB", "RGBA"):
        return False
    extrema = im.getextrema()  # (min, max) per band; RGBA has four
    if im.mode == "RGBA" and len(extrema) == 4 and extrema[3][0] < 255:  # not opaque everywhere
        return False
    quantized = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    atomic_write(png, lambda tmp: quantized.save(tmp, format="PNG", optimize=True))
    return True


def _lean_example(batch_dir: Path, css_dir: Path) -> list[str]:
    """Make a pipeline-written batch folder a lean committed example; returns what was removed.

    Removed: SVG twins of the PNG figures (the plot stage redraws both), the HTML exports of the notebooks
    not in ``HTML_KEPT`` (``jupyter nbconvert --to html`` remakes them from the kept ``.ipynb``) and any
    per-trial CLI home (``.homes``: CLI state, never a record). Rewritten: the kept notebooks link their
    figures, the PNGs take a palette (:func:`_palette_png`), and the kept HTML links ``css_dir``'s one copy
    of nbconvert's stylesheet.
    """
    batch_dir = Path(batch_dir)
    dropped_html = [batch_dir / f"{stage}.html" for stage in STAGES if stage not in HTML_KEPT]
    removed = []
    for path in sorted([*batch_dir.glob("figures/*.svg"), *batch_dir.rglob(".homes"), *dropped_html]):
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(str(path.relative_to(batch_dir)))
    for stage in STAGES:  # link before re-encoding: outputs are matched to figures by their bytes
        if (batch_dir / f"{stage}.ipynb").is_file():
            _link_figures(batch_dir / f"{stage}.ipynb")
    for png in sorted(batch_dir.glob("figures/*.png")):
        _palette_png(png)
    for stage in HTML_KEPT:
        if (batch_dir / f"{stage}.ipynb").is_file():
            notebook_html.export_html(batch_dir / f"{stage}.ipynb", css_dir)
    return removed


def lean_examples(examples_dir: Path) -> dict[str, list[str]]:
    """:func:`_lean_example` on every batch folder under ``examples_dir``; the stylesheet in ``_static/``."""
    examples_dir = Path(examples_dir)
    folders = sorted(p for p in examples_dir.iterdir() if BatchDir(p).is_batch())
    return {p.name: _lean_example(p, examples_dir / "_static") for p in folders}


def main(argv: list[str] | None = None) -> int:
    """``python -m kit.cli.examples EXAMPLES_DIR`` (the last step of ``make examples``)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kit.cli.examples EXAMPLES_DIR", file=sys.stderr)
        return 2
    for name, removed in lean_examples(Path(argv[0])).items():
        print(f"lean {name}: removed {len(removed)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
