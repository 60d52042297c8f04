"""Numba kernels of the segmentation accumulator: one pass over whole images.

For each image of a batch the kernel counts the image's own K×K matrix (in a few interleaved
int32 copies, so that runs of equal pixels do not wait on each other's increments), adds it into
the batch's dataset-level matrix, and turns its per-class intersection, truth and prediction
counts into the per-image values (IoU, Dice, accuracy per class; class-averaged values per
image) that are added to running sums. Nothing of O(pixels) is allocated and no Python runs per
image.

Per-image values in [0, 1] are summed as fixed-point integers, so that any split of a stream
into batches and any merge order give bit-identical state: a value ``v`` is stored as
``q = rint(v * 2**FIXED_BITS)``, split into a high and a low word of ``HALF_BITS`` bits each
(both int64 counts, summed exactly). The rounding error of one image is at most
``2**-(FIXED_BITS + 1)`` (1.8e-15), far below any comparison this library makes.

The kernels validate as they count and return ``(status, image, pixel)`` of the first bad
element; callers count into private temporaries and commit only after every image succeeded,
so a failed batch changes nothing.

One kernel serves labels, float32 scores and per-image matrices, and it is compiled for two
label dtypes only: ``uint8`` whenever K <= 255 (the accumulator narrows other label dtypes),
``int64`` above (other score dtypes are reduced by numpy's argmax first).
"""

from __future__ import annotations

import numpy as np
from numba import njit

OK = 0
BAD_TRUE = 1
BAD_PRED = 2
BAD_SCORE = 4

FIXED_BITS = 48
HALF_BITS = 24
_SCALE = float(2**FIXED_BITS)
_LOW_MASK = (1 << HALF_BITS) - 1

# Where the predictions come from (``mode`` of ``count_images``).
LABELS, CHANNELS_FIRST, CHANNELS_LAST, MATRICES = 0, 1, 2, 3

# Rows of the per-class count state.
BOTH_ABSENT, PRED_ONLY, TRUTH_ONLY, PRESENT = 0, 1, 2, 3
# Words of a fixed-point sum state: sum (high, low), sum of squares (high, low).
SUM_HIGH, SUM_LOW, SQUARE_HIGH, SQUARE_LOW = 0, 1, 2, 3
# Per-image (class-averaged) values, one slot each, for every variant (with / without the
# background class).
MACRO_IOU_SKIP_BOTH = 0
MACRO_DICE_SKIP_BOTH = 1
MACRO_IOU_SKIP_TRUTH = 2
MACRO_DICE_SKIP_TRUTH = 3
MACRO_IOU_ONE = 4
MACRO_DICE_ONE = 5
MACRO_ACCURACY = 6
MICRO_IOU = 7
MICRO_DICE = 8
MICRO_ACCURACY = 9
WEIGHTED_IOU = 10
WEIGHTED_DICE = 11
NUM_SLOTS = 12
# Extra per-variant image counters after the slots' counts.
PRED_ONLY_IMAGES = NUM_SLOTS  # no truth pixel of the variant's classes, some predicted
BOTH_ABSENT_IMAGES = NUM_SLOTS + 1  # some class of the variant absent from truth and prediction
NUM_IMAGE_COUNTS = NUM_SLOTS + 2

# Pixels are read in blocks of this many: validated by a branch-free max-reduction first, then
# counted from the same (L1-resident) block.
BLOCK = 1024
# Fold the int32 copies into the int64 image matrix before any counter could pass 2**31.
_FLUSH = 1 << 30


# Compile time: ``count_images`` is compiled once per label dtype; what does not depend on it
# (:func:`_per_image` and its :func:`_slot`/:func:`_add_fixed`, :func:`_fold`, the argmax of
# scores :func:`_argmax_block`) is a plain ``njit`` function, called rather than inlined
# (``inline="always"`` copies a callee's IR at every call site and types and lowers each copy
# again), so it is compiled once per process and linked; they run once per image or per block
# of pixels, not per pixel. So is the search for a bad label (:func:`_first_bad_label`), which a
# valid batch never runs. Constants passed to called functions are ``np.int64`` (a literal
# argument would compile a ``Literal[int]`` specialisation per value), and arrays are copied by
# loops (an array assigned into a slice compiles Numba's broadcasting setitem). The per-pixel
# loops, :func:`_count_cells` included, stay inlined.
@njit
def _add_fixed(sums, row, column, value):
    """Add ``value`` (in [0, 1]) and its square to the fixed-point words of ``column``."""
    q = np.int64(np.rint(value * _SCALE))
    sums[row + SUM_HIGH, column] += q >> HALF_BITS
    sums[row + SUM_LOW, column] += q & _LOW_MASK
    q = np.int64(np.rint(value * value * _SCALE))
    sums[row + SQUARE_HIGH, column] += q >> HALF_BITS
    sums[row + SQUARE_LOW, column] += q & _LOW_MASK


