"""What every figure of the kit shares: colours, labels, the design subtitle and simulation caption, the
axis formats, the one place a figure is made (and the backend chosen) and the one place it is written.

Why one module: a figure travels alone, so each carries the same context in the same style; an arm has
the same colour in every figure and batch; and the choice of a matplotlib backend happens once, when a
figure is first made (:func:`figure`), never on import, so importing the kit leaves a notebook's or a
program's chosen backend alone.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from kit.errors import InputError
from kit.files import atomic_write
from kit.records import Design

SIMULATION_CAPTION = "SIMULATION (embedded provider) — not a real model's cost"
# Colour-blind-safe qualitative palette without its grey, which is kept for reference lines.
ARM_PALETTE = [c for c in sns.color_palette("colorblind").as_hex() if c != "#949494"]
CATEGORY_PALETTE = sns.color_palette("Set2").as_hex()
REFERENCE_COLOR = "#555555"
METRIC_LABELS = {
    "total_tokens": "total tokens",
    "uncached_input_tokens": "uncached tokens",
    "structural_uncached": "structural uncached (modelled)",
    "cycles": "cycles",
    "output_tokens": "output tokens",
    "cost_usd": "cost (USD)",
    "credits": "credits",
    "grade": "grade",
}


def figure(figsize: tuple[float, float]) -> Figure:
    """A new figure of ``figsize`` inches; the first one in a process that chose no backend selects Agg.

    Why here and not on import: importing kit.charts must not switch the backend of a notebook or a
    program that chose one (``%matplotlib widget``, ``MPLBACKEND``, an earlier ``matplotlib.use``). A
    process that chose none (the CLI, a batch subprocess, a test) draws headless, so no pyplot call there
    can open a window. The figure is a bare ``Figure``, not pyplot's: no global state and nothing to close,
    and Jupyter's inline formatter still renders a returned Figure.
    """
    if matplotlib.get_backend(auto_select=False) is None:
        matplotlib.use("Agg")
    return Figure(figsize=figsize)


def hash_colors(names: Iterable[str], palette: list[str]) -> dict[str, str]:
    """Name -> colour from a stable hash (not Python's salted ``hash``), probing on a collision.

    Probing runs over the sorted names, so a given set of names always gets the same colours; a name
    keeps its hashed colour in every figure and batch unless another name in the same set hashed to it.
    """
    colors: dict[str, str] = {}
    for name in sorted({str(n) for n in names}):
        index = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(palette)
        taken = set(colors.values())
        for step in range(len(palette)):
            candidate = palette[(index + step) % len(palette)]
            if candidate not in taken:
                break
        colors[name] = candidate
    return colors


def arm_colors(arms: Iterable[str]) -> dict[str, str]:
    """Fixed colour per arm name, the same in every figure and every batch (hex strings)."""
    return hash_colors(arms, ARM_PALETTE)


def figure_arms(design: Design, *frames_columns: Iterable) -> list[str]:
    """Every arm a figure may colour: the design's arms plus those in the data, so colours agree."""
    arms = set(design.arms)
    for values in frames_columns:
        arms.update(str(v) for v in values if pd.notna(v))
    return sorted(arms)


def _batches_text(design: Design, data_batches: Iterable | None = None) -> str:
    batch: str | list[str] = design.batch
    if not batch and data_batches is not None:
        batch = sorted({str(b) for b in data_batches if pd.notna(b)})
    if isinstance(batch, list):
        return f"batches {', '.join(batch)}" if len(batch) != 1 else f"batch {batch[0]}"
    return f"batch {batch}" if batch else "batch (not given)"


def _n_text(n: dict[str, int] | int | None) -> str:
    if n is None:
        return "n per arm not given"
    if isinstance(n, dict):
        values = set(n.values())
        if len(values) == 1:
            return f"n = {values.pop()} per arm"
        return "n = " + ", ".join(f"{v} ({a})" for a, v in n.items())
    return f"n = {n} per arm"


def design_line(design: Design, n: dict[str, int] | int | None = None, data_batches: Iterable | None = None) -> str:
    """One line of design facts: batch id(s), schedule, isolation, n per arm (data's n wins over design's)."""
    schedule = design.schedule or "not given"
    isolation = design.isolation or "not given"
    n = n if n is not None else design.runs_per_arm
    return f"{_batches_text(design, data_batches)} · schedule {schedule} · isolation {isolation} · {_n_text(n)}"


def finish(fig: Figure, title: str, design: Design, n=None, data_batches=None, notes: Iterable[str] = ()) -> Figure:
    """Title, design subtitle, notes and the simulation caption, laid out around the axes: every figure's last step."""
    subtitle = textwrap.fill(design_line(design, n, data_batches), 120)
    footer = [textwrap.fill(note, 140) for note in notes if note]
    sim = design.simulated
    top = 1 - (0.55 + 0.28 * subtitle.count("\n")) / fig.get_figheight()
    bottom_lines = sum(f.count("\n") + 1 for f in footer) + (1 if sim else 0)
    bottom = min(0.3, (0.12 + 0.2 * bottom_lines) / fig.get_figheight())
    fig.tight_layout(rect=(0, bottom, 1, top))
    fig.suptitle(title, y=1 - 0.12 / fig.get_figheight(), va="top", fontsize=12, fontweight="bold")
    fig.text(0.5, 1 - 0.4 / fig.get_figheight(), subtitle, ha="center", va="top", fontsize=8.5, color="#333333")
    y = 0.06 / fig.get_figheight()
    if sim:
        fig.text(0.5, y, SIMULATION_CAPTION, ha="center", va="bottom", fontsize=9, color="#b00020", fontweight="bold")
        y += 0.2 / fig.get_figheight()
    for note in reversed(footer):
        fig.text(0.5, y, note, ha="center", va="bottom", fontsize=7.5, color="#444444")
        y += 0.2 * (note.count("\n") + 1) / fig.get_figheight()
    return fig


def empty_axes(ax: Axes, message: str) -> None:
    """An axis that says why it holds nothing (``message``) instead of drawing empty ticks."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def thousands(ax: Axes, axis: str = "y") -> None:
    """Token axes in plain thousands (y) or compact k/M (x, where labels sit side by side)."""
    if axis == "y":
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        return
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.xaxis.set_major_formatter(
        FuncFormatter(
            lambda v, _pos: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if abs(v) >= 1e3 else f"{v:g}"
        )
    )


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """A table missing a column the figure draws is a located one-line error, not a KeyError deep in pandas."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing columns {missing} (docs/tables.md); got {list(df.columns)}")


def truthy(value: object) -> bool:
    """A boolean cell as a CSV gives it back: True, "True", 1 or "1.0" are true; NaN, None, empty and False are not."""
    return str(value).strip().lower() in ("true", "1", "1.0")


def data_n(df: pd.DataFrame) -> dict[str, int]:
    """Rows per arm of what a figure draws: its n, which wins over the design's runs per arm."""
    return {str(arm): len(g) for arm, g in df.groupby("arm", sort=True)}


def save(fig: Figure, folder: str | Path, name: str) -> tuple[Path, Path]:
    """Write ``name.png`` (dpi 120) and ``name.svg`` into ``folder``; returns (png, svg).

    SVG metadata and ids are pinned so re-running the plot stage on a snapshot gives identical files.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    atomic_write(png, lambda tmp: fig.savefig(tmp, dpi=120, format="png", metadata={"Software": None}))
    with matplotlib.rc_context({"svg.hashsalt": "agent-ab-kit"}):
        atomic_write(svg, lambda tmp: fig.savefig(tmp, format="svg", metadata={"Date": None}))
    return png, svg
