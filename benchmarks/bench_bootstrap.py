"""Bootstrap intervals: read-time cost, the exact samplers, the clustered update, torchmetrics.

``python -m benchmarks.bench_bootstrap [--quick] [--torch-bootstraps B]`` from the repository
root.

1. **Read-time bootstrap** (:func:`metricstream.bootstrap.bootstrap`, macro F1, percentile):
   K = 10 with B = 1,000 (target ≤ 10 ms) and K = 1000 with B = 200 (target ≤ 2 s), on
   realistic matrices (a classifier of 90% accuracy whose errors go to a few neighbouring
   classes), beside numpy's ``Generator.multinomial`` drawing the same replicate matrices
   (the draws alone, without evaluating any metric).
2. **Samplers**: ns per exact Binomial / Poisson variate of ``metricstream.bootstrap._kernels``
   against numba's ``np.random.binomial`` / ``np.random.poisson`` in a jitted loop.
3. **Clustered update** (:class:`metricstream.clustered.BootstrapConfusionAccumulator`,
   B = 100, one cluster per call) of a 256×256 mask with K = 21, against a plain
   ``ConfusionAccumulator.update`` of the same mask (target ≤ 2×); the same at the default B.
4. **torchmetrics** ``BootStrapper(MulticlassF1Score(average="macro"))`` over a realistic
   epoch (20,000 samples in 256-sample batches, K = 10) against metricstream's plain
   accumulator over the same batches plus one read-time bootstrap, for the same B (target
   ≥ 1,000× faster); the point estimates are checked equal first, and both 95% interval
   widths are printed.

Times are medians of interleaved repeats (``benchmarks/_timing.py``); the load average is
printed because the benchmark machine is shared.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from numba import njit

from metricstream import ConfusionAccumulator
from metricstream.bootstrap import _kernels as kernels
from metricstream.bootstrap import bootstrap
from metricstream.clustered import BootstrapConfusionAccumulator

from ._timing import format_seconds, interleaved


def realistic_matrix(k: int, n: int, accuracy: float = 0.9, seed: int = 0) -> np.ndarray:
    """A classifier's matrix: Dirichlet class mix, errors to nearby classes."""
    rng = np.random.default_rng(seed)
    mix = rng.dirichlet(np.full(k, 2.0))
    y_true = rng.choice(k, size=n, p=mix)
    y_pred = y_true.copy()
    wrong = rng.random(n) > accuracy
    y_pred[wrong] = (y_true[wrong] + rng.geometric(0.3, int(wrong.sum()))) % k
    return np.bincount(y_true * k + y_pred, minlength=k * k).reshape(k, k)


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "?"


