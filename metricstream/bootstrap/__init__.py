"""Intervals: bootstrap and delta-method intervals of metrics, and the clustered bootstrap.

``resampling.py`` holds :func:`bootstrap`, :func:`delta_method`, :func:`interval_report` and
:class:`MetricInterval`; ``accumulator.py`` the :class:`BootstrapConfusionAccumulator`, which keeps
Poisson replicates of a confusion matrix while it streams; ``_kernels.py`` their Numba kernels.
"""

from .resampling import (
    METRIC_ALIASES,
    MetricInterval,
    bootstrap,
    delta_method,
    interval,
    interval_from_replicates,
    interval_report,
)

__all__ = [
    "METRIC_ALIASES",
    "BootstrapConfusionAccumulator",
    "MetricInterval",
    "bootstrap",
    "delta_method",
    "interval",
    "interval_from_replicates",
    "interval_report",
]


def __getattr__(name: str) -> object:
    # The accumulator imports the confusion family, which imports this package's resampling
    # module: imported on first use, not here, to keep that cycle open.
    if name == "BootstrapConfusionAccumulator":
        from .accumulator import BootstrapConfusionAccumulator

        return BootstrapConfusionAccumulator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
