"""The training-loop update path: one ``update`` per batch, every batch size, every input kind.

``python -m benchmarks.bench_training_loop [--quick] [--cpu] [--json PATH] [--compare PATH]``
from the repository root (a few minutes; ``--quick`` skips the largest batches, ``--cpu`` times
CPU time instead of the wall clock).

For every batch size N in {1, 16, 64, 256, 1024, 4096, 10^5, 10^6} and class count C in
{2, 10, 100, 1000} with N × C ≤ 10^8 it times one ``update`` of

* int64 labels from numpy and from torch tensors;
* float32 (N, C) logits from numpy: metricstream's fused argmax against ``np.argmax`` + update;
* the same logits as torch tensors (also with ``requires_grad``) against torchmetrics'
  ``MulticlassConfusionMatrix.update`` on the same tensors;
* float16 logits from numpy and bfloat16 logits from torch (``torch.argmax`` + update as the
  two-step baseline, numpy has no bfloat16);
* binary probabilities of shape (N,) with a threshold (C = 2 rows), numpy float32 and torch.

Every compared result is checked equal to metricstream's matrix before anything is timed. Times
are medians of interleaved repeats (every repeat times every candidate once, in a shuffled order);
ratios come from the same run. An input kind the installed metricstream does not accept is
reported as "unsupported" (so the script also measures older versions, for before/after tables).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from metricstream import ConfusionAccumulator

from ._timing import format_seconds, interleaved

SIZES = [1, 16, 64, 256, 1024, 4096, 100_000, 1_000_000]
CLASSES = [2, 10, 100, 1000]
MAX_SCORES = 100_000_000

Candidate = Callable[[], object]


def _have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _matrix_of(
    update: Callable[[ConfusionAccumulator], object],
    k: int,
    make: Callable[[int], ConfusionAccumulator] = ConfusionAccumulator,
) -> np.ndarray | None:
    acc = make(k)
    try:
        update(acc)
    except (TypeError, ValueError) as error:
        print(f"    unsupported: {str(error)[:100]}", file=sys.stderr)
        return None
    return acc.matrix.copy()


def _threshold_accumulator(k: int) -> ConfusionAccumulator:
    """A binary accumulator predicting class 1 where the score is >= 0.5."""
    return ConfusionAccumulator(k, threshold=0.5)  # type: ignore[call-arg]


def _threshold_supported() -> bool:
    try:
        _threshold_accumulator(2).update(np.zeros(1, np.int64), np.zeros(1, np.float32))
    except TypeError:
        print("    unsupported: ConfusionAccumulator(threshold=)", file=sys.stderr)
        return False
    return True


# Inputs up to this size are copied for each candidate (see ``_case``); larger ones do not stay
# in the 32 MB last-level cache from one candidate to the next anyway.
OWN_COPY_BYTES = 64 << 20


def _own(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` in memory of its own (the array itself when it is large)."""
    return array.copy() if array.nbytes <= OWN_COPY_BYTES else array


def _reading(
    update: Callable[..., object], *inputs: object
) -> Callable[[ConfusionAccumulator], object]:
    """``update(accumulator, *inputs)`` as a function of the accumulator alone."""
    return lambda accumulator: update(accumulator, *inputs)


