"""Counting score histograms (:class:`~metricstream.ScoreAccumulator`) on the tensors' device.

One update is a fixed sequence of torch operations, with no host sync and no Python branch on
a tensor's value: every score's bin (the CPU kernels' order-preserving key of its float32 bits,
computed with integer operations on those bits; or its place among explicit thresholds), its
exactness, the rank statistics of the true class, the top-label confidence's fine bin, and one
``index_add_`` per state array. Multiclass logits are keyed by their softmax probability as on
the CPU: ``exp`` is the CPU kernels' own polynomial (:func:`_exp_nonpositive`), its fused
multiply-adds emulated exactly in float64 (:func:`_fma`), and each row's denominator is added
class by class in the kernels' order, so that every probability, and so every bin, has the CPU
path's bits.

A batch holding an invalid value (a label or target, a score, a probability row that does not
sum to one, a row of ``-inf`` logits, a weight) is left out entirely and the first such value
is written into the device-side error record, raised by the next read (see ``_state``). The
CPU path refuses weights before the labels and scores, and so does the record.

Float sums (``confidence``, ``losses``, and every array of a ``weighted`` accumulator) are
added in another order than on the CPU: equal to the CPU path's where every partial sum is
exact, otherwise within float64 rounding; the log loss takes one ``log`` per sample.

``count`` is the seam a faster kernel replaces: it takes the tensors and returns nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ._state import (
    BAD_SCORE,
    BAD_TRUE,
    BAD_WEIGHT,
    FLOAT_VALUE,
    DeviceState,
    constant_when_traced,
    state_for,
)
from .confusion import MAX_INTEGRAL_WEIGHT, _bits, _ignored

# Codes of the error record of this family beside ``_state``'s (below FLOAT_VALUE).
BAD_SUM = 5  # multiclass probabilities whose row does not sum to one (value: the sum)
BAD_ROW = 6  # multiclass logits that are all -inf (value: -inf)

# The CPU kernels' constants (metricstream.scores._kernels), restated: importing that module
# would compile nothing, but its layout functions are Numba functions, not callable here.
_ROW_SUM_TOLERANCE = 0.01
_LOG_LOSS_BOUND = -math.log(2.0**-52)
_HALF_BITS = 0x3F000000
_MIN_COMPLEMENT_BITS = 0x33800000
_TINY_BITS = 0x37800000
_LOGIT_EDGES = (0x1F800000, 0x3C800000, 0x43000000, 0x5F800000)
_EXP_LOG2E = 1.0 / math.log(2.0)
_EXP_LN2_HI = 6.93147180369123816490e-01
_EXP_LN2_LO = 1.90821492927058770002e-10
_EXP_LOWEST = -746.0
_EXP_COEFFICIENTS = tuple(1.0 / math.factorial(n) for n in range(2, 14))
_EPS32 = float(np.finfo(np.float32).eps)
_EPS64 = float(np.finfo(np.float64).eps)
_NEG_INF_BITS = int(np.array(-np.inf).view(np.int64))


# ---------------------------------------------------------------------- exact float64 pieces
def _two_sum(a: Any, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, e)`` with ``s = a + b`` rounded and ``s + e == a + b`` exactly (Knuth); ``a`` a
    tensor or a float."""
    s = b + a
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: Any) -> tuple[Any, Any]:
    """Veltkamp's split of a float64 (tensor, or float: the same IEEE arithmetic) into halves
    of 26 significant bits (and a sign). The factor ``2**27 + 1`` is applied as ``a * 2**27 +
    a``: the product is exact, so a compiler that fuses the two into one multiply-add gives the
    same bits."""
    t = a * 134217728.0 + a
    high = t - (t - a)
    return high, a - high


