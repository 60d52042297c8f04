"""Streaming regression metrics: MAE, MSE, RMSE, R², explained variance, bias, max error, Pearson.

:class:`RegressionAccumulator` keeps, per output, the weighted moments of ``y_true``, ``y_pred``
and the error ``e = y_pred - y_true`` as exact fixed-point numbers, every row's terms added
without rounding (see :mod:`metricstream.regression._kernels`): any batch split and any merge
order give one bit-identical state, and every metric is computed from exact integers with a
single rounding. The maximum error is the one state that is not a sum: it is declared a
``"max"`` reduction (``state_reductions``), so ``merge``, ``+``, ``sum``, a group's ``merge``
and the distributed syncs take its maximum.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar, overload

import numpy as np

from .._inputs import as_array
from ..base import Accumulator
from ..exceptions import UndefinedMetricWarning, caller_stacklevel
from . import _kernels as K

__all__ = ["RegressionAccumulator"]

R = TypeVar("R", bound="RegressionAccumulator")
ZeroDivision = Literal["warn"] | float
#: ``"raw_values"`` (one value per output), ``"uniform_average"`` or weights per output.
Average = Literal["uniform_average"] | Sequence[float] | np.ndarray
AverageR2 = Literal["uniform_average", "variance_weighted"] | Sequence[float] | np.ndarray

_INT64_MAX = int(np.iinfo(np.int64).max)
_SCALE = 1 << -K.EMIN  # an exact sum is its integer over this
_NO_WEIGHTS = np.zeros(0, dtype=np.float64)
# Zeroed bins for the kernel (it leaves them zero), reused across updates: allocating and
# zeroing 450 KB per update would cost more than a small batch's counting. One per concurrent
# update (list.pop and append are atomic).
_BINS: list[np.ndarray] = []


def _upgrade_v1(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 (limbs from 2**-1100, 71 of them) -> 2 (from 2**-3239, 140): the same sums."""
    arrays = dict(state["arrays"])
    old = np.asarray(arrays["moments"], dtype=np.int64)
    if old.ndim != 3 or old.shape[2] + K.LOW_LIMBS_ADDED > K.LIMBS:
        raise ValueError(f"a format-1 `moments` has shape {old.shape}; expected (n, 13, 71).")
    new = np.zeros((*old.shape[:2], K.LIMBS), dtype=np.int64)
    new[..., K.LOW_LIMBS_ADDED : K.LOW_LIMBS_ADDED + old.shape[2]] = old
    arrays["moments"] = new
    return {**state, "format": 2, "arrays": arrays}


class _Batch(NamedTuple):
    t: np.ndarray  # (N, n_outputs) float64, C order
    p: np.ndarray
    w: np.ndarray  # (N,) or empty without weights
    weighted: bool
    flat: bool  # given as (N,): positions are worded as one index


@dataclass(frozen=True)
class _Exact:
    """The state as exact integers per output (each sum times 2**1100), for the views."""

    num_samples: int
    w: int  # the same for every output: the weights are per row
    t: list[int]
    tt: list[int]
    p: list[int]
    pp: list[int]
    e: list[int]
    ee: list[int]
    tp: list[int]
    ae: list[int]
    max_error: np.ndarray
    max_known: bool

    @classmethod
    def of(cls, state: Mapping[str, np.ndarray]) -> _Exact:
        exact = _integers(state["moments"])

        def signed(pos: int, neg: int) -> list[int]:
            return [row[pos] - row[neg] for row in exact]

        return cls(
            num_samples=int(state["num_samples"][0]),
            w=exact[0][K.S_W],
            t=signed(K.S_T_POS, K.S_T_NEG),
            tt=[row[K.S_TT] for row in exact],
            p=signed(K.S_P_POS, K.S_P_NEG),
            pp=[row[K.S_PP] for row in exact],
            e=signed(K.S_E_POS, K.S_E_NEG),
            ee=[row[K.S_EE] for row in exact],
            tp=signed(K.S_TP_POS, K.S_TP_NEG),
            ae=[row[K.S_AE] for row in exact],
            max_error=state["max_error"],
            max_known=int(state["max_parts"][0]) <= 1,
        )

    def sst(self) -> list[int]:
        """``W * sum(w (y_true - mean)**2)``, exactly (times 2**2200)."""
        return [tt * self.w - t * t for tt, t in zip(self.tt, self.t, strict=True)]


