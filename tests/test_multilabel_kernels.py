"""The one-call kernel of unweighted multilabel batches (``count_plain``) at every shape that
changes its code path: super-rows and the rows after them, 64-entry chunks with a masked last
chunk, the last rows that take a scalar loop, more than 255 super-rows (the uint8 lanes are
flushed), more than 255 labels, the row ranges counted on several threads; against
scikit-learn and against the general (weighted) kernel, with errors found at every place.

Every test here uses int64 or bool indicators and float64/float32 scores, the dtypes that the
rest of the suite compiles anyway (each new Numba specialisation costs seconds of a cold run).
"""

from __future__ import annotations

import itertools
import pickle
import re
import sys

import numpy as np
import pytest
import sklearn.metrics as skm

import metricstream
import metricstream.multilabel.accumulator as module
from metricstream.multilabel import MultilabelAccumulator

from .marks import slow_beyond

# Rows are summed in masked chunks of 32 entries up to L = 32, of 64 up to 63, else of 128:
# L = 20 (super-rows of 16 rows), 1, 40, 65, 256 (two whole chunks), 64, 255, 1000 (super-rows
# of 2 rows, 8 chunks), 32, 33, 3, 127, 128.
WIDTHS = slow_beyond(
    [20, 1, 40, 65, 256, 64, 255, 1000, 32, 33, 3, 127, 128], 5, ids=lambda w: f"L{w}"
)


def _batch(seed: int, n: int, num_labels: int, density: float = 0.3):
    rng = np.random.default_rng(seed)
    y_true = (rng.random((n, num_labels)) < density).astype(np.int64)
    y_pred = (rng.random((n, num_labels)) < density).astype(np.int64)
    y_pred[: n // 4] = y_true[: n // 4]  # exact matches
    y_true[n // 2 : n // 2 + 2] = 0  # empty rows
    y_pred[n // 2 + 1 : n // 2 + 3] = 0
    return y_true, y_pred


def _by_general_kernel(num_labels: int, y_true, y_pred):
    """The same counts through the weighted kernel (weights of 1): equal except the count of
    weighted rows."""
    acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0))
    acc.update(y_true, y_pred, np.ones(len(y_true), dtype=np.int64))
    state = acc.state_arrays()
    state["per_sample"][4] = 0  # WEIGHTED_ROWS
    return state


def _equal_states(a, b):
    return all(np.array_equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("num_labels", WIDTHS)
@pytest.mark.parametrize("n", [0, 1, 37, 300])
def test_plain_kernel_equals_general_kernel_and_sklearn(num_labels, n):
    y_true, y_pred = _batch(num_labels + n, n, num_labels)
    acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), _by_general_kernel(num_labels, y_true, y_pred))
    if n > 1 and num_labels > 1:
        np.testing.assert_array_equal(
            acc.multilabel_confusion_matrix(), skm.multilabel_confusion_matrix(y_true, y_pred)
        )
        for average in ("samples", "macro", "micro"):
            assert acc.f1(average, zero_division=0) == pytest.approx(
                skm.f1_score(y_true, y_pred, average=average, zero_division=0), abs=1e-12
            )
        assert acc.jaccard("samples", zero_division=1) == pytest.approx(
            skm.jaccard_score(y_true, y_pred, average="samples", zero_division=1), abs=1e-12
        )
        assert acc.subset_accuracy() == skm.accuracy_score(y_true, y_pred)


@pytest.mark.parametrize("num_labels", [20, 1000])
def test_scores_bool_and_split_batches(num_labels):
    y_true, y_pred = _batch(5, 300, num_labels)
    reference = MultilabelAccumulator(num_labels).update(y_true, y_pred)
    scores = np.where(y_pred == 1, 0.75, 0.25)
    assert MultilabelAccumulator(num_labels).update(y_true, scores) == reference
    assert MultilabelAccumulator(num_labels).update(y_true, scores.astype(np.float32)) == reference
    split = MultilabelAccumulator(num_labels)
    for lo, hi in ((0, 1), (1, 18), (18, 300)):
        split.update(y_true[lo:hi].astype(bool), y_pred[lo:hi])
    assert split == reference


