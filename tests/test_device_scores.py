"""ScoreAccumulator on the device path (metricstream.device.scores).

On the CPU with the forced switch, and on CUDA when a GPU is present: every integer state array
(curves, inexact, ranks, calibration counts) is compared bit for bit with the Numba path on the
same tensors, the float sums exactly where every partial sum is exact (float16/bfloat16
probabilities, dyadic weights) and within float64 rounding otherwise; bad values must leave
exactly the valid batches counted; a compiled step must trace without a graph break.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import metricstream as ms  # noqa: E402
from metricstream import device  # noqa: E402
from metricstream.device import scores as device_scores  # noqa: E402
from tests.device_switches import cpu_path, device_path  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu-forced",
    pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA device here")),
]
HALVES = [torch.float16, torch.bfloat16]


@pytest.fixture(params=DEVICES)
def dev(request: pytest.FixtureRequest) -> Iterator[torch.device]:
    with device_path(request.param == "cpu-forced"):
        yield torch.device("cpu" if request.param == "cpu-forced" else "cuda")


def on(batch: tuple[Any, ...], where: torch.device) -> tuple[Any, ...]:
    return tuple(value.to(where) for value in batch)


def reference_of(make: Callable[[], Any], batches: list[tuple[Any, ...]]) -> Any:
    """The Numba path's accumulator of ``batches`` (CPU tensors)."""
    acc = make()
    with cpu_path():
        for batch in batches:
            acc.update(*batch)
    return acc


def twins(make: Callable[[], Any], batches: list[tuple[Any, ...]], where: torch.device):
    """(device-path accumulator, Numba-path accumulator) fed the same batches."""
    on_device = make()
    for batch in batches:
        on_device.update(*on(batch, where))
    assert on_device._device is not None
    return on_device, reference_of(make, batches)


def assert_same_state(a: Any, b: Any, exact_floats: bool = False) -> None:
    mine, theirs = a.state_arrays(), b.state_arrays()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype, name
        # The loss sums (a log and squares per sample) are never exact: within rounding.
        if mine[name].dtype.kind == "i" or (exact_floats and name != "losses"):
            np.testing.assert_array_equal(mine[name], theirs[name], strict=True, err_msg=name)
        else:
            np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-11, atol=0, err_msg=name)
    assert a.num_samples == b.num_samples
    assert_same_views(a, b)


def assert_same_views(a: Any, b: Any) -> None:
    """Curve views come from the integer histograms: equal exactly; the sums' views closely.
    (Absent classes make some views undefined, with a warning: compared as NaN.)"""
    np.testing.assert_array_equal(a.exact(), b.exact())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        average = None if a.task != "binary" else "macro"
        for mine, theirs in [
            (a.auroc(average), b.auroc(average)),
            (a.average_precision(average), b.average_precision(average)),
            *zip(a.roc_curve(0), b.roc_curve(0), strict=True),
        ]:
            np.testing.assert_array_equal(mine, theirs)
        if a.task == "multiclass":
            for k in (1, 2):
                assert a.top_k_accuracy(k) == b.top_k_accuracy(k)
        for view in ("brier_score", "log_loss", "calibration_error"):
            mine, theirs = getattr(a, view)(), getattr(b, view)()
            np.testing.assert_allclose(mine, theirs, rtol=1e-11, atol=1e-15, err_msg=view)


# ---------------------------------------------------------------------- streams
def labels(rng: np.random.Generator, n: int, k: int, dtype=torch.int64) -> torch.Tensor:
    return torch.from_numpy(rng.integers(0, k, n)).to(dtype)


def multiclass_probabilities(rng, n: int, k: int, dtype) -> torch.Tensor:
    logits = torch.from_numpy(rng.normal(size=(n, k)) * rng.uniform(0.5, 6)).to(torch.float64)
    probabilities = torch.softmax(logits, 1).to(dtype)
    if n > 4:
        probabilities[0] = 0.0
        probabilities[0, k - 1] = 1.0  # one-hot: the exact 0 and 1 bins
        probabilities[1] = 0.0
        probabilities[1, :3] = torch.tensor([0.25, 0.25, 0.5])  # ties: stable, optimistic ranks
        probabilities[2] = 1.0 / k  # all tied
    return probabilities


