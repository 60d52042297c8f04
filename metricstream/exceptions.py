"""Warnings raised by metricstream."""

from __future__ import annotations


class UndefinedMetricWarning(UserWarning):
    """A metric was 0/0 for some class and was replaced by the ``zero_division`` value.

    Raised only when ``zero_division="warn"`` (the default, which then uses 0.0, as
    scikit-learn's ``UndefinedMetricWarning``).
    """
