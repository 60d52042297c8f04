"""The score family: constant-memory histograms of scores (ROC/PR, AUROC, AP, calibration, top-k).

``accumulator.py`` holds :class:`ScoreAccumulator`; ``binning.py`` :class:`ScoreBinning`, how a
score becomes a bin and what each bin stands for; ``_kernels.py`` the Numba kernels that key,
validate and count a batch of scores (and, compiled again, their plain twins).
"""

from typing import TYPE_CHECKING

__all__ = ["ScoreAccumulator", "ScoreBinning"]

if TYPE_CHECKING:
    from .accumulator import ScoreAccumulator
    from .binning import ScoreBinning


def __getattr__(name: str) -> object:
    # Imported on first use: the shared input layer imports this package's kernels, and
    # `import metricstream` stays light until a family is used.
    if name == "ScoreAccumulator":
        from . import accumulator

        return accumulator.ScoreAccumulator
    if name == "ScoreBinning":
        from . import binning

        return binning.ScoreBinning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
