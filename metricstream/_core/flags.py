"""Constants that the input layer and the counting kernels share, kept apart from the kernels so
that reading inputs does not import Numba."""

# Bits of a batch's ``flags`` (what the kernels are told about the arrays they read).
COMMIT = 1
HAS_IGNORE = 2
INTEGRAL = 4
HALF = 8  # int16 scores that hold float16 bits
BFLOAT16 = 16  # int16 scores that hold bfloat16 bits

# Integral weights are converted to int64; larger values cannot be represented exactly.
MAX_INTEGRAL_WEIGHT = 9.2e18
