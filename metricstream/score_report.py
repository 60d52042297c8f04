"""Moved to :mod:`metricstream.report.scores`; the old name still imports it."""

import sys

from .report import scores as _moved

sys.modules[__name__] = _moved