def multiclass_logits(rng, n: int, k: int, dtype) -> torch.Tensor:
    logits = torch.from_numpy(rng.normal(size=(n, k)) * rng.uniform(0.5, 8)).to(dtype)
    if n > 4:
        logits[0, 1] = logits[0, 0]  # ties
        logits[1, 0] = float("-inf")  # one class impossible
        logits[2, 0] = 80.0  # a gap past the log loss's clip
        logits[2, 1:] = -60.0
        logits[3] = 0.0
        logits[3, 1] = -0.0  # +0 and -0 tie
    return logits


def multiclass_stream(rng, dtype, k: int, logits: bool, ignore: int | None, weights: str):
    """Batches of labels (an absent class: never k - 1 after the first batch), scores,
    optional weights; ignored rows hold NaN scores."""
    batches = []
    for i, n in enumerate((1, 37, 256, 0, 9)):
        true = labels(rng, n, k if i == 0 else k - 1)
        scores = (multiclass_logits if logits else multiclass_probabilities)(rng, n, k, dtype)
        if ignore is not None and n > 4:
            true[4::5] = ignore
            scores[4::5] = float("nan")
        batch: tuple[Any, ...] = (true, scores)
        if weights == "whole":
            batch += (torch.from_numpy(rng.integers(0, 4, n)).to(torch.float32),)
        elif weights == "dyadic":
            batch += (torch.from_numpy(rng.integers(0, 16, n) / 8),)
        batches.append(batch)
    return batches


def elementwise_stream(rng, task: str, dtype, k: int, logits: bool, ignore, weights: str):
    batches = []
    for n in (1, 40, 300, 0):
        shape = (n,) if task == "binary" else (n, k)
        targets = torch.from_numpy(rng.integers(0, 2, shape))
        if logits:
            scores = torch.from_numpy(rng.normal(size=shape) * rng.uniform(0.5, 20))
        else:
            scores = torch.from_numpy(rng.uniform(size=shape) ** rng.uniform(0.2, 4))
        scores = scores.to(dtype)
        flat = scores.view(-1)
        if n > 5:
            flat[:3] = torch.tensor([0.0, 1.0, 0.5], dtype=dtype)  # exact bins
            if logits:
                flat[3:5] = torch.tensor([float("-inf"), -0.0], dtype=dtype)
        if ignore is not None and n > 5:
            targets.view(-1)[5::7] = ignore
            flat[5::7] = float("nan")
        batch: tuple[Any, ...] = (targets, scores)
        if weights == "whole":
            batch += (torch.from_numpy(rng.integers(0, 4, n)),)
        elif weights == "dyadic":
            batch += (torch.from_numpy(rng.integers(0, 16, n) / 4),)
        batches.append(batch)
    return batches


# ---------------------------------------------------------------------- bit-identical states
@pytest.mark.parametrize(
    ("dtype", "logits"),
    [
        pytest.param(torch.float32, False, marks=pytest.mark.slow),
        (torch.float16, False),
        (torch.float32, True),
        pytest.param(torch.bfloat16, False, marks=pytest.mark.slow),
        pytest.param(torch.float64, False, marks=pytest.mark.slow),
        pytest.param(torch.float16, True, marks=pytest.mark.slow),
        pytest.param(torch.bfloat16, True, marks=pytest.mark.slow),
        pytest.param(torch.float64, True, marks=pytest.mark.slow),
    ],
)
def test_multiclass_every_dtype(dev, dtype, logits) -> None:
    rng = np.random.default_rng(1)
    k = 5
    batches = multiclass_stream(rng, dtype, k, logits, None, "none")
    a, b = twins(lambda: ms.ScoreAccumulator("multiclass", k, logits=logits), batches, dev)
    assert a.num_samples == 303
    assert_same_state(a, b, exact_floats=dtype in HALVES and not logits)


