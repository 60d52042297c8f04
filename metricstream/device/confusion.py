"""Counting a confusion matrix on the device the tensors live on.

One update is a fixed sequence of torch operations, with no host sync and no Python branch on a
tensor's value: the label keys (argmax of scores, or a threshold of binary scores, taken on the
device: probabilities, or logits against the smallest logit whose sigmoid reaches the threshold,
as on the host), the validity of every row (a binary probability outside [0, 1] is a bad score,
as a NaN is), the fused cell key ``K * true + predicted`` (rows that must not count go to a
spare cell), and one ``index_add_`` into the device matrix. A batch holding an invalid value is
left out entirely (its rows all go to the spare cell) and the value is written into the
device-side error record, which the next read raises (see ``_state``). Logits that all lie in
[0, 1] are not warned about here (that would take a host sync per update).

``count`` is the seam a faster kernel replaces: it takes the tensors and returns nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._state import BAD_PRED, BAD_SCORE, BAD_TRUE, BAD_WEIGHT, FLOAT_VALUE, DeviceState, state_for

# Whole weights of an int64-counting accumulator stay below this (the CPU path's limit too).
MAX_INTEGRAL_WEIGHT = 9.2e18
# The bits of a float64 NaN, the value recorded for a NaN score.
_NAN_BITS = 0x7FF8000000000000


class _ConfusionDeviceState(DeviceState):
    """The device state of a confusion matrix: a recorded bad score that is a number (not NaN)
    is a binary probability outside [0, 1], and its message says so, with the remedy."""

    def error(self, record: np.ndarray) -> ValueError:
        error = super().error(record)
        code, bits = int(record[2]), int(record[4])
        if code == BAD_SCORE + FLOAT_VALUE:
            value = float(np.array(bits, dtype=np.int64).view(np.float64))
            if value == value:
                return ValueError(
                    str(error).replace(
                        "the predicted class of that sample is undefined",
                        "this accumulator reads binary scores as probabilities, which lie in "
                        "[0, 1]; for logits create it with `logits=True` (the threshold stays a "
                        "probability: 0.5 is a logit of 0)",
                    )
                )
        return error


def state_of(acc: Any, device: torch.device) -> DeviceState:
    """The accumulator's device state on ``device``, created on its first device update."""

    def make() -> DeviceState:
        rules = f"labels must be integers in [0, {acc.num_classes})"
        if acc.ignore_index is not None:
            rules += f" or equal `ignore_index` ({acc.ignore_index})"
        cells = acc.num_classes * acc.num_classes
        return _ConfusionDeviceState(device, {"matrix": (cells, not acc.weighted)}, rules)

    return state_for(acc, device, make)


