"""The root of the kit's own errors.

A ``KitError`` is a mistake the kit can name: a bad parameter, an unreadable transcript, a refused
resume, a stage that failed. Commands print it as one ``error: …`` line and exit 1; anything else is a
bug, and keeps its traceback. Each kind keeps the built-in base callers already catch (``ValueError`` for
bad input, ``RuntimeError`` for a run that could not finish).
"""

from __future__ import annotations


class KitError(Exception):
    """An error the kit raises on purpose, with a message that says where and what was expected."""


class InputError(KitError, ValueError):
    """Bad input or a bad parameter value, said where it is and what was expected."""


class NoTrialSucceeded(KitError, RuntimeError):
    """Every trial of the batch, or of one arm, failed: nothing after the run stage could compare it. The run
    stage raises it as it ends, and the plot stage after writing the report that says so."""