@pytest.mark.parametrize("seed", [2, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    ("logits", "weights", "ignore"),
    [
        (False, "whole", -100),
        pytest.param(True, "dyadic", 7, marks=pytest.mark.slow),
        pytest.param(False, "dyadic", None, marks=pytest.mark.slow),
        pytest.param(True, "whole", -1, marks=pytest.mark.slow),
    ],
)
def test_multiclass_weights_and_ignore_index(dev, seed, logits, weights, ignore) -> None:
    rng = np.random.default_rng(seed)
    k = 4
    batches = multiclass_stream(rng, torch.float16, k, logits, ignore, weights)

    def make():
        return ms.ScoreAccumulator(
            "multiclass", k, logits=logits, ignore_index=ignore, weighted=weights == "dyadic"
        )

    a, b = twins(make, batches, dev)
    assert_same_state(a, b, exact_floats=not logits)


@pytest.mark.parametrize(
    ("task", "dtype", "logits"),
    [
        ("binary", torch.float64, False),
        ("binary", torch.float32, True),
        ("multilabel", torch.float16, False),
        ("multilabel", torch.float64, True),
        pytest.param("binary", torch.bfloat16, False, marks=pytest.mark.slow),
        pytest.param("binary", torch.float16, True, marks=pytest.mark.slow),
        pytest.param("multilabel", torch.float32, False, marks=pytest.mark.slow),
        pytest.param("multilabel", torch.bfloat16, True, marks=pytest.mark.slow),
    ],
)
def test_binary_and_multilabel(dev, task, dtype, logits) -> None:
    rng = np.random.default_rng(4)
    k = 1 if task == "binary" else 3
    batches = elementwise_stream(rng, task, dtype, k, logits, None, "none")
    a, b = twins(
        lambda: ms.ScoreAccumulator(task, None if k == 1 else k, logits=logits), batches, dev
    )
    assert_same_state(a, b, exact_floats=dtype in HALVES and not logits)


@pytest.mark.parametrize(
    ("task", "logits", "weights", "ignore"),
    [
        pytest.param("multilabel", False, "whole", -1, marks=pytest.mark.slow),
        ("binary", True, "dyadic", 9),
        pytest.param("binary", False, "whole", 3, marks=pytest.mark.slow),
        pytest.param("multilabel", True, "dyadic", -1, marks=pytest.mark.slow),
    ],
)
def test_elementwise_weights_and_ignore_index(dev, task, logits, weights, ignore) -> None:
    rng = np.random.default_rng(5)
    k = 1 if task == "binary" else 4
    batches = elementwise_stream(rng, task, torch.float32, k, logits, ignore, weights)

    def make():
        return ms.ScoreAccumulator(
            task,
            None if k == 1 else k,
            logits=logits,
            ignore_index=ignore,
            weighted=weights == "dyadic",
        )

    a, b = twins(make, batches, dev)
    assert_same_state(a, b)


@pytest.mark.slow  # a Numba specialisation per layout for the reference
def test_explicit_thresholds_key_shifts_and_class_axis(dev) -> None:
    rng = np.random.default_rng(6)
    k = 3
    edges = np.linspace(0, 1, 11)
    batches = []
    for n in (20, 64):
        scores = multiclass_probabilities(rng, n, k, torch.float32)
        scores[3, :] = torch.tensor([0.5, 0.3, 0.2])  # on thresholds
        batches.append((labels(rng, n, k), scores))
    a, b = twins(lambda: ms.ScoreAccumulator("multiclass", k, thresholds=edges), batches, dev)
    assert_same_state(a, b)
    # Softmax probabilities of logits against thresholds, channels-last segmentation scores.
    seg = [
        (labels(rng, 2 * 5, k).reshape(2, 5), torch.randn(2, 5, k, dtype=torch.float64) * 3)
        for _ in range(2)
    ]
    make = lambda: ms.ScoreAccumulator(  # noqa: E731
        "multiclass", k, logits=True, thresholds=edges, class_axis=-1
    )
    a, b = twins(make, seg, dev)
    assert_same_state(a, b)
    # Binary logits with a coarser uniform key, and with explicit logit thresholds.
    bl = [(labels(rng, 50, 2), torch.randn(50, dtype=torch.float64) * 9) for _ in range(2)]
    for make in (
        lambda: ms.ScoreAccumulator("binary", logits=True, bins=4096),
        lambda: ms.ScoreAccumulator("binary", logits=True, thresholds=[-2.0, 0.0, 0.25, 3.0]),
        lambda: ms.ScoreAccumulator("binary", logits=True, key_shifts=(16, 16, 16)),
    ):
        a, b = twins(make, bl, dev)
        assert_same_state(a, b)


def test_exp_is_the_kernels_exp_bit_for_bit() -> None:
    from metricstream.scores import _kernels

    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            -rng.exponential(3.0, 20000),
            -rng.uniform(0, 750, 20000),
            -(2.0 ** rng.uniform(-60, 3, 20000)),
            [0.0, -0.0, -np.inf, -745.13, -746.0, -1e-300, -708.4, -np.log(2) / 2],
        ]
    )
    expected = np.empty_like(x)
    _kernels.exp_nonpositive(x, expected)
    mine = device_scores._exp_nonpositive(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(mine.view(np.int64), expected.view(np.int64))


def test_state_stays_on_device_until_read(dev) -> None:
    acc = ms.ScoreAccumulator("binary")
    acc.update(torch.tensor([0, 1, 1], device=dev), torch.tensor([0.1, 0.8, 0.4], device=dev))
    assert acc._device.dirty and int(acc._arrays["curves"].sum()) == 0
    assert acc.auroc() == 1.0
    assert not acc._device.dirty and int(acc._arrays["curves"].sum()) == 3
    restored = ms.ScoreAccumulator.from_state_dict(acc.state_dict())
    assert_same_state(restored, acc, exact_floats=True)
    acc.update(torch.tensor([0], device=dev), torch.tensor([0.9], device=dev))
    assert ms.ScoreAccumulator.from_bytes(acc.to_bytes()).num_samples == 4
    acc.reset()
    assert acc.num_samples == 0
    acc.update(torch.tensor([1], device=dev), torch.tensor([0.5], device=dev))
    acc.reset()
    assert acc.num_samples == 0 and not acc._device.dirty


def test_numpy_and_device_updates_mix_and_merge(dev) -> None:
    rng = np.random.default_rng(8)
    k = 4
    batches = multiclass_stream(rng, torch.float32, k, False, None, "none")
    mixed = ms.ScoreAccumulator("multiclass", k)
    for i, (true, scores) in enumerate(batches):
        if i % 2:
            mixed.update(true.numpy(), scores.numpy())
        else:
            mixed.update(true.to(dev), scores.to(dev))
    parts = [ms.ScoreAccumulator("multiclass", k) for _ in range(2)]
    for i, batch in enumerate(batches):
        parts[i % 2].update(*on(batch, dev))
    merged = parts[1].merge(parts[0])
    reference = reference_of(lambda: ms.ScoreAccumulator("multiclass", k), batches)
    assert_same_state(mixed, reference)
    assert_same_state(merged, reference)


@settings(max_examples=10, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 60), max_size=4),
    seed=st.integers(0, 2**16),
    order=st.permutations(range(3)),
)
def test_any_split_and_merge_order_give_one_state(cuts, seed, order) -> None:
    rng = np.random.default_rng(seed)
    true = labels(rng, 60, 4)
    true[::7] = 9  # ignored
    scores = multiclass_logits(rng, 60, 4, torch.bfloat16)
    make = lambda: ms.ScoreAccumulator("multiclass", 4, logits=True, ignore_index=9)  # noqa: E731
    previous = device.force_device_path(True)
    try:
        whole = make().update(true, scores)
        bounds = [0, *sorted(cuts), 60]
        parts = [make() for _ in range(3)]
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            parts[i % 3].update(true[lo:hi], scores[lo:hi])
        merged = make()
        for i in order:
            merged.merge(parts[i])
    finally:
        device.force_device_path(previous)
    assert_same_state(merged, whole)


