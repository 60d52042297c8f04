"""The multilabel device path (metricstream.device.multilabel) against the Numba path.

Every state is compared bit for bit with the CPU path's on the same tensors ("cpu-forced": CPU
tensors with the device path forced on; "cuda": the same batches on a GPU, when there is one).
Bad values must leave exactly the valid batches counted and be named at the next read; a
compiled step must trace without a graph break.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import metricstream as ms  # noqa: E402
from metricstream import device  # noqa: E402
from tests.device_switches import cpu_path, device_path  # noqa: E402

from .marks import slow_beyond  # noqa: E402

WHERE = [
    "cpu-forced",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    ),
]


@pytest.fixture(params=WHERE)
def where(request: pytest.FixtureRequest) -> Iterator[torch.device]:
    """The device the batches are counted on (CPU tensors with the device path forced on)."""
    with device_path(request.param == "cpu-forced"):
        yield torch.device("cpu" if request.param == "cpu-forced" else "cuda")


Batch = tuple[Any, ...]


def on(where: torch.device, batch: Batch) -> Batch:
    return tuple(value.to(where) if isinstance(value, torch.Tensor) else value for value in batch)


def twins(make: Callable[[], Any], batches: list[Batch], where: torch.device) -> tuple[Any, Any]:
    """(device-path accumulator, Numba-path accumulator) fed the same batches."""
    on_device, reference = make(), make()
    for batch in batches:
        on_device.update(*on(where, batch))
        with cpu_path():
            reference.update(*batch)
    assert on_device._device is not None
    return on_device, reference


def assert_same_state(a: Any, b: Any) -> None:
    mine, theirs = a.state_arrays(), b.state_arrays()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype, name
        np.testing.assert_array_equal(mine[name], theirs[name], strict=True, err_msg=name)
    assert a == b


def indicators(rng: np.random.Generator, n: int, num_labels: int, dtype: Any) -> Any:
    """Random 0/1 rows; label 0 is never true and some rows are all zero (absent labels)."""
    values = rng.integers(0, 2, (n, num_labels))
    values[:, 0] = 0
    values[::5] = 0
    return torch.from_numpy(values).to(dtype)


def scores(rng: np.random.Generator, n: int, num_labels: int, dtype: Any, logits: bool) -> Any:
    values = rng.normal(size=(n, num_labels)) if logits else rng.random((n, num_labels))
    values[:, 1] = -3.0 if logits else 0.0  # label 1 is never predicted
    tensor = torch.from_numpy(values).to(dtype)
    if n > 2:
        tensor[2, 2:] = 0.0 if logits else 0.5  # on the threshold: positive
    return tensor


SIZES = (1, 7, 64, 0, 33)


def beside_the_cut(threshold: float, logits: bool, dtype: Any) -> Any:
    """Three scores of ``dtype``: the one nearest to what the kernels compare with (the
    threshold, or its logit) and its two neighbours in that dtype, kept inside [0, 1] for
    probabilities: the decisions there must be the CPU path's."""
    cut = np.log(threshold) - np.log1p(-threshold) if logits and 0 < threshold < 1 else threshold
    if logits and threshold in (0.0, 1.0):
        cut = 0.0  # infinite: any score is on one side
    near = torch.tensor([cut], dtype=torch.float64).to(dtype)
    if dtype == torch.bfloat16:
        step = near.float().abs().clamp(min=2.0**-100) * 2.0**-7
        values = torch.cat((near.float(), near.float() - step, near.float() + step))
    else:
        values = torch.cat((near, torch.nextafter(near, near - 1), torch.nextafter(near, near + 1)))
    if not logits:
        values = values.clamp(0.0, 1.0)
    return values.to(dtype)


