"""metricstream.spark against Spark itself (``local[2]``): ``MulticlassMetrics``,
``MulticlassClassificationEvaluator`` and ``BinaryClassificationMetrics`` on the same rows, and
one in-memory update of the collected columns.

Every test here starts or uses a JVM, so the module is slow (CI runs it; ``--run-slow`` locally).
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("pyspark", reason='needs pyspark: pip install "metricstream[spark]"')
pd = pytest.importorskip("pandas")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip(
        "Spark needs a Java runtime (apt-get install -y default-jre-headless)",
        allow_module_level=True,
    )

from pyspark.ml.evaluation import MulticlassClassificationEvaluator  # noqa: E402
from pyspark.ml.functions import array_to_vector  # noqa: E402
from pyspark.mllib.evaluation import (  # noqa: E402
    BinaryClassificationMetrics,
    MulticlassMetrics,
)
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from metricstream import (  # noqa: E402
    AccumulatorGroup,
    ConfusionAccumulator,
    MultilabelAccumulator,
    ScoreAccumulator,
)
from metricstream.spark import accumulate, confusion, multilabel, scores  # noqa: E402

pytestmark = pytest.mark.slow

K = 5


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("metricstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _rows(n=3000, seed=0, absent=3):
    """Labels and predictions over K classes, class ``absent`` never true (it is predicted),
    fractional weights."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    y[y == absent] = 0
    p = np.where(rng.random(n) < 0.6, y, rng.integers(0, K, n))
    w = rng.integers(1, 8, n) / 4.0
    return y.astype(np.float64), p.astype(np.float64), w


def _frame(spark, y, p, w=None, partitions=6):
    data = {"label": y, "prediction": p}
    if w is not None:
        data["weight"] = w
    return spark.createDataFrame(pd.DataFrame(data)).repartition(partitions)


@pytest.mark.parametrize("weighted", [False, True])
def test_confusion_equals_multiclass_metrics_and_evaluator(spark, weighted):
    y, p, w = _rows()
    df = _frame(spark, y, p, w if weighted else None)
    acc = confusion(df, "label", "prediction", K, weights="weight" if weighted else None)
    assert acc == ConfusionAccumulator(K, weighted=weighted).update(
        y.astype(int), p.astype(int), w if weighted else None
    )

    columns = ["prediction", "label"] + (["weight"] if weighted else [])
    reference = MulticlassMetrics(df.select(*columns).rdd.map(tuple))
    # Spark's labels are the true labels that occur: a class only predicted (3) has no row or
    # column in its matrix.
    index = np.array(sorted(set(y)), dtype=int)
    expected = reference.confusionMatrix().toArray()
    np.testing.assert_array_equal(acc.matrix[np.ix_(index, index)], expected)

    evaluator = MulticlassClassificationEvaluator(labelCol="label", predictionCol="prediction")
    if weighted:
        evaluator.setWeightCol("weight")
    ours = {
        "accuracy": acc.accuracy(),
        "f1": acc.f1(average="weighted", zero_division=0),
        "weightedPrecision": acc.precision(average="weighted", zero_division=0),
        "weightedRecall": acc.recall(average="weighted", zero_division=0),
        "weightedTruePositiveRate": acc.recall(average="weighted", zero_division=0),
        "weightedFalsePositiveRate": _weighted(acc, acc.false_positive_rate(zero_division=0)),
        "hammingLoss": acc.hamming_loss(),
    }
    for name, value in ours.items():
        assert evaluator.evaluate(df, {evaluator.metricName: name}) == pytest.approx(
            value, rel=1e-12, abs=1e-15
        ), name
    per_label = {
        "precisionByLabel": acc.precision(average=None, zero_division=0),
        "recallByLabel": acc.recall(average=None, zero_division=0),
        "fMeasureByLabel": acc.f1(average=None, zero_division=0),
        "falsePositiveRateByLabel": acc.false_positive_rate(zero_division=0),
    }
    for name, values in per_label.items():
        for label in (0, 1, 4):  # Spark refuses a label that is never true (3)
            got = evaluator.evaluate(df, {evaluator.metricName: name, evaluator.metricLabel: label})
            assert got == pytest.approx(values[label], rel=1e-12, abs=1e-15), (name, label)