# ---------------------------------------------------------------------- bad input
NAN = float("nan")
INF = float("inf")


def _bad_cases() -> list[tuple[str, dict[str, Any], tuple[Any, ...], str]]:
    """(name, accumulator config, bad batch, words of the error) for 3 classes / labels."""
    mc: dict[str, Any] = {"task": "multiclass", "num_classes": 3}
    ml: dict[str, Any] = {"task": "multilabel", "num_classes": 3}
    good_p = [[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]
    return [
        ("label", mc, ([0, 5], good_p), "`y_true` holds label 5 at sample 1"),
        ("negative label", mc, ([-1, 0], good_p), "`y_true` holds label -1 at sample 0"),
        ("fractional label", mc, ([0.0, 1.5], good_p), "label 1.5 at sample 1"),
        (
            "nan score",
            mc,
            ([0, 1], [[0.2, 0.3, 0.5], [0.6, NAN, 0.4]]),
            "holds nan at flat position 4",
        ),
        (
            "above one",
            mc,
            ([0, 1], [[0.2, 0.3, 0.5], [1.5, -0.5, 0.0]]),
            "holds 1.5 at flat position 3",
        ),
        ("row sum", mc, ([0, 1], [[0.2, 0.3, 0.5], [0.6, 0.3, 0.3]]), "of sample 1 sum to 1.2"),
        (
            "logits -inf row",
            dict(mc, logits=True),
            ([0, 1], [[0.2, 3.0, -1.0], [-INF, -INF, -INF]]),
            "(logits) of sample 1 are all -inf",
        ),
        (
            "logits +inf",
            dict(mc, logits=True),
            ([0, 1], [[0.2, INF, -1.0], [1.0, 2.0, 3.0]]),
            "holds inf at flat position 1",
        ),
        ("weight", mc, ([0, 1], good_p, [1.0, -2.0]), "`weights` holds -2.0 at sample 1"),
        ("fractional weight", mc, ([0, 1], good_p, [0.5, 1.0]), "`weights` holds 0.5 at sample 0"),
        # A bad weight is reported before an earlier bad label, as the CPU path checks it first.
        ("weight first", mc, ([7, 1], good_p, [1.0, NAN]), "`weights` holds nan at sample 1"),
        (
            "target",
            ml,
            ([[0, 1, 2], [0, 0, 0]], good_p),
            "`y_true` holds target 2 at flat position 2",
        ),
        (
            "binary score",
            {"task": "binary"},
            ([0, 1, 1], [0.5, NAN, 2.0]),
            "holds nan at flat position 1",
        ),
        (
            "multilabel nan target",
            ml,
            ([[0, 1, 0], [NAN, 0, 0]], good_p),
            "target nan at flat position 3",
        ),
    ]


# Cases whose reference needs a Numba specialisation of its own (float labels, logits): slow.
SLOW_CASES = {"fractional label", "logits -inf row", "logits +inf", "multilabel nan target"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c[0], marks=pytest.mark.slow) if c[0] in SLOW_CASES else c[0]
        for c in _bad_cases()
    ],
)
def test_bad_batch_is_left_out_and_raised_at_the_next_read(dev, case) -> None:
    _, config, bad, words = next(c for c in _bad_cases() if c[0] == case)
    k = config.get("num_classes") or 1
    rng = np.random.default_rng(9)
    good = []
    for _ in range(3):
        if config["task"] == "multiclass":
            scores = torch.randn(20, k) * 3  # logits, not probabilities in disguise
            good.append((labels(rng, 20, k), scores if config.get("logits") else scores.softmax(1)))
        elif config["task"] == "multilabel":
            good.append((labels(rng, 60, 2).reshape(20, k), torch.rand(20, k)))
        else:
            good.append((labels(rng, 20, 2), torch.rand(20)))
    bad_tensors = tuple(torch.tensor(value) for value in bad)
    acc = ms.ScoreAccumulator(**config)
    acc.update(*on(good[0], dev)).update(*on(good[1], dev))
    acc.update(*on(bad_tensors, dev))  # no error yet: the device is not waited for
    acc.update(*on(bad_tensors, dev))
    acc.update(*on(good[2], dev))
    # Two bad values in each bad batch of these two cases (a weight and a label; two scores).
    seen = 4 if case in ("weight first", "binary score") else 2
    with pytest.raises(ValueError, match=rf"^{seen} bad values were seen on {dev}") as raised:
        acc.state_arrays()
    message = str(raised.value)
    assert words in message and "device batch 2" in message, message
    with pytest.raises(ValueError):  # the CPU path refuses the same batch
        reference_of(lambda: ms.ScoreAccumulator(**config), [bad_tensors])
    assert_same_state(acc, reference_of(lambda: ms.ScoreAccumulator(**config), good))


