"""Counting regression moments on the device the tensors live on, exactly.

The host state is integers (every row's terms in fixed point, see
:mod:`metricstream.regression._kernels`), so the device can count the same numbers in any
order: each float64 is cut into its integer mantissa and exponent with bit operations, the
products ``w t``, ``w t²``, ``w t p``, ... are multiplied out exactly in 27-bit digits (int64
products), and every digit is added with one ``index_add_`` into *bins*, one per power of two
a digit can be worth. A bin takes digits below ``2**27``; after each batch a carry round moves
everything above bit 40 of a bin into the bin 40 positions up (exact: the bins are powers of
two), so that no int64 can overflow however many batches come before a read. The first read
copies the bins to the host once, carries them into the limbs of the state and adds them: the
state is bit-identical to the CPU path's on the same rows. The maximum error is a device
``amax``.

Validation as for every family on the device: a batch holding a NaN or infinite value, an
error ``y_pred - y_true`` or a weighted square that overflows float64, or a negative, NaN or
infinite weight is left out entirely and recorded, and the next read raises (see ``_state``).

``count`` is the seam a faster kernel replaces: it takes the tensors and returns nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..regression import _kernels as K
from ._state import BAD_PRED, BAD_TRUE, BAD_WEIGHT, FLOAT_VALUE, DeviceState, state_for

BAD_DIFF = 5  # y_pred - y_true overflows float64 (the value recorded is y_pred)
BAD_SQUARE = 6  # w * a * a overflows float64, a = max(|t|, |p|, |e|) (the value recorded is a)

_DIGIT = 27
_DIGIT_MASK = (1 << _DIGIT) - 1
_CARRY = 40  # after a batch every bin is below 2**40 plus a carry below 2**23
_FRACTION = (1 << 52) - 1
_DBL_MAX = float(np.finfo(np.float64).max)
# Rows (times outputs) counted by one round of tensor operations: bounds the temporaries
# (about 40 int64 digits and keys per row and output) and keeps every bin below 2**63.
_ROWS_PER_ROUND = 1 << 16
_INT64_MAX = 2**63 - 1


class RegressionDeviceState(DeviceState):
    """The device state of a :class:`~metricstream.RegressionAccumulator`: bins of exact
    digits per output and sum, the row count, rows of positive weight, the maximum error."""

    def __init__(self, device: torch.device, num_outputs: int) -> None:
        self.num_outputs = num_outputs
        super().__init__(
            device,
            {
                "bins": (num_outputs * K.NUM_STATE * K.NUM_BINS, True),
                "num_samples": (1, True),
                "positive": (1, True),
                "max_error": (num_outputs, False),
            },
            "values must be finite",
        )

    def flush_into(self, acc: Any, host_arrays: dict[str, np.ndarray]) -> None:
        """Carry the device bins into the host's exact sums (one copy), take the maximum of
        the maximum errors, then raise the recorded error if a bad value was seen."""
        if not self.dirty and not self.replayable:
            return
        parts = [self.tensors[name][:-1].view(torch.int64) for name in self.names]
        packed = torch.cat([*parts, self.record]).cpu().numpy()
        for tensor in self.tensors.values():
            tensor.zero_()
        self.record.zero_()
        self.dirty = False
        m = self.num_outputs
        size = m * K.NUM_STATE * K.NUM_BINS
        bins = np.ascontiguousarray(packed[:size]).reshape(m, K.NUM_STATE, K.NUM_BINS)
        num_samples, positive = int(packed[size]), int(packed[size + 1])
        largest = packed[size + 2 : size + 2 + m].view(np.float64)
        record = packed[size + 2 + m :]
        delta = np.zeros((m, K.NUM_STATE, K.LIMBS), dtype=np.int64)
        K.bins_into_limbs(bins, delta)
        delta[:, K.S_W] = delta[0, K.S_W]  # the weights are per row: counted for output 0
        delta[:, K.S_AE] = delta[:, K.S_E_POS] + delta[:, K.S_E_NEG]  # sum(w |e|)
        moments = host_arrays["moments"].copy()
        counted = int(host_arrays["num_samples"][0])
        if not K.add_into(moments, delta) or counted > _INT64_MAX - num_samples:
            raise ValueError(
                f"the sums of {type(acc).__name__} would overflow with what was counted on "
                f"{self.device}; those counts were dropped and the host state is unchanged."
            )
        host_arrays["moments"][...] = moments
        host_arrays["num_samples"][0] = counted + num_samples
        np.maximum(host_arrays["max_error"], largest, out=host_arrays["max_error"])
        if positive:
            host_arrays["max_parts"][0] = max(int(host_arrays["max_parts"][0]), 1)
        acc._changed()
        if record[0]:
            raise self.error(record)

    def error(self, record: np.ndarray) -> ValueError:
        """The ``ValueError`` describing a (host copy of the) error record."""
        count, batch, code, flat, bits = (int(v) for v in record)
        value = float(np.array(bits, dtype=np.int64).view(np.float64))
        kind = code & ~FLOAT_VALUE
        row, column = divmod(flat, self.num_outputs + 1)
        if kind == BAD_WEIGHT:
            where = f"{row}"
        elif self.num_outputs == 1:
            where = f"{row}"
        else:
            where = f"({row}, {column - 1})"
        what = {
            BAD_TRUE: f"`y_true` holds {value!r} at position {where}, but values must be finite",
            BAD_PRED: f"`y_pred` holds {value!r} at position {where}, but values must be finite",
            BAD_DIFF: f"`y_pred - y_true` overflows float64 at position {where} (`y_pred` "
            f"holds {value!r}); rescale the targets",
            BAD_SQUARE: f"a value of magnitude {value!r} at position {where} makes a weighted "
            f"square w * max(|y_true|, |y_pred|, |y_pred - y_true|)**2 that would overflow "
            f"float64; rescale the targets or the weights",
            BAD_WEIGHT: f"`weights` holds {value!r} at position {where}, but weights must be "
            f"finite and non-negative",
        }.get(kind, f"an input holds {value!r} at position {where}")
        plural = "value was" if count == 1 else "values were"
        return ValueError(
            f"{count} bad {plural} seen on {self.device} and left out of the sums. The first: "
            f"{what} (device batch {batch}, 0-based, counting the device updates of this "
            f"accumulator). Every batch holding a bad value was left out; the state holds the "
            f"other batches. (The device path checks without waiting for the device; "
            f"`metricstream.device.eager(True)` raises at `update` instead.)"
        )


def state_of(acc: Any, device: torch.device) -> RegressionDeviceState:
    """The accumulator's device state on ``device``, created on its first device update."""

    def make() -> RegressionDeviceState:
        return RegressionDeviceState(device, acc.num_outputs)

    return state_for(acc, device, make, "sums")


