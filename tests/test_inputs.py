"""Every input form `update` accepts gives the same matrix as plain int64 numpy arrays."""

from __future__ import annotations

import numpy as np
import pytest

from metricstream import ConfusionAccumulator

RNG = np.random.default_rng(3)
Y_TRUE = RNG.integers(0, 6, size=(3, 7, 5))
Y_PRED = RNG.integers(0, 6, size=(3, 7, 5))
REFERENCE = ConfusionAccumulator(6).update(Y_TRUE.ravel(), Y_PRED.ravel()).matrix.copy()

DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


# Every (y_pred, y_true) dtype pair is its own kernel specialisation, 2-3 s of compilation
# each on a cold cache, and the kernel reads each side by its own dtype. So CI pairs every truth
# dtype with int64 predictions, and each other prediction dtype (uint8, float32) with truth of
# its own dtype, int64 and the other one: every dtype read on each side it can be on. The
# default run keeps the pairs the rest of the suite compiles anyway (one signed and one unsigned
# type, each paired with itself; float labels are checked with float64 elsewhere, and
# half-precision truth, read as float32, by tests/test_training_loop_inputs.py).
DEFAULT_DTYPE_PAIRS = {
    ("int64", "int64"),
    ("uint8", "uint8"),
}
DTYPE_PAIRS = [(np.int64, true) for true in DTYPES] + [
    (pred, true) for pred in (np.uint8, np.float32) for true in (np.uint8, np.int64, np.float32)
]


@pytest.mark.parametrize(
    ("pred_dtype", "true_dtype"),
    [
        pytest.param(
            pred,
            true,
            id=f"{np.dtype(pred).name}-{np.dtype(true).name}",
            marks=[]
            if (np.dtype(pred).name, np.dtype(true).name) in DEFAULT_DTYPE_PAIRS
            else [pytest.mark.slow],
        )
        for pred, true in DTYPE_PAIRS
    ],
)
def test_any_numeric_dtype(true_dtype, pred_dtype):
    acc = ConfusionAccumulator(6).update(Y_TRUE.astype(true_dtype), Y_PRED.astype(pred_dtype))
    np.testing.assert_array_equal(acc.matrix, REFERENCE)


def test_bool_labels():
    # both boolean: read as uint8, the specialisation the uint8 tests compile anyway
    acc = ConfusionAccumulator(2).update(np.array([True, False, True]), np.array([1, 0, 0], bool))
    np.testing.assert_array_equal(acc.matrix, [[1, 0], [1, 1]])


@pytest.mark.parametrize(
    "transform",
    [
        lambda a: a.tolist(),
        lambda a: np.asfortranarray(a),
        lambda a: a.astype(a.dtype.newbyteorder(">")),
        lambda a: _readonly(a),
    ],
    ids=["nested-list", "fortran-order", "big-endian", "read-only"],
)
def test_array_forms(transform):
    acc = ConfusionAccumulator(6).update(transform(Y_TRUE), transform(Y_PRED))
    np.testing.assert_array_equal(acc.matrix, REFERENCE)


def test_mixed_memory_orders_pair_elements_correctly():
    acc = ConfusionAccumulator(6).update(np.asfortranarray(Y_TRUE), Y_PRED)
    np.testing.assert_array_equal(acc.matrix, REFERENCE)


def test_strided_views():
    big_true = np.repeat(Y_TRUE.ravel(), 2)
    big_pred = np.repeat(Y_PRED.ravel(), 2)
    acc = ConfusionAccumulator(6).update(big_true[::2], big_pred[1::2])
    np.testing.assert_array_equal(acc.matrix, REFERENCE)
    columns = np.stack([Y_TRUE.ravel(), Y_PRED.ravel()], axis=1)
    acc = ConfusionAccumulator(6).update(columns[:, 0], columns[:, 1])
    np.testing.assert_array_equal(acc.matrix, REFERENCE)
    acc = ConfusionAccumulator(6).update(Y_TRUE.transpose(2, 0, 1), Y_PRED.transpose(2, 0, 1))
    np.testing.assert_array_equal(acc.matrix, REFERENCE)