def _assert_same(ours, expected):
    """Equal states: counts exactly, float sums (losses, calibration) up to their order of
    addition, which the partitioning changes."""
    assert ours.config() == expected.config()
    for name, array in expected.state_arrays().items():
        if array.dtype.kind == "f":
            np.testing.assert_allclose(ours.state_arrays()[name], array, rtol=1e-12, atol=0)
        else:
            np.testing.assert_array_equal(ours.state_arrays()[name], array)


def _weighted(acc, per_class):
    support = acc.matrix.sum(axis=1)
    return float(np.dot(per_class, support) / support.sum())


def test_worked_example(spark):
    df = spark.createDataFrame(
        [(0.0, 0.0), (1.0, 2.0), (2.0, 2.0), (2.0, 2.0), (1.0, 1.0)], ["label", "prediction"]
    )
    acc = confusion(df, num_classes=3)
    assert acc.matrix.tolist() == [[1, 0, 0], [0, 1, 1], [0, 0, 2]]
    assert acc.accuracy() == 0.8


@pytest.mark.parametrize("weighted", [False, True])
def test_binary_auroc_and_pr_equal_binary_classification_metrics(spark, weighted):
    rng = np.random.default_rng(1)
    n = 4000
    y = (rng.random(n) < 0.3).astype(np.float64)
    # Multiples of 2**-10: every one is its bin's value (the histogram is exact), and there
    # are at most 1025 distinct scores, too few for PySpark's BinaryClassificationMetrics to
    # bin them (it groups consecutive scores when there are 2 * 1000 or more).
    s = np.round(np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1) * 1024) / 1024
    w = rng.integers(1, 5, n) / 2.0
    data = {"label": y, "score": s, "weight": w}
    df = spark.createDataFrame(pd.DataFrame(data)).repartition(5)
    acc = scores(df, "label", "score", weights="weight" if weighted else None)
    assert acc.exact().all()
    _assert_same(
        acc,
        ScoreAccumulator("binary", weighted=weighted).update(
            y.astype(int), s, w if weighted else None
        ),
    )
    columns = ["score", "label"] + (["weight"] if weighted else [])
    reference = BinaryClassificationMetrics(df.select(*columns).rdd.map(tuple))
    assert acc.auroc() == pytest.approx(reference.areaUnderROC, rel=1e-12)
    # Spark's areaUnderPR: trapezoids over (recall, precision) from (0, first precision).
    precision, recall, _ = acc.precision_recall_curve()
    precision, recall = precision[:-1][::-1], recall[:-1][::-1]  # drop sklearn's (r=0, p=1)
    recall = np.concatenate([[0.0], recall])
    precision = np.concatenate([[precision[0]], precision])
    area = float(np.sum(np.diff(recall) * (precision[1:] + precision[:-1]) / 2))
    assert area == pytest.approx(reference.areaUnderPR, rel=1e-12)


def test_probability_vector_argmax_and_multiclass_scores(spark):
    rng = np.random.default_rng(2)
    n = 2000
    y = rng.integers(0, K, n)
    probs = rng.dirichlet(np.ones(K), n)
    frame = pd.DataFrame({"label": y.astype(float), "probs": list(probs)})
    df = spark.createDataFrame(frame).withColumn("probability", array_to_vector("probs"))
    df = df.repartition(4)
    for column in ("probability", "probs"):  # an ML Vector and an array<double>
        acc = confusion(df, "label", column, K)
        assert acc == ConfusionAccumulator(K).update(y, probs)
        roc = scores(df, "label", column, task="multiclass", num_classes=K)
        _assert_same(roc, ScoreAccumulator("multiclass", K).update(y, probs))
    p1 = probs[:, :2] / probs[:, :2].sum(axis=1, keepdims=True)
    yb = (y % 2).astype(float)
    bin_df = spark.createDataFrame(pd.DataFrame({"label": yb, "p": list(p1)}))
    bin_df = bin_df.withColumn("probability", array_to_vector("p"))
    roc = scores(bin_df, "label", "probability")  # binary: element 1 of the vector
    _assert_same(roc, ScoreAccumulator("binary").update(yb.astype(int), p1[:, 1]))


