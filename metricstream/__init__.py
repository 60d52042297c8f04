"""metricstream: exact, fast, streaming classification metrics from one confusion matrix.

>>> from metricstream import ConfusionAccumulator
>>> acc = ConfusionAccumulator(num_classes=3)
>>> acc.update([0, 1, 2], [0, 2, 2]).accuracy()
0.6666666666666666
"""

from importlib.metadata import PackageNotFoundError, version

from . import metrics
from .base import Accumulator, AccumulatorGroup
from .bootstrap.accumulator import BootstrapConfusionAccumulator
from .bootstrap.resampling import MetricInterval
from .confusion._dispatch import get_num_threads, set_num_threads
from .confusion.accumulator import ConfusionAccumulator
from .exceptions import UndefinedMetricWarning
from .multilabel.accumulator import (
    LabelSets,
    MultilabelAccumulator,
    read_multilabel_csv,
    read_multilabel_npz,
)
from .scores.accumulator import ScoreAccumulator

try:
    __version__ = version("metricstream")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "Accumulator",
    "AccumulatorGroup",
    "BootstrapConfusionAccumulator",
    "MetricInterval",
    "LabelSets",
    "MultilabelAccumulator",
    "ScoreAccumulator",
    "ConfusionAccumulator",
    "UndefinedMetricWarning",
    "__version__",
    "get_num_threads",
    "metrics",
    "read_multilabel_csv",
    "read_multilabel_npz",
    "set_num_threads",
]