# ---------------------------------------------------------------------- bit-identical states
@pytest.mark.parametrize(
    "dtypes",
    slow_beyond(
        [
            (torch.uint8, torch.uint8),
            (torch.bool, torch.bool),
            (torch.int64, torch.int32),
            (torch.int8, torch.int16),
            (torch.float32, torch.uint8),  # float truth holding 0.0/1.0
            (torch.uint16, torch.uint64),
            (torch.uint32, torch.int8),
        ],
        2,
        ids=lambda pair: f"{pair[0]}-{pair[1]}".replace("torch.", ""),
    ),
)
def test_indicators_every_dtype(where, dtypes) -> None:
    true_dtype, pred_dtype = dtypes
    rng = np.random.default_rng(1)
    num_labels = 6
    batches = [
        (indicators(rng, n, num_labels, true_dtype), indicators(rng, n, num_labels, pred_dtype))
        for n in SIZES
    ]
    a, b = twins(lambda: ms.MultilabelAccumulator(num_labels), batches, where)
    assert a.num_samples == sum(SIZES)
    assert_same_state(a, b)


# (score dtype, logits, threshold): float16/bfloat16 go through the CPU path's float32 kernel.
SCORE_CASES = slow_beyond(
    [
        (torch.float32, False, 0.5),
        (torch.bfloat16, True, 0.5),
        (torch.float16, False, 0.3),
        (torch.float64, True, 0.7),
        (torch.float32, True, 0.2),
        (torch.bfloat16, False, 0.5),
        (torch.float16, True, 0.5),
        (torch.float64, False, 0.0),
        (torch.float32, False, 1.0),
        (torch.float64, True, 1.0),
    ],
    3,
    ids=lambda case: f"{str(case[0])[6:]}-{'logits' if case[1] else 'probs'}-{case[2]}",
)


@pytest.mark.parametrize("case", SCORE_CASES)
def test_scores_every_float_dtype_and_threshold(where, case) -> None:
    dtype, logits, threshold = case
    rng = np.random.default_rng(2)
    num_labels = 5
    batches = []
    for n in SIZES:
        pred = scores(rng, n, num_labels, dtype, logits)
        if n > 3:
            pred[3, :3] = beside_the_cut(threshold, logits, dtype)
        batches.append((indicators(rng, n, num_labels, torch.uint8), pred))
    make = lambda: ms.MultilabelAccumulator(num_labels, threshold=threshold, logits=logits)  # noqa: E731
    a, b = twins(make, batches, where)
    assert_same_state(a, b)


@pytest.mark.parametrize(
    "case",
    slow_beyond(
        [
            (torch.int64, False),
            (torch.float64, True),
            (torch.bool, False),
            (torch.float32, False),
            (torch.int32, True),
            (torch.bfloat16, True),
        ],
        2,
        ids=lambda case: f"{str(case[0])[6:]}-{'weighted' if case[1] else 'counts'}",
    ),
)
def test_weights(where, case) -> None:
    weight_dtype, weighted = case
    rng = np.random.default_rng(3)
    num_labels = 4
    batches = []
    for n in SIZES:
        # Whole, or multiples of 1/8 (dyadic: any order of addition gives the same sums).
        values = rng.integers(0, 24, n) / (8 if weighted and weight_dtype.is_floating_point else 1)
        values[::3] = 0  # zero weights: counted as samples of weight 0
        weights = torch.from_numpy(values).to(weight_dtype)
        pred = scores(rng, n, num_labels, torch.float32, False)
        batches.append((indicators(rng, n, num_labels, torch.uint8), pred, weights))
    batches.append((indicators(rng, 9, num_labels, torch.uint8), indicators(rng, 9, 4, torch.bool)))
    a, b = twins(lambda: ms.MultilabelAccumulator(num_labels, weighted=weighted), batches, where)
    assert_same_state(a, b)


