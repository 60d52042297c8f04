"""The counts of one accumulator kept on a torch device, and the device-side error record.

Each host state array has a flat device twin with one spare cell at its end: rows that must not
count (ignored, invalid, or in a batch that holds an invalid value) are sent there instead of
being branched around, so an update is a fixed sequence of tensor operations with no host sync.
The spare cells are dropped when the counts come to the host.

The error record is a small int64 tensor on the same device:

====  =====================================================================
0     how many bad values were seen since the last read
1     the device update (0-based, since creation or ``reset``) of the first
2     what was wrong with it (``BAD_*`` below)
3     its flat position in that batch
4     its value: int64, or the bits of a float64 (see ``FLOAT_VALUE``)
====  =====================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

BAD_TRUE = 1  # y_true: a label outside [0, K), fractional or NaN
BAD_PRED = 2  # y_pred: a label outside [0, K), fractional or NaN
BAD_SCORE = 3  # y_pred: a NaN score
BAD_WEIGHT = 4  # weights: negative, infinite, NaN, or fractional for integer counts
FLOAT_VALUE = 8  # added to the code when the value is a float64's bits

# Count with the histogram on CPU tensors too (tests prove the bin arithmetic with it).
HISTOGRAM_ON_CPU = [False]
# The most cells counted with the histogram: it wins where many keys share few cells (K = 10 on
# an H200), and loses to index_add_ where they spread over many (K = 150 masks).
HISTOGRAM_CELLS = 2048

_RECORD_SIZE = 5


def constant_when_traced(function: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._dynamo.assume_constant_result``, without importing ``torch._dynamo`` here.

    torch.compile runs ``function`` in Python while it traces a step and takes its result for a
    constant. The decorator's whole effect is this attribute (tests/test_device.py compares it
    with the decorator's); importing ``torch._dynamo`` to apply it would add about a second to
    ``import metricstream.device``, for a module that torch.compile imports anyway when it runs.
    """
    function._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return function


_INT64_MAX = 2**63 - 1

_WHAT = {
    BAD_TRUE: "`y_true` holds label {value}",
    BAD_PRED: "`y_pred` holds label {value}",
    BAD_SCORE: "`y_pred` (scores) holds {value}",
    BAD_WEIGHT: "`weights` holds {value}",
}