def read_time(repeats: int) -> None:
    print("1. read-time bootstrap of macro F1 (percentile), vs numpy drawing the replicates")
    print("   (wall time, median of interleaved repeats; CPU time of the same calls beside it:")
    print("    on a loaded machine the wall time includes waiting for a core)")
    print(
        f"{'K':>5} {'N':>9} {'B':>5} {'nnz':>6} {'metricstream':>13} {'CPU':>10} "
        f"{'numpy draws':>12} {'ratio':>6} {'target':>7}"
    )
    for k, n, b, target in [
        (10, 20_000, 1000, 10e-3),
        (10, 1_000_000, 1000, 10e-3),
        (1000, 50_000, 200, 2.0),
        (1000, 1_000_000, 200, 2.0),
    ]:
        matrix = realistic_matrix(k, n)
        flat = matrix.reshape(-1)
        p = flat / flat.sum()
        total = int(flat.sum())
        rng = np.random.default_rng(0)

        def read(m: np.ndarray = matrix, b: int = b) -> object:
            return bootstrap(m, "macro_f1", n_resamples=b, seed=1)

        def numpy_draws(
            n: int = total, p: np.ndarray = p, b: int = b, generator: np.random.Generator = rng
        ) -> object:
            return generator.multinomial(n, p, size=b)

        candidates = {"metricstream": read, "numpy": numpy_draws}
        count = repeats if k == 10 else max(3, repeats // 3)
        times = interleaved(candidates, count)
        ours, theirs = times["metricstream"], times["numpy"]
        cpu = []
        for _ in range(count):
            start = time.process_time()
            read()
            cpu.append(time.process_time() - start)
        verdict = "ok" if ours <= target else "MISSED"
        print(
            f"{k:>5} {n:>9,} {b:>5} {np.count_nonzero(flat):>6} {format_seconds(ours):>13} "
            f"{format_seconds(float(np.median(cpu))):>10} {format_seconds(theirs):>12} "
            f"{theirs / ours:>5.1f}x {verdict:>7}"
        )


@njit(cache=True)
def _numba_binomial(n, p, size):  # pragma: no cover - benchmark helper
    out = np.empty(size, dtype=np.int64)
    for i in range(size):
        out[i] = np.random.binomial(n, p)
    return out


@njit(cache=True)
def _numba_poisson(lam, size):  # pragma: no cover - benchmark helper
    out = np.empty(size, dtype=np.int64)
    for i in range(size):
        out[i] = np.random.poisson(lam)
    return out


def samplers(repeats: int) -> None:
    size = 200_000
    print("\n2. exact samplers, ns per variate (200,000 draws), vs numba's np.random")
    print(f"{'distribution':>24} {'metricstream':>13} {'numba':>8} {'ratio':>6}")
    cases = [
        (
            "Binomial(20, 0.2)",
            lambda: kernels.binomial_draws(20, 0.2, 1, size),
            lambda: _numba_binomial(20, 0.2, size),
        ),
        (
            "Binomial(10^4, 0.3)",
            lambda: kernels.binomial_draws(10_000, 0.3, 1, size),
            lambda: _numba_binomial(10_000, 0.3, size),
        ),
        (
            "Binomial(10^6, 0.01)",
            lambda: kernels.binomial_draws(1_000_000, 0.01, 1, size),
            lambda: _numba_binomial(1_000_000, 0.01, size),
        ),
        (
            "Poisson(3)",
            lambda: kernels.poisson_draws(3.0, 1, size),
            lambda: _numba_poisson(3.0, size),
        ),
        (
            "Poisson(1000)",
            lambda: kernels.poisson_draws(1000.0, 1, size),
            lambda: _numba_poisson(1000.0, size),
        ),
    ]
    for name, ours, theirs in cases:
        times = interleaved({"ours": ours, "numba": theirs}, repeats)
        ours_ns, numba_ns = times["ours"] / size * 1e9, times["numba"] / size * 1e9
        print(f"{name:>24} {ours_ns:>10.1f} ns {numba_ns:>5.1f} ns {numba_ns / ours_ns:>5.1f}x")


def clustered_update(repeats: int) -> None:
    k, b = 21, 100
    rng = np.random.default_rng(0)
    truth = rng.integers(0, k, (256, 256))
    # a segmentation-like prediction: right on 90% of pixels, errors to a few classes
    pred = np.where(rng.random((256, 256)) < 0.9, truth, (truth + rng.integers(1, 3)) % k)
    plain = ConfusionAccumulator(k)
    clustered = BootstrapConfusionAccumulator(k, n_resamples=b, seed=0)
    per_item = BootstrapConfusionAccumulator(k, n_resamples=b, seed=0)
    default = BootstrapConfusionAccumulator(k, seed=0)  # the default B
    masks_true = np.stack([np.roll(truth, shift, axis=0) for shift in range(8)])
    masks_pred = np.stack([np.roll(pred, shift, axis=0) for shift in range(8)])
    ids = np.arange(8)
    times = interleaved(
        {
            "plain": lambda: plain.update(truth, pred),
            "clustered": lambda: clustered.update(truth, pred),
            "plain x8": lambda: plain.update(masks_true, masks_pred),
            "ids x8": lambda: per_item.update(masks_true, masks_pred, cluster_ids=ids),
            "default B": lambda: default.update(truth, pred),
        },
        repeats * 4,
        min_sample=0.01,
    )
    print(
        f"\n3. clustered update of 256×256 masks, K={k}, B={b} "
        f"(state {clustered.state_nbytes / 2**10:.0f} KiB)"
    )
    print(f"{'one mask, plain':>28} {format_seconds(times['plain']):>10}")
    print(
        f"{'one mask, one cluster':>28} {format_seconds(times['clustered']):>10} "
        f"{times['clustered'] / times['plain']:>5.2f}x (target ≤ 2x)"
    )
    print(
        f"{f'one cluster, B={default.n_resamples}':>28} {format_seconds(times['default B']):>10} "
        f"{times['default B'] / times['plain']:>5.2f}x (the default B; "
        f"state {default.state_nbytes / 2**20:.1f} MiB)"
    )
    print(f"{'8 masks, plain':>28} {format_seconds(times['plain x8']):>10}")
    print(
        f"{'8 masks, cluster_ids=arange(8)':>28} {format_seconds(times['ids x8']):>10} "
        f"{times['ids x8'] / times['plain x8']:>5.2f}x"
    )


def torchmetrics_epoch(bootstraps: int, repeats: int) -> None:
    try:
        import torch
        from torchmetrics.classification import MulticlassF1Score
        from torchmetrics.wrappers import BootStrapper
    except ImportError:
        print("\n4. torchmetrics is not installed: skipped")
        return
    k, n, batch = 10, 20_000, 256
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, k, n)
    y_pred = np.where(rng.random(n) < 0.8, y_true, rng.integers(0, k, n))
    batches = [(y_true[i : i + batch], y_pred[i : i + batch]) for i in range(0, n, batch)]
    torch_batches = [(torch.from_numpy(t), torch.from_numpy(p)) for t, p in batches]

    def ours() -> tuple[float, float, float]:
        acc = ConfusionAccumulator(k)
        for t, p in batches:
            acc.update(t, p)
        result = bootstrap(acc, "macro_f1", n_resamples=bootstraps, seed=0)
        return result.estimate, result.high - result.low, result.standard_error

    def theirs() -> tuple[float, float, float]:
        torch.manual_seed(0)
        wrapped = BootStrapper(
            MulticlassF1Score(num_classes=k, average="macro"),
            num_bootstraps=bootstraps,
            quantile=torch.tensor([0.025, 0.975]),
            sampling_strategy="multinomial",
        )
        for t, p in torch_batches:
            wrapped.update(p, t)
        out = wrapped.compute()
        q = out["quantile"]
        return float("nan"), float(q[1] - q[0]), float(out["std"])

    estimate, width, se = ours()
    wall: dict[str, list[float]] = {"metricstream": [], "torchmetrics": []}
    cpu: dict[str, list[float]] = {"metricstream": [], "torchmetrics": []}
    # metricstream first: torch's worker threads keep spinning for a while after its ops and
    # would steal a core from whatever runs next.
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        ours()
        wall["metricstream"].append(time.perf_counter() - start)
        cpu["metricstream"].append(time.process_time() - start_cpu)
    base = MulticlassF1Score(num_classes=k, average="macro")
    base.update(torch.from_numpy(y_pred), torch.from_numpy(y_true))
    assert abs(float(base.compute()) - estimate) < 1e-6, "point estimates differ"
    start, start_cpu = time.perf_counter(), time.process_time()
    _, their_width, their_se = theirs()
    wall["torchmetrics"].append(time.perf_counter() - start)
    cpu["torchmetrics"].append(time.process_time() - start_cpu)
    mine, other = float(np.median(wall["metricstream"])), wall["torchmetrics"][0]
    mine_cpu, other_cpu = float(np.median(cpu["metricstream"])), cpu["torchmetrics"][0]
    print(
        f"\n4. one epoch (20,000 samples, 256-sample batches, K={k}) with a B={bootstraps} "
        f"bootstrap of macro F1 = {estimate:.4f}"
    )
    print(f"{'':>14} {'wall':>10} {'CPU':>10} {'95% width':>10} {'SE':>8}")
    print(
        f"{'metricstream':>14} {format_seconds(mine):>10} {format_seconds(mine_cpu):>10} "
        f"{width:>10.4f} {se:>8.4f}"
    )
    print(
        f"{'torchmetrics':>14} {format_seconds(other):>10} {format_seconds(other_cpu):>10} "
        f"{their_width:>10.4f} {their_se:>8.4f}"
    )
    print(
        f"metricstream is {other / mine:,.0f}x faster in wall time, {other_cpu / mine_cpu:,.0f}x "
        f"in CPU time (target ≥ 1,000x); the widths differ by "
        f"{abs(width - their_width) / their_width:.1%} (Monte-Carlo noise of a B={bootstraps} "
        f"width is about {1 / np.sqrt(bootstraps) * 100 * 1.5:.0f}%)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="bootstrap interval benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, B=20 for torch")
    parser.add_argument(
        "--torch-bootstraps",
        type=int,
        default=None,
        help="B for the torchmetrics comparison (default 200, 20 with --quick)",
    )
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 9
    bootstraps = args.torch_bootstraps or (20 if args.quick else 200)
    print(f"load average at start: {_load()} (2-core machine shared with other jobs)\n")
    read_time(repeats)
    samplers(repeats)
    clustered_update(repeats)
    torchmetrics_epoch(bootstraps, repeats)
    print(f"\nload average at end: {_load()}")


if __name__ == "__main__":
    main()
