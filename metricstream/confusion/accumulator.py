"""The streaming confusion-matrix accumulator.

It holds one K×K matrix (rows: true class, columns: predicted class) as the state of an
:class:`~metricstream.base.Accumulator`, and every metric is a method generated from the plain
function of :mod:`metricstream.metrics` of the same name: the same signature (less the matrix),
the same docstring (formula and 0/0 rule). Counting happens in Numba kernels
(:mod:`metricstream.confusion._kernels`) through :mod:`metricstream.confusion._dispatch`.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from decimal import Decimal, localcontext
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from .. import metrics as _metrics
from .._core import devices as _devices
from .._core.views import MetricView
from .._inputs import THRESHOLD, Batch, as_array, prepare_batch
from ..base import Accumulator
from ..bootstrap import resampling as _bootstrap
from ..exceptions import caller_stacklevel
from ..metrics._zero_division import ZeroDivision
from ..metrics.counts import ClassCounts, Normalize
from ..report import confusion as _report
from . import _kernels
from ._dispatch import (
    count_batch,
    count_small,
    small_flags,
    small_threshold_counter,
    uncount_batch,
)

# Layout version of this accumulator's state. 1: the K×K matrix and five configuration keys at
# the top level of the state dict. 2: the generic layout of metricstream.serialization, and the
# `threshold` setting. 3: `threshold` is a probability and `logits` says what binary scores are
# (format 2 compared scores with `threshold` as they were, 0.0 for logits).
STATE_FORMAT = 3

LabelsArg = Sequence[int | str] | np.ndarray | int | str | None

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COUNTS_KEY = ("class counts",)
_NAN = math.nan
P = ParamSpec("P")
R = TypeVar("R")


def _upgrade_v1(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 (configuration keys and ``matrix`` at the top level) to format 2."""
    if "config" in state:  # a format-1 binary blob, already split by the codec
        config = dict(state["config"])
        arrays = state["arrays"]
    else:
        config = {
            key: state[key]
            for key in ("num_classes", "class_names", "ignore_index", "weighted", "class_axis")
        }
        arrays = {"matrix": state["matrix"]}
    config.setdefault("threshold", None)
    return {"type": "ConfusionAccumulator", "format": 2, "config": config, "arrays": arrays}


