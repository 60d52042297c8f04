"""Benchmark: metricstream on engines (Spark ``local[2]``, Ray Data) and Arrow input.

Run from the repository root::

    python -m benchmarks.bench_engines            # 10^7 rows
    python -m benchmarks.bench_engines --quick    # 10^6 rows, fewer rounds
    python -m benchmarks.bench_engines --only arrow,spark --rows 1e8

Three comparisons, each checked for equal results before anything is timed, and each printed
as metricstream beside the alternative with their ratio from the same run:

* **spark** — a cached DataFrame of ``label``/``prediction`` doubles (10 classes, ~80 %
  agreement) on ``local[2]``: ``metricstream.spark.confusion`` (one pass, after which every
  metric is a view) against ``MulticlassClassificationEvaluator`` evaluating accuracy, weighted
  F1, weighted precision and weighted recall (four ``evaluate()`` calls, as users write it), and
  against constructing one ``MulticlassMetrics`` over ``df.select(...).rdd`` and reading the
  same four metrics. Targets: ≥ 5× and ≥ 2×.
* **ray** — a Ray Data dataset of the same columns (8 blocks): ``metricstream.ray.confusion``
  against ``ds.to_pandas()`` followed by scikit-learn's ``confusion_matrix``,
  ``accuracy_score`` and ``precision_recall_fscore_support(average="weighted")``.
* **arrow** — counting int64 label columns given as pyarrow arrays (``acc.update``), as an
  8-chunk ``ChunkedArray`` (``metricstream.arrow.update``) and as a Table
  (``update_from_table``), against the same values as numpy arrays. Target: within 1.2×.

Spark and Ray timings are wall-clock medians over the rounds (each call is a distributed job);
Arrow timings are interleaved medians (``benchmarks._timing.interleaved``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np

from benchmarks._timing import cpu_description, format_seconds, interleaved, median

K = 10


def _wall(function: Callable[[], object], repeats: int) -> float:
    function()  # warm-up: JIT compilation in every worker, JVM code paths, caches
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return median(samples)


def _line(name: str, seconds: float, reference: float | None = None) -> str:
    ratio = "" if reference is None else f"   {reference / seconds:6.2f}x faster"
    return f"  {name:<58} {format_seconds(seconds):>10}{ratio}"


def _data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, rows)
    p = np.where(rng.random(rows) < 0.8, y, rng.integers(0, K, rows))
    return y, p


# ---------------------------------------------------------------------------- arrow
def bench_arrow(rows: int, repeats: int) -> None:
    import pyarrow as pa

    from metricstream import ConfusionAccumulator
    from metricstream.arrow import update, update_from_table

    y, p = _data(rows)
    ay, ap = pa.array(y), pa.array(p)
    cy = pa.chunked_array(np.array_split(y, 8))
    cp = pa.chunked_array(np.array_split(p, 8))
    table = pa.table({"label": cy, "pred": cp})
    expected = ConfusionAccumulator(K).update(y, p)
    assert ConfusionAccumulator(K).update(ay, ap) == expected
    assert update(ConfusionAccumulator(K), cy, cp) == expected
    assert update_from_table(ConfusionAccumulator(K), table) == expected
    times = interleaved(
        {
            "numpy": lambda: ConfusionAccumulator(K).update(y, p),
            "arrays": lambda: ConfusionAccumulator(K).update(ay, ap),
            "chunked": lambda: update(ConfusionAccumulator(K), cy, cp),
            "table": lambda: update_from_table(ConfusionAccumulator(K), table),
        },
        repeats,
        min_sample=0.05,
    )
    base = times["numpy"]
    print(f"\nArrow input, {rows:,} int64 labels, K={K} (slowdown against numpy):")
    print(f"  {'numpy arrays: acc.update(y, p)':<58} {format_seconds(base):>10}")
    for name, label in (
        ("arrays", "pyarrow arrays: acc.update(pa_y, pa_p)"),
        ("chunked", "8-chunk ChunkedArrays: metricstream.arrow.update"),
        ("table", "Table of 8 batches: update_from_table"),
    ):
        seconds = times[name]
        print(f"  {label:<58} {format_seconds(seconds):>10}   {seconds / base:6.2f}x numpy")


# ---------------------------------------------------------------------------- spark
def bench_spark(rows: int, repeats: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.mllib.evaluation import MulticlassMetrics
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from metricstream.spark import confusion

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        label = F.floor(F.rand(1) * K).cast("double")
        other = F.floor(F.rand(2) * K).cast("double")
        df = (
            spark.range(rows, numPartitions=8)
            .select(label.alias("label"), F.rand(3).alias("u"), other.alias("other"))
            .select(
                "label",
                F.when(F.col("u") < 0.8, F.col("label"))
                .otherwise(F.col("other"))
                .alias("prediction"),
            )
            .cache()
        )
        df.count()

        def ours() -> list[float]:
            acc = confusion(df, "label", "prediction", K)
            return [
                acc.accuracy(),
                acc.f1(average="weighted", zero_division=0),
                acc.precision(average="weighted", zero_division=0),
                acc.recall(average="weighted", zero_division=0),
            ]

        evaluator = MulticlassClassificationEvaluator(labelCol="label", predictionCol="prediction")
        names = ["accuracy", "f1", "weightedPrecision", "weightedRecall"]

        def evaluator_four() -> list[float]:
            return [evaluator.evaluate(df, {evaluator.metricName: name}) for name in names]

        def multiclass_metrics() -> list[float]:
            metrics = MulticlassMetrics(df.select("prediction", "label").rdd)
            return [
                metrics.accuracy,
                metrics.weightedFMeasure(),
                metrics.weightedPrecision,
                metrics.weightedRecall,
            ]

        reference = evaluator_four()
        assert np.allclose(ours(), reference, rtol=1e-12), (ours(), reference)
        assert np.allclose(multiclass_metrics(), reference, rtol=1e-12)
        t_ours = _wall(ours, repeats)
        t_eval = _wall(evaluator_four, repeats)
        t_mm = _wall(multiclass_metrics, repeats)
    finally:
        spark.stop()
    print(f"\nSpark local[2], {rows:,} cached rows, K={K}, 8 partitions (wall, median):")
    print(_line("metricstream.spark.confusion + 4 metric views", t_ours))
    print(_line("MulticlassClassificationEvaluator, 4 evaluate() calls", t_eval))
    print(f"  {'':<58} {'':>10}   {t_eval / t_ours:6.2f}x metricstream's time (target >= 5)")
    print(_line("MulticlassMetrics(df.select(...).rdd) + 4 metrics", t_mm))
    print(f"  {'':<58} {'':>10}   {t_mm / t_ours:6.2f}x metricstream's time (target >= 2)")


# ---------------------------------------------------------------------------- ray
def bench_ray(rows: int, repeats: int) -> None:
    import pyarrow as pa
    import ray
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    from metricstream import ConfusionAccumulator
    from metricstream.ray import confusion

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        y, p = _data(rows, seed=1)
        ds = ray.data.from_arrow(pa.table({"label": y, "pred": p})).repartition(8).materialize()

        def ours() -> ConfusionAccumulator:
            acc = confusion(ds, "label", "pred", K)
            acc.accuracy()
            acc.precision_recall_fscore_support(average="weighted")
            return acc

        def pandas_sklearn() -> np.ndarray:
            frame = ds.to_pandas()
            matrix = confusion_matrix(frame["label"], frame["pred"], labels=range(K))
            accuracy_score(frame["label"], frame["pred"])
            precision_recall_fscore_support(frame["label"], frame["pred"], average="weighted")
            return matrix

        assert np.array_equal(ours().matrix, pandas_sklearn())
        t_ours = _wall(ours, repeats)
        t_ref = _wall(pandas_sklearn, repeats)
    finally:
        ray.shutdown()
    print(f"\nRay Data (2 CPUs), {rows:,} rows in 8 blocks, K={K} (wall, median):")
    print(_line("metricstream.ray.confusion (AggregateFnV2) + metrics", t_ours))
    print(_line("ds.to_pandas() + scikit-learn", t_ref))
    print(f"  {'':<58} {'':>10}   {t_ref / t_ours:6.2f}x metricstream's time")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^6 rows and fewer rounds")
    parser.add_argument("--rows", type=float, default=None, help="rows (default 1e7)")
    parser.add_argument("--only", default="arrow,spark,ray", help="comma-separated sections")
    parser.add_argument("--repeats", type=int, default=None, help="rounds of Spark and Ray")
    args = parser.parse_args(argv)
    rows = int(args.rows or (1e6 if args.quick else 1e7))
    repeats = args.repeats or (2 if args.quick else 3)
    print(f"CPU: {cpu_description()}, {os.cpu_count()} logical cores")
    sections = {"arrow": bench_arrow, "spark": bench_spark, "ray": bench_ray}
    for name in args.only.split(","):
        sections[name.strip()](rows, repeats if name != "arrow" else 7 if args.quick else 15)


if __name__ == "__main__":
    main()
