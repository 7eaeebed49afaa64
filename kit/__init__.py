"""agent-ab-kit: honest token-cost A/B experiments on LLM agents (docs/design.md; the method: docs/method.md).

The public surface (docs/design.md, "Public surface", has each call's signature):

- ``kit.stages``: one module per notebook — ``run``, ``parse``, ``analyze``, ``plot``, ``explore``,
  ``history`` — each listing its functions in ``__all__``; ``kit.params`` checks a notebook's parameters.
- ``python -m kit``: ``batch``, ``provider serve|proxy``, ``parse``, ``ping``, ``snapshot``, ``history``,
  ``occupancy`` (``python -m kit --help``).
- ``kit.provider``: the embedded provider (``serve``, ``start``) and the recording proxy (``proxy``), with
  the scripted-policy interface task packs implement (``Policy``, ``Conversation``, ``Reply``).
- ``kit.transcripts``: ``read``, ``tool_results``, ``tables`` — any Claude Code or Codex transcript into
  canonical rows, with an optional incremental parse cache.
- ``kit.stats``: ``ratio``, ``ratios``, ``mean_interval``, ``plan``, ``warmth_invariance`` — the intervals
  and tests the reports quote, as frozen records (``Comparison``, ``Interval``, ``Savings``,
  ``WarmthInvariance``); ``kit.occupancy.measure`` for residual context occupancy.
- ``kit.records``: what the stages hand each other, as frozen records with every field described —
  ``Design`` (``analysis/design.json``), ``Manifest`` (``manifest.json``), ``TrialMeta`` (a trial's
  ``meta.json``), ``Analysis`` (``analyze.analyze_batches``) and ``Published`` (``plot.publish``).
- ``kit.tokens.encoding``: tiktoken encodings that work offline; ``kit.tasks``: the task packs.

Everything else is the kit's own plumbing and may change without notice.
"""

__version__ = "0.1.0"