def test_more_than_255_super_rows_flush_the_uint8_lanes():
    # L = 20: super-rows of 16 rows; 5000 rows are 312 super-rows and 8 rows after them, and
    # every entry of the first label is 1 (a uint8 lane would wrap at 256).
    y_true, y_pred = _batch(7, 5000, 20, density=0.6)
    y_true[:, 0] = 1
    y_pred[:, 0] = 1
    acc = MultilabelAccumulator(20).update(y_true, y_pred)
    np.testing.assert_array_equal(
        acc.multilabel_confusion_matrix(), skm.multilabel_confusion_matrix(y_true, y_pred)
    )
    assert _equal_states(
        MultilabelAccumulator(20, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred).state_arrays(),
        _by_general_kernel(20, y_true, y_pred),
    )


@pytest.mark.parametrize("num_labels", [20, 65])
def test_update_scratch_is_reused_across_batches_failures_and_copies(num_labels):
    # update's one-call path counts in a scratch held by the accumulator: batches of other
    # sizes after one another (stale lanes and row sums), a refused batch between them, and a
    # copy and a pickled accumulator (each with its own scratch) count as the general kernel.
    y_true, y_pred = _batch(11, 300, num_labels)
    acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0))
    bounds = [0, 1, 38, 39, 300]
    for lo, hi in itertools.pairwise(bounds):
        if lo == 38:
            bad = y_true[:hi].copy()
            bad[-1, -1] = 2
            before = acc.state_arrays()
            with pytest.raises(ValueError, match="holds 2 at row 38"):
                acc.update(bad, y_pred[:hi])
            assert _equal_states(acc.state_arrays(), before)
        acc.update(y_true[lo:hi], y_pred[lo:hi])
    assert _equal_states(acc.state_arrays(), _by_general_kernel(num_labels, y_true, y_pred))
    twice = _by_general_kernel(num_labels, np.vstack([y_true] * 2), np.vstack([y_pred] * 2))
    for other in (acc.copy(), pickle.loads(pickle.dumps(acc))):
        assert _equal_states(other.update(y_true, y_pred).state_arrays(), twice)
    assert _equal_states(acc.state_arrays(), _by_general_kernel(num_labels, y_true, y_pred))


# Where a bad entry sits: a super-row, the rows after the last super-row, the last row (whose
# row sums take the scalar loop), the first entry.
PLACES = [(0, 0), (100, 7), (297, 19), (299, 19), (299, 0)]


@pytest.mark.parametrize("row, column", PLACES, ids=lambda x: str(x))
def test_bad_entries_are_found_anywhere_and_change_nothing(row, column):
    y_true, y_pred = _batch(9, 300, 20)
    acc = MultilabelAccumulator(20).update(y_true, y_pred)
    before = acc.state_arrays()
    bad = y_true.copy()
    bad[row, column] = 2
    with pytest.raises(
        ValueError,
        match=rf"`y_true` holds 2 at row {row}, label {column}, but a label indicator holds "
        r"0 or 1\. Nothing was counted\.",
    ):
        acc.update(bad, y_pred)
    bad = y_pred.copy()
    bad[row, column] = -1
    with pytest.raises(ValueError, match=rf"`y_pred` holds -1 at row {row}, label {column}"):
        acc.update(y_true, bad)
    scores = np.where(y_pred == 1, 0.9, 0.1).astype(np.float32)
    scores[row, column] = np.nan
    with pytest.raises(ValueError, match=rf"`y_pred` holds NaN at row {row}, label {column}"):
        acc.update(y_true, scores)
    # both bad: the truth of the first bad row is reported
    bad_true, bad_pred = y_true.copy(), y_pred.copy()
    bad_true[row, column], bad_pred[row, column] = 5, 5
    with pytest.raises(ValueError, match=rf"`y_true` holds 5 at row {row}, label {column}"):
        acc.update(bad_true, bad_pred)
    assert _equal_states(acc.state_arrays(), before)


