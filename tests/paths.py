"""Where the tests' data is: ``tests/fixtures/``, inside the repository.

A fresh clone has nothing beside it, so every file a test reads is committed here with its source and
license (``tests/fixtures/SOURCES.md``); nothing points outside the repository.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
