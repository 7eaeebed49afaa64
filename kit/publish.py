"""The plot stage: a batch's tables and analysis into figures and the report to attach.

Reads only files (``tables/``, ``analysis/``), so it re-runs alone on any committed batch folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import orjson
import pandas as pd

from kit import plots, report
from kit.layout import BatchDir

matplotlib.use("Agg")

FIGURES = ("warmth_vs_ratio", "ratio_forest", "arm_distributions", "cycle_growth", "occupancy_bars", "quality_parity")


def _read(bd: BatchDir) -> dict[str, Any]:
    a = bd.analysis
    if not (a / "design.json").exists():
        raise FileNotFoundError(f"{a / 'design.json'}: missing; run the analyze stage on {bd.root} first")
    design = orjson.loads((a / "design.json").read_bytes())
    warnings = design.pop("warnings", [])
    occupancy = a / "occupancy.csv"
    return {
        "design": design,
        "warnings": warnings,
        "trials": pd.read_csv(a / "trials.csv"),
        "ratios": pd.read_csv(a / "ratios.csv", keep_default_na=False, na_values=[""]),
        "headline": pd.read_csv(a / "headline.csv"),
        "warmth": pd.read_csv(a / "warmth.csv"),
        "observed": pd.read_csv(a / "observed.csv"),
        "occupancy": pd.read_csv(occupancy) if occupancy.exists() else pd.DataFrame(),
        "requests": pd.read_parquet(bd.tables / "requests.parquet"),
    }


def publish(batch_dir: Path) -> dict[str, Any]:
    """Draw every figure (PNG + SVG) and write ``report.md``/``report.html``."""
    bd = BatchDir(Path(batch_dir).resolve())
    d = _read(bd)
    design = d["design"]
    drawn = {
        "warmth_vs_ratio": plots.warmth_vs_ratio(d["warmth"], d["observed"], design),
        "ratio_forest": plots.ratio_forest(d["ratios"], design),
        "arm_distributions": plots.arm_distributions(d["trials"], design),
        "cycle_growth": plots.cycle_growth(d["requests"], design),
        "occupancy_bars": plots.occupancy_bars(d["occupancy"], design),
        "quality_parity": plots.quality_parity(d["trials"], design),
    }
    figures = {}
    for name, fig in drawn.items():
        png, _svg = plots.save(fig, bd.figures, name)
        figures[name] = png
        matplotlib.pyplot.close(fig)
    path = report.write_report(
        bd.root,
        design=design,
        headline=d["headline"],
        ratios=d["ratios"],
        trials=d["trials"],
        figures=figures,
        warnings=d["warnings"],
    )
    return {"report": path, "figures": figures, "headline": report.headline_text(d["headline"], d["ratios"], design)}


def show(published: dict[str, Any]) -> None:
    """Display the headline and every figure inline (for the executed notebook and its HTML)."""
    from IPython.display import Image, Markdown, display

    display(Markdown(published["headline"].replace("\n", "\n\n")))
    for png in published["figures"].values():
        display(Image(filename=str(png)))


def headline_for(batch_dir: Path) -> str:
    """The headline text and table of an analysed batch (what ``python -m kit batch`` prints)."""
    bd = BatchDir(Path(batch_dir))
    d = _read(bd)
    return report.headline_text(d["headline"], d["ratios"], d["design"]) + "\n\n" + d["headline"].to_string(index=False)