def test_error_counts_every_bad_value_and_names_the_first(dev) -> None:
    acc = ms.ScoreAccumulator("multiclass", 3, ignore_index=-1)
    p = torch.tensor([[0.2, 0.3, 0.5]] * 4, device=dev)
    acc.update(torch.tensor([0, -1, 1, 2], device=dev), p)  # ignored: fine
    nan_p = p.clone()
    nan_p[1] = float("nan")  # ignored below: not checked
    acc.update(torch.tensor([0, -1, 7, 8], device=dev), nan_p)
    acc.update(torch.tensor([6, 0, 0, 0], device=dev), p)
    with pytest.raises(ValueError) as raised:
        acc.state_arrays()
    message = str(raised.value)
    assert message.startswith(f"3 bad values were seen on {dev}")
    assert "`y_true` holds label 7 at sample 2 of device batch 1" in message
    assert "or equal `ignore_index` (-1)" in message
    assert acc.num_samples == 3


def test_eager_mode_raises_at_update(dev) -> None:
    device.eager(True)
    acc = ms.ScoreAccumulator("binary")
    acc.update(torch.tensor([0, 1], device=dev), torch.tensor([0.2, 0.9], device=dev))
    with pytest.raises(ValueError, match=r"holds 1.5 at flat position 1 of device batch 1"):
        acc.update(torch.tensor([0, 1], device=dev), torch.tensor([0.2, 1.5], device=dev))
    assert acc.num_samples == 2
    acc.update(torch.tensor([1], device=dev), torch.tensor([0.7], device=dev))
    assert acc.num_samples == 3


