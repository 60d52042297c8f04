"""Regression benchmark: ``python -m benchmarks.bench_regression [--quick]``.

Cases (every compared result is checked equal before anything is timed; ratios come from the
same interleaved run, CPU time):

1. one ``update`` of 256 samples (one output, then 8 outputs with weights), beside
   torchmetrics' ``MeanSquaredError`` + ``R2Score`` + ``PearsonCorrCoef`` updates (when
   torchmetrics is installed) and one scikit-learn ``mean_squared_error`` call;
2. 10^6 samples in one update, beside computing the same metrics once with scikit-learn
   (``mean_absolute_error``, ``mean_squared_error``, ``r2_score``,
   ``explained_variance_score``, ``max_error``) and ``scipy.stats.pearsonr`` on the array;
3. the views: every metric of ``summary()`` from a fresh state (the exact integers are built
   once per state version).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from metricstream.regression import RegressionAccumulator

from ._timing import cpu_description, format_seconds, interleaved


def _torchmetrics(y_true: np.ndarray, y_pred: np.ndarray) -> Callable[[], object] | None:
    try:
        import torch
        from torchmetrics.regression import MeanSquaredError, PearsonCorrCoef, R2Score
    except ImportError:
        return None
    t, p = torch.from_numpy(y_true), torch.from_numpy(y_pred)
    metrics = [MeanSquaredError(), R2Score(), PearsonCorrCoef()]
    for metric in metrics:
        metric.update(p, t)
    acc = RegressionAccumulator().update(y_true, y_pred)
    # torchmetrics keeps float32 states: equal to its own precision
    assert abs(float(metrics[0].compute()) - acc.mse()) <= 1e-6 * acc.mse(), "torchmetrics MSE"
    assert abs(float(metrics[1].compute()) - acc.r2()) <= 1e-5, "torchmetrics R²"

    def update() -> None:
        for metric in metrics:
            metric.update(p, t)

    return update


def update_case(rng: np.random.Generator, n: int, outputs: int, weighted: bool, repeats: int):
    from sklearn.metrics import mean_squared_error

    shape = (n,) if outputs == 1 else (n, outputs)
    y_true = rng.normal(size=shape)
    y_pred = y_true + rng.normal(0.1, 0.5, size=shape)
    w = rng.uniform(0, 2, n) if weighted else None
    acc = RegressionAccumulator(outputs)
    expected = mean_squared_error(y_true, y_pred, sample_weight=w)
    assert abs(RegressionAccumulator(outputs).update(y_true, y_pred, w).mse() - expected) <= (
        1e-12 * expected
    )
    candidates: dict[str, Callable[[], object]] = {
        "metricstream update": lambda: acc.update(y_true, y_pred, w),
        "scikit-learn mean_squared_error": lambda: mean_squared_error(
            y_true, y_pred, sample_weight=w
        ),
    }
    if outputs == 1 and not weighted:
        torch_update = _torchmetrics(y_true, y_pred)
        if torch_update is not None:
            candidates["torchmetrics MSE+R2+Pearson update"] = torch_update
    times = interleaved(candidates, repeats, min_sample=0.02, timer=time.process_time)
    label = f"{n}×{outputs}{' weighted' if weighted else ''}"
    return [(label, name, seconds, times["metricstream update"]) for name, seconds in times.items()]


def bulk_case(rng: np.random.Generator, n: int, repeats: int):
    from scipy.stats import pearsonr
    from sklearn import metrics

    y_true = rng.normal(1e3, 1.0, n)
    y_pred = y_true + rng.normal(0.1, 0.5, n)

    def sklearn_all() -> tuple:
        return (
            metrics.mean_absolute_error(y_true, y_pred),
            metrics.mean_squared_error(y_true, y_pred),
            metrics.r2_score(y_true, y_pred),
            metrics.explained_variance_score(y_true, y_pred),
            metrics.max_error(y_true, y_pred),
            pearsonr(y_true, y_pred).statistic,
        )

    acc = RegressionAccumulator().update(y_true, y_pred)
    mine = (acc.mae(), acc.mse(), acc.r2(), acc.explained_variance(), acc.max_error())
    theirs = sklearn_all()
    assert np.allclose(mine + (acc.pearson(),), theirs, rtol=1e-9, atol=0), (mine, theirs)
    candidates: dict[str, Callable[[], object]] = {
        "metricstream update": lambda: RegressionAccumulator().update(y_true, y_pred),
        "scikit-learn 5 metrics + scipy pearsonr": sklearn_all,
        "scikit-learn mean_squared_error alone": lambda: metrics.mean_squared_error(y_true, y_pred),
    }
    times = interleaved(candidates, repeats, timer=time.process_time)
    return [(f"{n:.0e}×1", name, s, times["metricstream update"]) for name, s in times.items()]


def views_case(rng: np.random.Generator, outputs: int, repeats: int):
    y_true = rng.normal(size=(1000, outputs))
    acc = RegressionAccumulator(outputs).update(y_true, y_true + 0.5)

    def fresh_summary() -> object:
        acc._changed()  # a new state version: nothing cached
        return acc.summary()

    times = interleaved({"summary() of a new state": fresh_summary}, repeats, min_sample=0.02)
    return [(f"views, {outputs} output(s)", n, s, None) for n, s in times.items()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    repeats = 5 if args.quick else 15
    rng = np.random.default_rng(0)
    print(f"CPU: {cpu_description()}")
    rows = []
    rows += update_case(rng, 256, 1, False, repeats)
    rows += update_case(rng, 256, 8, True, repeats)
    rows += bulk_case(rng, 10**6, 3 if args.quick else 7)
    rows += views_case(rng, 1, repeats)
    rows += views_case(rng, 8, repeats)
    for case, name, seconds, mine in rows:
        ratio = "" if mine is None or name.startswith("metricstream") else f"{seconds / mine:7.2f}×"
        print(f"{case:>16}  {name:<42} {format_seconds(seconds):>10}  {ratio}")


if __name__ == "__main__":
    main()