@pytest.mark.parametrize(
    "case",
    slow_beyond(
        [(torch.int64, -1), (torch.uint8, 255), (torch.float64, -1), (torch.int8, 255)],
        2,
        ids=lambda case: f"{str(case[0])[6:]}-{case[1]}",
    ),
)
def test_ignore_index_masks_entries_and_whole_rows(where, case) -> None:
    true_dtype, ignore = case
    rng = np.random.default_rng(4)
    num_labels = 5
    batches = []
    for n in SIZES:
        true = torch.from_numpy(rng.integers(0, 3, (n, num_labels)))
        if true_dtype == torch.int8 and ignore == 255:
            true[true == 2] = 1  # no int8 equals 255: nothing is masked
        else:
            true[true == 2] = ignore
            true[1::4] = ignore  # every label of the row masked: left out of the samples
        pred = indicators(rng, n, num_labels, torch.uint8)
        if n > 4:
            pred[4] = 1  # predictions at masked entries count nowhere
        batches.append((true.to(true_dtype), pred))
    make = lambda: ms.MultilabelAccumulator(num_labels, ignore_index=ignore, cooccurrence=True)  # noqa: E731
    a, b = twins(make, batches, where)
    assert a.state_arrays()["labels"].shape == (4, num_labels)
    assert_same_state(a, b)


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weighted"])
def test_betas_cooccurrence_masks_and_weights_together(where, weighted) -> None:
    rng = np.random.default_rng(5)
    num_labels = 7
    batches = []
    for n in SIZES:
        true = torch.from_numpy(rng.integers(-1, 2, (n, num_labels)))
        weights = torch.from_numpy(rng.integers(0, 5, n) / (4 if weighted else 1))
        pred = scores(rng, n, num_labels, torch.float64, True)
        batches.append((true, pred, weights))
    make = lambda: ms.MultilabelAccumulator(  # noqa: E731
        num_labels,
        logits=True,
        ignore_index=-1,
        weighted=weighted,
        betas=(0.5, 1.0, 2.0),
        cooccurrence=True,
    )
    a, b = twins(make, batches, where)
    assert_same_state(a, b)


def test_large_integer_weights_are_exact(where) -> None:
    # Weights near the int64 bound over L labels: the co-occurrence products are split into
    # limbs, each sum exact in float64.
    num_labels = 3
    big = (2**62) // 64
    true = torch.tensor([[1, 1, 0], [1, 0, 1], [1, 1, 1]])
    pred = torch.tensor([[1, 0, 0], [1, 1, 1], [0, 1, 1]])
    # (Whole weights are read through float64 on the CPU path: these are exact there.)
    weights = torch.tensor([big + 16, big - 8, 7])
    make = lambda: ms.MultilabelAccumulator(num_labels, cooccurrence=True)  # noqa: E731
    a, b = twins(make, [(true, pred, weights)], where)
    assert_same_state(a, b)
    assert int(a.state_arrays()["cooccurrence"][0, 0]) == 2 * big + 15


def test_one_label_as_vectors(where) -> None:
    rng = np.random.default_rng(6)
    batches = [
        (torch.from_numpy(rng.integers(0, 2, n)), torch.from_numpy(rng.random(n))) for n in SIZES
    ]
    a, b = twins(lambda: ms.MultilabelAccumulator(1), batches, where)
    assert_same_state(a, b)


def test_state_stays_on_device_until_read(where) -> None:
    acc = ms.MultilabelAccumulator(3)
    acc.update(*on(where, (torch.tensor([[1, 0, 1]]), torch.tensor([[1, 1, 0]]))))
    assert acc._device.dirty
    assert int(acc._arrays["labels"].sum()) == 0  # not on the host yet
    assert acc.subset_accuracy() == 0.0  # the read copies the counts to the host
    assert not acc._device.dirty and acc._arrays["labels"].tolist() == [
        [1, 0, 0],
        [1, 0, 1],
        [1, 1, 0],
    ]
    restored = ms.MultilabelAccumulator.from_bytes(acc.to_bytes())
    assert_same_state(restored, acc)
    acc.update(*on(where, (torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 0]]))))
    assert acc.num_samples == 2 and acc.subset_accuracy() == 0.5
    acc.update(*on(where, (torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 0]]))))
    acc.reset()
    assert acc.num_samples == 0 and not acc._device.dirty


@settings(max_examples=20, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 40), max_size=4),
    seed=st.integers(0, 2**16),
    order=st.permutations(range(3)),
)
def test_any_split_and_merge_order_give_one_state(cuts, seed, order) -> None:
    previous = device.force_device_path(True)
    try:
        rng = np.random.default_rng(seed)
        true = torch.from_numpy(rng.integers(-1, 2, (40, 4))).to(torch.int16)
        logits = torch.from_numpy(rng.normal(size=(40, 4))).to(torch.float16)
        make = lambda: ms.MultilabelAccumulator(4, logits=True, ignore_index=-1)  # noqa: E731
        whole = make().update(true, logits)
        bounds = [0, *sorted(cuts), 40]
        parts = [make() for _ in range(3)]
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            parts[i % 3].update(true[lo:hi], logits[lo:hi])
        merged = make()
        for i in order:
            merged.merge(parts[i])
        assert_same_state(merged, whole)
    finally:
        device.force_device_path(previous)


