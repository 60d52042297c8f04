"""Streaming regression metrics (MAE, MSE, RMSE, R², explained variance, bias, max error, Pearson).

See :class:`RegressionAccumulator` and ``docs/regression.md``.
"""

from __future__ import annotations

from .accumulator import RegressionAccumulator

__all__ = ["RegressionAccumulator"]
