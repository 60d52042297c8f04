"""Epoch-end reports: scikit-learn's ``classification_report`` and a richer summary.

* :func:`classification_report` reproduces ``sklearn.metrics.classification_report`` character
  for character (text) and key for key (``output_dict=True``) from the matrix alone.
* :func:`summary` is a JSON-ready dict of the overall metrics (accuracy, balanced accuracy,
  Cohen's kappa, MCC, mIoU, FWIoU, macro F1) and per-class rates (precision, recall, F1,
  specificity, NPV, IoU); :func:`summary_text`, :func:`summary_markdown` and
  :func:`summary_html` format it.

Every function takes a K×K matrix (rows true, columns predicted) or a
:class:`~metricstream.metrics.ClassCounts`.
"""

from __future__ import annotations

import html
import itertools
import math
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..metrics._zero_division import ZeroDivision, zero_division_value
from ..metrics.accuracy import accuracy, balanced_accuracy
from ..metrics.agreement import cohen_kappa, matthews_corrcoef
from ..metrics.counts import ClassCounts, Labels, MatrixLike, as_counts, label_indices
from ..metrics.jaccard import fwiou, jaccard, miou
from ..metrics.precision_recall import f1, precision, precision_recall_fscore_support, recall
from ..metrics.rates import negative_predictive_value, specificity

__all__ = [
    "classification_report",
    "summary",
    "summary_html",
    "summary_markdown",
    "summary_text",
]

_HEADERS = ["precision", "recall", "f1-score", "support"]


def _present_labels(counts: ClassCounts) -> np.ndarray:
    """The classes scikit-learn's ``unique_labels(y_true, y_pred)`` would find."""
    present = (counts.actual_positives + counts.predicted_positives) != 0
    if not present.any():  # no samples: scikit-learn refuses; report every class
        return np.arange(counts.num_classes)
    return np.flatnonzero(present)