# ---------------------------------------------------------------------- bad input
# (name, accumulator options, bad batch, words of the message)
BAD_CASES: list[tuple[str, dict[str, Any], Batch, str]] = [
    (
        "true 2",
        {},
        (torch.tensor([[0, 1, 0], [1, 0, 2]]), torch.tensor([[0, 1, 0], [1, 1, 0]])),
        "`y_true` holds 2 at row 1, label 2, but a label indicator holds 0 or 1",
    ),
    (
        "true -1 unmasked",
        {},
        (torch.tensor([[-1, 1, 0]], dtype=torch.int8), torch.tensor([[0.2, 0.9, 0.1]])),
        "`y_true` holds -1 at row 0, label 0",
    ),
    (
        "true 3 masked",
        {"ignore_index": 255},
        (torch.tensor([[255, 1, 3]], dtype=torch.uint8), torch.tensor([[0, 1, 1]])),
        "`y_true` holds 3 at row 0, label 2, but a label indicator holds 0, 1 or "
        "`ignore_index` 255",
    ),
    (
        "float truth",
        {},
        (torch.tensor([[0.0, 0.5, 1.0]]), torch.tensor([[0, 1, 1]])),
        "`y_true` holds 0.5 at row 0, label 1",
    ),
    (
        "nan truth",
        {},
        (
            torch.tensor([[0.0, 1.0, 0.0], [float("nan"), 1.0, 0.0]]),
            torch.tensor([[0, 1, 1], [0, 0, 0]]),
        ),
        "`y_true` holds nan at row 1, label 0",
    ),
    (
        "pred 3",
        {},
        (torch.tensor([[0, 1, 0]]), torch.tensor([[0, 3, 0]], dtype=torch.int32)),
        "`y_pred` holds 3 at row 0, label 1, but a label indicator holds 0 or 1",
    ),
    (
        "nan score",
        {"logits": True},
        (torch.tensor([[0, 1, 0]]), torch.tensor([[0.0, 2.0, float("nan")]])),
        "`y_pred` holds NaN at row 0, label 2, but scores must be numbers",
    ),
    (
        "probability",
        {},
        (torch.tensor([[0, 1, 0]]), torch.tensor([[0.0, 1.5, 0.25]], dtype=torch.float16)),
        "`y_pred` holds 1.5 at row 0, label 1, but this accumulator reads scores as "
        "probabilities, which lie in [0, 1]",
    ),
    (
        "negative weight",
        {},
        (
            torch.tensor([[0, 1, 0], [1, 1, 1]]),
            torch.tensor([[0, 1, 0], [1, 1, 1]]),
            torch.tensor([1, -2]),
        ),
        "`weights` holds -2 at position 1, but weights must be whole non-negative numbers",
    ),
    (
        "fractional weight",
        {},
        (torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 0]]), torch.tensor([0.5])),
        "`weights` holds 0.5 at position 0",
    ),
    (
        "infinite weight",
        {"weighted": True},
        (torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 0]]), torch.tensor([float("inf")])),
        "`weights` holds inf at position 0, but weights must be finite and non-negative",
    ),
    (
        "int64 headroom",
        {},
        (
            torch.tensor([[0, 1, 0]] * 2),
            torch.tensor([[0, 1, 0]] * 2),
            torch.tensor([2**61, 2**61]),
        ),
        "`weights` of a batch sum to 4.611686018427388e+18, which would let a count pass 2**63 - 1",
    ),
    (
        "float64 headroom",
        {"weighted": True},
        (
            torch.tensor([[0, 1, 0]] * 2),
            torch.tensor([[0, 1, 0]] * 2),
            torch.tensor([5e307, 5e307], dtype=torch.float64),
        ),
        "`weights` of a batch sum to 1e+308, which would let a count pass float64",
    ),
]