@njit
def _slot(image_counts, image_sums, variant, slot, defined, value):
    if defined:
        image_counts[variant, slot] += 1
        q = np.int64(np.rint(value * _SCALE))
        image_sums[variant, SUM_HIGH, slot] += q >> HALF_BITS
        image_sums[variant, SUM_LOW, slot] += q & _LOW_MASK
        q = np.int64(np.rint(value * value * _SCALE))
        image_sums[variant, SQUARE_HIGH, slot] += q >> HALF_BITS
        image_sums[variant, SQUARE_LOW, slot] += q & _LOW_MASK


@njit(nogil=True)
def _fold(copies, num_copies, stride, image_matrix):
    """Add the int32 copies into the int64 image matrix and zero them."""
    cells = stride - 1
    for k in range(num_copies):
        part = copies[k * stride : k * stride + cells]
        for cell in range(cells):
            image_matrix[cell] += part[cell]
            part[cell] = 0


@njit(cache=True, nogil=True)
def _per_image(
    image_matrix,
    num_classes,
    background,
    matrix,
    class_counts,
    iou_sums,
    dice_sums,
    accuracy_sums,
    image_counts,
    image_sums,
    images,
    inter,
    truth,
    pred,
):
    """Everything one image adds, from its K×K matrix (zeroed afterwards).

    Not inlined: its argument types do not depend on the label dtype, so both label kernels
    share one compiled copy (compile time on a cold machine).
    """
    k = num_classes
    flat = matrix.reshape(-1)
    for c in range(k):
        truth[c] = 0
        pred[c] = 0
    valid = np.int64(0)
    for t in range(k):
        row = image_matrix[t * k : t * k + k]
        out = flat[t * k : t * k + k]
        inter[t] = row[t]
        total = np.int64(0)
        for p in range(k):
            n = row[p]
            out[p] += n
            total += n
            pred[p] += n
            row[p] = 0
        truth[t] = total
        valid += total
    images[0] += 1
    if valid == 0:
        images[1] += 1
    # Per class: which absent case, and the values where the class is in truth and prediction.
    for c in range(k):
        i = inter[c]
        t = truth[c]
        p = pred[c]
        if t == 0:
            if p == 0:
                class_counts[BOTH_ABSENT, c] += 1
            else:
                class_counts[PRED_ONLY, c] += 1
        elif p == 0:
            class_counts[TRUTH_ONLY, c] += 1
        else:
            class_counts[PRESENT, c] += 1
            _add_fixed(iou_sums, np.int64(0), c, i / (t + p - i))
            _add_fixed(dice_sums, np.int64(0), c, 2.0 * i / (t + p))
            _add_fixed(accuracy_sums, np.int64(0), c, i / t)
    # Per image, class-averaged: variant 0 holds every class, variant 1 all but the background.
    for variant in range(2):
        included = 0
        n_both = 0
        n_truth = 0
        iou_both = 0.0
        dice_both = 0.0
        iou_truth = 0.0
        dice_truth = 0.0
        iou_one = 0.0
        dice_one = 0.0
        accuracy = 0.0
        sum_i = np.int64(0)
        sum_t = np.int64(0)
        sum_p = np.int64(0)
        weighted_iou = 0.0
        weighted_dice = 0.0
        any_both_absent = False
        for c in range(k):
            if variant == 1 and c == background:
                continue
            included += 1
            i = inter[c]
            t = truth[c]
            p = pred[c]
            sum_i += i
            sum_t += t
            sum_p += p
            if t + p == 0:
                any_both_absent = True
                iou_one += 1.0
                dice_one += 1.0
                continue
            iou = i / (t + p - i)
            dice = 2.0 * i / (t + p)
            n_both += 1
            iou_both += iou
            dice_both += dice
            iou_one += iou
            dice_one += dice
            if t > 0:
                n_truth += 1
                iou_truth += iou
                dice_truth += dice
                accuracy += i / t
                weighted_iou += iou * t
                weighted_dice += dice * t
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_IOU_SKIP_BOTH),
            n_both > 0,
            iou_both / max(n_both, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_DICE_SKIP_BOTH),
            n_both > 0,
            dice_both / max(n_both, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_IOU_SKIP_TRUTH),
            n_truth > 0,
            iou_truth / max(n_truth, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_DICE_SKIP_TRUTH),
            n_truth > 0,
            dice_truth / max(n_truth, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_IOU_ONE),
            included > 0,
            iou_one / max(included, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_DICE_ONE),
            included > 0,
            dice_one / max(included, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MACRO_ACCURACY),
            n_truth > 0,
            accuracy / max(n_truth, 1),
        )
        union = sum_t + sum_p - sum_i
        _slot(
            image_counts, image_sums, variant, np.int64(MICRO_IOU), union > 0, sum_i / max(union, 1)
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MICRO_DICE),
            sum_t + sum_p > 0,
            2.0 * sum_i / max(sum_t + sum_p, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(MICRO_ACCURACY),
            sum_t > 0,
            sum_i / max(sum_t, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(WEIGHTED_IOU),
            sum_t > 0,
            weighted_iou / max(sum_t, 1),
        )
        _slot(
            image_counts,
            image_sums,
            variant,
            np.int64(WEIGHTED_DICE),
            sum_t > 0,
            weighted_dice / max(sum_t, 1),
        )
        if sum_t == 0 and sum_p > 0:
            image_counts[variant, PRED_ONLY_IMAGES] += 1
        if any_both_absent:
            image_counts[variant, BOTH_ABSENT_IMAGES] += 1


@njit(inline="always")
def _count_cells(cells, n, copies, num_copies, stride):
    """Increment ``copies[(j % num_copies) * stride + cells[j]]`` for the ``n`` buffered cells."""
    j = 0
    if num_copies == 4:
        while j + 4 <= n:
            copies[cells[j]] += 1
            copies[stride + cells[j + 1]] += 1
            copies[2 * stride + cells[j + 2]] += 1
            copies[3 * stride + cells[j + 3]] += 1
            j += 4
    elif num_copies == 2:
        while j + 2 <= n:
            copies[cells[j]] += 1
            copies[stride + cells[j + 1]] += 1
            j += 2
    while j < n:
        copies[cells[j]] += 1
        j += 1


@njit(nogil=True)
def _argmax_block(scores, b, lo, n, k, channels_last, best, arg):
    """The argmax over the ``k`` classes of pixels ``lo..lo+n-1`` of image ``b`` into ``arg``;
    returns the first of those pixels holding a NaN score, or -1."""
    nan = False
    image_scores = scores[b]
    if channels_last:
        for j in range(n):
            row = image_scores[lo + j]
            top = row[0]
            at = 0
            nan |= top != top
            for c in range(1, k):
                v = row[c]
                nan |= v != v
                if v > top:
                    top = v
                    at = c
            arg[j] = at
    else:
        first = image_scores[0, lo : lo + n]
        for j in range(n):
            v = first[j]
            nan |= v != v
            best[j] = v
            arg[j] = 0
        for c in range(1, k):
            row = image_scores[c, lo : lo + n]
            for j in range(n):
                v = row[j]
                nan |= v != v
                if v > best[j]:
                    best[j] = v
                    arg[j] = c
    if nan:
        for j in range(n):
            for c in range(k):
                v = scores[b, lo + j, c] if channels_last else scores[b, c, lo + j]
                if v != v:
                    return lo + j
    return -1


@njit
def _first_bad_label(y_true, y_pred, b, lo, n, has_ignore, ignore, use_scores, limit):
    """``(status, pixel)`` of the first label of pixels ``lo..lo+n-1`` of image ``b`` outside
    ``[0, limit)``, or ``(OK, -1)``."""
    tb = y_true[b, lo : lo + n]
    for j in range(n):
        t = tb[j]
        if has_ignore and t == ignore:
            continue
        if np.uint64(t) >= limit:
            return BAD_TRUE, lo + j
        if not use_scores and np.uint64(y_pred[b, lo + j]) >= limit:
            return BAD_PRED, lo + j
    return OK, -1


@njit(cache=True, nogil=True)
def count_images(
    y_true,
    y_pred,
    scores,
    matrices,
    mode,
    has_ignore,
    ignore,
    background,
    start,
    stop,
    matrix,
    class_counts,
    iou_sums,
    dice_sums,
    accuracy_sums,
    image_counts,
    image_sums,
    images,
):
    """Count images ``start..stop-1`` of a batch into the given (zeroed, private) state arrays.

    ``y_true`` is ``(B, P)`` labels; predictions are ``y_pred`` ``(B, P)`` labels (``mode``
    LABELS), or the argmax of ``scores``, ``(B, K, P)`` (CHANNELS_FIRST) or ``(B, P, K)``
    (CHANNELS_LAST); the unused one is an empty placeholder. With MATRICES, the images are
    given by their own K×K matrices instead, ``matrices`` ``(B, K, K)`` int64 (rows true; the
    tiles of an image counted elsewhere). ``matrix`` is K×K (rows true).
    Returns ``(status, image, pixel)``: OK, or the first bad true label, predicted label or NaN
    score, in stream order.
    """
    k = matrix.shape[0]
    limit = np.uint64(k)
    cells = k * k
    stride = cells + 1
    skip = np.uint64(cells)
    num_copies = 4 if cells <= 1024 else (2 if cells <= 32768 else 1)
    copies = np.zeros(num_copies * stride, dtype=np.int32)
    image_matrix = np.zeros(cells, dtype=np.int64)
    inter = np.empty(k, dtype=np.int64)
    truth = np.empty(k, dtype=np.int64)
    pred = np.empty(k, dtype=np.int64)
    buffer = np.empty(BLOCK, dtype=np.uint64)
    best = np.empty(BLOCK, dtype=np.float32)
    arg = np.empty(BLOCK, dtype=np.int64)
    use_scores = mode != LABELS
    channels_last = mode == CHANNELS_LAST
    pixels = y_true.shape[1]
    if mode == MATRICES:
        # One kernel for both entry points: a second function would compile its own copy of
        # `_per_image` on a cold machine.
        for b in range(start, stop):
            image = matrices[b]
            for t in range(k):
                for p in range(k):
                    image_matrix[t * k + p] = image[t, p]
            _per_image(
                image_matrix,
                k,
                background,
                matrix,
                class_counts,
                iou_sums,
                dice_sums,
                accuracy_sums,
                image_counts,
                image_sums,
                images,
                inter,
                truth,
                pred,
            )
        return OK, 0, 0
    for b in range(start, stop):
        labels = y_true[b]
        since_fold = 0
        for lo in range(0, pixels, BLOCK):
            hi = min(lo + BLOCK, pixels)
            n = hi - lo
            tb = labels[lo:hi]
            worst = np.uint64(0)
            if use_scores:
                bad = _argmax_block(scores, b, lo, n, k, channels_last, best, arg)
                if bad >= 0:
                    return BAD_SCORE, b, bad
                for j in range(n):
                    t = tb[j]
                    kt = np.uint64(t)
                    if has_ignore and t == ignore:
                        buffer[j] = skip
                    else:
                        worst = max(worst, kt)
                        buffer[j] = kt * limit + np.uint64(arg[j])
            else:
                pb = y_pred[b, lo:hi]
                if has_ignore:
                    for j in range(n):
                        t = tb[j]
                        kt = np.uint64(t)
                        kp = np.uint64(pb[j])
                        ignored = t == ignore
                        worst = max(worst, max(np.uint64(0) if ignored else kt, kp))
                        buffer[j] = skip if ignored else kt * limit + kp
                else:
                    for j in range(n):
                        kt = np.uint64(tb[j])
                        kp = np.uint64(pb[j])
                        worst = max(worst, max(kt, kp))
                        buffer[j] = kt * limit + kp
            if worst >= limit:
                status, pixel = _first_bad_label(
                    y_true, y_pred, b, lo, n, has_ignore, ignore, use_scores, limit
                )
                if status != OK:
                    return status, b, pixel
            _count_cells(buffer, n, copies, num_copies, stride)
            since_fold += n
            if since_fold > _FLUSH:
                _fold(copies, num_copies, stride, image_matrix)
                since_fold = 0
        _fold(copies, num_copies, stride, image_matrix)
        _per_image(
            image_matrix,
            k,
            background,
            matrix,
            class_counts,
            iou_sums,
            dice_sums,
            accuracy_sums,
            image_counts,
            image_sums,
            images,
            inter,
            truth,
            pred,
        )
    return OK, 0, 0
