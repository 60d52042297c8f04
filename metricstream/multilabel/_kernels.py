"""Numba kernels of the multilabel accumulator: the only place where label sets are counted.

The kernels do arithmetic only; inputs are converted, shape-checked and described in errors by
:mod:`metricstream.multilabel`. A batch is counted into two state arrays:

* ``labels`` (R, L): per label, row 0 ``TP_j``, row 1 ``AP_j`` (truly positive), row 2
  ``PP_j`` (predicted positive) and, with masking, row 3 the masked entries;
* ``per_sample`` (W,): the example-based statistics, laid out by ``layout`` (see
  :func:`sample_layout`): ``[rows, judged, exact, neither, weighted rows, zero weight,
  count]``, the histograms of the number of true and of predicted labels per sample, and the
  sums of per-sample true positives grouped by the denominator of each per-sample ratio —
  ``PP_s`` (precision), ``AP_s`` (recall), ``|T_s ∪ P_s|`` (Jaccard) and ``a AP_s + b PP_s``
  for each F-beta with ``beta² = a/b``.

Grouping by denominator keeps the example-based averages exact integers: ``sum_s TP_s / PP_s =
sum_k (sum of TP_s over samples with PP_s = k) / k``, so merging and any split of the stream give
bit-identical states, and zero_division is applied when reading (the histograms hold the number
of 0/0 samples). Samples of weight 0 add nothing but their number (scikit-learn counts their
per-sample ratios as 0/0, which matters for its warnings).

Atomicity without undo: the first pass over the rows validates each row as it accumulates the
column counts into local buffers and the row sums ``(TP_s, AP_s, PP_s)`` into a scratch of 12
bytes per row; only when every row is valid does the second pass (over the scratch, not the
data) add into the state. A failed call leaves the state untouched.

Return value: ``(status, row)`` (label sets: ``(status, row, position)``): ``OK`` or the code
and place of the first bad value; the caller finds the column and words the error.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.core.imputils import impl_ret_untracked
from numba.extending import intrinsic, overload
from numba.np.arrayobj import populate_array

from .._core import llvm as _llvm

OK = 0
BAD_TRUE = 1  # a true entry that is neither 0, 1 nor the mask value
BAD_PRED = 2  # a predicted entry that is neither 0 nor 1
BAD_SCORE = 3  # a NaN score, or a score outside the bounds of :func:`count_routed`
DUPLICATE_TRUE = 4  # a label listed twice in one sample's true set
DUPLICATE_PRED = 5

# Score bounds that only a NaN fails (``[low, high]`` of the validity tests).
_NO_LOW = -np.inf
_NO_HIGH = np.inf

# Bits of ``flags``.
HAS_WEIGHTS = 1
MASKED = 2

# Columns of ``per_sample``.
ROWS = 0  # samples seen
JUDGED = 1  # samples with at least one unmasked label (all of them without masking)
EXACT = 2  # judged samples whose predicted set equals the true set
NEITHER = 3  # judged samples with no true and no predicted label
WEIGHTED_ROWS = 4  # samples that came with weights (reports then print float supports)
ZERO_WEIGHT = 5  # judged samples of weight 0
COUNT = 6  # samples seen (not weighted)
FIXED_COLUMNS = 7


def sample_layout(num_labels: int, beta_ratios: list[tuple[int, int]]) -> np.ndarray:
    """Column offsets of ``per_sample`` as an int64 array, read by the kernels.

    ``[card_true, card_pred, by_pred, by_true, by_union, width, then (a, b, offset) per beta]``:
    the histograms of AP_s and PP_s (L + 1 columns each), the TP_s sums by PP_s, by AP_s and by
    the union (L + 1 each), and for each F-beta with ``beta² = a/b`` the TP_s sums by
    ``a AP_s + b PP_s`` ((a + b) L + 1 columns).
    """
    size = num_labels + 1
    offsets = [FIXED_COLUMNS + k * size for k in range(5)]
    width = FIXED_COLUMNS + 5 * size
    betas = []
    for a, b in beta_ratios:
        betas += [a, b, width]
        width += (a + b) * num_labels + 1
    return np.array(offsets + [width] + betas, dtype=np.int64)


def _kernel(function):
    """``njit(nogil=True)``, cached on disk when there is somewhere to write the cache."""
    try:
        return njit(cache=True, nogil=True)(function)
    except RuntimeError:  # no writable cache directory: compile in each process instead
        return njit(nogil=True)(function)


def compiled_for(kernel, args):
    """The machine code of ``kernel`` for the Numba types of ``args``, callable directly.

    Compiles (or loads from the on-disk cache) that specialisation if needed. Calling the
    result skips Numba's per-call dispatch, which types every argument on each call (about
    0.3 µs of a 7-argument call). It checks no type: the caller passes only arguments of
    exactly these Numba types afterwards (arrays of the same dtype, dimensions, layout,
    alignment and writeability; scalars of the same Python type). With the JIT disabled
    (``NUMBA_DISABLE_JIT=1``) it is the kernel itself.
    """
    compile_signature = getattr(kernel, "compile", None)
    if compile_signature is None:
        return kernel
    from numba import typeof

    return compile_signature(tuple(typeof(argument) for argument in args))


# ---------------------------------------------------------------------------- element helpers
def _positive_bits_codegen(context, builder, signature, args, lanes=64):
    array_type = signature.args[0]
    dtype = array_type.dtype
    data = context.make_array(array_type)(context, builder, value=args[0]).data
    offset = context.cast(builder, args[1], signature.args[1], types.intp)
    vector = ir.VectorType(context.get_value_type(dtype), lanes)
    pointer = builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())
    lane = ir.Constant(ir.IntType(32), 0)
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [lane] * lanes)
    if len(args) == 4:
        # a masked load of the first ``count`` entries (the others read as 0)
        i8 = ir.IntType(8)
        bytes64 = ir.VectorType(i8, 64)
        count = builder.trunc(context.cast(builder, args[3], signature.args[3], types.intp), i8)
        splat = builder.insert_element(ir.Constant(bytes64, ir.Undefined), count, lane)
        splat = builder.shuffle_vector(splat, ir.Constant(bytes64, ir.Undefined), zeros)
        iota = ir.Constant(bytes64, [ir.Constant(i8, k) for k in range(64)])
        mask = builder.icmp_unsigned("<", iota, splat)
        element = vector.element
        suffix = f"i{element.width}" if isinstance(element, ir.IntType) else "f32"
        if isinstance(element, ir.DoubleType):
            suffix = "f64"
        masked_load = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(vector, [vector.as_pointer(), ir.IntType(32), mask.type, vector]),
            f"llvm.masked.load.v64{suffix}.p0",
        )
        values = builder.call(
            masked_load, [pointer, ir.Constant(ir.IntType(32), 1), mask, ir.Constant(vector, None)]
        )
    else:
        values = builder.load(pointer, align=1)
    if isinstance(dtype, types.Float):
        limit = context.cast(builder, args[2], signature.args[2], dtype)
        splat = builder.insert_element(ir.Constant(vector, ir.Undefined), limit, lane)
        splat = builder.shuffle_vector(splat, ir.Constant(vector, ir.Undefined), zeros)
        positive = builder.fcmp_ordered(">=", values, splat)
    else:
        positive = builder.icmp_unsigned("!=", values, ir.Constant(vector, None))
    if lanes != 64:
        return builder.zext(builder.bitcast(positive, ir.IntType(lanes)), ir.IntType(64))
    return builder.bitcast(positive, ir.IntType(64))


def _bits_types_ok(array, start, threshold):
    return (
        isinstance(array, types.Array)
        and array.ndim == 1
        and isinstance(array.dtype, (types.Integer, types.Float))
        and isinstance(start, types.Integer)
        and isinstance(threshold, (types.Integer, types.Float))
    )


@intrinsic
def _positive_bits(typingctx, array, start, threshold):
    """Bit ``k`` set where entry ``start + k`` is positive, for ``k < 64``: an indicator that is
    not 0, or a score at or above ``threshold`` (compared in the scores' own precision). One
    64-lane vector load and compare (``vptestmb``/``vcmpps`` with AVX-512), which Numba's loops
    do not produce. Reads the 64 entries from ``start`` whatever the array's length: the caller
    keeps them inside it."""
    if not _bits_types_ok(array, start, threshold):
        return None
    return types.uint64(array, start, threshold), _positive_bits_codegen


@intrinsic
def _positive_bits32(typingctx, array, start, threshold):
    """:func:`_positive_bits` of 32 entries (bits 32 to 63 clear): one ymm compare and
    ``vpmovmskb`` for bytes with AVX2, where the 64-entry one is two, shifted and ORed (and for
    float32 scores eight compares and a chain of packs instead of four)."""
    if not _bits_types_ok(array, start, threshold):
        return None

    def codegen(context, builder, signature, args):
        return _positive_bits_codegen(context, builder, signature, args, 32)

    return types.uint64(array, start, threshold), codegen


@intrinsic
def _positive_bits_of(typingctx, array, start, threshold, count):
    """:func:`_positive_bits` reading only the first ``count`` (at most 64) entries, a masked
    load (the others read as 0: a score of 0 may be positive, so the caller masks the bits):
    for the last rows, whose 64 entries would reach past the array."""
    if not (_bits_types_ok(array, start, threshold) and isinstance(count, types.Integer)):
        return None
    return types.uint64(array, start, threshold, count), _positive_bits_codegen


def _target_has_avx512bw() -> bool:
    """Whether the code that Numba compiles here may use AVX-512 byte instructions: the CPU
    features Numba compiles for (``NUMBA_CPU_FEATURES``, else the host's, as Numba's own code
    generator takes them). The on-disk cache is keyed by those features too, so a cache from
    an AVX-512 machine is not loaded on an AVX2 one."""
    from numba.core import config

    features = getattr(config, "CPU_FEATURES", None)
    if features is not None:
        return "+avx512bw" in features.split(",")
    import llvmlite.binding as llvm

    try:
        return bool(llvm.get_host_cpu_features().get("avx512bw", False))
    except RuntimeError:  # features unknown: the narrower chunks are exact everywhere
        return False


# Entries of one chunk of the fused rows (:func:`_fused_row_pair`): 64 with AVX-512, where a
# chunk of a uint8 row is one zmm register and a row's last chunk a masked byte load; else 32.
# Without AVX-512 (AVX2: Zen 2/3, Intel client CPUs), LLVM splits a 64-byte vector into two
# ymm registers: the six 64-byte row sums of a row pair, the validity bytes and the loads need
# more than the 16 ymm registers, and the loop spilled ten vectors to the stack per chunk
# (measured on Zen 3 at 256×1000: 22 µs a kernel call, against 7.2 µs for a read-only pass
# over the two matrices); and a byte-granular masked load, which AVX2 lacks, is scalarised into
# 64 tests and branches.
FUSED_CHUNK = 64 if _target_has_avx512bw() else 32


def _prefetched_chunks(builder, chunk, count, width, ahead, starts, data_of_rows):
    """``chunk(c, None)`` for ``c < count``, two chunks an iteration, each iteration
    prefetching (``llvm.prefetch``: a hint, which reads nothing and cannot fault) the lines
    ``ahead`` entries past the two chunks of each row of each input. ``data_of_rows`` holds
    ``(element pointer, bytes an entry)`` of each input."""
    i8_pointer = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    prefetch = _llvm.declare(
        builder, "llvm.prefetch.p0", ir.VoidType(), [i8_pointer, i32, i32, i32]
    )
    two = ir.Constant(count.type, 2)
    with cgutils.for_range(builder, builder.udiv(count, two)) as loop:
        first = builder.mul(loop.index, two)
        chunk(first, None)
        chunk(builder.add(first, ir.Constant(count.type, 1)), None)
        offset = builder.add(builder.mul(first, ir.Constant(count.type, width)), ahead)
        for data, size in data_of_rows:
            for start in starts:
                line = builder.bitcast(builder.gep(data, [builder.add(start, offset)]), i8_pointer)
                for k in range(2 * width * size // 64):
                    # read, high locality (all cache levels), data cache
                    builder.call(
                        prefetch,
                        [
                            builder.gep(line, [ir.Constant(ir.IntType(64), 64 * k)]),
                            ir.Constant(i32, 0),
                            ir.Constant(i32, 3),
                            ir.Constant(i32, 1),
                        ],
                    )
    odd = builder.icmp_unsigned("!=", builder.urem(count, two), ir.Constant(count.type, 0))
    with builder.if_then(odd):
        chunk(builder.sub(count, ir.Constant(count.type, 1)), None)


def _fused_rows_codegen(context, builder, signature, args, rows, width=FUSED_CHUNK):
    """The code of :func:`_fused_row` (``rows`` 1) and :func:`_fused_row_pair` (2), over
    chunks of ``width`` entries."""
    t_type, p_type = signature.args[0], signature.args[1]
    lanes_type = signature.args[-1]
    i8 = ir.IntType(8)
    i32 = ir.IntType(32)
    i64 = ir.IntType(64)
    bytes64 = ir.VectorType(i8, width)
    zero = ir.Constant(bytes64, None)
    one = ir.Constant(bytes64, [ir.Constant(i8, 1)] * width)
    two = ir.Constant(bytes64, [ir.Constant(i8, 2)] * width)
    splat_mask = ir.Constant(ir.VectorType(i32, width), [ir.Constant(i32, 0)] * width)

    def splat(value, vector):
        first = builder.insert_element(
            ir.Constant(vector, ir.Undefined), value, splat_mask.constant[0]
        )
        return builder.shuffle_vector(first, ir.Constant(vector, ir.Undefined), splat_mask)

    t_data = context.make_array(t_type)(context, builder, value=args[0]).data
    p_data = context.make_array(p_type)(context, builder, value=args[1]).data
    lane_data = context.make_array(lanes_type)(context, builder, value=args[-1]).data
    starts = [
        context.cast(builder, args[2 + r], signature.args[2 + r], types.intp) for r in range(rows)
    ]
    count = context.cast(builder, args[2 + rows], signature.args[2 + rows], types.intp)
    rest = context.cast(builder, args[3 + rows], signature.args[3 + rows], types.intp)
    stride = builder.mul(count, ir.Constant(count.type, width))
    iota = ir.Constant(bytes64, [ir.Constant(i8, k) for k in range(width)])
    rest_mask = builder.icmp_unsigned("<", iota, splat(builder.trunc(rest, i8), bytes64))
    # Without AVX-512, a row alone ends in a chunk that ends where the row ends (its first
    # ``width - rest`` entries, read again, masked out; the chunk's lanes are those from
    # column ``L - width``): a plain load instead of a scalarised masked one. Rows of fused
    # chunks hold at least 64 > ``width`` entries, so the chunk starts inside the row.
    end_aligned = rows == 1 and width != 64
    if end_aligned:
        back = builder.sub(ir.Constant(rest.type, width), rest)
        rest_mask = builder.icmp_unsigned(">=", iota, splat(builder.trunc(back, i8), bytes64))
    if isinstance(p_type.dtype, types.Float):
        score_vector = ir.VectorType(context.get_value_type(p_type.dtype), width)
        limit, low, high = (
            context.cast(builder, args[k + rows], signature.args[k + rows], p_type.dtype)
            for k in (4, 5, 6)
        )
        splat_limit = splat(limit, score_vector)
        # The range test on the scores' bits as unsigned integers, ``bits & keep > top``: one
        # integer compare for two rows (their unsigned maximum first), where two float compares
        # a row cost 1.5x the count of 256×1000 float32 probabilities. ``[low, high]`` is
        # [0, 1] (keep every bit: a negative score has the sign bit, so it is above the bits
        # of 1.0, as are NaN and infinity) or (-inf, inf) (keep all but the sign: only a NaN
        # is above the bits of infinity). -0.0 is then out of [0, 1]: the caller's exact
        # check of the rows finds nothing wrong with it, and counts on.
        bits_type = ir.IntType(p_type.dtype.bitwidth)
        bits_vector = ir.VectorType(bits_type, width)
        everything = ir.Constant(bits_type, -1)
        no_sign = ir.Constant(bits_type, (1 << (p_type.dtype.bitwidth - 1)) - 1)
        from_zero = builder.fcmp_ordered("==", low, ir.Constant(low.type, 0.0))
        splat_keep = splat(builder.select(from_zero, everything, no_sign), bits_vector)
        splat_top = splat(builder.bitcast(high, bits_type), bits_vector)
    # per row: TP, AP, PP byte vectors; then the ORed validity bytes
    sums = [cgutils.alloca_once_value(builder, zero) for _ in range(3 * rows + 1)]
    # Scores outside [low, high] (NaN included): 64-bit masks with AVX-512; without, the
    # comparisons' lanes ORed into a vector of 8 (a 64-lane mask moved to a general register
    # costs eight ``vmovmskps`` and shifts)
    nan_width = 8
    nan_type = i64 if width == 64 else ir.VectorType(i32, nan_width)
    nan_slot = cgutils.alloca_once_value(builder, ir.Constant(nan_type, None))
    last = builder.sub(count, ir.Constant(count.type, 1))
    data_of_rows = [(t_data, t_type.dtype.bitwidth // 8), (p_data, p_type.dtype.bitwidth // 8)]

    def load(data, vector, offset, mask):
        """``width`` entries from ``offset``; with a ``mask`` (a single row's last chunk) only
        the lanes of the mask are read (a masked load: no read past the row), the others 0."""
        pointer = builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())
        if mask is None or rows != 1 or end_aligned:
            return builder.load(pointer, align=1)
        suffix = "i8" if vector.element == i8 else str(vector.element).replace("float", "f32")
        suffix = suffix.replace("double", "f64")
        if suffix not in ("i8", "f32", "f64"):
            suffix = "i" + str(vector.element.width)
        masked_load = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(vector, [vector.as_pointer(), i32, mask.type, vector]),
            f"llvm.masked.load.v{width}{suffix}.p0",
        )
        return builder.call(
            masked_load, [pointer, ir.Constant(i32, 1), mask, ir.Constant(vector, None)]
        )

    def indicator(data, dtype, offset, mask):
        vector = ir.VectorType(context.get_value_type(dtype), width)
        values = load(data, vector, offset, mask)
        if dtype.bitwidth == 8:
            return values, values
        above = builder.icmp_unsigned(
            ">", values, ir.Constant(vector, [ir.Constant(vector.element, 1)] * width)
        )
        return builder.trunc(values, bytes64), builder.select(above, two, zero)

    def or_lanes(vector):
        """``vector``'s lanes ORed down to ``nan_width`` lanes (halves ORed)."""
        size = vector.type.count
        while size > nan_width:
            size //= 2
            low = builder.shuffle_vector(
                vector, vector, ir.Constant(ir.VectorType(i32, size), list(range(size)))
            )
            high = builder.shuffle_vector(
                vector,
                vector,
                ir.Constant(ir.VectorType(i32, size), list(range(size, 2 * size))),
            )
            vector = builder.or_(low, high)
        return vector

    def chunk(c, mask):
        chunk_offset = builder.mul(c, ir.Constant(c.type, width))
        if mask is not None and end_aligned:
            chunk_offset = builder.sub(chunk_offset, back)
        lane_sums = [zero, zero, zero]
        bad = builder.load(sums[-1])
        scores_of_rows = []
        for r in range(rows):
            offset = builder.add(starts[r], chunk_offset)
            t, t_bad = indicator(t_data, t_type.dtype, offset, mask)
            if isinstance(p_type.dtype, types.Float):
                scores = load(p_data, score_vector, offset, mask)
                p = builder.zext(builder.fcmp_ordered(">=", scores, splat_limit), bytes64)
                scores_of_rows.append(scores)
                row_bad = t_bad
            else:
                p, p_bad = indicator(p_data, p_type.dtype, offset, mask)
                row_bad = builder.or_(t_bad, p_bad)
            if mask is not None:
                t = builder.select(mask, t, zero)
                p = builder.select(mask, p, zero)
                row_bad = builder.select(mask, row_bad, zero)
            bad = builder.or_(bad, row_bad)
            x = builder.and_(t, p)
            for k, value in enumerate((x, t, p)):
                slot = sums[3 * r + k]
                builder.store(builder.add(builder.load(slot), value), slot)
                lane_sums[k] = builder.add(lane_sums[k], value)
        builder.store(bad, sums[-1])
        if scores_of_rows:
            # not (low <= score <= high), NaN included: the range of probabilities and the
            # NaN test in one compare (see ``splat_keep``)
            largest = None
            for scores in scores_of_rows:
                kept = builder.and_(builder.bitcast(scores, bits_vector), splat_keep)
                if largest is None:
                    largest = kept
                else:
                    above = builder.icmp_unsigned(">", largest, kept)
                    largest = builder.select(above, largest, kept)
            nan = builder.icmp_unsigned(">", largest, splat_top)
            if mask is not None:
                nan = builder.and_(nan, mask)
            if width == 64:
                nan_bits = builder.bitcast(nan, i64)
            else:
                nan_bits = or_lanes(builder.zext(nan, ir.VectorType(i32, width)))
            builder.store(builder.or_(builder.load(nan_slot), nan_bits), nan_slot)
        for k, value in enumerate(lane_sums):
            where = builder.add(chunk_offset, builder.mul(stride, ir.Constant(stride.type, k)))
            pointer = builder.bitcast(builder.gep(lane_data, [where]), bytes64.as_pointer())
            builder.store(builder.add(builder.load(pointer, align=1), value), pointer, align=1)

    # the whole chunks, then the last one masked
    if rows == 2 and width != 64:
        # Without AVX-512: when the caller asks (``ahead`` entries, not 0), the lines ``ahead``
        # entries past each chunk pair are prefetched (the next row pair's), one prefetch a
        # line: the rows of a batch larger than L2 come from L3 (Zen 3, 256×1000: 12 % faster;
        # for rows that stay in cache, or shorter rows, the prefetches cost more than they save)
        ahead = context.cast(builder, args[7 + rows], signature.args[7 + rows], types.intp)
        prefetching = builder.icmp_signed("!=", ahead, ir.Constant(ahead.type, 0))
        with builder.if_else(prefetching) as (then, otherwise):
            with then:
                _prefetched_chunks(builder, chunk, last, width, ahead, starts, data_of_rows)
            with otherwise:
                with cgutils.for_range(builder, last) as loop:
                    chunk(loop.index, None)
    else:
        with cgutils.for_range(builder, last) as loop:
            chunk(loop.index, None)
    chunk(last, rest_mask)
    # zero-extended to 64 bits, so that x86 reduces each with one ``vpsadbw``
    wide = ir.VectorType(i64, width)
    reduce_add = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(i64, [wide]), f"llvm.vector.reduce.add.v{width}i64"
    )
    results = [
        builder.call(reduce_add, [builder.zext(builder.load(slot), wide)]) for slot in sums[:-1]
    ]
    above = builder.icmp_unsigned(">", builder.load(sums[-1]), one)
    above_bits = builder.bitcast(above, ir.IntType(width))
    if width != 64:
        above_bits = builder.zext(above_bits, i64)
    nan_flags = builder.load(nan_slot)
    if width != 64:
        nan_flags = builder.zext(
            builder.bitcast(
                builder.icmp_unsigned("!=", nan_flags, ir.Constant(nan_type, None)),
                ir.IntType(nan_width),
            ),
            i64,
        )
    flags = builder.or_(above_bits, nan_flags)
    any_above = builder.icmp_unsigned("!=", flags, ir.Constant(i64, 0))
    results.append(builder.select(any_above, ir.Constant(i64, 2), ir.Constant(i64, 0)))
    return context.make_tuple(builder, signature.return_type, results)


def _fused_types_ok(flat_t, flat_p, lanes):
    return (
        isinstance(flat_t, types.Array)
        and isinstance(flat_p, types.Array)
        and isinstance(lanes, types.Array)
        and flat_t.ndim == 1
        and flat_p.ndim == 1
        and isinstance(flat_t.dtype, types.Integer)
        and isinstance(flat_p.dtype, (types.Integer, types.Float))
        and lanes.dtype == types.uint8
    )


def _fused_row_intrinsic(width):
    """The intrinsic of :func:`_fused_row` over chunks of ``width`` entries."""

    def typer(typingctx, flat_t, flat_p, start, chunks, rest, threshold, low, high, lanes):
        if not _fused_types_ok(flat_t, flat_p, lanes):
            return None
        signature = types.UniTuple(types.int64, 4)(
            flat_t, flat_p, start, chunks, rest, threshold, low, high, lanes
        )

        def codegen(context, builder, signature, args):
            return _fused_rows_codegen(context, builder, signature, args, 1, width)

        return signature, codegen

    return intrinsic(typer)


def _fused_row_pair_intrinsic(width):
    """The intrinsic of :func:`_fused_row_pair` over chunks of ``width`` entries."""

    def typer(
        typingctx, flat_t, flat_p, start, start2, chunks, rest, threshold, low, high, ahead, lanes
    ):
        if not _fused_types_ok(flat_t, flat_p, lanes) or not isinstance(ahead, types.Integer):
            return None
        signature = types.UniTuple(types.int64, 7)(
            flat_t, flat_p, start, start2, chunks, rest, threshold, low, high, ahead, lanes
        )

        def codegen(context, builder, signature, args):
            return _fused_rows_codegen(context, builder, signature, args, 2, width)

        return signature, codegen

    return intrinsic(typer)


# ``_fused_row(flat_t, flat_p, start, chunks, rest, threshold, low, high, lanes)``: one row
# of ``chunks`` chunks of ``FUSED_CHUNK`` entries from ``start`` (the last holding ``rest``
# entries of the row, read by a masked load with AVX-512, else as the chunk that ends where the
# row ends; nothing past the row is read): returns ``(TP_s, AP_s, PP_s, bad)`` and adds the
# row's 0/1 values into the uint8 column lanes ``lanes`` (TP, AP, PP, ``FUSED_CHUNK chunks``
# each). ``bad`` is above 1 when an entry is invalid (a truth or an indicator above 1, a score
# not in ``[low, high]``: NaN, or outside [0, 1] for probabilities); the sums and lanes then
# mean nothing. The row sums live in three 64-lane byte vectors (registers), reduced once per
# row: one read of the data serves the column counts, the row sums and the validity (measured
# 1.5x faster than a pass for each at L = 1000). Each lane of a row sum holds at most
# ``chunks`` (at most 255) ones.
_fused_row = _fused_row_intrinsic(FUSED_CHUNK)
# ``_fused_row_pair(flat_t, flat_p, start, start2, chunks, rest, threshold, low, high, ahead,
# lanes)``: ``_fused_row`` for the rows at ``start`` and ``start2``: ``(TP, AP, PP of the
# first, the same of the second, bad)``; their sum is added into the lanes with one store (the
# lanes' loads and stores, not the arithmetic, bound the loop: measured 1.6x faster at
# L = 1000 than a row at a time). The last chunk of each row reads past it, into the next
# row. Without AVX-512, ``ahead`` not 0 prefetches the lines ``ahead`` entries further
# (:func:`_prefetched_chunks`); with AVX-512 it is ignored.
_fused_row_pair = _fused_row_pair_intrinsic(FUSED_CHUNK)
# The same in chunks of 64 entries whatever ``FUSED_CHUNK`` is: without AVX-512, for rows of
# more than 255 32-entry chunks (a byte of a row sum counts one entry a chunk), which the
# 64-entry chunks, spilled as they are on AVX2, still count faster than the two passes of
# narrower or wider rows (measured on Zen 3 at 32×8200: 1.3x, float32 scores 2x).
_fused_row_wide = _fused_row_intrinsic(64)
_fused_row_pair_wide = _fused_row_pair_intrinsic(64)


@intrinsic
def _flat(typingctx, array):
    """A C-contiguous array as one dimension (``reshape(-1)`` without Numba's reshape helper,
    a call of about 20 ns). The caller knows the array to be C-contiguous and keeps it alive:
    the view owns no reference, so that it and its slices cost no atomic reference counting
    (measured: a 256×20 update did about 40 atomic increments and decrements, 0.3 µs)."""
    if not (isinstance(array, types.Array) and array.layout == "C"):
        return None
    flat_type = array.copy(ndim=1, layout="C")

    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, value=args[0])
        target = context.make_array(signature.return_type)(context, builder)
        populate_array(
            target,
            data=source.data,
            shape=[source.nitems],
            strides=[source.itemsize],
            itemsize=source.itemsize,
            meminfo=None,
            parent=None,
        )
        return impl_ret_untracked(context, builder, signature.return_type, target._getvalue())

    return flat_type(array), codegen