def _two_product(a: torch.Tensor, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, e)`` with ``p = a * b`` rounded and ``p + e == a * b`` exactly (Dekker); every
    partial product is exact, so fusing any of them into a multiply-add changes nothing. A
    float ``b`` is split once, in Python."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(float(b) if not isinstance(b, torch.Tensor) else b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _round_to_odd_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` rounded to odd: the rounded sum, moved one ulp toward the exact one when it
    was inexact and its last bit is even."""
    s, e = _two_sum(a, b)
    bits = s.view(torch.int64)
    even = (bits & 1) == 0
    step = torch.where((e > 0) == (s > 0), 1, -1)
    return torch.where((e != 0) & even, bits + step, bits).view(torch.float64)


def _fma(a: torch.Tensor, b: Any, c: Any) -> torch.Tensor:
    """``a * b + c`` rounded once, in float64, from plain operations (Boldo and Melquiond's
    emulation: the exact product, an exact sum with ``c``, the low parts added rounded to odd,
    then one rounding to nearest). ``a`` is a tensor; ``b`` and ``c`` tensors or floats."""
    high, low = _two_product(a, b)
    sum_high, sum_low = _two_sum(c, high)
    return sum_high + _round_to_odd_sum(sum_low, low)


def _exp_nonpositive(x: torch.Tensor) -> torch.Tensor:
    """The CPU kernels' ``exp`` of float64 ``x <= 0`` (their Cody-Waite reduction and Estrin
    polynomial, operation by operation): the same bits."""
    x = torch.clamp_min(torch.nan_to_num(x, nan=0.0), _EXP_LOWEST)
    k = torch.floor(_fma(x, _EXP_LOG2E, 0.5))
    minus_k = -k
    r = _fma(minus_k, _EXP_LN2_LO, _fma(minus_k, _EXP_LN2_HI, x))
    c = _EXP_COEFFICIENTS

    def fma(a: Any, b: Any, z: Any) -> torch.Tensor:
        if not isinstance(a, torch.Tensor):  # a constant times a tensor
            return _fma(b, a, z)
        return _fma(a, b, z)

    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    b0 = fma(fma(c[3], r, c[2]), r2, fma(c[1], r, c[0]))
    b1 = fma(fma(c[7], r, c[6]), r2, fma(c[5], r, c[4]))
    b2 = fma(fma(c[11], r, c[10]), r2, fma(c[9], r, c[8]))
    q = fma(b2, r8, fma(b1, r4, b0))
    p = 1.0 + fma(r2, q, r)
    ki = k.to(torch.int64)
    half = ki >> 1
    low = ((half + 1023) << 52).view(torch.float64)
    high = ((ki - half + 1023) << 52).view(torch.float64)
    return (p * low) * high


# ---------------------------------------------------------------------- score keys
def _float32_bits(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f, bits)``: the float64 values rounded to float32, and those float32's bits as
    non-negative int64 (0 .. 2**32 - 1)."""
    f = values.to(torch.float32)
    return f, f.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _probability_layout(shift: int) -> dict[str, int]:
    """The CPU kernels' ``key_layout`` of a ``shift`` code, as Python integers."""
    if shift < 32:
        fine = coarse = complement = shift
        tiny = offset = 0
    else:
        fine, coarse, complement = shift & 31, (shift >> 5) & 31, (shift >> 10) & 31
        tiny = _TINY_BITS
        offset = ((_TINY_BITS - 1) >> coarse) + 1
    half = _HALF_BITS
    middle = (half >> coarse) if half < tiny else offset + ((half - tiny) >> fine)
    base = _MIN_COMPLEMENT_BITS >> complement
    last = middle + 2 + (_HALF_BITS >> complement) - base
    return {
        "fine": fine,
        "coarse": coarse,
        "complement": complement,
        "tiny": tiny,
        "offset": offset,
        "base": base,
        "last": last,
    }