def _values(value: torch.Tensor, name: str, num_outputs: int) -> torch.Tensor:
    """``value`` as (N, num_outputs) float64, with the host path's shape rules."""
    if value.is_complex():
        raise TypeError(f"`{name}` must hold real numbers, got dtype {value.dtype}.")
    shape = tuple(value.shape)
    if len(shape) == 1:
        value = value.reshape(-1, 1)
    if value.dim() != 2 or value.shape[1] != num_outputs:
        raise ValueError(
            f"`{name}` has shape {shape}; this accumulator has {num_outputs} output(s): give "
            f"(N, {num_outputs})" + (" or (N,)." if num_outputs == 1 else ".")
        )
    return value.to(torch.float64)


def _decode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mantissa, position of its lowest bit - EMIN, negative)`` of float64 values."""
    bits = x.contiguous().view(torch.int64)
    field = (bits >> 52) & 0x7FF
    mantissa = (bits & _FRACTION) | ((field != 0).to(torch.int64) << 52)
    position = field.clamp(min=1) - (1075 + K.EMIN)
    return mantissa, position, bits < 0


def _digits(mantissa: torch.Tensor) -> list[torch.Tensor]:
    return [mantissa & _DIGIT_MASK, mantissa >> _DIGIT]


def _times(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor]:
    """The exact product of two digit lists (27-bit digits) as a digit list."""
    sums: list[torch.Tensor | None] = [None] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            term = x * y  # < 2**54
            current = sums[i + j]
            sums[i + j] = term if current is None else current + term
    out = []
    carry: torch.Tensor | None = None
    for value in sums:
        assert value is not None
        total = value if carry is None else value + carry
        out.append(total & _DIGIT_MASK)
        carry = total >> _DIGIT
    assert carry is not None
    out.append(carry)
    return out


def count(acc: Any, y_true: Any, y_pred: Any, weights: Any = None) -> None:
    """Count one batch of tensors on their device into ``acc``'s device state."""
    m = acc.num_outputs
    t = _values(y_true, "y_true", m)
    p = _values(y_pred, "y_pred", m)
    if tuple(y_true.shape) != tuple(y_pred.shape):
        raise ValueError(
            f"`y_true` has shape {tuple(y_true.shape)} and `y_pred` {tuple(y_pred.shape)}; "
            f"they must match."
        )
    n = t.shape[0]
    if weights is None:
        w = torch.ones(n, dtype=torch.float64, device=t.device)
        weight_code = torch.zeros(n, dtype=torch.int64, device=t.device)
    else:
        if weights.is_complex():
            raise TypeError(f"`weights` must hold real numbers, got dtype {weights.dtype}.")
        if tuple(weights.shape) != (n,):
            raise ValueError(
                f"`weights` has shape {tuple(weights.shape)}; it must hold one weight per "
                f"row: ({n},)."
            )
        w = weights.to(torch.float64)
        weight_ok = (w >= 0) & (w <= _DBL_MAX)
        weight_code = torch.where(weight_ok, 0, BAD_WEIGHT + FLOAT_VALUE)
    if n == 0:
        return
    e = p - t
    a = torch.maximum(t.abs(), torch.maximum(p.abs(), e.abs()))
    # A bad weight is its row's one problem: the squares are checked with the valid weights.
    wide = torch.where(weight_code == 0, w, 0.0).reshape(-1, 1)
    # The first problem of each value, in the CPU path's order (weight, then per output:
    # y_true, y_pred, the difference, the weighted square); rows are (weight, outputs...).
    code = torch.where(
        torch.isfinite(t),
        torch.where(
            torch.isfinite(p),
            torch.where(
                torch.isfinite(e),
                torch.where((wide * a) * a <= _DBL_MAX, 0, BAD_SQUARE + FLOAT_VALUE),
                BAD_DIFF + FLOAT_VALUE,
            ),
            BAD_PRED + FLOAT_VALUE,
        ),
        BAD_TRUE + FLOAT_VALUE,
    )
    kind = code - FLOAT_VALUE
    value = torch.where(
        kind == BAD_TRUE, t, torch.where((kind == BAD_PRED) | (kind == BAD_DIFF), p, a)
    )
    codes = torch.cat((weight_code.reshape(-1, 1), code), dim=1).reshape(-1)
    values = torch.cat((w.reshape(-1, 1), value), dim=1).reshape(-1)
    value_bits = values.contiguous().view(torch.int64)

    state = state_of(acc, t.device)

    def count_rows() -> None:
        clean = state.note_errors(codes, value_bits)
        # A batch with a bad value counts nothing: every value becomes 0 (whose terms are 0).
        tc = torch.where(clean, t, 0.0)
        pc = torch.where(clean, p, 0.0)
        wc = torch.where(clean, w, 0.0)
        live = (wc > 0).reshape(-1, 1)
        largest = torch.where(live, (pc - tc).abs(), 0.0).amax(dim=0)
        maxima = state.tensors["max_error"][:m]
        maxima.copy_(torch.maximum(maxima, largest))
        one = torch.zeros(1, dtype=torch.int64, device=t.device)
        state.add("num_samples", one, torch.where(clean, n, 0).reshape(1).to(torch.int64))
        state.add("positive", one, live.any().reshape(1).to(torch.int64))
        for start in range(0, n, max(1, _ROWS_PER_ROUND // m)):
            stop = min(n, start + max(1, _ROWS_PER_ROUND // m))
            _deposit(state, tc[start:stop], pc[start:stop], wc[start:stop], m)
        _carry(state, m)

    state.commit(acc, count_rows)


def _deposit(
    state: RegressionDeviceState, t: torch.Tensor, p: torch.Tensor, w: torch.Tensor, m: int
) -> None:
    """Add the exact digits of rows (t, p, w) into the bins: one ``index_add_``."""
    e = p - t
    mw, ew, _ = _decode(w)
    mt, et, nt = _decode(t)
    mp, ep, np_ = _decode(p)
    me, ee, ne = _decode(e)
    ew = ew.reshape(-1, 1)
    output = torch.arange(m, device=t.device).reshape(1, -1) * K.NUM_STATE
    w_digits = [d.reshape(-1, 1) for d in _digits(mw)]
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []

    def put(row: torch.Tensor, base: torch.Tensor, digits: list[torch.Tensor]) -> None:
        first = row * K.NUM_BINS + base
        for k, digit in enumerate(digits):
            # Positions stay inside the bins for every valid row; the clamp keeps memory safe.
            key = (first + k * _DIGIT).clamp(0, K.NUM_BINS * K.NUM_STATE * m - 1)
            shape = torch.broadcast_shapes(key.shape, digit.shape)
            keys.append(key.expand(shape).reshape(-1))
            values.append(digit.expand(shape).reshape(-1))

    # sum(w): once per row, into output 0
    put(torch.full_like(ew, K.S_W), ew, w_digits)
    for mx, ex, nx, pos_row, square_row in (
        (mt, et, nt, K.S_T_POS, K.S_TT),
        (mp, ep, np_, K.S_P_POS, K.S_PP),
        (me, ee, ne, K.S_E_POS, K.S_EE),
    ):
        x_digits = _digits(mx)
        wx = _times(w_digits, x_digits)
        base = ew + ex + K.EMIN
        put(output + pos_row + nx.to(torch.int64), base, wx)
        put(output + square_row, base + ex + K.EMIN, _times(wx, x_digits))
        if pos_row == K.S_T_POS:
            # sum(w t p), signed by t p
            put(
                output + K.S_TP_POS + (nt ^ np_).to(torch.int64),
                base + ep + K.EMIN,
                _times(wx, _digits(mp)),
            )
    state.add("bins", torch.cat(keys), torch.cat(values))


def _carry(state: RegressionDeviceState, m: int) -> None:
    """Move what is above bit 40 of every bin to the bin 40 positions up (the same value)."""
    bins = state.tensors["bins"][:-1].view(m * K.NUM_STATE, K.NUM_BINS)
    carry = bins >> _CARRY
    bins.bitwise_and_((1 << _CARRY) - 1)
    bins[:, _CARRY:] += carry[:, :-_CARRY]
