"""RegressionAccumulator on the device path: bit-identical to the Numba path, sync-free checks.

Every test runs on "cpu-forced" (CPU tensors through the device path) and, when a GPU is
present, on "cuda". The host path (numpy, the Numba kernels) is the reference: the state after
the same rows must be bit-identical (the sums are exact integers in both). Bad values are kept
out on the device and raised at the next read; ``torch.compile(fullgraph=True)`` of a step
calling ``update`` has no graph break.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import metricstream as ms  # noqa: E402
from metricstream import device  # noqa: E402
from metricstream.device import regression as dr  # noqa: E402
from metricstream.regression import _kernels as K  # noqa: E402
from tests.device_switches import device_path  # noqa: E402

DEVICES = ["cpu-forced"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


@pytest.fixture(params=DEVICES)
def where(request: Any) -> Iterator[str]:
    with device_path(request.param == "cpu-forced"):
        yield "cpu" if request.param == "cpu-forced" else "cuda"


def _on(where: str, array: Any, dtype: Any = None) -> Any:
    tensor = torch.as_tensor(np.ascontiguousarray(array))
    if dtype is not None:
        tensor = tensor.to(dtype)
    return tensor.to(where)


def _host(tensor: Any) -> np.ndarray | None:
    """The values of a tensor as the host path reads them (float64 numpy)."""
    if tensor is None:
        return None
    return tensor.detach().cpu().to(torch.float64).numpy()


def _assert_same_state(a: Any, b: Any) -> None:
    mine, theirs = a.state_arrays(), b.state_arrays()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype, name
        assert np.array_equal(mine[name], theirs[name]), name


def _batch(rng: np.random.Generator, n: int, outputs: int, dtype: Any) -> tuple[Any, Any]:
    shape = (n,) if outputs == 1 else (n, outputs)
    scale = 10.0 ** rng.integers(-3, 4, shape) if dtype == torch.float64 else 1.0
    t = rng.normal(size=shape) * scale
    p = t + rng.normal(0.1, 0.5, shape)
    if n > 4:  # corners: zeros, a negative zero, equal values (zero error)
        t.reshape(-1)[0] = 0.0
        p.reshape(-1)[1] = -0.0
        p.reshape(-1)[2] = t.reshape(-1)[2]
        if dtype == torch.float64:
            t.reshape(-1)[3] = 5e-324  # subnormal: its square is below every float64
            p.reshape(-1)[4] = 1e150
    return t, p


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_random_streams_equal_the_numba_path_bit_for_bit(
    where: str, dtype: str, outputs: int, weighted: bool
) -> None:
    rng = np.random.default_rng([outputs, weighted, len(dtype)])
    on_device, reference = ms.RegressionAccumulator(outputs), ms.RegressionAccumulator(outputs)
    for n in (0, 1, 37, 300, 5):
        t, p = _batch(rng, n, outputs, DTYPES[dtype])
        tt, pt = _on(where, t, DTYPES[dtype]), _on(where, p, DTYPES[dtype])
        wt = None
        if weighted:
            w = rng.uniform(0, 3, n)
            w[rng.random(n) < 0.2] = 0.0  # rows of weight 0: only num_samples
            wt = _on(where, w, DTYPES[dtype])
        on_device.update(tt, pt, wt)
        reference.update(_host(tt), _host(pt), _host(wt))
    assert on_device._device is not None  # counted on the device
    _assert_same_state(on_device, reference)
    assert on_device.max_error("raw_values").tolist() == reference.max_error("raw_values").tolist()
    assert on_device.r2() == reference.r2()


def test_integer_bool_and_mixed_inputs(where: str) -> None:
    acc, reference = ms.RegressionAccumulator(), ms.RegressionAccumulator()
    t = np.array([3, -1, 2, 7, 0])
    p = np.array([2.5, 0.0, 2.0, 8.0, -0.0])
    acc.update(_on(where, t), _on(where, p), _on(where, np.array([1, 0, 1, 1, 1], dtype=bool)))
    reference.update(t, p, np.array([1.0, 0.0, 1.0, 1.0, 1.0]))
    acc.update(_on(where, p), p.tolist())  # a list beside a device y_true goes to its device
    reference.update(p, p)
    _assert_same_state(acc, reference)
    assert acc.num_samples == 10


def test_large_mean_small_spread_and_far_apart_batches(where: str) -> None:
    rng = np.random.default_rng(3)
    acc, reference = ms.RegressionAccumulator(2), ms.RegressionAccumulator(2)
    for mean in (1e9, -3e12, 0.0, 1e15):
        t = mean + rng.normal(0, 1, (100, 2))
        p = t + rng.normal(0.25, 0.5, (100, 2))
        w = rng.uniform(0.1, 2, 100)
        acc.update(_on(where, t), _on(where, p), _on(where, w))
        reference.update(t, p, w)
    _assert_same_state(acc, reference)


def test_many_batches_carry_the_bins_exactly(where: str) -> None:
    # The same rows many times: every bin is carried after each batch.
    acc, reference = ms.RegressionAccumulator(), ms.RegressionAccumulator()
    t = np.full(512, 1.0 + 2.0**-52)
    p = np.full(512, -(2.0**30))
    for _ in range(40):
        acc.update(_on(where, t), _on(where, p), _on(where, np.full(512, 3.0)))
        reference.update(t, p, np.full(512, 3.0))
    _assert_same_state(acc, reference)


def test_carry_round_keeps_the_value() -> None:
    state = dr.RegressionDeviceState(torch.device("cpu"), 1)
    bins = state.tensors["bins"][:-1].view(K.NUM_STATE, K.NUM_BINS)
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**62, (K.NUM_STATE, 200))
    bins[:, 2000:2200] = torch.from_numpy(values)
    before = np.zeros((1, K.NUM_STATE, K.LIMBS), dtype=np.int64)
    K.bins_into_limbs(bins.numpy().copy().reshape(1, K.NUM_STATE, -1), before)
    dr._carry(state, 1)
    assert int(bins.max()) < 2**41
    after = np.zeros_like(before)
    K.bins_into_limbs(bins.numpy().copy().reshape(1, K.NUM_STATE, -1), after)
    K.normalise_state(before)
    K.normalise_state(after)
    assert np.array_equal(before, after)


# ---------------------------------------------------------------------- bad values
def _bad_cases() -> Iterator[tuple[str, Any, str]]:
    def spoil(index: int, value: float, row: int = 1, col: int = 0) -> Any:
        def apply(batch: list[np.ndarray]) -> list[np.ndarray]:
            batch = [array.copy() for array in batch]
            if batch[index].ndim == 1:
                batch[index][row] = value
            else:
                batch[index][row, col] = value
            return batch

        return apply

    yield "nan_true", spoil(0, np.nan, 3, 1), r"`y_true` holds nan at position \(3, 1\)"
    yield "inf_pred", spoil(1, -np.inf, 2, 0), r"`y_pred` holds -inf at position \(2, 0\)"
    yield "negative_weight", spoil(2, -0.5, 4), r"`weights` holds -0.5 at position 4"
    yield "nan_weight", spoil(2, np.nan, 0), r"`weights` holds nan at position 0"
    yield "inf_weight", spoil(2, np.inf, 5), r"`weights` holds inf at position 5"

    def difference(batch: list[np.ndarray]) -> list[np.ndarray]:
        batch = [array.copy() for array in batch]
        batch[0][6, 1], batch[1][6, 1] = -1e308, 1e308
        return batch

    yield "difference", difference, r"`y_pred - y_true` overflows float64 at position \(6, 1\)"
    yield "square", spoil(1, 1e200, 7, 0), r"magnitude 1e\+200 at position \(7, 0\)"


@pytest.mark.parametrize("case", [c[0] for c in _bad_cases()])
def test_bad_value_is_left_out_and_raised_at_the_next_read(where: str, case: str) -> None:
    _, spoil, match = next(c for c in _bad_cases() if c[0] == case)
    rng = np.random.default_rng(5)

    def batch() -> list[np.ndarray]:
        t = rng.normal(size=(10, 2))
        return [t, t + rng.normal(size=(10, 2)), rng.uniform(0.5, 2, 10)]

    good, bad, after = batch(), spoil(batch()), batch()
    acc, reference = ms.RegressionAccumulator(2), ms.RegressionAccumulator(2)
    for values in (good, bad, after):
        acc.update(*(_on(where, v) for v in values))  # no error here: nothing waits
    with pytest.raises(ValueError, match=match) as raised:
        acc.mse()
    assert "device batch 1" in str(raised.value)
    assert "1 bad value was seen" in str(raised.value)
    with pytest.raises(ValueError):  # the host path refuses the same batch at once
        reference.update(*bad)
    reference.update(*good).update(*after)
    _assert_same_state(acc, reference)  # the error was cleared; the valid batches remain
    assert acc.mse() == reference.mse()


def test_eager_mode_raises_at_update(where: str) -> None:
    acc = ms.RegressionAccumulator()
    acc.update(_on(where, np.array([1.0, 2.0])), _on(where, np.array([1.5, 2.0])))
    device.eager(True)
    with pytest.raises(ValueError, match=r"`y_pred` holds nan at position 1"):
        acc.update(_on(where, np.array([1.0, 2.0])), _on(where, np.array([1.0, np.nan])))
    reference = ms.RegressionAccumulator().update([1.0, 2.0], [1.5, 2.0])
    _assert_same_state(acc, reference)


def test_shape_and_type_errors_are_immediate(where: str) -> None:
    acc = ms.RegressionAccumulator(2)
    ones = _on(where, np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"2 output\(s\): give \(N, 2\)"):
        acc.update(_on(where, np.ones(4)), _on(where, np.ones(4)))
    with pytest.raises(ValueError, match="must match"):
        acc.update(ones, _on(where, np.ones((3, 2))))
    with pytest.raises(ValueError, match=r"one weight per row: \(4,\)"):
        acc.update(ones, ones, _on(where, np.ones(3)))
    with pytest.raises(TypeError, match="real numbers"):
        acc.update(ones.to(torch.complex128), ones)
    assert acc.num_samples == 0
    with pytest.raises(ValueError, match="meta"):
        acc.update(torch.ones(4, 2, device="meta"), torch.ones(4, 2, device="meta"))


def test_merge_reset_and_round_trip_read_the_device(where: str) -> None:
    rng = np.random.default_rng(8)
    t, p = rng.normal(size=50), rng.normal(size=50)
    a = ms.RegressionAccumulator().update(_on(where, t[:20]), _on(where, p[:20]))
    b = ms.RegressionAccumulator().update(_on(where, t[20:]), _on(where, p[20:]))
    whole = ms.RegressionAccumulator().update(t, p)
    assert a + b == whole
    merged = a.copy()
    a.merge(b)
    assert a == whole
    assert ms.RegressionAccumulator.from_bytes(a.to_bytes()) == whole
    assert merged.num_samples == 20
    a.update(_on(where, t), _on(where, p)).reset()
    assert a.num_samples == 0
    with pytest.warns(ms.UndefinedMetricWarning):
        assert a.mse() == 0.0


def test_only_zero_weights_leave_the_maximum_empty(where: str) -> None:
    acc = ms.RegressionAccumulator()
    acc.update(
        _on(where, np.array([1.0, 2.0])), _on(where, np.array([5.0, 2.0])), _on(where, np.zeros(2))
    )
    assert acc.num_samples == 2
    assert int(acc.state_arrays()["max_parts"][0]) == 0
    acc.update(_on(where, np.array([1.0])), _on(where, np.array([4.0])))
    assert acc.max_error() == 3.0


# ---------------------------------------------------------------------- torch.compile
def _compile_case(where: str, weighted: bool) -> tuple[Any, ...]:
    rng = np.random.default_rng(9)
    t = _on(where, rng.normal(size=(64, 2)), torch.float32)
    p = _on(where, rng.normal(size=(64, 2)), torch.float32)
    w = _on(where, rng.uniform(0, 2, 64), torch.float32) if weighted else None
    acc = ms.RegressionAccumulator(2)

    def step(y_true: Any, y_pred: Any, weights: Any) -> Any:
        acc.update(y_true, y_pred, weights)
        return (y_pred - y_true).square().mean()

    return acc, step, t, p, w


def _check_compiled(acc: Any, compiled: Any, t: Any, p: Any, w: Any) -> None:
    acc.reset()
    for _ in range(3):
        compiled(t, p, w)
    reference = ms.RegressionAccumulator(2)
    for _ in range(3):
        reference.update(_host(t), _host(p), _host(w))
    _assert_same_state(acc, reference)
    bad = p.clone()
    bad[3, 1] = float("nan")
    compiled(t, bad, w)  # recorded on the device, raised at the read
    with pytest.raises(ValueError, match=r"`y_pred` holds nan at position \(3, 1\)"):
        acc.mse()
    _assert_same_state(acc, reference)


@pytest.mark.slow
def test_step_traces_whole_with_no_graph_break(where: str) -> None:
    _, step, t, p, w = _compile_case(where, True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(step)(t, p, w)
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.slow  # tracing the step takes 10-20 s on a small CPU
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_traced_step_counts_the_same(where: str, weighted: bool) -> None:
    acc, step, t, p, w = _compile_case(where, weighted)
    torch._dynamo.reset()
    _check_compiled(acc, torch.compile(step, fullgraph=True, backend="eager"), t, p, w)


@pytest.mark.slow  # inductor compiles the step (20-30 s on a small CPU)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_inductor_compiled_step_counts_the_same(where: str, weighted: bool) -> None:
    acc, step, t, p, w = _compile_case(where, weighted)
    torch._dynamo.reset()
    _check_compiled(acc, torch.compile(step, fullgraph=True), t, p, w)
