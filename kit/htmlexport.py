"""nbconvert's HTML exporter, offline: the executed notebooks a batch exports load nothing from the web.

nbconvert's ``lab`` page loads require.js and MathJax from cdnjs; a report attached to a write-up
would then contact a third host whenever it is opened. The ``offline`` template (kit/data/nbconvert)
drops those scripts; the notebooks use neither widgets nor LaTeX, so nothing they show is lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbconvert import HTMLExporter

TEMPLATES = Path(__file__).parent / "data" / "nbconvert"
OFFLINE = {"template_name": "offline", "extra_template_basedirs": [str(TEMPLATES)]}


def exporter(**kw: Any) -> HTMLExporter:
    """An ``HTMLExporter`` on the offline template (keyword arguments as for ``HTMLExporter``)."""
    return HTMLExporter(**OFFLINE, **kw)