def test_many_empty_and_skewed_partitions(spark):
    y, p, _ = _rows(n=5000, seed=3)
    expected = ConfusionAccumulator(K).update(y.astype(int), p.astype(int))
    df = _frame(spark, y, p, partitions=1)
    many = df.repartition(64)
    assert confusion(many, num_classes=K) == expected
    assert confusion(many, num_classes=K, merge="tree", fan_in=2) == expected
    # Partitions holding nothing: a range partitioning on the label leaves some empty, and a
    # filter on the partition id empties others.
    empty = df.repartitionByRange(12, "label")
    assert confusion(empty, num_classes=K) == expected
    kept = df.repartition(8).where(F.spark_partition_id() < 3)
    ids = kept.select("label", "prediction").toPandas()
    assert confusion(kept, num_classes=K) == ConfusionAccumulator(K).update(
        ids["label"].to_numpy().astype(int), ids["prediction"].to_numpy().astype(int)
    )
    nothing = df.where(F.col("label") < 0)
    assert confusion(nothing, num_classes=K) == ConfusionAccumulator(K)
    # Skewed: one partition with almost every row beside seven tiny ones.
    big = _frame(spark, y[:4900], p[:4900], partitions=1)
    small = _frame(spark, y[4900:], p[4900:], partitions=7)
    assert confusion(big.union(small), num_classes=K) == expected


def test_tree_merge_of_a_large_matrix_equals_driver_merge(spark):
    rng = np.random.default_rng(4)
    k, n = 300, 20_000
    y, p = rng.integers(0, k, n), rng.integers(0, k, n)
    df = spark.createDataFrame(pd.DataFrame({"label": y, "prediction": p})).repartition(40)
    expected = ConfusionAccumulator(k).update(y, p)
    assert confusion(df, num_classes=k) == expected  # auto: 720 KB states -> tree
    assert confusion(df, num_classes=k, merge="driver") == expected
    assert confusion(df, num_classes=k, merge="tree", fan_in=3) == expected


def test_class_names_nulls_and_errors(spark):
    names = ["cat", "dog", "eel"]
    rows = [("cat", "dog"), ("dog", "dog"), ("eel", None), (None, "cat"), ("eel", "eel")]
    df = spark.createDataFrame(rows, "label string, prediction string").repartition(2)
    with pytest.raises(ValueError, match=r"null at row \d+.*Spark partition"):
        confusion(df, class_names=names)
    acc = confusion(df, class_names=names, nulls="skip")
    assert acc.matrix.tolist() == [[0, 1, 0], [0, 1, 0], [0, 0, 1]]
    bad = spark.createDataFrame([("cat", "cat"), ("cow", "cat")], ["label", "prediction"])
    with pytest.raises(ValueError, match=r"'cow' at row \d+.*Spark partition \d+"):
        confusion(bad, class_names=names)
    out_of_range = spark.createDataFrame([(0, 0), (7, 1)], ["label", "prediction"])
    with pytest.raises(ValueError, match="label 7"):
        confusion(out_of_range, num_classes=3)
    with pytest.raises(ValueError, match="no column 'pred'"):
        confusion(df, "label", "pred", class_names=names)
    with pytest.raises(ValueError, match="already holds counts"):
        accumulate(ConfusionAccumulator(3).update([0], [0]), df, "label", "prediction")
    with pytest.raises(ValueError, match="`merge`"):
        confusion(out_of_range, num_classes=3, merge="all")


def test_group_and_multilabel(spark):
    y, p, w = _rows(n=2000, seed=5)
    df = _frame(spark, y, p, w, partitions=5)
    group = AccumulatorGroup(
        counts=ConfusionAccumulator(K), weighted=ConfusionAccumulator(K, weighted=True)
    )
    df = df.withColumn("weight", df["weight"] * 4)  # whole weights for the int64 member
    result = accumulate(group, df, "label", "prediction", "weight")
    assert result == group.copy().update(y.astype(int), p.astype(int), w * 4)
    assert group["counts"].num_samples == 0  # the template is untouched

    rng = np.random.default_rng(6)
    targets = (rng.random((1500, 4)) < 0.4).astype(np.int64)
    probs = rng.random((1500, 4))
    frame = pd.DataFrame({"t": list(targets), "s": list(probs)})
    ml_df = spark.createDataFrame(frame).repartition(3)
    acc = multilabel(ml_df, "t", "s", 4)
    assert acc == MultilabelAccumulator(4).update(targets, probs)