def test_meta_device_and_shape_errors_raise_at_once(dev) -> None:
    acc = ms.ScoreAccumulator("multiclass", 3)
    meta = torch.empty(4, 3, device="meta")
    with pytest.raises(ValueError, match="`y_pred` is a tensor on the 'meta' device"):
        acc.update(torch.tensor([0, 1, 2, 0], device=dev), meta)
    with pytest.raises(ValueError, match="`y_true` is a tensor on the 'meta' device"):
        acc.update(torch.empty(4, device="meta"), meta)
    t = torch.tensor([0, 1], device=dev)
    with pytest.raises(ValueError, match="has 2 class scores on axis 1, but `num_classes` is 3"):
        acc.update(t, torch.rand(2, 2, device=dev))
    with pytest.raises(ValueError, match="one more dimension than `y_true`"):
        acc.update(t, torch.rand(2, device=dev))
    with pytest.raises(ValueError, match=r"`weights` has shape \(3,\)"):
        acc.update(t, torch.full((2, 3), 1 / 3, device=dev), torch.ones(3, device=dev))
    with pytest.raises(ValueError, match="multilabel scores need a label axis"):
        ms.ScoreAccumulator("multilabel", 3).update(
            torch.zeros(3, device=dev), torch.zeros(3, device=dev)
        )
    with pytest.raises(ValueError, match="`class_axis` is 2, but `y_pred` has only 2"):
        ms.ScoreAccumulator("multilabel", 3, class_axis=2).update(
            torch.zeros(4, 3, device=dev), torch.zeros(4, 3, device=dev)
        )
    with pytest.raises(ValueError, match="one score per label"):
        ms.ScoreAccumulator("binary").update(t, torch.rand(2, 2, device=dev))
    with pytest.raises(ValueError, match="same shape for task='multilabel'"):
        ms.ScoreAccumulator("multilabel", 2).update(
            torch.zeros(2, 2, device=dev), torch.zeros(3, 2, device=dev)
        )
    with pytest.raises(TypeError, match="complex"):
        ms.ScoreAccumulator("binary").update(t, torch.zeros(2, dtype=torch.complex64, device=dev))
    assert acc.num_samples == 0
    assert acc._device is None  # nothing reached the device state