# Rows of 64 labels or more are read once, two at a time: a bad entry in the first or the
# second row of a pair, in a row read alone, in the last rows (scalar loop), and past the
# first flush of the uint8 lanes (255 rows; for 256 rows the rest is checked before it).
WIDE_PLACES = [(0, 0), (1, 99), (254, 50), (255, 99), (299, 3), (510, 0), (599, 99)]


@pytest.mark.parametrize("n", [256, 600])
def test_rows_read_once_equal_the_general_kernel_and_find_bad_entries(n):
    y_true, y_pred = _batch(17, n, 100, density=0.6)
    y_true[:, 0] = 1  # a uint8 lane would wrap at 256
    y_pred[:, 0] = 1
    acc = MultilabelAccumulator(100, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), _by_general_kernel(100, y_true, y_pred))
    scores = np.where(y_pred == 1, 0.75, 0.25).astype(np.float32)
    assert MultilabelAccumulator(100, betas=(0.5, 1.0, 2.0)).update(y_true, scores) == acc
    before = acc.state_arrays()
    for row, column in WIDE_PLACES:
        if row >= n:
            continue
        bad = y_true.copy()
        bad[row, column] = 3
        with pytest.raises(ValueError, match=rf"`y_true` holds 3 at row {row}, label {column}"):
            acc.update(bad, y_pred)
        bad = scores.copy()
        bad[row, column] = np.nan
        with pytest.raises(ValueError, match=rf"`y_pred` holds NaN at row {row}, label {column}"):
            acc.update(y_true, bad)
        assert _equal_states(acc.state_arrays(), before)


def _total(array):
    return sum(int(v) for v in array.reshape(-1))


def _with_total(acc, name, total):
    """``acc`` with the first cell of ``state[name]`` raised so that the array sums to
    ``total``."""
    with acc.exclusive_state() as arrays:
        arrays[name].reshape(-1)[0] += total - _total(arrays[name])
    return acc


def test_fast_path_refuses_overflow_and_keeps_other_layouts():
    # The one-call path counts a batch only when no int64 total can pass 2**63 - 1 (load's
    # bound); near the limit the general path counts it exactly, or refuses it.
    y_true, y_pred = _batch(11, 40, 4)
    added = _total(MultilabelAccumulator(4).update(y_true, y_pred).state_arrays()["per_sample"])
    acc = _with_total(MultilabelAccumulator(4).update(y_true, y_pred), "per_sample", 2**63 - added)
    before = acc.state_arrays()
    with pytest.raises(ValueError, match=r"state 'per_sample' past 2\*\*63 - 1"):
        acc.update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), before)
    acc.update(y_true[:39], y_pred[:39])  # fits
    assert MultilabelAccumulator.from_bytes(acc.to_bytes()) == acc


@pytest.mark.parametrize(
    "layout",
    [
        "fortran",
        "strided",
        # read-only and unaligned arrays compile their own kernels: in the slow run only
        pytest.param("read-only", marks=pytest.mark.slow),
        pytest.param("unaligned", marks=pytest.mark.slow),
    ],
)
def test_other_memory_layouts_take_the_general_path(layout):
    y_true, y_pred = _batch(11, 40, 4)
    reference = MultilabelAccumulator(4).update(y_true, y_pred)
    if layout == "fortran":
        y_true = np.asfortranarray(y_true)
    elif layout == "strided":
        wide = np.zeros((40, 8), dtype=np.int64)
        wide[:, ::2] = y_pred
        y_pred = wide[:, ::2]
    elif layout == "read-only":
        y_true = y_true.copy()
        y_true.flags.writeable = False
    else:  # float64 scores one byte past an aligned address
        memory = np.zeros(y_pred.size * 8 + 1, dtype=np.uint8)[1:].view(np.float64)
        scores = memory.reshape(y_pred.shape)
        scores[...] = np.where(y_pred == 1, 0.75, 0.25)
        assert not scores.flags.aligned
        y_pred = scores
    assert MultilabelAccumulator(4).update(y_true, y_pred) == reference


