"""The confusion family: one K×K matrix of counts, and every metric read off it.

``accumulator.py`` holds :class:`ConfusionAccumulator` (configuration, input checks, typed
views); ``_dispatch.py`` picks and runs a kernel for a batch; ``_kernels.py`` holds the Numba
counting kernels (plain loops, with SIMD intrinsics where a benchmark asked for them).
"""

from typing import TYPE_CHECKING

__all__ = ["ConfusionAccumulator"]

if TYPE_CHECKING:
    from .accumulator import ConfusionAccumulator


def __getattr__(name: str) -> object:
    # Imported on first use: the shared input layer imports this package's kernels, and
    # `import metricstream` stays light until a family is used.
    if name in __all__:
        from . import accumulator

        return getattr(accumulator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