def _readonly(array):
    array = array.copy()
    array.flags.writeable = False
    return array


class ArrayOnly:
    """An object exposing only ``__array__`` (like many array libraries)."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array


class DLPackOnly:
    """An object exposing only the DLPack protocol (like a CPU tensor of another framework)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class GPUTensor:
    """Mimics a device tensor: DLPack refuses to export it to the CPU, and no ``__array__``."""

    def __dlpack__(self, **kwargs):
        raise BufferError("cannot export a CUDA tensor to the CPU")

    def __dlpack_device__(self):
        return (2, 0)


def test_array_protocols():
    for wrap in (ArrayOnly, DLPackOnly):
        acc = ConfusionAccumulator(6).update(wrap(Y_TRUE), wrap(Y_PRED))
        np.testing.assert_array_equal(acc.matrix, REFERENCE)


def test_device_tensor_gets_a_clear_error():
    acc = ConfusionAccumulator(6)
    with pytest.raises(TypeError, match=r"`y_true` could not be read through DLPack .*\.cpu\(\)"):
        acc.update(GPUTensor(), Y_PRED)


def test_torch_tensors_without_importing_torch_ourselves():
    torch = pytest.importorskip("torch")
    y_true = torch.from_numpy(Y_TRUE)
    logits = torch.randn(3, 6, 7, 5, requires_grad=True)
    acc = ConfusionAccumulator(6).update(y_true, torch.from_numpy(Y_PRED))
    np.testing.assert_array_equal(acc.matrix, REFERENCE)
    fused = ConfusionAccumulator(6).update(y_true, logits)
    expected = ConfusionAccumulator(6).update(Y_TRUE, logits.detach().argmax(1).numpy())
    np.testing.assert_array_equal(fused.matrix, expected.matrix)


def test_scalars_and_empty_batches():
    acc = ConfusionAccumulator(3).update(2, 1)
    np.testing.assert_array_equal(acc.matrix, [[0, 0, 0], [0, 0, 0], [0, 1, 0]])
    acc.update([], [])
    acc.update(np.zeros((0, 4), int), np.zeros((0, 4), int))
    acc.update(np.zeros((0,), int), np.zeros((0, 3)))  # empty scores
    assert acc.num_samples == 1


def test_an_empty_batch_calls_no_kernel():
    from metricstream.confusion import _kernels

    before = set(_kernels.count_labels.signatures)
    acc = ConfusionAccumulator(3, weighted=True).update([2], [1])
    empty = np.zeros(0, np.int16)
    empty.flags.writeable = False  # as dask hands over an empty chunk
    acc.update(empty, empty, np.zeros(0, np.float32))
    acc.update(empty, empty)
    np.testing.assert_array_equal(acc.matrix, [[0, 0, 0], [0, 0, 0], [0, 1, 0]])
    int16 = [s for s in set(_kernels.count_labels.signatures) - before if "int16" in str(s)]
    assert not int16  # nothing was compiled to count nothing
    with pytest.raises(ValueError, match="shape"):  # shapes are still checked
        acc.update(empty, np.zeros(1, np.int16))


@pytest.mark.slow  # int16 scores: a kernel specialisation of their own (8 s to compile, cold)
def test_integer_scores_and_ties():
    scores = np.array([[1, 5, 5], [7, 7, 0], [-3, -2, -1]], dtype=np.int16)
    acc = ConfusionAccumulator(3).update([1, 0, 2], scores)
    np.testing.assert_array_equal(acc.matrix, np.eye(3, dtype=int))


def test_scores_with_weights_and_ignore_index():
    y_true = np.array([[0, 255], [2, 1]], np.uint8)
    scores = np.zeros((2, 3, 2), np.float32)
    scores[0, 0, 0] = scores[0, 1, 1] = scores[1, 2, 0] = scores[1, 0, 1] = 1
    weights = np.array([[2.0, 9.0], [0.5, 1.5]])
    acc = ConfusionAccumulator(3, ignore_index=255, weighted=True).update(y_true, scores, weights)
    np.testing.assert_array_equal(acc.matrix, [[2, 0, 0], [1.5, 0, 0], [0, 0, 0.5]])


