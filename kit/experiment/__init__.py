"""The experiment: its design (arms, schedules, salts), the backends it runs on, the batch folder it writes
(``layout``) with its lock, and what the run records about itself (``provenance``, ``redact``).

Below the task packs and agents, above the ground floor (docs/design.md, "Layout").
"""
