"""One flat dict of scalars from any accumulator or group: the thing every logger takes.

``flat_scalars(group)`` gives ``{"labels/f1_macro": 0.71, "scores/auroc_macro": 0.93, ...}``:
one ``name: float`` per metric, ``/``-separated paths for the members of an
:class:`~metricstream.AccumulatorGroup`, ready for
``LightningModule.log_dict``, a Hugging Face ``compute_metrics`` result, MLflow's
``log_metrics`` or ``wandb.log``. Every value comes from the accumulator's own public views, so it
equals what those views (and scikit-learn) give on the same data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np

from .base import Accumulator, AccumulatorGroup

__all__ = ["flat_scalars"]


def flat_scalars(
    obj: Accumulator | AccumulatorGroup | Any,
    prefix: str = "",
    *,
    zero_division: Any = "warn",
    ignore_absent: bool = True,
    per_class: bool = False,
    intervals: bool = True,
) -> dict[str, float]:
    """The metrics of an accumulator or group as one flat ``{name: float}`` dict.

    Keys are ``prefix + path``: a group's member ``name`` contributes ``name/<metric>``. What each
    accumulator contributes (all computed by its public views):

    * :class:`~metricstream.ConfusionAccumulator`: ``num_samples``, ``accuracy``,
      ``balanced_accuracy``, ``cohen_kappa``, ``matthews_corrcoef``, ``miou``, and
      ``{precision,recall,f1}_{macro,weighted}``; with 2 classes also ``precision``, ``recall``
      and ``f1`` of class 1 (scikit-learn's ``average="binary"``). ``per_class=True`` adds
      ``{precision,recall,f1,iou}/<class name or index>``;
    * :class:`~metricstream.ScoreAccumulator`: ``num_samples``, ``auroc`` and
      ``average_precision`` (binary), or their ``_macro`` averages and ``auroc_weighted``
      (multiclass), or ``_macro`` and ``_micro`` averages (multilabel), ``brier_score``,
      ``log_loss``, ``calibration_error`` (15-bin ECE), and ``top1_accuracy`` (multiclass);
    * :class:`~metricstream.MultilabelAccumulator`: ``num_samples``, ``subset_accuracy``,
      ``hamming_loss``, ``{precision,recall,f1,jaccard}_{micro,macro,weighted,samples}``;
    * :class:`~metricstream.BootstrapConfusionAccumulator`: the confusion scalars of its main
      matrix, plus ``accuracy_low`` / ``accuracy_high`` and ``f1_macro_low`` / ``f1_macro_high``
      (95 % percentile intervals; ``intervals=False`` leaves them out);
    * anything else with a ``summary()`` returning a mapping: its numbers, nested mappings
      flattened with ``/``.

    Formulas and the 0/0 rule are those of each view: precision ``TP/PP``, recall ``TP/AP``,
    F1 ``2TP/(AP+PP)``, and a 0/0 ratio gives ``zero_division`` (``"warn"``: 0.0 with an
    ``UndefinedMetricWarning``, as scikit-learn; ``np.nan`` to log undefined values as NaN).
    Macro and weighted averages of a confusion matrix run over the classes present in the truth
    or the predictions (scikit-learn's ``labels=None``); ``ignore_absent=False`` averages over
    all ``num_classes`` (torchmetrics' convention). Metrics undefined on an empty accumulator
    (AUROC with one class present, ...) are NaN.

    Example:
        >>> from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator
        >>> group = AccumulatorGroup(
        ...     labels=ConfusionAccumulator(2, threshold=0.5), scores=ScoreAccumulator("binary")
        ... )
        >>> _ = group.update([0, 1, 1, 0], [0.2, 0.9, 0.4, 0.3])
        >>> scalars = flat_scalars(group, "val/")
        >>> scalars["val/labels/accuracy"], scalars["val/labels/f1"], scalars["val/scores/auroc"]
        (0.75, 0.6666666666666666, 1.0)

    Raises:
        TypeError: ``obj`` is neither an accumulator, a group, nor has a ``summary()`` mapping.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"`prefix` must be a string, got {type(prefix).__name__}.")
    options = {
        "zero_division": zero_division,
        "ignore_absent": ignore_absent,
        "per_class": per_class,
        "intervals": intervals,
    }
    return dict(_walk(obj, prefix, options))


def _walk(obj: Any, prefix: str, options: dict[str, Any]) -> Iterator[tuple[str, float]]:
    if isinstance(obj, AccumulatorGroup):
        for name, member in obj.items():
            yield from _walk(member, f"{prefix}{name}/", options)
        return
    for kind, scalars in _KINDS:
        if isinstance(obj, kind):
            for key, value in scalars(obj, options):
                yield prefix + key, _as_float(value)
            return
    summary = getattr(obj, "summary", None)
    if callable(summary):
        result = summary()
        if isinstance(result, Mapping):
            yield from _numbers(result, prefix)
            return
    raise TypeError(
        f"cannot make scalars of a {type(obj).__name__}: pass an accumulator, an "
        f"AccumulatorGroup, or an object whose summary() returns a dict of numbers."
    )


def _numbers(mapping: Mapping[Any, Any], prefix: str) -> Iterator[tuple[str, float]]:
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            yield from _numbers(value, f"{prefix}{key}/")
        elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, bool
        ):
            yield f"{prefix}{key}", float(value)


def _as_float(value: Any) -> float:
    if value is None:
        return math.nan
    return float(value)


def _confusion(acc: Any, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    zd = options["zero_division"]
    absent = options["ignore_absent"]
    yield "num_samples", acc.num_samples
    yield "accuracy", acc.accuracy(zero_division=zd)
    yield "balanced_accuracy", acc.balanced_accuracy(zero_division=zd)
    yield "cohen_kappa", acc.cohen_kappa(zero_division=zd)
    # matthews_corrcoef takes a number only: "warn" means scikit-learn's 0.0 here.
    yield "matthews_corrcoef", acc.matthews_corrcoef(zero_division=_number(zd))
    yield "miou", acc.miou(zero_division=zd)
    for average in ("macro", "weighted"):
        for name in ("precision", "recall", "f1"):
            view = getattr(acc, name)
            yield f"{name}_{average}", view(average=average, zero_division=zd, ignore_absent=absent)
    if acc.num_classes == 2:
        for name in ("precision", "recall", "f1"):
            yield name, getattr(acc, name)(average="binary", zero_division=zd)
    if options["per_class"]:
        names = acc.class_names or tuple(str(i) for i in range(acc.num_classes))
        for name in ("precision", "recall", "f1", "jaccard"):
            values = getattr(acc, name)(average=None, zero_division=zd)
            label = "iou" if name == "jaccard" else name
            for class_name, value in zip(names, np.asarray(values).tolist(), strict=True):
                yield f"{label}/{class_name}", value


def _scores(acc: Any, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    yield "num_samples", acc.num_samples
    if acc.task == "binary":
        averages: tuple[str | None, ...] = (None,)
    elif acc.task == "multiclass":
        averages = ("macro", "weighted")
    else:
        averages = ("macro", "micro")
    for average in averages:
        suffix = "" if average is None else f"_{average}"
        curve_average = "macro" if average is None else average
        yield f"auroc{suffix}", _or_nan(partial(acc.auroc, curve_average))
        if average != "weighted":  # its cost is the macro's again, for a near-equal number
            view = partial(acc.average_precision, curve_average)
            yield f"average_precision{suffix}", _or_nan(view)
    yield "brier_score", _or_nan(acc.brier_score)
    yield "log_loss", _or_nan(acc.log_loss)
    yield "calibration_error", _or_nan(acc.calibration_error)
    if acc.task == "multiclass":
        yield "top1_accuracy", _or_nan(lambda: np.asarray(acc.top_k_accuracy(1)).item())


def _multilabel(acc: Any, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    zd = options["zero_division"]
    yield "num_samples", acc.num_samples
    yield "subset_accuracy", acc.subset_accuracy(zero_division=zd)
    yield "hamming_loss", acc.hamming_loss(zero_division=zd)
    for average in ("micro", "macro", "weighted", "samples"):
        for name in ("precision", "recall", "f1", "jaccard"):
            yield f"{name}_{average}", getattr(acc, name)(average=average, zero_division=zd)


def _bootstrap(acc: Any, options: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    yield from _confusion(acc.confusion(), options)
    if options["intervals"] and acc.confusion().num_samples > 0:
        zd = options["zero_division"]
        accuracy = acc.interval("accuracy", zero_division=zd)
        yield "accuracy_low", accuracy.low
        yield "accuracy_high", accuracy.high
        f1 = acc.interval(
            "f1", average="macro", zero_division=zd, ignore_absent=options["ignore_absent"]
        )
        yield "f1_macro_low", f1.low
        yield "f1_macro_high", f1.high


def _or_nan(view: Callable[[], Any]) -> Any:
    # A score view on an empty accumulator (or with one class absent) is undefined: log NaN
    # rather than fail the epoch.
    try:
        return view()
    except ValueError:
        return math.nan


def _number(zero_division: Any) -> float:
    return 0.0 if isinstance(zero_division, str) else float(zero_division)


def _kinds() -> tuple[tuple[type, Callable[..., Iterator[tuple[str, Any]]]], ...]:
    import metricstream as ms

    # The bootstrap accumulator first: it forwards the confusion views but is no subclass.
    return (
        (ms.BootstrapConfusionAccumulator, _bootstrap),
        (ms.ConfusionAccumulator, _confusion),
        (ms.ScoreAccumulator, _scores),
        (ms.MultilabelAccumulator, _multilabel),
    )


_KINDS = _kinds()
