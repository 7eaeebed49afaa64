"""The analysis of a batch's tables: per-trial metrics, prices, the offline cache model, residual occupancy and
its printed block, the published-snapshot recount and each arm's settings as run (docs/design.md, "Layout").

These read tables from files and never import ``kit.agents`` or ``kit.transcripts`` (tests/test_docs.py).
"""