@intrinsic
def _int64_view(typingctx, array):
    """A uint8 buffer (1-D, C-contiguous) as int64 words (``view(np.int64)`` of a buffer whose
    size is a multiple of 8, without Numba's ``view`` helper: a subroutine that took a second
    to compile). Owns no reference, like :func:`_flat`."""
    if not (
        isinstance(array, types.Array)
        and array.ndim == 1
        and array.layout == "C"
        and array.dtype == types.uint8
    ):
        return None
    view_type = array.copy(dtype=types.int64, layout="C")

    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, value=args[0])
        target = context.make_array(signature.return_type)(context, builder)
        eight = context.get_constant(types.intp, 8)
        populate_array(
            target,
            data=builder.bitcast(source.data, target.data.type),
            shape=[builder.udiv(source.nitems, eight)],
            strides=[eight],
            itemsize=eight,
            meminfo=None,
            parent=None,
        )
        return impl_ret_untracked(context, builder, signature.return_type, target._getvalue())

    return view_type(array), codegen


@intrinsic
def _popcount(typingctx, value):
    """The number of set bits of a uint64, as int64."""
    if not isinstance(value, types.Integer) or value.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.int64(value), codegen


def _positive(v, threshold):  # pragma: no cover - replaced by the overload below
    """1 if the prediction ``v`` is positive: the indicator itself, or ``score >= threshold``."""


