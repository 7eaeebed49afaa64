"""kit.charts chooses a matplotlib backend only when a figure is made and none was chosen (issue 28).

Each case runs in a fresh interpreter: a backend, once chosen, stays for the process, so the test process's own
matplotlib state (other tests draw figures) would hide an import that switches it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import ROOT

IMPORTS = "import matplotlib, kit.charts, kit.stages.plot, kit.stages.explore, kit.stages.history"


def _backend_after(code: str, mplbackend: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    if mplbackend is not None:
        env["MPLBACKEND"] = mplbackend
    script = f"{IMPORTS}\n{code}\nprint(matplotlib.get_backend(auto_select=False))"
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_importing_the_charts_and_the_stages_chooses_no_backend():
    assert _backend_after("", None) == "None"


def test_the_first_figure_of_a_process_without_a_backend_is_drawn_headless():
    assert _backend_after("kit.charts.figure((2, 2))", None) == "Agg"


@pytest.mark.parametrize("chosen", ["module://matplotlib_inline.backend_inline", "svg"])
def test_a_backend_the_user_chose_survives_the_kits_figures(chosen: str):
    lines = [
        "import pandas as pd",
        "from tests.report_tables import DESIGN",
        "kit.charts.occupancy_bars(pd.DataFrame(), DESIGN)",
    ]
    code = "\n".join(lines)
    assert _backend_after(code, chosen) == chosen
