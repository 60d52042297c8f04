"""Counting a multilabel accumulator's state on the device the tensors live on.

One update is a fixed sequence of torch operations, with no host sync and no Python branch on a
tensor's value. For an (N, L) batch:

* the truth: 0/1 indicators of any integer or bool dtype, or floats holding 0.0/1.0; an entry
  equal to ``ignore_index`` is masked (it counts as none of TP/FP/FN/TN);
* the prediction: indicators, or scores of any float dtype (float16 and bfloat16 included),
  positive where ``score >= threshold``, compared in float64 with the value the CPU kernels
  compare with (the threshold itself for probabilities, its logit for logits): the same
  decision as the CPU path's for every score, as each score is exact in float64;
* per label, the column sums of ``w·t·p``, ``w·t``, ``w·p`` (and ``w`` of masked entries), and
  per sample the row sums ``TP_s, AP_s, PP_s`` scattered into the histograms of
  ``per_sample`` at the CPU kernels' offsets (keys ``offset + AP_s``, ``offset + PP_s``,
  ``offset + |T_s ∪ P_s|``, ``offset + a AP_s + b PP_s``), all in one ``index_add_``;
* the co-occurrence of true labels as float64 matrix products that are exact: every partial
  sum is an integer below 2**53 (integer weights are split into 21-bit limbs).

A batch holding an invalid value is left out entirely (its keys all go to the spare cell) and
the first invalid value is written into the device-side error record, which the next read
raises (see ``_state``). Values are checked in the order of the CPU kernels: the first row
holding one, in it the truth, then the prediction, then the weight.

``count`` is the seam a faster kernel replaces: it takes the tensors and returns nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._state import (
    BAD_PRED,
    BAD_SCORE,
    BAD_TRUE,
    BAD_WEIGHT,
    FLOAT_VALUE,
    DeviceState,
    constant_when_traced,
    state_for,
)

# What else a value can be wrong with here (the codes of ``_state`` stop at 4; a code is below
# ``FLOAT_VALUE``, and this state words its own errors).
BAD_PROBABILITY = 5  # y_pred: a probability outside [0, 1]
BAD_TOTAL = 6  # weights: a batch whose total weight would let the counts pass their bound
# Added to the code when the value is a uint64's bits (read back as unsigned).
UNSIGNED_VALUE = 16

# Columns of ``per_sample`` (those of the CPU kernels).
_ROWS, _JUDGED, _EXACT, _NEITHER, _WEIGHTED_ROWS, _ZERO_WEIGHT, _COUNT = range(7)
_FIXED_COLUMNS = 7
# Integer weights are split into limbs of this many bits for the co-occurrence products: a
# column sum of N limbs stays below 2**53 (exact in float64) for N < 2**32.
_LIMB_BITS = 21
_INT64_BOUND = 2.0**63


class MultilabelDeviceState(DeviceState):
    """:class:`DeviceState` of a multilabel accumulator, wording its errors by row and label.

    The error record's position is in the batch's check layout: per row, ``L`` cells of the
    truth, ``L`` of the prediction and one of the weight (then one cell for the batch total).
    """

    def __init__(
        self,
        device: torch.device,
        sizes: dict[str, tuple[int, bool]],
        rules: str,
        num_labels: int,
        weighted: bool,
        layout: tuple[int, ...],
    ) -> None:
        super().__init__(device, sizes, rules)
        self.num_labels = num_labels
        self.weighted = weighted
        # The ``per_sample`` layout as Python ints: a compiled step guards on their values.
        self.layout = layout

    def error(self, record: np.ndarray) -> ValueError:
        count, batch, code, position, bits = (int(v) for v in record)
        kind = code & 7
        value: Any = bits
        if code & FLOAT_VALUE:
            value = float(np.array(bits, dtype=np.int64).view(np.float64))
        elif code & UNSIGNED_VALUE and bits < 0:
            value = bits + 2**64
        num_labels = self.num_labels
        row, cell = divmod(position, 2 * num_labels + 1)
        if kind == BAD_TRUE:
            what = f"`y_true` holds {value!r} at row {row}, label {cell}, but {self.rules}"
        elif kind == BAD_PRED:
            what = (
                f"`y_pred` holds {value!r} at row {row}, label {cell - num_labels}, but a label "
                f"indicator holds 0 or 1 (float scores are thresholded at `threshold`)"
            )
        elif kind == BAD_SCORE:
            what = (
                f"`y_pred` holds NaN at row {row}, label {cell - num_labels}, but scores must be "
                f"numbers"
            )
        elif kind == BAD_PROBABILITY:
            what = (
                f"`y_pred` holds {value!r} at row {row}, label {cell - num_labels}, but this "
                f"accumulator reads scores as probabilities, which lie in [0, 1] (for logits "
                f"create it with `logits=True`; the threshold stays a probability)"
            )
        elif kind == BAD_WEIGHT:
            rule = (
                "finite and non-negative, and their products with `num_labels` finite"
                if self.weighted
                else "whole non-negative numbers whose product with `num_labels` stays below "
                "2**63 (use weighted=True for fractional weights)"
            )
            what = f"`weights` holds {value!r} at position {row}, but weights must be {rule}"
        else:
            bound = (
                "float64 (the per-label sums would be infinite)"
                if self.weighted
                else "2**63 - 1 (with the samples counted on the device since the last read)"
            )
            what = f"`weights` of a batch sum to {value!r}, which would let a count pass {bound}"
        plural = "value was" if count == 1 else "values were"
        return ValueError(
            f"{count} bad {plural} seen on {self.device} and left out of the counts. The first: "
            f"{what}; in device batch {batch} (0-based, counting the device updates of this "
            f"accumulator). Every batch holding a bad value was left out; the state holds the "
            f"other batches. (The device path checks without waiting for the device; "
            f"`metricstream.device.eager(True)` raises at `update` instead.)"
        )


@constant_when_traced
def _layout_of(acc: Any) -> tuple[int, ...]:
    """The accumulator's ``per_sample`` layout as Python ints (a constant of a compiled step:
    this runs in Python when the step is traced)."""
    return tuple(int(v) for v in acc._layout.tolist())


def state_of(acc: Any, device: torch.device) -> MultilabelDeviceState:
    """The accumulator's device state on ``device``, created on its first device update."""

    def make() -> MultilabelDeviceState:
        num_labels = acc.num_labels
        rules = "a label indicator holds 0 or 1"
        rows = 3
        if acc._ignore_index is not None:
            rules = f"a label indicator holds 0, 1 or `ignore_index` {acc._ignore_index}"
            rows = 4
        integral = not acc.weighted
        layout = _layout_of(acc)
        sizes = {"labels": (rows * num_labels, integral), "per_sample": (layout[5], integral)}
        if acc._cooccurrence:
            sizes["cooccurrence"] = (num_labels * num_labels, integral)
        return MultilabelDeviceState(device, sizes, rules, num_labels, acc.weighted, layout)

    return state_for(acc, device, make)