@pytest.fixture
def two_threads(monkeypatch):
    """Row ranges on two threads from 2 × 64 rows on (the size limits lowered)."""
    monkeypatch.setattr(module, "_PARALLEL_MIN_ENTRIES", 1)
    monkeypatch.setattr(module, "_PARALLEL_MIN_ROWS", 64)
    threads = metricstream.get_num_threads()
    metricstream.set_num_threads(2)
    yield
    metricstream.set_num_threads(threads)


@pytest.mark.parametrize("num_labels", [20, 65])
def test_row_ranges_on_threads_equal_one_thread(two_threads, num_labels):
    y_true, y_pred = _batch(13, 301, num_labels)
    acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), _by_general_kernel(num_labels, y_true, y_pred))
    before = acc.state_arrays()
    for row in (3, 200):  # in the first and in the second range
        bad = y_true.copy()
        bad[row, 1] = 7
        bad[250, 0] = 9
        with pytest.raises(ValueError, match=rf"`y_true` holds 7 at row {row}, label 1"):
            acc.update(bad, y_pred)
        assert _equal_states(acc.state_arrays(), before)
    _with_total(acc, "labels", 2**63 - 2)
    before = acc.state_arrays()
    with pytest.raises(ValueError, match=r"state 'labels' past 2\*\*63 - 1"):
        acc.update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), before)


def test_group_takes_label_sets():
    from metricstream import AccumulatorGroup
    from metricstream.multilabel import LabelSets

    group = AccumulatorGroup(
        plain=MultilabelAccumulator(3), cooccurring=MultilabelAccumulator(3, cooccurrence=True)
    )
    true, pred = LabelSets.from_lists([[0], [1, 2]]), LabelSets.from_lists([[0], [2]])
    group.update(true, pred)
    assert group["plain"] == MultilabelAccumulator(3).update(true, pred)
    before = group["plain"].state_arrays()
    with pytest.raises(ValueError, match="`y_true` lists label 0 twice in sample 0"):
        group.update(LabelSets.from_lists([[0, 0]]), LabelSets.from_lists([[1]]))
    assert _equal_states(group["plain"].state_arrays(), before)


# ---- the chunk widths of the host CPU: 64-entry chunks with AVX-512, else 32 (AVX2 and the
# rest), whose rows alone and last rows read the chunk that ends where the row ends instead of
# a masked load, and whose row pairs of long byte rows prefetch the next pair's lines.
ROW_COUNTS = [1, 2, 3, 4, 5, 31, 32, 33, 255, 256, 257]


# Every width in CI; by default the widths around each vector-lane and word boundary.
EDGE_WIDTHS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130]


def test_every_width_up_to_130_at_block_edges_equals_the_general_kernel(slow_run):
    rng = np.random.default_rng(23)
    for num_labels in range(1, 131) if slow_run else EDGE_WIDTHS:
        for n in ROW_COUNTS:
            y_true = rng.random((n, num_labels)) < 0.4
            y_pred = rng.random((n, num_labels)) < 0.4
            y_pred[: n // 3] = y_true[: n // 3]
            acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred)
            general = _by_general_kernel(num_labels, y_true.astype(np.int64), y_pred)
            assert _equal_states(acc.state_arrays(), general), (num_labels, n)
            scores = np.where(y_pred, 0.5, 0.25).astype(np.float32)
            thresholded = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0), threshold=0.5)
            assert thresholded.update(y_true, scores) == acc, (num_labels, n)


