"""Your own history: the kit's analysis of the sessions already on your disk (issue #17).

Moved to ``kit.history`` (``kit/history/load.py`` for now, cut into its modules next); this stage re-exports it.
"""

from kit.history.load import *  # noqa: F403
from kit.history.load import __all__  # noqa: F401