def _probability_key(v: torch.Tensor, layout: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bin, exact)`` of float64 probabilities in [0, 1] (the CPU's ``_probability_key``)."""
    f, bits = _float32_bits(v)
    u = bits & 0x7FFFFFFF  # -0.0 counts as +0.0
    uy = _float32_bits((1.0 - f).to(torch.float64))[1]  # 1 - f in float32: exact above 1/2
    tiny, fine, coarse = layout["tiny"], layout["fine"], layout["coarse"]
    small = u < tiny
    magnitude = torch.where(small, u >> coarse, layout["offset"] + ((u - tiny) >> fine))
    lower = magnitude + (u != 0).to(torch.int64)
    complement = layout["complement"]
    upper = layout["last"] - 1 + layout["base"] - (uy >> complement)
    upper = torch.where(uy == 0, layout["last"], upper)
    below = f < 0.5
    low_exact = torch.where(
        small, (u & ((1 << coarse) - 1)) == 0, ((u - tiny) & ((1 << fine) - 1)) == 0
    )
    high_exact = (uy & ((1 << complement) - 1)) == 0
    exact = torch.where(below, low_exact, high_exact) & (f.to(torch.float64) == v)
    return torch.where(below, lower, upper), exact


def _logit_layout(shift: int) -> tuple[int, int, int, int]:
    """``(fine, middle, outer, half)`` of the CPU kernels' ``logit_layout``."""
    if shift < 32:
        fine = middle = outer = shift
    else:
        fine, middle, outer = shift & 31, (shift >> 5) & 31, (shift >> 10) & 31
    half = _logit_magnitude_bin_int(0x7FFFFFFF, fine, middle, outer) + 1
    return fine, middle, outer, half


def _logit_magnitude_bin_int(m: int, fine: int, middle: int, outer: int) -> int:
    if fine == outer:
        return m >> fine
    e1, e2, e3, e4 = _LOGIT_EDGES
    return (
        (min(m, e1) >> outer)
        + ((min(max(m, e1), e2) - e1) >> middle)
        + ((min(max(m, e2), e3) - e2) >> fine)
        + ((min(max(m, e3), e4) - e3) >> middle)
        + ((max(m, e4) - e4) >> outer)
    )


def _logit_key(
    v: torch.Tensor, layout: tuple[int, int, int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bin, exact)`` of float64 scores of any range (the CPU's ``_logit_key``)."""
    fine, middle, outer, half = layout
    f, u = _float32_bits(v)
    u = torch.where(u == 0x80000000, 0, u)  # -0.0 counts as +0.0
    m = u & 0x7FFFFFFF
    e1, e2, e3, e4 = _LOGIT_EDGES
    if fine == outer:
        g = m >> fine
        exact = (m & ((1 << fine) - 1)) == 0
    else:
        g = (
            (torch.clamp_max(m, e1) >> outer)
            + ((torch.clamp(m, e1, e2) - e1) >> middle)
            + ((torch.clamp(m, e2, e3) - e2) >> fine)
            + ((torch.clamp(m, e3, e4) - e3) >> middle)
            + ((torch.clamp_min(m, e4) - e4) >> outer)
        )
        outside = (m < e1) | (m >= e4)
        shift = torch.where(outside, outer, torch.where((m >= e2) & (m < e3), fine, middle))
        edge = torch.where(m < e2, e1, torch.where(m < e3, e2, e3))
        edge = torch.where(m < e1, 0, torch.where(m >= e4, e4, edge))
        exact = ((m - edge) & ((torch.ones_like(shift) << shift) - 1)) == 0
    negative = (u & 0x80000000) != 0
    b = torch.where(negative, half - 1 - g, half + g)
    return b, exact & (f.to(torch.float64) == v)


def _bins(
    acc: Any, state: ScoreDeviceState, v: torch.Tensor, logit_keys: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(bin, exact)`` of float64 scores under ``acc``'s key (or its explicit thresholds)."""
    edges = state.edges
    if edges is not None:
        b = torch.searchsorted(edges, v.contiguous(), right=True)
        below = edges.index_select(0, torch.clamp_min(b - 1, 0).reshape(-1)).reshape(b.shape)
        return b, (b > 0) & (below == v)
    if logit_keys:
        return _logit_key(v, _logit_layout(acc._shift))
    return _probability_key(v, _probability_layout(acc._shift))


def _fine(q: torch.Tensor, fine_bins: int) -> torch.Tensor:
    """The fine calibration bin of float64 confidences in [0, 1]."""
    return torch.clamp((q * float(fine_bins)).to(torch.int64), 0, fine_bins - 1)


# ---------------------------------------------------------------------- the device state
@constant_when_traced
def _threshold_values(acc: Any) -> tuple[float, ...] | None:
    """The explicit thresholds as Python floats (read in Python when a compiled step is
    traced: torch.compile would take the numpy array for a tensor)."""
    thresholds = acc._thresholds
    return None if thresholds is None else tuple(float(value) for value in thresholds)


class ScoreDeviceState(DeviceState):
    """:class:`DeviceState` with this family's error record: the position is a sample or a
    flat element, and the messages are the CPU path's."""

    def __init__(self, device: torch.device, sizes: dict[str, tuple[int, bool]], acc: Any):
        task = acc.task
        if task == "multiclass":
            rules = f"labels must be integers in [0, {acc.num_classes})"
        else:
            rules = "targets must be 0 or 1"
        if acc._ignore_index is not None:
            rules += f" or equal `ignore_index` ({acc._ignore_index})"
        super().__init__(device, sizes, rules)
        self.task = task
        self.logits = bool(acc._logits)
        # Explicit thresholds, copied to the device once (a copy per update would wait).
        thresholds = _threshold_values(acc)
        self.edges = (
            None
            if thresholds is None
            else torch.tensor(thresholds, dtype=torch.float64, device=device)
        )

    def note_first(
        self, code: torch.Tensor, position: torch.Tensor, value_bits: torch.Tensor
    ) -> torch.Tensor:
        """Record the bad values of one batch; the 0-d bool "the batch is clean". ``code``:
        int64 per candidate (0: good), ``position`` where to report it, ``value_bits`` its
        value (a float64's bits when the code is flagged); the first nonzero is reported."""
        bad = code != 0
        count = bad.sum()
        first = bad.to(torch.uint8).argmax().reshape(1)
        record = self.record
        is_first = (record[0] == 0) & (count > 0)
        new = torch.cat(
            (
                self.batches.reshape(1),
                code.index_select(0, first),
                position.index_select(0, first),
                value_bits.index_select(0, first),
            )
        )
        record[1:] = torch.where(is_first, new, record[1:])
        record[0] += count
        return count == 0

    def error(self, record: np.ndarray) -> ValueError:
        count, batch, code, position, bits = (int(v) for v in record)
        kind = code & ~FLOAT_VALUE
        if code & FLOAT_VALUE:
            value: Any = float(np.array(bits, dtype=np.int64).view(np.float64))
        else:
            value = bits
        shown = repr(value)
        if kind == BAD_TRUE:
            noun = "label" if self.task == "multiclass" else "target"
            where = "sample" if self.task == "multiclass" else "flat position"
            what, rule = f"`y_true` holds {noun} {shown} at {where} {position}", self.rules
        elif kind == BAD_SCORE:
            what = f"`y_pred` (scores) holds {shown} at flat position {position}"
            rule = (
                "logits must not be NaN or +inf"
                if self.logits
                else "probabilities must lie in [0, 1]; create the accumulator with "
                "`logits=True` for logits or other unbounded scores"
            )
        elif kind == BAD_SUM:
            what = f"`y_pred` (probabilities) of sample {position} sum to {value:.6g}"
            rule = (
                f"the class probabilities of a sample must sum to 1 (within "
                f"{_ROW_SUM_TOLERANCE}): apply a softmax, create the accumulator with "
                f"`logits=True` for logits, or use task='multilabel' for independent "
                f"per-class (sigmoid) scores"
            )
        elif kind == BAD_ROW:
            what = f"`y_pred` (logits) of sample {position} are all -inf"
            rule = "the softmax of that sample is undefined"
        elif kind == BAD_WEIGHT:
            what = f"`weights` holds {shown} at sample {position}"
            rule = (
                "weights must be finite and non-negative (whole numbers unless the "
                "accumulator is `weighted`)"
            )
        else:  # pragma: no cover - every code written above is worded
            what, rule = f"an input holds {shown}", "it is not valid"
        plural = "value was" if count == 1 else "values were"
        return ValueError(
            f"{count} bad {plural} seen on {self.device} and left out of the counts. The first: "
            f"{what} of device batch {batch} (0-based, counting the device updates of this "
            f"accumulator), but {rule}. Every batch holding a bad value was left out; the state "
            f"holds the other batches. (The device path checks without waiting for the device; "
            f"`metricstream.device.eager(True)` raises at `update` instead.)"
        )


def state_of(acc: Any, device: torch.device) -> ScoreDeviceState:
    """The accumulator's device state on ``device``, created on its first device update."""

    def make() -> ScoreDeviceState:
        # From the configuration, not the host arrays: a compiled step cannot read numpy's.
        classes, counts = acc.num_classes, not acc._weighted
        fine_bins = acc._calibration_bins
        sizes = {
            "curves": (classes * acc.num_bins * 2, counts),
            "inexact": (classes, True),
            "calibration": (fine_bins * 2, counts),
            "confidence": (fine_bins, False),
            "losses": (2, False),
        }
        if acc.task == "multiclass":
            sizes["ranks"] = (2 * classes * classes, counts)
        return ScoreDeviceState(device, sizes, acc)

    return state_for(acc, device, make)


# ---------------------------------------------------------------------- layout (no values read)
def _axis(acc: Any, ndim: int) -> int:
    axis = acc._class_axis + ndim if acc._class_axis < 0 else acc._class_axis
    if not 0 <= axis < ndim:
        raise ValueError(
            f"`class_axis` is {acc._class_axis}, but `y_pred` has only {ndim} dimensions."
        )
    return axis


def _layout(
    acc: Any, y: torch.Tensor, scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """``(labels (N,) or targets (N, C), float64 scores (N, C), sample shape)``, with the CPU
    path's shape errors."""
    classes = acc.num_classes
    y_shape, s_shape = tuple(y.shape), tuple(scores.shape)
    if acc.task == "multiclass":
        if len(s_shape) != len(y_shape) + 1:
            raise ValueError(
                f"`y_pred` must hold {classes} class scores per label: one more dimension "
                f"than `y_true` (shape {y_shape}), got shape {s_shape}."
            )
        axis = _axis(acc, len(s_shape))
        if s_shape[axis] != classes:
            raise ValueError(
                f"`y_pred` has {s_shape[axis]} class scores on axis {axis}, but "
                f"`num_classes` is {classes}."
            )
        rest = s_shape[:axis] + s_shape[axis + 1 :]
        if rest != y_shape:
            raise ValueError(
                f"`y_pred` has shape {s_shape} (classes on axis {axis}), which leaves {rest}, "
                f"but `y_true` has shape {y_shape}; set `class_axis` if the classes are on "
                f"another axis."
            )
        matrix = scores.movedim(axis, -1).reshape(-1, classes)
        return y.reshape(-1), matrix, y_shape
    if acc.task == "binary":
        if len(s_shape) == len(y_shape) + 1 and s_shape[-1] == 1:
            scores = scores[..., 0]
            s_shape = s_shape[:-1]
        if s_shape != y_shape:
            raise ValueError(
                f"`y_pred` must hold one score per label (shape {y_shape}, or with a trailing "
                f"axis of 1), got shape {tuple(scores.shape)}."
            )
        return y.reshape(-1, 1), scores.reshape(-1, 1), y_shape
    if s_shape != y_shape:
        raise ValueError(
            f"`y_true` (targets) and `y_pred` (scores) must have the same shape for "
            f"task='multilabel', got {y_shape} and {s_shape}."
        )
    if len(s_shape) < 2:
        raise ValueError(f"multilabel scores need a label axis, got shape {s_shape}.")
    axis = _axis(acc, len(s_shape))
    if s_shape[axis] != classes:
        raise ValueError(
            f"`y_pred` has {s_shape[axis]} labels on axis {axis}, but `num_classes` is {classes}."
        )
    sample_shape = s_shape[:axis] + s_shape[axis + 1 :]
    matrix = scores.movedim(axis, -1).reshape(-1, classes)
    targets = y.movedim(axis, -1).reshape(-1, classes)
    return targets, matrix, sample_shape


def _weights(
    acc: Any, weights: torch.Tensor, sample_shape: tuple[int, ...], state_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(values in the state dtype, ok, value bits, flag)`` per sample (the CPU reads every
    weight as float64 first, and counts whole weights as int64)."""
    if tuple(weights.shape) != sample_shape:
        raise ValueError(
            f"`weights` has shape {tuple(weights.shape)}, but there is one weight per sample: "
            f"shape {sample_shape}."
        )
    flat = weights.reshape(-1)
    wide = flat.to(torch.float64)
    ok = (wide >= 0) & (wide != float("inf"))
    if not acc._weighted:
        ok = ok & (torch.floor(wide) == wide) & (wide < MAX_INTEGRAL_WEIGHT)
    values = torch.where(ok, wide, 0.0).to(state_dtype)
    bits, flag = _bits(flat)
    return values, ok, bits, flag


# ---------------------------------------------------------------------- counting
def count(acc: Any, y_true: Any, y_pred: Any, weights: Any = None) -> None:
    """Count one batch of tensors on their device into ``acc``'s device state."""
    if y_pred.is_complex() or y_true.is_complex():
        raise TypeError("`y_true` and `y_pred` must be real numbers, got complex tensors.")
    y, scores, sample_shape = _layout(acc, y_true, y_pred)
    state_dtype = torch.float64 if acc._weighted else torch.int64
    weight_parts = None
    if weights is not None:
        weight_parts = _weights(acc, weights, sample_shape, state_dtype)
    rows = scores.shape[0]
    if rows == 0:
        return
    # float16, bfloat16 and float32 scores are float32 on the CPU path (their log loss clips at
    # float32's eps), the others float64; every value is exact in float64.
    eps = _EPS64 if scores.dtype == torch.float64 or not scores.is_floating_point() else _EPS32
    wide = scores.to(torch.float64)
    state = state_of(acc, wide.device)
    if acc.task == "multiclass":
        parts = _multiclass(acc, state, y, wide, eps)
    else:
        parts = _elementwise(acc, state, y, wide, eps)
    counts, codes = parts
    code, position, value_bits = codes
    if weight_parts is not None:
        w_values, w_ok, w_bits, w_flag = weight_parts
        samples = torch.arange(w_ok.shape[0], device=w_ok.device)
        # The CPU path refuses a bad weight before it looks at labels and scores.
        code = torch.cat((torch.where(w_ok, 0, BAD_WEIGHT + w_flag), code))
        position = torch.cat((samples, position))
        value_bits = torch.cat((w_bits, value_bits))
    else:
        w_values = None

    def count_rows() -> None:
        clean = state.note_first(code, position, value_bits)
        for name, keys, weight in counts(w_values):
            keep = keys[1] & clean
            spare = state.tensors[name].shape[0] - 1
            flat_keys = torch.where(keep, keys[0], spare).reshape(-1)
            if weight is None:  # one per kept element
                added = keep.to(state.tensors[name].dtype)
            else:
                added = torch.where(keep, weight, 0).to(state.tensors[name].dtype)
            state.add(name, flat_keys, added.reshape(-1))

    state.commit(acc, count_rows)


def _row_weight(w_values: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """The weights broadcast to ``like``'s shape (rows first), or None."""
    if w_values is None:
        return None
    return w_values.reshape((-1,) + (1,) * (like.dim() - 1)).expand(like.shape)


def _sequential_row_sum(terms: torch.Tensor) -> torch.Tensor:
    """Per row the sum of ``terms`` (N, C) added class by class in order, as the CPU kernels
    add them (a tree reduction rounds differently)."""
    total = terms[:, 0]
    for c in range(1, terms.shape[1]):
        total = total + terms[:, c]
    return total


def _multiclass(
    acc: Any, state: ScoreDeviceState, labels: torch.Tensor, scores: torch.Tensor, eps: float
) -> tuple[Any, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    rows, classes = scores.shape
    device = scores.device
    logits = bool(acc._logits)
    fine_bins = acc._calibration_bins
    num_bins = acc.num_bins
    # Labels: integers in [0, C) (or whole floats), ignore_index skipped.
    if labels.dtype == torch.bool:
        labels = labels.to(torch.uint8)
    if labels.is_floating_point():
        wide_labels = labels.to(torch.float64)
        label_ok = (wide_labels >= 0) & (wide_labels < classes)
        label_ok = label_ok & (torch.floor(wide_labels) == wide_labels)
        target = torch.where(label_ok, wide_labels, 0.0).to(torch.int64)
    else:
        target64 = labels.to(torch.int64)
        label_ok = (target64 >= 0) & (target64 < classes)
        target = torch.where(label_ok, target64, 0)
    ignored = _ignored(labels, acc._ignore_index)
    skip = torch.zeros_like(label_ok) if ignored is None else ignored
    # Scores: ignored rows may hold anything (their values are replaced, as on the CPU).
    scores = torch.where(skip.unsqueeze(1), 0.0, scores)
    if logits:
        score_ok = (scores == scores) & (scores != float("inf"))
    else:
        score_ok = (scores >= 0) & (scores <= 1)
    top = scores.amax(dim=1)
    row_sum = _sequential_row_sum(scores)
    bad_score = ~score_ok
    first_score = bad_score.to(torch.uint8).argmax(dim=1)
    any_bad_score = bad_score.any(dim=1)
    if logits:
        row_bad = top == float("-inf")
        row_code, row_bits = BAD_ROW + FLOAT_VALUE, torch.full_like(target, _NEG_INF_BITS)
    else:
        row_bad = ~((row_sum - 1.0).abs() <= _ROW_SUM_TOLERANCE)
        row_code, row_bits = BAD_SUM + FLOAT_VALUE, row_sum.view(torch.int64)
    label_bits, label_flag = _bits(labels)
    score_bits = scores.gather(1, first_score.unsqueeze(1)).squeeze(1).view(torch.int64)
    sample = torch.arange(rows, device=device)
    code = torch.where(row_bad, row_code, 0)
    value_bits = torch.where(row_bad, row_bits, 0)
    code = torch.where(any_bad_score, BAD_SCORE + FLOAT_VALUE, code)
    value_bits = torch.where(any_bad_score, score_bits, value_bits)
    position = torch.where(any_bad_score, sample * classes + first_score, sample)
    code = torch.where(label_ok, code, BAD_TRUE + label_flag)
    value_bits = torch.where(label_ok, value_bits, label_bits)
    position = torch.where(label_ok, position, sample)
    code = torch.where(skip, 0, code)
    counted = label_ok & ~skip

    # Rank statistics of the true class on the raw scores.
    columns = torch.arange(classes, device=device)
    true_score = scores.gather(1, target.unsqueeze(1))
    equal = scores == true_score
    greater = (scores > true_score).sum(dim=1)
    tied_before = (equal & (columns < target.unsqueeze(1))).sum(dim=1)
    tied_after = (equal & (columns > target.unsqueeze(1))).sum(dim=1)
    correct = (greater == 0) & (tied_before == 0)
    is_true = columns == target.unsqueeze(1)
    if logits:
        # The softmax as the CPU kernels take it: exps of s - top, the denominator added class
        # by class, one division a row, each probability e * (1 / denominator).
        exps = _exp_nonpositive(scores - top.unsqueeze(1))
        total = _sequential_row_sum(exps)
        inverse = 1.0 / total
        probabilities = exps * inverse.unsqueeze(1)
        confidence = inverse
        p_true = probabilities.gather(1, target.unsqueeze(1)).squeeze(1)
        brier = torch.where(is_true, 0.0, probabilities * probabilities).sum(dim=1)
        brier = brier + (1.0 - p_true) * (1.0 - p_true)
        gap = top - true_score.squeeze(1)
        log_loss = torch.clamp_max(gap + torch.log(total), _LOG_LOSS_BOUND)
    else:
        probabilities = scores
        confidence = top
        p_true = true_score.squeeze(1)
        brier = ((scores - is_true.to(torch.float64)) ** 2).sum(dim=1)
        log_loss = -torch.log(torch.clamp(p_true, eps, 1.0 - eps))
    bins, exact = _bins(acc, state, probabilities, False)
    fine = _fine(confidence, fine_bins)
    keep_rows = counted.unsqueeze(1).expand(rows, classes)
    curve_keys = ((columns * num_bins + bins) * 2 + is_true.to(torch.int64), keep_rows)
    inexact_keys = (columns.expand(rows, classes), keep_rows & ~exact)
    rank_keys = (
        torch.stack(
            (
                target * classes + greater + tied_after,
                classes * classes + target * classes + greater,
            ),
            dim=1,
        ),
        counted.unsqueeze(1).expand(rows, 2),
    )
    calibration_keys = (
        torch.stack((fine * 2, fine * 2 + 1), dim=1),
        torch.stack((counted, counted & correct), dim=1),
    )
    loss_keys = (columns[:2].expand(rows, 2), counted.unsqueeze(1).expand(rows, 2))

    def counts(w_values: torch.Tensor | None) -> list[Any]:
        w64 = None if w_values is None else w_values.to(torch.float64)
        conf = confidence if w64 is None else w64 * confidence
        losses = torch.stack((brier, log_loss), dim=1)
        if w64 is not None:
            losses = w64.unsqueeze(1) * losses
        return [
            ("curves", curve_keys, _row_weight(w_values, curve_keys[0])),
            ("inexact", inexact_keys, None),
            ("ranks", rank_keys, _row_weight(w_values, rank_keys[0])),
            ("calibration", calibration_keys, _row_weight(w_values, calibration_keys[0])),
            ("confidence", (fine, counted), conf),
            ("losses", loss_keys, losses),
        ]

    return counts, (code, position, value_bits)


def _elementwise(
    acc: Any, state: ScoreDeviceState, targets: torch.Tensor, scores: torch.Tensor, eps: float
) -> tuple[Any, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    rows, labels = scores.shape
    device = scores.device
    logits = bool(acc._logits)
    fine_bins = acc._calibration_bins
    num_bins = acc.num_bins
    if targets.dtype == torch.bool:
        targets = targets.to(torch.uint8)
    if targets.is_floating_point():
        wide_targets = targets.to(torch.float64)
        one = wide_targets == 1.0
        target_ok = (wide_targets == 0.0) | one
    else:
        wide_ints = targets.to(torch.int64)
        one = wide_ints == 1
        target_ok = (wide_ints == 0) | one
    ignored = _ignored(targets, acc._ignore_index)
    skip = torch.zeros_like(target_ok) if ignored is None else ignored
    if logits:
        score_ok = (scores == scores) & (scores != float("inf"))
    else:
        score_ok = (scores >= 0) & (scores <= 1)
    target_bits, target_flag = _bits(targets)
    code = torch.where(score_ok, 0, BAD_SCORE + FLOAT_VALUE)
    value_bits = scores.view(torch.int64)
    code = torch.where(target_ok, code, BAD_TRUE + target_flag)
    value_bits = torch.where(target_ok, value_bits, target_bits)
    code = torch.where(skip, 0, code).reshape(-1)
    value_bits = value_bits.reshape(-1)
    position = torch.arange(rows * labels, device=device)
    counted = target_ok & ~skip
    y = one.to(torch.int64)
    y_float = one.to(torch.float64)
    bins, exact = _bins(acc, state, scores, acc._logit_keys)
    if logits:
        x = torch.nan_to_num(scores, nan=0.0)
        e = _exp_nonpositive(-x.abs())
        q = torch.where(x >= 0, 1.0, e) / (1.0 + e)
        above = torch.clamp_min(x, 0.0)
        loss = torch.where(one, above - x, above) + torch.log1p(e)
        loss = torch.clamp_max(loss, _LOG_LOSS_BOUND)
    else:
        q = scores
        p = torch.where(one, scores, 1.0 - scores)
        loss = -torch.log(torch.clamp(p, eps, 1.0 - eps))
    d = q - y_float
    brier = d * d
    fine = _fine(q, fine_bins)
    columns = torch.arange(labels, device=device).expand(rows, labels)
    curve_keys = ((columns * num_bins + bins) * 2 + y, counted)
    inexact_keys = (columns, counted & ~exact)
    calibration_keys = (
        torch.stack((fine * 2, fine * 2 + 1), dim=-1),
        torch.stack((counted, counted & one), dim=-1),
    )
    loss_keys = (
        torch.stack((torch.zeros_like(fine), torch.ones_like(fine)), dim=-1),
        counted.unsqueeze(-1).expand(rows, labels, 2),
    )

    def counts(w_values: torch.Tensor | None) -> list[Any]:
        w64 = None if w_values is None else w_values.to(torch.float64).unsqueeze(1)
        conf = q if w64 is None else w64 * q
        losses = torch.stack((brier, loss), dim=-1)
        if w64 is not None:
            losses = w64.unsqueeze(-1) * losses
        return [
            ("curves", curve_keys, _row_weight(w_values, curve_keys[0])),
            ("inexact", inexact_keys, None),
            ("calibration", calibration_keys, _row_weight(w_values, calibration_keys[0])),
            ("confidence", (fine, counted), conf),
            ("losses", loss_keys, losses),
        ]

    return counts, (code, position, value_bits)
