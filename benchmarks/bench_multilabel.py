"""Multilabel benchmark: ``python -m benchmarks.bench_multilabel [--quick]``.

Cases (every compared result is checked equal before anything is timed; ratios come from the
same interleaved run):

1. one update of a 256×20 and a 256×1000 indicator batch, beside torchmetrics'
   ``MultilabelStatScores`` update (what its multilabel precision/recall/F1 update) and one
   scikit-learn ``multilabel_confusion_matrix`` call;
2. the same batch as float32 logits (``logits=True``) and as float32 probabilities (checked to lie
   in [0, 1] by the count's own validity test), the threshold fused into the kernel, beside the
   indicator input;
3. a 10^6 × 100 indicator matrix counted in one update (on all threads and on one), beside a
   read-only pass over the same two matrices (a Numba loop that only reads them);
4. label sets (CSR) over L = 10^5 labels, 256 samples of about 5 labels each;
5. state size for several L (O(L); O(L²) only with co-occurrence).

Measured on the shared 2-core development machine (load average 5-6), CPU time, the previous
version of the accumulator and this one (see docs/multilabel.md, "Speed"):

    256×20 indicators      3.1-3.2 µs              ->  2.96 µs (torchmetrics 33×)
    256×1000 indicators    22-23 µs                ->  11.0 µs (153×)
    256×1000 logits        44-48 µs (2.0×)         ->  23.8 µs (2.2×; reading them: 1.44×)
    10^6×100 indicators    17.6-18.3 ms (2.7×)     ->  13.0-14.4 ms on 1 thread (1.94-2.06× a
                                                       read-only pass of 7.0 ms)

Then on the Intel Xeon machine (AVX-512, load 0.7-1.3), three alternating runs, the one-call
path through ``count_routed`` (state by address, no reference counting, aligned lanes):

    256×20 indicators      2.63-2.76 µs (33-35×)   ->  2.19-2.38 µs (40-43×; one run 3.64 µs)
    256×1000 indicators    13.6-15.1 µs (165-196×) ->  12.4-13.2 µs (187-238×)
    256×1000 logits        23.3-24.4 µs (1.56-1.77×) -> 21.4-23.5 µs (1.72-1.80×; reading
                                                       them: 1.29-1.45×)
    10^6×100 indicators    1.30-1.36× a read-only pass -> 1.29-1.40×

Then on an AVX2 machine (AMD Zen 3, no AVX-512; load 1.7-1.8), three ``--quick`` runs of the
previous kernels and of the AVX2 ones (32-entry fused chunks, no scalarised masked loads,
prefetched long rows, packed AP_s/PP_s scatters), alternately:

    256×20 indicators      3.65-4.31 µs (34-44×)   ->  3.07-3.47 µs (42-55×)
    256×20 logits          4.98-5.50 µs            ->  4.23-5.20 µs
    256×1000 indicators    23.9-33.2 µs (64-130×)  ->  14.2-16.6 µs (141-201×)
    256×1000 logits        46.4-65.7 µs            ->  40.7-44.2 µs (reading them: 27-29 µs)
    10^5×100 indicators    1.87-1.98× a read-only pass -> 1.61-1.77×
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from numba import njit

from metricstream.multilabel import LabelSets, MultilabelAccumulator

from ._timing import cpu_description, format_seconds, interleaved


@njit(nogil=True, cache=True)
def _read_only_pass(y_true, y_pred):  # pragma: no cover - timed, not tested
    """Reads both matrices once (the floor of any counting pass over them)."""
    total = np.uint64(0)
    n, num_labels = y_true.shape
    for i in range(n):
        acc = np.uint8(0)
        t = y_true[i]
        p = y_pred[i]
        for j in range(num_labels):
            # truncated to uint8 at each step: Numba widens uint8 operations to int64, which
            # would make this loop 3x slower than the memory it reads
            acc = np.uint8(acc | np.uint8(t[j] ^ p[j]))
        total += acc
    return total


@njit(nogil=True, cache=True)
def _read_only_scores(y_true, scores, threshold):  # pragma: no cover - timed, not tested
    """Reads the truth and compares the scores with the threshold (the floor of any update
    from scores)."""
    total = np.uint64(0)
    n, num_labels = y_true.shape
    for i in range(n):
        acc = np.uint8(0)
        t = y_true[i]
        s = scores[i]
        for j in range(num_labels):
            acc = np.uint8(acc | np.uint8(t[j] ^ np.uint8(s[j] >= threshold)))
        total += acc
    return total


def _batch(rng: np.random.Generator, n: int, num_labels: int) -> tuple[np.ndarray, np.ndarray]:
    y_true = rng.random((n, num_labels)) < 0.3
    y_pred = rng.random((n, num_labels)) < 0.3
    return y_true.astype(np.uint8), y_pred.astype(np.uint8)


def _torchmetrics_case(y_true: np.ndarray, y_pred: np.ndarray, acc: MultilabelAccumulator):
    try:
        import torch
        from torchmetrics.classification import MultilabelStatScores
    except ImportError:
        return None
    torch.set_num_threads(1)
    target, preds = (
        torch.from_numpy(y_true.astype(np.int64)),
        torch.from_numpy(y_pred.astype(np.int64)),
    )
    metric = MultilabelStatScores(num_labels=y_true.shape[1], average=None, validate_args=False)
    metric.update(preds, target)
    tp = metric.compute()[:, 0].numpy()
    assert np.array_equal(tp, acc.multilabel_confusion_matrix()[:, 1, 1]), "torchmetrics TP"
    metric.reset()
    return lambda: metric.update(preds, target)


def update_case(rng: np.random.Generator, num_labels: int, target: str, repeats: int) -> list[str]:
    import sklearn.metrics as skm

    y_true, y_pred = _batch(rng, 256, num_labels)
    logits = np.where(y_pred, 1.0, -1.0).astype(np.float32) * rng.random(y_pred.shape, np.float32)
    # probabilities on the same side of 0.5 as the logits of 0
    uniform = rng.random(y_pred.shape)
    probabilities = np.where(y_pred, 0.5 + 0.5 * uniform, 0.49 * uniform).astype(np.float32)
    acc = MultilabelAccumulator(num_labels).update(y_true, y_pred)
    fused = MultilabelAccumulator(num_labels, logits=True).update(y_true, logits)
    from_probabilities = MultilabelAccumulator(num_labels).update(y_true, probabilities)
    for scored in (fused, from_probabilities):
        assert np.array_equal(
            acc.multilabel_confusion_matrix(), scored.multilabel_confusion_matrix()
        ), "fused threshold"
    assert np.array_equal(
        acc.multilabel_confusion_matrix(), skm.multilabel_confusion_matrix(y_true, y_pred)
    ), "scikit-learn"
    empty_true, empty_pred = y_true[:0], y_pred[:0]
    fresh = MultilabelAccumulator(num_labels).update(empty_true, empty_pred)
    threshold = np.float32(0.0)
    _read_only_scores(y_true, logits, threshold)
    candidates = {
        "metricstream indicator": lambda: acc.update(y_true, y_pred),
        "metricstream logits (fused threshold)": lambda: fused.update(y_true, logits),
        "metricstream probabilities (range checked)": lambda: from_probabilities.update(
            y_true, probabilities
        ),
        "floor: update of an empty batch": lambda: fresh.update(empty_true, empty_pred),
        "floor: read-only pass over the logits": lambda: _read_only_scores(
            y_true, logits, threshold
        ),
        "scikit-learn multilabel_confusion_matrix": lambda: skm.multilabel_confusion_matrix(
            y_true, y_pred
        ),
    }
    torch_update = _torchmetrics_case(y_true, y_pred, acc)
    if torch_update is not None:
        candidates["torchmetrics MultilabelStatScores.update"] = torch_update
    # CPU time: every candidate runs on one thread (torch too), and other processes on the
    # shared machine inflate it less than the wall clock
    times = interleaved(candidates, repeats, min_sample=0.02, timer=time.process_time)
    base = times["metricstream indicator"]
    lines = [f"256×{num_labels} update (target {target}), CPU time:"]
    for name, seconds in times.items():
        lines.append(f"  {name:45s} {format_seconds(seconds):>10s}  {seconds / base:7.2f}×")
    return lines


def update_cases(repeats: int) -> list[str]:
    rng = np.random.default_rng(0)
    return update_case(rng, 20, "≤ 3 µs, ≥ 40× torchmetrics", repeats) + update_case(
        rng, 1000, "≤ 60 µs, ≥ 150× torchmetrics", repeats
    )


def large_case(repeats: int, n: int) -> list[str]:
    import metricstream

    rng = np.random.default_rng(1)
    y_true, y_pred = _batch(rng, n, 100)
    acc = MultilabelAccumulator(100)
    _read_only_pass(y_true, y_pred)
    acc.update(y_true[:10], y_pred[:10])
    threads = metricstream.get_num_threads()
    reference = MultilabelAccumulator(100, weighted=True).update(y_true, y_pred)
    assert np.array_equal(
        acc.reset().update(y_true, y_pred).multilabel_confusion_matrix(),
        reference.multilabel_confusion_matrix(),
    ), "threads"

    def one_thread() -> None:
        metricstream.set_num_threads(1)
        try:
            acc.reset().update(y_true, y_pred)
        finally:
            metricstream.set_num_threads(threads)

    candidates = {
        "read-only pass": lambda: _read_only_pass(y_true, y_pred),
        "metricstream update (1 thread)": one_thread,
    }
    # CPU time for the one-thread cases (other processes inflate it less than the wall
    # clock); the wall clock for the threaded update (CPU time would sum its threads)
    times = interleaved(candidates, repeats, timer=time.process_time)
    times.update(
        interleaved(
            {
                f"metricstream update ({threads} threads, wall clock)": lambda: acc.reset().update(
                    y_true, y_pred
                )
            },
            repeats,
        )
    )
    assert acc.num_samples == n
    lines = [f"{n}×100 indicator rows (target: within 2× of a read-only pass):"]
    for name, seconds in times.items():
        ratio = seconds / times["read-only pass"]
        lines.append(
            f"  {name:50s} {format_seconds(seconds):>10s}  {ratio:.2f}× the read-only pass"
        )
    return lines


def sets_case(repeats: int) -> list[str]:
    rng = np.random.default_rng(2)
    num_labels = 100_000
    lists = [[list(rng.choice(num_labels, 5, replace=False)) for _ in range(256)] for _ in range(2)]
    true, pred = LabelSets.from_lists(lists[0]), LabelSets.from_lists(lists[1])
    acc = MultilabelAccumulator(num_labels).update(true, pred)
    times = interleaved({"label sets": lambda: acc.update(true, pred)}, repeats, 0.02)
    return [
        f"256 samples × ~5 labels of L = {num_labels} as CSR label sets: "
        f"{format_seconds(times['label sets'])} per update"
    ]


def memory_lines() -> list[str]:
    lines = ["state size (bytes; independent of the number of samples):"]
    for num_labels in (20, 1000, 100_000):
        plain = MultilabelAccumulator(num_labels)
        size = sum(a.nbytes for a in plain.state_arrays().values())
        line = f"  L = {num_labels:>6}: {size:>12,}"
        if num_labels <= 1000:
            cooc = MultilabelAccumulator(num_labels, cooccurrence=True)
            size = sum(a.nbytes for a in cooc.state_arrays().values())
            line += f"   with co-occurrence: {size:>12,}"
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 10^5 rows")
    args = parser.parse_args()
    repeats = 5 if args.quick else 15
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"CPU: {cpu_description()}")
    for line in update_cases(repeats):
        print(line)
    for line in large_case(3 if args.quick else 7, 100_000 if args.quick else 1_000_000):
        print(line)
    for line in sets_case(repeats):
        print(line)
    for line in memory_lines():
        print(line)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