def _nanaverage(values: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The mean of the non-NaN ``values`` exactly as scikit-learn's ``_nanaverage`` computes it.

    ``np.nanmean`` over the whole array (NaN entries summed as 0) rather than ``np.mean`` of the
    defined entries: both are the same number mathematically, but numpy's pairwise summation
    groups the terms by position, so dropping entries can change the last bit. Weighted:
    ``np.average`` of the defined entries, or their plain mean when the weights sum to 0.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan
    mask = np.isnan(values)
    if mask.all():
        return math.nan
    if weights is None:
        return float(np.nanmean(values))
    kept, kept_weights = values[~mask], np.asarray(weights)[~mask]
    if kept_weights.sum() == 0:
        return float(np.average(kept))
    return float(np.average(kept, weights=kept_weights))


def _target_names(
    target_names: Sequence[str] | None,
    indices: np.ndarray,
    num_classes: int,
    labels_given: bool,
) -> list[str]:
    if target_names is None:
        return list(map(str, indices.tolist()))
    if isinstance(target_names, str):
        raise TypeError("`target_names` must be a sequence of strings, got a single string.")
    names = [str(name) for name in target_names]
    if len(names) == len(indices):
        return names
    if len(names) == num_classes:
        # One name per class of the matrix (an accumulator's class_names): pick the shown ones.
        return [names[i] for i in indices]
    if labels_given:
        warnings.warn(
            f"labels size, {len(indices)}, does not match size of target_names, {len(names)}",
            UserWarning,
            stacklevel=3,
        )
        return names
    raise ValueError(
        f"Number of classes, {len(indices)}, does not match size of target_names, "
        f"{len(names)}. Try specifying the labels parameter"
    )


def classification_report(
    matrix_or_counts: MatrixLike,
    *,
    digits: int = 2,
    labels: Labels = None,
    target_names: Sequence[str] | None = None,
    output_dict: bool = False,
    zero_division: ZeroDivision = "warn",
) -> str | dict:
    """Text (or dict) report of per-class precision, recall, F1 and support, and their averages.

    The output equals ``sklearn.metrics.classification_report(y_true, y_pred, ...)`` on the
    data the matrix was counted from, character for character:

    * ``labels=None`` reports the classes present in the truth or the prediction
      (``AP_i + PP_i > 0``), as scikit-learn's ``unique_labels`` does (every class when the
      matrix is empty);
    * the ``accuracy`` row (F1 column = micro F1 = accuracy) appears when the reported labels
      cover every class present in the data; otherwise a ``micro avg`` row is printed instead;
    * ``macro avg`` and ``weighted avg`` (weighted by support ``AP_i``) follow;
    * supports print as integers for an integer matrix and as floats (``3.0``) for a float
      matrix (what scikit-learn prints whenever ``sample_weight`` is given), and also for an
      integer matrix with an all-zero diagonal (no sample classified correctly), where
      scikit-learn counts supports from float zeros;
    * the macro and weighted averages leave out NaN entries (``zero_division=np.nan``) and are
      computed in scikit-learn's order of operations (``np.nanmean``; ``np.average`` weighted by
      support), so they agree to the last bit;
    * the name column is as wide as the longest name, at least ``len("weighted avg")`` and
      ``digits``.

    Two limits of "the same data", both about fractional ``sample_weight``: the matrix adds
    float64 weights in another order than scikit-learn, so a support such as
    ``12.345678901234567`` (and, rarely, a score on a rounding boundary) can differ in its last
    digit — integer counts and weights whose sums are exact (e.g. multiples of 1/8) match
    exactly; and a sample of weight 0 leaves no trace in a matrix, while scikit-learn still
    lists its class.

    0/0 follows ``zero_division`` for precision (class never predicted), recall (class never
    true) and F1 (neither), with scikit-learn's warnings; ``np.nan`` values print as ``nan``
    and are left out of the averages.

    Args:
        matrix_or_counts: K×K confusion matrix or ``ClassCounts``.
        digits: decimals of the floats in the text output (ignored for ``output_dict``).
        labels: class indices to report, in order (default: the classes present).
        target_names: display names, one per reported label, or one per class of the matrix.
        output_dict: return a dict ``{name: {"precision", "recall", "f1-score", "support"},
            ..., "accuracy": float, "macro avg": {...}, "weighted avg": {...}}`` (all floats).
        zero_division: "warn", 0, 1 or np.nan.

    Example:
        >>> print(classification_report([[4, 1, 1], [6, 2, 2], [3, 0, 6]],
        ...                              target_names=["cat", "fish", "hen"]))
                      precision    recall  f1-score   support
        <BLANKLINE>
                 cat       0.31      0.67      0.42         6
                fish       0.67      0.20      0.31        10
                 hen       0.67      0.67      0.67         9
        <BLANKLINE>
            accuracy                           0.48        25
           macro avg       0.55      0.51      0.47        25
        weighted avg       0.58      0.48      0.46        25
        <BLANKLINE>
    """
    counts = as_counts(matrix_or_counts)
    zero_division_value(zero_division)
    if isinstance(digits, bool) or not isinstance(digits, (int, np.integer)):
        raise TypeError(f"`digits` must be an int, got {type(digits).__name__} {digits!r}.")
    if digits < 0:
        raise ValueError(f"`digits` must be non-negative, got {digits}.")
    present = _present_labels(counts)
    labels_given = labels is not None
    if labels_given:
        indices = label_indices(labels, counts.num_classes)
        assert indices is not None
        micro_is_accuracy = set(indices.tolist()) >= set(present.tolist())
    else:
        indices = present
        micro_is_accuracy = True
    names = _target_names(target_names, indices, counts.num_classes, labels_given)

    p, r, f, s = precision_recall_fscore_support(
        counts, average=None, labels=indices, zero_division=zero_division
    )
    if counts.matrix.dtype.kind in "iub" and not counts.true_positives.any():
        # scikit-learn counts the supports with float zeros when no sample at all is classified
        # correctly (its "pathological case"), so they then print as ``3.0``, not ``3``.
        s = s.astype(np.float64)
    # zip truncates to the shorter of names and scores, as scikit-learn does.
    shown = min(len(names), len(p))
    # Whole columns become Python numbers in one ``tolist`` each and every row is formatted by
    # one %-format pass over them (K = 1000: a tenth of the cost of formatting cell by cell).
    columns = [names[:shown], p[:shown].tolist(), r[:shown].tolist(), f[:shown].tolist()]
    if output_dict:
        report: dict[str, Any] = {}
        # ``float`` of every support, as ``astype`` (the same rounding for counts above 2**53).
        supports = s[:shown].astype(np.float64).tolist()
        for name, precision_i, recall_i, f1_i, support_i in zip(*columns, supports, strict=True):
            report[name] = {
                "precision": precision_i,
                "recall": recall_i,
                "f1-score": f1_i,
                "support": support_i,
            }
    else:
        width = max(max(map(len, names)), len("weighted avg"), digits)
        head_fmt = "{:>{width}s} " + " {:>9}" * len(_HEADERS)
        text = head_fmt.format("", *_HEADERS, width=width) + "\n\n"
        row_fmt = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}\n"
        # ``"%9s" % str(v)`` is ``"{:>9}".format(v)`` and ``"%9.2f"`` is ``"{:>9.2f}"``, for
        # ints and floats alike; the names are strings, right-aligned alike.
        row_percent = f"%{width}s " + f" %9.{digits}f" * 3 + " %9s\n"
        columns.append(list(map(str, s[:shown].tolist())))
        cells = itertools.chain.from_iterable(zip(*columns, strict=True))
        text += (row_percent * shown) % tuple(cells)
        text += "\n"

    total_support = np.sum(s)
    for average in ("micro", "macro", "weighted"):
        heading = "accuracy" if average == "micro" and micro_is_accuracy else f"{average} avg"
        if average == "micro":
            avg_p, avg_r, avg_f, _ = precision_recall_fscore_support(
                counts, average=average, labels=indices, zero_division=zero_division
            )
        else:
            # From the per-class values above, in scikit-learn's order of operations, so that
            # the averages agree to the last bit (also when NaN entries are left out).
            weights = None if average == "macro" else s
            avg_p, avg_r, avg_f = (_nanaverage(values, weights) for values in (p, r, f))
        values = [avg_p, avg_r, avg_f, total_support]
        if output_dict:
            report[heading] = dict(zip(_HEADERS, [float(value) for value in values], strict=True))
        elif heading == "accuracy":
            fmt = "{:>{width}s} " + " {:>9.{digits}}" * 2 + " {:>9.{digits}f}" + " {:>9}\n"
            text += fmt.format(heading, "", "", avg_f, total_support, width=width, digits=digits)
        else:
            text += row_fmt.format(heading, *values, width=width, digits=digits)

    if output_dict:
        if "accuracy" in report:
            report["accuracy"] = report["accuracy"]["precision"]
        return report
    return text


