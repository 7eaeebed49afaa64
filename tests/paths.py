"""Where the shared folder (seeds, notes, fixtures) is: beside the repository, as on every machine and CI.

``KIT_SHARED_DIR`` overrides it for an unusual checkout.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KIT_SHARED_DIR") or ROOT.parent / "shared")
FIXTURES = SHARED / "fixtures"
