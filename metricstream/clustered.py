"""Moved to :mod:`metricstream.bootstrap.accumulator`; the old name still imports it."""

import sys

from .bootstrap import accumulator as _moved

sys.modules[__name__] = _moved