@overload(_positive, inline="always")
def _positive_impl(v, threshold):
    if isinstance(v, types.Float):

        def from_score(v, threshold):
            return np.int64(v >= threshold)

        return from_score

    def from_indicator(v, threshold):
        return np.int64(v)

    return from_indicator


def _pred_bits(v):  # pragma: no cover - replaced by the overload below
    """Like :func:`_pred_flag` in the input's own width (so that the OR loop vectorises)."""


@overload(_pred_bits, inline="always")
def _pred_bits_impl(v):
    if isinstance(v, types.Float):

        def score_bits(v):
            return np.uint8(v != v) * np.uint8(2)  # NaN; branch-free (vectorises)

        return score_bits

    def indicator_bits(v):
        return v

    return indicator_bits


def _bits_zero(v):  # pragma: no cover - replaced by the overload below
    """The zero of :func:`_pred_bits`' type."""


@overload(_bits_zero, inline="always")
def _bits_zero_impl(v):
    if isinstance(v, types.Float):
        return lambda v: np.uint8(0)
    return lambda v: v ^ v


def _native_positive(v, threshold):  # pragma: no cover - replaced by the overload below
    """:func:`_positive` without widening indicators."""


@overload(_native_positive, inline="always")
def _native_positive_impl(v, threshold):
    if isinstance(v, types.Float):
        return lambda v, threshold: np.uint8(v >= threshold)
    return lambda v, threshold: v


def _true_bits(v):  # pragma: no cover - replaced by the overload below
    """uint8 validity bits of a true entry: above 1 exactly when it is neither 0 nor 1."""


@overload(_true_bits, inline="always")
def _true_bits_impl(v):
    if v.bitwidth == 8:
        return lambda v: np.uint8(v)
    return lambda v: np.uint8(v > 1) << np.uint8(1)


def _pred_valid(v, low, high):  # pragma: no cover - replaced by the overload below
    """uint8 validity bits of a prediction: above 1 exactly for a score not in ``[low, high]``
    (NaN included) or an indicator that is neither 0 nor 1."""


@overload(_pred_valid, inline="always")
def _pred_valid_impl(v, low, high):
    if isinstance(v, types.Float):
        # not (low <= v <= high), branch-free (vectorises); a NaN fails both comparisons
        return lambda v, low, high: (
            (np.uint8(np.uint8(v >= low) & np.uint8(v <= high)) ^ np.uint8(1)) << np.uint8(1)
        )
    if v.bitwidth == 8:
        return lambda v, low, high: np.uint8(v)
    return lambda v, low, high: np.uint8(v > 1) << np.uint8(1)


@njit(inline="always")
def _count_super_rows(flat_t, flat_p, at0, at1, m1, width, threshold, low, high, acc):
    """Pass 1 over two super-rows of ``width`` entries, at ``at0`` and ``at1`` (the second
    masked out by ``m1`` 0, when there is only one, ``at1`` then being ``at0``): their uint8
    column counts, summed, into the lanes ``acc`` (TP, AP, PP one after the other; one store
    per lane for two super-rows: measured 1.4x faster than one per super-row at L = 1000).
    Float scores are compared with ``threshold`` in the loop, and checked to lie in ``[low,
    high]``. Returns the OR of the entries' validity bits.

    The byte operations are truncated at each step: Numba widens them to int64, and an int64
    reduction does not vectorise over bytes (measured 4.5x slower)."""
    # slices, so that the indices are known not to be negative (no wraparound select)
    t0s = flat_t[at0 : at0 + width]
    t1s = flat_t[at1 : at1 + width]
    p0s = flat_p[at0 : at0 + width]
    p1s = flat_p[at1 : at1 + width]
    acc_tp = acc[:width]
    acc_t = acc[width : 2 * width]
    acc_p = acc[2 * width :]
    bad = np.uint8(0)
    for k in range(width):
        a0 = t0s[k]
        a1 = t1s[k]
        b0 = p0s[k]
        b1 = p1s[k]
        bt = np.uint8(_true_bits(a0) | _true_bits(a1))
        bp = np.uint8(_pred_valid(b0, low, high) | _pred_valid(b1, low, high))
        bad = np.uint8(bad | np.uint8(bt | bp))
        t0 = np.uint8(a0)
        t1 = np.uint8(np.uint8(a1) & m1)
        p0 = np.uint8(_native_positive(b0, threshold))
        p1 = np.uint8(np.uint8(_native_positive(b1, threshold)) & m1)
        acc_tp[k] = np.uint8(acc_tp[k] + np.uint8(np.uint8(t0 & p0) + np.uint8(t1 & p1)))
        acc_t[k] = np.uint8(acc_t[k] + np.uint8(t0 + t1))
        acc_p[k] = np.uint8(acc_p[k] + np.uint8(p0 + p1))
    return bad