def test_ignore_index_inside_the_label_range():
    acc = ConfusionAccumulator(3, ignore_index=0).update([0, 1, 2, 0], [2, 1, 0, 0])
    np.testing.assert_array_equal(acc.matrix, [[0, 0, 0], [0, 1, 0], [1, 0, 0]])


def test_segmentation_masks_with_void():
    y_true = RNG.integers(0, 4, size=(2, 16, 16)).astype(np.uint8)
    y_true[:, :2] = 255
    y_pred = RNG.integers(0, 4, size=(2, 16, 16)).astype(np.uint8)
    acc = ConfusionAccumulator(4, ignore_index=255).update(y_true, y_pred)
    keep = y_true != 255
    expected = np.zeros((4, 4), np.int64)
    np.add.at(expected, (y_true[keep], y_pred[keep]), 1)
    np.testing.assert_array_equal(acc.matrix, expected)
    assert acc.num_samples == keep.sum()


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def test_kernel_view_shares_read_only_memory_as_writable():
    from metricstream._inputs import kernel_view

    writable = np.arange(12.0)
    assert kernel_view(writable) is writable
    base = np.arange(40, dtype=np.int32).reshape(5, 8)
    source = _read_only(base[1:, ::3])  # an offset and strides
    view = kernel_view(source)
    assert view.flags.writeable and not source.flags.writeable
    assert (view.shape, view.strides, view.dtype) == (source.shape, source.strides, source.dtype)
    assert view.__array_interface__["data"][0] == source.__array_interface__["data"][0]
    assert np.array_equal(view, source)
    del source, base  # the view keeps the memory alive
    assert view.tolist() == (np.arange(40, dtype=np.int32).reshape(5, 8)[1:, ::3]).tolist()
    empty = kernel_view(_read_only(np.zeros((0, 3))))
    assert empty.shape == (0, 3) and empty.flags.writeable


def _read_only_signatures() -> set[tuple[str, str]]:
    """Every compiled kernel specialisation that takes a read-only array (other than the score
    family's small-rows kernel, compiled once for any layout on purpose)."""
    import importlib

    from numba import types
    from numba.core.registry import CPUDispatcher

    found = set()
    for family in ("confusion", "scores", "multilabel", "regression", "segmentation"):
        module = importlib.import_module(f"metricstream.{family}._kernels")
        for name, kernel in vars(module).items():
            if not isinstance(kernel, CPUDispatcher) or name.startswith("count_small_rows"):
                continue
            for signature in kernel.signatures:
                if any(isinstance(t, types.Array) and not t.mutable for t in signature):
                    found.add((f"{family}.{name}", str(signature)))
    return found


def test_read_only_inputs_compile_no_kernel_of_their_own():
    """Arrow columns, memory-mapped files and frombuffer data are read-only arrays: each family
    counts them with the kernels of writable arrays (equal states), compiling nothing else."""
    import metricstream as ms

    before = _read_only_signatures()
    rng = np.random.default_rng(3)
    for n in (40, 3000):  # the small-batch paths and the general ones
        labels = rng.integers(0, 3, n)
        scores = rng.random((n, 3)).astype(np.float32)
        scores /= scores.sum(axis=1, keepdims=True)
        pairs = [
            (ms.ConfusionAccumulator(3), (labels, labels[::-1].copy())),
            (ms.ConfusionAccumulator(3), (labels, scores)),
            (ms.ScoreAccumulator("multiclass", 3), (labels, scores)),
            (ms.ScoreAccumulator("binary"), (labels % 2, scores[:, 0].copy())),
            (ms.MultilabelAccumulator(3), (labels[:, None] == [0, 1, 2], scores)),
            (ms.RegressionAccumulator(), (scores[:, 0].astype(np.float64), scores[:, 1] * 2.0)),
            (ms.SegmentationAccumulator(3), (labels.reshape(-1, 10), labels.reshape(-1, 10))),
        ]
        for acc, arrays in pairs:
            reference = acc.copy().update(*arrays)
            acc.update(*(_read_only(np.ascontiguousarray(a)) for a in arrays))
            assert acc == reference, type(acc).__name__
    assert _read_only_signatures() == before
