"""Per-class counts read off a confusion matrix, and the normalized matrices.

Notation used in every docstring of :mod:`metricstream.metrics` (rows are true classes, columns
predicted classes, ``C`` is the K×K matrix):

* ``N = sum_ij C_ij`` (number of samples, or total weight)
* ``TP_i = C_ii``
* ``AP_i = sum_j C_ij`` actual positives (support, ``TP_i + FN_i``)
* ``PP_i = sum_j C_ji`` predicted positives (``TP_i + FP_i``)
* ``FP_i = PP_i - TP_i``, ``FN_i = AP_i - TP_i``, ``TN_i = N - AP_i - PP_i + TP_i``
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import numpy as np

MatrixLike = Union[np.ndarray, "ClassCounts", Sequence[Sequence[float]]]
Labels = Sequence[int] | np.ndarray | None


@dataclass(frozen=True)
class ClassCounts:
    """The O(K²) reductions of a confusion matrix that every metric is built from.

    Computing this object is the only O(K²) step of most metrics, so an accumulator caches it
    until its state changes, and every function in :mod:`metricstream.metrics` accepts it in place
    of a matrix.
    """

    matrix: np.ndarray
    true_positives: np.ndarray
    actual_positives: np.ndarray
    predicted_positives: np.ndarray
    total: Any
    # O(K²) intermediates shared by several metrics (e.g. the mutual information behind both MI
    # and NMI), computed at most once per state because an accumulator caches this object.
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_matrix(cls, matrix: Any, *, validate: bool = True) -> ClassCounts:
        """Reduce ``matrix``; ``validate=False`` skips the O(K²) checks for trusted matrices."""
        if validate:
            matrix = check_matrix(matrix)
        actual = matrix.sum(axis=1)
        predicted = matrix.sum(axis=0)
        return cls(
            matrix=matrix,
            true_positives=np.diagonal(matrix).copy(),
            actual_positives=actual,
            predicted_positives=predicted,
            total=actual.sum(),
        )

    @property
    def num_classes(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def false_positives(self) -> np.ndarray:
        return self.predicted_positives - self.true_positives

    @property
    def false_negatives(self) -> np.ndarray:
        return self.actual_positives - self.true_positives

    @property
    def true_negatives(self) -> np.ndarray:
        return self.total - self.actual_positives - self.predicted_positives + self.true_positives


def check_matrix(matrix: Any) -> np.ndarray:
    """Validate a user-supplied confusion matrix: square, numeric, finite and non-negative."""
    if isinstance(matrix, ClassCounts):
        return matrix.matrix
    array = np.asarray(matrix)
    if array.dtype.kind not in "iuf" and array.dtype.kind != "b":
        raise TypeError(f"`matrix` must hold numbers, got dtype {array.dtype}.")
    if array.ndim != 2 or array.shape[0] != array.shape[1] or array.shape[0] == 0:
        raise ValueError(f"`matrix` must be a non-empty square K×K array, got shape {array.shape}.")
    if array.dtype.kind == "b":
        array = array.astype(np.int64)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(f"`matrix` holds {array[bad]!r} at position {bad}; counts must be finite.")
    if (array < 0).any():
        bad = tuple(int(i) for i in np.argwhere(array < 0)[0])
        raise ValueError(
            f"`matrix` holds {array[bad].item()!r} at position {bad}; counts must be non-negative."
        )
    return array


def as_counts(matrix: MatrixLike) -> ClassCounts:
    """Return ``matrix`` as :class:`ClassCounts` (a no-op for ``ClassCounts``)."""
    if isinstance(matrix, ClassCounts):
        return matrix
    return ClassCounts.from_matrix(matrix)


def label_indices(labels: Labels, num_classes: int) -> np.ndarray | None:
    """Validate a subset of class indices (scikit-learn's ``labels``); None means all classes."""
    if labels is None:
        return None
    indices = np.asarray(labels)
    if indices.ndim == 0:
        indices = indices.reshape(1)
    if indices.ndim != 1 or indices.size == 0:
        raise ValueError(
            f"`labels` must be a non-empty 1-D sequence of class indices, got {labels!r}."
        )
    if indices.dtype.kind not in "iu":
        raise TypeError(
            f"`labels` must hold integer class indices, got dtype {indices.dtype} "
            f"(an accumulator with `class_names` also accepts names)."
        )
    bad = (indices < 0) | (indices >= num_classes)
    if bad.any():
        position = int(np.argmax(bad))
        raise ValueError(
            f"`labels` holds {indices[position].item()} at position {position}, but class "
            f"indices must be in [0, {num_classes})."
        )
    return indices.astype(np.intp)


def num_samples(matrix: MatrixLike) -> Any:
    """Number of samples (or total weight): ``N = sum_ij C_ij``."""
    return as_counts(matrix).total


def true_positives(matrix: MatrixLike) -> np.ndarray:
    """Per-class true positives ``TP_i = C_ii``."""
    return as_counts(matrix).true_positives.copy()


def false_positives(matrix: MatrixLike) -> np.ndarray:
    """Per-class false positives ``FP_i = PP_i - TP_i`` (predicted ``i``, truly another class)."""
    return as_counts(matrix).false_positives


def false_negatives(matrix: MatrixLike) -> np.ndarray:
    """Per-class false negatives ``FN_i = AP_i - TP_i`` (truly ``i``, predicted another class)."""
    return as_counts(matrix).false_negatives


def true_negatives(matrix: MatrixLike) -> np.ndarray:
    """Per-class true negatives ``TN_i = N - AP_i - PP_i + TP_i``."""
    return as_counts(matrix).true_negatives


def support(matrix: MatrixLike) -> np.ndarray:
    """Per-class actual positives (support) ``AP_i = sum_j C_ij = TP_i + FN_i``."""
    return as_counts(matrix).actual_positives.copy()


def predicted_positives(matrix: MatrixLike) -> np.ndarray:
    """Per-class predicted positives ``PP_i = sum_j C_ji = TP_i + FP_i``."""
    return as_counts(matrix).predicted_positives.copy()


Normalize = Literal["true", "pred", "all", None]


def normalize_confusion_matrix(matrix: MatrixLike, normalize: Normalize = None) -> np.ndarray:
    """The confusion matrix, optionally normalized as scikit-learn's ``confusion_matrix``.

    * ``None``: the counts ``C_ij``;
    * ``"true"``: ``C_ij / AP_i`` (each row sums to 1: the recall row);
    * ``"pred"``: ``C_ij / PP_j`` (each column sums to 1: the precision column);
    * ``"all"``: ``C_ij / N``.

    0/0 (an empty row, column or matrix) gives 0, as in scikit-learn.

    Example:
        >>> normalize_confusion_matrix([[3, 1], [0, 0]], "true")
        array([[0.75, 0.25],
               [0.  , 0.  ]])
    """
    counts = as_counts(matrix)
    array = counts.matrix
    if normalize is None:
        return array.copy()
    if normalize == "true":
        denominator = counts.actual_positives[:, None]
    elif normalize == "pred":
        denominator = counts.predicted_positives[None, :]
    elif normalize == "all":
        denominator = counts.total
    else:
        raise ValueError(f"`normalize` must be None, 'true', 'pred' or 'all', got {normalize!r}.")
    with np.errstate(all="ignore"):
        normalized = array / denominator
    return np.nan_to_num(normalized)
