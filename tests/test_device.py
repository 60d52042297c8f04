"""The device path (metricstream.device), proven on the CPU with the forced switch.

Every state is compared bit for bit with the Numba path on the same tensors; bad values must
leave exactly the valid batches counted; compiled steps must trace without a graph break.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import metricstream as ms  # noqa: E402
from metricstream import device  # noqa: E402
from metricstream._core import devices as _devices  # noqa: E402
from tests.device_switches import cpu_path, device_path  # noqa: E402
from tests.marks import slow_beyond  # noqa: E402

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.uint8]


@pytest.fixture(autouse=True)
def _forced() -> Iterator[None]:
    with device_path(True):
        yield


def twins(make, batches) -> tuple[ms.base.Accumulator, ms.base.Accumulator]:
    """(device-path accumulator, Numba-path accumulator) fed the same batches."""
    on_device, reference = make(), make()
    for batch in batches:
        on_device.update(*batch)
        with cpu_path():
            reference.update(*batch)
    return on_device, reference


def assert_same_state(a, b) -> None:
    mine, theirs = a.state_arrays(), b.state_arrays()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype
        np.testing.assert_array_equal(mine[name], theirs[name], strict=True)
    assert a == b


def labels(rng, shape, k, dtype=torch.int64):
    return torch.from_numpy(rng.integers(0, k, shape)).to(dtype)


# ---------------------------------------------------------------------- bit-identical states
# Each dtype is a kernel specialisation of the Numba reference (seconds of CPU on a cold cache):
# the default run takes the common ones, the full run every one.
@pytest.mark.parametrize(
    "dtype",
    slow_beyond(
        [torch.int64, torch.uint8, torch.int32, torch.int16, torch.float32, torch.float64], 2, str
    ),
)
def test_labels_every_dtype(dtype) -> None:
    rng = np.random.default_rng(1)
    k = 5
    batches = [(labels(rng, n, k, dtype), labels(rng, n, k, dtype)) for n in (0, 1, 7, 300)]
    a, b = twins(lambda: ms.ConfusionAccumulator(k), batches)
    assert a._device is not None and a.num_samples == 308
    assert_same_state(a, b)


@pytest.mark.parametrize(
    "dtype", slow_beyond([torch.float32, torch.bfloat16, torch.float64, torch.float16], 2, str)
)
def test_logits_and_probabilities_every_dtype(dtype) -> None:
    rng = np.random.default_rng(2)
    k = 4
    batches = []
    for n in (1, 33, 256):
        logits = torch.from_numpy(rng.normal(size=(n, k))).to(dtype)
        logits[: n // 3, 1] = logits[: n // 3, 2]  # ties: the first maximum wins
        if n > 2:
            logits[1] = 0.0
            logits[1, 3] = -0.0  # +0 and -0 are equal
        batches.append((labels(rng, n, k), logits))
        batches.append((labels(rng, n, k), torch.softmax(logits.float(), 1).to(dtype)))
    a, b = twins(lambda: ms.ConfusionAccumulator(k), batches)
    assert_same_state(a, b)


@pytest.mark.parametrize("class_axis", [1, -1])
def test_segmentation_scores_with_ignore_index(class_axis) -> None:
    rng = np.random.default_rng(3)
    k = 3
    batches = []
    for _ in range(3):
        true = labels(rng, (2, 5, 6), k + 1, torch.uint8)
        true[true == k] = 255
        shape = (2, k, 5, 6) if class_axis == 1 else (2, 5, 6, k)
        batches.append((true, torch.from_numpy(rng.normal(size=shape)).to(torch.float32)))
    a, b = twins(
        lambda: ms.ConfusionAccumulator(k, ignore_index=255, class_axis=class_axis), batches
    )
    assert a.num_samples < 180
    assert_same_state(a, b)


@pytest.mark.parametrize("ignore", [0, -1, 2**40])
def test_ignore_index_labels_and_float_labels(ignore) -> None:
    rng = np.random.default_rng(4)
    k = 3
    batches = []
    for dtype in (torch.int64, torch.float64, torch.int32):
        true = labels(rng, 50, k)
        true[::4] = ignore
        pred = labels(rng, 50, k)
        if ignore != 0:
            pred[::4] = 7  # never checked: the sample is ignored
        if dtype == torch.int32 and ignore == 2**40:  # no int32 equals it
            true[::4], pred[::4] = 0, 0
        batches.append((true.to(dtype), pred.to(dtype)))
    a, b = twins(lambda: ms.ConfusionAccumulator(k, ignore_index=ignore), batches)
    assert_same_state(a, b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_threshold_binary_scores(dtype) -> None:
    rng = np.random.default_rng(5)
    batches = []
    for shape, extra in (((40,), ()), ((40,), (1,)), ((4, 10), ())):
        scores = torch.from_numpy(rng.uniform(0, 1, shape + extra)).to(dtype)
        scores.view(-1)[:5] = 0.3  # on the threshold: positive
        batches.append((labels(rng, shape, 2), scores))
    batches.append((labels(rng, 9, 2), labels(rng, 9, 2)))  # integer y_pred: labels
    a, b = twins(lambda: ms.ConfusionAccumulator(2, threshold=0.3), batches)
    assert_same_state(a, b)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.int64,
        torch.float64,
        pytest.param(torch.int32, marks=pytest.mark.slow),  # each dtype: a Numba compile
        pytest.param(torch.float32, marks=pytest.mark.slow),
        pytest.param(torch.bfloat16, marks=pytest.mark.slow),
    ],
)
def test_whole_weights(dtype) -> None:
    rng = np.random.default_rng(6)
    k = 4
    batches = []
    for n in (64, 3):
        w = torch.from_numpy(rng.integers(0, 5, n)).to(dtype)
        batches.append((labels(rng, n, k), torch.randn(n, k, dtype=torch.float32), w))
        batches.append((labels(rng, n, k), labels(rng, n, k), w))
    a, b = twins(lambda: ms.ConfusionAccumulator(k), batches)
    assert_same_state(a, b)


def test_fractional_weights() -> None:
    rng = np.random.default_rng(6)
    k = 4
    # Dyadic values, so that any order of addition gives the same sums.
    frac = [
        (labels(rng, 64, k), labels(rng, 64, k), torch.from_numpy(rng.integers(0, 16, 64) / 8))
        for _ in range(4)
    ]
    a, b = twins(lambda: ms.ConfusionAccumulator(k, weighted=True), frac)
    assert a.matrix.dtype == np.float64
    assert_same_state(a, b)


def test_any_split_and_merge_equal_one_batch() -> None:
    rng = np.random.default_rng(7)
    k = 6
    true, pred = labels(rng, 500, k), torch.randn(500, k)
    whole = ms.ConfusionAccumulator(k).update(true, pred)
    parts = [ms.ConfusionAccumulator(k) for _ in range(3)]
    for i, cut in enumerate(np.array_split(np.arange(500), 3)):
        parts[i].update(true[cut], pred[cut])
    merged = parts[2].merge(parts[0]).merge(parts[1])
    assert_same_state(merged, whole)
    with cpu_path():
        host = ms.ConfusionAccumulator(k).update(true, pred)
    assert_same_state(host + ms.ConfusionAccumulator(k).update(true, pred), whole + whole)


def test_state_stays_on_device_until_read() -> None:
    acc = ms.ConfusionAccumulator(3)
    acc.update(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 1]))
    assert acc._device.dirty
    assert int(acc._arrays["matrix"].sum()) == 0  # not on the host yet
    assert acc.accuracy() == pytest.approx(2 / 3)
    assert not acc._device.dirty and int(acc._arrays["matrix"].sum()) == 3
    state = acc.state_dict()
    restored = ms.ConfusionAccumulator.from_state_dict(state)
    assert_same_state(restored, acc)
    acc.update(torch.tensor([2]), torch.tensor([2]))
    assert ms.ConfusionAccumulator.from_bytes(acc.to_bytes()).num_samples == 4
    acc.reset()
    assert acc.num_samples == 0
    acc.update(torch.tensor([1]), torch.tensor([1]))
    acc.reset()
    assert acc.num_samples == 0 and not acc._device.dirty


# ---------------------------------------------------------------------- bad input
def _bad_cases():
    k = 3
    return [
        ("label", (torch.tensor([0, 1, 5, 2]), torch.tensor([0, 1, 2, 0])), "label 5", None),
        ("negative", (torch.tensor([0, -2]), torch.tensor([0, 1])), "label -2", None),
        ("pred", (torch.tensor([0, 1]), torch.tensor([1, 3])), "`y_pred` holds label 3", None),
        ("fraction", (torch.tensor([0.0, 1.5]), torch.tensor([0, 1])), "label 1.5", None),
        ("nan label", (torch.tensor([float("nan")]), torch.tensor([0])), "label nan", None),
        (
            "nan score",
            (torch.tensor([0, 1]), torch.tensor([[0.1, 0.2, 0.3], [0.1, float("nan"), 0.0]])),
            "holds nan",
            None,
        ),
        (
            "weight",
            (torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1.0, -1.0])),
            "`weights` holds -1.0",
            None,
        ),
        (
            "fractional weight",
            (torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1.0, 0.5])),
            "`weights` holds 0.5",
            None,
        ),
    ], k


@pytest.mark.parametrize("case", range(8))
def test_bad_batch_is_left_out_and_raised_at_the_next_read(case) -> None:
    cases, k = _bad_cases()
    _, bad, words, _ = cases[case]
    rng = np.random.default_rng(8)
    good = [(labels(rng, 20, k), labels(rng, 20, k)) for _ in range(3)]
    acc = ms.ConfusionAccumulator(k)
    acc.update(*good[0]).update(*good[1])
    acc.update(*bad)  # no error yet: the device is not waited for
    acc.update(*bad)
    acc.update(*good[2])
    with pytest.raises(ValueError, match="2 bad values were seen") as raised:
        acc.state_arrays()
    message = str(raised.value)
    assert words in message and "device batch 2" in message
    with cpu_path():
        with pytest.raises(ValueError):  # the CPU path refuses the same batch
            ms.ConfusionAccumulator(k).update(*bad)
        valid = ms.ConfusionAccumulator(k)
        for batch in good:
            valid.update(*batch)
    assert_same_state(acc, valid)  # the error is cleared: this read succeeds


def test_error_names_the_first_bad_value_and_counts_all() -> None:
    acc = ms.ConfusionAccumulator(4, ignore_index=-1)
    acc.update(torch.tensor([0, -1, 1]), torch.tensor([0, 9, 1]))  # ignored: fine
    acc.update(torch.tensor([0, 7, 8, 1]), torch.tensor([0, 1, 1, 1]))
    acc.update(torch.tensor([6]), torch.tensor([0]))
    with pytest.raises(ValueError) as raised:
        acc.state_arrays()
    message = str(raised.value)
    assert message.startswith("3 bad values were seen on cpu")
    assert "`y_true` holds label 7 at flat position 1 of device batch 1" in message
    assert "or equal `ignore_index` (-1)" in message
    assert acc.num_samples == 2


def test_eager_mode_raises_at_update() -> None:
    device.eager(True)
    acc = ms.ConfusionAccumulator(3)
    acc.update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"`y_true` holds label 4 at flat position 0 of device"):
        acc.update(torch.tensor([4, 1]), torch.tensor([0, 1]))
    assert acc.num_samples == 2
    assert device.eager(False) is True


def test_meta_device_and_argument_errors() -> None:
    acc = ms.ConfusionAccumulator(3)
    meta = torch.empty(4, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="'meta' device, which holds shapes but no values"):
        acc.update(meta, meta)
    with pytest.raises(ValueError, match="`y_pred` is a tensor on the 'meta' device"):
        acc.update(torch.tensor([0]), torch.empty(1, device="meta"))
    with pytest.raises(ValueError, match="`weights` has shape"):
        acc.update(torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1]))
    with pytest.raises(ValueError, match="has 2 classes on axis 1"):
        acc.update(torch.tensor([0, 1]), torch.zeros(2, 2))
    with pytest.raises(TypeError, match="True or False"):
        device.force_device_path("yes")  # type: ignore[arg-type]
    assert acc.num_samples == 0
    # Numpy or list companions of a device y_true are moved to its device.
    acc.update(torch.tensor([0, 1]), np.array([0, 1]), [2, 3])
    assert acc.num_samples == 5


def test_switch_routes_cpu_tensors_only_when_on() -> None:
    assert _devices.on_device(torch.zeros(1))
    with cpu_path():
        assert not _devices.on_device(torch.zeros(1))
        acc = ms.ConfusionAccumulator(2).update(torch.tensor([0]), torch.tensor([1]))
        assert acc._device is None
    assert not _devices.on_device(np.zeros(1))


# ---------------------------------------------------------------------- other families
def test_families_without_device_kernel_count_on_the_host() -> None:
    rng = np.random.default_rng(9)
    a = ms.BootstrapConfusionAccumulator(3, n_resamples=8, seed=1)
    b = ms.BootstrapConfusionAccumulator(3, n_resamples=8, seed=1)
    for image in range(3):  # one cluster per call: its id makes the replicates reproducible
        true, pred = labels(rng, 40, 3), labels(rng, 40, 3)
        a.update(true, pred, cluster_ids=image)
        with cpu_path():
            b.update(true, pred, cluster_ids=image)
    assert a._device is None and device._family_of(a) is None
    assert_same_state(a, b)


class _MyConfusion(ms.ConfusionAccumulator):
    """A subclass may change what an update means: it counts through its own (host) path."""


def test_a_subclass_counts_on_the_host() -> None:
    batches = [(labels(np.random.default_rng(2), 30, 3), labels(np.random.default_rng(3), 30, 3))]
    a, b = twins(lambda: _MyConfusion(3), batches)
    assert a._device is None and device._family_of(a) is None
    assert_same_state(a, b)


# ---------------------------------------------------------------------- torch.compile
def _compile_aware_on_device(value):
    """``_core.devices.on_device`` as it must be for compiled steps (CPU tensors inside a
    compiled step go to metricstream.device, where the Numba path runs as the custom operator);
    also about twice as fast for CPU tensors."""
    if type(value) is np.ndarray:
        return False
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return False
    return not value.is_cpu or _devices.force_cpu_tensors or torch.compiler.is_compiling()


def _compile_aware(monkeypatch) -> None:
    if "is_compiling" not in _devices.on_device.__code__.co_names:
        monkeypatch.setattr(_devices, "on_device", _compile_aware_on_device)


@pytest.mark.slow
@pytest.mark.parametrize("forced", [True, False], ids=["device-path", "numba-custom-op"])
def test_compiled_step_has_no_graph_break(forced, monkeypatch) -> None:
    import torch._dynamo

    device.force_device_path(forced)
    _compile_aware(monkeypatch)
    torch._dynamo.reset()
    k = 4
    acc = ms.ConfusionAccumulator(k)

    def step(true, logits):
        acc.update(true, logits)
        return logits.sum()

    true, logits = labels(np.random.default_rng(10), 64, k), torch.randn(64, k)
    explained = torch._dynamo.explain(step)(true, logits)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    acc.reset()
    compiled = torch.compile(step, fullgraph=True)
    reference = ms.ConfusionAccumulator(k)
    rng = np.random.default_rng(11)
    for _ in range(3):
        true, logits = labels(rng, 64, k), torch.randn(64, k)
        compiled(true, logits)
        with cpu_path():
            reference.update(true, logits)
    assert (acc._device is not None) is forced
    assert_same_state(acc, reference)
    torch._dynamo.reset()


def test_other_keywords_reach_a_family_without_device_kernel() -> None:
    acc = ms.BootstrapConfusionAccumulator(2, n_resamples=8, seed=0)
    with cpu_path():
        reference = ms.BootstrapConfusionAccumulator(2, n_resamples=8, seed=0)
    true, pred, clusters = torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]), torch.tensor([4, 4, 5])
    acc.update(true, pred, cluster_ids=clusters)
    with cpu_path():
        reference.update(true, pred, cluster_ids=clusters)
    assert_same_state(acc, reference)


def test_a_read_lets_the_next_batch_start_on_another_device() -> None:
    acc = ms.ConfusionAccumulator(2).update(torch.tensor([0]), torch.tensor([0]))
    state = acc._device
    state.device = torch.device("cpu", 1)  # as if it had counted on another device
    with pytest.raises(ValueError, match="holds counts on cpu:1, but the batch is on cpu"):
        acc.update(torch.tensor([1]), torch.tensor([1]))
    assert acc.num_samples == 1  # read: the counts are on the host now
    acc.update(torch.tensor([1]), torch.tensor([1]))
    assert acc._device is not state and acc.num_samples == 2


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 60), max_size=4),
    seed=st.integers(0, 2**16),
    order=st.permutations(range(3)),
)
def test_any_split_and_merge_order_give_one_state(cuts, seed, order) -> None:
    rng = np.random.default_rng(seed)
    true = labels(rng, 60, 4)
    true[::7] = 9  # ignored
    logits = torch.from_numpy(rng.normal(size=(60, 4))).to(torch.float16)
    make = lambda: ms.ConfusionAccumulator(4, ignore_index=9)  # noqa: E731
    whole = make().update(true, logits)
    bounds = [0, *sorted(cuts), 60]
    parts = [make() for _ in range(3)]
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        parts[i % 3].update(true[lo:hi], logits[lo:hi])
    merged = make()
    for i in order:
        merged.merge(parts[i])
    assert_same_state(merged, whole)


@pytest.mark.parametrize("k", [2, 10, 150])
def test_histogram_counting_equals_the_numba_path(k) -> None:
    """The GPU counts unweighted batches with a histogram of the keys (torch.histc); its bin
    arithmetic is proven here on CPU tensors, on every kind of key a confusion update makes."""
    from metricstream.device import _state

    rng = np.random.default_rng(k)
    batches = [
        (labels(rng, 5000, k), labels(rng, 5000, k)),
        (labels(rng, 300, k), torch.from_numpy(rng.normal(size=(300, k)).astype(np.float32))),
        (torch.full((64,), k - 1), torch.full((64,), k - 1)),  # the last cell
    ]
    _state.HISTOGRAM_ON_CPU[0] = True
    cells, _state.HISTOGRAM_CELLS = _state.HISTOGRAM_CELLS, 10**9  # K = 150 too
    try:
        a, b = twins(lambda: ms.ConfusionAccumulator(k, ignore_index=-1), batches)
        c = ms.ConfusionAccumulator(k, ignore_index=-1)
        bad = labels(rng, 40, k)
        bad[5] = k  # a bad batch: all its rows go to the spare cell, nothing is counted
        c.update(bad, labels(rng, 40, k))
    finally:
        _state.HISTOGRAM_ON_CPU[0] = False
        _state.HISTOGRAM_CELLS = cells
    assert_same_state(a, b)
    with pytest.raises(ValueError, match="device batch 0"):
        c.state_arrays()
    assert c.num_samples == 0


@pytest.mark.slow  # imports torch._dynamo (about a second), as the compiled-step tests do
def test_constant_when_traced_marks_a_function_as_dynamos_decorator_does() -> None:
    # The device package marks its trace-time constants without importing torch._dynamo (about
    # a second of `import metricstream.device`): the mark must be the decorator's whole effect.
    import torch._dynamo

    from metricstream.device._state import constant_when_traced

    def ours() -> int:
        return 1

    def dynamos() -> int:
        return 1

    assert constant_when_traced(ours) is ours
    assert torch._dynamo.assume_constant_result(dynamos) is dynamos
    assert vars(ours) == vars(dynamos) == {"_dynamo_marked_constant": True}
