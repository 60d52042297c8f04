"""The score family: constant-memory histograms of scores (ROC/PR, AUROC, AP, calibration, top-k).

``accumulator.py`` holds :class:`ScoreAccumulator`; ``_kernels.py`` the Numba kernels that key,
validate and count a batch of scores.
"""

from typing import TYPE_CHECKING

__all__ = ["ScoreAccumulator"]

if TYPE_CHECKING:
    from .accumulator import ScoreAccumulator


def __getattr__(name: str) -> object:
    # Imported on first use: the shared input layer imports this package's kernels, and
    # `import metricstream` stays light until a family is used.
    if name in __all__:
        from . import accumulator

        return getattr(accumulator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
