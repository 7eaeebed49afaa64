"""kit.stats: the module moves into a package (kit/stats/compare.py first, then cut into floors)."""

from kit.stats.compare import *  # noqa: F403  (the split that follows lists the surface in __all__)
