"""Uncertainty for any metric of a confusion matrix: read-time bootstrap and delta method.

**Why the matrix is enough.** When the samples are independent, resampling them with
replacement only changes how many times each (true, predicted) pair is counted: a bootstrap
replicate of the confusion matrix ``C`` (``N`` samples) is a draw of
``Multinomial(N, C / N)`` over its cells, and with Poisson resampling (each sample counted
Poisson(1) times) its cells are independent ``Poisson(C_ij)``. So the bootstrap distribution of
*any* metric of the matrix — macro F1, mIoU, MCC, your own function — depends on the final
matrix alone: :func:`bootstrap` costs nothing per update and a few milliseconds at read time.
Replicates are drawn by exact samplers (:mod:`~metricstream.bootstrap._kernels`) straight into
the per-class counts (``TP_i``, ``AP_i``, ``PP_i``, ``N``) from which the common metrics are
evaluated for all replicates at once (:mod:`metricstream.metrics.batched`); other metrics and
user functions get each replicate as a K×K matrix.

**Assumption.** Samples are independent and identically distributed. Pixels of one image or
tokens of one document are not: their errors are correlated, and an i.i.d. bootstrap (or the
delta method, or a Wilson interval) of such a matrix is too narrow. Use
:class:`metricstream.BootstrapConfusionAccumulator`, which resamples whole clusters.

**Weights.** A weighted matrix is accepted only when its counts are whole numbers, read as
frequency weights (a sample of weight 3 counts as three samples). Fractional weights are
refused with a ``ValueError``: the bootstrap of weighted samples depends on the individual
weights, which the matrix has summed away; the clustered accumulator resamples them exactly.

:func:`delta_method` gives closed-form (first-order) standard errors for accuracy, precision,
recall, F-beta / F1 (micro and macro as in Takahashi et al. 2022, "Confidence interval for
micro-averaged F1 and macro-averaged F1 scores", and weighted), IoU and mIoU, balanced
accuracy, Cohen's kappa and MCC.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from .. import metrics as _metrics
from ..confusion._dispatch import get_num_threads
from ..exceptions import UndefinedMetricWarning
from ..metrics import batched as _batched
from ..metrics.counts import ClassCounts
from . import _firstuse
from . import _kernels as _k

__all__ = [
    "METRIC_ALIASES",
    "MetricInterval",
    "bootstrap",
    "delta_method",
    "interval",
    "interval_from_replicates",
    "interval_report",
]

Method = Literal["percentile", "basic", "bca", "normal"]
IntervalMethod = Literal["percentile", "basic", "bca", "normal", "delta"]
Resampling = Literal["multinomial", "poisson"]
METHODS = ("percentile", "basic", "bca", "normal")
INTERVAL_METHODS = (*METHODS, "delta")
RESAMPLINGS = ("multinomial", "poisson")
#: B of the read-time bootstrap when ``n_resamples`` is not given.
DEFAULT_RESAMPLES = 1000

# Short names for the metrics people compare models on: name -> (function, arguments).
METRIC_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mcc": ("matthews_corrcoef", {}),
    "kappa": ("cohen_kappa", {}),
    "miou": ("miou", {}),
    **{
        f"{avg}_{name}": (name, {"average": avg})
        for avg in ("macro", "micro", "weighted")
        for name in ("f1", "precision", "recall", "jaccard")
    },
}


@functools.lru_cache(maxsize=256)
def _parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    """The parameter names of ``function`` (cached: ``inspect.signature`` costs ~20 µs)."""
    return tuple(inspect.signature(function).parameters)


def _matrix_metric(name: str) -> Callable[..., Any] | None:
    """The function ``name`` of :mod:`metricstream.metrics` if it is a metric of one matrix:
    a function whose first parameter is ``matrix`` (intervals excepted)."""
    if name not in _metrics.__all__ or name.endswith("_interval"):
        return None
    function = getattr(_metrics, name, None)
    if not inspect.isfunction(function):
        return None
    parameters = _parameters(function)
    return function if parameters and parameters[0] == "matrix" else None


# Replicates are evaluated in chunks of about this many per-class (or cell) values, which bounds
# the memory of the read-time bootstrap whatever B and K are (2^22 float64 values = 32 MiB).
_CHUNK_VALUES = 1 << 22


@dataclass(frozen=True, eq=False)
class MetricInterval:
    """A metric's point estimate with a confidence interval and a standard error.

    Attributes:
        metric: what was measured (e.g. ``"f1(average='macro')"``).
        estimate: the metric of the observed matrix (a float, or an array for per-class output).
        low, high: the interval bounds (same shape as ``estimate``).
        standard_error: the standard deviation of the replicates (bootstrap), or the
            first-order standard error (delta method).
        method: ``"percentile"``, ``"basic"``, ``"bca"``, ``"normal"`` or ``"delta"``.
        confidence: the nominal coverage, e.g. 0.95.
        n_resamples: B, the number of replicates (0 for the delta method).
        resampling: ``"multinomial"``, ``"poisson"``, ``"cluster-poisson"`` or None (delta).
        seed: the seed that reproduces the replicates (None for the delta method).
        replicates: the B replicate values, ``(B,)`` or ``(B, K)`` (None for the delta method).
    """

    metric: str
    estimate: Any
    low: Any
    high: Any
    standard_error: Any
    method: str
    confidence: float
    n_resamples: int
    resampling: str | None
    seed: int | None
    replicates: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def interval(self) -> tuple[Any, Any]:
        """``(low, high)``."""
        return self.low, self.high

    def __eq__(self, other: object) -> bool:
        """Equal fields (arrays compared element-wise, NaN equal to NaN) and replicates."""
        if not isinstance(other, MetricInterval):
            return NotImplemented
        if self.to_dict() != other.to_dict():
            return False
        if self.replicates is None or other.replicates is None:
            return self.replicates is other.replicates
        return bool(np.array_equal(self.replicates, other.replicates, equal_nan=True))

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (arrays as lists, NaN as None), without the replicates."""

        def plain(value: Any) -> Any:
            if isinstance(value, np.ndarray):
                return [plain(v) for v in value.tolist()]
            if isinstance(value, (float, np.floating)):
                return None if math.isnan(value) else float(value)
            return value

        return {
            "metric": self.metric,
            "estimate": plain(self.estimate),
            "low": plain(self.low),
            "high": plain(self.high),
            "standard_error": plain(self.standard_error),
            "method": self.method,
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "resampling": self.resampling,
            "seed": self.seed,
        }


# ---------------------------------------------------------------------------- inputs
def _check_confidence(confidence: Any) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)):
        raise TypeError(f"`confidence` must be a number in (0, 1), got {confidence!r}.")
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence!r}.")
    return float(confidence)


def _check_seed(seed: Any) -> int:
    """A 64-bit seed: the given int (reduced mod 2^64), or fresh OS entropy for None."""
    if seed is None:
        return int(np.random.SeedSequence().entropy) % (1 << 64)  # type: ignore[arg-type]
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 1 << 63)) * 2 + int(seed.integers(0, 2))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"`seed` must be None, an int or a numpy Generator, got {seed!r}.")
    return int(seed) % (1 << 64)


