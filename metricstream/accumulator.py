"""The streaming confusion-matrix accumulator.

It holds one K×K matrix (rows: true class, columns: predicted class) and delegates every metric to
the plain functions of :mod:`metricstream.metrics`. Counting happens in Numba kernels
(:mod:`metricstream._kernels`) through :mod:`metricstream._dispatch`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import metrics as _metrics
from . import report as _report
from . import serialization as _serialization
from ._dispatch import count_batch
from ._inputs import as_array, prepare_batch
from .metrics._averaging import Average
from .metrics._zero_division import ZeroDivision
from .metrics.agreement import KappaWeights
from .metrics.counts import ClassCounts, Normalize

# Version of the pickled state (the layout of ``state_dict``), owned by metricstream.serialization.
STATE_FORMAT = _serialization.STATE_FORMAT

LabelsArg = Sequence[int | str] | np.ndarray | None


class ConfusionAccumulator:
    """A K×K confusion matrix accumulated over a stream of batches, with lazy metric views.

    ``update`` counts a batch through a Numba kernel straight into the matrix (no O(N)
    temporaries); metrics are computed only when asked, in O(K²) whatever the number of samples,
    and cached until the next ``update``/``merge``/``reset``.

    Invariants (each is tested):

    * any split of a stream into batches gives the same matrix as one ``update``;
    * ``merge`` is associative and commutative; merging an empty accumulator changes nothing;
    * a failed ``update`` or ``merge`` raises and leaves the accumulator exactly as it was;
    * ``update``, ``merge`` and ``reset`` return ``self``; ``a + b`` returns a new accumulator;
    * concurrent ``update`` calls from several threads lose no count.

    Args:
        num_classes: K, the number of classes; labels are integers in ``[0, K)``.
        class_names: optional K unique names, used in reports and accepted in ``labels``.
        ignore_index: a true label whose samples are skipped (e.g. 255 in segmentation masks);
            it may lie inside or outside ``[0, K)``.
        weighted: count in float64 so that ``weights`` may be fractional. By default counts
            are exact int64, and ``weights``, if given, must be whole numbers.
        class_axis: the axis of ``y_pred`` holding class scores when ``y_pred`` has one more
            dimension than ``y_true`` (1, PyTorch's ``(N, C, ...)`` layout, by default; -1 for
            channels-last).

    Example:
        >>> acc = ConfusionAccumulator(num_classes=3)
        >>> acc.update([0, 1, 2, 2], [0, 2, 2, 2]).accuracy()
        0.75
        >>> acc.update([1, 1], [1, 1]).recall(average="macro")
        0.8888888888888888
    """

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        *,
        weighted: bool = False,
        class_axis: int = 1,
    ) -> None:
        self._num_classes = _check_num_classes(num_classes)
        self._class_names = _check_class_names(class_names, self._num_classes)
        self._ignore_index = _check_optional_int(ignore_index, "ignore_index")
        if not isinstance(weighted, (bool, np.bool_)):
            raise TypeError(f"`weighted` must be True or False, got {weighted!r}.")
        self._weighted = bool(weighted)
        self._class_axis = _check_int(class_axis, "class_axis")
        dtype = np.float64 if self._weighted else np.int64
        self._matrix = np.zeros((self._num_classes, self._num_classes), dtype=dtype)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._counts: ClassCounts | None = None
        self._views: dict[Any, Any] = {}

    # ------------------------------------------------------------------ configuration
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

    # ------------------------------------------------------------------ state
    @property
    def matrix(self) -> np.ndarray:
        """The K×K matrix as a read-only view (rows true, columns predicted).

        It reflects later updates; use ``acc.matrix.copy()`` to keep a snapshot.
        """
        view = self._matrix.view()
        view.flags.writeable = False
        return view

    @property
    def num_samples(self) -> int | float:
        """N: samples counted so far (total weight for a weighted accumulator)."""
        total = self._class_counts().total
        return float(total) if self._weighted else int(total)

    def update(self, y_true: Any, y_pred: Any, weights: Any = None) -> ConfusionAccumulator:
        """Count a batch and return ``self``.

        Args:
            y_true: true labels, any shape (e.g. ``(N,)`` or ``(B, H, W)`` masks), any integer
                dtype, or floats holding whole numbers. Numpy arrays, lists, and objects with
                ``__dlpack__``/``__array__`` (CPU torch tensors) are read without copying.
            y_pred: predicted labels of the same shape, or scores/logits with one more
                dimension (classes on ``class_axis``), whose argmax is taken inside the kernel.
            weights: optional non-negative finite weights of ``y_true``'s shape (whole numbers
                unless the accumulator is ``weighted``).

        Raises:
            TypeError: non-numeric input.
            ValueError: mismatched shapes, a label outside ``[0, K)`` (other than
                ``ignore_index``), a negative, NaN or fractional label, a bad weight, or a NaN
                score. The message names the argument, the value and its position, and the
                accumulator is left exactly as it was.
        """
        batch = prepare_batch(y_true, y_pred, weights, self._num_classes, self._class_axis)
        with self._lock:
            count_batch(self._matrix, batch, self._ignore_index)
            self._changed()
        return self

    def merge(self, other: ConfusionAccumulator) -> ConfusionAccumulator:
        """Add ``other``'s counts to this accumulator in place and return ``self``.

        Merging is exact, associative and commutative; merging an empty accumulator changes
        nothing. Both must agree on ``num_classes``, ``class_names``, ``ignore_index`` and
        ``weighted``; otherwise a ``ValueError`` names the difference and nothing changes.
        """
        if not isinstance(other, ConfusionAccumulator):
            raise TypeError(
                f"can only merge a ConfusionAccumulator, got {type(other).__name__}."
            )
        self._check_compatible(other)
        if other is self:
            with self._lock:
                self._matrix += self._matrix.copy()
                self._changed()
            return self
        # Lock in a global order so that a.merge(b) and b.merge(a) in two threads cannot deadlock.
        first, second = sorted((self, other), key=id)
        with first._lock, second._lock:
            np.add(self._matrix, other._matrix, out=self._matrix)
            self._changed()
        return self

    def reset(self) -> ConfusionAccumulator:
        """Set every count to zero and return ``self`` (the configuration is kept)."""
        with self._lock:
            self._matrix[...] = 0
            self._changed()
        return self

    def copy(self) -> ConfusionAccumulator:
        """An independent accumulator with the same configuration and counts."""
        new = self._empty_like()
        with self._lock:
            new._matrix[...] = self._matrix
        return new

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> ConfusionAccumulator:
        return self.copy()

    def __add__(self, other: ConfusionAccumulator) -> ConfusionAccumulator:
        if not isinstance(other, ConfusionAccumulator):
            return NotImplemented
        return self.copy().merge(other)

    def __radd__(self, other: Any) -> ConfusionAccumulator:
        # ``sum(accumulators)`` starts from 0.
        if isinstance(other, int) and other == 0:
            return self.copy()
        return NotImplemented

    def __iadd__(self, other: ConfusionAccumulator) -> ConfusionAccumulator:
        if not isinstance(other, ConfusionAccumulator):
            return NotImplemented
        return self.merge(other)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfusionAccumulator):
            return NotImplemented
        return self._config() == other._config() and np.array_equal(self._matrix, other._matrix)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = [f"num_classes={self._num_classes}", f"num_samples={self.num_samples}"]
        if self._weighted:
            parts.append("weighted=True")
        if self._ignore_index is not None:
            parts.append(f"ignore_index={self._ignore_index}")
        if self._class_names is not None:
            parts.append(f"class_names={list(self._class_names)}")
        return f"ConfusionAccumulator({', '.join(parts)})"

    def __getstate__(self) -> dict[str, Any]:
        return _serialization.state_dict(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Validates, and upgrades states pickled by earlier format versions.
        _serialization.restore(self, state)

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
    ) -> ConfusionAccumulator:
        """A new accumulator holding one batch: the metrics of that batch alone.

        Example:
            >>> ConfusionAccumulator.from_batch([0, 1, 1], [0, 1, 0], num_classes=2).accuracy()
            0.6666666666666666
        """
        acc = cls(num_classes, class_names, ignore_index, weighted=weighted,
                  class_axis=class_axis)
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
        """
        array = _metrics.counts.check_matrix(as_array(matrix, "matrix"))
        if weighted is None:
            weighted = array.dtype.kind == "f" and not np.array_equal(array, np.round(array))
        acc = cls(array.shape[0], class_names, ignore_index, weighted=weighted)
        if not weighted and array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):
            raise ValueError(
                "`matrix` holds fractional counts; pass `weighted=True` to keep them."
            )
        acc._matrix[...] = array
        return acc

    # ------------------------------------------------------------------ metric views
    def class_counts(self) -> ClassCounts:
        """The cached per-class reductions (TP, AP, PP, N) every metric is built from."""
        return self._class_counts()

    def confusion_matrix(self, normalize: Normalize = None) -> np.ndarray:
        """The matrix as a new array; ``normalize`` is None, "true", "pred" or "all".

        See :func:`metricstream.metrics.normalize_confusion_matrix`.
        """
        return self._view(_metrics.normalize_confusion_matrix, normalize=normalize)

    def true_positives(self) -> np.ndarray:
        """``TP_i = C_ii`` per class."""
        return self._view(_metrics.true_positives)

    def false_positives(self) -> np.ndarray:
        """``FP_i = PP_i - TP_i`` per class."""
        return self._view(_metrics.false_positives)

    def false_negatives(self) -> np.ndarray:
        """``FN_i = AP_i - TP_i`` per class."""
        return self._view(_metrics.false_negatives)

    def true_negatives(self) -> np.ndarray:
        """``TN_i = N - AP_i - PP_i + TP_i`` per class."""
        return self._view(_metrics.true_negatives)

    def support(self) -> np.ndarray:
        """Actual positives ``AP_i`` (row sums) per class."""
        return self._view(_metrics.support)

    def predicted_positives(self) -> np.ndarray:
        """Predicted positives ``PP_i`` (column sums) per class."""
        return self._view(_metrics.predicted_positives)

    def accuracy(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Overall accuracy ``sum_i TP_i / N``; see :func:`metricstream.metrics.accuracy`."""
        return self._view(_metrics.accuracy, zero_division=zero_division)

    def balanced_accuracy(self, adjusted: bool = False, *,
                          zero_division: ZeroDivision = "warn") -> float:
        """Average accuracy (mean recall over present classes); see
        :func:`metricstream.metrics.balanced_accuracy`."""
        return self._view(_metrics.balanced_accuracy, adjusted=adjusted,
                          zero_division=zero_division)

    def ovr_accuracy(self, average: Average = None, *,
                     zero_division: ZeroDivision = "warn") -> float | np.ndarray:
        """One-vs-rest accuracy ``(TP_i + TN_i) / N``; see
        :func:`metricstream.metrics.ovr_accuracy`."""
        return self._view(_metrics.ovr_accuracy, average=average, zero_division=zero_division)

    def precision(self, average: Average = None, labels: LabelsArg = None,
                  zero_division: ZeroDivision = "warn",
                  ignore_absent: bool = False) -> float | np.ndarray:
        """Precision ``TP_i / PP_i``; see :func:`metricstream.metrics.precision`."""
        return self._view(_metrics.precision, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def recall(self, average: Average = None, labels: LabelsArg = None,
               zero_division: ZeroDivision = "warn",
               ignore_absent: bool = False) -> float | np.ndarray:
        """Recall ``TP_i / AP_i``; see :func:`metricstream.metrics.recall`."""
        return self._view(_metrics.recall, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def f1(self, average: Average = None, labels: LabelsArg = None,
           zero_division: ZeroDivision = "warn",
           ignore_absent: bool = False) -> float | np.ndarray:
        """F1 ``2 TP_i / (AP_i + PP_i)``; see :func:`metricstream.metrics.f1`."""
        return self._view(_metrics.f1, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def fbeta(self, beta: float, average: Average = None, labels: LabelsArg = None,
              zero_division: ZeroDivision = "warn",
              ignore_absent: bool = False) -> float | np.ndarray:
        """F-beta ``(1 + beta²) TP_i / (beta² AP_i + PP_i)``; see
        :func:`metricstream.metrics.fbeta`."""
        return self._view(_metrics.fbeta, beta, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def precision_recall_fscore_support(self, beta: float = 1.0, average: Average = None,
                                        labels: LabelsArg = None,
                                        zero_division: ZeroDivision = "warn") -> tuple:
        """``(precision, recall, fbeta, support)``, as scikit-learn's function of that name."""
        return self._view(_metrics.precision_recall_fscore_support, beta=beta, average=average,
                          labels=self._labels(labels), zero_division=zero_division)

    def jaccard(self, average: Average = None, labels: LabelsArg = None,
                zero_division: ZeroDivision = "warn",
                ignore_absent: bool = False) -> float | np.ndarray:
        """Jaccard index / IoU ``TP_i / (AP_i + PP_i - TP_i)``; see
        :func:`metricstream.metrics.jaccard`."""
        return self._view(_metrics.jaccard, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def miou(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Segmentation mIoU over classes present in truth or prediction; see
        :func:`metricstream.metrics.miou`."""
        return self._view(_metrics.miou, zero_division=zero_division)

    def cohen_kappa(self, weights: KappaWeights = None, *,
                    zero_division: ZeroDivision = "warn") -> float:
        """Cohen's kappa, optionally "linear"/"quadratic" weighted; see
        :func:`metricstream.metrics.cohen_kappa`."""
        return self._view(_metrics.cohen_kappa, weights=weights, zero_division=zero_division)

    def matthews_corrcoef(self, *, zero_division: float = 0.0) -> float:
        """Multiclass Matthews correlation coefficient; see
        :func:`metricstream.metrics.matthews_corrcoef`."""
        return self._view(_metrics.matthews_corrcoef, zero_division=zero_division)

    # -- issue 4: more metric views and reports (metricstream.metrics, metricstream.report)
    def specificity(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """Specificity (TNR) ``TN_i / (N - AP_i)``; see :func:`metricstream.metrics.specificity`."""
        return self._view(_metrics.specificity, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def negative_predictive_value(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """Negative predictive value ``TN_i / (N - PP_i)``; see
        :func:`metricstream.metrics.negative_predictive_value`."""
        return self._view(_metrics.negative_predictive_value,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def false_positive_rate(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """False positive rate ``FP_i / (N - AP_i)``; see
        :func:`metricstream.metrics.false_positive_rate`."""
        return self._view(_metrics.false_positive_rate,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def false_negative_rate(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """False negative rate ``FN_i / AP_i``; see
        :func:`metricstream.metrics.false_negative_rate`."""
        return self._view(_metrics.false_negative_rate,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def false_discovery_rate(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """False discovery rate ``FP_i / PP_i``; see
        :func:`metricstream.metrics.false_discovery_rate`."""
        return self._view(_metrics.false_discovery_rate,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def false_omission_rate(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """False omission rate ``FN_i / (N - PP_i)``; see
        :func:`metricstream.metrics.false_omission_rate`."""
        return self._view(_metrics.false_omission_rate,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def informedness(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """Informedness (Youden's J) ``TPR_i + TNR_i - 1``; see
        :func:`metricstream.metrics.informedness`."""
        return self._view(_metrics.informedness, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def markedness(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """Markedness ``PPV_i + NPV_i - 1``; see :func:`metricstream.metrics.markedness`."""
        return self._view(_metrics.markedness, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def dice(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """Dice ``2 TP_i / (AP_i + PP_i)`` (= F1); see :func:`metricstream.metrics.dice`."""
        return self._view(_metrics.dice, average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def ovr_matthews_corrcoef(
        self, average: Average = None, labels: LabelsArg = None,
        zero_division: ZeroDivision = "warn", ignore_absent: bool = False,
    ) -> float | np.ndarray:
        """One-vs-rest MCC per class; see :func:`metricstream.metrics.ovr_matthews_corrcoef`."""
        return self._view(_metrics.ovr_matthews_corrcoef,
                          average=average, labels=self._labels(labels),
                          zero_division=zero_division, ignore_absent=ignore_absent)

    def positive_likelihood_ratio(
        self, labels: LabelsArg = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Positive likelihood ratio ``TPR_i / FPR_i`` per class; see
        :func:`metricstream.metrics.positive_likelihood_ratio`."""
        return self._view(_metrics.positive_likelihood_ratio, labels=self._labels(labels),
                          zero_division=zero_division)

    def negative_likelihood_ratio(
        self, labels: LabelsArg = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Negative likelihood ratio ``FNR_i / TNR_i`` per class; see
        :func:`metricstream.metrics.negative_likelihood_ratio`."""
        return self._view(_metrics.negative_likelihood_ratio, labels=self._labels(labels),
                          zero_division=zero_division)

    def diagnostic_odds_ratio(
        self, labels: LabelsArg = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Diagnostic odds ratio ``TP_i TN_i / (FP_i FN_i)`` per class; see
        :func:`metricstream.metrics.diagnostic_odds_ratio`."""
        return self._view(_metrics.diagnostic_odds_ratio, labels=self._labels(labels),
                          zero_division=zero_division)

    def prevalence(
        self, labels: LabelsArg = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Prevalence ``AP_i / N`` per class; see :func:`metricstream.metrics.prevalence`."""
        return self._view(_metrics.prevalence, labels=self._labels(labels),
                          zero_division=zero_division)

    def fwiou(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Frequency-weighted IoU ``sum_i (AP_i / N) IoU_i``; see
        :func:`metricstream.metrics.fwiou`."""
        return self._view(_metrics.fwiou, zero_division=zero_division)

    def hamming_loss(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Hamming loss ``1 - accuracy``; see :func:`metricstream.metrics.hamming_loss`."""
        return self._view(_metrics.hamming_loss, zero_division=zero_division)

    def scott_pi(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Scott's pi (chance from pooled marginals); see :func:`metricstream.metrics.scott_pi`."""
        return self._view(_metrics.scott_pi, zero_division=zero_division)

    def cohen_kappa_standard_error(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Standard error of unweighted Cohen's kappa; see
        :func:`metricstream.metrics.cohen_kappa_standard_error`."""
        return self._view(_metrics.cohen_kappa_standard_error, zero_division=zero_division)

    def mutual_information(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Mutual information of truth and prediction (nats); see
        :func:`metricstream.metrics.mutual_information`."""
        return self._view(_metrics.mutual_information, zero_division=zero_division)

    def adjusted_rand_index(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Adjusted Rand index of truth and prediction; see
        :func:`metricstream.metrics.adjusted_rand_index`."""
        return self._view(_metrics.adjusted_rand_index, zero_division=zero_division)

    def zero_one_loss(self, normalize: bool = True, *,
                      zero_division: ZeroDivision = "warn") -> float:
        """Zero-one loss: ``1 - accuracy``, or the misclassified count with
        ``normalize=False``; see :func:`metricstream.metrics.zero_one_loss`."""
        return self._view(_metrics.zero_one_loss, normalize=normalize,
                          zero_division=zero_division)

    def normalized_mutual_information(self, average_method: str = "arithmetic", *,
                                      zero_division: ZeroDivision = "warn") -> float:
        """MI over the mean entropy of truth and prediction; see
        :func:`metricstream.metrics.normalized_mutual_information`."""
        return self._view(_metrics.normalized_mutual_information,
                          average_method=average_method, zero_division=zero_division)

    # confidence intervals: (low, high), clipped; see metricstream.metrics.intervals
    def accuracy_interval(self, method: str = "wilson", confidence: float = 0.95, *,
                          z: float | None = None) -> tuple[float, float]:
        """Confidence interval for accuracy (Wilson by default); see
        :func:`metricstream.metrics.accuracy_interval`."""
        return self._view(_metrics.accuracy_interval, method=method, confidence=confidence,
                          z=z)

    def recall_interval(
        self, method: str = "wilson", confidence: float = 0.95, labels: LabelsArg = None,
        *, z: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-class confidence intervals for recall ``TP_i / AP_i``; see
        :func:`metricstream.metrics.recall_interval`."""
        return self._view(_metrics.recall_interval, labels=self._labels(labels),
                          method=method, confidence=confidence, z=z)

    def precision_interval(
        self, method: str = "wilson", confidence: float = 0.95, labels: LabelsArg = None,
        *, z: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-class confidence intervals for precision ``TP_i / PP_i``; see
        :func:`metricstream.metrics.precision_interval`."""
        return self._view(_metrics.precision_interval, labels=self._labels(labels),
                          method=method, confidence=confidence, z=z)

    def specificity_interval(
        self, method: str = "wilson", confidence: float = 0.95, labels: LabelsArg = None,
        *, z: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-class confidence intervals for specificity ``TN_i / (N - AP_i)``; see
        :func:`metricstream.metrics.specificity_interval`."""
        return self._view(_metrics.specificity_interval, labels=self._labels(labels),
                          method=method, confidence=confidence, z=z)

    def negative_predictive_value_interval(
        self, method: str = "wilson", confidence: float = 0.95, labels: LabelsArg = None,
        *, z: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-class confidence intervals for NPV ``TN_i / (N - PP_i)``; see
        :func:`metricstream.metrics.negative_predictive_value_interval`."""
        return self._view(_metrics.negative_predictive_value_interval, labels=self._labels(labels),
                          method=method, confidence=confidence, z=z)

    def cohen_kappa_interval(self, confidence: float = 0.95, *, z: float | None = None,
                             zero_division: ZeroDivision = "warn") -> tuple[float, float]:
        """``kappa ± z SE`` for unweighted Cohen's kappa; see
        :func:`metricstream.metrics.cohen_kappa_interval`."""
        return self._view(_metrics.cohen_kappa_interval, confidence=confidence, z=z,
                          zero_division=zero_division)

    # reports (metricstream.report)
    def classification_report(self, digits: int = 2, labels: LabelsArg = None,
                              target_names: Sequence[str] | None = None,
                              output_dict: bool = False,
                              zero_division: ZeroDivision = "warn") -> str | dict:
        """scikit-learn's ``classification_report``, character for character; class names
        (if set) are the default ``target_names``. See
        :func:`metricstream.report.classification_report`."""
        indices = self._labels(labels)
        if target_names is None and self._class_names is not None:
            shown = _metrics.counts.label_indices(indices, self._num_classes)
            if shown is None:
                shown = _report._present_labels(self._class_counts())
            target_names = [self._class_names[i] for i in shown]
        report = self._view(_report.classification_report, digits=digits, labels=indices,
                            target_names=None if target_names is None else tuple(target_names),
                            output_dict=output_dict, zero_division=zero_division)
        return copy.deepcopy(report)  # a cached dict must not be mutated by the caller

    def summary(self, format: str = "dict", *, zero_division: ZeroDivision = "warn",
                digits: int = 4) -> dict | str:
        """Overall and per-class metrics: ``format="dict"`` (JSON-ready), ``"text"`` or
        ``"markdown"``; see :func:`metricstream.report.summary`. ``digits`` applies to text
        and markdown."""
        if format == "dict":
            return copy.deepcopy(self._view(_report.summary, class_names=self._class_names,
                                            zero_division=zero_division))
        if format == "text":
            return self._view(_report.summary_text, class_names=self._class_names,
                              zero_division=zero_division, digits=digits)
        if format == "markdown":
            return self._view(_report.summary_markdown, class_names=self._class_names,
                              zero_division=zero_division, digits=digits)
        raise ValueError(f"`format` must be 'dict', 'text' or 'markdown', got {format!r}.")

    def _repr_html_(self) -> str:
        """The summary as an HTML table, for Jupyter (undefined values show as "–")."""
        return self._view(_report.summary_html, class_names=self._class_names)

    # ------------------------------------------------------------------ durable state
    # Thin wrappers around metricstream.serialization (formats, versions and checks live there).
    def state_dict(self) -> dict[str, Any]:
        """Configuration, ``matrix`` (a copy) and ``format`` as a plain dict (what pickle stores).

        Example:
            >>> acc = ConfusionAccumulator(2).update([0, 1], [1, 1])
            >>> ConfusionAccumulator.from_state_dict(acc.state_dict()) == acc
            True
        """
        return _serialization.state_dict(self)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ConfusionAccumulator:
        """A new accumulator from ``state_dict()`` output of this or an earlier format version."""
        return _serialization.from_state_dict(state, cls)

    def to_bytes(self) -> bytes:
        """A versioned, checksummed blob; see :func:`metricstream.serialization.to_bytes`."""
        return _serialization.to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> ConfusionAccumulator:
        """Read ``to_bytes()`` output; corrupt, truncated, foreign or newer data: ValueError."""
        return _serialization.from_bytes(data, cls)

    def save(self, path: Any) -> Any:
        """Write ``to_bytes()`` to ``path`` atomically (temporary file, fsync, rename)."""
        return _serialization.save(self, path)

    @classmethod
    def load(cls, path: Any) -> ConfusionAccumulator:
        """Read a file written by ``save`` (any earlier format version included)."""
        return _serialization.load(path, cls)

    # ------------------------------------------------------------------ plots
    # Thin wrappers around metricstream.plotting (matplotlib is optional and imported there).
    def plot(self, normalize: Normalize = None, ax: Any = None,
             class_names: Sequence[str] | None = None, annotate: bool | None = None,
             **kwargs: Any) -> Any:
        """Draw the matrix as a heatmap with a colour bar and return the matplotlib ``Axes``.

        ``normalize`` is None (counts), "true", "pred" or "all"; ``class_names`` default to the
        accumulator's; ``annotate`` (default: when K <= 20) writes each cell's value. Needs
        matplotlib (``pip install "metricstream[plot]"``); see
        :func:`metricstream.plotting.plot_confusion_matrix` for the other keywords.
        ``acc.plot().figure.savefig("confusion.png")`` writes a PNG.
        """
        from . import plotting

        return plotting.plot_confusion_matrix(
            self.matrix, normalize=normalize, ax=ax, annotate=annotate,
            class_names=class_names if class_names is not None else self._class_names, **kwargs)

    def plot_per_class(self, metrics: Sequence[str] = ("precision", "recall", "f1", "iou"),
                       ax: Any = None, class_names: Sequence[str] | None = None,
                       **kwargs: Any) -> Any:
        """Grouped bars of per-class precision, recall, F1 and IoU; returns the ``Axes``.

        See :func:`metricstream.plotting.plot_per_class`.
        """
        from . import plotting

        return plotting.plot_per_class(
            self.matrix, metrics=metrics, ax=ax,
            class_names=class_names if class_names is not None else self._class_names, **kwargs)

    # ------------------------------------------------------------------ internals
    def _config(self) -> dict[str, Any]:
        return {
            "num_classes": self._num_classes,
            "class_names": None if self._class_names is None else list(self._class_names),
            "ignore_index": self._ignore_index,
            "weighted": self._weighted,
            "class_axis": self._class_axis,
        }

    def _empty_like(self) -> ConfusionAccumulator:
        return ConfusionAccumulator(self._num_classes, self._class_names, self._ignore_index,
                                    weighted=self._weighted, class_axis=self._class_axis)

    def _check_compatible(self, other: ConfusionAccumulator) -> None:
        for field in ("num_classes", "class_names", "ignore_index", "weighted"):
            mine, theirs = getattr(self, field), getattr(other, field)
            if mine != theirs:
                raise ValueError(
                    f"cannot merge accumulators with different `{field}`: {mine!r} here, "
                    f"{theirs!r} in the other; merged shards must be configured alike."
                )

    def _changed(self) -> None:
        self._version += 1
        self._counts = None
        self._views.clear()

    def _class_counts(self) -> ClassCounts:
        counts = self._counts
        if counts is None:
            with self._lock:
                counts = ClassCounts.from_matrix(self._matrix, validate=False)
                self._counts = counts
        return counts

    def _view(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Compute ``function(counts, ...)``, cached until the state changes.

        Results that may warn (``zero_division="warn"``) are recomputed (O(K)) each call so the
        warning is repeated, as scikit-learn repeats it.
        """
        cacheable = kwargs.get("zero_division", None) != "warn"
        key = (function.__name__, args, tuple(kwargs.items()))
        if cacheable:
            try:
                hit = self._views.get(key)
            except TypeError:  # unhashable argument, e.g. a kappa weight matrix
                cacheable = False
            else:
                if hit is not None:
                    return _fresh(hit)
        version = self._version
        value = function(self._class_counts(), *args, **kwargs)
        # A concurrent update may have landed while computing; never cache a stale value.
        if cacheable and version == self._version:
            self._views[key] = value
            return _fresh(value)
        return value

    def _labels(self, labels: LabelsArg) -> tuple[int, ...] | None:
        if labels is None:
            return None
        if isinstance(labels, (str, int, np.integer)):
            labels = [labels]  # type: ignore[list-item]
        indices = []
        for position, label in enumerate(labels):  # type: ignore[union-attr]
            if isinstance(label, str):
                if self._class_names is None or label not in self._class_names:
                    known = "this accumulator has no `class_names`" if self._class_names is None \
                        else f"known names: {list(self._class_names)}"
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


def _fresh(value: Any) -> Any:
    """Copy cached arrays so callers cannot modify the cache."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    return value


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}.")
    return int(value)


def _check_optional_int(value: Any, name: str) -> int | None:
    return None if value is None else _check_int(value, name)


def _check_num_classes(value: Any) -> int:
    num_classes = _check_int(value, "num_classes")
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}.")
    return num_classes


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