@pytest.mark.parametrize("num_labels", [255, 256, 257, 511, 512, 1000, 8160, 8161, 16320, 16321])
@pytest.mark.parametrize("n", [1, 3, 130, 257])
def test_wide_rows_at_block_edges_equal_the_general_kernel(num_labels, n):
    # bool rows of 512 labels or more in batches of 2^17 entries or more are prefetched
    rng = np.random.default_rng(num_labels + n)
    y_true = rng.random((n, num_labels)) < 0.3
    y_pred = rng.random((n, num_labels)) < 0.3
    y_true[:, -1] = y_pred[:, -1] = True
    acc = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0)).update(y_true, y_pred)
    assert _equal_states(acc.state_arrays(), _by_general_kernel(num_labels, y_true, y_pred))
    scores = np.where(y_pred, 0.5, -0.5).astype(np.float32)
    fused = MultilabelAccumulator(num_labels, betas=(0.5, 1.0, 2.0), logits=True)
    assert _equal_states(fused.update(y_true, scores).state_arrays(), acc.state_arrays())


def _guarded(nbytes: int, dtype):
    """A writable array of ``nbytes`` bytes ending exactly at a page boundary followed by a
    page that cannot be read (a read past the array's end crashes the process), and the
    mapping that holds it."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    size = (nbytes + page - 1) // page * page + page
    memory = mmap.mmap(-1, size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + size - page, page, 0) == 0  # PROT_NONE
    start = size - page - nbytes
    array = np.frombuffer(memory, dtype=np.uint8, count=nbytes, offset=start).view(dtype)
    return array, memory


@pytest.mark.skipif(sys.platform not in ("linux", "darwin"), reason="mprotect of POSIX")
@pytest.mark.parametrize("num_labels", [1, 7, 20, 32, 33, 63, 64, 65, 100, 1000])
def test_batches_ending_at_a_page_boundary_are_not_read_past(num_labels):
    rng = np.random.default_rng(num_labels)
    for n in (1, 2, 3, 37, 256):
        y_true = rng.random((n, num_labels)) < 0.4
        y_pred = rng.random((n, num_labels)) < 0.4
        reference = MultilabelAccumulator(num_labels).update(y_true, y_pred)
        for dtype, values in ((np.bool_, y_pred), (np.float32, np.where(y_pred, 1.0, -1.0))):
            truth, truth_memory = _guarded(y_true.nbytes, np.bool_)
            pred, pred_memory = _guarded(values.size * np.dtype(dtype).itemsize, dtype)
            truth = truth.reshape(n, num_labels)
            pred = pred.reshape(n, num_labels)
            truth[...] = y_true
            pred[...] = values
            acc = MultilabelAccumulator(num_labels, logits=dtype is np.float32)
            counted = acc.update(truth, pred).state_arrays()
            assert _equal_states(counted, reference.state_arrays()), (n, dtype)
            del truth, pred
            truth_memory.close()
            pred_memory.close()


@pytest.mark.parametrize("num_labels", [20, 33, 100, 1000])
def test_bad_entries_in_the_last_chunk_of_the_last_rows_change_nothing(num_labels):
    y_true, y_pred = _batch(29, 257, num_labels)
    y_true, y_pred = y_true.astype(bool), y_pred.astype(bool)
    acc = MultilabelAccumulator(num_labels).update(y_true, y_pred)
    before = acc.state_arrays()
    scores = np.where(y_pred, 0.75, 0.25).astype(np.float32)
    for row in (255, 256):
        for column in (num_labels - 1, max(0, num_labels - 17)):
            bad = y_true.view(np.uint8).copy()
            bad[row, column] = 2
            with pytest.raises(ValueError, match=rf"`y_true` holds 2 at row {row}, label {column}"):
                acc.update(bad, y_pred)
            bad = scores.copy()
            bad[row, column] = np.nan
            with pytest.raises(
                ValueError, match=rf"`y_pred` holds NaN at row {row}, label {column}"
            ):
                acc.update(y_true, bad)
            assert _equal_states(acc.state_arrays(), before)


def test_short_rows_with_f1_only_equal_the_general_kernel():
    # without AVX-512, groups of more than 2 (L + 1) short rows scatter the AP_s and PP_s
    # histograms into packed cells when F1 is the only F-beta (the default)
    rng = np.random.default_rng(31)
    for num_labels in (1, 2, 7, 20, 32, 33, 63):
        for n in (1, 3, 2 * num_labels + 2, 2 * num_labels + 3, 256, 257, 700):
            y_true = rng.random((n, num_labels)) < 0.5
            y_pred = rng.random((n, num_labels)) < 0.5
            y_pred[: n // 3] = y_true[: n // 3]
            acc = MultilabelAccumulator(num_labels).update(y_true, y_pred)
            general = MultilabelAccumulator(num_labels)
            general.update(y_true, y_pred, np.ones(n, dtype=np.int64))
            expected = general.state_arrays()
            expected["per_sample"][4] = 0  # WEIGHTED_ROWS
            assert _equal_states(acc.state_arrays(), expected), (num_labels, n)


def test_chunk_width_follows_the_cpu_features_numba_compiles_for(monkeypatch):
    from numba.core import config

    from metricstream.multilabel import _kernels as kernels

    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+avx512f,+avx512bw", raising=False)
    assert kernels._target_has_avx512bw()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,-avx512bw", raising=False)
    assert not kernels._target_has_avx512bw()
    assert kernels.FUSED_CHUNK in (32, 64)


# ---- probabilities are checked to lie in [0, 1] by the counting loops' own validity test (the
# NaN test of logits): rows of fewer than 64 labels (super-rows), fused rows, rows wider than
# fused rows take.
@pytest.mark.parametrize("num_labels", [20, 65, 16321])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_probabilities_outside_zero_one_are_refused_at_every_place(num_labels, dtype):
    rng = np.random.default_rng(41)
    n = 5 if num_labels > 1000 else 70
    y_true = (rng.random((n, num_labels)) < 0.3).astype(np.int64)
    scores = rng.random((n, num_labels)).astype(dtype)
    acc = MultilabelAccumulator(num_labels).update(y_true, scores)
    before = acc.state_arrays()
    tiny = np.finfo(dtype).smallest_subnormal
    outside = [-0.5, 1.5, np.nextafter(dtype(1), dtype(2)), -tiny, np.inf, -np.inf, np.nan]
    places = [(0, 0), (n - 1, num_labels - 1), (n // 2, num_labels // 2), (1, 63 % num_labels)]
    for value in outside:
        for row, column in places:
            bad = scores.copy()
            bad[row, column] = value
            shown = "NaN" if np.isnan(value) else repr(bad[row, column].item())
            with pytest.raises(
                ValueError, match=rf"`y_pred` holds {re.escape(shown)} at row {row}, label {column}"
            ):
                acc.update(y_true, bad)
            assert _equal_states(acc.state_arrays(), before)
    # the bounds themselves are probabilities (and -0.0 is 0)
    edges = scores.copy()
    edges[0, :3] = [0.0, -0.0, 1.0]
    expected = MultilabelAccumulator(num_labels).update(y_true, (edges >= 0.5).astype(np.int64))
    assert MultilabelAccumulator(num_labels).update(y_true, edges) == expected
    # logits: any value but NaN
    logits = MultilabelAccumulator(num_labels, logits=True)
    wide = np.where(scores < 0.5, -np.inf, 1e30).astype(dtype)
    logits.update(y_true, wide)
    reference = MultilabelAccumulator(num_labels).update(y_true, (scores >= 0.5).astype(np.int64))
    assert _equal_states(logits.state_arrays(), reference.state_arrays())
    wide[n - 1, num_labels - 1] = np.nan
    with pytest.raises(ValueError, match=rf"holds NaN at row {n - 1}, label {num_labels - 1}"):
        logits.update(y_true, wide)