def _integers(moments: np.ndarray) -> list[list[int]]:
    """The limbs (n_outputs, NUM_STATE, LIMBS) as Python integers, per output and sum."""
    if moments.size and 0 <= moments.min() and moments.max() <= K.MASK:
        # Canonical limbs: lay their bits end to end and read the bytes as one integer each;
        # only the limbs between the lowest and highest non-zero one (data of any one scale
        # fills a few dozen of the 140), shifted into place.
        used = np.flatnonzero(moments.reshape(-1, moments.shape[-1]).any(axis=0))
        first, last = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 1)
        part = moments[..., first:last]
        limbs = np.ascontiguousarray(part, dtype="<i8").view(np.uint8)
        bits = np.unpackbits(limbs.reshape(*part.shape, 8), axis=-1, bitorder="little")
        packed = np.packbits(
            bits[..., : K.BITS].reshape(*part.shape[:2], -1), axis=-1, bitorder="little"
        )
        shift = K.BITS * first
        return [
            [int.from_bytes(row.tobytes(), "little") << shift for row in output]
            for output in packed
        ]
    shifts = [K.BITS * k for k in range(K.LIMBS)]  # a state restored from elsewhere
    return [
        [sum(int(v) << s for v, s in zip(row, shifts, strict=True)) for row in output.tolist()]
        for output in moments
    ]