def _as_matrix(values: torch.Tensor, num_labels: int, name: str) -> torch.Tensor:
    """``values`` as an (N, L) matrix (a 1-D batch when L is 1), checked as the CPU path."""
    if values.dim() == 1 and num_labels == 1:
        return values.reshape(-1, 1)
    if values.dim() != 2 or values.shape[1] != num_labels:
        hint = ""
        if values.dim() == 1:
            hint = (
                " For per-sample label lists use update_sets(); for a single label, num_labels=1."
            )
        raise ValueError(
            f"`{name}` must be an (N, {num_labels}) label indicator matrix (`num_labels` is "
            f"{num_labels}), got shape {tuple(values.shape)}.{hint}"
        )
    if values.is_complex():
        raise TypeError(f"`{name}` must be a 0/1 indicator matrix, got dtype {values.dtype}.")
    return values


def _integer_bits(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Integer values as int64 for the error record, and the flag to read them back."""
    return values.to(torch.int64), UNSIGNED_VALUE if values.dtype == torch.uint64 else 0


def _truth(
    y_true: torch.Tensor, ignore_index: int | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, int]:
    """``(t, known, code, bits, flag)`` of the truth: ``t`` the bool "is 1", ``known`` the bool
    "not masked" (None: nothing is), ``code`` the int64 ``BAD_TRUE`` (+ flag) or 0 per entry."""
    if y_true.dtype == torch.bool:
        zero = torch.zeros(y_true.shape, dtype=torch.int64, device=y_true.device)
        return y_true, None, zero, zero, 0
    masked: torch.Tensor | None = None
    if y_true.is_floating_point():
        wide = y_true.to(torch.float64)
        one = wide == 1
        good = one | (wide == 0)
        bits, flag = wide.view(torch.int64), FLOAT_VALUE
        # The CPU path reads float truth as int64: an entry is masked when it is
        # ``float(ignore_index)`` and that float is ``ignore_index`` exactly.
        if ignore_index is not None and -(2**63) <= ignore_index < 2**63:
            as_float = float(ignore_index)
            if int(as_float) == ignore_index:
                masked = wide == as_float
    else:
        wide, flag = _integer_bits(y_true)
        one = wide == 1
        good = one | (wide == 0)
        bits = wide
        if ignore_index is not None:
            info = torch.iinfo(y_true.dtype)
            if info.min <= ignore_index <= info.max:  # as the CPU path: else nothing is masked
                # a uint64 above 2**63 - 1 is negative in int64
                mask_bits = ignore_index - 2**64 if ignore_index >= 2**63 else ignore_index
                masked = wide == mask_bits
    bad = ~good if masked is None else ~(good | masked)
    code = torch.where(bad, BAD_TRUE + flag, 0)
    return one, None if masked is None else ~masked, code, bits, flag


def _prediction(
    y_pred: torch.Tensor, cut: float, logits: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(positive, code, bits)`` of the prediction, per entry."""
    if y_pred.dtype == torch.bool:
        zero = torch.zeros(y_pred.shape, dtype=torch.int64, device=y_pred.device)
        return y_pred, zero, zero
    if y_pred.is_floating_point():
        # float16/bfloat16/float32 scores are exact in float64, where ``score >= cut`` is the
        # CPU kernels' decision (they compare float32 scores with the smallest float32 at or
        # above ``cut``, which decides alike).
        scores = y_pred.to(torch.float64)
        code = torch.where(torch.isnan(scores), BAD_SCORE + FLOAT_VALUE, 0)
        if not logits:
            outside = (scores < 0) | (scores > 1)
            code = torch.where(outside, BAD_PROBABILITY + FLOAT_VALUE, code)
        return scores >= cut, code, scores.view(torch.int64)
    wide, flag = _integer_bits(y_pred)
    positive = wide == 1
    code = torch.where(positive | (wide == 0), 0, BAD_PRED + flag)
    return positive, code, wide


def _weights(
    weights: torch.Tensor, num_labels: int, weighted: bool, state_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values, total, code, bits)``: the weights in the state's dtype (0 where bad), their
    float64 total, and per row ``BAD_WEIGHT`` (+ flag) or 0 and the value's bits."""
    # The CPU path reads weights as float64 (then as int64 for integer counts): so here.
    wide = weights.to(torch.float64)
    ok = (wide >= 0) & (wide * num_labels < float("inf"))
    if not weighted:
        ok = ok & (torch.floor(wide) == wide) & (wide * num_labels < _INT64_BOUND)
    if weights.is_floating_point():
        bits, flag = weights.to(torch.float64).view(torch.int64), FLOAT_VALUE
    else:
        bits, flag = _integer_bits(weights)
    kept = torch.where(ok, wide, 0.0)
    code = torch.where(ok, 0, BAD_WEIGHT + flag)
    return kept.to(state_dtype), kept.sum(), code, bits


def _cooccurrence(
    t: torch.Tensor, values: torch.Tensor | None, state_dtype: torch.dtype
) -> torch.Tensor:
    """``sum_i w_i t_i t_i^T`` (L, L), flat, in the state's dtype, by float64 products whose
    partial sums are integers below 2**53 (exact in any order) for integer counts."""
    ones = t.to(torch.float64)
    if values is None:
        return (ones.T @ ones).to(state_dtype).reshape(-1)
    if state_dtype == torch.float64:
        return ((ones * values[:, None]).T @ ones).reshape(-1)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for limb in range(3):
        part = (values >> (_LIMB_BITS * limb)) & ((1 << _LIMB_BITS) - 1)
        product = (ones * part.to(torch.float64)[:, None]).T @ ones
        total = total + (product.to(torch.int64) << (_LIMB_BITS * limb))
    return total.reshape(-1)


def count(acc: Any, y_true: Any, y_pred: Any, weights: Any = None) -> None:
    """Count one batch of tensors on their device into ``acc``'s device state."""
    num_labels = acc.num_labels
    true = _as_matrix(y_true, num_labels, "y_true")
    pred = _as_matrix(y_pred, num_labels, "y_pred")
    n = true.shape[0]
    if pred.shape[0] != n:
        raise ValueError(
            f"`y_true` has {n} samples but `y_pred` has {pred.shape[0]}; both must be "
            f"(N, {num_labels})."
        )
    if weights is not None:
        if weights.dim() != 1 or weights.shape[0] != n:
            raise ValueError(
                f"`weights` must have shape ({n},) (one weight per sample), got "
                f"{tuple(weights.shape)}."
            )
        if weights.is_complex():
            raise TypeError(f"`weights` must hold numbers, got dtype {weights.dtype}.")
    if n == 0:
        return
    weighted = acc.weighted
    state_dtype = torch.float64 if weighted else torch.int64
    device = true.device
    state = state_of(acc, device)
    layout = state.layout
    width = layout[5]

    # ---- validity of every value, in the check layout (per row: truth, prediction, weight)
    t, known, true_code, true_bits, _ = _truth(true, acc._ignore_index)
    positive, pred_code, pred_bits = _prediction(pred, float(acc._cut), acc.logits)
    p = positive if known is None else positive & known
    if weights is None:
        values = None
        weight_code = torch.zeros((n, 1), dtype=torch.int64, device=device)
        weight_bits = weight_code
        total = torch.full((), float(n), dtype=torch.float64, device=device)
    else:
        values, total, flat_code, flat_bits = _weights(weights, num_labels, weighted, state_dtype)
        weight_code, weight_bits = flat_code[:, None], flat_bits[:, None]
    code = torch.cat((true_code, pred_code, weight_code), 1).reshape(-1)
    value_bits = torch.cat((true_bits, pred_bits, weight_bits), 1).reshape(-1)

    # ---- what the batch adds, if it is clean
    tp = t & p
    tps, aps, pps = tp.sum(1), t.sum(1), p.sum(1)
    union = aps + pps - tps
    w = torch.ones((), dtype=state_dtype, device=device).expand(n) if values is None else values
    columns = [tp, t, p]
    if acc._ignore_index is not None:
        columns.append(torch.zeros_like(t) if known is None else ~known)  # the masked entries
    label_sums = torch.stack(
        [
            (column.to(state_dtype) * w[:, None]).sum(0)
            if values is not None
            else column.sum(0).to(state_dtype)
            for column in columns
        ]
    ).reshape(-1)
    judged = torch.ones_like(tps, dtype=torch.bool) if known is None else known.any(1)
    live = judged & (w != 0)
    zero = torch.zeros((), dtype=state_dtype, device=device)
    exact = (tps == aps) & (tps == pps)
    fixed = torch.stack(
        (
            w.sum(),
            torch.where(judged, w, zero).sum(),
            torch.where(live & exact, w, zero).sum(),
            torch.where(live & (union == 0), w, zero).sum(),
            torch.full((), n if weights is not None else 0, dtype=state_dtype, device=device),
            (judged & (w == 0)).sum().to(state_dtype),
            torch.full((), n, dtype=state_dtype, device=device),
        )
    )
    wt = w * tps.to(state_dtype)
    hist_keys = [layout[0] + aps, layout[1] + pps, layout[2] + pps, layout[3] + aps]
    hist_keys.append(layout[4] + union)
    hist_values = [w, w, wt, wt, wt]
    for k in range((len(layout) - 6) // 3):
        a, b, offset = layout[6 + 3 * k : 9 + 3 * k]
        hist_keys.append(offset + a * aps + b * pps)
        hist_values.append(wt)
    sample_keys = torch.where(live, torch.stack(hist_keys), width).reshape(-1)
    sample_values = torch.stack(hist_values).reshape(-1)
    cooc = _cooccurrence(t, values, state_dtype) if acc._cooccurrence else None

    label_cells = label_sums.shape[0]
    label_keys = torch.arange(label_cells, device=device)
    fixed_keys = torch.arange(_FIXED_COLUMNS, device=device)

    def count_rows() -> None:
        # The batch total against the bound, with what the device counted since the last read
        # (so that no device count can wrap; the read checks the host's sums exactly).
        counted = state.tensors["per_sample"][_ROWS].to(torch.float64)
        if weighted:
            total_ok = torch.isfinite((counted + total) * num_labels)
        else:
            total_ok = (counted + total + 1) * num_labels < _INT64_BOUND
        total_code = torch.where(total_ok, 0, BAD_TOTAL + FLOAT_VALUE).reshape(1)
        clean = state.note_errors(
            torch.cat((code, total_code)), torch.cat((value_bits, total.view(torch.int64)[None]))
        )
        state.add("labels", torch.where(clean, label_keys, label_cells), label_sums)
        keys = torch.cat((fixed_keys, sample_keys))
        state.add("per_sample", torch.where(clean, keys, width), torch.cat((fixed, sample_values)))
        if cooc is not None:
            cells = cooc.shape[0]
            cooc_keys = torch.arange(cells, device=device)
            state.add("cooccurrence", torch.where(clean, cooc_keys, cells), cooc)

    state.commit(acc, count_rows)
