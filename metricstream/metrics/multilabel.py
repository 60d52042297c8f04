"""Multilabel metrics as plain functions of :class:`MultilabelCounts`, scikit-learn's definitions.

In multilabel classification each of L labels is an independent yes/no question, so a sample
may have several true and several predicted labels. Two families of metrics follow (notation of
:mod:`metricstream.metrics.counts`, per label ``j``; per sample ``s`` with true set ``T_s`` and
predicted set ``P_s``):

* **label-based**, from the multilabel confusion matrix (one 2×2 matrix per label:
  ``TP_j``, ``FP_j``, ``FN_j``, ``TN_j``): precision ``TP_j / PP_j``, recall ``TP_j / AP_j``,
  F-beta ``(1 + β²) TP_j / (β² AP_j + PP_j)``, Jaccard ``TP_j / (AP_j + PP_j - TP_j)`` and the
  one-vs-rest rates of :mod:`~metricstream.metrics.rates` (specificity, NPV, ...), averaged with
  ``average`` None (per label), "micro" (sum the counts over labels first), "macro" (plain mean
  over labels) or "weighted" (mean weighted by ``AP_j``);
* **example-based** (``average="samples"``): the mean over samples of the per-sample ratio,
  e.g. precision ``|T_s ∩ P_s| / |P_s|``, recall ``|T_s ∩ P_s| / |T_s|``, Jaccard
  ``|T_s ∩ P_s| / |T_s ∪ P_s|``, F-beta ``(1 + β²)|T_s ∩ P_s| / (β²|T_s| + |P_s|)``, weighted
  by the sample weights; and subset accuracy (the share of samples whose predicted set equals
  the true set), zero-one loss and Hamming loss (the share of wrong (sample, label) entries).

0/0 takes ``zero_division`` ("warn": 0.0 and an ``UndefinedMetricWarning``; 0; 1; np.nan, left
out of averages) wherever it arises: a label never predicted (precision) or never true
(recall), a sample with no predicted label (precision), no true label (recall), or neither
(F-beta, Jaccard). Every value equals scikit-learn's on the same data (the tests compare them to
1e-12 for every ``zero_division``), including its warnings' wording.

Reference: scikit-learn, ``precision_recall_fscore_support``, ``jaccard_score``,
``multilabel_confusion_matrix``, ``accuracy_score``, ``hamming_loss``, ``zero_one_loss``,
``classification_report``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..exceptions import UndefinedMetricWarning
from . import precision_recall as _pr
from . import rates as _rates
from ._averaging import MultilabelAverage
from ._selection import LabelCounts
from ._zero_division import ZeroDivision, divide, undefined_scalar, zero_division_value
from .counts import Labels, label_indices
from .jaccard import jaccard as _jaccard_score

__all__ = [
    "MultilabelCounts",
    "classification_report",
    "f1",
    "fbeta",
    "hamming_loss",
    "jaccard",
    "label_cardinality",
    "multilabel_confusion_matrix",
    "precision",
    "precision_recall_fscore_support",
    "recall",
    "subset_accuracy",
    "zero_one_loss",
]

_MULTILABEL_AVERAGES = (None, "micro", "macro", "weighted", "samples")


@dataclass(frozen=True)
class SampleStatistics:
    """The example-based statistics of a stream (weighted sums when samples carry weights).

    ``tp_by_pred[k]`` is the (weighted) sum of ``TP_s = |T_s ∩ P_s|`` over the samples with
    ``|P_s| = k``; ``tp_by_true`` groups by ``|T_s|``, ``tp_by_union`` by ``|T_s ∪ P_s|`` and
    ``tp_by_fbeta[beta] = (a, b, sums)`` (with ``beta² = a/b``) by ``a |T_s| + b |P_s|``.
    ``cardinality_true[k]`` is the (weighted) number of samples with ``k`` true labels,
    ``cardinality_pred`` with ``k`` predicted labels. ``judged`` is the weight of the samples
    with at least one unmasked label, ``exact`` of those predicted exactly, ``neither`` of those
    with no true and no predicted label; ``count`` is the number of samples and
    ``zero_weight`` the number of judged samples of weight 0 (scikit-learn counts every
    per-sample ratio of those as 0/0).
    """

    count: int
    judged: Any
    exact: Any
    neither: Any
    zero_weight: int
    cardinality_true: np.ndarray
    cardinality_pred: np.ndarray
    tp_by_pred: np.ndarray
    tp_by_true: np.ndarray
    tp_by_union: np.ndarray
    tp_by_fbeta: dict[float, tuple[int, int, np.ndarray]]


@dataclass(frozen=True)
class MultilabelCounts:
    """What every multilabel metric is computed from (what the accumulator's views receive).

    ``labels`` holds the per-label counts (``LabelCounts``: TP, AP, PP and the samples counted
    for each label); ``samples`` the example-based statistics, or None when only a multilabel
    confusion matrix is known (then ``average="samples"``, subset accuracy and the other
    example-based metrics raise). ``integral`` says whether supports print as integers, as
    scikit-learn prints them when no ``sample_weight`` was given.
    """

    labels: LabelCounts
    samples: SampleStatistics | None
    integral: bool = True
    label_names: tuple[str, ...] | None = None
    cooccurrence: np.ndarray | None = None
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_labels(self) -> int:
        return self.labels.num_labels

    @classmethod
    def from_confusion_matrices(cls, matrices: Any) -> MultilabelCounts:
        """Counts from scikit-learn's ``multilabel_confusion_matrix`` output, shape (L, 2, 2)
        with ``[[TN, FP], [FN, TP]]`` per label. Only label-based metrics are available."""
        array = np.asarray(matrices)
        if array.ndim != 3 or array.shape[1:] != (2, 2) or array.shape[0] == 0:
            raise ValueError(
                f"`matrices` must have shape (L, 2, 2) with L >= 1, got {array.shape}."
            )
        if array.dtype.kind not in "iuf" or (array < 0).any() or not np.isfinite(array).all():
            raise ValueError("`matrices` must hold finite, non-negative counts.")
        tn, fp, fn, tp = array[:, 0, 0], array[:, 0, 1], array[:, 1, 0], array[:, 1, 1]
        return cls(
            labels=LabelCounts(tp=tp.copy(), ap=tp + fn, pp=tp + fp, total=tn + fp + fn + tp),
            samples=None,
            integral=array.dtype.kind in "iu",
        )

    def require_samples(self, what: str) -> SampleStatistics:
        if self.samples is None:
            raise ValueError(
                f"{what} needs per-sample statistics, which a multilabel confusion matrix does "
                f"not hold; count the data with MultilabelAccumulator."
            )
        return self.samples


# ---------------------------------------------------------------------------- helpers
def _check_average(average: object) -> None:
    if average == "binary":
        raise ValueError(
            "Target is multilabel-indicator but average='binary'. Please choose another "
            "average setting, one of [None, 'micro', 'macro', 'weighted', 'samples']."
        )
    if average not in _MULTILABEL_AVERAGES:
        raise ValueError(
            f"`average` must be None, 'micro', 'macro', 'weighted' or 'samples', got {average!r}."
        )


def _check_all_labels(labels: Labels, num_labels: int) -> None:
    """``average="samples"`` is computed over all labels (the per-sample sums are)."""
    indices = label_indices(labels, num_labels)
    if indices is not None and not np.array_equal(np.sort(indices), np.arange(num_labels)):
        raise ValueError(
            "`labels` selects a subset of the labels, but average='samples' is counted over all "
            f"{num_labels} labels; use a MultilabelAccumulator over the labels of interest."
        )


def _warn_samples(metric: str, missing: str, num_samples: float, stacklevel: int = 4) -> None:
    # scikit-learn's ``_warn_prf`` with average="samples": sample and label swap places.
    where = "due to" if num_samples == 1 else "in samples with"
    warnings.warn(
        f"{metric} is ill-defined and being set to 0.0 {where} no {missing} labels. "
        f"Use `zero_division` parameter to control this behavior.",
        UndefinedMetricWarning,
        stacklevel=stacklevel,
    )


def _ratio_sum(grouped: np.ndarray, scale: float = 1.0) -> float:
    """``sum_k scale * grouped[k] / k`` over ``k >= 1``."""
    keys = np.arange(1, grouped.shape[0], dtype=np.float64)
    return float(np.sum((scale * grouped[1:].astype(np.float64)) / keys))


def _samples_mean(
    stats: SampleStatistics,
    total: float,
    undefined: Any,
    defined: Any,
    zero_division: ZeroDivision,
    *,
    metric: str,
    missing: str,
) -> float:
    """The mean over samples of a per-sample ratio, as scikit-learn's ``_nanaverage`` of the
    per-sample values weighted by the sample weights.

    ``total`` is the (weighted) sum of the defined per-sample values, ``undefined`` the weight
    of the 0/0 samples and ``defined`` that of the others. Samples of weight 0 are 0/0 for
    scikit-learn (their weighted counts are all 0): they change no value, but they warn.
    """
    replacement = zero_division_value(zero_division)
    if stats.judged == 0 and stats.zero_weight == 0:
        return undefined_scalar(
            zero_division,
            f"{metric} is ill-defined and being set to 0.0 because there are no samples.",
            stacklevel=5,
        )
    if isinstance(zero_division, str) and (undefined > 0 or stats.zero_weight > 0):
        _warn_samples(metric, missing, stats.count, stacklevel=5)
    if np.isnan(replacement):
        return float(total / defined) if defined != 0 else float("nan")
    if stats.judged == 0:  # every sample has weight 0, so every value is 0/0
        return replacement
    return float((total + replacement * undefined) / stats.judged)


def _samples_metric(
    counts: MultilabelCounts, which: str, zero_division: ZeroDivision, beta: float = 1.0
) -> float:
    stats = counts.require_samples("average='samples'")
    if which == "precision":
        return _samples_mean(
            stats,
            _ratio_sum(stats.tp_by_pred),
            stats.cardinality_pred[0],
            stats.cardinality_pred[1:].sum(),
            zero_division,
            metric="Precision",
            missing="predicted",
        )
    if which == "recall":
        return _samples_mean(
            stats,
            _ratio_sum(stats.tp_by_true),
            stats.cardinality_true[0],
            stats.cardinality_true[1:].sum(),
            zero_division,
            metric="Recall",
            missing="true",
        )
    defined = stats.judged - stats.neither
    if which == "jaccard":
        return _samples_mean(
            stats,
            _ratio_sum(stats.tp_by_union),
            stats.neither,
            defined,
            zero_division,
            metric="Jaccard",
            missing="true or predicted",
        )
    key = _beta_key(stats, beta)
    a, b, grouped = stats.tp_by_fbeta[key]
    return _samples_mean(
        stats,
        _ratio_sum(grouped, float(a + b)),
        stats.neither,
        defined,
        zero_division,
        metric="F-score",
        missing="true nor predicted",
    )


def _beta_key(stats: SampleStatistics, beta: float) -> float:
    for key in stats.tp_by_fbeta:
        if key == beta:
            return key
    configured = sorted(stats.tp_by_fbeta)
    raise ValueError(
        f"F-beta with average='samples' is counted for the `betas` configured on the "
        f"accumulator ({configured}), not for beta={beta!r}; configure "
        f"MultilabelAccumulator(..., betas=[..., {beta!r}])."
    )


def _check_beta(beta: Any) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise TypeError(f"`beta` must be a number, got {type(beta).__name__}.")
    if not beta >= 0:
        raise ValueError(f"`beta` must be non-negative, got {beta!r}.")
    return float(beta)


# ---------------------------------------------------------------------------- label-based + samples
def precision(
    counts: MultilabelCounts,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """Precision: per label ``TP_j / PP_j``; per sample ``|T_s ∩ P_s| / |P_s|``.

    0/0 (a label never predicted; with ``average="samples"`` a sample with no predicted label)
    gives ``zero_division``.

    Args:
        counts: what :class:`~metricstream.MultilabelAccumulator` counted.
        average: None (per label), "micro", "macro", "weighted" (by ``AP_j``) or "samples"
            (mean over samples, weighted by the sample weights).
        labels: label indices to include, in output order (default: all; "samples" needs all).
            ``labels=[j]`` gives a one-element array with ``average=None`` and label ``j``'s
            float with the label-wise averages.
        zero_division: "warn" (0.0 and a warning), 0, 1 or np.nan (left out of averages).

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(3).update([[1, 0, 1], [0, 1, 0]], [[1, 1, 1], [0, 1, 0]])
        >>> acc.precision(average="samples")
        0.8333333333333333
    """
    _check_average(average)
    if average == "samples":
        _check_all_labels(labels, counts.num_labels)
        return _samples_metric(counts, "precision", zero_division)
    return _pr.precision(counts.labels, average=average, labels=labels, zero_division=zero_division)


def recall(
    counts: MultilabelCounts,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """Recall: per label ``TP_j / AP_j``; per sample ``|T_s ∩ P_s| / |T_s|``.

    0/0 (a label never true; with ``average="samples"`` a sample with no true label) gives
    ``zero_division``. Arguments as :func:`precision`.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(3).update([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
        >>> acc.recall(average="samples")
        0.75
    """
    _check_average(average)
    if average == "samples":
        _check_all_labels(labels, counts.num_labels)
        return _samples_metric(counts, "recall", zero_division)
    return _pr.recall(counts.labels, average=average, labels=labels, zero_division=zero_division)


def fbeta(
    counts: MultilabelCounts,
    beta: float,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """F-beta: per label ``(1 + β²) TP_j / (β² AP_j + PP_j)``; per sample
    ``(1 + β²) |T_s ∩ P_s| / (β² |T_s| + |P_s|)``.

    0/0 (a label, or with ``average="samples"`` a sample, with no true and no predicted label)
    gives ``zero_division``. ``beta = 0`` is precision and ``beta = inf`` recall (silently, as
    scikit-learn's ``fbeta_score``). With ``average="samples"``, ``beta`` must be one of the
    accumulator's ``betas`` (the per-sample sums are counted per beta). Other arguments as
    :func:`precision`.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(3).update([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
        >>> round(acc.fbeta(1.0, average="samples"), 4)
        0.8333
    """
    _check_average(average)
    beta = _check_beta(beta)
    if average == "samples":
        _check_all_labels(labels, counts.num_labels)
        if beta == 0 or np.isposinf(beta):
            silent = 0.0 if isinstance(zero_division, str) else zero_division
            zero_division_value(zero_division)
            return _samples_metric(counts, "precision" if beta == 0 else "recall", silent)
        return _samples_metric(counts, "fbeta", zero_division, beta)
    return _pr.fbeta(
        counts.labels, beta, average=average, labels=labels, zero_division=zero_division
    )


def f1(
    counts: MultilabelCounts,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """F1: per label ``2 TP_j / (AP_j + PP_j)``; per sample ``2 |T_s ∩ P_s| / (|T_s| + |P_s|)``.

    :func:`fbeta` with ``beta = 1``: 0/0 (no true and no predicted label) gives
    ``zero_division``. Arguments as :func:`precision`.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(3).update([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]])
        >>> acc.f1(average="macro")
        0.6666666666666666
    """
    return fbeta(counts, 1.0, average, labels=labels, zero_division=zero_division)


def jaccard(
    counts: MultilabelCounts,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> float | np.ndarray:
    """Jaccard index: per label ``TP_j / (AP_j + PP_j - TP_j)``; per sample
    ``|T_s ∩ P_s| / |T_s ∪ P_s|`` (scikit-learn's ``jaccard_score``).

    0/0 (no true and no predicted label) gives ``zero_division``. Arguments as
    :func:`precision`.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(3).update([[1, 0, 1], [0, 1, 0]], [[1, 1, 0], [0, 1, 0]])
        >>> round(acc.jaccard(average="samples"), 4)
        0.6667
    """
    _check_average(average)
    if average == "samples":
        _check_all_labels(labels, counts.num_labels)
        return _samples_metric(counts, "jaccard", zero_division)
    return _jaccard_score(
        counts.labels, average=average, labels=labels, zero_division=zero_division
    )


def precision_recall_fscore_support(
    counts: MultilabelCounts,
    beta: float = 1.0,
    average: MultilabelAverage = None,
    *,
    labels: Labels = None,
    zero_division: ZeroDivision = "warn",
) -> tuple:
    """``(precision, recall, fbeta, support)`` as scikit-learn's function on multilabel data.

    Formulas and 0/0 rules of :func:`precision`, :func:`recall` and :func:`fbeta`; ``support``
    (``AP_j``) per label when ``average`` is None, else None.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> acc.precision_recall_fscore_support(average="samples")
        (1.0, 0.75, 0.8333333333333333, None)
    """
    common: dict = dict(labels=labels, zero_division=zero_division)
    result = (
        precision(counts, average, **common),
        recall(counts, average, **common),
        fbeta(counts, beta, average, **common),
    )
    if average is not None:
        return result + (None,)
    indices = label_indices(labels, counts.num_labels)
    ap = counts.labels.ap
    return result + ((ap if indices is None else ap[indices]).copy(),)


# ---------------------------------------------------------------------------- example-based
def subset_accuracy(
    counts: MultilabelCounts, *, normalize: bool = True, zero_division: ZeroDivision = "warn"
) -> float:
    """Subset accuracy: the (weighted) share of samples whose predicted label set equals the
    true set exactly (scikit-learn's ``accuracy_score`` on multilabel data).

    ``normalize=False`` gives the (weighted) number of exact matches. 0/0 (no samples) gives
    ``zero_division``.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> acc.subset_accuracy()
        0.5
    """
    stats = counts.require_samples("subset accuracy")
    if not normalize:
        return int(stats.exact) if counts.integral else float(stats.exact)
    if stats.judged != 0:
        return float(stats.exact / stats.judged)
    return undefined_scalar(
        zero_division,
        "Subset accuracy is ill-defined and being set to 0.0 because there are no samples.",
    )


def zero_one_loss(
    counts: MultilabelCounts, *, normalize: bool = True, zero_division: ZeroDivision = "warn"
) -> float:
    """Zero-one loss: ``1 - subset_accuracy``, the (weighted) share of samples with at least
    one wrong label; ``normalize=False`` gives their (weighted) number.

    0/0 (no samples) gives ``zero_division``.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> acc.zero_one_loss()
        0.5
    """
    stats = counts.require_samples("zero-one loss")
    if not normalize:
        wrong = stats.judged - stats.exact
        return int(wrong) if counts.integral else float(wrong)
    if stats.judged == 0:
        return undefined_scalar(
            zero_division,
            "Zero-one loss is ill-defined and being set to 0.0 because there are no samples.",
        )
    return 1 - subset_accuracy(counts, zero_division=zero_division)


def hamming_loss(counts: MultilabelCounts, *, zero_division: ZeroDivision = "warn") -> float:
    """Hamming loss: the (weighted) share of wrong (sample, label) entries,
    ``sum_j (FP_j + FN_j) / sum_j N_j`` (``N_j``: samples counted for label ``j``; ``L · N``
    without masking), scikit-learn's ``hamming_loss``.

    0/0 (no samples) gives ``zero_division``.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> acc.hamming_loss()
        0.25
    """
    lab = counts.labels
    wrong = np.sum(lab.ap + lab.pp - 2 * lab.tp)
    total = np.sum(lab.total)
    if total == 0:
        return undefined_scalar(
            zero_division,
            "Hamming loss is ill-defined and being set to 0.0 because there are no samples.",
        )
    return float(wrong / total)


def multilabel_confusion_matrix(counts: MultilabelCounts, *, labels: Labels = None) -> np.ndarray:
    """The (L, 2, 2) matrices ``[[TN_j, FP_j], [FN_j, TP_j]]`` of scikit-learn's
    ``multilabel_confusion_matrix`` (rows: true no/yes; columns: predicted no/yes).

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> acc.multilabel_confusion_matrix().tolist()
        [[[0, 0], [0, 2]], [[1, 0], [1, 0]]]
    """
    lab = counts.labels
    tp, ap, pp, total = lab.tp, lab.ap, lab.pp, lab.total
    indices = label_indices(labels, counts.num_labels)
    if indices is not None:
        tp, ap, pp, total = tp[indices], ap[indices], pp[indices], total[indices]
    fp, fn = pp - tp, ap - tp
    tn = total - ap - pp + tp
    return np.stack([np.stack([tn, fp], axis=-1), np.stack([fn, tp], axis=-1)], axis=1)


def label_cardinality(
    counts: MultilabelCounts, *, predicted: bool = False, zero_division: ZeroDivision = "warn"
) -> float:
    """Label cardinality: the (weighted) mean number of true labels per sample (``predicted``:
    of predicted labels). 0/0 (no samples) gives ``zero_division``.

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> MultilabelAccumulator(3).update([[1, 0, 1], [0, 0, 0]], [[1, 0, 0], [0, 0, 0]]
        ...                                 ).label_cardinality()
        1.0
    """
    stats = counts.require_samples("label cardinality")
    histogram = stats.cardinality_pred if predicted else stats.cardinality_true
    if stats.judged != 0:
        sizes = np.arange(histogram.shape[0], dtype=np.float64)
        return float(np.sum(sizes * histogram) / stats.judged)
    return undefined_scalar(
        zero_division,
        "Label cardinality is ill-defined and being set to 0.0 because there are no samples.",
    )


def cardinality_histogram(counts: MultilabelCounts, *, predicted: bool = False) -> np.ndarray:
    """``h[k]``: the (weighted) number of samples with ``k`` true labels (``predicted``: with
    ``k`` predicted labels), ``k = 0..L``."""
    stats = counts.require_samples("the cardinality histogram")
    return (stats.cardinality_pred if predicted else stats.cardinality_true).copy()


# ---------------------------------------------------------------------------- per-label rates
def _per_label_rate(function: Any) -> Any:
    def rate(
        counts: MultilabelCounts,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        _check_average(average)
        if average == "samples":
            raise ValueError(
                f"average='samples' is not defined for {function.__name__}; use "
                "None, 'micro', 'macro' or 'weighted'."
            )
        return function(counts.labels, average=average, labels=labels, zero_division=zero_division)

    rate.__name__ = function.__name__
    rate.__qualname__ = function.__name__
    first = (function.__doc__ or "").strip().splitlines()[0]
    rate.__doc__ = (
        f"{first}\n\n    Per label ``j`` of a multilabel problem (label ``j`` against its "
        f"absence), with the formula and\n    0/0 rule of "
        f":func:`metricstream.metrics.{function.__name__}`; "
        f'``average`` None, "micro", "macro"\n    or "weighted" (by ``AP_j``); ``labels`` '
        f"and ``zero_division`` as :func:`precision`.\n"
    )
    return rate


specificity = _per_label_rate(_rates.specificity)
negative_predictive_value = _per_label_rate(_rates.negative_predictive_value)
false_positive_rate = _per_label_rate(_rates.false_positive_rate)
false_negative_rate = _per_label_rate(_rates.false_negative_rate)
false_discovery_rate = _per_label_rate(_rates.false_discovery_rate)
false_omission_rate = _per_label_rate(_rates.false_omission_rate)
informedness = _per_label_rate(_rates.informedness)
markedness = _per_label_rate(_rates.markedness)


def positive_likelihood_ratio(
    counts: MultilabelCounts, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Per label ``LR+_j = TPR_j / FPR_j``; formula and 0/0 rule of
    :func:`metricstream.metrics.positive_likelihood_ratio`."""
    return _rates.positive_likelihood_ratio(
        counts.labels, labels=labels, zero_division=zero_division
    )


def negative_likelihood_ratio(
    counts: MultilabelCounts, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Per label ``LR-_j = FNR_j / TNR_j``; formula and 0/0 rule of
    :func:`metricstream.metrics.negative_likelihood_ratio`."""
    return _rates.negative_likelihood_ratio(
        counts.labels, labels=labels, zero_division=zero_division
    )


def diagnostic_odds_ratio(
    counts: MultilabelCounts, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Per label ``DOR_j = TP_j TN_j / (FP_j FN_j)``; formula and 0/0 rule of
    :func:`metricstream.metrics.diagnostic_odds_ratio`."""
    return _rates.diagnostic_odds_ratio(counts.labels, labels=labels, zero_division=zero_division)


def prevalence(
    counts: MultilabelCounts, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
) -> np.ndarray:
    """Per label ``AP_j / N_j``: the (weighted) share of samples truly carrying label ``j``.

    0/0 (no samples counted for the label) gives ``zero_division``.
    """
    lab = counts.labels
    indices = label_indices(labels, counts.num_labels)
    ap, total = (lab.ap, lab.total) if indices is None else (lab.ap[indices], lab.total[indices])
    return divide(ap, total, zero_division, metric="Prevalence", missing="counted")


# ---------------------------------------------------------------------------- report
def classification_report(
    counts: MultilabelCounts,
    *,
    target_names: Sequence[str] | None = None,
    digits: int = 2,
    output_dict: bool = False,
    zero_division: ZeroDivision = "warn",
) -> str | dict:
    """scikit-learn's ``classification_report`` for multilabel data, character for character.

    One row per label (precision, recall, F1, support ``AP_j``), then the "micro avg",
    "macro avg", "weighted avg" and "samples avg" rows; ``output_dict=True`` gives the same
    numbers as a dict. 0/0 follows ``zero_division`` as in :func:`precision`. Supports print
    as integers, or as floats once any update carried weights (as scikit-learn prints them
    without and with ``sample_weight``).

    Example:
        >>> from metricstream.multilabel import MultilabelAccumulator
        >>> acc = MultilabelAccumulator(2).update([[1, 0], [1, 1]], [[1, 0], [1, 0]])
        >>> print(acc.classification_report(target_names=["cat", "dog"], zero_division=0))
                      precision    recall  f1-score   support
        <BLANKLINE>
                 cat       1.00      1.00      1.00         2
                 dog       0.00      0.00      0.00         1
        <BLANKLINE>
           micro avg       1.00      0.67      0.80         3
           macro avg       0.50      0.50      0.50         3
        weighted avg       0.67      0.67      0.67         3
         samples avg       1.00      0.75      0.83         3
        <BLANKLINE>
    """
    num_labels = counts.num_labels
    if target_names is None:
        names = (
            list(counts.label_names) if counts.label_names else [str(j) for j in range(num_labels)]
        )
    else:
        names = [str(name) for name in target_names]
        if len(names) != num_labels:
            raise ValueError(
                f"Number of classes, {num_labels}, does not match size of target_names, "
                f"{len(names)}. Try specifying the labels parameter"
            )
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)) or digits < 0:
        raise ValueError(f"`digits` must be a non-negative integer, got {digits!r}.")
    zero_division_value(zero_division)
    headers = ["precision", "recall", "f1-score", "support"]
    p, r, f, support = precision_recall_fscore_support(counts, zero_division=zero_division)
    support = support.astype(np.int64 if counts.integral else np.float64)
    rows = list(zip(names, p, r, f, support, strict=True))
    averages: tuple[MultilabelAverage, ...] = ("micro", "macro", "weighted", "samples")
    total_support = np.sum(support)
    if output_dict:
        report: dict = {
            name: dict(zip(headers, [float(v) for v in values], strict=True))
            for name, *values in rows
        }
        for average in averages:
            avg = precision_recall_fscore_support(
                counts, average=average, zero_division=zero_division
            )
            values = [avg[0], avg[1], avg[2], total_support]
            report[f"{average} avg"] = dict(zip(headers, [float(v) for v in values], strict=True))
        return report
    width = max(max(len(name) for name in names), len("weighted avg"), digits)
    head_fmt = "{:>{width}s} " + " {:>9}" * len(headers)
    text = head_fmt.format("", *headers, width=width) + "\n\n"
    row_fmt = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}\n"
    for row in rows:
        text += row_fmt.format(*row, width=width, digits=digits)
    text += "\n"
    for average in averages:
        avg = precision_recall_fscore_support(counts, average=average, zero_division=zero_division)
        text += row_fmt.format(
            f"{average} avg", avg[0], avg[1], avg[2], total_support, width=width, digits=digits
        )
    return text
