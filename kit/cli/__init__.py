"""The kit's command line, one module per command (docs/design.md, "The public surface").

``kit.cli.main`` reads which command and dispatches to its module's ``main(argv)``: ``batch``, ``provider``,
``parse``, ``ping``, ``occupancy``, ``history``, ``snapshot``. ``pipeline`` runs the stage notebooks (for
``batch`` and ``history``); ``columns`` writes docs/tables.md and ``examples`` makes the committed examples lean
(each ``python -m kit.cli.<name>``). Nothing below the command line imports this package.
"""