def _label_keys(values: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(int64 keys, valid)`` of flat labels: integers in [0, K), or floats holding them. The
    keys of invalid labels are anything: their rows go to the spare cell."""
    if values.is_floating_point():
        wide = values.to(torch.float64)
        valid = (wide >= 0) & (wide < num_classes) & (torch.floor(wide) == wide)
        return torch.where(valid, wide, 0.0).to(torch.int64), valid
    if values.dtype == torch.bool:
        wide = values.to(torch.int64)
        return wide, torch.ones_like(values) if num_classes >= 2 else wide == 0
    wide = values.to(torch.int64)
    return wide, (wide >= 0) & (wide < num_classes)


def _bits(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The values as int64 for the error record, and the flag saying how to read them back."""
    if values.is_floating_point():
        return values.to(torch.float64).view(torch.int64), FLOAT_VALUE
    return values.to(torch.int64), 0


def _ignored(values: torch.Tensor, ignore_index: int | None) -> torch.Tensor | None:
    """Whether each flat true label equals ``ignore_index`` exactly (None: nothing ignored)."""
    if ignore_index is None:
        return None
    if values.is_floating_point():
        as_float = float(ignore_index)
        if int(as_float) != ignore_index:  # no float64 equals it
            return None
        return values.to(torch.float64) == as_float
    return values.to(torch.int64) == ignore_index


def count(acc: Any, y_true: Any, y_pred: Any, weights: Any = None) -> None:
    """Count one batch of tensors on their device into ``acc``'s device state."""
    num_classes = acc.num_classes
    true_shape = tuple(y_true.shape)
    pred_shape = tuple(y_pred.shape)
    if weights is not None and tuple(weights.shape) != true_shape:
        raise ValueError(
            f"`weights` has shape {tuple(weights.shape)}, but `y_true` has shape {true_shape}; "
            f"give one weight per label."
        )
    cut = acc._cut
    flat_true = y_true.reshape(-1)
    score_nan: torch.Tensor | None = None
    score_bad: torch.Tensor | None = None
    pred_source = y_pred
    if (
        cut is not None
        and y_pred.is_floating_point()
        and pred_shape in (true_shape, true_shape + (1,))
    ):
        # Binary scores: class 1 where score >= the cut (the probability threshold, or the
        # smallest logit whose sigmoid reaches it), compared exactly in float64, as on the host.
        scores = y_pred.reshape(-1).to(torch.float64)
        pred_keys = (scores >= cut).to(torch.int64)
        pred_ok: torch.Tensor | None = None  # every score has a class (NaN is checked apart)
        score_nan = torch.isnan(scores)
        if not acc.logits:  # probabilities: NaN or outside [0, 1] (-0.0 is inside)
            score_bad = ~((scores >= 0.0) & (scores <= 1.0))
        pred_source = scores
    elif pred_shape == true_shape:
        pred_keys, pred_ok = _label_keys(y_pred.reshape(-1), num_classes)
    elif len(pred_shape) == len(true_shape) + 1:
        axis = acc.class_axis if acc.class_axis >= 0 else acc.class_axis + len(pred_shape)
        if not 0 <= axis < len(pred_shape):
            raise ValueError(
                f"`class_axis` is {acc.class_axis}, but `y_pred` (scores) has only "
                f"{len(pred_shape)} dimensions."
            )
        without = pred_shape[:axis] + pred_shape[axis + 1 :]
        if without != true_shape:
            raise ValueError(
                f"`y_pred` looks like scores of shape {pred_shape} with classes on axis {axis}, "
                f"which leaves shape {without}, but `y_true` has shape {true_shape}; the shapes "
                f"must match once the class axis is removed (set `class_axis` if the classes "
                f"are on another axis)."
            )
        if pred_shape[axis] != num_classes:
            raise ValueError(
                f"`y_pred` (scores) has {pred_shape[axis]} classes on axis {axis}, but "
                f"`num_classes` is {num_classes}."
            )
        if not y_pred.is_floating_point():
            raise TypeError(
                f"`y_pred` scores must be floating point on the device path, got {y_pred.dtype}; "
                f"give logits or probabilities (or labels of `y_true`'s shape)."
            )
        rows = y_pred.movedim(axis, -1).reshape(-1, num_classes)
        # torch.argmax takes the first of equal maxima (+0 and -0 are equal), as the CPU path.
        pred_keys = rows.argmax(dim=-1)
        pred_ok = None
        score_nan = torch.isnan(rows).any(dim=-1)
        pred_source = pred_keys
    else:
        raise ValueError(
            f"`y_pred` has shape {pred_shape}, but `y_true` has shape {true_shape}; give "
            f"predicted labels of `y_true`'s shape or scores with {num_classes} classes on "
            f"axis {acc.class_axis}."
        )
    size = flat_true.numel()
    if size == 0:
        return

    true_keys, true_ok = _label_keys(flat_true, num_classes)
    ignored = _ignored(flat_true, acc.ignore_index)
    if score_bad is None:
        score_bad = score_nan
    counted = true_ok if pred_ok is None else true_ok & pred_ok
    if score_bad is not None:
        counted = counted & ~score_bad
    if ignored is not None:
        counted = counted & ~ignored
    true_bits, true_flag = _bits(flat_true)
    pred_bits, pred_flag = _bits(pred_source.reshape(-1))
    # The first problem of each row, in the CPU path's order: y_true, y_pred, then weights.
    pred_code: torch.Tensor | int = 0
    if pred_ok is not None:
        pred_code = torch.where(pred_ok, 0, BAD_PRED + pred_flag)
    if score_bad is not None and score_nan is not None:
        pred_code = torch.where(score_bad, BAD_SCORE + FLOAT_VALUE, pred_code)
        pred_bits = torch.where(score_nan, _NAN_BITS, pred_bits)
    code = torch.where(true_ok, pred_code, BAD_TRUE + true_flag)
    value_bits = torch.where(true_ok, pred_bits, true_bits)
    if ignored is not None:
        code = torch.where(ignored, 0, code)

    state_dtype = torch.float64 if acc.weighted else torch.int64
    values: torch.Tensor | None = None
    if weights is not None:
        flat_weights = weights.reshape(-1)
        if flat_weights.is_floating_point():
            wide = flat_weights.to(torch.float64)
            weight_ok = (wide >= 0) & (wide != float("inf"))
            if not acc.weighted:
                weight_ok = weight_ok & (torch.floor(wide) == wide) & (wide < MAX_INTEGRAL_WEIGHT)
            values = torch.where(weight_ok, wide, 0.0).to(state_dtype)
        elif flat_weights.dtype == torch.bool:
            weight_ok = torch.ones_like(flat_weights)
            values = flat_weights.to(state_dtype)
        else:
            wide = flat_weights.to(torch.int64)
            weight_ok = wide >= 0
            values = torch.where(weight_ok, wide, 0).to(state_dtype)
        weight_bits, weight_flag = _bits(flat_weights)
        bad_weight = ~weight_ok
        if ignored is not None:
            bad_weight = bad_weight & ~ignored
        code = torch.where((code == 0) & bad_weight, BAD_WEIGHT + weight_flag, code)
        value_bits = torch.where(code == BAD_WEIGHT + weight_flag, weight_bits, value_bits)

    state = state_of(acc, flat_true.device)
    spare = num_classes * num_classes

    def count_rows() -> None:
        clean = state.note_errors(code, value_bits)
        keep = counted & clean
        keys = torch.where(keep, torch.add(pred_keys, true_keys, alpha=num_classes), spare)
        if values is None:
            state.count("matrix", keys)
        else:
            state.add("matrix", keys, torch.where(keep, values, 0).to(state_dtype))

    state.commit(acc, count_rows)
