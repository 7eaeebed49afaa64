"""Your own history (issue #17): the reading, views, structural cache, comparison and report of the sessions
already on a user's disk, which the history stage (``kit.stages.history``) puts together (docs/design.md, "Layout").

``result`` holds the records and constants; ``load`` reads through ``kit.transcripts``; ``views``, ``structural``
and ``compare`` analyse; ``report`` writes the folder. These import ``kit.analysis``, ``kit.stats``,
``kit.transcripts``, ``kit.charts``, ``kit.report`` and below, never ``kit.stages`` or ``kit.cli``.
"""