def _counts_of(source: Any) -> tuple[np.ndarray, Sequence[str] | None]:
    """The count array behind ``source`` and its class names, as exact int64."""
    names = getattr(source, "class_names", None)
    if isinstance(source, ClassCounts):
        array = np.asarray(source.matrix)
    elif callable(getattr(source, "state_arrays", None)) and not isinstance(source, np.ndarray):
        arrays = source.state_arrays()
        if "matrix" not in arrays:
            raise TypeError(
                f"`source` is a {type(source).__name__}, whose state has no confusion "
                f"matrix (arrays: {sorted(arrays)}); pass a count array and a callable metric."
            )
        array = np.asarray(arrays["matrix"])
    elif hasattr(source, "matrix") and not isinstance(source, np.ndarray):
        array = np.asarray(source.matrix)
    else:
        array = np.asarray(source)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"`source` must hold counts (numbers), got dtype {array.dtype}.")
    if array.size == 0:
        raise ValueError(f"`source` holds no cells (shape {array.shape}).")
    if array.dtype.kind == "f":
        if not np.isfinite(array).all():
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
            raise ValueError(
                f"`source` holds {array[bad].item()!r} at position {bad}; counts must be finite."
            )
        fractional = array != np.floor(array)
        if fractional.any():
            bad = tuple(int(i) for i in np.argwhere(fractional)[0])
            raise ValueError(
                f"`source` holds the fractional count {array[bad].item()!r} at position {bad}: the "
                f"bootstrap of a matrix resamples samples, and a matrix of fractional weights "
                f"no longer says which samples it summed. Whole-number weights are read as "
                f"frequency weights; for fractional weights count with "
                f"`metricstream.BootstrapConfusionAccumulator(..., weighted=True)`."
            )
        if (array >= 2.0**62).any():
            raise ValueError("`source` holds a count of 2^62 or more; too large to resample.")
    if (array < 0).any():
        bad = tuple(int(i) for i in np.argwhere(array < 0)[0])
        raise ValueError(
            f"`source` holds {array[bad].item()!r} at position {bad}; counts must be non-negative."
        )
    counts = array.astype(np.int64)
    if int(counts.sum(dtype=np.float64)) >= 2**62:
        raise ValueError("`source` holds 2^62 samples or more; too many to resample exactly.")
    return counts, names


def _labels_to_indices(kwargs: dict[str, Any], names: Sequence[str] | None) -> dict[str, Any]:
    """Class names in ``labels=`` become indices (as accumulator methods accept them)."""
    labels = kwargs.get("labels")
    if labels is None or names is None or isinstance(labels, np.ndarray):
        return kwargs
    items = [labels] if isinstance(labels, str) else list(labels)
    if not any(isinstance(item, str) for item in items):
        return kwargs
    lookup = {name: index for index, name in enumerate(names)}
    indices = []
    for position, item in enumerate(items):
        if isinstance(item, str):
            if item not in lookup:
                raise ValueError(
                    f"`labels` holds {item!r} at position {position}, which is not "
                    f"one of the class names {list(names)}."
                )
            indices.append(lookup[item])
        else:
            indices.append(item)
    return {**kwargs, "labels": indices}


@dataclass(frozen=True)
class _Metric:
    name: str
    scalar: Callable[[Any], Any]
    batched: Callable[[_batched.BatchedCounts], np.ndarray] | None
    function: str | None  # the metricstream.metrics name, for the delta method
    kwargs: dict[str, Any]


def _describe(name: str, kwargs: Mapping[str, Any]) -> str:
    arguments = ", ".join(f"{key}={value!r}" for key, value in kwargs.items())
    return f"{name}({arguments})" if arguments else name


def _resolve(metric: Any, kwargs: dict[str, Any], names: Sequence[str] | None) -> _Metric:
    if callable(metric):
        label = getattr(metric, "__name__", type(metric).__name__)
        return _Metric(_describe(label, kwargs), lambda m: metric(m, **kwargs), None, None, kwargs)
    if not isinstance(metric, str):
        raise TypeError(
            f"`metric` must be a metric name or a function of a matrix, got {metric!r}."
        )
    name, preset = METRIC_ALIASES.get(metric, (metric, {}))
    clash = sorted(set(preset) & set(kwargs))
    if clash:
        raise ValueError(
            f"`metric` {metric!r} already sets {clash[0]}={preset[clash[0]]!r}; "
            f"pass metric={name!r} to choose it yourself."
        )
    kwargs = _labels_to_indices({**preset, **kwargs}, names)
    function = _matrix_metric(name)
    if function is None:
        known = sorted(
            [n for n in _metrics.__all__ if _matrix_metric(n) is not None] + list(METRIC_ALIASES)
        )
        raise ValueError(
            f"`metric` {metric!r} is not a metric of metricstream.metrics; use one "
            f"of {known}, or pass a function of a K×K matrix."
        )
    batched = _batched.BATCHED.get(name)
    if batched is not None:
        parameters = _parameters(batched)
        if not set(kwargs) <= set(parameters) or (
            name == "cohen_kappa" and kwargs.get("weights") is not None
        ):
            batched = None
    bound_batched = None
    if batched is not None:
        chosen = batched

        def bound_batched(counts: _batched.BatchedCounts) -> np.ndarray:
            return chosen(counts, **kwargs)

    def scalar(matrix: Any) -> Any:
        return function(matrix, **kwargs)

    return _Metric(_describe(name, kwargs), scalar, bound_batched, name, kwargs)


def _as_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    return float(value)


# Areas of a score accumulator's histograms that the bootstrap computes from its state.
CURVE_METRICS = ("auroc", "average_precision")


def _score_histogram(
    source: Any, metric: Any
) -> tuple[np.ndarray, Callable[[np.ndarray], float]] | None:
    """``(histogram, statistic)`` for AUROC / AP of a binary score accumulator, else None.

    The state ``curves`` of a binary :class:`~metricstream.scores.ScoreAccumulator` is one
    table of the samples (per score bin: negatives, positives), so it resamples like a
    confusion matrix. One-vs-rest histograms of several classes count every sample once per
    class and are refused.
    """
    if not isinstance(metric, str) or metric not in CURVE_METRICS:
        return None
    state_arrays = getattr(source, "state_arrays", None)
    if isinstance(source, np.ndarray) or not callable(state_arrays):
        return None
    arrays = state_arrays()
    if "curves" not in arrays:
        return None
    curves = np.asarray(arrays["curves"])
    if curves.ndim != 3 or curves.shape[0] != 1 or curves.shape[2] != 2:
        raise ValueError(
            f"`source` holds one-vs-rest score histograms of {curves.shape[0]} classes (state "
            f"'curves' of shape {curves.shape}); they count every sample once per class, so "
            f"they are not one table of the samples. Only a binary score accumulator's "
            f"{metric} is bootstrapped from its state."
        )
    from ..metrics import curves as _curves

    function = getattr(_curves, metric)
    config = source.config() if callable(getattr(source, "config", None)) else {}
    exact = bool(np.asarray(arrays.get("inexact", [1])).sum() == 0)

    def statistic(histogram: np.ndarray) -> float:
        pos, neg = histogram[:, 1], histogram[:, 0]
        if metric == "auroc":
            return float(function(pos, neg))
        # as ScoreAccumulator.average_precision(): "auto" within bins, tied with thresholds
        spread = None
        if config.get("thresholds") is None:
            spread = _curves.continuous_bins(pos, neg)
            if not config.get("logits"):
                spread[0] = spread[-1] = False  # p = 0 and p = 1 hold one value each
        bounds = _curves.average_precision_bounds(pos, neg, exact=[exact], spread=spread)
        return float(bounds.value)

    statistic.__name__ = metric
    return curves[0], statistic