def _case(n: int, k: int, rng: np.random.Generator, torch_ok: bool) -> tuple[dict, dict]:
    """Build the candidates of one (N, C) point; return ({name: function}, {name: matrix}).

    Every candidate reads its own copy of the inputs (same values, other memory): a candidate
    timed right after another one that read the same arrays would find them in the cache, and
    the order of the candidates repeats from round to round, so the same one would always
    profit (measured: `np.argmax` + update, timed after the fused update, read the (1024, 1000)
    logits warm and looked 1.3× faster than the fused update; with copies the two are even).
    """
    y_true = rng.integers(0, k, n)
    y_pred = rng.integers(0, k, n)
    # Normal logits that are not all distinct in float16/bfloat16 would make the argmax depend
    # on the rounding; the matrices are compared per input kind, so ties are harmless.
    logits = rng.normal(size=(n, k)).astype(np.float32)
    logits16 = logits.astype(np.float16)
    expected_labels = np.bincount(k * y_true + y_pred, minlength=k * k).reshape(k, k)
    expected_scores = np.bincount(k * y_true + np.argmax(logits, 1), minlength=k * k).reshape(k, k)
    expected16 = np.bincount(k * y_true + np.argmax(logits16, 1), minlength=k * k).reshape(k, k)

    functions: dict[str, Candidate] = {}
    checks: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}

    def add(
        name: str,
        update: Callable[[ConfusionAccumulator], object],
        expected: np.ndarray,
        make: Callable[[int], ConfusionAccumulator] = ConfusionAccumulator,
    ) -> None:
        got = _matrix_of(update, k, make)
        if got is None:
            return
        if not np.array_equal(got, expected):
            raise AssertionError(f"N={n} C={k}: {name} gives a different matrix")
        acc = make(k)
        functions[name] = lambda: update(acc)
        checks[name] = (expected, got)

    def update(a: ConfusionAccumulator, t: object, p: object) -> object:
        return a.update(t, p)

    # Each two-step candidate counts into an accumulator of its own, as each fused one does.
    def argmax_update(t: object, s: np.ndarray) -> Candidate:
        two_step = ConfusionAccumulator(k)
        return lambda: two_step.update(t, np.argmax(s, 1))

    add("labels numpy", _reading(update, _own(y_true), _own(y_pred)), expected_labels)
    add("logits f32 numpy", _reading(update, _own(y_true), _own(logits)), expected_scores)
    functions["np.argmax + update f32"] = argmax_update(_own(y_true), _own(logits))
    add("logits f16 numpy", _reading(update, _own(y_true), _own(logits16)), expected16)
    functions["np.argmax + update f16"] = argmax_update(_own(y_true), _own(logits16))
    if k == 2:
        probabilities = (1.0 / (1.0 + np.exp(-(logits[:, 1] - logits[:, 0])))).astype(np.float32)
        hard = (probabilities >= 0.5).astype(np.int64)
        expected_binary = np.bincount(2 * y_true + hard, minlength=4).reshape(2, 2)
        threshold_ok = _threshold_supported()
        if threshold_ok:
            add(
                "probs f32 numpy",
                _reading(update, _own(y_true), _own(probabilities)),
                expected_binary,
                _threshold_accumulator,
            )
        compare_true, compare_probabilities = _own(y_true), _own(probabilities)
        compare = ConfusionAccumulator(k)
        functions["(p >= 0.5) + update"] = lambda: compare.update(
            compare_true, compare_probabilities >= 0.5
        )

    if torch_ok:
        import torch

        def tensor(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(_own(array))

        t_bf16 = tensor(logits).to(torch.bfloat16)
        expected_bf16 = np.bincount(
            k * y_true + torch.argmax(t_bf16, 1).numpy(), minlength=k * k
        ).reshape(k, k)
        add("labels torch", _reading(update, tensor(y_true), tensor(y_pred)), expected_labels)
        add("logits f32 torch", _reading(update, tensor(y_true), tensor(logits)), expected_scores)
        t_grad = torch.from_numpy(logits.copy()).requires_grad_(True)
        add("logits f32 torch grad", _reading(update, tensor(y_true), t_grad), expected_scores)
        add("logits bf16 torch", _reading(update, tensor(y_true), t_bf16.clone()), expected_bf16)
        bf16_true, bf16_logits = tensor(y_true), t_bf16.clone()
        bf16_two_step = ConfusionAccumulator(k)
        functions["torch.argmax + update bf16"] = lambda: bf16_two_step.update(
            bf16_true, torch.argmax(bf16_logits, 1)
        )
        if k == 2 and threshold_ok:
            add(
                "probs f32 torch",
                _reading(update, tensor(y_true), tensor(probabilities)),
                expected_binary,
                _threshold_accumulator,
            )
        try:
            from torchmetrics.classification import MulticlassConfusionMatrix
        except ImportError:
            pass
        else:
            metric = MulticlassConfusionMatrix(num_classes=k)
            metric_true, metric_logits = tensor(y_true), tensor(logits)
            metric.update(metric_logits, metric_true)
            if not np.array_equal(metric.compute().numpy(), expected_scores):
                raise AssertionError(f"N={n} C={k}: torchmetrics gives a different matrix")
            metric.reset()
            functions["torchmetrics logits f32"] = lambda: metric.update(metric_logits, metric_true)
            metric_labels = MulticlassConfusionMatrix(num_classes=k)
            label_true, label_pred = tensor(y_true), tensor(y_pred)
            functions["torchmetrics labels"] = lambda: metric_labels.update(label_pred, label_true)
    return functions, checks


def sweep(
    quick: bool, sizes: list[int], classes: list[int], cpu: bool = False
) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(0)
    torch_ok = _have_torch()
    if torch_ok:
        import torch

        torch.set_num_threads(1)  # one update at a time, as metricstream's small-batch path
    results: dict[str, dict[str, float]] = {}
    for n in sizes:
        for k in classes:
            if n * k > MAX_SCORES or (quick and n * k > 10_000_000):
                continue
            start = time.perf_counter()
            print(f"  N={n} C={k}", file=sys.stderr, flush=True)
            functions, _ = _case(n, k, rng, torch_ok)
            work = n * k
            if work <= 100_000:
                repeats, min_sample = (5, 0.002) if quick else (9, 0.01)
            else:
                repeats, min_sample = (3, 0.0) if quick or work >= 10_000_000 else (5, 0.0)
            timer = time.process_time if cpu else time.perf_counter
            times = interleaved(functions, repeats, min_sample=min_sample, timer=timer)
            results[f"{n},{k}"] = times
            print(f"    {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return results


def _us(seconds: float | None) -> str:
    return "–" if seconds is None else format_seconds(seconds).replace(" µs", "")


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None:
        return "–"
    return f"{numerator / denominator:.1f}×"


TABLES = [
    (
        "Labels and float32 (N, C) logits from numpy: the fused argmax against `np.argmax` + "
        "update (ratio = two-step time / fused time; > 1 means fused is faster)",
        ["labels numpy", "logits f32 numpy", "np.argmax + update f32"],
        [("fused speed-up", "np.argmax + update f32", "logits f32 numpy")],
    ),
    (
        "torch CPU tensors against the same numpy input (ratio = torch / numpy; 1.0× means no "
        "conversion cost) and torchmetrics' `MulticlassConfusionMatrix.update` on the same "
        "tensors (ratio = torchmetrics / metricstream)",
        ["labels torch", "logits f32 torch", "logits f32 torch grad", "torchmetrics logits f32"],
        [
            ("labels torch/np", "labels torch", "labels numpy"),
            ("logits torch/np", "logits f32 torch", "logits f32 numpy"),
            ("grad/np", "logits f32 torch grad", "logits f32 numpy"),
            ("torchmetrics/ms", "torchmetrics logits f32", "logits f32 torch"),
        ],
    ),
    (
        "Half-precision logits: float16 from numpy (against `np.argmax` + update) and bfloat16 "
        "from torch (against `torch.argmax` + update)",
        [
            "logits f16 numpy",
            "np.argmax + update f16",
            "logits bf16 torch",
            "torch.argmax + update bf16",
        ],
        [
            ("f16 speed-up", "np.argmax + update f16", "logits f16 numpy"),
            ("bf16 speed-up", "torch.argmax + update bf16", "logits bf16 torch"),
        ],
    ),
]

BINARY_TABLE = (
    "Binary probabilities of shape (N,) with `threshold=0.5` (fused compare) against "
    "`(p >= 0.5)` + update and int64 labels",
    ["probs f32 numpy", "probs f32 torch", "(p >= 0.5) + update", "labels numpy"],
    [
        ("vs two-step", "(p >= 0.5) + update", "probs f32 numpy"),
        ("vs labels", "probs f32 numpy", "labels numpy"),
    ],
)


def render(results: dict[str, dict[str, float]]) -> str:
    lines: list[str] = []
    for title, columns, ratios in TABLES + [BINARY_TABLE]:
        keys = list(results)
        if columns is BINARY_TABLE[1]:
            keys = [key for key in results if key.endswith(",2")]
        lines += [f"{title}; µs per update.", ""]
        header = ["N", "C"] + columns + [name for name, _, _ in ratios]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|---" * len(header) + "|")
        for key in keys:
            n, k = key.split(",")
            times = results[key]
            cells = [f"{int(n):,}", k] + [_us(times.get(c)) for c in columns]
            cells += [_ratio(times.get(a), times.get(b)) for _, a, b in ratios]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def compare(before: dict, after: dict) -> str:
    """Before/after table: median µs of every candidate measured by both runs."""
    names = [
        "labels numpy",
        "labels torch",
        "logits f32 numpy",
        "logits f32 torch",
        "logits f32 torch grad",
        "logits f16 numpy",
        "logits bf16 torch",
        "probs f32 numpy",
    ]
    lines = ["| N | C | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for key in after:
        if key not in before:
            continue
        n, k = key.split(",")
        cells = []
        for name in names:
            b, a = before[key].get(name), after[key].get(name)
            if a is None:
                cells.append("–")
            elif b is None:
                cells.append(f"new: {_us(a)}")
            else:
                cells.append(f"{_us(b)} → {_us(a)}")
        lines.append(f"| {int(n):,} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_training_loop", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="skip N × C > 10^7, fewer repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--classes", type=int, nargs="+", default=CLASSES)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time CPU time (time.process_time) instead of the wall clock: less inflated by "
        "other processes on a shared machine",
    )
    parser.add_argument("--json", type=Path, help="also write the raw medians here")
    parser.add_argument(
        "--compare", type=Path, help="a --json file of an earlier run: print a before/after table"
    )
    args = parser.parse_args(argv)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    start = time.perf_counter()
    results = sweep(args.quick, args.sizes, args.classes, args.cpu)
    print(
        f"Clock: {'CPU time' if args.cpu else 'wall clock'}. Load average at the start: {load}; "
        "at the end: "
        + ", ".join(f"{v:.1f}" for v in os.getloadavg())
        + f"; {time.perf_counter() - start:.0f} s.\n"
    )
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.compare:
        print("Before → after (µs per update):\n")
        print(compare(json.loads(args.compare.read_text()), results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
