"""metricstream: exact, fast, streaming metrics with one state and many views.

>>> from metricstream import ConfusionAccumulator
>>> acc = ConfusionAccumulator(num_classes=3)
>>> acc.update([0, 1, 2], [0, 2, 2]).accuracy()
0.6666666666666666

``import metricstream`` loads only the protocol (:mod:`metricstream.base`); each family (and its
Numba kernels) is imported the first time one of its names is used.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .base import Accumulator, AccumulatorGroup
from .exceptions import UndefinedMetricWarning

if TYPE_CHECKING:
    from . import metrics
    from ._core.flags import plain_kernels
    from .bootstrap.accumulator import BootstrapConfusionAccumulator
    from .bootstrap.resampling import MetricInterval
    from .confusion._dispatch import get_num_threads, set_num_threads
    from .confusion.accumulator import ConfusionAccumulator
    from .multilabel.accumulator import (
        LabelSets,
        MultilabelAccumulator,
        read_multilabel_csv,
        read_multilabel_npz,
    )
    from .regression.accumulator import RegressionAccumulator
    from .scores.accumulator import ScoreAccumulator
    from .scores.binning import ScoreBinning
    from .segmentation.accumulator import SegmentationAccumulator

try:
    __version__ = version("metricstream")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

# Public name -> the module that defines it, imported on first use.
_LAZY = {
    "metrics": "metricstream.metrics",
    "BootstrapConfusionAccumulator": "metricstream.bootstrap.accumulator",
    "MetricInterval": "metricstream.bootstrap.resampling",
    "get_num_threads": "metricstream.confusion._dispatch",
    "set_num_threads": "metricstream.confusion._dispatch",
    "ConfusionAccumulator": "metricstream.confusion.accumulator",
    "LabelSets": "metricstream.multilabel.accumulator",
    "MultilabelAccumulator": "metricstream.multilabel.accumulator",
    "read_multilabel_csv": "metricstream.multilabel.accumulator",
    "read_multilabel_npz": "metricstream.multilabel.accumulator",
    "RegressionAccumulator": "metricstream.regression.accumulator",
    "ScoreAccumulator": "metricstream.scores.accumulator",
    "ScoreBinning": "metricstream.scores.binning",
    "plain_kernels": "metricstream._core.flags",
    "SegmentationAccumulator": "metricstream.segmentation.accumulator",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'metricstream' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if name == "metrics" else getattr(loaded, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Accumulator",
    "AccumulatorGroup",
    "BootstrapConfusionAccumulator",
    "ConfusionAccumulator",
    "LabelSets",
    "MetricInterval",
    "MultilabelAccumulator",
    "RegressionAccumulator",
    "ScoreAccumulator",
    "ScoreBinning",
    "SegmentationAccumulator",
    "UndefinedMetricWarning",
    "__version__",
    "get_num_threads",
    "metrics",
    "plain_kernels",
    "read_multilabel_csv",
    "read_multilabel_npz",
    "set_num_threads",
]
