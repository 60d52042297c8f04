"""The multilabel family: several yes/no labels per sample, counted per label and per sample.

``accumulator.py`` holds :class:`MultilabelAccumulator`, :class:`LabelSets` and the file readers;
``_kernels.py`` the Numba kernels.
"""

from typing import TYPE_CHECKING

__all__ = ["LabelSets", "MultilabelAccumulator", "read_multilabel_csv", "read_multilabel_npz"]

if TYPE_CHECKING:
    from .accumulator import (
        LabelSets,
        MultilabelAccumulator,
        read_multilabel_csv,
        read_multilabel_npz,
    )


def __getattr__(name: str) -> object:
    # Imported on first use: the shared input layer imports this package's kernels, and
    # `import metricstream` stays light until a family is used.
    if name in __all__:
        from . import accumulator

        return getattr(accumulator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
