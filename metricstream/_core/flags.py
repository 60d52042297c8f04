"""Constants that the input layer and the counting kernels share, kept apart from the kernels so
that reading inputs does not import Numba; and the switch to the kernels' plain twins."""

import os

# Bits of a batch's ``flags`` (what the kernels are told about the arrays they read).
COMMIT = 1
HAS_IGNORE = 2
INTEGRAL = 4
HALF = 8  # int16 scores that hold float16 bits
BFLOAT16 = 16  # int16 scores that hold bfloat16 bits

# Integral weights are converted to int64; larger values cannot be represented exactly.
MAX_INTEGRAL_WEIGHT = 9.2e18


# --------------------------------------------------------------------- plain kernels switch
# Read by the kernels' callers at each call, so that the switch takes effect at the next
# update (the compiled kernels of both kinds are cached side by side).
PLAIN_KERNELS: bool = os.environ.get("METRICSTREAM_PLAIN_KERNELS", "").strip().lower() not in (
    "",
    "0",
    "false",
    "no",
    "off",
)


def plain_kernels(enable: bool | None = None) -> bool:
    """Force the plain-Numba twins of the SIMD kernels (``True``), or go back to the SIMD
    kernels (``False``); ``None`` only asks. Returns the setting before the call, so that
    ``previous = plain_kernels(True)`` ... ``plain_kernels(previous)`` restores it.

    The kernels that use LLVM intrinsics written by metricstream (vector rows, masked loads,
    fused multiply-adds, prefetches) each have a twin in plain Numba code that gives the same
    bits, only slower. The switch is a way around a miscompile of those intrinsics in some
    future Numba or LLVM. It starts from the environment variable
    ``METRICSTREAM_PLAIN_KERNELS`` (``1`` forces the twins; unset, empty or ``0`` does not)
    and applies from the next ``update`` of every accumulator.

    Example (``metricstream.plain_kernels`` is this function)::

        previous = metricstream.plain_kernels(True)
        acc.update(y_true, y_pred)  # counted by the plain kernels
        metricstream.plain_kernels(previous)
    """
    global PLAIN_KERNELS
    previous = PLAIN_KERNELS
    if enable is not None:
        if not isinstance(enable, bool):
            raise TypeError(f"`enable` must be True, False or None, got {enable!r}.")
        PLAIN_KERNELS = enable
    return previous
