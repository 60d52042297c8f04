"""Keras 3: a confusion-matrix metric whose counters never wrap or stick, on every backend.

Install with ``pip install "metricstream[keras]"`` (Keras 3; the backend is Keras' own choice,
``KERAS_BACKEND``). :class:`ConfusionMetrics` is a ``keras.metrics.Metric``:

* ``update_state`` is pure ``keras.ops`` (traceable under ``jit_compile=True`` on JAX, and by
  ``torch.compile`` on the torch backend), counting the ``K x K`` confusion matrix with one
  ``segment_sum`` per batch;
* the counts are exact integers however many samples: each cell is two int32 words,
  ``count = high * 2**30 + low``, with the carry moved after every batch, so they hold up to
  ``2**61`` where a float32 counter sticks at ``2**24`` (16,777,216) and an int32 one wraps at
  ``2**31`` (JAX has no int64 unless ``jax_enable_x64``; the two words work everywhere);
* ``result()`` is a dict of scalars (accuracy, macro precision, recall and F1 over the classes
  present, as scikit-learn's ``labels=None``), computed in float32 for the progress bar;
* :meth:`~ConfusionMetrics.to_accumulator` hands the exact counts to a
  :class:`~metricstream.ConfusionAccumulator`, whose views (every metric, in float64, equal to
  scikit-learn), reports and intervals then apply; :meth:`~ConfusionMetrics.scalars` is its
  :func:`~metricstream.scalars.flat_scalars`.

A graph cannot raise, so labels outside ``[0, K)`` (other than ``ignore_index``) and sample
weights that are not whole numbers in ``[0, 2**24)`` are counted as invalid instead: ``result()``
is NaN from then on, and ``to_accumulator()`` raises ``ValueError`` saying how many there were.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .confusion.accumulator import logit_cut
from .scalars import flat_scalars

__all__ = ["ConfusionMetrics"]

INSTALL_HINT = 'pip install "metricstream[keras]"'

try:
    keras = importlib.import_module("keras")
except ImportError as _error:
    raise ImportError(
        f"metricstream.keras needs Keras 3, which is not installed; {INSTALL_HINT}."
    ) from _error
if not str(getattr(keras, "__version__", "0")).startswith("3"):
    raise ImportError(
        f"metricstream.keras needs Keras 3, found {keras.__version__}; {INSTALL_HINT}."
    )

ops = keras.ops

_SHIFT = 30
_BASE = 1 << _SHIFT  # low words stay below 2**30, so adding two of them cannot wrap int32
_CHUNK = 8
_SHIFTS = (0, 8, 16)  # sample weights are counted in three 8-bit chunks
_MAX_WEIGHT = 1 << 24  # whole numbers up to here are exact in float32


def _add(low: Any, high: Any, amount: Any, shift: int) -> tuple[Any, Any]:
    """``(high, low) += amount * 2**shift`` in base 2**30, for int32 ``0 <= amount < 2**31``.

    ``amount * 2**shift`` is split into whole units of 2**30 (added to ``high``) and a rest
    below 2**30 (added to ``low``, which stays below 2**31 before its carry moves up).
    """
    room = _SHIFT - shift
    high = high + amount // (1 << room)
    low = low + (amount % (1 << room)) * (1 << shift)
    carry = low // _BASE
    return low - carry * _BASE, high + carry


class ConfusionMetrics(keras.metrics.Metric):  # type: ignore[misc,name-defined]
    """Confusion-matrix metrics for ``model.compile(metrics=[...])``, exact and overflow-proof.

    Args:
        num_classes: ``K`` (>= 2).
        threshold: for ``K = 2`` with one score per sample (``(N,)`` or ``(N, 1)``): the
            probability at which a sample is class 1 (``score >= threshold``); a score outside
            [0, 1] is an invalid sample unless ``logits``.
        logits: binary scores are logits: class 1 where ``sigmoid(score) >= threshold``,
            decided exactly (as :class:`~metricstream.ConfusionAccumulator` with
            ``logits=True``).
        ignore_index: a label whose samples are skipped (e.g. segmentation's void label).
        class_names: names for :meth:`to_accumulator`'s reports.
        name: the metric's name; the result keys are ``<prefix><metric>``.
        prefix: ``f"{name}_"`` by default, e.g. ``confusion_f1_macro``.

    Inputs: ``y_true`` labels of any shape (or one-hot, ``(..., K)``); ``y_pred`` class scores
    ``(..., K)`` (argmax) or, binary, one score per sample; ``sample_weight`` whole numbers
    (repeat counts).

    Example:
        >>> metric = ConfusionMetrics(3)
        >>> metric.update_state([0, 1, 2, 2], [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1],
        ...                                    [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]])
        >>> round(float(metric.result()["confusion_accuracy"]), 4)
        0.75
        >>> metric.to_accumulator().confusion_matrix().tolist()
        [[1, 0, 0], [0, 1, 0], [1, 0, 1]]
    """

    def __init__(
        self,
        num_classes: int,
        *,
        threshold: float = 0.5,
        logits: bool = False,
        ignore_index: int | None = None,
        class_names: Sequence[str] | None = None,
        name: str = "confusion",
        prefix: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
            raise TypeError(f"`num_classes` must be an int, got {type(num_classes).__name__}.")
        if not 2 <= num_classes <= 46_340:  # K*K + 1 segment ids must fit int32
            raise ValueError(f"`num_classes` must be in [2, 46340], got {num_classes}.")
        if ignore_index is not None and 0 <= ignore_index < num_classes:
            raise ValueError(
                f"`ignore_index` is {ignore_index}, a class of the {num_classes}; pick a label "
                f"outside [0, {num_classes})."
            )
        self.num_classes = int(num_classes)
        threshold = float(threshold)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(
                f"`threshold` is a probability in [0, 1], got {threshold}; for logits give the "
                f"probability (0.5 for a logit of 0) and `logits=True`."
            )
        self.threshold = threshold
        self.logits = bool(logits)
        # The smallest float32 whose comparison decides as the threshold would on the exact
        # value (float16/bfloat16 scores are compared as float32, which holds them exactly).
        cut = logit_cut(threshold) if self.logits else threshold
        cut32 = np.float32(cut)
        if float(cut32) < cut:
            cut32 = np.nextafter(cut32, np.float32(np.inf))
        self._cut = float(cut32)
        self.ignore_index = ignore_index
        self.class_names = None if class_names is None else tuple(class_names)
        self.prefix = f"{name}_" if prefix is None else prefix
        cells = self.num_classes * self.num_classes
        self.low = self.add_variable((cells,), "zeros", dtype="int32", name="low")
        self.high = self.add_variable((cells,), "zeros", dtype="int32", name="high")
        self.invalid = self.add_variable((), "zeros", dtype="int32", name="invalid")

    def get_config(self) -> dict[str, Any]:
        config = dict(super().get_config())
        config.update(
            num_classes=self.num_classes,
            threshold=self.threshold,
            logits=self.logits,
            ignore_index=self.ignore_index,
            class_names=None if self.class_names is None else list(self.class_names),
            prefix=self.prefix,
        )
        return config

    # ------------------------------------------------------------------ counting (traced)
    def _labels(self, y_true: Any, y_pred: Any) -> tuple[Any, Any]:
        k = self.num_classes
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        if len(y_pred.shape) > 1 and y_pred.shape[-1] == k:
            pred = ops.argmax(y_pred, axis=-1)
            if len(y_true.shape) == len(y_pred.shape):
                # one-hot targets, or labels with a trailing axis of 1
                y_true = ops.argmax(y_true, axis=-1) if y_true.shape[-1] == k else y_true[..., 0]
        elif k == 2 and "float" in keras.backend.standardize_dtype(y_pred.dtype):
            scores = ops.cast(y_pred, "float32")
            pred = ops.cast(scores >= self._cut, "int32")
            if not self.logits:  # a probability outside [0, 1] (or NaN) is an invalid sample
                pred = ops.where((scores >= 0.0) & (scores <= 1.0), pred, -1)
            if len(pred.shape) == len(y_true.shape) + 1:
                pred = pred[..., 0]
        else:
            pred = y_pred
        return y_true, pred

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        k = self.num_classes
        cells = k * k
        true, pred = self._labels(y_true, y_pred)
        shape = ops.shape(true)
        true_f = ops.reshape(ops.cast(true, "float32"), (-1,))
        pred_f = ops.reshape(ops.cast(pred, "float32"), (-1,))
        # Labels are checked as floats: a fractional label is as invalid as one out of range.
        valid = (true_f >= 0) & (true_f < k) & (ops.floor(true_f) == true_f)
        valid = valid & (pred_f >= 0) & (pred_f < k) & (ops.floor(pred_f) == pred_f)
        if self.ignore_index is None:
            ignored = ops.zeros_like(valid)
        else:
            ignored = true_f == float(self.ignore_index)
        if sample_weight is not None:
            weight = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
            while len(weight.shape) < len(shape):  # (N,) weights of (N, H, W) labels
                weight = ops.expand_dims(weight, -1)
            weight = ops.reshape(ops.broadcast_to(weight, shape), (-1,))
            valid = valid & (ops.floor(weight) == weight) & (weight >= 0)
            valid = valid & (weight < _MAX_WEIGHT)
        good = valid & ~ignored
        bad = ~valid & ~ignored
        index = ops.where(good, ops.cast(true_f, "int32") * k + ops.cast(pred_f, "int32"), cells)
        low, high = self.low.value, self.high.value
        if sample_weight is None:
            counts = ops.segment_sum(ops.cast(good, "int32"), index, num_segments=cells + 1)
            low, high = _add(low, high, counts[:cells], 0)
        else:
            # Whole weights up to 2**24 in three 8-bit chunks: a chunk's sum over a batch of
            # fewer than 2**23 elements fits int32, and each is added with its shift.
            units = ops.cast(ops.where(good, weight, 0.0), "int32")
            chunks = ops.stack([(units // (1 << s)) % (1 << _CHUNK) for s in _SHIFTS], axis=1)
            sums = ops.segment_sum(chunks, index, num_segments=cells + 1)
            for column, shift in enumerate(_SHIFTS):
                low, high = _add(low, high, sums[:cells, column], shift)
        self.low.assign(low)
        self.high.assign(high)
        flagged = self.invalid.value + ops.sum(ops.cast(bad, "int32"))
        self.invalid.assign(ops.minimum(flagged, _BASE))

    # ------------------------------------------------------------------ views
    def _matrix_float(self) -> Any:
        high = ops.cast(self.high.value, "float32")
        low = ops.cast(self.low.value, "float32")
        return ops.reshape(high * float(_BASE) + low, (self.num_classes, self.num_classes))

    def result(self) -> dict[str, Any]:
        matrix = self._matrix_float()
        tp = ops.diagonal(matrix)
        support = ops.sum(matrix, axis=1)
        predicted = ops.sum(matrix, axis=0)
        total = ops.sum(support)
        present = ops.cast((support + predicted) > 0, "float32")
        classes = ops.maximum(ops.sum(present), 1.0)

        def ratio(num: Any, den: Any) -> Any:  # 0/0 -> 0, as scikit-learn's default
            return ops.where(den > 0, num / ops.maximum(den, 1.0), 0.0)

        nan = ops.cast(float("nan"), "float32")
        invalid = self.invalid.value > 0
        values = {
            "num_samples": total,
            "accuracy": ratio(ops.sum(tp), total),
            "precision_macro": ops.sum(ratio(tp, predicted) * present) / classes,
            "recall_macro": ops.sum(ratio(tp, support) * present) / classes,
            "f1_macro": ops.sum(ratio(2.0 * tp, support + predicted) * present) / classes,
        }
        return {
            f"{self.prefix}{key}": ops.where(invalid, nan, value) for key, value in values.items()
        }

    def reset_state(self) -> None:
        cells = self.num_classes * self.num_classes
        self.low.assign(ops.zeros((cells,), dtype="int32"))
        self.high.assign(ops.zeros((cells,), dtype="int32"))
        self.invalid.assign(ops.zeros((), dtype="int32"))

    def counts(self) -> np.ndarray:
        """The exact ``K x K`` int64 counts (eager)."""
        invalid = int(ops.convert_to_numpy(self.invalid.value))
        if invalid:
            raise ValueError(
                f"{invalid:,} samples had a label outside [0, {self.num_classes}) (other than "
                f"ignore_index={self.ignore_index}), a binary probability outside [0, 1] (give "
                f"`logits=True` for logits), or a sample weight that is not a whole number in "
                f"[0, 2**24); they were not counted and the metrics are NaN. Fix the inputs "
                f"and call reset_state()."
            )
        high = ops.convert_to_numpy(self.high.value).astype(np.int64)
        low = ops.convert_to_numpy(self.low.value).astype(np.int64)
        return ((high << _SHIFT) + low).reshape(self.num_classes, self.num_classes)

    def to_accumulator(self) -> Any:
        """A :class:`~metricstream.ConfusionAccumulator` holding the exact counts (eager)."""
        from metricstream import ConfusionAccumulator

        return ConfusionAccumulator.from_matrix(self.counts(), class_names=self.class_names)

    def scalars(self, prefix: str | None = None, **options: Any) -> dict[str, float]:
        """:func:`~metricstream.scalars.flat_scalars` of :meth:`to_accumulator`: float64,
        equal to scikit-learn (eager)."""
        return flat_scalars(
            self.to_accumulator(), self.prefix if prefix is None else prefix, **options
        )
