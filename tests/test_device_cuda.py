"""On a CUDA GPU: updates never wait for the device, survive CUDA-graph capture and compile whole.

The logic of the device path is proven on the CPU (tests/test_device*.py, with the path forced);
these tests need a real GPU and are skipped without one. They check what only a GPU can show:
that no operation of an update synchronises with the host (torch's sync debug mode turns any
such operation into an error), that an update captured into a CUDA graph counts once per replay
and that a read after replays sees them, and that a compiled step runs on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import metricstream as ms  # noqa: E402
from metricstream import device  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

Batch = tuple[Any, ...]


def _confusion_labels(rng: np.random.Generator) -> Batch:
    return (rng.integers(0, 10, 4096), rng.integers(0, 10, 4096))


def _confusion_logits(rng: np.random.Generator) -> Batch:
    return (rng.integers(0, 10, 256), rng.normal(size=(256, 10)).astype(np.float32))


def _masks(rng: np.random.Generator) -> Batch:
    true = rng.integers(0, 151, (2, 64, 64)).astype(np.uint8)
    true[true == 150] = 255
    return (true, rng.integers(0, 150, (2, 64, 64)).astype(np.uint8))


def _weighted(rng: np.random.Generator) -> Batch:
    n = 1000
    return (rng.integers(0, 5, n), rng.integers(0, 5, n), rng.integers(0, 4, n).astype(np.float64))


def _binary_scores(rng: np.random.Generator) -> Batch:
    return (rng.integers(0, 2, 2000), rng.random(2000).astype(np.float32))


def _multiclass_logits(rng: np.random.Generator) -> Batch:
    return (rng.integers(0, 5, 512), rng.normal(size=(512, 5)).astype(np.float32))


def _multilabel_logits(rng: np.random.Generator) -> Batch:
    return (rng.integers(0, 2, (256, 20)), rng.normal(size=(256, 20)).astype(np.float32))


def _regression(rng: np.random.Generator) -> Batch:
    true = rng.normal(size=(512, 2))
    return (true, true + rng.normal(scale=0.1, size=(512, 2)))


CASES: dict[str, tuple[Callable[[], Any], Callable[[np.random.Generator], Batch]]] = {
    "confusion-labels": (lambda: ms.ConfusionAccumulator(10), _confusion_labels),
    "confusion-logits": (lambda: ms.ConfusionAccumulator(10), _confusion_logits),
    "confusion-masks": (lambda: ms.ConfusionAccumulator(150, ignore_index=255), _masks),
    "confusion-weights": (lambda: ms.ConfusionAccumulator(5), _weighted),
    "scores-binary": (lambda: ms.ScoreAccumulator("binary"), _binary_scores),
    "scores-logits": (
        lambda: ms.ScoreAccumulator("multiclass", 5, logits=True),
        _multiclass_logits,
    ),
    "multilabel-logits": (
        lambda: ms.MultilabelAccumulator(20, threshold=0.5, logits=True),
        _multilabel_logits,
    ),
    "regression": (lambda: ms.RegressionAccumulator(2), _regression),
}


@pytest.fixture(autouse=True)
def _not_eager() -> Iterator[None]:
    previous = device.eager(False)
    yield
    device.eager(previous)


def _on_cuda(batch: Batch) -> Batch:
    return tuple(torch.from_numpy(np.ascontiguousarray(value)).cuda() for value in batch)


def _counted_on_device(acc: Any) -> bool:
    return device._family_of(acc) is not None


def _assert_same_state(a: Any, b: Any) -> None:
    """Bit-identical, but for the score family's float sums (confidence, log loss), which the
    device adds in another order than the CPU's sequence (docs/device.md): within 1e-10."""
    mine, theirs = a.state_arrays(), b.state_arrays()
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert mine[name].dtype == theirs[name].dtype, name
        if isinstance(a, ms.ScoreAccumulator) and mine[name].dtype.kind == "f":
            np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-10, atol=0, err_msg=name)
        else:
            assert np.array_equal(mine[name], theirs[name]), name