def _upgrade_v2(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2 to 3: no threshold, or one in (0, 1], stays as it was (a probability threshold);
    any other (0.0, the documented threshold for logits, or a value outside [0, 1]) compared
    logits, and becomes ``logits=True`` with the probability ``sigmoid(t)``: 0.5 for 0.0 (the
    same decisions); others to the nearest float (decisions of logits within a few ulps of
    ``t`` may differ)."""
    config = dict(state["config"])
    threshold = config.get("threshold")  # absent: the restore names the missing setting
    config.setdefault("logits", False)
    if (
        isinstance(threshold, (int, float))
        and not isinstance(threshold, bool)
        and math.isfinite(threshold)  # NaN, inf: the constructor refuses them by name
        and not 0.0 < threshold <= 1.0
    ):
        config["logits"] = True
        config["threshold"] = 1.0 / (1.0 + math.exp(-threshold)) if threshold > -745 else 0.0
    return {**state, "format": 3, "config": config}


@functools.lru_cache(maxsize=256)
def logit_cut(probability: float) -> float:
    """The smallest float64 ``x`` whose sigmoid reaches ``probability``, exactly.

    ``sigmoid(x) >= p`` holds exactly when ``x >= log(p / (1 - p))``; that logit is
    irrational for every float ``p`` in (0, 1) but 0.5 (where it is 0), so no float equals it,
    and comparing a float logit with the smallest float above it makes the same decision as
    comparing its sigmoid, computed without rounding, with ``p``. ``log(p) - log1p(-p)`` in
    float64 may land a few ulps to either side; here the logit is computed with
    ``decimal`` (correctly rounded logarithms) to as many digits as it takes to place it
    between two floats. ``-inf`` for 0 (every logit reaches it), ``+inf`` for 1 (only
    ``+inf``).
    """
    if probability <= 0.0:
        return -math.inf
    if probability >= 1.0:
        return math.inf
    # p = a / d, so p / (1 - p) = a / b with b = d - a: both positive integers.
    a, d = float(probability).as_integer_ratio()
    b = d - a
    if a == b:
        return 0.0
    digits = 40
    while True:
        with localcontext() as context:
            context.prec = digits
            log_a = Decimal(a).ln()
            log_b = Decimal(b).ln()
            value = log_a - log_b
            # Each logarithm is within half a unit of its last digit, and so is the
            # difference: four such units of the largest bound all three and the rounding of
            # the two bounds below.
            error = 4 * (abs(log_a) + abs(log_b) + 1) * Decimal(10) ** (1 - digits)
            low, high = value - error, value + error
        found = _smallest_float_at_least(float(value), low, high)
        if found is not None:
            return found
        digits *= 2


def _smallest_float_at_least(guess: float, low: Decimal, high: Decimal) -> float | None:
    """The smallest float at or above a number known to lie in ``[low, high]``, searched from
    ``guess``; None when a float lies in that interval (more digits are needed)."""
    cut = guess
    while True:
        at = Decimal(cut)  # exact
        if low <= at <= high:
            return None
        if at < low:  # below the logit: the next float up
            cut = math.nextafter(cut, math.inf)
            continue
        below = math.nextafter(cut, -math.inf)
        at_below = Decimal(below)
        if low <= at_below <= high:
            return None
        if at_below > high:  # still above: step down
            cut = below
            continue
        return cut


# ---------------------------------------------------------------------------- metric methods
def _metric_method(function: Callable[..., Any]) -> Callable[..., Any]:
    """A method computing ``function(counts of this accumulator, ...)`` through the view cache.

    It carries the function's signature (less the matrix) and docstring (formula, 0/0 rule), so
    ``help(acc.f1)`` says what ``help(metricstream.metrics.f1)`` says and the two cannot drift.
    Class names given in ``labels`` or ``pos_label`` are translated to indices.
    """
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    takes_labels = "labels" in signature.parameters
    zero_division = signature.parameters.get("zero_division")
    # The view cache skips results that may warn; it must see the default "warn" too.
    defaults = {} if zero_division is None else {"zero_division": zero_division.default}

    takes_pos_label = "pos_label" in signature.parameters

    def method(self: ConfusionAccumulator, *args: Any, **kwargs: Any) -> Any:
        if takes_labels and "labels" in kwargs:
            kwargs["labels"] = self._labels(kwargs["labels"])
        if takes_pos_label and isinstance(kwargs.get("pos_label"), str):
            kwargs["pos_label"] = _single(self._labels([kwargs["pos_label"]]))  # a class name
        if defaults and "zero_division" not in kwargs:
            kwargs.update(defaults)
        return self._view(function, *args, **kwargs)

    name = function.__name__
    method.__name__ = name
    method.__qualname__ = f"ConfusionAccumulator.{name}"
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *parameters[1:]]
    )
    method.__doc__ = _method_doc(function)
    return method


def _metric(function: Callable[Concatenate[Any, P], R]) -> MetricView[P, R]:
    """A view method of the matrix, declared in the class body (:mod:`metricstream._core.views`)."""
    return MetricView(function, _metric_method)


def _single(indices: tuple[int, ...] | None) -> int:
    assert indices is not None and len(indices) == 1
    return indices[0]


def _method_doc(function: Callable[..., Any]) -> str:
    """The function's docstring, computed from this accumulator's matrix, without its example
    (which calls the function)."""
    doc = inspect.getdoc(function) or ""
    kept = []
    for line in doc.splitlines():
        if line.strip() in ("Example:", "Examples:"):
            break
        kept.append(line)
    body = "\n".join(kept).rstrip()
    return (
        f"{body}\n\nComputed from this accumulator's matrix: the same as "
        f"``metricstream.metrics.{function.__name__}(acc.matrix, ...)``."
    )


class ConfusionAccumulator(Accumulator):
    """A K×K confusion matrix accumulated over a stream of batches, with lazy metric views.

    ``update`` counts a batch through a Numba kernel straight into the matrix (no O(N)
    temporaries); metrics are computed only when asked, in O(K²) whatever the number of samples,
    from one consistent snapshot of the matrix, and cached until the next
    ``update``/``merge``/``reset``.

    Invariants (each is tested):

    * any split of a stream into batches gives the same matrix as one ``update``;
    * ``merge`` is associative and commutative; merging an empty accumulator changes nothing;
    * a failed ``update`` or ``merge`` raises and leaves the accumulator exactly as it was;
    * ``update``, ``merge`` and ``reset`` return ``self``; ``a + b`` returns a new accumulator;
    * concurrent ``update`` calls from several threads lose no count, and every view is computed
      from one state that existed;
    * counts never wrap: an update or merge that would pass 2**63 - 1 raises ``ValueError``.

    Args:
        num_classes: K, the number of classes; labels are integers in ``[0, K)``.
        class_names: optional K unique names, used in reports and accepted in ``labels``.
        ignore_index: a true label whose samples are skipped (e.g. 255 in segmentation masks);
            it may lie inside or outside ``[0, K)``, within int64.
        weighted: count in float64 so that ``weights`` may be fractional. By default counts
            are exact int64, and ``weights``, if given, must be whole numbers.
        class_axis: the axis of ``y_pred`` holding class scores when ``y_pred`` has one more
            dimension than ``y_true`` (1, PyTorch's ``(N, C, ...)`` layout, by default; -1 for
            channels-last). Part of the configuration: shards merge only with the same axis.
        threshold: binary tasks (``num_classes=2``): float ``y_pred`` of ``y_true``'s shape (or
            ``(N, 1)``) holds scores of class 1, predicted positive where
            ``probability >= threshold``. Always a probability in [0, 1] (0.5 for the usual
            cut). ``None`` (default): float ``y_pred`` of that shape must hold whole-number
            labels.
        logits: binary scores are logits: class 1 where ``sigmoid(logit) >= threshold``,
            decided exactly (the logit is compared with the smallest float whose sigmoid
            reaches ``threshold``; 0.5 is the logit 0). Without it scores must be probabilities
            in [0, 1]: a score outside is refused with a ``ValueError``, and a batch of 32 or
            more logits that all lie in [0, 1] is counted with a ``UserWarning``. Multiclass
            scores are reduced by argmax, which is the same for logits and probabilities.

    Example:
        >>> acc = ConfusionAccumulator(num_classes=3)
        >>> acc.update([0, 1, 2, 2], [0, 2, 2, 2]).accuracy()
        0.75
        >>> acc.update([1, 1], [1, 1]).recall(average="macro")
        0.8888888888888888
    """

    # Every element of y_true is a sample, whatever its shape: batches split anywhere.
    input_layout = "elementwise"
    state_format = STATE_FORMAT
    state_upgrades = {1: _upgrade_v1, 2: _upgrade_v2}
    # count_batch refuses a cell or total that would wrap or overflow before it writes.
    _counts_safely = True

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        *,
        weighted: bool = False,
        class_axis: int = 1,
        threshold: float | None = None,
        logits: bool = False,
    ) -> None:
        self._num_classes = _check_num_classes(num_classes)
        self._class_names = _check_class_names(class_names, self._num_classes)
        self._ignore_index = _check_ignore_index(ignore_index)
        if not isinstance(weighted, (bool, np.bool_)):
            raise TypeError(f"`weighted` must be True or False, got {weighted!r}.")
        self._weighted = bool(weighted)
        self._class_axis = _check_int(class_axis, "class_axis")
        if not -32 <= self._class_axis < 32:
            raise ValueError(f"`class_axis` must be an axis in [-32, 32), got {class_axis}.")
        if not isinstance(logits, (bool, np.bool_)):
            raise TypeError(f"`logits` must be True or False, got {logits!r}.")
        self._logits = bool(logits)
        self._threshold = _check_threshold(threshold, self._num_classes, self._logits)
        # What the kernels compare binary scores with: the probability itself, or the smallest
        # logit whose sigmoid reaches it; and which range check they run on the scores.
        self._cut = (
            None
            if self._threshold is None
            else (logit_cut(self._threshold) if self._logits else self._threshold)
        )
        self._score_rule = _kernels.LOGITS if self._logits else _kernels.PROBABILITIES
        dtype = np.float64 if self._weighted else np.int64
        super().__init__({"matrix": ((self._num_classes, self._num_classes), dtype)})
        # The live matrix, aliased for the update hot path (the base owns it in `_arrays`).
        self._matrix = self._arrays["matrix"]
        # (version, bound): an upper bound of the matrix's total, so that the overflow check of
        # an update is O(1), and the version it holds for. `update` keeps it; any other change
        # (merge, reset, sync, restore) goes through `_changed`, which moves the version on and
        # so makes the bound "unknown" (the next update sums the matrix once, O(K²)).
        self._bound = (-1, math.nan)
        # (counting function, matrix, kernel flags, ignore_index as an int) for the small-batch
        # path of `update`: labels or rows, or binary scores against the threshold; None for
        # float64 counts, which take the general path.
        self._small = (
            None
            if self._weighted
            else (
                count_small if self._cut is None else small_threshold_counter(self._cut),
                self._matrix,
                small_flags(self._ignore_index) | (0 if self._cut is None else self._score_rule),
                0 if self._ignore_index is None else self._ignore_index,
            )
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._matrix = self._arrays["matrix"]
        self._bound = (-1, math.nan)

    # ------------------------------------------------------------------ configuration
    def config(self) -> dict[str, Any]:
        """``num_classes``, ``class_names``, ``ignore_index``, ``weighted``, ``class_axis``,
        ``threshold`` and ``logits``: what must be equal for two accumulators to merge."""
        return {
            "num_classes": self._num_classes,
            "class_names": None if self._class_names is None else list(self._class_names),
            "ignore_index": self._ignore_index,
            "weighted": self._weighted,
            "class_axis": self._class_axis,
            "threshold": self._threshold,
            "logits": self._logits,
        }

    @property
    def num_classes(self) -> int:
        """K, the number of classes."""
        return self._num_classes

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """The class names given at construction, or None."""
        return self._class_names

    @property
    def ignore_index(self) -> int | None:
        """The true label whose samples are skipped, or None."""
        return self._ignore_index

    @property
    def weighted(self) -> bool:
        """Whether counts are float64 weights (True) or exact int64 counts (False)."""
        return self._weighted

    @property
    def class_axis(self) -> int:
        """Axis of class scores in ``y_pred`` when scores are given instead of labels."""
        return self._class_axis

    @property
    def threshold(self) -> float | None:
        """The decision threshold of a binary task, a probability (binary scores are logits
        when :attr:`logits`), or None."""
        return self._threshold

    @property
    def logits(self) -> bool:
        """Whether binary scores are logits (else probabilities, which must lie in [0, 1])."""
        return self._logits

    def __repr__(self) -> str:
        parts = [f"num_classes={self._num_classes}", f"num_samples={self.num_samples}"]
        if self._weighted:
            parts.append("weighted=True")
        if self._ignore_index is not None:
            parts.append(f"ignore_index={self._ignore_index}")
        if self._class_names is not None:
            parts.append(f"class_names={list(self._class_names)}")
        if self._class_axis != 1:
            parts.append(f"class_axis={self._class_axis}")
        if self._threshold is not None:
            parts.append(f"threshold={self._threshold}")
        if self._logits:
            parts.append("logits=True")
        return f"ConfusionAccumulator({', '.join(parts)})"

    # ------------------------------------------------------------------ state
    @property
    def matrix(self) -> np.ndarray:
        """The K×K matrix (rows true, columns predicted) as a read-only snapshot.

        It is one consistent state (never a mix of two updates) and does not change with later
        updates; ``acc.matrix.copy()`` gives a writable array.
        """
        return self._snapshot()["matrix"]

    @property
    def num_samples(self) -> int | float:
        """N: samples counted so far (total weight for a weighted accumulator)."""
        total = self._view_source().total
        return float(total) if self._weighted else int(total)

    def update(self, y_true: Any, y_pred: Any, weights: Any = None) -> ConfusionAccumulator:
        """Count a batch and return ``self``.

        Args:
            y_true: true labels, any shape (e.g. ``(N,)`` or ``(B, H, W)`` masks), any integer
                dtype, or floats holding whole numbers. Numpy arrays, lists, and objects with
                ``__dlpack__``/``__array__`` (CPU torch tensors) are read without copying.
            y_pred: predicted labels of the same shape, or scores/logits with one more
                dimension (classes on ``class_axis``), whose argmax is taken inside the kernel,
                or (with ``threshold``) scores of class 1: probabilities in [0, 1], or logits
                with ``logits=True``.
            weights: optional non-negative finite weights of ``y_true``'s shape (whole numbers
                unless the accumulator is ``weighted``).

        Raises:
            TypeError: non-numeric input.
            ValueError: mismatched shapes, a label outside ``[0, K)`` (other than
                ``ignore_index``), a negative, NaN or fractional label, a bad weight, a NaN
                score, a binary probability outside [0, 1], or counts that would overflow. The
                message names the argument, the value and its position, and the accumulator is
                left exactly as it was.
        """
        if type(y_true) is not np.ndarray and _devices.on_device(y_true):
            return self._update_on_device(y_true, y_pred, weights)  # see metricstream.device
        small = self._small
        if weights is None and small is not None:
            # The training-loop case (plain labels or narrow logits, a few hundred rows) in one
            # kernel call with no Batch and no bookkeeping beyond the lock, the version and the
            # total bound; anything else, or anything the kernel rejects, goes the general way.
            lock = self._lock
            lock.acquire()
            try:
                version, total = self._bound
                bound = small[0](
                    small[1],
                    y_true,
                    y_pred,
                    small[2],
                    small[3],
                    total if version == self._version else _NAN,
                )
                if bound is not None:
                    self._changed()
                    self._bound = (self._version, bound)
                    return self
            finally:
                lock.release()
        batch = self._prepare(y_true, y_pred, weights)
        notes: list[int] | None = [] if self._logits and batch.kind == THRESHOLD else None
        with self._lock:
            version, total = self._bound
            bound = count_batch(
                self._matrix,
                batch,
                self._ignore_index,
                total if version == self._version else math.nan,
                notes,
            )
            self._changed()
            self._bound = (self._version, bound)
        if notes:  # counted, as ScoreAccumulator counts them; the warning says what to change
            _warn_probabilities()
        return self

    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> Batch:
        if self._cut is None:
            return prepare_batch(y_true, y_pred, weights, self._num_classes, self._class_axis)
        batch = prepare_batch(
            y_true, y_pred, weights, self._num_classes, self._class_axis, threshold=self._cut
        )
        if batch.kind == THRESHOLD:  # binary scores: the kernel checks their range as it counts
            batch.flags |= self._score_rule
        return batch

    def _count(self, arrays: dict[str, np.ndarray], batch: Batch) -> None:
        if not (self._logits and batch.kind == THRESHOLD):
            if arrays is not self._arrays:
                count_batch(arrays["matrix"], batch, self._ignore_index, math.nan)
                return
            # Counting the live state (a group's update, under the lock, with one `_changed`
            # to follow): the total's bound saves summing the matrix, as `update` does.
            version, total = self._bound
            bound = count_batch(
                self._matrix,
                batch,
                self._ignore_index,
                total if version == self._version else math.nan,
            )
            self._bound = (self._version + 1, bound)
            return
        notes: list[int] = []
        matrix = arrays["matrix"]
        before = matrix.copy()  # 2×2: the exact undo of float sums too
        count_batch(matrix, batch, self._ignore_index, math.nan, notes)
        if notes:
            try:
                _warn_probabilities()
            except BaseException:  # the warning raised (an "error" filter): count nothing
                matrix[...] = before
                raise

    def _uncount(self, arrays: dict[str, np.ndarray], batch: Batch) -> None:
        """Exactly undo :meth:`_count` of ``batch`` (lock held): the kernel subtracts what it
        added. For groups, which undo a member's count when a later member refuses the batch;
        a weighted matrix restores a copy instead (see :meth:`_count_undoable`)."""
        uncount_batch(arrays["matrix"], batch, self._ignore_index)

    def _count_undoable(self, batch: Any) -> Callable[[], None]:
        if self._weighted:
            # Subtracting float64 weights does not give the old sums back bit for bit: restore
            # a copy of the K×K matrix (the base's way for states without an exact undo).
            backup = {name: array.copy() for name, array in self._arrays.items()}
            self._count_finite(batch, backup)

            def restore() -> None:
                for name, array in backup.items():
                    self._arrays[name][...] = array

            return restore
        return super()._count_undoable(batch)  # counts, then _uncount: no copy of the state

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_batch(
        cls,
        y_true: Any,
        y_pred: Any,
        weights: Any = None,
        *,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        weighted: bool = False,
        class_axis: int = 1,
        threshold: float | None = None,
        logits: bool = False,
    ) -> ConfusionAccumulator:
        """A new accumulator holding one batch: the metrics of that batch alone.

        Example:
            >>> ConfusionAccumulator.from_batch([0, 1, 1], [0, 1, 0], num_classes=2).accuracy()
            0.6666666666666666
        """
        acc = cls(
            num_classes,
            class_names,
            ignore_index,
            weighted=weighted,
            class_axis=class_axis,
            threshold=threshold,
            logits=logits,
        )
        return acc.update(y_true, y_pred, weights)

    @classmethod
    def from_matrix(
        cls,
        matrix: Any,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        *,
        weighted: bool | None = None,
    ) -> ConfusionAccumulator:
        """An accumulator holding an existing K×K matrix (rows true, columns predicted).

        ``weighted`` defaults to whether ``matrix`` has a float dtype with fractional entries.
        Counts must be non-negative and finite; integer counts must be below 2**63 (uint64 or
        float values beyond int64 raise instead of wrapping).
        """
        array = _metrics.counts.check_matrix(as_array(matrix, "matrix"))
        if weighted is None:
            weighted = array.dtype.kind == "f" and not np.array_equal(array, np.round(array))
        acc = cls(array.shape[0], class_names, ignore_index, weighted=weighted)
        if not weighted and array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):
            raise ValueError("`matrix` holds fractional counts; pass `weighted=True` to keep them.")
        try:
            _check_counts(array, acc._matrix)
        except ValueError as error:
            raise ValueError(f"`matrix`: {error}") from None
        acc._matrix[...] = array
        return acc

    # ------------------------------------------------------------------ metric views
    def class_counts(self) -> ClassCounts:
        """The per-class reductions (TP, AP, PP, N) every metric is built from.

        A snapshot: its arrays are read-only and do not change with later updates.
        """
        return self._view_source()

    def confusion_matrix(self, normalize: Normalize = None) -> np.ndarray:
        """The matrix as a new array; ``normalize`` is None, "true", "pred" or "all".

        See :func:`metricstream.metrics.normalize_confusion_matrix`.
        """
        if normalize is None:  # one copy of one consistent state (not a copy of a copy)
            return self._view_source().matrix.copy()
        return self._view(_metrics.normalize_confusion_matrix, normalize=normalize)

    # Every other metric method is generated below from its function in metricstream.metrics.

    def interval(
        self,
        metric: str | Callable[..., Any],
        *,
        method: _bootstrap.IntervalMethod = "percentile",
        confidence: float = 0.95,
        n_resamples: int | None = None,
        seed: int | np.random.Generator | None = 0,
        resampling: _bootstrap.Resampling | None = None,
        **metric_kwargs: Any,
    ) -> _bootstrap.MetricInterval:
        """A confidence interval of any metric of this matrix, at read time.

        ``metric`` is a method name (``"f1"``, ``"miou"``, ...), an alias (``"macro_f1"``) or a
        function of a matrix; ``metric_kwargs`` go to it (``average="macro"``). ``method`` is a
        bootstrap method (``"percentile"``, ``"basic"``, ``"bca"``, ``"normal"``: replicate
        matrices drawn from the final matrix, independent samples assumed, so the interval costs
        nothing per update) or ``"delta"`` (the delta method). See
        :func:`metricstream.bootstrap.interval` for the methods and the assumption, and
        :class:`~metricstream.BootstrapConfusionAccumulator` for correlated samples (pixels of
        one image). With no samples counted the estimate and bounds are NaN, with an
        :class:`~metricstream.UndefinedMetricWarning`.

        Example:
            >>> acc = ConfusionAccumulator(2).update([0, 1] * 50, [0, 1] * 40 + [1, 0] * 10)
            >>> result = acc.interval("accuracy", n_resamples=200, seed=0)
            >>> result.low < result.estimate == 0.8 < result.high
            True
        """
        return _bootstrap.interval(
            self,
            metric,
            method=method,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=seed,
            resampling=resampling,
            **metric_kwargs,
        )

    def bootstrap(
        self,
        metric: str | Callable[..., Any],
        *,
        n_resamples: int | None = None,
        confidence: float = 0.95,
        method: _bootstrap.Method = "percentile",
        seed: int | np.random.Generator | None = 0,
        resampling: _bootstrap.Resampling | None = None,
        **metric_kwargs: Any,
    ) -> _bootstrap.MetricInterval:
        """Deprecated: :meth:`interval` (the same arguments) is the one name for intervals."""
        warnings.warn(
            "`acc.bootstrap(metric)` is deprecated; use `acc.interval(metric)`.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.interval(
            metric,
            method=method,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=seed,
            resampling=resampling,
            **metric_kwargs,
        )

    def classification_report(
        self,
        digits: int = 2,
        labels: LabelsArg = None,
        target_names: Sequence[str] | None = None,
        output_dict: bool = False,
        zero_division: ZeroDivision = "warn",
    ) -> str | dict:
        """scikit-learn's ``classification_report``, character for character; class names
        (if set) are the default ``target_names``. See
        :func:`metricstream.report.classification_report`."""
        indices = self._labels(labels)
        if target_names is None and self._class_names is not None:
            shown = _metrics.counts.label_indices(indices, self._num_classes)
            if shown is None:
                counts = self._view_source()
                # scikit-learn reports the labels seen in truth or prediction.
                shown = np.flatnonzero(counts.actual_positives + counts.predicted_positives)
            target_names = [self._class_names[i] for i in shown]
        report = self._view(
            _report.classification_report,
            digits=digits,
            labels=indices,
            target_names=None if target_names is None else tuple(target_names),
            output_dict=output_dict,
            zero_division=zero_division,
        )
        if isinstance(report, dict):  # a cached dict must not be mutated by the caller
            # its values are floats or dicts of floats: two levels are a deep copy
            report = {k: dict(v) if isinstance(v, dict) else v for k, v in report.items()}
        return report

    def summary(
        self, format: str = "dict", *, zero_division: ZeroDivision = "warn", digits: int = 4
    ) -> dict | str:
        """Overall and per-class metrics: ``format="dict"`` (JSON-ready), ``"text"`` or
        ``"markdown"``; see :func:`metricstream.report.summary`. ``digits`` applies to text
        and markdown."""
        if format == "dict":
            # Built afresh, not cached: a deep copy of a cached dict holding the K×K matrix as
            # lists costs more than building it (0.75 s against 0.03 s at K=1000).
            return _report.summary(
                self._view_source(), class_names=self._class_names, zero_division=zero_division
            )
        if format == "text":
            return self._view(
                _report.summary_text,
                class_names=self._class_names,
                zero_division=zero_division,
                digits=digits,
            )
        if format == "markdown":
            return self._view(
                _report.summary_markdown,
                class_names=self._class_names,
                zero_division=zero_division,
                digits=digits,
            )
        raise ValueError(f"`format` must be 'dict', 'text' or 'markdown', got {format!r}.")

    def _repr_html_(self) -> str:
        """The summary as an HTML table, for Jupyter (undefined values show as "–")."""
        return self._view(_report.summary_html, class_names=self._class_names)

    # ------------------------------------------------------------------ plots
    # Thin wrappers around metricstream.plotting (matplotlib is optional and imported there).
    def plot(
        self,
        normalize: Normalize = None,
        ax: Any = None,
        class_names: Sequence[str] | None = None,
        annotate: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Draw the matrix as a heatmap with a colour bar and return the matplotlib ``Axes``.

        ``normalize`` is None (counts), "true", "pred" or "all"; ``class_names`` default to the
        accumulator's; ``annotate`` (default: when K <= 20) writes each cell's value. Needs
        matplotlib (``pip install "metricstream[plot]"``); see
        :func:`metricstream.plotting.plot_confusion_matrix` for the other keywords.
        ``acc.plot().figure.savefig("confusion.png")`` writes a PNG.
        """
        from ..plotting import confusion as plotting

        return plotting.plot_confusion_matrix(
            self.matrix,
            normalize=normalize,
            ax=ax,
            annotate=annotate,
            class_names=class_names if class_names is not None else self._class_names,
            **kwargs,
        )

    def plot_per_class(
        self,
        metrics: Sequence[str] = ("precision", "recall", "f1", "iou"),
        ax: Any = None,
        class_names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Grouped bars of per-class precision, recall, F1 and IoU; returns the ``Axes``.

        See :func:`metricstream.plotting.plot_per_class`.
        """
        from ..plotting import confusion as plotting

        return plotting.plot_per_class(
            self.matrix,
            metrics=metrics,
            ax=ax,
            class_names=class_names if class_names is not None else self._class_names,
            **kwargs,
        )

    # ------------------------------------------------------------------ internals
    def _view_source(self) -> ClassCounts:
        """The per-class counts of one snapshot of the matrix, cached until the next change."""
        cached = self._views.get(_COUNTS_KEY)
        if cached is not None and cached[0] == self._version:
            return cached[1]  # type: ignore[no-any-return]
        with self._lock:  # one consistent copy, not the snapshot dict: this is the hot view
            self._flush_device()
            version = self._version
            matrix = self._matrix.copy()
        matrix.flags.writeable = False
        counts = ClassCounts.from_matrix(matrix, validate=False)
        for array in (
            counts.true_positives,
            counts.actual_positives,
            counts.predicted_positives,
        ):
            array.flags.writeable = False
        # With its version: a store that an update overtakes is never read as the newer one.
        self._views[_COUNTS_KEY] = (version, counts)
        return counts

    def _labels(self, labels: LabelsArg) -> tuple[int, ...] | None:
        if labels is None:
            return None
        if isinstance(labels, (str, int, np.integer)):
            labels = [labels]  # type: ignore[list-item]
        indices = []
        for position, label in enumerate(labels):  # type: ignore[union-attr]
            if isinstance(label, str):
                if self._class_names is None or label not in self._class_names:
                    known = (
                        "this accumulator has no `class_names`"
                        if self._class_names is None
                        else f"known names: {list(self._class_names)}"
                    )
                    raise ValueError(
                        f"`labels` holds unknown class name {label!r} at position {position}; "
                        f"{known}."
                    )
                indices.append(self._class_names.index(label))
            elif isinstance(label, (int, np.integer)) and not isinstance(label, bool):
                indices.append(int(label))
            else:
                raise TypeError(
                    f"`labels` holds {label!r} at position {position}; labels must be class "
                    f"indices or class names."
                )
        return tuple(indices)

    # ------------------------------------------------------------------ views of the matrix
    # Each is the function of metricstream.metrics of the same name, applied to this matrix
    # through the view cache (its signature less the matrix, and its docstring).
    true_positives = _metric(_metrics.true_positives)
    false_positives = _metric(_metrics.false_positives)
    false_negatives = _metric(_metrics.false_negatives)
    true_negatives = _metric(_metrics.true_negatives)
    support = _metric(_metrics.support)
    predicted_positives = _metric(_metrics.predicted_positives)
    prevalence = _metric(_metrics.prevalence)
    accuracy = _metric(_metrics.accuracy)
    balanced_accuracy = _metric(_metrics.balanced_accuracy)
    ovr_accuracy = _metric(_metrics.ovr_accuracy)
    hamming_loss = _metric(_metrics.hamming_loss)
    zero_one_loss = _metric(_metrics.zero_one_loss)
    precision = _metric(_metrics.precision)
    recall = _metric(_metrics.recall)
    f1 = _metric(_metrics.f1)
    fbeta = _metric(_metrics.fbeta)
    precision_recall_fscore_support = _metric(_metrics.precision_recall_fscore_support)
    jaccard = _metric(_metrics.jaccard)
    dice = _metric(_metrics.dice)
    miou = _metric(_metrics.miou)
    fwiou = _metric(_metrics.fwiou)
    specificity = _metric(_metrics.specificity)
    negative_predictive_value = _metric(_metrics.negative_predictive_value)
    false_positive_rate = _metric(_metrics.false_positive_rate)
    false_negative_rate = _metric(_metrics.false_negative_rate)
    false_discovery_rate = _metric(_metrics.false_discovery_rate)
    false_omission_rate = _metric(_metrics.false_omission_rate)
    informedness = _metric(_metrics.informedness)
    markedness = _metric(_metrics.markedness)
    positive_likelihood_ratio = _metric(_metrics.positive_likelihood_ratio)
    negative_likelihood_ratio = _metric(_metrics.negative_likelihood_ratio)
    diagnostic_odds_ratio = _metric(_metrics.diagnostic_odds_ratio)
    cohen_kappa = _metric(_metrics.cohen_kappa)
    cohen_kappa_standard_error = _metric(_metrics.cohen_kappa_standard_error)
    scott_pi = _metric(_metrics.scott_pi)
    matthews_corrcoef = _metric(_metrics.matthews_corrcoef)
    ovr_matthews_corrcoef = _metric(_metrics.ovr_matthews_corrcoef)
    mutual_information = _metric(_metrics.mutual_information)
    normalized_mutual_information = _metric(_metrics.normalized_mutual_information)
    adjusted_rand_index = _metric(_metrics.adjusted_rand_index)
    accuracy_interval = _metric(_metrics.accuracy_interval)
    recall_interval = _metric(_metrics.recall_interval)
    precision_interval = _metric(_metrics.precision_interval)
    specificity_interval = _metric(_metrics.specificity_interval)
    negative_predictive_value_interval = _metric(_metrics.negative_predictive_value_interval)
    cohen_kappa_interval = _metric(_metrics.cohen_kappa_interval)


# The names of the metric views (each a function of metricstream.metrics of the same name).
_METRIC_METHODS = tuple(
    name for name, value in vars(ConfusionAccumulator).items() if isinstance(value, MetricView)
)


# ---------------------------------------------------------------------------- checks
def _check_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}.")
    return int(value)


def _check_ignore_index(value: Any) -> int | None:
    if value is None:
        return None
    ignore = _check_int(value, "ignore_index")
    if not _INT64_MIN <= ignore <= _INT64_MAX:
        raise ValueError(
            f"`ignore_index` must fit in int64 ([-2**63, 2**63 - 1]), got {ignore}; labels are "
            f"compared with it exactly."
        )
    return ignore


def _check_num_classes(value: Any) -> int:
    num_classes = _check_int(value, "num_classes")
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}.")
    if num_classes > 2**31:
        raise ValueError(f"`num_classes` must be at most 2**31, got {num_classes}.")
    return num_classes


def _check_threshold(value: Any, num_classes: int, logits: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"`threshold` must be a number or None, got {type(value).__name__} {value!r}."
        )
    threshold = float(value)
    if not math.isfinite(threshold):
        raise ValueError(f"`threshold` must be finite, got {value!r}.")
    if num_classes != 2:
        raise ValueError(
            f"`threshold` is for binary tasks (`num_classes=2`), but `num_classes` is "
            f"{num_classes}; multiclass scores are reduced by argmax."
        )
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(
            f"`threshold` is a probability in [0, 1], got {value!r}; for logits create the "
            f"accumulator with `logits=True` and give the threshold as a probability (0.5 is "
            f"a logit of 0)."
        )
    if threshold == 0.0 and not logits:
        warnings.warn(
            "`threshold=0.0` predicts every probability positive; the threshold is a "
            "probability: for logits cut at 0 create the accumulator with `logits=True` and "
            "`threshold=0.5`.",
            UserWarning,
            stacklevel=caller_stacklevel(),
        )
    return threshold


def _warn_probabilities() -> None:
    warnings.warn(
        "every binary score of this batch lies in [0, 1]: they look like probabilities, but "
        "the accumulator was created with `logits=True`, which compares them with the logit of "
        "`threshold`; create it without `logits=True` for probabilities.",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


def _check_counts(array: np.ndarray, target: np.ndarray) -> None:
    """Counts from outside: non-negative, finite, and within int64 for an int64 target."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError("holds NaN or infinite counts.")
    if (array < 0).any():
        position = tuple(int(i) for i in np.argwhere(array < 0)[0])
        raise ValueError(
            f"holds {array[position].item()!r} at {position}; counts are non-negative."
        )
    if target.dtype.kind == "i":
        too_large = (
            array >= 2.0**63
            if array.dtype.kind == "f"
            else (array > _INT64_MAX if array.dtype == np.uint64 else np.zeros(array.shape, bool))
        )
        if too_large.any():
            position = tuple(int(i) for i in np.argwhere(too_large)[0])
            raise ValueError(
                f"holds {array[position].item()!r} at {position}, beyond the int64 "
                f"counts (at most 2**63 - 1)."
            )


def _check_class_names(names: Sequence[str] | None, num_classes: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError("`class_names` must be a sequence of strings, got a single string.")
    names = tuple(names)
    if len(names) != num_classes:
        raise ValueError(
            f"`class_names` has {len(names)} names, but `num_classes` is {num_classes}."
        )
    for position, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(
                f"`class_names` holds {name!r} at position {position}; names must be strings."
            )
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"`class_names` holds {duplicate!r} more than once; names must be unique.")
    return names
