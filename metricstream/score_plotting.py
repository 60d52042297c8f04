"""Moved to :mod:`metricstream.plotting.scores`; the old name still imports it."""

import sys

from .plotting import scores as _moved

sys.modules[__name__] = _moved
