"""Moved to :mod:`metricstream.confusion.accumulator`; the old name still imports it."""

import sys

from .confusion import accumulator as _moved

sys.modules[__name__] = _moved