class RegressionAccumulator(Accumulator):
    """Streaming, mergeable regression metrics for one or several outputs.

    Feed it ``update(y_true, y_pred, weights=None)`` with arrays of shape ``(N,)`` or
    ``(N, num_outputs)`` (numpy, lists, CPU torch tensors) and non-negative per-row weights;
    every view equals scikit-learn's function (``mean_absolute_error``, ``mean_squared_error``,
    ``root_mean_squared_error``, ``r2_score``, ``explained_variance_score``, ``max_error``) and
    scipy's ``pearsonr`` on all the data seen, with the same ``multioutput`` options.

    The state is exact: every row's terms are added without rounding, so any split of the
    stream into batches and any merge order give a bit-identical state, and a large mean with
    a small spread (``y`` around 1e9 with spread 1) loses nothing. Memory is constant: 13 exact
    sums of 140 limbs (14.2 KB) per output. Zero total weight (nothing counted) makes
    every view 0/0, replaced by ``zero_division`` (``"warn"``: 0.0 with an
    :class:`~metricstream.UndefinedMetricWarning`; 0, 1 or ``np.nan``).

    Example:
        >>> acc = RegressionAccumulator().update([3.0, -0.5, 2.0, 7.0], [2.5, 0.0, 2.0, 8.0])
        >>> acc.mae(), acc.mse(), round(acc.r2(), 6)
        (0.5, 0.375, 0.948608)
    """

    state_reductions = {"max_error": "max", "max_parts": "max"}

    # Format 2: every row added exactly, limbs from 2**-3239 (format 1 summarised each batch in
    # float64 first and kept limbs from 2**-1100; its sums load unchanged).
    state_format = 2
    state_upgrades = {1: lambda state: _upgrade_v1(state)}

    def __init__(self, num_outputs: int = 1) -> None:
        if isinstance(num_outputs, bool) or not isinstance(num_outputs, (int, np.integer)):
            raise TypeError(f"`num_outputs` must be an int, got {type(num_outputs).__name__}.")
        if num_outputs < 1:
            raise ValueError(f"`num_outputs` must be at least 1, got {num_outputs}.")
        self._num_outputs = int(num_outputs)
        super().__init__(
            {
                "moments": ((self._num_outputs, K.NUM_STATE, K.LIMBS), np.int64),
                "num_samples": ((1,), np.int64),
                "max_error": ((self._num_outputs,), np.float64),
                # 0: nothing counted; 1: the maximum is known; more: a state added by a path
                # that could not take a maximum (a state saved so), so it is unknown.
                "max_parts": ((1,), np.int64),
            }
        )

    def config(self) -> dict[str, Any]:
        return {"num_outputs": self._num_outputs}

    @property
    def num_outputs(self) -> int:
        return self._num_outputs

    # ------------------------------------------------------------------ counting
    def update(self: R, y_true: Any, y_pred: Any, weights: Any = None) -> R:
        """Count a batch: ``y_true`` and ``y_pred`` of shape ``(N,)`` or ``(N, num_outputs)``.

        ``weights``: ``(N,)`` finite, non-negative (a row of weight 0 counts for nothing but
        ``num_samples``). A non-finite value, an error ``y_pred - y_true`` that overflows, a
        weighted square ``w * max(|y_true|, |y_pred|, |e|)**2`` that overflows float64, or a
        negative weight raises ``ValueError`` naming its position; nothing is counted.
        """
        return super().update(y_true, y_pred, weights)

    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> _Batch:
        t, flat = self._read(y_true, "y_true")
        p, _ = self._read(y_pred, "y_pred")
        if t.shape != p.shape:
            raise ValueError(
                f"`y_true` has shape {np.shape(y_true)} and `y_pred` {np.shape(y_pred)}; "
                f"they must match."
            )
        n = t.shape[0]
        if weights is None:
            w = _NO_WEIGHTS
        else:
            w = np.ascontiguousarray(as_array(weights, "weights"), dtype=np.float64)
            if w.shape != (n,):
                raise ValueError(
                    f"`weights` has shape {w.shape}; it must hold one weight per row: ({n},)."
                )
        return _Batch(t, p, w, weights is not None, flat)

    def _read(self, value: Any, name: str) -> tuple[np.ndarray, bool]:
        """``value`` as (N, num_outputs) float64 in C order, and whether it was (N,)."""
        array = as_array(value, name)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"`{name}` must hold real numbers, got dtype {array.dtype}.")
        flat = array.ndim == 1
        if flat:
            array = array.reshape(-1, 1)
        if array.ndim != 2 or array.shape[1] != self._num_outputs:
            raise ValueError(
                f"`{name}` has shape {array.shape}; this accumulator has "
                f"{self._num_outputs} output(s): give (N, {self._num_outputs})"
                + (" or (N,)." if self._num_outputs == 1 else ".")
            )
        return np.ascontiguousarray(array, dtype=np.float64), flat

    def _count(self, arrays: dict[str, np.ndarray], batch: _Batch) -> None:
        counted = arrays["num_samples"]
        rows = batch.t.shape[0]
        if int(counted[0]) > _INT64_MAX - rows:
            raise ValueError("`num_samples` would pass 2**63 - 1; nothing was counted.")
        bins = _BINS.pop() if _BINS else np.zeros((K.NUM_STATE, K.NUM_BINS), dtype=np.int64)
        try:
            status, row, col = K.count(
                batch.t,
                batch.p,
                batch.w,
                batch.weighted,
                arrays["moments"],
                arrays["max_error"],
                bins,
            )
        finally:
            _BINS.append(bins)
        if status != K.OK:
            raise ValueError(_refusal(status, row, col, batch))
        counted[0] += rows
        if row != -2:  # some row had positive weight: the maximum is known
            arrays["max_parts"][0] = max(int(arrays["max_parts"][0]), 1)

    def merge(self: R, other: R) -> R:
        """Add ``other``'s state (exactly) and take the larger maximum error; returns ``self``.

        The base protocol adds every state array; the maximum error is the one array that must
        be combined by ``max``, so this override does what the base does plus that.
        """
        if type(other) is not type(self):
            return super().merge(other)  # raises the base's TypeError
        self._check_compatible(other)
        incoming = other.state_arrays() if other is not self else None
        with self._lock:
            self._flush_device()
            if incoming is None:
                incoming = {name: array.copy() for name, array in self._arrays.items()}
            moments = self._arrays["moments"].copy()
            if not K.add_into(moments, incoming["moments"]):
                raise ValueError(
                    "merging would overflow the exact sums of the state; nothing was merged."
                )
            mine, theirs = int(self._arrays["num_samples"][0]), int(incoming["num_samples"][0])
            if mine > _INT64_MAX - theirs:
                raise ValueError(
                    f"merging would take `num_samples` past 2**63 - 1 ({mine} + {theirs}); "
                    f"nothing was merged."
                )
            self._arrays["moments"][...] = moments
            self._arrays["num_samples"][0] = mine + theirs
            np.maximum(
                self._arrays["max_error"], incoming["max_error"], out=self._arrays["max_error"]
            )
            self._arrays["max_parts"][0] = max(
                int(self._arrays["max_parts"][0]), int(incoming["max_parts"][0])
            )
            self._changed()
        return self

    def _changed(self) -> None:
        # States added limb by limb elsewhere (a group's merge, a sync) or restored from outside
        # carry into canonical limbs here, so that equal sums compare equal. A device update
        # traced by torch.compile changes no host array (and cannot call Numba): skipped there.
        torch = sys.modules.get("torch")
        if torch is None or not torch.compiler.is_compiling():
            K.normalise_state(self._arrays["moments"])
        super()._changed()

    def _view_source(self) -> _Exact:
        # The exact integers of one snapshot, shared by every view of that state version.
        return self._derived("exact", _Exact.of)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ views
    @property
    def num_samples(self) -> int:
        """Rows counted (rows of weight 0 included)."""
        return int(self._view_source().num_samples)

    @property
    def total_weight(self) -> float:
        """The sum of the weights (the number of rows without weights)."""
        return _ratio(self._view_source().w, _SCALE)

    @overload
    def mae(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def mae(self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...) -> float: ...
    def mae(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """Mean absolute error ``sum(w |y_pred - y_true|) / sum(w)`` per output, averaged.

        0/0 (nothing counted): ``zero_division``. Equals ``sklearn.metrics.mean_absolute_error``.
        """
        return self._view(_mae, multioutput=multioutput, zero_division=zero_division)

    @overload
    def mse(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def mse(self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...) -> float: ...
    def mse(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """Mean squared error ``sum(w (y_pred - y_true)**2) / sum(w)`` per output, averaged.

        0/0 (nothing counted): ``zero_division``. Equals ``sklearn.metrics.mean_squared_error``.
        """
        return self._view(_mse, multioutput=multioutput, zero_division=zero_division)

    @overload
    def rmse(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def rmse(self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...) -> float: ...
    def rmse(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """Root mean squared error ``sqrt(mse)`` per output, then averaged (as scikit-learn).

        0/0 (nothing counted): ``zero_division``. Equals
        ``sklearn.metrics.root_mean_squared_error``.
        """
        return self._view(_rmse, multioutput=multioutput, zero_division=zero_division)

    @overload
    def mean_error(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def mean_error(
        self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...
    ) -> float: ...
    def mean_error(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """Bias ``sum(w (y_pred - y_true)) / sum(w)``: positive when predictions are too high.

        0/0 (nothing counted): ``zero_division``.
        """
        return self._view(_mean_error, multioutput=multioutput, zero_division=zero_division)

    @overload
    def r2(
        self,
        multioutput: Literal["raw_values"],
        *,
        force_finite: bool = ...,
        zero_division: ZeroDivision = ...,
    ) -> np.ndarray: ...
    @overload
    def r2(
        self,
        multioutput: AverageR2 = ...,
        *,
        force_finite: bool = ...,
        zero_division: ZeroDivision = ...,
    ) -> float: ...
    def r2(
        self,
        multioutput: Any = "uniform_average",
        *,
        force_finite: bool = True,
        zero_division: ZeroDivision = "warn",
    ) -> Any:
        """Coefficient of determination ``1 - SSE / SST`` per output, averaged.

        ``SSE = sum(w (y_true - y_pred)**2)``, ``SST = sum(w (y_true - mean(y_true))**2)``.
        As ``sklearn.metrics.r2_score``: with ``force_finite`` a constant ``y_true`` (SST = 0)
        scores 1.0 for perfect predictions and 0.0 otherwise; without it ``nan``/``-inf``.
        Fewer than two rows: ``nan`` with an ``UndefinedMetricWarning``. Nothing counted:
        ``zero_division``. ``"variance_weighted"`` weights outputs by their SST.
        """
        return self._view(
            _r2,
            multioutput=multioutput,
            force_finite=force_finite,
            zero_division=zero_division,
        )

    @overload
    def explained_variance(
        self,
        multioutput: Literal["raw_values"],
        *,
        force_finite: bool = ...,
        zero_division: ZeroDivision = ...,
    ) -> np.ndarray: ...
    @overload
    def explained_variance(
        self,
        multioutput: AverageR2 = ...,
        *,
        force_finite: bool = ...,
        zero_division: ZeroDivision = ...,
    ) -> float: ...
    def explained_variance(
        self,
        multioutput: Any = "uniform_average",
        *,
        force_finite: bool = True,
        zero_division: ZeroDivision = "warn",
    ) -> Any:
        """``1 - Var(y_true - y_pred) / Var(y_true)`` (weighted) per output, averaged.

        The constant-``y_true`` rule and ``force_finite`` are ``r2``'s; nothing counted:
        ``zero_division``. Equals ``sklearn.metrics.explained_variance_score``.
        """
        return self._view(
            _explained_variance,
            multioutput=multioutput,
            force_finite=force_finite,
            zero_division=zero_division,
        )

    @overload
    def max_error(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def max_error(
        self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...
    ) -> float: ...
    def max_error(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """``max |y_pred - y_true|`` over rows of positive weight, per output, averaged.

        For one output it equals ``sklearn.metrics.max_error`` (which takes one output only).
        Nothing counted: ``zero_division``. Every merge path (``merge``, ``+``, ``sum()``, a
        group's ``merge``, the distributed syncs) keeps it. (A state whose ``max_parts`` says
        it was added by a path that could not take a maximum raises ``ValueError`` here.)
        """
        return self._view(_max_error, multioutput=multioutput, zero_division=zero_division)

    @overload
    def pearson(
        self, multioutput: Literal["raw_values"], *, zero_division: ZeroDivision = ...
    ) -> np.ndarray: ...
    @overload
    def pearson(
        self, multioutput: Average = ..., *, zero_division: ZeroDivision = ...
    ) -> float: ...
    def pearson(
        self, multioutput: Any = "uniform_average", *, zero_division: ZeroDivision = "warn"
    ) -> Any:
        """Pearson correlation ``cov(y_true, y_pred) / sqrt(var(y_true) var(y_pred))`` (weighted).

        A constant ``y_true`` or ``y_pred`` (zero variance) gives ``nan`` with an
        ``UndefinedMetricWarning``, as ``scipy.stats.pearsonr`` does; nothing counted:
        ``zero_division``. Unweighted, it equals ``scipy.stats.pearsonr(...).statistic``.
        """
        return self._view(_pearson, multioutput=multioutput, zero_division=zero_division)

    def summary(self, *, zero_division: ZeroDivision = "warn") -> dict[str, float]:
        """Every metric (averaged over outputs, and per output as ``name[j]``) in a flat dict."""
        out: dict[str, float] = {
            "num_samples": float(self.num_samples),
            "total_weight": self.total_weight,
        }
        views = {
            "mae": self.mae,
            "mse": self.mse,
            "rmse": self.rmse,
            "r2": self.r2,
            "explained_variance": self.explained_variance,
            "mean_error": self.mean_error,
            "max_error": self.max_error,
            "pearson": self.pearson,
        }
        for name, view in views.items():
            try:
                raw = np.broadcast_to(
                    view("raw_values", zero_division=zero_division),  # type: ignore[operator]
                    (self._num_outputs,),
                )
            except ValueError:  # the maximum is unknown after a sum-only merge
                raw = np.full(self._num_outputs, np.nan)
            out[name] = float(np.mean(raw))
            if self._num_outputs > 1:
                out.update({f"{name}[{j}]": float(v) for j, v in enumerate(raw)})
        return out


def _refusal(status: int, row: int, col: int, batch: _Batch) -> str:
    """The message of a refused batch (the kernel's status, row and column)."""
    where = f"{row}" if batch.flat else f"({row}, {col})"
    done = "nothing was counted."
    if status == K.BAD_TRUE:
        value = float(batch.t[row, col])
        return f"`y_true` holds {value!r} at position {where}; values must be finite; {done}"
    if status == K.BAD_PRED:
        value = float(batch.p[row, col])
        return f"`y_pred` holds {value!r} at position {where}; values must be finite; {done}"
    if status == K.BAD_DIFF:
        return (
            f"`y_pred - y_true` overflows float64 at position {where} "
            f"({float(batch.p[row, col])!r} - {float(batch.t[row, col])!r}); rescale the "
            f"targets; {done}"
        )
    if status == K.BAD_WEIGHT:
        return (
            f"`weights` holds {float(batch.w[row])!r} at position {row}; weights must be finite "
            f"and non-negative; {done}"
        )
    if status == K.STATE_TOO_LARGE:
        return (
            f"the state holds sums too large to add to (it was not written by metricstream); {done}"
        )
    weight = f", weight {float(batch.w[row])!r}" if batch.weighted else ""
    return (
        f"`y_true` {float(batch.t[row, col])!r} and `y_pred` {float(batch.p[row, col])!r} at "
        f"position {where}{weight} make a weighted square that would overflow float64 "
        f"(w * max(|y_true|, |y_pred|, |y_pred - y_true|)**2 must stay below 1.8e308); rescale "
        f"the targets or the weights; {done}"
    )


# ---------------------------------------------------------------------- view functions
def _ratio(numerator: int, denominator: int) -> float:
    """``numerator / denominator`` rounded once (integers of any size; inf past float64)."""
    try:
        return numerator / denominator
    except OverflowError:
        return math.copysign(math.inf, numerator) * math.copysign(1, denominator)


def _zero_division_value(zero_division: Any) -> float:
    if isinstance(zero_division, str):
        if zero_division == "warn":
            return 0.0
    elif isinstance(zero_division, (int, float, np.integer, np.floating)) and not isinstance(
        zero_division, bool
    ):
        if math.isnan(zero_division):
            return math.nan
        if zero_division in (0, 1):
            return float(zero_division)
    raise ValueError(f"`zero_division` must be 'warn', 0, 1 or np.nan, got {zero_division!r}.")


def _warn(message: str) -> None:
    warnings.warn(message, UndefinedMetricWarning, stacklevel=caller_stacklevel())


def _empty(x: _Exact, multioutput: Any, zero_division: Any, metric: str) -> Any:
    """The value of a metric when nothing was counted (zero total weight), or None."""
    value = _zero_division_value(zero_division)
    if x.w != 0:
        return None
    if zero_division == "warn":
        _warn(
            f"{metric} is ill-defined and being set to 0.0 because there are no samples. "
            f"Use `zero_division` parameter to control this behavior."
        )
    scores = np.full(len(x.t), value)
    return _average(scores, multioutput, None)


def _average(scores: np.ndarray, multioutput: Any, variances: list[int] | None) -> Any:
    """scikit-learn's ``multioutput`` handling."""
    n = len(scores)
    if isinstance(multioutput, str):
        if multioutput == "raw_values":
            return scores
        if multioutput == "uniform_average":
            return float(np.average(scores))
        if multioutput == "variance_weighted" and variances is not None:
            largest = max(variances)
            if largest == 0:  # every output constant: uniform, as scikit-learn
                return float(np.average(scores))
            return float(np.average(scores, weights=[_ratio(v, largest) for v in variances]))
        allowed = "'raw_values', 'uniform_average'" + (
            ", 'variance_weighted'" if variances is not None else ""
        )
        raise ValueError(f"`multioutput` must be {allowed} or {n} weights, got {multioutput!r}.")
    weights = np.asarray(multioutput, dtype=np.float64)
    if n == 1:
        raise ValueError(
            "`multioutput` weights are useful only with several outputs (as in scikit-learn); "
            "this accumulator has one."
        )
    if weights.shape != (n,):
        raise ValueError(
            f"`multioutput` has {weights.size} weights; there must be one per output ({n})."
        )
    return float(np.average(scores, weights=weights))


def _simple(x: _Exact, sums: list[int], multioutput: Any, zero_division: Any, name: str) -> Any:
    empty = _empty(x, multioutput, zero_division, name)
    if empty is not None:
        return empty
    _average(np.zeros(len(sums)), multioutput, None)  # check `multioutput` first
    return _average(np.array([_ratio(s, x.w) for s in sums]), multioutput, None)


def _mae(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    return _simple(x, x.ae, multioutput, zero_division, "Mean absolute error")


def _mse(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    return _simple(x, x.ee, multioutput, zero_division, "Mean squared error")


def _mean_error(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    return _simple(x, x.e, multioutput, zero_division, "Mean error")


def _rmse(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    empty = _empty(x, multioutput, zero_division, "Root mean squared error")
    if empty is not None:
        return empty
    scores = np.sqrt(np.array([_ratio(s, x.w) for s in x.ee]))
    return _average(scores, multioutput, None)


def _assemble(numerators: list[int], denominators: list[int], force_finite: bool) -> np.ndarray:
    """``1 - num / den`` per output with scikit-learn's rules for zero numerators/denominators."""
    scores = np.empty(len(numerators))
    for j, (num, den) in enumerate(zip(numerators, denominators, strict=True)):
        if den != 0:
            scores[j] = 1.0 - _ratio(num, den) if num != 0 else 1.0
        elif force_finite:
            scores[j] = 1.0 if num == 0 else 0.0
        else:
            scores[j] = math.nan if num == 0 else -math.inf
    return scores


def _check_force_finite(force_finite: Any) -> None:
    if not isinstance(force_finite, (bool, np.bool_)):
        raise TypeError(f"`force_finite` must be a bool, got {force_finite!r}.")


def _r2(x: _Exact, multioutput: Any, force_finite: Any, zero_division: Any) -> Any:
    _check_force_finite(force_finite)
    empty = _empty(x, multioutput, zero_division, "R²")
    if empty is not None:
        return empty
    sst = x.sst()
    _average(np.zeros(len(sst)), multioutput, sst)  # check `multioutput` first
    if x.num_samples < 2:
        _warn("R^2 score is not well-defined with less than two samples.")
        return math.nan
    scores = _assemble([ee * x.w for ee in x.ee], sst, bool(force_finite))
    return _average(scores, multioutput, sst)


def _explained_variance(x: _Exact, multioutput: Any, force_finite: Any, zero_division: Any) -> Any:
    _check_force_finite(force_finite)
    empty = _empty(x, multioutput, zero_division, "Explained variance")
    if empty is not None:
        return empty
    sst = x.sst()
    numerators = [ee * x.w - e * e for ee, e in zip(x.ee, x.e, strict=True)]
    return _average(_assemble(numerators, sst, bool(force_finite)), multioutput, sst)


def _max_error(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    empty = _empty(x, multioutput, zero_division, "Max error")
    if empty is not None:
        return empty
    if not x.max_known:
        raise ValueError(
            "the maximum error is unknown: this state was combined by a path that can only add "
            "states (an AccumulatorGroup's merge or a distributed sync), and a sum of maxima is "
            "not their maximum. Combine RegressionAccumulators with `merge`, `+` or `sum()` to "
            "keep it; every other metric is exact."
        )
    return _average(np.array(x.max_error, dtype=np.float64), multioutput, None)


def _pearson(x: _Exact, multioutput: Any, zero_division: Any) -> Any:
    empty = _empty(x, multioutput, zero_division, "Pearson correlation")
    if empty is not None:
        return empty
    _average(np.zeros(len(x.t)), multioutput, None)  # check `multioutput` first
    scores = np.empty(len(x.t))
    constant = False
    for j, (vt, tp, t, pp, p) in enumerate(zip(x.sst(), x.tp, x.t, x.pp, x.p, strict=True)):
        cov = tp * x.w - t * p
        vp = pp * x.w - p * p
        if vt <= 0 or vp <= 0:
            scores[j] = math.nan
            constant = True
            continue
        # cov, vt and vp are exact: scale them into float64 together and round each once.
        shift = max(0, max(abs(cov), vt, vp).bit_length() - 1000)
        r = (cov >> shift) / (math.sqrt(vt >> shift) * math.sqrt(vp >> shift))
        scores[j] = min(1.0, max(-1.0, r))
    if constant:
        _warn(
            "Pearson correlation is not defined for a constant input (zero variance); "
            "it is set to nan."
        )
    return _average(scores, multioutput, None)
