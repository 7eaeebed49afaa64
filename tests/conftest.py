"""The tests' one conftest: the repository root on ``sys.path``, so that ``from tests.support import …`` works
however pytest is started (``python -m pytest`` adds the working folder; a bare ``pytest`` does not).

The tests are laid out like the package: ``provider/``, ``transcripts/``, ``stages/``, ``tasks/``, ``agents/``,
the analysis modules at the top, and ``e2e/`` for what drives real external programs (the CLIs, Chromium, the
README's commands). What they share is in ``tests/support.py``.

Ctrl-C is part of what the tests check (``kit batch`` and ``kit provider serve`` stop cleanly on SIGINT), and a
shell starts a background job (``make test &``, a CI step run in the background) with SIGINT ignored, which every
child inherits through ``exec``: ``kit batch`` then never sees the Ctrl-C a test sends it. So the tests' own
process takes Python's default handler back, and the children they start get SIGINT as a terminal sends it.
"""

import signal
import sys
from pathlib import Path

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
