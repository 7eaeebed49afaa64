"""The pipeline's stages, one module per notebook: ``run``, ``parse``, ``analyze``, ``plot``, plus ``explore``
(many analysed batches side by side) and ``history`` (a user's own sessions).

Why a package: the layout shows the design (docs/design.md). A notebook imports only its stage and
``kit.params``; everything a stage needs from the rest of the kit it imports itself, so a notebook stays a
parameters cell, calls and displays.
"""