@pytest.mark.parametrize("case", BAD_CASES, ids=[case[0] for case in BAD_CASES])
def test_bad_batch_is_left_out_and_raised_at_the_next_read(where, case) -> None:
    _, options, bad, words = case
    rng = np.random.default_rng(8)
    good = []
    for n in (20, 5, 9):
        weights = torch.from_numpy(rng.integers(0, 3, n)) if len(bad) == 3 else None
        batch = (indicators(rng, n, 3, torch.uint8), indicators(rng, n, 3, torch.uint8))
        good.append(batch if weights is None else (*batch, weights))
    make = lambda: ms.MultilabelAccumulator(3, **options)  # noqa: E731
    acc = make()
    acc.update(*on(where, good[0])).update(*on(where, good[1]))
    acc.update(*on(where, bad))  # no error yet: the device is not waited for
    acc.update(*on(where, bad))
    acc.update(*on(where, good[2]))
    with pytest.raises(ValueError, match="2 bad values were seen") as raised:
        acc.state_arrays()
    message = str(raised.value)
    assert words in message, message
    assert "device batch 2 (0-based" in message
    with cpu_path():
        refused = make()
        with pytest.raises(ValueError):  # the CPU path refuses the same batch
            refused.update(*bad)
        assert refused.num_samples == 0
        valid = make()
        for batch in good:
            valid.update(*batch)
    assert_same_state(acc, valid)  # the error is cleared: this read succeeds


def test_first_bad_value_in_the_cpu_kernels_order(where) -> None:
    acc = ms.MultilabelAccumulator(4)
    true = torch.tensor([[0, 1, 0, 1], [0, 1, 1, 7], [9, 0, 0, 0]])
    pred = torch.tensor([[0, 1, 0, 1], [5, 1, 1, 1], [0, 0, 0, 0]])
    acc.update(*on(where, (true, pred)))
    with pytest.raises(ValueError) as raised:
        acc.num_samples  # noqa: B018 - a read
    message = str(raised.value)
    # The first row holding a bad value, and in it the truth before the prediction: as the
    # CPU kernels, whose message names the same value.
    assert message.startswith(f"3 bad values were seen on {where}")
    assert "`y_true` holds 7 at row 1, label 3" in message
    with cpu_path(), pytest.raises(ValueError, match="`y_true` holds 7 at row 1, label 3"):
        ms.MultilabelAccumulator(4).update(true, pred)
    assert acc.num_samples == 0


def test_uint64_values_are_named_unsigned(where) -> None:
    acc = ms.MultilabelAccumulator(2, ignore_index=2**64 - 1)
    true = torch.tensor([[-(2**63) + 5, 0]]).to(torch.uint64)  # 2**63 + 5
    masked = torch.tensor([[-1, 1]]).to(torch.uint64)  # 2**64 - 1: masked
    pred = torch.tensor([[0, 1]])
    acc.update(*on(where, (masked, pred)))
    acc.update(*on(where, (true, pred)))
    with pytest.raises(ValueError, match=f"`y_true` holds {2**63 + 5} at row 0, label 0"):
        acc.state_arrays()
    with cpu_path():
        reference = ms.MultilabelAccumulator(2, ignore_index=2**64 - 1).update(masked, pred)
    assert_same_state(acc, reference)


def test_eager_mode_raises_at_update(where) -> None:
    device.eager(True)
    acc = ms.MultilabelAccumulator(2)
    acc.update(*on(where, (torch.tensor([[0, 1]]), torch.tensor([[0.1, 0.9]]))))
    with pytest.raises(ValueError, match=r"`y_pred` holds -0.5 at row 0, label 0, but this"):
        acc.update(*on(where, (torch.tensor([[0, 1]]), torch.tensor([[-0.5, 0.9]]))))
    assert acc.num_samples == 1
    assert device.eager(False) is True


def test_meta_device_shapes_and_dtypes_are_refused_at_once(where) -> None:
    acc = ms.MultilabelAccumulator(3)
    meta = torch.empty((2, 3), dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="'meta' device, which holds shapes but no values"):
        acc.update(meta, meta)
    true = torch.tensor([[0, 1, 0]], device=where)
    with pytest.raises(ValueError, match=r"`y_pred` must be an \(N, 3\) label indicator"):
        acc.update(true, torch.tensor([[0, 1]], device=where))
    with pytest.raises(ValueError, match="`y_true` has 1 samples but `y_pred` has 2"):
        acc.update(true, torch.zeros((2, 3), device=where))
    with pytest.raises(ValueError, match=r"`weights` must have shape \(1,\)"):
        acc.update(true, true, torch.ones(2, device=where))
    with pytest.raises(TypeError, match="`y_pred` must be a 0/1 indicator matrix"):
        acc.update(true, torch.zeros((1, 3), dtype=torch.complex64, device=where))
    assert acc.num_samples == 0 and acc._device is None
    acc.update(true, np.array([[0, 1, 1]]), [2])  # numpy and list companions move to the device
    assert acc.num_samples == 2


