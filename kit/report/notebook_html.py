"""nbconvert's HTML exporter, offline: the executed notebooks a batch exports load nothing from the web.

nbconvert's ``lab`` page loads require.js and MathJax from cdnjs; a report attached to a write-up
would then contact a third host whenever it is opened. The ``offline`` template (kit/data/nbconvert)
drops those scripts; the notebooks use neither widgets nor LaTeX, so nothing they show is lost.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import markupsafe
import nbformat
from nbconvert import HTMLExporter

from kit.experiment.redact import redact_text
from kit.files import write_text

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "nbconvert"
OFFLINE = {"template_name": "offline", "extra_template_basedirs": [str(TEMPLATES)]}


def exporter(**kw: Any) -> HTMLExporter:
    """An ``HTMLExporter`` on the offline template (keyword arguments as for ``HTMLExporter``)."""
    return HTMLExporter(**OFFLINE, **kw)


def export_html(notebook: Path, css_dir: Path | None = None) -> Path:
    """The executed notebook as HTML beside it, secrets redacted: self-contained (images and stylesheet
    inline, for a write-up), or linking the one stylesheet in ``css_dir`` (the committed examples)."""
    nb = nbformat.read(notebook, as_version=4)
    converter = exporter(embed_images=True) if css_dir is None else _SharedCssExporter(css_dir, notebook.parent)
    html, _ = converter.from_notebook_node(nb)
    return write_text(notebook.with_suffix(".html"), redact_text(html))


class _SharedCssExporter(HTMLExporter):
    """nbconvert's HTML with its stylesheets written once into ``css_dir`` and linked, not inlined."""

    def __init__(self, css_dir: Path, html_dir: Path, **kw) -> None:
        super().__init__(embed_images=True, **OFFLINE, **kw)
        self.css_dir, self.html_dir = css_dir, html_dir

    def _init_resources(self, resources):
        resources = super()._init_resources(resources)

        def link_css(name: str) -> markupsafe.Markup:
            target = self.css_dir / Path(name).name
            text = self.environment.loader.get_source(self.environment, name)[0]
            if not target.is_file() or target.read_text() != text:
                write_text(target, text)
            href = Path(os.path.relpath(target, self.html_dir)).as_posix()
            return markupsafe.Markup(f'<link rel="stylesheet" href="{markupsafe.escape(href)}">')

        resources["include_css"] = link_css
        return resources
