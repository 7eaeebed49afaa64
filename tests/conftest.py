"""The tests' one conftest: the repository root on ``sys.path``, so that ``from tests.support import …`` works
however pytest is started (``python -m pytest`` adds the working folder; a bare ``pytest`` does not).

The tests are laid out like the package: ``provider/``, ``transcripts/``, ``stages/``, ``tasks/``, ``agents/``,
the analysis modules at the top, and ``e2e/`` for what drives real external programs (the CLIs, Chromium, the
README's commands). What they share is in ``tests/support.py``.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