class DeviceState:
    """Device twins of an accumulator's state arrays, filled by device updates.

    ``flush_into`` (called by the accumulator under its lock before any read) adds them into
    the host arrays with one device-to-host copy and zeroes them; ``reset`` zeroes them.
    """

    def __init__(
        self, device: torch.device, sizes: dict[str, tuple[int, bool]], rules: str
    ) -> None:
        """``sizes``: per state array, its number of cells and whether it counts in int64
        (else float64); given by the family, as a compiled step cannot read numpy arrays."""
        self.device = device
        self.names = list(sizes)
        self.tensors = {
            name: torch.zeros(
                size + 1, dtype=torch.int64 if integral else torch.float64, device=device
            )
            for name, (size, integral) in sizes.items()
        }
        self.record = torch.zeros(_RECORD_SIZE, dtype=torch.int64, device=device)
        # Device updates so far, kept on the device: a Python counter would be a constant that
        # changes every step, and torch.compile would trace the step anew each time.
        self.batches = torch.zeros((), dtype=torch.int64, device=device)
        # What a valid label or weight is, for the error message (e.g. "labels must be ...").
        self.rules = rules
        # Whether anything was counted since the last flush (host flag: skip empty flushes).
        self.dirty = False
        # Whether an update was captured into a CUDA graph: its replays count without running
        # any Python, so no host flag can say whether they did; every read then copies.
        self.replayable = False

    # ------------------------------------------------------------------ counting (no sync)
    def note_errors(self, code: torch.Tensor, value_bits: torch.Tensor) -> torch.Tensor:
        """Record the bad rows of one batch; return the 0-d bool "the batch is clean".

        ``code``: int64 per row, 0 for a good row, else ``BAD_*`` (+ ``FLOAT_VALUE``);
        ``value_bits``: int64 per row, the offending value (a float64's bits when flagged).
        """
        bad = code != 0
        count = bad.sum()
        # The first bad row (0 when there is none), as a 1-element index: indexing with a 0-d
        # tensor would make torch.compile read its value on the host.
        first = bad.to(torch.uint8).argmax().reshape(1)  # (a uint8 view fails under inductor)
        record = self.record
        is_first = (record[0] == 0) & (count > 0)
        new = torch.cat(
            (
                self.batches.reshape(1),
                code.index_select(0, first),
                first,
                value_bits.index_select(0, first),
            )
        )
        record[1:] = torch.where(is_first, new, record[1:])
        record[0] += count
        return count == 0

    def add(self, name: str, keys: torch.Tensor, values: torch.Tensor) -> None:
        """``state[name].flat[keys] += values`` (the spare cell takes rows left out)."""
        self.tensors[name].index_add_(0, keys, values)

    def count(self, name: str, keys: torch.Tensor) -> None:
        """``state[name].flat[keys] += 1`` (the spare cell takes rows left out).

        On a GPU this is a histogram of the keys (``torch.histc``, whose kernel counts in each
        block's shared memory) rather than ``index_add_``, whose atomic adds to global memory
        serialise when many keys share few cells (a confusion matrix). The keys go in as floats
        that hold them exactly, into bins centred on the integers, so rounding in the bin
        arithmetic cannot move a key to a neighbour; the per-batch counts come back as floats
        that are exact below 2**24 (float32) or 2**53 (float64). Under deterministic
        algorithms (histc has no deterministic CUDA kernel), in compiled steps and for more
        than ``HISTOGRAM_CELLS`` cells it stays ``index_add_``.
        """
        tensor = self.tensors[name]
        if (
            (keys.device.type == "cuda" or HISTOGRAM_ON_CPU[0])
            and tensor.numel() <= HISTOGRAM_CELLS
            and not torch.compiler.is_compiling()
            and not torch.are_deterministic_algorithms_enabled()
        ):
            cells = tensor.numel()
            exact32 = cells <= 2**21 and keys.numel() < 2**24
            as_float = keys.to(torch.float32 if exact32 else torch.float64)
            counts = torch.histc(as_float, bins=cells, min=-0.5, max=cells - 0.5)
            tensor.add_(counts.to(tensor.dtype))
        else:
            ones = torch.ones((), dtype=tensor.dtype, device=keys.device).expand(keys.numel())
            tensor.index_add_(0, keys, ones)

    def commit(self, acc: Any, count: Callable[[], None]) -> None:
        """Run ``count`` (the tensor operations of one update) under the accumulator's lock,
        then number the batch and invalidate the views; no sync.

        The lock orders the operations against a flush from another thread (a device runs a
        thread's operations in the order they were issued). A compiled step cannot take a
        Python lock: there, the caller keeps one thread per accumulator.
        """
        if torch.compiler.is_compiling():
            count()
            self._counted(acc)
        else:
            with acc._lock:
                count()
                self._counted(acc)
                if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                    self.replayable = True

    def _counted(self, acc: Any) -> None:
        self.batches += 1
        self.dirty = True
        acc._changed()

    # ------------------------------------------------------------------ reading (one copy)
    def flush_into(self, acc: Any, host_arrays: dict[str, np.ndarray]) -> None:
        """Add the device counts into ``host_arrays`` (one copy), zero them, then raise the
        recorded error if a bad value was seen (the host then holds the valid batches)."""
        if not self.dirty and not self.replayable:
            return
        parts = [self.tensors[name][:-1].view(torch.int64) for name in self.names]
        packed = torch.cat([*parts, self.record]).cpu().numpy()
        for tensor in self.tensors.values():
            tensor.zero_()
        self.record.zero_()
        self.dirty = False
        offset = 0
        incoming = {}
        for name in self.names:
            array = host_arrays[name]
            chunk = packed[offset : offset + array.size]
            offset += array.size
            incoming[name] = chunk.view(array.dtype).reshape(array.shape)
        record = packed[offset:]
        sums = {}
        for name, array in host_arrays.items():
            add = incoming[name]
            if array.dtype.kind == "i":
                if bool((add > _INT64_MAX - array).any()) or (
                    float(array.sum(dtype=np.float64)) + float(add.sum(dtype=np.float64)) >= 2.0**63
                ):
                    raise ValueError(
                        f"the counts of {type(acc).__name__} state array {name!r} would pass "
                        f"2**63 - 1 with what was counted on {self.device}; those counts were "
                        f"dropped and the host state is unchanged."
                    )
                sums[name] = array + add
            else:
                total = array + add
                if not np.isfinite(total).all():
                    raise ValueError(
                        f"the float64 sums of {type(acc).__name__} state array {name!r} would "
                        f"become infinite with what was counted on {self.device}; those sums "
                        f"were dropped and the host state is unchanged."
                    )
                sums[name] = total
        if self.replayable and not record[0] and not any(add.any() for add in incoming.values()):
            return  # no replay since the last read: the views stay valid
        for name, total in sums.items():
            host_arrays[name][...] = total
        acc._changed()
        if record[0]:
            raise self.error(record)

    def error(self, record: np.ndarray) -> ValueError:
        """The ``ValueError`` describing a (host copy of the) error record."""
        count, batch, code, position, bits = (int(v) for v in record)
        kind = code & ~FLOAT_VALUE
        if code & FLOAT_VALUE:
            value: Any = float(np.array(bits, dtype=np.int64).view(np.float64))
        else:
            value = bits
        what = _WHAT.get(kind, "an input holds {value}").format(value=repr(value))
        rule = {
            BAD_TRUE: self.rules,
            BAD_PRED: self.rules,
            BAD_SCORE: "the predicted class of that sample is undefined",
            BAD_WEIGHT: "weights must be finite and non-negative (whole numbers unless the "
            "accumulator is `weighted`)",
        }.get(kind, "it is not valid")
        plural = "value was" if count == 1 else "values were"
        return ValueError(
            f"{count} bad {plural} seen on {self.device} and left out of the counts. The first: "
            f"{what} at flat position {position} of device batch {batch} (0-based, counting "
            f"the device updates of this accumulator), but {rule}. Every batch holding a bad "
            f"value was left out; the state holds the other batches. (The device path checks "
            f"without waiting for the device; `metricstream.device.eager(True)` raises at "
            f"`update` instead.)"
        )

    def check_now(self) -> None:
        """Eager mode: raise at once if the error record is set (one sync), clearing it."""
        record = self.record.cpu().numpy().copy()  # on the CPU, .cpu() is the record itself
        if record[0]:
            self.record.zero_()
            raise self.error(record)

    def reset(self) -> None:
        for tensor in self.tensors.values():
            tensor.zero_()
        self.record.zero_()
        self.batches.zero_()
        self.dirty = False


def state_for(
    acc: Any, device: torch.device, make: Callable[[], DeviceState], held: str = "counts"
) -> Any:
    """The accumulator's device state on ``device``, made by ``make`` on its first device update.

    A state whose counts all reached the host (nothing counted since the last read, and no
    CUDA graph that may replay into it) is dropped when a batch arrives on another device; one
    still holding ``held`` there refuses the batch, naming both devices.
    """
    state = acc._device
    if state is not None and state.device != device and not (state.dirty or state.replayable):
        state = None  # everything counted so far is on the host: start anew on this device
    if state is None:
        state = make()
        acc._device = state
    elif state.device != device:
        raise ValueError(
            f"this {type(acc).__name__} holds {held} on {state.device}, but the batch is on "
            f"{device}; give the batch on {state.device}, or read the accumulator first (any "
            f"read brings the {held} to the host, and the next batch may be anywhere)."
        )
    return state
