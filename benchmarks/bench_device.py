"""Device-path benchmark: ``python -m benchmarks.bench_device [--device cuda] [--quick]``.

Labels per second of a confusion-matrix update on whatever torch device is given, beside
``torch.bincount`` of the fused keys and torchmetrics' ``MulticlassConfusionMatrix`` on the same
tensors (and, on the CPU, metricstream's Numba path). On the CPU the device path is forced with
``metricstream.device.force_device_path``; it is then plain torch operations on the CPU, which
proves the design but is not where it is meant to run. Every compared matrix is checked equal
before anything is timed; ratios come from the same interleaved run (wall clock; on a GPU each
call is followed by ``torch.cuda.synchronize()``, so that the work is counted, not its launch).

Cases:

1. int64 labels and predictions, K = 10 (10^7 labels; ``--quick``: 10^6);
2. uint8 segmentation masks, K = 150, ``ignore_index=255`` (8 x 512 x 512; ``--quick``: 2 x);
3. one training step: ``(256, 10)`` float32 logits beside 256 labels, in µs per update.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from ._timing import cpu_description, format_seconds, interleaved


def _cases(quick: bool, device: Any) -> list[tuple[str, Any, Any, int, int | None]]:
    import torch

    rng = np.random.default_rng(0)
    n = 10**6 if quick else 10**7
    k = 10
    labels = torch.from_numpy(rng.integers(0, k, n)).to(device)
    preds = torch.from_numpy(rng.integers(0, k, n)).to(device)
    masks = 2 if quick else 8
    true_mask = rng.integers(0, 151, (masks, 512, 512)).astype(np.uint8)
    true_mask[true_mask == 150] = 255
    pred_mask = rng.integers(0, 150, (masks, 512, 512)).astype(np.uint8)
    step_true = torch.from_numpy(rng.integers(0, k, 256)).to(device)
    step_logits = torch.from_numpy(rng.normal(size=(256, k)).astype(np.float32)).to(device)
    return [
        (f"int64 labels, K=10, N={n:.0e}", labels, preds, k, None),
        (
            f"uint8 masks, K=150, ignore 255, {masks}x512x512",
            torch.from_numpy(true_mask).to(device),
            torch.from_numpy(pred_mask).to(device),
            150,
            255,
        ),
        ("(256, 10) logits step", step_true, step_logits, k, None),
    ]


def _candidates(
    y_true: Any, y_pred: Any, k: int, ignore: int | None, device: Any
) -> tuple[dict[str, Callable[[], object]], np.ndarray]:
    import torch

    import metricstream as ms
    from metricstream import device as msdevice

    sync = torch.cuda.synchronize if getattr(device, "type", "cpu") == "cuda" else (lambda: None)
    assert isinstance(y_true, torch.Tensor) and isinstance(y_pred, torch.Tensor)
    acc = ms.ConfusionAccumulator(k, ignore_index=ignore)
    msdevice.force_device_path(True)
    acc.update(y_true, y_pred)
    reference = acc.matrix.copy()

    def device_update() -> None:
        acc.update(y_true, y_pred)
        sync()

    def device_update_and_read() -> None:
        acc.update(y_true, y_pred)
        acc.matrix  # noqa: B018 - the read is the point: one copy to the host

    candidates: dict[str, Callable[[], object]] = {
        "metricstream device path": device_update,
        "  + read the matrix": device_update_and_read,
    }
    labels = y_true.reshape(-1).long()
    preds = y_pred.argmax(1) if y_pred.ndim == y_true.ndim + 1 else y_pred.reshape(-1).long()
    if ignore is not None:
        keep = labels != ignore
        labels, preds = labels[keep], preds.reshape(-1)[keep]
    counted = torch.bincount(labels * k + preds.reshape(-1), minlength=k * k).reshape(k, k)
    assert np.array_equal(counted.cpu().numpy(), reference), "bincount disagrees"

    def bincount() -> None:
        # What torch.bincount needs: fused keys (and the ignored samples dropped beforehand).
        t = y_true.reshape(-1).long()
        p = y_pred.argmax(1) if y_pred.ndim == y_true.ndim + 1 else y_pred.reshape(-1).long()
        if ignore is not None:
            keep = t != ignore
            t, p = t[keep], p.reshape(-1)[keep]
        torch.bincount(t * k + p.reshape(-1), minlength=k * k)
        sync()

    candidates["torch.bincount (fused keys)"] = bincount
    try:
        from torchmetrics.classification import MulticlassConfusionMatrix
    except ImportError:
        pass
    else:
        metric = MulticlassConfusionMatrix(k, ignore_index=ignore, validate_args=False).to(device)
        metric.update(y_pred, y_true)
        assert np.array_equal(metric.compute().cpu().numpy(), reference), "torchmetrics differs"

        def torchmetrics_update() -> None:
            metric.update(y_pred, y_true)
            sync()

        candidates["torchmetrics (validate_args=False)"] = torchmetrics_update
    if getattr(device, "type", "cpu") == "cpu":
        host = ms.ConfusionAccumulator(k, ignore_index=ignore)

        def numba_path() -> None:
            previous = msdevice.force_device_path(False)
            host.update(y_true, y_pred)
            msdevice.force_device_path(previous)

        numba_path()
        assert np.array_equal(host.matrix, reference), "the Numba path differs"
        candidates["metricstream Numba path (CPU)"] = numba_path
    return candidates, reference


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="a torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    args = parser.parse_args(argv)
    import torch

    from metricstream import device as msdevice

    device = torch.device(args.device)
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{cpu_description()}, {torch.get_num_threads()} torch threads"
    )
    print(f"device: {device} ({where}); torch {torch.__version__}")
    repeats = 5 if args.quick else 15
    previous = msdevice.force_device_path(True)
    try:
        for title, y_true, y_pred, k, ignore in _cases(args.quick, device):
            candidates, _ = _candidates(y_true, y_pred, k, ignore, device)
            times = interleaved(candidates, repeats, min_sample=0.05)
            assert isinstance(y_true, torch.Tensor)
            n = y_true.numel()
            base = times["metricstream device path"]
            print(f"\n{title}")
            for name, seconds in times.items():
                print(
                    f"  {name:38s} {format_seconds(seconds):>10s}  {n / seconds / 1e9:8.3f} "
                    f"G labels/s  x{seconds / base:6.2f} of the device path's time"
                )
        if device.type == "cuda":
            _training_step(device, 100 if args.quick else 2000)
            _families(device, args.quick, repeats)
    finally:
        msdevice.force_device_path(previous)


def _training_step(device: Any, updates: int) -> None:
    """One (256, 10) logits update as a training loop issues it: the host's time per update when
    nothing waits for the GPU (``updates`` updates, then one sync), whether any operation of an
    update synchronises (torch's sync debug mode set to raise), and one CUDA-graph replay."""
    import time

    import torch

    import metricstream as ms

    rng = np.random.default_rng(1)
    y_true = torch.from_numpy(rng.integers(0, 10, 256)).to(device)
    logits = torch.from_numpy(rng.normal(size=(256, 10)).astype(np.float32)).to(device)

    def per_update(update: Callable[[], object]) -> float:
        for _ in range(20):
            update()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(updates):
            update()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / updates

    acc = ms.ConfusionAccumulator(10)
    acc.update(y_true, logits)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            acc.update(y_true, logits)
        syncs = "0 (torch's sync debug mode, set to raise, saw none)"
    except RuntimeError as error:
        syncs = f"at least 1: {error}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    results = {"metricstream device path, eager": per_update(lambda: acc.update(y_true, logits))}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            acc.update(y_true, logits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        acc.update(y_true, logits)
    results["metricstream, one CUDA-graph replay"] = per_update(graph.replay)
    try:
        from torchmetrics.classification import MulticlassConfusionMatrix
    except ImportError:
        pass
    else:
        checked = MulticlassConfusionMatrix(10).to(device)
        unchecked = MulticlassConfusionMatrix(10, validate_args=False).to(device)
        results["torchmetrics"] = per_update(lambda: checked.update(logits, y_true))
        results["torchmetrics (validate_args=False)"] = per_update(
            lambda: unchecked.update(logits, y_true)
        )
    fresh = ms.ConfusionAccumulator(10)

    def step(labels: Any, scores: Any) -> None:
        fresh.update(labels, scores)

    try:  # the update fused into a compiled step (the compile itself is not timed)
        compiled = torch.compile(step, fullgraph=True)
        results["metricstream in a compiled step"] = per_update(lambda: compiled(y_true, logits))
    except Exception as error:  # noqa: BLE001 - report, and print what was measured
        print(f"  (compiled step not measured: {type(error).__name__}: {error})")
    print(f"\n(256, 10) float32 logits, one update, {updates} updates then one sync")
    print(f"  host syncs per metricstream update: {syncs}")
    base = results["metricstream device path, eager"]
    for name, seconds in results.items():
        print(f"  {name:38s} {seconds * 1e6:8.1f} µs  x{seconds / base:6.2f}")


def _families(device: Any, quick: bool, repeats: int) -> None:
    """Values per second of the other families' device paths (beside their Numba path on the
    same data copied to the host, and the copy itself)."""
    import torch

    import metricstream as ms
    from metricstream import device as msdevice

    rng = np.random.default_rng(2)
    n = 10**6 if quick else 10**7
    rows = n // 100
    repeats = min(repeats, 5)
    cases = [
        (
            f"binary scores, float32, N={n:.0e}",
            lambda: ms.ScoreAccumulator("binary"),
            (rng.integers(0, 2, n), rng.random(n).astype(np.float32)),
        ),
        (
            f"multiclass logits, float32, ({rows // 10}, 10)",
            lambda: ms.ScoreAccumulator("multiclass", 10, logits=True),
            (rng.integers(0, 10, rows // 10), rng.normal(size=(rows // 10, 10)).astype(np.float32)),
        ),
        (
            f"multilabel logits, float32, ({rows}, 100)",
            lambda: ms.MultilabelAccumulator(100, logits=True),
            (rng.integers(0, 2, (rows, 100)), rng.normal(size=(rows, 100)).astype(np.float32)),
        ),
        (
            f"regression, float32, N={rows * 10:.0e}",
            lambda: ms.RegressionAccumulator(),
            (
                rng.normal(size=rows * 10).astype(np.float32),
                rng.normal(size=rows * 10).astype(np.float32),
            ),
        ),
    ]
    for title, make, (y_true, y_pred) in cases:
        acc, host = make(), make()
        if msdevice._family_of(acc) is None:
            print(f"\n{title}: no device kernel, skipped")
            continue
        t_gpu = torch.from_numpy(y_true).to(device)
        p_gpu = torch.from_numpy(y_pred).to(device)

        def on_device(acc: Any = acc, t: Any = t_gpu, p: Any = p_gpu) -> None:
            acc.update(t, p)
            torch.cuda.synchronize()

        def numba_path(host: Any = host, t: Any = y_true, p: Any = y_pred) -> None:
            host.update(t, p)

        def copy_to_host(t: Any = t_gpu, p: Any = p_gpu) -> None:
            t.cpu()
            p.cpu()

        times = interleaved(
            {
                "metricstream device path": on_device,
                "Numba path (host arrays)": numba_path,
                "copy of the batch to the host": copy_to_host,
            },
            repeats,
            min_sample=0.05,
        )
        values = int(np.prod(y_pred.shape))
        base = times["metricstream device path"]
        print(f"\n{title}")
        for name, seconds in times.items():
            print(
                f"  {name:38s} {format_seconds(seconds):>10s}  {values / seconds / 1e9:8.3f} "
                f"G values/s  x{seconds / base:6.2f} of the device path's time"
            )


if __name__ == "__main__":
    main()