@pytest.mark.parametrize("case", list(CASES))
def test_updates_never_wait_for_the_device(case: str) -> None:
    make, batch_of = CASES[case]
    acc, reference = make(), make()
    if not _counted_on_device(acc):
        pytest.skip(f"{type(acc).__name__} has no device kernel")
    rng = np.random.default_rng(7)
    batches = [batch_of(rng) for _ in range(5)]
    on_gpu = [_on_cuda(batch) for batch in batches]
    acc.update(*on_gpu[0])  # the first update allocates the device state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising operation raises
    try:
        for batch in on_gpu[1:]:
            acc.update(*batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for batch in batches:
        reference.update(*batch)  # numpy: the Numba path
    _assert_same_state(acc, reference)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_value_on_the_gpu_is_raised_at_the_next_read(case: str) -> None:
    make, batch_of = CASES[case]
    acc, reference = make(), make()
    if not _counted_on_device(acc):
        pytest.skip(f"{type(acc).__name__} has no device kernel")
    rng = np.random.default_rng(11)
    good, bad, after = batch_of(rng), list(batch_of(rng)), batch_of(rng)
    pred = np.array(bad[1], dtype=np.float64 if bad[1].dtype.kind == "f" else np.int64)
    pred.reshape(-1)[3] = np.nan if pred.dtype.kind == "f" else -7
    bad[1] = pred.astype(bad[1].dtype) if pred.dtype.kind == "f" else pred
    for batch in (good, tuple(bad), after):
        acc.update(*_on_cuda(batch))
    with pytest.raises(ValueError, match="device batch 1"):
        acc.state_arrays()
    reference.update(*good)
    reference.update(*after)
    _assert_same_state(acc, reference)


def test_captured_update_counts_once_per_replay_and_reads_see_replays() -> None:
    rng = np.random.default_rng(3)
    y_true, logits = _on_cuda(_confusion_logits(rng))
    acc = ms.ConfusionAccumulator(10)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            acc.update(y_true, logits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        acc.update(y_true, logits)
    one = ms.ConfusionAccumulator(10)
    one.update(y_true.cpu().numpy(), logits.cpu().numpy())
    for _ in range(5):
        graph.replay()
    assert np.array_equal(acc.matrix, 8 * one.matrix)  # 3 eager updates + 5 replays
    first = acc.accuracy()
    for _ in range(2):
        graph.replay()
    assert np.array_equal(acc.matrix, 10 * one.matrix)  # the read saw the new replays
    assert acc.accuracy() == first == one.accuracy()
    assert acc.num_samples == 10 * 256


def test_compiled_step_runs_whole_on_the_gpu() -> None:
    rng = np.random.default_rng(5)
    y_true, logits = _on_cuda(_confusion_logits(rng))
    acc = ms.ConfusionAccumulator(10)

    def step(labels: Any, scores: Any) -> Any:
        acc.update(labels, scores)
        return scores.sum()

    explained = torch._dynamo.explain(step)(y_true, logits)
    assert explained.graph_break_count == 0, explained.break_reasons
    acc.reset()
    compiled = torch.compile(step, fullgraph=True)
    for _ in range(3):
        compiled(y_true, logits)
    one = ms.ConfusionAccumulator(10)
    one.update(y_true.cpu().numpy(), logits.cpu().numpy())
    assert np.array_equal(acc.matrix, 3 * one.matrix)


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("confusion")])
def test_every_family_traces_without_a_graph_break(case: str) -> None:
    make, batch_of = CASES[case]
    acc = make()
    if not _counted_on_device(acc):
        pytest.skip(f"{type(acc).__name__} has no device kernel")
    batch = _on_cuda(batch_of(np.random.default_rng(9)))

    def step(*tensors: Any) -> Any:
        acc.update(*tensors)
        return tensors[0].sum()

    explained = torch._dynamo.explain(step)(*batch)
    assert explained.graph_break_count == 0, explained.break_reasons