# ---------------------------------------------------------------------------- replicates
# Below this many variates (replicates × non-zero cells) one thread draws them all; above, the
# replicates are split into contiguous ranges drawn by several threads (the kernels release
# the GIL). Each replicate has its own random stream, so the result does not depend on the
# split or the number of threads.
PARALLEL_MIN_DRAWS = 1 << 16
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _get_pool(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != workers:
            if _pool is not None:
                _pool[1].shutdown(wait=False)
            _pool = (
                workers,
                ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="metricstream-bootstrap"
                ),
            )
        return _pool[1]


def _draw_marginals(
    rows: np.ndarray,
    cols: np.ndarray,
    cell_counts: np.ndarray,
    num_classes: int,
    seed: int,
    first: int,
    stop: int,
    multinomial: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    drawn = _firstuse.replicate_marginals(
        rows, cols, cell_counts, num_classes, seed, first, stop, multinomial
    )
    if drawn is not None:  # drawn with numpy while the kernel compiles
        return drawn
    threads = min(get_num_threads(), stop - first)
    if threads < 2 or (stop - first) * cell_counts.size < PARALLEL_MIN_DRAWS:
        return _k.replicate_marginals(
            rows, cols, cell_counts, num_classes, np.uint64(seed), first, stop, multinomial
        )
    bounds = [first + (stop - first) * t // threads for t in range(threads + 1)]
    pool = _get_pool(threads)
    parts = list(
        pool.map(
            lambda t: _k.replicate_marginals(
                rows,
                cols,
                cell_counts,
                num_classes,
                np.uint64(seed),
                bounds[t],
                bounds[t + 1],
                multinomial,
            ),
            range(threads),
        )
    )
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(4))  # type: ignore[return-value]


def _replicate_values(
    counts: np.ndarray, metric: _Metric, n_resamples: int, seed: int, multinomial: bool
) -> np.ndarray:
    flat = counts.reshape(-1)
    cells = np.flatnonzero(flat)
    cell_counts = flat[cells]
    chunks = []
    if metric.batched is not None:
        num_classes = counts.shape[0]
        rows = (cells // num_classes).astype(np.int64)
        cols = (cells % num_classes).astype(np.int64)
        step = max(1, _CHUNK_VALUES // (4 * num_classes))
        for first in range(0, n_resamples, step):
            stop = min(first + step, n_resamples)
            tp, ap, pp, total = _draw_marginals(
                rows, cols, cell_counts, num_classes, seed, first, stop, multinomial
            )
            chunks.append(
                np.asarray(
                    metric.batched(_batched.BatchedCounts(tp, ap, pp, total)), dtype=np.float64
                )
            )
        return np.concatenate(chunks, axis=0)
    step = max(1, _CHUNK_VALUES // max(flat.size, cells.size))
    with warnings.catch_warnings():
        # B replicates would repeat the point estimate's warning B times.
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for first in range(0, n_resamples, step):
            stop = min(first + step, n_resamples)
            drawn = _firstuse.replicate_cells(cell_counts, seed, first, stop, multinomial)
            if drawn is None:  # not drawn with numpy while the kernel compiles
                drawn = _k.replicate_cells(cell_counts, np.uint64(seed), first, stop, multinomial)
            dense = np.zeros((stop - first, flat.size), dtype=np.int64)
            dense[:, cells] = drawn
            stack = dense.reshape((stop - first,) + counts.shape)
            chunks.append(
                np.stack([np.asarray(_as_value(metric.scalar(m)), dtype=np.float64) for m in stack])
            )
    return np.concatenate(chunks, axis=0)


def _jackknife(counts: np.ndarray, metric: _Metric) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-sample-out values of the metric: one per non-zero cell, with its count."""
    flat = counts.reshape(-1)
    cells = np.flatnonzero(flat)
    weights = flat[cells].astype(np.float64)
    if metric.batched is not None:
        num_classes = counts.shape[0]
        rows, cols = cells // num_classes, cells % num_classes
        tp0 = np.diagonal(counts).copy()
        ap0, pp0 = counts.sum(axis=1), counts.sum(axis=0)
        total0 = counts.sum()
        values = []
        step = max(1, _CHUNK_VALUES // (4 * num_classes))
        for first in range(0, cells.size, step):
            r, c = rows[first : first + step], cols[first : first + step]
            index = np.arange(r.size)
            tp = np.repeat(tp0[None, :], r.size, axis=0)
            ap = np.repeat(ap0[None, :], r.size, axis=0)
            pp = np.repeat(pp0[None, :], r.size, axis=0)
            diagonal = r == c
            tp[index[diagonal], r[diagonal]] -= 1
            ap[index, r] -= 1
            pp[index, c] -= 1
            total = np.full(r.size, total0 - 1)
            values.append(
                np.asarray(
                    metric.batched(_batched.BatchedCounts(tp, ap, pp, total)), dtype=np.float64
                )
            )
        return np.concatenate(values, axis=0), weights
    out = []
    work = counts.copy().reshape(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        for cell in cells:
            work[cell] -= 1
            out.append(
                np.asarray(_as_value(metric.scalar(work.reshape(counts.shape))), dtype=np.float64)
            )
            work[cell] += 1
    return np.stack(out), weights


def _quantiles(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Linear-interpolation quantile of each column of ``values`` at its own level ``q``."""
    out = np.full(q.shape, np.nan)
    for index in np.ndindex(q.shape):
        column = values[(slice(None),) + index]
        column = column[~np.isnan(column)]
        if column.size and not np.isnan(q[index]):
            out[index] = np.quantile(column, q[index])
    return out


def _interval(
    method: str,
    estimate: Any,
    values: np.ndarray,
    confidence: float,
    jackknife: Callable[[], tuple[np.ndarray, np.ndarray]],
) -> tuple[Any, Any, Any]:
    alpha = 1 - confidence
    point = np.asarray(estimate, dtype=np.float64)
    shape = point.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, quietly
        valid = (~np.isnan(values)).sum(axis=0)
        se = np.where(
            valid > 1, np.nanstd(values, axis=0, ddof=1) if values.shape[0] > 1 else np.nan, np.nan
        )
    if method == "normal":
        z = NormalDist().inv_cdf(1 - alpha / 2)
        low, high = point - z * se, point + z * se
    elif method in ("percentile", "basic"):
        lo_q = _quantiles(values, np.full(shape, alpha / 2))
        hi_q = _quantiles(values, np.full(shape, 1 - alpha / 2))
        if method == "percentile":
            low, high = lo_q, hi_q
        else:
            low, high = 2 * point - hi_q, 2 * point - lo_q
    else:  # bca
        normal = NormalDist()
        below = np.nansum(values < point, axis=0) + 0.5 * np.nansum(values == point, axis=0)
        share = np.clip(
            below / np.maximum(valid, 1), 0.5 / np.maximum(valid, 1), 1 - 0.5 / np.maximum(valid, 1)
        )
        z0 = np.vectorize(normal.inv_cdf, otypes=[float])(share)
        jack, weights = jackknife()
        defined = ~np.isnan(jack)
        w = np.where(defined, weights.reshape((-1,) + (1,) * len(shape)), 0.0)
        jack0 = np.where(defined, jack, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (w * jack0).sum(axis=0) / w.sum(axis=0)
            diff = np.where(defined, mean - jack0, 0.0)
            acceleration = (w * diff**3).sum(axis=0) / (6 * ((w * diff**2).sum(axis=0)) ** 1.5)
        acceleration = np.where(np.isfinite(acceleration), acceleration, 0.0)
        levels = []
        for z_alpha in (normal.inv_cdf(alpha / 2), normal.inv_cdf(1 - alpha / 2)):
            shifted = z0 + (z0 + z_alpha) / (1 - acceleration * (z0 + z_alpha))
            levels.append(np.vectorize(normal.cdf, otypes=[float])(shifted))
        low = _quantiles(values, np.asarray(levels[0]).reshape(shape))
        high = _quantiles(values, np.asarray(levels[1]).reshape(shape))
    if shape == ():
        return float(low), float(high), float(se)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64), se


def _is_clustered(source: Any) -> bool:
    """Whether ``source`` carries its own cluster-bootstrap replicates."""
    if isinstance(source, np.ndarray) or not callable(getattr(source, "state_arrays", None)):
        return False
    from .accumulator import BootstrapConfusionAccumulator  # imported late: a cycle

    return isinstance(source, BootstrapConfusionAccumulator)


def undefined_interval(
    metric: str | Callable[..., Any],
    shape: tuple[int, ...],
    *,
    method: str,
    confidence: float,
    n_resamples: int,
    resampling: str | None,
    seed: int | None,
    class_names: Sequence[str] | None = None,
    **metric_kwargs: Any,
) -> MetricInterval:
    """The interval of a metric of counts that hold no samples: NaN estimate, bounds and
    standard error (per class where the metric is), with an ``UndefinedMetricWarning``.

    ``shape`` is the shape of the counts (K×K for a confusion matrix).
    """
    resolved = _resolve(metric, dict(metric_kwargs), class_names)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            value_shape = np.shape(resolved.scalar(np.zeros(shape, dtype=np.int64)))
    except Exception:  # a user function may fail on no samples: the result is one NaN
        value_shape = ()
    warnings.warn(
        f"no samples have been counted: the {confidence:.0%} interval of {resolved.name} is "
        f"undefined (NaN).",
        UndefinedMetricWarning,
        stacklevel=3,
    )
    nan: Any = np.full(value_shape, np.nan) if value_shape else float("nan")
    return MetricInterval(
        metric=resolved.name,
        estimate=nan,
        low=nan,
        high=nan,
        standard_error=nan,
        method=method,
        confidence=confidence,
        n_resamples=n_resamples,
        resampling=resampling,
        seed=seed,
    )


def _clustered(
    source: Any,
    metric: str | Callable[..., Any],
    *,
    n_resamples: Any,
    seed: Any,
    resampling: Any,
    method: str,
    confidence: float,
    metric_kwargs: dict[str, Any],
) -> MetricInterval:
    """An interval of a clustered accumulator: from its own replicates, never the i.i.d. ones.

    ``n_resamples``, ``seed`` and ``resampling`` are the accumulator's; other values are
    refused rather than silently replaced."""
    name = type(source).__name__
    if n_resamples is not None and n_resamples != source.n_resamples:
        raise ValueError(
            f"`n_resamples` is {n_resamples!r}, but this {name} holds {source.n_resamples} "
            f"cluster-bootstrap replicates, drawn while counting; omit `n_resamples` to use "
            f"them (a different B needs an accumulator configured with it)."
        )
    # 0 is the default: it stands for "the accumulator's seed".
    same_seed = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
    if not same_seed or seed not in (0, source.seed):
        raise ValueError(
            f"`seed` is {seed!r}, but this {name}'s replicates were drawn with seed "
            f"{source.seed}, its configuration; omit `seed` to use them."
        )
    if resampling not in (None, "cluster-poisson"):
        raise ValueError(
            f"`resampling` is {resampling!r}, but this {name} resamples whole clusters "
            f"(its replicates are 'cluster-poisson'); omit `resampling`, or pass "
            f"`acc.matrix` to treat its samples as independent on purpose."
        )
    if method == "bca":
        raise ValueError(
            f"`method` 'bca' needs a jackknife over the clusters, which a {name} does not "
            f"keep; use 'percentile', 'basic' or 'normal'."
        )
    interval_method: Literal["percentile", "basic", "normal"] = method  # type: ignore[assignment]
    return source.interval(  # type: ignore[no-any-return]
        metric, method=interval_method, confidence=confidence, **metric_kwargs
    )


def bootstrap(
    source: Any,
    metric: str | Callable[..., Any],
    *,
    n_resamples: int | None = None,
    confidence: float = 0.95,
    method: Method = "percentile",
    seed: int | np.random.Generator | None = 0,
    resampling: Resampling | None = None,
    **metric_kwargs: Any,
) -> MetricInterval:
    """Bootstrap confidence interval of any metric of a confusion matrix, at read time.

    Each of the ``n_resamples`` replicates is the matrix of a resample of the ``N`` counted
    samples (see the module docstring): ``Multinomial(N, C/N)`` (``resampling="multinomial"``,
    the classical bootstrap) or independent ``Poisson(C_ij)`` cells (``"poisson"``, each sample
    counted Poisson(1) times, the streaming bootstrap). Intervals, with ``θ̂`` the estimate,
    ``θ*`` the replicates, ``q(p)`` their ``p``-quantile and ``α = 1 - confidence``:

    * ``"percentile"``: ``[q(α/2), q(1 - α/2)]``;
    * ``"basic"``: ``[2θ̂ - q(1 - α/2), 2θ̂ - q(α/2)]``;
    * ``"normal"``: ``θ̂ ± z SE`` with ``SE`` the standard deviation of ``θ*``;
    * ``"bca"`` (Efron 1987): percentile levels corrected for bias
      ``z0 = Φ⁻¹(share of θ* below θ̂, ties counted half)`` and acceleration ``a`` from the
      exact leave-one-sample-out jackknife (one value per non-zero cell, weighted by its
      count).

    Replicates whose metric is undefined follow ``zero_division`` as the metric does
    (``"warn"`` gives 0.0 without B warnings; ``np.nan`` leaves them out of the quantiles).
    Counts with no samples give NaN estimate and bounds with an ``UndefinedMetricWarning``.

    A :class:`~metricstream.BootstrapConfusionAccumulator` (correlated samples) gives the
    interval of its own cluster-bootstrap replicates, as its ``interval`` method does: its
    samples are not independent, and resampling them as if they were would be far too narrow.
    ``n_resamples``, ``seed`` and ``resampling`` are then the accumulator's (other values are
    refused), and ``method="bca"`` is refused. Pass ``acc.matrix`` to resample its samples as
    independent on purpose.

    Args:
        source: a confusion accumulator (its matrix), a K×K matrix or ``ClassCounts``. With a
            callable ``metric``, any array of counts (e.g. a histogram), which the callable
            receives resampled in its own shape. A binary
            :class:`~metricstream.scores.ScoreAccumulator` with ``metric="auroc"`` or
            ``"average_precision"`` (its score histogram is resampled).
        metric: a metric name — a function of :mod:`metricstream.metrics` / method of
            :class:`~metricstream.ConfusionAccumulator` (``"f1"``, ``"miou"``, ...) or an alias
            of ``METRIC_ALIASES`` (``"macro_f1"``, ``"mcc"``, ``"kappa"``, ...) — or a
            function of a matrix returning a number or an array.
        n_resamples: B, at least 2 (default 1,000; 1,000 or more for 95% intervals; BCa wants
            more).
        confidence: nominal coverage in (0, 1).
        method: ``"percentile"``, ``"basic"``, ``"bca"`` or ``"normal"``.
        seed: an int (default 0: reproducible; replicate ``b`` depends only on ``(seed, b)``),
            a numpy ``Generator`` to draw one from, or None for fresh entropy (the result's
            ``seed`` then reproduces it).
        resampling: ``"multinomial"`` (default) or ``"poisson"``.
        **metric_kwargs: arguments of the metric, e.g. ``average="macro"``, ``labels=[0, 2]``
            (class names for an accumulator with ``class_names``), ``zero_division=np.nan``.

    Returns:
        A :class:`MetricInterval` with the estimate, bounds, standard error and replicates.

    Raises:
        TypeError / ValueError: a bad argument (named), or a matrix with fractional (weighted)
            counts.

    Example:
        >>> import numpy as np
        >>> matrix = np.array([[50, 3, 2], [4, 40, 6], [1, 5, 39]])
        >>> result = bootstrap(matrix, "f1", average="macro", n_resamples=2000, seed=0)
        >>> round(result.estimate, 4), result.low < result.estimate < result.high
        (0.8577, True)
        >>> round(result.standard_error, 2)
        0.03
    """
    if n_resamples is not None:
        if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
            raise TypeError(f"`n_resamples` must be an int, got {n_resamples!r}.")
        if n_resamples < 2:
            raise ValueError(f"`n_resamples` must be at least 2, got {n_resamples}.")
    confidence = _check_confidence(confidence)
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}.")
    if _is_clustered(source):
        return _clustered(
            source,
            metric,
            n_resamples=n_resamples,
            seed=seed,
            resampling=resampling,
            method=method,
            confidence=confidence,
            metric_kwargs=metric_kwargs,
        )
    if n_resamples is None:
        n_resamples = DEFAULT_RESAMPLES
    if resampling is None:
        resampling = "multinomial"
    if resampling not in RESAMPLINGS:
        raise ValueError(f"`resampling` must be one of {list(RESAMPLINGS)}, got {resampling!r}.")
    seed_value = _check_seed(seed)
    curve = _score_histogram(source, metric)
    if curve is not None:
        if metric_kwargs:
            raise ValueError(
                f"`metric` {metric!r} of a binary score histogram takes no "
                f"arguments, got {sorted(metric_kwargs)}."
            )
        source, metric = curve
    counts, names = _counts_of(source)
    if not callable(metric) and (counts.ndim != 2 or counts.shape[0] != counts.shape[1]):
        raise ValueError(
            f"`source` must be a square K×K confusion matrix for a named metric, "
            f"got shape {counts.shape}; pass a function to bootstrap other counts."
        )
    if counts.sum() == 0:
        return undefined_interval(
            metric,
            counts.shape,
            method=method,
            confidence=confidence,
            n_resamples=int(n_resamples),
            resampling=resampling,
            seed=seed_value,
            class_names=names,
            **metric_kwargs,
        )
    resolved = _resolve(metric, dict(metric_kwargs), names)
    estimate = _as_value(resolved.scalar(counts))  # warns like the metric itself
    values = _replicate_values(
        counts, resolved, int(n_resamples), seed_value, resampling == "multinomial"
    )
    if values.shape[1:] != np.shape(estimate):
        raise ValueError(
            f"`metric` returned shape {np.shape(estimate)} for the matrix but "
            f"{values.shape[1:]} for a replicate; it must return one shape."
        )
    low, high, se = _interval(
        method, estimate, values, confidence, lambda: _jackknife(counts, resolved)
    )
    return MetricInterval(
        metric=resolved.name,
        estimate=estimate,
        low=low,
        high=high,
        standard_error=se,
        method=method,
        confidence=confidence,
        n_resamples=int(n_resamples),
        resampling=resampling,
        seed=seed_value,
        replicates=values,
    )


def interval(
    source: Any,
    metric: str | Callable[..., Any],
    *,
    method: IntervalMethod = "percentile",
    confidence: float = 0.95,
    n_resamples: int | None = None,
    seed: int | np.random.Generator | None = 0,
    resampling: Resampling | None = None,
    **metric_kwargs: Any,
) -> MetricInterval:
    """A confidence interval of a metric, by any method: the one entry point.

    ``method`` is ``"percentile"`` (default), ``"basic"``, ``"normal"`` or ``"bca"`` (the
    bootstrap: :func:`bootstrap`) or ``"delta"`` (the closed form: :func:`delta_method`, which
    takes no ``n_resamples``, ``seed`` or ``resampling``). A
    :class:`~metricstream.BootstrapConfusionAccumulator` gives the interval of its own
    cluster-bootstrap replicates (its ``n_resamples`` and ``seed``); ``"delta"`` and ``"bca"``
    are refused for it. Counts with no samples give NaN bounds with an
    ``UndefinedMetricWarning``.

    Example:
        >>> matrix = [[50, 3, 2], [4, 40, 6], [1, 5, 39]]
        >>> round(interval(matrix, "macro_f1", method="delta").standard_error, 4)
        0.0286
        >>> result = interval(matrix, "macro_f1", n_resamples=2000)  # percentile, seed 0
        >>> result.low < result.estimate < result.high
        True
    """
    if method not in INTERVAL_METHODS:
        raise ValueError(f"`method` must be one of {list(INTERVAL_METHODS)}, got {method!r}.")
    if method == "delta":
        given = {
            name: value
            for name, value in (
                ("n_resamples", n_resamples),
                ("seed", None if seed == 0 else seed),
                ("resampling", resampling),
            )
            if value is not None
        }
        if given:
            raise ValueError(
                f"`method` 'delta' is a closed form: it draws no replicates, so "
                f"{', '.join(f'`{n}`' for n in given)} cannot apply; omit "
                f"{'it' if len(given) == 1 else 'them'}."
            )
        if not isinstance(metric, str):
            raise TypeError(
                f"`metric` must be a metric name for method 'delta', got {metric!r}; the delta "
                f"method needs a closed-form gradient (use a bootstrap method for functions)."
            )
        return delta_method(source, metric, confidence=confidence, **metric_kwargs)
    return bootstrap(
        source,
        metric,
        n_resamples=n_resamples,
        confidence=confidence,
        method=method,
        seed=seed,
        resampling=resampling,
        **metric_kwargs,
    )


def interval_from_replicates(
    matrix: Any,
    replicates: Any,
    metric: str | Callable[..., Any],
    *,
    method: Method = "percentile",
    confidence: float = 0.95,
    resampling: str = "replicates",
    seed: int | None = None,
    class_names: Sequence[str] | None = None,
    **metric_kwargs: Any,
) -> MetricInterval:
    """Interval of a metric from replicate matrices you already have.

    For replicates drawn elsewhere: the clustered accumulator's
    (:meth:`metricstream.BootstrapConfusionAccumulator.interval` calls this), or your
    own resampling. The estimate is the metric of ``matrix``; ``method`` is ``"percentile"``,
    ``"basic"`` or ``"normal"`` as in :func:`bootstrap` (BCa needs the jackknife of the
    resampled units, which a stack of matrices does not carry). Weighted (float) matrices are
    fine here.

    Args:
        matrix: the K×K matrix of the data.
        replicates: a ``(B, K, K)`` stack of replicate matrices.
        metric, metric_kwargs: as :func:`bootstrap`.
        resampling, seed: recorded in the result.
        class_names: names that ``labels=`` may use.

    Example:
        >>> import numpy as np
        >>> stack = np.array([[[9, 1], [2, 8]], [[8, 2], [3, 7]], [[10, 0], [1, 9]]])
        >>> result = interval_from_replicates([[9, 1], [2, 8]], stack, "accuracy",
        ...                                   method="normal")
        >>> round(result.estimate, 2), round(result.standard_error, 4)
        (0.85, 0.1)
    """
    confidence = _check_confidence(confidence)
    if method not in ("percentile", "basic", "normal"):
        raise ValueError(
            f"`method` must be 'percentile', 'basic' or 'normal' for given "
            f"replicates, got {method!r}."
        )
    base = _metrics.counts.check_matrix(matrix)
    stack = np.asarray(replicates)
    if stack.ndim != 3 or stack.shape[1:] != base.shape:
        raise ValueError(
            f"`replicates` must be a (B, {base.shape[0]}, {base.shape[0]}) stack, "
            f"got shape {stack.shape}."
        )
    if stack.shape[0] < 2:
        raise ValueError(f"`replicates` holds {stack.shape[0]} matrices; at least 2 are needed.")
    resolved = _resolve(metric, dict(metric_kwargs), class_names)
    estimate = _as_value(resolved.scalar(base))
    if resolved.batched is not None:
        values = np.asarray(
            resolved.batched(_batched.BatchedCounts.from_stack(stack)), dtype=np.float64
        )
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            values = np.stack(
                [np.asarray(_as_value(resolved.scalar(m)), dtype=np.float64) for m in stack]
            )
    low, high, se = _interval(method, estimate, values, confidence, lambda: (values, values))
    return MetricInterval(
        metric=resolved.name,
        estimate=estimate,
        low=low,
        high=high,
        standard_error=se,
        method=method,
        confidence=confidence,
        n_resamples=int(stack.shape[0]),
        resampling=resampling,
        seed=seed,
        replicates=values,
    )


# ---------------------------------------------------------------------------- delta method
@dataclass(frozen=True)
class _Gradient:
    """``∂θ/∂C_rc = d_r [r = c] + a_r + b_c + e`` for a scalar metric θ of the matrix."""

    d: np.ndarray
    a: np.ndarray
    b: np.ndarray
    e: float


def _multinomial_variance(counts: np.ndarray, g: _Gradient) -> float:
    """``Var θ̂ ≈ gᵀ Σ g`` with ``Σ = N diag(p) - N p pᵀ`` the multinomial covariance of ``C``:
    ``Σ_rc C_rc g_rc² - (Σ_rc C_rc g_rc)² / N``, in O(K²) without a K×K gradient."""
    c = counts.astype(np.float64)
    tp, ap, pp = np.diagonal(c), c.sum(axis=1), c.sum(axis=0)
    total = ap.sum()
    ae = g.a + g.e
    first = float(tp @ g.d + ap @ ae + pp @ g.b)
    second = float(
        ap @ ae**2 + pp @ g.b**2 + 2 * ae @ c @ g.b + tp @ (g.d**2 + 2 * g.d * (ae + g.b))
    )
    return max(second - first * first / total, 0.0)


def _ratio_parts(name: str, kwargs: Mapping[str, Any]) -> tuple[float, float, float, float]:
    """``X_i = α TP_i / (β TP_i + γ AP_i + δ PP_i)``: the coefficients of a per-class ratio."""
    if name == "precision":
        return 1.0, 0.0, 0.0, 1.0
    if name == "recall":
        return 1.0, 0.0, 1.0, 0.0
    if name == "jaccard":
        return 1.0, -1.0, 1.0, 1.0
    beta = kwargs.get("beta", 1.0) if name == "fbeta" else 1.0
    if np.isposinf(beta):
        return 1.0, 0.0, 1.0, 0.0
    beta2 = float(beta) ** 2
    if beta2 == 0:
        return 1.0, 0.0, 0.0, 1.0
    return 1 + beta2, 0.0, beta2, 1.0


_RATIO_METRICS = ("precision", "recall", "fbeta", "f1", "dice", "jaccard")
DELTA_METRICS = (
    *_RATIO_METRICS,
    "accuracy",
    "balanced_accuracy",
    "miou",
    "cohen_kappa",
    "matthews_corrcoef",
)


def _ratio_gradient(
    counts: np.ndarray, name: str, kwargs: Mapping[str, Any], estimate: Any
) -> tuple[_Gradient | None, np.ndarray | None]:
    """Gradient of an averaged per-class ratio, or the per-class variances (``average=None``)."""
    alpha, beta, gamma, delta = _ratio_parts(name, kwargs)
    k = counts.shape[0]
    c = counts.astype(np.float64)
    tp, ap, pp = np.diagonal(c).copy(), c.sum(axis=1), c.sum(axis=0)
    total = ap.sum()
    selected = np.zeros(k, dtype=bool)
    labels = kwargs.get("labels")
    index = np.arange(k) if labels is None else np.atleast_1d(np.asarray(labels, dtype=np.intp))
    selected[index] = True
    average = kwargs.get("average")
    if average == "micro":
        include = selected & (((ap + pp) != 0) if kwargs.get("ignore_absent") else True)
        t, a_, p_ = tp[include].sum(), ap[include].sum(), pp[include].sum()
        den = beta * t + gamma * a_ + delta * p_
        if den == 0:
            return _Gradient(np.zeros(k), np.zeros(k), np.zeros(k), 0.0), None
        x = alpha * t / den
        mask = include.astype(np.float64)
        return _Gradient(
            (alpha - x * beta) / den * mask, -x * gamma / den * mask, -x * delta / den * mask, 0.0
        ), None
    den = beta * tp + gamma * ap + delta * pp
    defined = den != 0
    safe = np.where(defined, den, 1.0)
    x = np.where(defined, alpha * tp / safe, 0.0)
    dtp = np.where(defined, (alpha - x * beta) / safe, 0.0)
    dap = np.where(defined, -x * gamma / safe, 0.0)
    dpp = np.where(defined, -x * delta / safe, 0.0)
    if average is None:
        # one class at a time: only TP_i, AP_i, PP_i move, so the quadratic form is closed
        g_tp = dtp + dap + dpp  # the diagonal cell
        first = tp * g_tp + (ap - tp) * dap + (pp - tp) * dpp
        second = tp * g_tp**2 + (ap - tp) * dap**2 + (pp - tp) * dpp**2
        variance = np.maximum(second - first**2 / total, 0.0)
        return None, variance[index]
    include = selected.copy()
    if kwargs.get("ignore_absent"):
        include &= (ap + pp) != 0
    zd = kwargs.get("zero_division", "warn")
    if isinstance(zd, float) and math.isnan(zd):
        include &= defined
    if not include.any():
        return _Gradient(np.zeros(k), np.zeros(k), np.zeros(k), 0.0), None
    if average == "weighted" and ap[include].sum() != 0:
        weight_total = ap[include].sum()
        w = np.where(include, ap / weight_total, 0.0)
        theta = float(estimate)
        return _Gradient(
            w * dtp, w * dap + np.where(include, (x - theta) / weight_total, 0.0), w * dpp, 0.0
        ), None
    m = include.sum()
    mask = include / m
    return _Gradient(mask * dtp, mask * dap, mask * dpp, 0.0), None


def _gradient(
    counts: np.ndarray, name: str, kwargs: Mapping[str, Any], estimate: Any
) -> tuple[_Gradient | None, np.ndarray | None]:
    k = counts.shape[0]
    c = counts.astype(np.float64)
    tp, ap, pp = np.diagonal(c).copy(), c.sum(axis=1), c.sum(axis=0)
    n = ap.sum()
    t = tp.sum()
    zeros = np.zeros(k)
    if name in _RATIO_METRICS:
        return _ratio_gradient(
            counts, "fbeta" if name in ("f1", "dice") else name, kwargs, estimate
        )
    if name == "miou":
        return _ratio_gradient(
            counts, "jaccard", {"average": "macro", "ignore_absent": True}, estimate
        )
    if name == "accuracy":
        return _Gradient(np.full(k, 1 / n), zeros, zeros, -t / n**2), None
    if name == "balanced_accuracy":
        present = ap != 0
        m = present.sum()
        safe = np.where(present, ap, 1.0)
        scale = 1.0
        if kwargs.get("adjusted"):
            scale = 1 / (1 - 1 / m) if m > 1 else 0.0
        return _Gradient(
            np.where(present, scale / (m * safe), 0.0),
            np.where(present, -scale * tp / (m * safe**2), 0.0),
            zeros,
            0.0,
        ), None
    if name == "cohen_kappa":
        po, pe = t / n, float(ap @ pp) / n**2
        if pe == 1:
            return _Gradient(zeros, zeros, zeros, 0.0), None
        k_o, k_e = 1 / (1 - pe), (po - 1) / (1 - pe) ** 2
        return _Gradient(
            np.full(k, k_o / n),
            k_e * pp / n**2,
            k_e * ap / n**2,
            -k_o * t / n**2 - 2 * k_e * float(ap @ pp) / n**3,
        ), None
    # matthews_corrcoef
    u = t * n - float(ap @ pp)
    v = n**2 - float(pp @ pp)
    w = n**2 - float(ap @ ap)
    if v * w == 0:
        return _Gradient(zeros, zeros, zeros, 0.0), None
    mcc = u / math.sqrt(v * w)
    m_u, m_v, m_w = 1 / math.sqrt(v * w), -mcc / (2 * v), -mcc / (2 * w)
    return _Gradient(
        np.full(k, m_u * n),
        -m_u * pp - 2 * m_w * ap,
        -m_u * ap - 2 * m_v * pp,
        m_u * t + 2 * (m_v + m_w) * n,
    ), None


def delta_method(
    source: Any,
    metric: str,
    *,
    confidence: float = 0.95,
    **metric_kwargs: Any,
) -> MetricInterval:
    """Closed-form (delta-method) standard error and Wald interval ``θ̂ ± z SE`` of a metric.

    The counts of ``N`` independent samples are ``Multinomial(N, p)`` with covariance
    ``N (diag p - p pᵀ)``; to first order a metric ``θ(C)`` then has variance
    ``Σ_rc C_rc g_rc² - (Σ_rc C_rc g_rc)² / N`` with ``g = ∂θ/∂C``, computed analytically
    through ``TP_i``, ``AP_i``, ``PP_i`` and ``N`` (O(K²), no resampling). For a single rate
    this is the familiar ``sqrt(p(1 - p)/n)`` (e.g. recall: ``n = AP_i``); for micro F1 over
    all classes (= accuracy) it is ``sqrt(F(1 - F)/N)`` and for macro F1 it is the variance of
    Takahashi et al. (2022); for Cohen's kappa it is the full large-sample variance (Fleiss,
    Cohen & Everitt 1969), not the simplified one of
    :func:`~metricstream.metrics.cohen_kappa_standard_error`.

    The delta method is first-order: it agrees with the bootstrap when classes have tens of
    samples or more, and is too narrow (or degenerate: SE 0 at a score of exactly 0 or 1)
    for tiny counts. Bounds are clipped to the metric's range ([0, 1], or [-1, 1] for kappa and
    MCC). The set of classes in an average (``ignore_absent``, undefined classes) is held
    fixed. Same independence assumption as :func:`bootstrap`.

    Counts with no samples give NaN estimate and bounds with an ``UndefinedMetricWarning``.
    A :class:`~metricstream.BootstrapConfusionAccumulator` is refused: its samples are
    clustered, and the closed form, which assumes independent samples, would be far too narrow
    (its ``interval`` method gives the cluster bootstrap; ``method="normal"`` is the estimate
    ± z·SE with the clusters' standard error).

    Args:
        source: a confusion accumulator, a K×K matrix or ``ClassCounts``.
        metric: one of ``DELTA_METRICS`` (``"accuracy"``, ``"precision"``, ``"recall"``,
            ``"fbeta"``, ``"f1"``, ``"dice"``, ``"jaccard"``, ``"balanced_accuracy"``,
            ``"miou"``, ``"cohen_kappa"`` unweighted, ``"matthews_corrcoef"``) or an alias
            (``"macro_f1"``, ``"mcc"``, ...).
        confidence: nominal coverage in (0, 1).
        **metric_kwargs: the metric's arguments (``average``, ``labels``, ``beta``, ...).

    Example:
        >>> result = delta_method([[50, 3, 2], [4, 40, 6], [1, 5, 39]], "macro_f1")
        >>> round(result.estimate, 4), round(result.standard_error, 4)
        (0.8577, 0.0286)
    """
    confidence = _check_confidence(confidence)
    if _is_clustered(source):
        raise ValueError(
            f"`source` is a {type(source).__name__}: its samples come in clusters, and the "
            f"delta method assumes independent samples (its interval would be far too "
            f"narrow). Use `acc.interval(metric)` for the cluster bootstrap (method='normal' "
            f"gives estimate ± z·SE from the clusters), or `delta_method(acc.matrix, metric)` "
            f"to treat the samples as independent on purpose."
        )
    counts, names = _counts_of(source)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError(
            f"`source` must be a square K×K confusion matrix, got shape {counts.shape}."
        )
    if not isinstance(metric, str):
        raise TypeError(
            f"`metric` must be a metric name, got {metric!r}; the delta method "
            f"needs a closed-form gradient (use `bootstrap` for functions)."
        )
    resolved = _resolve(metric, dict(metric_kwargs), names)
    if resolved.function not in DELTA_METRICS or (
        resolved.function == "cohen_kappa" and resolved.kwargs.get("weights") is not None
    ):
        raise ValueError(
            f"`metric` {metric!r} has no closed-form standard error here; use one "
            f"of {list(DELTA_METRICS)} (kappa unweighted), or `bootstrap`."
        )
    if counts.sum() == 0:
        return undefined_interval(
            metric,
            counts.shape,
            method="delta",
            confidence=confidence,
            n_resamples=0,
            resampling=None,
            seed=None,
            class_names=names,
            **metric_kwargs,
        )
    kwargs = resolved.kwargs
    if resolved.function in ("precision", "recall", "fbeta", "f1", "dice", "jaccard"):
        _metrics.precision(
            counts, average=kwargs.get("average"), labels=kwargs.get("labels"), zero_division=0
        )  # validates `average` and `labels` early
    estimate = _as_value(resolved.scalar(counts))
    gradient, per_class = _gradient(counts, str(resolved.function), kwargs, estimate)
    if per_class is not None:
        se: Any = np.sqrt(per_class)
    else:
        assert gradient is not None
        se = math.sqrt(_multinomial_variance(counts, gradient))
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    lower = -1.0 if resolved.function in ("cohen_kappa", "matthews_corrcoef") else 0.0
    low: Any = np.clip(np.asarray(estimate) - z * np.asarray(se), lower, 1.0)
    high: Any = np.clip(np.asarray(estimate) + z * np.asarray(se), lower, 1.0)
    if np.ndim(estimate) == 0:
        low, high = float(low), float(high)
    return MetricInterval(
        metric=resolved.name,
        estimate=estimate,
        low=low,
        high=high,
        standard_error=se,
        method="delta",
        confidence=confidence,
        n_resamples=0,
        resampling=None,
        seed=None,
    )


# ---------------------------------------------------------------------------- report section
DEFAULT_REPORT_METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "miou", "mcc", "kappa")
_REPORT_LABELS = {
    "accuracy": "accuracy",
    "balanced_accuracy": "balanced accuracy",
    "macro_f1": "macro F1",
    "miou": "mIoU",
    "mcc": "MCC",
    "kappa": "Cohen's kappa",
}


def interval_report(
    source: Any,
    metrics: Sequence[str] = DEFAULT_REPORT_METRICS,
    *,
    method: Method = "percentile",
    n_resamples: int | None = None,
    confidence: float = 0.95,
    seed: int | None = 0,
    format: Literal["dict", "text", "markdown"] = "dict",
    digits: int = 4,
) -> dict[str, Any] | str:
    """The "intervals" section of a report: each metric's estimate, bounds and standard error.

    For an accumulator with its own replicates (a clustered
    :class:`~metricstream.BootstrapConfusionAccumulator`) the intervals come from
    them (``n_resamples`` and ``seed`` are then the accumulator's, and are not used); otherwise
    from :func:`bootstrap` of the matrix (independent samples; ``n_resamples`` defaults to
    1,000). Scalar metrics only; with no samples counted, every value is None (NaN) and an
    ``UndefinedMetricWarning`` is issued.

    Args:
        source: an accumulator or a K×K matrix.
        metrics: metric names or aliases (default: accuracy, balanced accuracy, macro F1, mIoU,
            MCC, Cohen's kappa).
        method, n_resamples, confidence, seed: as :func:`bootstrap` (``seed=0`` by default so
            that reports are reproducible).
        format: ``"dict"`` (JSON-ready; undefined values are None), ``"text"`` or
            ``"markdown"``.
        digits: decimals in text and markdown.

    Example:
        >>> print(interval_report([[50, 3, 2], [4, 40, 6], [1, 5, 39]], ["accuracy"],
        ...                       format="text", n_resamples=2000))
        95% percentile bootstrap intervals, B=2000, multinomial, seed 0 (independent samples)
        <BLANKLINE>
          metric  estimate     low    high      SE
        accuracy    0.8600  0.8000  0.9133  0.0286
    """
    if format not in ("dict", "text", "markdown"):
        raise ValueError(f"`format` must be 'dict', 'text' or 'markdown', got {format!r}.")
    if isinstance(metrics, str):
        metrics = [metrics]
    clustered = _is_clustered(source)
    if n_resamples is None:
        n_resamples = DEFAULT_RESAMPLES
    results = []
    for name in metrics:
        if clustered:
            result = bootstrap(source, name, method=method, confidence=confidence)
        else:
            result = bootstrap(
                source,
                name,
                n_resamples=n_resamples,
                confidence=confidence,
                method=method,
                seed=seed,
            )
        if np.ndim(result.estimate) != 0:
            raise ValueError(
                f"`metrics` holds {name!r}, which is per-class; the report lists "
                f"scalar metrics (use e.g. 'macro_f1')."
            )
        results.append((name, result))
    first = results[0][1] if results else None
    header = {
        "confidence": confidence,
        "method": method,
        "n_resamples": first.n_resamples if first else n_resamples,
        "resampling": first.resampling if first else "multinomial",
        "seed": first.seed if first else seed,
    }
    rows = {
        name: {key: result.to_dict()[key] for key in ("estimate", "low", "high", "standard_error")}
        for name, result in results
    }
    if format == "dict":
        return {**header, "metrics": rows}
    assumption = (
        "clusters resampled" if header["resampling"] == "cluster-poisson" else "independent samples"
    )
    title = (
        f"{confidence:.0%} {method} bootstrap intervals, B={header['n_resamples']}, "
        f"{header['resampling']}, seed {header['seed']} ({assumption})"
    )

    def cell(value: Any) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    table = [["metric", "estimate", "low", "high", "SE"]]
    for name, values in rows.items():
        table.append(
            [
                _REPORT_LABELS.get(name, name),
                cell(values["estimate"]),
                cell(values["low"]),
                cell(values["high"]),
                cell(values["standard_error"]),
            ]
        )
    if format == "markdown":
        lines = ["| " + " | ".join(row) + " |" for row in table]
        lines.insert(1, "|---" * len(table[0]) + "|")
        return f"{title}\n\n" + "\n".join(lines)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(value.rjust(width) for value, width in zip(row, widths, strict=True))
        for row in table
    ]
    return f"{title}\n\n" + "\n".join(lines)