def test_a_read_lets_the_next_batch_start_on_another_device(where) -> None:
    batch = on(where, (torch.tensor([[0, 1]]), torch.tensor([[0, 1]])))
    acc = ms.MultilabelAccumulator(2).update(*batch)
    state = acc._device
    state.device = torch.device("cpu", 1) if where.type == "cpu" else torch.device("cpu")
    with pytest.raises(ValueError, match="holds counts on cpu"):
        acc.update(*batch)
    assert acc.num_samples == 1  # read: the counts are on the host now
    acc.update(*batch)
    assert acc._device is not state and acc.num_samples == 2


# ---------------------------------------------------------------------- torch.compile
def _step_of(acc: Any) -> Callable[..., Any]:
    def step(true: Any, logits: Any, weights: Any) -> Any:
        acc.update(true, logits, weights)
        return logits.sum()

    return step


def _batch(rng: np.random.Generator, n: int, where: torch.device) -> Batch:
    true = torch.from_numpy(rng.integers(-1, 2, (n, 6)))
    return on(where, (true, torch.randn(n, 6), torch.from_numpy(rng.integers(0, 3, n))))


def _make_compiled() -> Any:
    return ms.MultilabelAccumulator(6, logits=True, ignore_index=-1, cooccurrence=True)


@pytest.mark.slow
def test_update_traces_without_a_graph_break(where) -> None:
    import torch._dynamo

    # The first device update of a family imports its device module, which a trace cannot do:
    # done here before (any earlier update does it).
    ms.MultilabelAccumulator(1).update(*on(where, (torch.ones(1, 1), torch.ones(1, 1))))
    torch._dynamo.reset()
    acc = _make_compiled()
    rng = np.random.default_rng(10)
    batch = _batch(rng, 32, where)
    explained = torch._dynamo.explain(_step_of(acc))(*batch)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    with cpu_path():
        reference = _make_compiled().update(*(value.cpu() for value in batch))
    assert_same_state(acc, reference)  # explain ran the step once
    torch._dynamo.reset()


@pytest.mark.slow  # compiles the step (several seconds)
def test_compiled_step_counts_as_the_cpu_path(where) -> None:
    import torch._dynamo

    ms.MultilabelAccumulator(1).update(*on(where, (torch.ones(1, 1), torch.ones(1, 1))))
    torch._dynamo.reset()
    acc = _make_compiled()
    compiled = torch.compile(_step_of(acc), fullgraph=True)
    reference = _make_compiled()
    rng = np.random.default_rng(11)
    for n in (32, 32, 17):
        batch = _batch(rng, n, where)
        compiled(*batch)
        with cpu_path():
            reference.update(*(value.cpu() for value in batch))
    bad = _batch(rng, 32, where)
    bad[1][3, 2] = float("nan")
    compiled(*bad)
    with pytest.raises(ValueError, match="holds NaN at row 3, label 2, but .*device batch 3"):
        acc.state_arrays()
    assert_same_state(acc, reference)

    # One compiled step for two accumulators whose per-sample layouts differ (other betas).
    def step(acc: Any, true: Any, logits: Any) -> Any:
        acc.update(true, logits)
        return logits.sum()

    compiled_any = torch.compile(step, fullgraph=True)
    for betas in ((1.0,), (0.5, 2.0), (1.0,)):
        acc = ms.MultilabelAccumulator(6, logits=True, betas=betas)
        reference = ms.MultilabelAccumulator(6, logits=True, betas=betas)
        true, logits, _ = _batch(rng, 16, where)
        true = true.clamp(min=0)
        compiled_any(acc, true, logits)
        with cpu_path():
            reference.update(true.cpu(), logits.cpu())
        assert_same_state(acc, reference)
    torch._dynamo.reset()
