"""Warnings raised by metricstream."""

from __future__ import annotations

import sys


class UndefinedMetricWarning(UserWarning):
    """A metric was 0/0 for some class and was replaced by the ``zero_division`` value.

    Raised only when ``zero_division="warn"`` (the default, which then uses 0.0, as
    scikit-learn's ``UndefinedMetricWarning``), and for values that have no ``zero_division``
    (an interval of no samples, say), which are then NaN.
    """

    def __init__(self, *args: object) -> None:
        # Counted, so that a view cache does not keep a value whose warning would then be lost
        # (warnings.warn makes an instance before any filter is applied).
        _issued[0] += 1
        super().__init__(*args)


_issued = [0]


def undefined_warnings_issued() -> int:
    """How many :class:`UndefinedMetricWarning` have been made in this process so far."""
    return _issued[0]


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the first caller outside metricstream.

    Warnings are issued deep inside the package (a metric function called by an accumulator
    method, say); this walks up the stack so that the user sees the line of their own code that
    asked for the metric, however many layers lie in between.
    """
    package = __name__.rsplit(".", 1)[0]
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == package:
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    # ``level`` counts from the frame that called this function; warnings.warn counts from its
    # own caller, which is that same frame.
    return level