@njit(inline="always")
def _take(s, g, count):
    """Super-row ``s + g`` and the mask 0xFF when ``g < count``, else ``s`` and 0."""
    if g < count:
        return s + g, np.uint8(0xFF)
    return s, np.uint8(0)


@njit
def _flush(acc, num_labels, width, span, most, cols):
    """Add the uint8 lanes ``acc`` (TP, AP, PP, ``width`` each, of which the first ``span``
    hold ``span / L`` rows of L labels, each lane at most ``most``) into the column counts
    ``cols`` (TP, AP, PP, L each) and zero them. The rows of lanes are first folded in halves
    while the sums stay within a byte (vector byte additions: measured 0.25 µs less than
    widening every lane at 256×20)."""
    slots = span // num_labels
    while slots % 2 == 0 and most <= 127:
        half = slots // 2 * num_labels
        for r in range(3):
            low = acc[r * width : r * width + half]
            high = acc[r * width + half : r * width + 2 * half]
            for k in range(half):
                low[k] = np.uint8(low[k] + high[k])
        slots //= 2
        most *= 2
    out_tp = cols[:num_labels]
    out_t = cols[num_labels : 2 * num_labels]
    out_p = cols[2 * num_labels : 3 * num_labels]
    for q in range(0, slots * num_labels, num_labels):
        lanes_tp = acc[q : q + num_labels]
        lanes_t = acc[width + q : width + q + num_labels]
        lanes_p = acc[2 * width + q : 2 * width + q + num_labels]
        for j in range(num_labels):
            out_tp[j] += lanes_tp[j]
            out_t[j] += lanes_t[j]
            out_p[j] += lanes_p[j]
    acc[:] = 0


# :func:`_flush` inlined, for the flush that ends every count (see ``_count_plain_into``).
_flush_last = njit(inline="always")(getattr(_flush, "py_func", _flush))


def _pred_flag(v, low, high):  # pragma: no cover - replaced by the overload below
    """A value whose bitwise OR over a row exceeds 1 exactly when the row holds a bad value (a
    score not in ``[low, high]``, NaN included)."""


@overload(_pred_flag, inline="always")
def _pred_flag_impl(v, low, high):
    if isinstance(v, types.Float):

        def score_flag(v, low, high):
            inside = np.uint64(v >= low) & np.uint64(v <= high)  # branch-free: NaN is outside
            return (inside ^ np.uint64(1)) * np.uint64(2)

        return score_flag

    def indicator_flag(v, low, high):
        return np.uint64(v)  # anything but 0/1 (negative values were viewed as unsigned)

    return indicator_flag


@njit(inline="always")
def _row_status(t, p, mask_value, masked, low, high):
    """``OK``, ``BAD_TRUE`` or ``BAD_PRED``/``BAD_SCORE`` for one row (scores must lie in
    ``[low, high]``); branch-free loops."""
    if masked:
        bad = False
        for j in range(t.shape[0]):
            v = t[j]
            bad |= (v > 1) & (v != mask_value)
        if bad:
            return BAD_TRUE
    else:
        acc = np.uint64(0)
        for j in range(t.shape[0]):
            acc |= np.uint64(t[j])
        if acc > 1:
            return BAD_TRUE
    acc = np.uint64(0)
    for j in range(p.shape[0]):
        acc |= _pred_flag(p[j], low, high)
    if acc > 1:
        return BAD_SCORE if _is_score(p[0]) else BAD_PRED
    return OK


def _is_score(v):  # pragma: no cover - replaced by the overload below
    """Whether predictions are scores (floats)."""


@overload(_is_score, inline="always")
def _is_score_impl(v):
    if isinstance(v, types.Float):
        return lambda v: True
    return lambda v: False


@njit(inline="always")
def _masked_row(t, p, threshold, mask_value, wi, tpl, apl, ppl, ignl):
    """Column counts of one validated row with masking; returns the row sums and the number
    of unmasked labels."""
    tps = np.int64(0)
    aps = np.int64(0)
    pps = np.int64(0)
    known = np.int64(0)
    for j in range(t.shape[0]):
        v = t[j]
        k = np.int64(v != mask_value)
        tj = np.int64(v) & k
        pj = _positive(p[j], threshold) & k
        x = tj & pj
        tpl[j] += wi * x
        apl[j] += wi * tj
        ppl[j] += wi * pj
        ignl[j] += wi * (1 - k)
        tps += x
        aps += tj
        pps += pj
        known += k
    return tps, aps, pps, known


@njit(inline="always")
def _weighted_row(t, p, threshold, wi, tpl, apl, ppl):
    """Column counts of one row, weighted by ``wi``, into the local buffers, validating as it
    counts (the buffers are discarded on error); returns ``(bad, TP, AP, PP)`` with ``bad`` 0
    when valid, else ``BAD_TRUE``/``BAD_PRED``/``BAD_SCORE``."""
    bits_t = t[0] ^ t[0]
    bits_p = _bits_zero(p[0])
    for j in range(t.shape[0]):
        tj = t[j]
        pv = p[j]
        pj = _native_positive(pv, threshold)
        bits_t |= tj
        bits_p |= _pred_bits(pv)
        tpl[j] += wi * (tj & pj)
        apl[j] += wi * tj
        ppl[j] += wi * pj
    if bits_t > 1:
        return BAD_TRUE, 0, 0, 0
    if bits_p > 1:
        return (BAD_SCORE if _is_score(p[0]) else BAD_PRED), 0, 0, 0
    if t.shape[0] <= 255:
        tps, aps, pps = _row_sums_narrow(t, p, threshold)
    else:
        tps, aps, pps = _row_sums_wide(t, p, threshold)
    return OK, tps, aps, pps


@njit(inline="always")
def _row_sums_narrow(t, p, threshold):
    """Row sums of a row of at most 255 labels in uint8 lanes (measured 3.7x faster than int32
    lanes for 20 labels)."""
    tps = np.uint8(0)
    aps = np.uint8(0)
    pps = np.uint8(0)
    for j in range(t.shape[0]):
        tj = np.uint8(t[j])
        pj = np.uint8(_native_positive(p[j], threshold))
        tps += tj & pj
        aps += tj
        pps += pj
    return np.int64(tps), np.int64(aps), np.int64(pps)


@njit(inline="always")
def _row_sums_wide(t, p, threshold):
    tps = np.int32(0)
    aps = np.int32(0)
    pps = np.int32(0)
    for j in range(t.shape[0]):
        tj = np.int32(t[j])
        pj = np.int32(_native_positive(p[j], threshold))
        tps += tj & pj
        aps += tj
        pps += pj
    return np.int64(tps), np.int64(aps), np.int64(pps)