# ---------------------------------------------------------------------- torch.compile
COMPILE_CONFIGS = {
    "multiclass-logits": {"task": "multiclass", "num_classes": 4, "logits": True},
    "multiclass": {"task": "multiclass", "num_classes": 4},
    "binary-thresholds": {"task": "binary", "thresholds": [0.1, 0.5, 0.9]},
    "multilabel-logits": {"task": "multilabel", "num_classes": 3, "logits": True},
}


def _compile_batch(config: dict[str, Any], rng: np.random.Generator) -> tuple[Any, ...]:
    n = 32
    weights = labels(rng, n, 3)
    if config["task"] == "multiclass":
        scores = torch.from_numpy(rng.normal(size=(n, 4)) * 3).float()
        scores = scores if config.get("logits") else torch.softmax(scores, 1)
        return labels(rng, n, 4), scores, weights
    if config["task"] == "binary":
        return labels(rng, n, 2), torch.from_numpy(rng.uniform(size=n)), weights
    scores = torch.from_numpy(rng.normal(size=(n, 3)) * 4).float()
    return labels(rng, 3 * n, 2).reshape(n, 3), scores, weights


@contextlib.contextmanager
def _forced_and_fresh() -> Iterator[None]:
    import torch._dynamo

    previous = device.force_device_path(True)
    try:
        # One eager device update first: the dispatcher finds the family's module (an import)
        # outside the trace.
        ms.ScoreAccumulator("binary").update(torch.tensor([0]), torch.tensor([0.5]))
        torch._dynamo.reset()
        yield
    finally:
        device.force_device_path(previous)
        torch._dynamo.reset()


# torch.compile traces take seconds each: CI only (tests/test_device.py keeps one by default).
@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMPILE_CONFIGS))
def test_compiled_step_traces_without_graph_break(name) -> None:
    import torch._dynamo

    config = COMPILE_CONFIGS[name]
    with _forced_and_fresh():
        acc = ms.ScoreAccumulator(**config)

        def step(true, scores, weights):
            acc.update(true, scores, weights)
            return scores.sum()

        batch = _compile_batch(config, np.random.default_rng(10))
        explained = torch._dynamo.explain(step)(*batch)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
        # The traced graph ran once: the batch was counted, as eagerly.
        assert_same_state(acc, reference_of(lambda: ms.ScoreAccumulator(**config), [batch]))


@pytest.mark.slow  # inductor compiles a few hundred operations
@pytest.mark.parametrize("name", list(COMPILE_CONFIGS))
def test_compiled_step_counts_as_the_cpu_path(name) -> None:
    config = COMPILE_CONFIGS[name]
    with _forced_and_fresh():
        acc = ms.ScoreAccumulator(**config)

        def step(true, scores, weights):
            acc.update(true, scores, weights)
            return scores.sum()

        compiled = torch.compile(step, fullgraph=True)
        rng = np.random.default_rng(11)
        batches = [_compile_batch(config, rng) for _ in range(3)]
        for batch in batches:
            compiled(*batch)
        assert acc._device is not None
        assert_same_state(acc, reference_of(lambda: ms.ScoreAccumulator(**config), batches))