# ---------------------------------------------------------------------- summary

_OVERALL = (
    ("accuracy", "accuracy"),
    ("balanced_accuracy", "balanced accuracy"),
    ("cohen_kappa", "Cohen's kappa"),
    ("matthews_corrcoef", "MCC"),
    ("miou", "mIoU"),
    ("fwiou", "FWIoU"),
    ("macro_f1", "macro F1"),
)
_PER_CLASS = (
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("specificity", "specificity"),
    ("npv", "NPV"),
    ("iou", "IoU"),
)


def _json_float(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def _json_number(value: Any) -> int | float:
    if isinstance(value, (np.integer, int)):
        return int(value)
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _json_numbers(values: np.ndarray) -> list:
    """:func:`_json_number` over an array, converted in bulk."""
    if values.dtype.kind in "iu":
        return values.tolist()
    return [_json_number(v) for v in values.tolist()]


def summary(
    matrix_or_counts: MatrixLike,
    *,
    class_names: Sequence[str] | None = None,
    zero_division: ZeroDivision = "warn",
) -> dict:
    """Overall and per-class metrics as a JSON-ready dict (plain ``int``/``float``/``str``/None).

    Layout::

        {"num_classes": K, "num_samples": N,
         "overall": {"accuracy", "balanced_accuracy", "cohen_kappa", "matthews_corrcoef",
                     "miou", "fwiou", "macro_precision", "macro_recall", "macro_f1",
                     "weighted_precision", "weighted_recall", "weighted_f1"},
         "per_class": [{"index", "name", "support", "predicted", "precision", "recall",
                        "f1", "specificity", "npv", "iou"}, ...],
         "class_names": [K names], "weighted": bool,
         "confusion_matrix": [[C_00, C_01, ...], ...]}

    The last three keys are the whole state, so the metrics can be recomputed from the dict
    (or its JSON) alone: ``ConfusionAccumulator.from_matrix(d["confusion_matrix"],
    class_names=d["class_names"], weighted=d["weighted"])``. ``weighted`` is True for a float
    matrix (sums of sample weights), whose cells are then written as floats.

    Counts (``num_samples``, ``support``, ``predicted``) are ints for an integer matrix
    (whole-valued floats of a weighted matrix are also written as ints). Every rate follows
    ``zero_division``; an undefined value with ``zero_division=np.nan`` is written as ``None``
    (JSON ``null``), never as NaN. The macro averages score every class of the matrix
    (scikit-learn's macro with ``labels=range(K)``; NaN entries left out), the weighted ones
    weight each class by its support ``AP_i``;
    ``miou`` leaves out classes absent from both truth and prediction (the segmentation
    convention), and ``fwiou`` weights IoU by support.

    Example:
        >>> s = summary([[4, 1, 1], [6, 2, 2], [3, 0, 6]], class_names=["cat", "fish", "hen"])
        >>> s["overall"]["accuracy"], s["per_class"][1]["name"], s["per_class"][1]["recall"]
        (0.48, 'fish', 0.2)
    """
    return _summary(matrix_or_counts, class_names, zero_division, state=True)


class _SummaryParts(NamedTuple):
    """What every summary view is made of: one metric pass over the counts, kept as columns."""

    counts: ClassCounts
    names: list[str]
    overall: dict[str, float | None]
    support: list  # JSON numbers (see _json_numbers), one per class
    predicted: list
    rates: dict[str, np.ndarray]  # per-class float64 rates, keyed as in _PER_CLASS


def _summary_parts(
    matrix_or_counts: MatrixLike,
    class_names: Sequence[str] | None,
    zero_division: ZeroDivision,
) -> _SummaryParts:
    counts = as_counts(matrix_or_counts)
    zero_division_value(zero_division)
    k = counts.num_classes
    if class_names is None:
        names = list(map(str, range(k)))
    else:
        if isinstance(class_names, str) or len(class_names) != k:
            raise ValueError(
                f"`class_names` must hold {k} names (one per class), got {class_names!r}."
            )
        names = [str(name) for name in class_names]
    zd = zero_division
    overall = {
        "accuracy": accuracy(counts, zero_division=zd),
        "balanced_accuracy": balanced_accuracy(counts, zero_division=zd),
        "cohen_kappa": cohen_kappa(counts, zero_division=zd),
        "matthews_corrcoef": matthews_corrcoef(counts, zero_division=0.0 if zd == "warn" else zd),
        "miou": miou(counts, zero_division=zd),
        "fwiou": fwiou(counts, zero_division=zd),
        "macro_precision": precision(counts, average="macro", zero_division=zd),
        "macro_recall": recall(counts, average="macro", zero_division=zd),
        "macro_f1": f1(counts, average="macro", zero_division=zd),
        "weighted_precision": precision(counts, average="weighted", zero_division=zd),
        "weighted_recall": recall(counts, average="weighted", zero_division=zd),
        "weighted_f1": f1(counts, average="weighted", zero_division=zd),
    }
    per_class_values = {
        "precision": precision(counts, zero_division=zd),
        "recall": recall(counts, zero_division=zd),
        "f1": f1(counts, zero_division=zd),
        "specificity": specificity(counts, zero_division=zd),
        "npv": negative_predictive_value(counts, zero_division=zd),
        "iou": jaccard(counts, zero_division=zd),
    }
    return _SummaryParts(
        counts=counts,
        names=names,
        overall={key: _json_float(value) for key, value in overall.items()},
        # Columns are converted to Python numbers in bulk (``tolist``), not value by value: at
        # K = 1000 this is most of the cost of a summary.
        support=_json_numbers(counts.actual_positives),
        predicted=_json_numbers(counts.predicted_positives),
        rates={
            key: np.asarray(values, dtype=np.float64) for key, values in per_class_values.items()
        },
    )


def _json_floats(values: np.ndarray) -> list[float | None]:
    """``values`` as Python floats, NaN as None."""
    column = values.tolist()
    if not np.isnan(values).any():
        return column
    return [None if v != v else v for v in column]


def _summary(
    matrix_or_counts: MatrixLike,
    class_names: Sequence[str] | None,
    zero_division: ZeroDivision,
    *,
    state: bool,
) -> dict:
    """:func:`summary`; ``state=False`` leaves out the matrix (at K = 1000 converting it to
    lists is most of the cost)."""
    parts = _summary_parts(matrix_or_counts, class_names, zero_division)
    counts, k = parts.counts, parts.counts.num_classes
    rates = [_json_floats(parts.rates[key]) for key, _ in _PER_CLASS]
    per_class = [
        {
            "index": index,
            "name": name,
            "support": support_i,
            "predicted": predicted_i,
            "precision": precision_i,
            "recall": recall_i,
            "f1": f1_i,
            "specificity": specificity_i,
            "npv": npv_i,
            "iou": iou_i,
        }
        for (
            index,
            name,
            support_i,
            predicted_i,
            precision_i,
            recall_i,
            f1_i,
            specificity_i,
            npv_i,
            iou_i,
        ) in zip(range(k), parts.names, parts.support, parts.predicted, *rates, strict=True)
    ]
    weighted = counts.matrix.dtype.kind == "f"
    data: dict[str, Any] = {
        "num_classes": k,
        "num_samples": _json_number(counts.total),
        "overall": parts.overall,
        "per_class": per_class,
    }
    if state:
        data["class_names"] = list(parts.names)
        data["weighted"] = weighted
        # ``tolist`` gives Python ints (or floats for weights) in one pass over the matrix.
        data["confusion_matrix"] = counts.matrix.astype(
            np.float64 if weighted else np.int64, copy=False
        ).tolist()
    return data


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _fmt_count(value: int | float, digits: int) -> str:
    """A count as printed: an int as is, a sum of fractional weights with ``digits`` decimals."""
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


class _Column(NamedTuple):
    """One column of the per-class table, ready for a %-format: ``"%" + str(width) + conversion``
    of each item is the cell, right-aligned (e.g. ``"%7.4f" % x == f"{x:.4f}".rjust(7)``)."""

    conversion: str  # "s" (items are the cells), "d" (ints) or ".4f" (floats)
    items: list
    width: int  # of the widest cell


def _rate_column(values: np.ndarray, digits: int) -> _Column:
    """:func:`_fmt` of every value of a rate column, as a %-format conversion.

    Without NaN, infinite or negative values (rates are in [0, 1]; a float matrix can leave a
    tiny negative ``TN``), the floats are formatted straight into the table: the cell length of
    ``"%.{digits}f"`` grows with the value, so the widest cell is the largest value's.
    Otherwise each cell is formatted first (``"%.4f" % v`` is ``f"{v:.4f}"``; NaN as "–").
    """
    fmt = f"%.{digits}f"
    column = values.tolist()
    if np.isfinite(values).all() and not np.signbit(values).any():
        return _Column(f".{digits}f", column, len(fmt % max(column)))
    cells = ["–" if v != v else fmt % v for v in column]
    return _Column("s", cells, max(map(len, cells)))


def _count_column(values: np.ndarray, numbers: list, digits: int) -> _Column:
    """:func:`_fmt_count` of every count of a column (``numbers`` are its JSON numbers)."""
    if values.dtype.kind in "iu":  # non-negative ints: the widest cell is the largest count's
        return _Column("d", numbers, len(str(max(numbers))))
    cells = [_fmt_count(value, digits) for value in numbers]
    return _Column("s", cells, max(map(len, cells)))


def _table(parts: _SummaryParts, digits: int) -> tuple[list[list[str]], list[str], list[_Column]]:
    """The overall (label, value) pairs, the per-class header, and the per-class columns
    (names, support, predicted, then the rates of ``_PER_CLASS``)."""
    overall = [[label, _fmt(parts.overall[key], digits)] for key, label in _OVERALL]
    header = ["class", "support", "predicted"] + [label for _, label in _PER_CLASS]
    counts = parts.counts
    names = parts.names
    columns = [
        _Column("s", names, max(map(len, names))),
        _count_column(counts.actual_positives, parts.support, digits),
        _count_column(counts.predicted_positives, parts.predicted, digits),
    ] + [_rate_column(parts.rates[key], digits) for key, _ in _PER_CLASS]
    return overall, header, columns


def _rows(row_fmt: str, columns: list[_Column], separator: str) -> str:
    """Every row of ``columns`` through ``row_fmt``, joined by ``separator``, in one %-format
    pass over the cells taken row by row."""
    items = tuple(itertools.chain.from_iterable(zip(*(c.items for c in columns), strict=True)))
    return separator.join([row_fmt] * len(columns[0].items)) % items


def _cells(column: _Column) -> list[str]:
    """The cells of a column as strings."""
    if column.conversion == "s":
        return column.items
    return list(map(f"%{column.conversion}".__mod__, column.items))


def summary_text(
    matrix_or_counts: MatrixLike,
    *,
    class_names: Sequence[str] | None = None,
    zero_division: ZeroDivision = "warn",
    digits: int = 4,
) -> str:
    """:func:`summary` as a plain-text table (undefined values print as ``–``).

    Example:
        >>> print(summary_text([[4, 1, 1], [6, 2, 2], [3, 0, 6]], digits=2))
        samples: 25, classes: 3
        <BLANKLINE>
                 accuracy  0.48
        balanced accuracy  0.51
            Cohen's kappa  0.25
                      MCC  0.29
                     mIoU  0.32
                    FWIoU  0.32
                 macro F1  0.47
        <BLANKLINE>
        class  support  predicted  precision  recall    F1  specificity   NPV   IoU
            0        6         13       0.31    0.67  0.42         0.53  0.83  0.27
            1       10          3       0.67    0.20  0.31         0.93  0.64  0.18
            2        9          9       0.67    0.67  0.67         0.81  0.81  0.50
    """
    parts = _summary_parts(matrix_or_counts, class_names, zero_division)
    overall, header, columns = _table(parts, digits)
    label_width = max(len(label) for label, _ in overall)
    samples = _fmt_count(_json_number(parts.counts.total), digits)
    lines = [f"samples: {samples}, classes: {parts.counts.num_classes}", ""]
    lines += [f"{label:>{label_width}}  {value}" for label, value in overall]
    lines.append("")
    # Every row right-aligned by one %-format pass ("%5s" % cell is cell.rjust(5)).
    widths = [max(len(title), column.width) for title, column in zip(header, columns, strict=True)]
    lines.append("  ".join(f"%{width}s" for width in widths) % tuple(header))
    row_fmt = "  ".join(
        f"%{width}{column.conversion}" for width, column in zip(widths, columns, strict=True)
    )
    lines.append(_rows(row_fmt, columns, "\n"))
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def summary_markdown(
    matrix_or_counts: MatrixLike,
    *,
    class_names: Sequence[str] | None = None,
    zero_division: ZeroDivision = "warn",
    digits: int = 4,
) -> str:
    """:func:`summary` as two GitHub-flavoured markdown tables (overall, then per class).

    Example:
        >>> print(summary_markdown([[2, 0], [1, 1]], zero_division=0, digits=2))
        | metric | value |
        |---|---:|
        | accuracy | 0.75 |
        | balanced accuracy | 0.75 |
        | Cohen's kappa | 0.50 |
        | MCC | 0.58 |
        | mIoU | 0.58 |
        | FWIoU | 0.58 |
        | macro F1 | 0.73 |
        <BLANKLINE>
        | class | support | predicted | precision | recall | F1 | specificity | NPV | IoU |
        |---|---:|---:|---:|---:|---:|---:|---:|---:|
        | 0 | 2 | 3 | 0.67 | 1.00 | 0.80 | 0.50 | 1.00 | 0.67 |
        | 1 | 2 | 1 | 1.00 | 0.50 | 0.67 | 1.00 | 0.67 | 0.50 |
    """
    parts = _summary_parts(matrix_or_counts, class_names, zero_division)
    overall, header, columns = _table(parts, digits)
    lines = ["| metric | value |", "|---|---:|"]
    lines += [f"| {_md_escape(label)} | {value} |" for label, value in overall]
    lines.append("")
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    # Only names can hold "|": counts and rates are digits, ".", "-", "e", "+", "inf" or "–".
    columns[0] = _Column("s", [_md_escape(name) for name in columns[0].items], 0)
    row_fmt = "| " + " | ".join(f"%{column.conversion}" for column in columns) + " |"
    lines.append(_rows(row_fmt, columns, "\n"))
    return "\n".join(lines)


def summary_html(
    matrix_or_counts: MatrixLike,
    *,
    class_names: Sequence[str] | None = None,
    zero_division: ZeroDivision = np.nan,
    digits: int = 4,
    max_rows: int = 50,
) -> str:
    """:func:`summary` as an HTML fragment (what an accumulator shows in a notebook).

    Undefined values show as ``–`` (``zero_division=np.nan`` by default, so nothing warns);
    with more than ``max_rows`` classes only the first and last ``max_rows // 2`` are shown.
    """
    parts = _summary_parts(matrix_or_counts, class_names, zero_division)
    overall, header, columns = _table(parts, digits)
    rows = [list(row) for row in zip(*map(_cells, columns), strict=True)]
    if len(rows) > max_rows:
        half = max(max_rows // 2, 1)
        rows = rows[:half] + [["…"] * len(header)] + rows[-half:]
    esc = html.escape
    samples = _fmt_count(_json_number(parts.counts.total), digits)
    parts_html = [
        '<div class="metricstream-summary">',
        f"<p><b>ConfusionAccumulator</b>: {esc(samples)} "
        f"samples, "
        f"{parts.counts.num_classes} classes</p>",
        "<table><tbody>",
    ]
    parts_html += [
        f'<tr><th style="text-align:left">{esc(label)}</th><td>{esc(value)}</td></tr>'
        for label, value in overall
    ]
    parts_html.append("</tbody></table>")
    parts_html.append("<table><thead><tr>")
    parts_html += [f"<th>{esc(cell)}</th>" for cell in header]
    parts_html.append("</tr></thead><tbody>")
    for row in rows:
        parts_html.append("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>")
    parts_html.append("</tbody></table></div>")
    return "".join(parts_html)