@njit(inline="always")
def _add_sample(row, layout, w, tps, aps, pps):
    """Add one judged sample (row sums ``tps, aps, pps``) with weight ``w`` into ``row``."""
    union = aps + pps - tps
    if tps == aps and tps == pps:
        row[EXACT] += w
    if union == 0:
        row[NEITHER] += w
    row[layout[0] + aps] += w
    row[layout[1] + pps] += w
    if tps != 0:
        wt = w * tps
        row[layout[2] + pps] += wt
        row[layout[3] + aps] += wt
        row[layout[4] + union] += wt
        for k in range((layout.shape[0] - 6) // 3):
            a = layout[6 + 3 * k]
            b = layout[7 + 3 * k]
            row[layout[8 + 3 * k] + a * aps + b * pps] += wt


@njit(inline="always")
def _add_cooccurrence(t, w, cooc, scratch):
    k = 0
    for j in range(t.shape[0]):
        if t[j] == 1:
            scratch[k] = j
            k += 1
    for a in range(k):
        for b in range(k):
            cooc[scratch[a], scratch[b]] += w


@_kernel
def count_dense(y_true, y_pred, weights, threshold, flags, layout, labels, per_sample):
    """Count an (N, L) indicator truth against (N, L) indicators or scores.

    ``y_true`` is unsigned (a view of any integer or bool array); ``y_pred`` unsigned
    indicators or float scores, positive when ``score >= threshold``. ``weights`` holds one
    weight per sample (of the state's dtype) when ``HAS_WEIGHTS``, else it is an empty int32
    array. Returns ``(status, row)``. Masking and co-occurrence live in their own kernels, so
    that this loop stays small enough to be optimised well (measured: 2.3x faster).
    """
    n = y_true.shape[0]
    num_labels = y_true.shape[1]
    weighted = (flags & HAS_WEIGHTS) != 0
    # Column counts of the call in buffers of the weights' dtype: int32 for unweighted calls
    # (the caller splits calls of 2^31 rows or more), whose lanes vectorise twice as wide as
    # int64's.
    tpl = np.zeros(num_labels, dtype=weights.dtype)
    apl = np.zeros_like(tpl)
    ppl = np.zeros_like(tpl)
    one = tpl[0] * 0 + 1  # 1 of the buffer's dtype (L >= 1)
    sums = np.empty((n, 4), dtype=np.int32)
    # ---- pass 1: count each row's columns into the local buffers, validating as it counts
    # (``update`` counts unweighted, unmasked batches with ``count_plain``: an unweighted call
    # takes the weighted loop too, with weights of 1, rather than compile a loop of its own
    # into every specialisation)
    for i in range(n):
        wi = weights[i] if weighted else one
        status, tps, aps, pps = _weighted_row(y_true[i], y_pred[i], threshold, wi, tpl, apl, ppl)
        if status != OK:
            return status, i
        sums[i, 0] = tps
        sums[i, 1] = aps
        sums[i, 2] = pps
        sums[i, 3] = 1
    # ---- pass 2: commit (nothing can fail from here on)
    for j in range(num_labels):
        labels[0, j] += tpl[j]
        labels[1, j] += apl[j]
        labels[2, j] += ppl[j]
    _commit_samples(sums, weights, weighted, layout, per_sample)
    return OK, -1


@_kernel
def count_dense_masked(
    y_true, y_pred, weights, threshold, mask_value, flags, layout, labels, per_sample
):
    """:func:`count_dense` skipping true entries equal to ``mask_value`` (``labels`` row 3
    counts them)."""
    n = y_true.shape[0]
    num_labels = y_true.shape[1]
    weighted = (flags & HAS_WEIGHTS) != 0
    tpl = np.zeros(num_labels, dtype=weights.dtype)
    apl = np.zeros_like(tpl)
    ppl = np.zeros_like(tpl)
    ignl = np.zeros_like(tpl)
    one = tpl[0] * 0 + 1
    sums = np.empty((n, 4), dtype=np.int32)
    for i in range(n):
        t = y_true[i]
        p = y_pred[i]
        status = _row_status(t, p, mask_value, True, _NO_LOW, _NO_HIGH)
        if status != OK:
            return status, i
        wi = weights[i] if weighted else one
        tps, aps, pps, known = _masked_row(t, p, threshold, mask_value, wi, tpl, apl, ppl, ignl)
        sums[i, 0] = tps
        sums[i, 1] = aps
        sums[i, 2] = pps
        sums[i, 3] = known != 0
    for j in range(num_labels):
        labels[0, j] += tpl[j]
        labels[1, j] += apl[j]
        labels[2, j] += ppl[j]
        labels[3, j] += ignl[j]
    _commit_samples(sums, weights, weighted, layout, per_sample)
    return OK, -1


@_kernel
def count_cooccurrence(y_true, weights, flags, cooc):
    """Add the co-occurrence of true labels (entries equal to 1) of a validated batch."""
    weighted = (flags & HAS_WEIGHTS) != 0
    scratch = np.empty(y_true.shape[1], dtype=np.int64)
    for i in range(y_true.shape[0]):
        _add_cooccurrence(y_true[i], weights[i] if weighted else 1, cooc, scratch)


@njit
def _commit_samples(sums, weights, weighted, layout, per_sample):
    """Add the per-sample statistics of a validated batch (row sums in ``sums``)."""
    n = sums.shape[0]
    judged_weight = per_sample[0] * 0
    total_weight = per_sample[0] * 0
    zero_weight = 0
    # The column offsets, hoisted out of the per-sample loop.
    card_true = layout[0]
    card_pred = layout[1]
    by_pred = layout[2]
    by_true = layout[3]
    by_union = layout[4]
    num_betas = (layout.shape[0] - 6) // 3
    if weighted or num_betas != 1 or layout[6] != 1 or layout[7] != 1:
        for i in range(n):
            w = weights[i] if weighted else 1
            total_weight += w
            if sums[i, 3]:
                judged_weight += w
                if w == 0:
                    zero_weight += 1
                else:
                    _add_sample(per_sample, layout, w, sums[i, 0], sums[i, 1], sums[i, 2])
    else:
        # Unweighted with F1 only (the default): no inner loop over betas.
        by_f1 = layout[8]
        exact = 0
        neither = 0
        for i in range(n):
            tps = sums[i, 0]
            aps = sums[i, 1]
            pps = sums[i, 2]
            total_weight += 1
            if sums[i, 3]:
                judged_weight += 1
                union = aps + pps - tps
                exact += (tps == aps) & (tps == pps)
                neither += union == 0
                per_sample[card_true + aps] += 1
                per_sample[card_pred + pps] += 1
                per_sample[by_pred + pps] += tps
                per_sample[by_true + aps] += tps
                per_sample[by_union + union] += tps
                per_sample[by_f1 + aps + pps] += tps
        per_sample[EXACT] += exact
        per_sample[NEITHER] += neither
    per_sample[ROWS] += total_weight
    per_sample[JUDGED] += judged_weight
    per_sample[ZERO_WEIGHT] += zero_weight
    per_sample[COUNT] += n


@_kernel
def count_sets(
    true_indptr,
    true_indices,
    pred_indptr,
    pred_indices,
    weights,
    flags,
    layout,
    labels,
    per_sample,
    cooc,
    scratch,
):
    """Count per-sample label sets (CSR: ``indices[indptr[i]:indptr[i + 1]]`` of sample ``i``).

    Indices are already checked to lie in ``[0, L)`` and ``indptr`` to be monotone; a label
    listed twice in one sample stops the call (``DUPLICATE_TRUE``/``DUPLICATE_PRED``) before
    anything is counted. ``scratch`` is a zeroed uint8 array of length L, left zeroed.
    """
    n = true_indptr.shape[0] - 1
    weighted = (flags & HAS_WEIGHTS) != 0
    sums = np.empty((n, 4), dtype=np.int32)
    # ---- pass 1: validate (duplicates) and compute each sample's TP_s
    for i in range(n):
        t = true_indices[true_indptr[i] : true_indptr[i + 1]]
        p = pred_indices[pred_indptr[i] : pred_indptr[i + 1]]
        status = OK
        column = -1
        for a in range(t.shape[0]):
            if scratch[t[a]] & 1:
                status = DUPLICATE_TRUE
                column = a
                break
            scratch[t[a]] |= 1
        if status == OK:
            for a in range(p.shape[0]):
                if scratch[p[a]] & 2:
                    status = DUPLICATE_PRED
                    column = a
                    break
                scratch[p[a]] |= 2
        tps = 0
        for a in range(t.shape[0]):
            tps += scratch[t[a]] >> 1
        for a in range(t.shape[0]):
            scratch[t[a]] = 0
        for a in range(p.shape[0]):
            scratch[p[a]] = 0
        if status != OK:
            return status, i, column
        sums[i, 0] = tps
        sums[i, 1] = t.shape[0]
        sums[i, 2] = p.shape[0]
        sums[i, 3] = 1
    # ---- pass 2: commit
    tp = labels[0]
    ap = labels[1]
    pp = labels[2]
    for i in range(n):
        w = weights[i] if weighted else 1
        t = true_indices[true_indptr[i] : true_indptr[i + 1]]
        p = pred_indices[pred_indptr[i] : pred_indptr[i + 1]]
        for a in range(p.shape[0]):
            scratch[p[a]] = 1
            pp[p[a]] += w
        for a in range(t.shape[0]):
            ap[t[a]] += w
            tp[t[a]] += w * scratch[t[a]]
        for a in range(p.shape[0]):
            scratch[p[a]] = 0
        if cooc.shape[0] != 0:
            for a in range(t.shape[0]):
                for b in range(t.shape[0]):
                    cooc[t[a], t[b]] += w
    _commit_samples(sums, weights, weighted, layout, per_sample)
    return OK, -1, -1


# ---------------------------------------------------------------------------- the hot path
# Unweighted, unmasked indicator or score matrices: the training-loop case and the large-file
# case. The loops below are written so that LLVM vectorises them over uint8 lanes:
#
# * column counts: ``K`` consecutive rows are one "super-row" of ``K L`` contiguous entries
#   (``K L`` a multiple of 64 when that stays small), added entry-wise into uint8 lanes that are
#   flushed into int64 every 255 super-rows: one long branch-free loop whatever L is, instead
#   of a loop of L iterations per row (which for L = 20 never reaches the vector body); two
#   super-rows are summed before they are added into the lanes (half the stores), and the
#   validity bits are ORed into a register;
# * rows of 64 labels or more: read once, two rows at a time, by :func:`_fused_row_pair`
#   (column lanes of one uint8 per label, flushed every 254 rows; row sums in byte vectors);
# * row sums ``(TP_s, AP_s, PP_s)`` of shorter rows: each row is read in chunks of 64 entries,
#   each compared with zero (or, for scores, with the threshold) into a 64-bit mask
#   (:func:`_positive_bits`), the last chunk of a row masked (it reads into the next row,
#   never past the batch: the last rows take a scalar loop); the sums are popcounts of the
#   masks. Scores are compared again there rather than copied as 0/1 bytes in pass 1;
# * per-sample statistics: scattered into the histograms;
# * validity: every loop that reads the entries ORs their validity bits (a truth or an
#   indicator above 1; a score outside ``[low, high]``, which for probabilities is [0, 1] and
#   otherwise only excludes NaN), checked before anything reaches the state.
#
# A batch that stays in cache is one block, counted straight into the state once it is found
# valid (no O(L) local buffers to zero and add); a longer batch is counted into local buffers
# (O(L)) added into the state when the whole batch was found valid. The timings behind these
# choices, and the variants measured and not kept, are in docs/performance.md ("Multilabel
# kernels").
CHUNK = 64
# A super-row holds at most this many entries (its uint8 lanes, three arrays, stay in L1).
_SUPER_ROW_MAX = 2048
# Status of an update whose counts could pass 2**63 - 1.
OVERFLOW = 6
# Status of matrices that ``count_plain`` does not take in mode 2 (nothing counted).
NOT_PLAIN = 7
_INT64_MAX = 2**63 - 1
_BLOCK_ROWS = 256
_BLOCK_BYTES = 1 << 16
# Batches of at most this many input bytes are taken to be read from cache (L2, L3).
_CACHED_BYTES = 1 << 21
# Rows whose sums are computed before their statistics are scattered.
_SUM_ROWS = 256
# The fused row pairs prefetch (without AVX-512) for rows of at least this many labels in
# batches of at least this many entries.
_PREFETCH_LABELS = 512
_PREFETCH_ENTRIES = 1 << 17


@njit(inline="always")
def _super_rows(num_labels):
    """Rows per super-row: ``64 / gcd(L, 64)`` (so ``K L`` is a multiple of 64) when that
    stays within ``_SUPER_ROW_MAX`` entries, else as many whole rows as fit (at least one)."""
    a = num_labels
    b = CHUNK
    while b:
        a, b = b, a % b
    k = CHUNK // a
    if k * num_labels > _SUPER_ROW_MAX:
        k = max(1, _SUPER_ROW_MAX // num_labels)
    return k


@njit
def _first_bad_row(y_true, y_pred, start, low, high):
    """``(status, row)`` of the first row from ``start`` holding an invalid entry (true checked
    first; scores must lie in ``[low, high]``)."""
    zero = y_true[0, 0] ^ y_true[0, 0]
    for i in range(start, y_true.shape[0]):
        status = _row_status(y_true[i], y_pred[i], zero, False, low, high)
        if status != OK:
            return status, i
    return OK, -1


@njit(inline="always")
def status_code(status, row):
    """One int for ``(status, row)``: ``status + 8 * (row + 1)``, 0 for ``(OK, -1)`` (one
    int is returned faster than a tuple: measured 0.05 µs a call)."""
    return status + 8 * (row + 1)


def split_status(code: int) -> tuple[int, int]:
    """``(status, row)`` of a :func:`status_code`."""
    return code % 8, code // 8 - 1


@njit(inline="always")
def _plain_matrix(a, rows, cols):
    """Whether ``a`` is a ``(rows, cols)`` C-contiguous, aligned matrix (the strides and the
    data address of the array as given, whatever its Numba type says; an empty matrix, whose
    strides numpy may give as 0, is taken)."""
    size = a.itemsize
    return (
        a.shape[0] == rows
        and a.shape[1] == cols
        and (rows == 0 or a.strides[1] == size or cols < 2)
        and (a.strides[0] == cols * size or rows < 2)
        and a.ctypes.data % size == 0
    )


@njit(inline="always")
def _fused_chunk(num_labels):
    """Entries of a chunk of fused rows of ``num_labels``: ``FUSED_CHUNK``, or 64 for rows of
    more than 255 chunks of ``FUSED_CHUNK`` (:func:`_fused_row_wide`)."""
    if num_labels <= 255 * FUSED_CHUNK:
        return FUSED_CHUNK
    return 64


@njit(inline="always")
def _lane_bytes(num_labels):
    """Bytes of the uint8 lanes of pass 1 (TP, AP, PP), rounded up to 8."""
    if CHUNK <= num_labels <= 255 * CHUNK:
        chunk = _fused_chunk(num_labels)
        width = (num_labels + chunk - 1) // chunk * chunk
    else:
        width = _super_rows(num_labels) * num_labels
    return (3 * width + 7) // 8 * 8


@njit(inline="always")
def _packed_cells(num_labels):
    """int64 cells of the packed AP_s and PP_s histograms of pass 2: without AVX-512, for rows
    of fewer than 64 labels (see :func:`_count_plain_into`)."""
    if FUSED_CHUNK != 64 and num_labels < CHUNK:
        return 2 * (num_labels + 1)
    return 0


@_kernel
def plain_buffer_size(num_labels):
    """Bytes of the scratch that :func:`count_routed` takes for rows of ``num_labels``."""
    return _lane_bytes(num_labels) + 8 * (3 * _SUM_ROWS + _packed_cells(num_labels)) + 64


@_kernel
def count_plain(y_true, y_pred, threshold, layout, labels, per_sample, mode):
    """Count an unweighted, unmasked (N, L) batch; returns ``status + 8 * (row + 1)``: 0 when
    the batch was counted, else the status and the first bad row (-1 for ``NOT_PLAIN``).

    ``y_true`` is an unsigned C-contiguous view of the truth, ``y_pred`` unsigned indicators or
    float scores (positive when ``score >= threshold``; a NaN score is invalid), C-contiguous.
    With ``mode`` 1 (commit) the counts are added into ``labels`` (3, L) and ``per_sample``
    only when the batch is valid (the caller has checked that no total can pass 2**63 - 1);
    with 0, ``labels`` and ``per_sample`` are the caller's zeroed private buffers (one thread's
    share of a batch), which the caller adds once every share is counted. Mode 2 is mode 1 for
    matrices that the caller has not checked beyond their dtypes and dimensions: ``NOT_PLAIN``,
    and nothing counted, unless both are C-contiguous, aligned and of the same shape (N, L) with
    L the state's.
    """
    n = y_true.shape[0]
    num_labels = y_true.shape[1]
    wide = 3 * min(n, _SUM_ROWS) + _packed_cells(num_labels)
    buffer = np.empty(_lane_bytes(num_labels) + 8 * wide + 64, np.uint8)
    low, high = _score_bounds(threshold, False)
    return _count_plain_into(
        y_true, y_pred, threshold, low, high, layout, labels, per_sample, mode, buffer
    )


# Positions in the int64 ``table`` of :func:`count_routed`.
ROUTE_LABELS = 0  # L
ROUTE_LABELS_AT = 1  # the address of ``labels`` (3, L) int64, C-contiguous
ROUTE_SAMPLES_AT = 2  # the address of ``per_sample`` (W,) int64
ROUTE_SAMPLES = 3  # W
ROUTE_SCRATCH_AT = 4  # the address of a uint8 scratch of ``plain_buffer_size(L)`` bytes
ROUTE_SCRATCH = 5  # its size
ROUTE_LAYOUT_AT = 6  # the address of ``layout`` (int64)
ROUTE_LAYOUT = 7  # its length
ROUTE_SCORES = 8  # what float scores must be: SCORES_ANY, SCORES_PROBABILITIES or SCORES_LOGITS
# How much the int64 total of any state array may still grow (2**63 - 1 less an upper bound of
# the largest total), and the most one row adds to a total: a call of N rows counts only when
# N times the second is at most the first, and takes that from it.
ROUTE_ROOM = 9
ROUTE_GROWTH = 10
ROUTE_SIZE = 11
# ``table[ROUTE_SCORES]``: scores are probabilities, so a score outside [0, 1] makes the call
# count nothing (a ``BAD_SCORE`` status: the caller's general path words the error); or
# logits, so a batch of scores all inside [0, 1] is counted and returns ``SUSPICIOUS`` (the
# caller warns).
SCORES_ANY = 0
SCORES_PROBABILITIES = 1
SCORES_LOGITS = 2
SUSPICIOUS = -1
# Fewer logits than this may all lie in [0, 1] by chance: no warning.
SUSPICIOUS_MIN_SCORES = 16


@_kernel
def count_routed(y_true, y_pred, threshold, table):
    """:func:`count_plain` in mode 2 (``update``'s one-call path) on the state arrays and the
    scratch at the addresses of ``table`` (int64, ``ROUTE_*`` positions; the caller keeps them
    alive, and holds the accumulator's lock, which guards the scratch and the room).

    One array argument instead of four (each costs about 45 ns of a call), no allocation, and
    arrays that own no reference (no atomic reference counting). Probabilities are checked to
    lie in [0, 1] by the counting loops' own validity test; logits are scanned for a value
    outside [0, 1] up to the first one (real logits: the first 64 entries), to warn about a
    batch of probabilities. Returns ``OVERFLOW`` when the batch could take a total past the
    room.
    """
    need = y_true.shape[0] * table[ROUTE_GROWTH]
    if need > table[ROUTE_ROOM]:
        return OVERFLOW
    num_labels = table[ROUTE_LABELS]
    labels = carray(_llvm.pointer_to(table[ROUTE_LABELS_AT], np.int64), (3, num_labels))
    per_sample = carray(_llvm.pointer_to(table[ROUTE_SAMPLES_AT], np.int64), table[ROUTE_SAMPLES])
    buffer = carray(_llvm.pointer_to(table[ROUTE_SCRATCH_AT], np.uint8), table[ROUTE_SCRATCH])
    layout = carray(_llvm.pointer_to(table[ROUTE_LAYOUT_AT], np.int64), table[ROUTE_LAYOUT])
    rule = table[ROUTE_SCORES]
    low, high = _score_bounds(threshold, rule == SCORES_PROBABILITIES)
    suspicious = False
    if rule == SCORES_LOGITS and _is_score_array(y_pred):
        if not _plain_matrix(y_pred, y_pred.shape[0], y_pred.shape[1]):
            return NOT_PLAIN
        suspicious = y_pred.size >= SUSPICIOUS_MIN_SCORES and not _outside_unit(_flat(y_pred))
    code = _count_plain_into(
        y_true, y_pred, threshold, low, high, layout, labels, per_sample, np.int64(2), buffer
    )
    if code == 0:
        table[ROUTE_ROOM] -= need
        if suspicious:
            return SUSPICIOUS
    return code


def _is_score_array(a):  # pragma: no cover - replaced by the overload below
    """Whether ``a`` holds float scores (known when compiling)."""


@overload(_is_score_array, inline="always")
def _is_score_array_impl(a):
    if isinstance(a.dtype, types.Float):
        return lambda a: True
    return lambda a: False


def _score_bounds(threshold, probabilities):  # pragma: no cover - replaced by the overload
    """``(low, high)`` that valid scores lie between, in the type of ``threshold`` (that of the
    scores): 0 and 1 for probabilities, else infinities (only a NaN is invalid)."""


@overload(_score_bounds, inline="always")
def _score_bounds_impl(threshold, probabilities):
    if isinstance(threshold, types.Float) and threshold.bitwidth == 32:
        return lambda threshold, probabilities: (
            (np.float32(0.0), np.float32(1.0))
            if probabilities
            else (np.float32(-np.inf), np.float32(np.inf))
        )
    return lambda threshold, probabilities: (0.0, 1.0) if probabilities else (-np.inf, np.inf)


@_kernel
def outside_unit(flat):
    """Whether a 1-D float array holds a value below 0 or above 1, or a NaN (called from
    Python: cached on disk like the counting kernels)."""
    return _outside_unit(flat)


def _unit_bounds(flat):  # pragma: no cover - replaced by the overload below
    """0 and the smallest value above 1, in the scores' own float type."""


@overload(_unit_bounds, inline="always")
def _unit_bounds_impl(flat):
    if isinstance(flat.dtype, types.Float) and flat.dtype.bitwidth == 32:
        above = float(np.nextafter(np.float32(1.0), np.float32(2.0)))
        return lambda flat: (np.float32(0.0), np.float32(above))
    above64 = float(np.nextafter(1.0, 2.0))
    return lambda flat: (0.0, above64)


@njit(inline="always")
def _outside_unit(flat):
    """Whether a value lies below 0 or above 1 (a NaN counts as outside: the count then finds
    and words it). 64 entries a step, two vector compares (as in pass 2), stopping at the
    first step that finds one; then the rest."""
    zero, above = _unit_bounds(flat)
    n = flat.shape[0]
    full = n - n % CHUNK
    for k in range(0, full, CHUNK):
        if ~_positive_bits(flat, k, zero) | _positive_bits(flat, k, above):
            return True
    for k in range(full, n):
        v = flat[k]
        if not (v >= zero) or v >= above:
            return True
    return False


# ---------------------------------------------------------------------------- count_plain
# :func:`_count_plain_into` plans the call (the regime of its row width, blocks, buffers) and
# runs, block by block, pass 1 (:func:`_count_columns`) then pass 2 by groups of rows: the row
# sums of the regime (:func:`_fused_sums`, :func:`_short_sums`, :func:`_long_sums`), then their
# statistics into the histograms (:func:`_scatter_samples`); :func:`_commit_plain` adds the
# local buffers into the state at the end.
#
# Compile time: :func:`_count_plain_into` is a plain ``njit`` function, called by
# ``count_routed`` and ``count_plain`` rather than inlined into Numba's IR: ``inline="always"``
# copies a callee's IR at every call site (a copy whose cost grows with the square of the
# callee's size) and types and lowers each copy again; called, it is compiled once per
# signature, for both kernels, and linked. So are the paths that a valid batch of a few
# hundred rows never takes (:func:`_first_bad_row`, the flushes of :func:`_flush` inside the
# loops): one compiled copy instead of one inlined copy per call site. What every call runs
# (:func:`_scatter_samples`, :func:`_commit_plain`, the last flush) stays inlined: called, they
# measured slower on the training-loop batch. Constants passed to called functions are
# ``np.int64`` (a literal argument would compile a second, ``Literal[int]`` specialisation).
# The scratch is viewed as int64 words by an intrinsic (:func:`_int64_view`): Numba's
# ``ndarray.view`` compiles a subroutine of its own, the first time in a process. The counting
# passes of one regime (:func:`_fused_sums`, :func:`_long_sums`) stay inlined: called, the
# compile took as long (they depend on the input dtypes, so nothing is shared).
@njit(inline="always")
def _count_columns(
    y_true, y_pred, flat_t, flat_p, block, stop, plan, threshold, low, high, acc, cols, pending
):
    """Pass 1 over the rows ``[block, stop)`` of super-rows (no row of fused rows, whose column
    counts pass 2 makes): their column counts into the uint8 lanes ``acc`` (flushed into
    ``cols`` before a lane could pass 255) and their validity bits. Returns ``(bad, pending)``:
    the ORed validity bits (above 1 for a bad entry) and the super-rows in the lanes."""
    num_labels = y_true.shape[1]
    fused, k_rows, width, span, num_super, group = plan
    first_super = block // k_rows
    supers = 0 if fused else stop // k_rows - first_super
    bad = np.uint8(0)
    for q in range(0, supers, group):
        if pending > 253:
            _flush(acc, num_labels, width, span, pending + k_rows, cols)
            pending = 0
        s = first_super + q
        count = min(group, supers - q)
        s1, m1 = _take(s, 1, count)
        found = _count_super_rows(
            flat_t, flat_p, s * width, s1 * width, m1, width, threshold, low, high, acc
        )
        bad = np.uint8(bad | found)
        pending += count
    # the rows after the last whole super-row (last block only), into the lanes of the first
    # row of a super-row
    if pending > 255 - k_rows:
        _flush(acc, num_labels, width, span, pending + k_rows, cols)
        pending = 0
    for i in range(stop if fused else max(block, num_super * k_rows), stop):
        for j in range(num_labels):
            tk = y_true[i, j]
            pv = y_pred[i, j]
            pk = np.uint8(_native_positive(pv, threshold))
            bad = np.uint8(bad | np.uint8(_true_bits(tk) | _pred_valid(pv, low, high)))
            acc[j] = np.uint8(acc[j] + np.uint8(np.uint8(tk) & pk))
            acc[width + j] = np.uint8(acc[width + j] + np.uint8(tk))
            acc[2 * width + j] = np.uint8(acc[2 * width + j] + pk)
    return bad, pending


@njit(inline="always")
def _check_rest(y_true, y_pred, start, low, high):
    """``(code, validated)`` when the fused rows' test found a bad entry from row ``start``:
    the :func:`status_code` of the first bad row, or 0 and True when the exact check finds none
    (a -0.0 probability, which the test of the bits takes for a negative score): the rest of
    the batch is then known valid, and counted."""
    status, row = _first_bad_row(y_true, y_pred, start, low, high)
    if status != OK:
        return status_code(status, row), False
    return 0, True


@njit(inline="always")
def _fused_sums(
    y_true,
    y_pred,
    flat_t,
    flat_p,
    start,
    stop,
    vector_stop,
    fused_plan,
    threshold,
    low,
    high,
    acc,
    cols,
    sums,
    pending,
    validated,
):
    """Rows of 64 to 16,320 labels ``[start, stop)``, read once, two at a time: their column
    counts into the lanes ``acc`` (one uint8 per label, flushed into ``cols`` every 254 rows;
    when ``cols`` is the state, only once the rest of the batch is known valid), their row sums
    into ``sums`` (TP, AP, PP; from row ``start``) and their validity. Rows from
    ``vector_stop`` on are read alone (a masked last chunk: nothing read past the batch).
    Returns ``(code, pending, validated)``: the :func:`status_code` of the first bad row or 0,
    the rows in the lanes, and whether the rest of the batch was validated."""
    n, num_labels = y_true.shape
    chunks, rest, fused_chunk, width, direct_cols, commit, prefetch = fused_plan
    sum_tp, sum_ap, sum_pp = sums
    narrow = FUSED_CHUNK == 64 or fused_chunk != 64  # else rows of more than 255 chunks
    i = start
    while i < stop:
        if pending >= 254:
            if direct_cols and commit and not validated:
                # the lanes go into the state: the rest of the batch first
                status, row = _first_bad_row(y_true, y_pred, i, low, high)
                if status != OK:
                    return status_code(status, row), pending, validated
                validated = True
            _flush(acc, num_labels, width, num_labels, pending + 1, cols)
            pending = 0
        r = i - start
        if i + 1 < vector_stop:
            # two rows at a time: one lane store for both
            if narrow:
                tp0, ap0, pp0, tp1, ap1, pp1, bad_bits = _fused_row_pair(
                    flat_t,
                    flat_p,
                    i * num_labels,
                    (i + 1) * num_labels,
                    chunks,
                    rest,
                    threshold,
                    low,
                    high,
                    2 * num_labels if prefetch and i + 3 < n else 0,
                    acc,
                )
            else:
                tp0, ap0, pp0, tp1, ap1, pp1, bad_bits = _fused_row_pair_wide(
                    flat_t,
                    flat_p,
                    i * num_labels,
                    (i + 1) * num_labels,
                    chunks,
                    rest,
                    threshold,
                    low,
                    high,
                    0,
                    acc,
                )
            if bad_bits > 1 and not validated:
                code, validated = _check_rest(y_true, y_pred, i, low, high)
                if code:
                    return code, pending, validated
            sum_tp[r] = tp0
            sum_ap[r] = ap0
            sum_pp[r] = pp0
            sum_tp[r + 1] = tp1
            sum_ap[r + 1] = ap1
            sum_pp[r + 1] = pp1
            pending += 2
            i += 2
            continue
        # a row alone: its last chunk is a masked load (no read past the batch)
        if narrow:
            tps, aps, pps, bad_bits = _fused_row(
                flat_t, flat_p, i * num_labels, chunks, rest, threshold, low, high, acc
            )
        else:
            tps, aps, pps, bad_bits = _fused_row_wide(
                flat_t, flat_p, i * num_labels, chunks, rest, threshold, low, high, acc
            )
        if bad_bits > 1 and not validated:
            code, validated = _check_rest(y_true, y_pred, i, low, high)
            if code:
                return code, pending, validated
        sum_tp[r] = tps
        sum_ap[r] = aps
        sum_pp[r] = pps
        pending += 1
        i += 1
    return 0, pending, validated


@njit(inline="always")
def _short_sums(
    y_true, y_pred, flat_t, flat_p, start, stop, vector_stop, narrow_stop, threshold, sums
):
    """Row sums (TP, AP, PP into ``sums``, from row ``start``) of the validated rows ``[start,
    stop)`` of fewer than 64 labels: each row as 64-bit masks of one vector compare (32-entry
    ones for rows of at most 32 labels without AVX-512), the row's bits masked out of the
    chunk (it reads into the next row); the last rows, whose chunk would read past the batch,
    by masked loads with AVX-512, else by the chunk that ends where the row ends."""
    num_labels = y_true.shape[1]
    sum_tp, sum_ap, sum_pp = sums
    row_bits = (np.uint64(1) << np.uint64(num_labels)) - np.uint64(1)
    if FUSED_CHUNK != 64 and num_labels <= 32:
        for i in range(start, narrow_stop):
            mt = _positive_bits32(flat_t, i * num_labels, threshold) & row_bits
            mp = _positive_bits32(flat_p, i * num_labels, threshold) & row_bits
            r = i - start
            sum_tp[r] = _popcount(mt & mp)
            sum_ap[r] = _popcount(mt)
            sum_pp[r] = _popcount(mp)
    else:
        for i in range(start, vector_stop):
            mt = _positive_bits(flat_t, i * num_labels, threshold) & row_bits
            mp = _positive_bits(flat_p, i * num_labels, threshold) & row_bits
            r = i - start
            sum_tp[r] = _popcount(mt & mp)
            sum_ap[r] = _popcount(mt)
            sum_pp[r] = _popcount(mp)
    if FUSED_CHUNK == 64:
        # the last rows, whose chunk would read past the batch: masked loads
        for i in range(vector_stop, stop):
            mt = _positive_bits_of(flat_t, i * num_labels, threshold, num_labels) & row_bits
            mp = _positive_bits_of(flat_p, i * num_labels, threshold, num_labels) & row_bits
            r = i - start
            sum_tp[r] = _popcount(mt & mp)
            sum_ap[r] = _popcount(mt)
            sum_pp[r] = _popcount(mp)
        return
    # Without AVX-512 (which has no byte masked load: LLVM scalarises it into 64 tests and
    # branches), the last rows read the chunk that ends where the row ends and shift the row's
    # bits down; rows that end before the batch's first 32 or 64 entries count in a scalar loop.
    for i in range(narrow_stop if num_labels <= 32 else vector_stop, stop):
        end = (i + 1) * num_labels
        if num_labels <= 32 and end >= 32:
            shift = np.uint64(32 - num_labels)
            mt = _positive_bits32(flat_t, end - 32, threshold) >> shift
            mp = _positive_bits32(flat_p, end - 32, threshold) >> shift
        elif end >= CHUNK:
            shift = np.uint64(CHUNK - num_labels)
            mt = _positive_bits(flat_t, end - CHUNK, threshold) >> shift
            mp = _positive_bits(flat_p, end - CHUNK, threshold) >> shift
        else:
            mt = np.uint64(0)
            mp = np.uint64(0)
            for j in range(num_labels):
                bit = np.uint64(1) << np.uint64(j)
                if y_true[i, j] != 0:
                    mt |= bit
                if _native_positive(y_pred[i, j], threshold) != 0:
                    mp |= bit
        r = i - start
        sum_tp[r] = _popcount(mt & mp)
        sum_ap[r] = _popcount(mt)
        sum_pp[r] = _popcount(mp)


@njit(inline="always")
def _long_sums(y_true, y_pred, flat_t, flat_p, start, stop, vector_stop, threshold, sums):
    """Row sums (into ``sums``, from row ``start``) of the validated rows ``[start, stop)`` of
    more labels than fused rows take: popcounts of 64-entry masks, the last chunk of a row
    masked (it reads into the next row); the last rows, whose last chunk would read past the
    batch, in a scalar loop."""
    num_labels = y_true.shape[1]
    sum_tp, sum_ap, sum_pp = sums
    full = num_labels // CHUNK
    rest = num_labels - full * CHUNK
    row_bits = (np.uint64(1) << np.uint64(rest)) - np.uint64(1)
    for i in range(start, vector_stop):
        at = i * num_labels
        tps = np.int64(0)
        aps = np.int64(0)
        pps = np.int64(0)
        for c in range(full):
            mt = _positive_bits(flat_t, at + c * CHUNK, threshold)
            mp = _positive_bits(flat_p, at + c * CHUNK, threshold)
            tps += _popcount(mt & mp)
            aps += _popcount(mt)
            pps += _popcount(mp)
        if rest:
            mt = _positive_bits(flat_t, at + full * CHUNK, threshold) & row_bits
            mp = _positive_bits(flat_p, at + full * CHUNK, threshold) & row_bits
            tps += _popcount(mt & mp)
            aps += _popcount(mt)
            pps += _popcount(mp)
        r = i - start
        sum_tp[r] = tps
        sum_ap[r] = aps
        sum_pp[r] = pps
    for i in range(vector_stop, stop):
        tps = np.int64(0)
        aps = np.int64(0)
        pps = np.int64(0)
        for j in range(num_labels):
            tk = np.int64(y_true[i, j])
            pk = np.int64(_native_positive(y_pred[i, j], threshold))
            tps += tk & pk
            aps += tk
            pps += pk
        r = i - start
        sum_tp[r] = tps
        sum_ap[r] = aps
        sum_pp[r] = pps


@njit(inline="always")
def _scatter_samples(sums, rows, num_labels, layout, hist, packed):
    """The statistics of ``rows`` samples of row sums ``sums`` into the histograms ``hist``
    (``per_sample``'s layout); returns ``(exact, neither)``, the samples whose predicted set
    equals the true set and those with neither. ``packed`` (without AVX-512, rows of fewer than
    64 labels; else empty) holds zeroed cells for AP_s and PP_s (count and TP_s sum in one
    int64)."""
    sum_tp, sum_ap, sum_pp = sums
    exact = 0
    neither = 0
    for r in range(rows):
        tps = sum_tp[r]
        aps = sum_ap[r]
        pps = sum_pp[r]
        exact += (tps == aps) & (tps == pps)
        neither += (aps | pps) == 0
    card_true = layout[0]
    card_pred = layout[1]
    by_pred = layout[2]
    by_true = layout[3]
    by_union = layout[4]
    num_betas = (layout.shape[0] - 6) // 3
    f1_only = num_betas == 1 and layout[6] == 1 and layout[7] == 1
    by_f1 = layout[8]
    if packed.shape[0] and f1_only and rows > packed.shape[0]:
        # Groups of more rows than 2 (L + 1): the count and the TP_s sum of one AP_s (and of
        # one PP_s) share an int64 cell (the count in the low 32 bits, at most 256 a group;
        # the TP_s sum, at most 256 * 63, in the high ones), split into the histograms after
        # the group: four scatters a row instead of six.
        for r in range(rows):
            tps = sum_tp[r]
            aps = sum_ap[r]
            pps = sum_pp[r]
            cell = (tps << 32) + 1
            packed[np.uint64(aps)] += cell
            packed[np.uint64(num_labels + 1 + pps)] += cell
            hist[np.uint64(by_union + aps + pps - tps)] += tps
            hist[np.uint64(by_f1 + aps + pps)] += tps
        for k in range(num_labels + 1):
            cell_true = packed[k]
            cell_pred = packed[num_labels + 1 + k]
            hist[card_true + k] += cell_true & 0xFFFFFFFF
            hist[by_true + k] += cell_true >> 32
            hist[card_pred + k] += cell_pred & 0xFFFFFFFF
            hist[by_pred + k] += cell_pred >> 32
        packed[:] = 0
        return exact, neither
    for r in range(rows):
        tps = sum_tp[r]
        aps = sum_ap[r]
        pps = sum_pp[r]
        union = aps + pps - tps
        hist[np.uint64(card_true + aps)] += 1
        hist[np.uint64(card_pred + pps)] += 1
        hist[np.uint64(by_pred + pps)] += tps
        hist[np.uint64(by_true + aps)] += tps
        hist[np.uint64(by_union + union)] += tps
        if f1_only:
            hist[np.uint64(by_f1 + aps + pps)] += tps
        else:
            for b in range(num_betas):
                key = layout[8 + 3 * b] + layout[6 + 3 * b] * aps + layout[7 + 3 * b] * pps
                hist[np.uint64(key)] += tps
    return exact, neither


@njit(inline="always")
def _commit_plain(n, exact, neither, labels, per_sample, cols, hist, direct_cols, direct_hist):
    """The batch's sample counts into ``hist``; then the local column counts ``cols`` and
    histograms ``hist`` into the state, unless they are the state's own arrays (``direct_*``)."""
    hist[ROWS] += n
    hist[JUDGED] += n
    hist[EXACT] += exact
    hist[NEITHER] += neither
    hist[COUNT] += n
    if not direct_cols:
        flat_labels = _flat(labels)
        for k in range(flat_labels.shape[0]):
            flat_labels[k] += cols[k]
    if not direct_hist:
        for k in range(per_sample.shape[0]):
            per_sample[k] += hist[k]


@njit(nogil=True)
def _count_plain_into(
    y_true, y_pred, threshold, low, high, layout, labels, per_sample, mode, buffer
):
    """:func:`count_plain` (scores must lie in ``[low, high]``), with ``buffer`` a uint8
    scratch of at least ``_lane_bytes(L) + 8 (3 min(N, _SUM_ROWS) + _packed_cells(L)) + 64``
    bytes (the lanes of pass 1, the row sums and packed histograms of pass 2). The local
    buffers of a batch larger than one block are allocated here."""
    n = y_true.shape[0]
    num_labels = y_true.shape[1]
    if mode == 2 and not (
        num_labels == labels.shape[1]
        and _plain_matrix(y_true, n, num_labels)
        and _plain_matrix(y_pred, n, num_labels)
    ):
        return NOT_PLAIN
    commit = mode != 0
    # ---- the regime of the row width
    # Rows of 64 to 16,320 labels are read once, two rows at a time (:func:`_fused_sums`;
    # without AVX-512, rows of more than 8,160 labels in 64-entry chunks): column counts into
    # uint8 lanes (one per label, flushed every 254 rows), row sums in registers. Narrower rows
    # are read twice: pass 1 over super-rows (:func:`_count_columns`), pass 2 row by row
    # (:func:`_short_sums`); wider ones too (:func:`_long_sums`).
    fused = CHUNK <= num_labels <= 255 * CHUNK
    fused_chunk = _fused_chunk(num_labels)
    k_rows = _super_rows(num_labels)
    width = k_rows * num_labels
    span = width
    num_super = n // k_rows
    chunks = (num_labels + CHUNK - 1) // CHUNK
    if fused:
        k_rows = 1
        span = num_labels
        chunks = (num_labels + fused_chunk - 1) // fused_chunk
        width = chunks * fused_chunk
        num_super = 0
    # Without AVX-512, the row pairs of long rows of bytes prefetch the next pair's (see
    # _prefetched_chunks) when the batch is large enough to come from L3.
    prefetch = (
        fused_chunk != 64
        and fused
        and y_true.itemsize == 1
        and y_pred.itemsize == 1
        and num_labels >= _PREFETCH_LABELS
        and n * num_labels >= _PREFETCH_ENTRIES
    )
    # ---- blocks
    # A batch that stays in cache is one block: pass 1 (column counts and validity) over all
    # of it, then pass 2 (the per-sample statistics) straight into the state. A larger batch
    # is read in blocks of whole super-rows, at most _BLOCK_ROWS rows and about _BLOCK_BYTES,
    # both passes over a block while it is in cache (so that it is read from memory once),
    # into local buffers (O(L)) added into the state once every block was found valid.
    row_bytes = num_labels * (y_true.itemsize + y_pred.itemsize)
    cached = n * row_bytes <= _CACHED_BYTES
    if cached:
        block_rows = max(n, 1)
    else:
        block_rows = min(_BLOCK_ROWS, max(1, _BLOCK_BYTES // row_bytes))
        block_rows = k_rows * max(1, block_rows // k_rows)
    # Two super-rows per lane store for a batch in cache; one for a batch read from memory,
    # where two interleaved streams per input are read more slowly.
    group = 2 if cached else 1
    single = n <= block_rows
    # The column counts go straight into the state when the uint8 lanes are flushed only once
    # the whole batch was found valid; the per-sample statistics when pass 2 runs after that.
    direct_cols = not commit or (single and num_super + k_rows <= 255)
    direct_hist = not commit or single
    if fused:
        # pass 2 commits group by group: straight into the state for one group only (the
        # remaining rows are validated before a flush of the lanes)
        direct_cols = direct_hist = not commit or (single and n <= _SUM_ROWS)
    # ---- buffers
    # One allocation (each costs about 0.1 µs of a 2 µs call on 256×20): the uint8 lanes (TP,
    # AP, PP; flushed every 255 super-rows or 254 rows), the row sums of a group of rows, then
    # the int64 local column counts and histograms, as needed.
    lanes = 3 * width
    local_cols = 0 if direct_cols else 3 * num_labels
    local_hist = 0 if direct_hist else per_sample.shape[0]
    start = (lanes + 7) // 8 * 8
    sum_rows = min(n, _SUM_ROWS)
    # the lanes from a 64-byte boundary (each 64-lane access stays within one cache line)
    buffer = buffer[(-buffer.ctypes.data) & 63 :]
    acc = buffer[:lanes]
    acc[:] = 0
    all_wide = _int64_view(buffer[start:])
    sums = (
        all_wide[:sum_rows],
        all_wide[sum_rows : 2 * sum_rows],
        all_wide[2 * sum_rows : 3 * sum_rows],
    )
    packed = all_wide[3 * sum_rows : 3 * sum_rows + _packed_cells(num_labels)]
    packed[:] = 0
    if local_cols + local_hist:
        wide = np.zeros(local_cols + local_hist, np.int64)
    else:
        wide = all_wide[:0]
    cols = _flat(labels) if direct_cols else wide[:local_cols]
    hist = per_sample if direct_hist else wide[local_cols : local_cols + local_hist]
    flat_t = _flat(y_true)
    flat_p = _flat(y_pred)
    # ---- the rows whose chunks may be read whole (the last chunk of a row reads into the next
    # row, never past the batch)
    full_chunks = (chunks - 1) * (fused_chunk if fused else CHUNK)
    safe = n
    if fused and num_labels % fused_chunk:
        # the row pairs read whole chunks: the second row's last one must end in the batch
        safe = min(n, max(0, (n * num_labels - width) // num_labels + 1))
    elif num_labels % CHUNK and not fused:
        full = num_labels // CHUNK
        safe = min(n, max(0, (n * num_labels - full * CHUNK - CHUNK) // num_labels + 1))
    # rows of at most 32 labels read in 32-entry chunks (without AVX-512)
    safe32 = n
    if FUSED_CHUNK != 64 and num_labels <= 32:
        safe32 = min(n, max(0, (n * num_labels - 32) // num_labels + 1))
    plan = (fused, k_rows, width, span, num_super, group)
    fused_plan = (
        chunks,
        num_labels - full_chunks,
        fused_chunk,
        width,
        direct_cols,
        commit,
        prefetch,
    )
    exact = 0
    neither = 0
    pending = 0
    validated = False
    for block in range(0, n, block_rows):
        stop = min(n, block + block_rows)
        # ---- pass 1: column counts and validity bits, super-row by super-row
        bad, pending = _count_columns(
            y_true,
            y_pred,
            flat_t,
            flat_p,
            block,
            stop,
            plan,
            threshold,
            low,
            high,
            acc,
            cols,
            pending,
        )
        # Validate before the row sums: those of bad entries could index past the histograms.
        if bad > 1:
            status, row = _first_bad_row(y_true, y_pred, np.int64(0), low, high)
            return status_code(status, row)
        # ---- pass 2, by groups of _SUM_ROWS rows: each row's TP/AP/PP, then the rows'
        # statistics into the histograms (two tight loops rather than one: measured faster)
        for group_start in range(block, stop, _SUM_ROWS):
            group_stop = min(stop, group_start + _SUM_ROWS)
            vector_stop = max(group_start, min(group_stop, safe))
            if fused:
                code, pending, validated = _fused_sums(
                    y_true,
                    y_pred,
                    flat_t,
                    flat_p,
                    group_start,
                    group_stop,
                    vector_stop,
                    fused_plan,
                    threshold,
                    low,
                    high,
                    acc,
                    cols,
                    sums,
                    pending,
                    validated,
                )
                if code:
                    return code
            elif num_labels < CHUNK:
                narrow_stop = max(group_start, min(group_stop, safe32))
                _short_sums(
                    y_true,
                    y_pred,
                    flat_t,
                    flat_p,
                    group_start,
                    group_stop,
                    vector_stop,
                    narrow_stop,
                    threshold,
                    sums,
                )
            else:
                _long_sums(
                    y_true,
                    y_pred,
                    flat_t,
                    flat_p,
                    group_start,
                    group_stop,
                    vector_stop,
                    threshold,
                    sums,
                )
            group_exact, group_neither = _scatter_samples(
                sums, group_stop - group_start, num_labels, layout, hist, packed
            )
            exact += group_exact
            neither += group_neither
    _flush_last(acc, num_labels, width, span, pending + k_rows, cols)
    _commit_plain(n, exact, neither, labels, per_sample, cols, hist, direct_cols, direct_hist)
    return OK
