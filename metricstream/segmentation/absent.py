"""Absent-class rules: what a class contributes to a mean where it is missing.

Per image (or, for the dataset-level aggregation, over the whole dataset) each class is in one
of four cases, from its truth pixels ``T``, predicted pixels ``P`` and intersection ``I``:

============  =========  ==================================================================
case          counts     IoU ``I/(T+P-I)``, Dice ``2I/(T+P)``
============  =========  ==================================================================
present       T>0, P>0   defined (0 when the masks do not overlap)
truth only    T>0, P=0   0 (a missed class)
pred only     T=0, P>0   0 (a hallucinated class)
both absent   T=0, P=0   0/0: undefined
============  =========  ==================================================================

An :class:`AbsentRule` says, for each of the last three cases, whether the (image, class) pair
is averaged in and with which value; ``empty`` is returned by a mean over no pair at all.
Accuracy (per-class recall ``I/T``) is defined where the class is in the truth only, so the
pred-only and both-absent cases never enter it.

The named rules, and the libraries whose numbers they reproduce:

* ``"skip_both"`` (the default): both absent skipped, pred only 0, truth only 0. torchmetrics
  ``MeanIoU`` and ``DiceScore`` (0/0 gives NaN, dropped by ``nanmean``), mmsegmentation
  ``IoUMetric`` (dataset-level, ``nanmean`` over classes).
* ``"skip_truth_absent"``: every class absent from the truth skipped (pred only too), truth only
  0. MONAI ``DiceMetric``/``MeanIoU`` with ``ignore_empty=True`` (their default).
* ``"both_absent_one"``: both absent counts as 1 (a correct "nothing here"), pred only 0, truth
  only 0. MONAI with ``ignore_empty=False``.
* ``"both_absent_zero"``: both absent counts as 0 (scikit-learn's ``zero_division=0``).
* ``"both_absent_nan"``: both absent makes the mean NaN (nothing hides it).

The rule is an argument of the views, not configuration: the accumulator keeps, per class, the
counts of images in each case and the sums over the images where the class is present, so every
rule is computed from the same state. :func:`reproduce` gives the exact number of each anchor
library's metric class, options included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["ANCHORS", "RULES", "AbsentRule", "reproduce", "resolve_rule"]

_BOTH = ("skip", "zero", "one", "nan")
_ONE_SIDED = ("zero", "skip")


@dataclass(frozen=True)
class AbsentRule:
    """What an absent class contributes to a mean of IoU, Dice or accuracy.

    Attributes:
        both_absent: class absent from truth and prediction (0/0): ``"skip"`` (not averaged),
            ``"zero"`` or ``"one"`` (averaged as that value), ``"nan"`` (the mean is NaN).
        pred_only: class predicted but not in the truth: ``"zero"`` (averaged as 0) or
            ``"skip"``.
        truth_only: class in the truth but not predicted: ``"zero"`` or ``"skip"``.
        empty: the value of a mean over nothing (no image or class to average); NaN by default.
    """

    both_absent: str = "skip"
    pred_only: str = "zero"
    truth_only: str = "zero"
    empty: float = math.nan

    def __post_init__(self) -> None:
        if self.both_absent not in _BOTH:
            raise ValueError(f"`both_absent` must be one of {_BOTH}, got {self.both_absent!r}.")
        for name in ("pred_only", "truth_only"):
            value = getattr(self, name)
            if value not in _ONE_SIDED:
                raise ValueError(f"`{name}` must be one of {_ONE_SIDED}, got {value!r}.")
        if isinstance(self.empty, bool) or not isinstance(self.empty, (int, float)):
            raise TypeError(f"`empty` must be a number, got {self.empty!r}.")


RULES: dict[str, AbsentRule] = {
    "skip_both": AbsentRule("skip", "zero", "zero"),
    "skip_truth_absent": AbsentRule("skip", "skip", "zero"),
    "both_absent_one": AbsentRule("one", "zero", "zero"),
    "both_absent_zero": AbsentRule("zero", "zero", "zero"),
    "both_absent_nan": AbsentRule("nan", "zero", "zero"),
}


def resolve_rule(absent: str | AbsentRule) -> AbsentRule:
    """``absent`` as an :class:`AbsentRule`: a rule, or the name of one of :data:`RULES`."""
    if isinstance(absent, AbsentRule):
        return absent
    if isinstance(absent, str) and absent in RULES:
        return RULES[absent]
    raise ValueError(f"`absent` must be an AbsentRule or one of {sorted(RULES)}, got {absent!r}.")


def _options(anchor: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(
            f"{anchor} has no option(s) {unknown} here; the options reproduced are "
            f"{sorted(defaults)}."
        )
    return {**defaults, **given}


def _choice(anchor: str, name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{anchor}: `{name}` must be one of {allowed}, got {value!r}.")


def _flag(anchor: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{anchor}: `{name}` must be True or False, got {value!r}.")
    return value


def _monai(acc: Any, metric: str, anchor: str, options: dict[str, Any]) -> Any:
    """MONAI ``DiceMetric``/``MeanIoU`` then ``aggregate()``.

    Per image and class, the value is NaN where the truth is empty and ``ignore_empty`` (else 1
    when the prediction is empty too, 0 otherwise). ``aggregate`` ("mean") averages each image
    over its non-NaN classes, then the images that had one; a mean over nothing is 0 (not NaN).
    "mean_batch" averages each class over its non-NaN images (0 when none); "sum" and
    "sum_batch" add the non-NaN values. "mean_channel", "sum_channel" and "none" return one value
    per image, which a constant-memory accumulator does not keep.
    """
    o = _options(
        anchor, options, {"include_background": True, "reduction": "mean", "ignore_empty": True}
    )
    background = _flag(anchor, "include_background", o["include_background"])
    ignore_empty = _flag(anchor, "ignore_empty", o["ignore_empty"])
    _choice(anchor, "reduction", o["reduction"], ("mean", "mean_batch", "sum", "sum_batch"))
    rule = RULES["skip_truth_absent" if ignore_empty else "both_absent_one"]
    rule = AbsentRule(rule.both_absent, rule.pred_only, rule.truth_only, empty=0.0)
    view = getattr(acc, metric)
    common = {"aggregation": "image", "include_background": background, "absent": rule}
    reduction = o["reduction"]
    if reduction == "mean":
        return view(average="macro", **common)
    if reduction == "mean_batch":
        return view(average="none", **common)
    totals, _ = acc._image_totals(metric, background, rule)
    return float(totals.sum()) if reduction == "sum" else totals


def _torchmetrics_iou(acc: Any, anchor: str, options: dict[str, Any]) -> Any:
    """torchmetrics ``MeanIoU``: per image and class ``I/U``, kept where ``U > 0``.

    ``per_class=True``: each class's mean over its kept images, -1 where none was kept.
    ``per_class=False``: the mean over every kept (image, class) pair at once, NaN if none.
    """
    o = _options(anchor, options, {"include_background": True, "per_class": False})
    background = _flag(anchor, "include_background", o["include_background"])
    if _flag(anchor, "per_class", o["per_class"]):
        rule = AbsentRule("skip", "zero", "zero", empty=-1.0)
        return acc.iou("image", "none", include_background=background, absent=rule)
    return acc.iou("image", "pooled", include_background=background, absent="skip_both")


def _torchmetrics_dice(acc: Any, anchor: str, options: dict[str, Any]) -> Any:
    """torchmetrics ``DiceScore``: ``2I/(T+P)`` per image and class, NaN where ``T+P = 0``.

    "global" sums the counts over the images first (dataset-level); "samplewise" averages per
    image, then ``nanmean`` over the images. "macro" is a ``nanmean`` over classes, "micro"
    ``2ΣI/Σ(T+P)``, "weighted" ``nansum(dice * T/ΣT)`` (0 where the truth is empty but the
    prediction is not: the weights are then NaN), "none" per class.
    """
    o = _options(
        anchor,
        options,
        {"include_background": True, "average": "macro", "aggregation_level": "samplewise"},
    )
    background = _flag(anchor, "include_background", o["include_background"])
    average = o["average"]
    _choice(anchor, "average", average, ("micro", "macro", "weighted", "none", None))
    _choice(anchor, "aggregation_level", o["aggregation_level"], ("samplewise", "global"))
    average = "none" if average is None else average
    if o["aggregation_level"] == "global":
        if average == "weighted":
            return acc._dataset_weighted_dice_torchmetrics(background)
        return acc.dice("dataset", average, include_background=background, absent="skip_both")
    if average == "weighted":
        return acc._image_weighted_dice_torchmetrics(background)
    return acc.dice("image", average, include_background=background, absent="skip_both")


def _mmseg(acc: Any, anchor: str, options: dict[str, Any]) -> Any:
    """mmsegmentation ``IoUMetric``: dataset-level counts over every image (``ignore_index``
    pixels dropped), per class ``IoU = I/U``, ``Acc = I/T``, ``Dice = 2I/(T+P)``, NaN where the
    denominator is 0; the summary is ``nanmean`` over classes (``aAcc = ΣI/ΣT``). Here as
    fractions, unrounded (mmsegmentation prints ``round(100 * value, 2)``); ``nan_to_num``
    replaces NaN per class before the mean, as it does.
    """
    o = _options(anchor, options, {"metric": "mIoU", "nan_to_num": None})
    metric = o["metric"]
    allowed = ("aAcc", "mIoU", "mAcc", "mDice", "IoU", "Acc", "Dice")
    _choice(anchor, "metric", metric, allowed)
    if metric == "aAcc":
        return acc.accuracy("dataset", "micro")
    name = metric.lstrip("m")
    view = {"IoU": acc.iou, "Acc": acc.accuracy, "Dice": acc.dice}[name]
    import numpy as np

    values = np.asarray(view("dataset", "none", absent="skip_both"), dtype=np.float64)
    if o["nan_to_num"] is not None:
        values = np.nan_to_num(values, nan=float(o["nan_to_num"]))
    if metric.startswith("m"):
        kept = values[~np.isnan(values)]
        return float(kept.mean()) if kept.size else math.nan
    return values


ANCHORS: dict[str, Any] = {
    "monai.DiceMetric": lambda acc, o: _monai(acc, "dice", "monai.DiceMetric", o),
    "monai.MeanIoU": lambda acc, o: _monai(acc, "iou", "monai.MeanIoU", o),
    "torchmetrics.MeanIoU": lambda acc, o: _torchmetrics_iou(acc, "torchmetrics.MeanIoU", o),
    "torchmetrics.DiceScore": lambda acc, o: _torchmetrics_dice(acc, "torchmetrics.DiceScore", o),
    "mmseg.IoUMetric": lambda acc, o: _mmseg(acc, "mmseg.IoUMetric", o),
}


def reproduce(acc: Any, anchor: str, **options: Any) -> Any:
    """The number that ``anchor`` (a metric class of another library, with these options)
    reports for the images counted by ``acc`` (a ``SegmentationAccumulator``).

    Anchors and options (their defaults as in the library):

    * ``"monai.DiceMetric"``, ``"monai.MeanIoU"``: ``include_background=True``,
      ``ignore_empty=True``, ``reduction`` in "mean", "mean_batch", "sum", "sum_batch";
    * ``"torchmetrics.MeanIoU"``: ``include_background=True``, ``per_class=False``;
    * ``"torchmetrics.DiceScore"``: ``include_background=True``, ``average`` in "macro",
      "micro", "weighted", "none"; ``aggregation_level`` in "samplewise", "global";
    * ``"mmseg.IoUMetric"``: ``metric`` in "mIoU", "mAcc", "mDice", "aAcc" (or "IoU", "Acc",
      "Dice" per class), ``nan_to_num=None``.

    "Without background" drops class 0 in these libraries: the accumulator's ``background``
    must be 0 for ``include_background=False``.
    """
    if anchor not in ANCHORS:
        raise ValueError(f"`anchor` must be one of {sorted(ANCHORS)}, got {anchor!r}.")
    if options.get("include_background", True) is False and acc.background != 0:
        raise ValueError(
            f"{anchor} drops class 0 as the background, but this accumulator's `background` is "
            f"{acc.background!r}; construct it with background=0."
        )
    return ANCHORS[anchor](acc, options)
