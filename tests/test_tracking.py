"""metricstream.tracking against the real trackers: MLflow (a local file store) and W&B (offline).

Everything logged is read back from the tracker's own files and compared with the accumulators'
views exactly.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import numpy as np
import pytest

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator
from metricstream.exceptions import UndefinedMetricWarning
from metricstream.scalars import flat_scalars
from metricstream.tracking import (
    CONFUSION_COLUMNS,
    PR_COLUMNS,
    RELIABILITY_COLUMNS,
    ROC_COLUMNS,
    _thin,
    log_to_mlflow,
    log_to_wandb,
    rich_tables,
)

NAMES = ["cat", "dog", "bird"]


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    p = 0.6 * rng.dirichlet(np.ones(3), n) + 0.4 * np.eye(3)[y]
    return y, p


def _group() -> tuple[AccumulatorGroup, np.ndarray, np.ndarray]:
    y, p = _data()
    group = AccumulatorGroup(
        labels=ConfusionAccumulator(3, class_names=NAMES),
        scores=ScoreAccumulator("multiclass", 3),
    )
    for lo in range(0, len(y), 64):
        group.update(y[lo : lo + 64], p[lo : lo + 64])
    return group, y, p


def _curve_rows(acc: ScoreAccumulator, view: str) -> list[list[object]]:
    """The expected rows, from the views, written independently of the module."""
    rows: list[list[object]] = []
    where = (
        [("positive", {})]
        if acc.task == "binary"
        else [(str(i), {"label": i}) for i in range(acc.num_classes)] + [("micro", {"micro": True})]
    )
    for name, kw in where:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            x, y, t = getattr(acc, view)(drop_intermediate=True, **kw)
        if np.isnan(x).any() or np.isnan(y).any():
            continue
        for i in range(len(x)):
            threshold = float(t[i]) if i < len(t) and np.isfinite(t[i]) else None
            rows.append([name, float(x[i]), float(y[i]), threshold])
    return rows


def _reliability_rows(acc: ScoreAccumulator) -> list[list[object]]:
    d = acc.reliability_diagram(15)
    return [
        [float(d.edges[i]), float(d.edges[i + 1]), int(d.counts[i]), d.accuracy[i], d.confidence[i]]
        for i in range(15)
        if d.counts[i] > 0
    ]


def _expected(group: AccumulatorGroup, prefix: str) -> dict[str, list[list[object]]]:
    labels, scores = group["labels"], group["scores"]
    matrix = labels.confusion_matrix()
    return {
        f"{prefix}labels/confusion_matrix": [
            [NAMES[i], NAMES[j], int(matrix[i, j])] for i in range(3) for j in range(3)
        ],
        f"{prefix}scores/roc_curve": _curve_rows(scores, "roc_curve"),
        f"{prefix}scores/precision_recall_curve": _curve_rows(scores, "precision_recall_curve"),
        f"{prefix}scores/reliability_diagram": _reliability_rows(scores),
    }


# ---------------------------------------------------------------- the tables (no tracker needed)
def test_rich_tables_equal_the_views() -> None:
    group, y, p = _group()
    tables = rich_tables(group, "val/")
    expected = _expected(group, "val/")
    assert list(tables) == list(expected)
    for key, rows in expected.items():
        assert tables[key].rows == rows, key
    assert tables["val/labels/confusion_matrix"].columns == CONFUSION_COLUMNS
    assert tables["val/scores/roc_curve"].columns == ROC_COLUMNS
    assert tables["val/scores/precision_recall_curve"].columns == PR_COLUMNS
    assert tables["val/scores/reliability_diagram"].columns == RELIABILITY_COLUMNS
    # The confusion rows are the counts of the raw predictions (a worked check of the state).
    cells = {(a, b): c for a, b, c in tables["val/labels/confusion_matrix"].rows}
    pred = p.argmax(axis=1)
    for i in range(3):
        for j in range(3):
            assert cells[NAMES[i], NAMES[j]] == int(((y == i) & (pred == j)).sum())
    # The ROC curve of each class starts at (0, 0) with no threshold (scikit-learn's inf) and
    # ends at (1, 1); the PR curve's last point (recall 0) has none.
    roc = tables["val/scores/roc_curve"].rows
    for name in ("0", "1", "2", "micro"):
        points = [row for row in roc if row[0] == name]
        assert points[0][1:] == [0.0, 0.0, None] and points[-1][1:3] == [1.0, 1.0]
    pr = tables["val/scores/precision_recall_curve"].rows
    assert [row for row in pr if row[0] == "0"][-1][1:] == [1.0, 0.0, None]
    # Scores a bin holds exactly (float16 values): the curves are scikit-learn's, thresholds too.
    sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn checks curves")
    scores = p[:, 1].astype(np.float16).astype(np.float64)
    binary = ScoreAccumulator("binary").update(y == 1, scores)
    tables = rich_tables(binary)
    fpr, tpr, thresholds = sklearn_metrics.roc_curve(y == 1, scores)
    assert tables["roc_curve"].rows == [
        ["positive", a, b, t if np.isfinite(t) else None]
        for a, b, t in zip(fpr.tolist(), tpr.tolist(), thresholds.tolist(), strict=True)
    ]
    precision, recall, thresholds = sklearn_metrics.precision_recall_curve(
        y == 1, scores, drop_intermediate=True
    )
    assert tables["precision_recall_curve"].rows == [
        ["positive", a, b, t]
        for a, b, t in zip(
            precision.tolist(), recall.tolist(), [*thresholds.tolist(), None], strict=True
        )
    ]


def test_rich_tables_corner_cases() -> None:
    # Nothing counted: no rich parts (the scalars follow the views' 0/0 rule).
    empty = AccumulatorGroup(a=ConfusionAccumulator(2), s=ScoreAccumulator("binary"))
    assert rich_tables(empty) == {}
    # Binary: one curve, "positive"; weighted counts stay floats.
    binary = ScoreAccumulator("binary").update([0, 1, 1, 0, 1], [0.1, 0.8, 0.4, 0.35, 0.9])
    tables = rich_tables(binary)
    assert {row[0] for row in tables["roc_curve"].rows} == {"positive"}
    assert tables["roc_curve"].rows == _curve_rows(binary, "roc_curve")
    weighted = ConfusionAccumulator(2, weighted=True)
    weighted.update([0, 1, 1], [0, 1, 0], weights=[0.5, 2.0, 1.25])
    assert rich_tables(weighted)["confusion_matrix"].rows == [
        ["0", "0", 0.5],
        ["0", "1", 0.0],
        ["1", "0", 1.25],
        ["1", "1", 2.0],
    ]
    # A class without positives has an undefined curve: left out, the others kept.
    y, p = _data(60)
    y = np.where(y == 2, 0, y)
    scores = ScoreAccumulator("multiclass", 3).update(y, p)
    classes = {row[0] for row in rich_tables(scores)["roc_curve"].rows}
    assert classes == {"0", "1", "micro"}
    with pytest.raises(TypeError, match="prefix"):
        rich_tables(scores, prefix=3)  # type: ignore[arg-type]


def test_tables_do_not_depend_on_the_batch_split_or_merge_order() -> None:
    y, p = _data(200, seed=3)
    whole = AccumulatorGroup(c=ConfusionAccumulator(3), s=ScoreAccumulator("multiclass", 3))
    whole.update(y, p)
    parts = []
    for lo, hi in ((120, 200), (0, 7), (7, 120)):
        part = AccumulatorGroup(c=ConfusionAccumulator(3), s=ScoreAccumulator("multiclass", 3))
        parts.append(part.update(y[lo:hi], p[lo:hi]))
    merged = parts[2].merge(parts[0]).merge(parts[1])
    ours, reference = rich_tables(merged), rich_tables(whole)
    assert {k: t.rows for k, t in ours.items()} == {k: t.rows for k, t in reference.items()}


def test_other_kinds_bootstrap_and_multilabel() -> None:
    import metricstream as ms

    y, p = _data(90, seed=4)
    pred = p.argmax(axis=1)
    group = AccumulatorGroup(
        boot=ms.BootstrapConfusionAccumulator(3, n_resamples=20, class_names=NAMES),
        multi=ms.MultilabelAccumulator(3),
    )
    group["boot"].update(y, pred)
    group["multi"].update(np.eye(3, dtype=np.int64)[y], p)
    tables = rich_tables(group)
    assert list(tables) == ["boot/confusion_matrix"]  # a multilabel member: scalars only
    matrix = ConfusionAccumulator(3).update(y, pred).confusion_matrix()
    assert tables["boot/confusion_matrix"].rows == [
        [NAMES[i], NAMES[j], int(matrix[i, j])] for i in range(3) for j in range(3)
    ]


def test_thin_keeps_end_points_and_the_limit() -> None:
    rows = [["a", i / 99, 0.0, None] for i in range(100)] + [["b", 0.0, 1.0, None]] * 3
    kept = _thin(rows, 20)
    assert len(kept) <= 20
    a = [row for row in kept if row[0] == "a"]
    assert a[0] == rows[0] and a[-1] == rows[99] and len(a) == 10
    assert len([row for row in kept if row[0] == "b"]) == 3
    assert _thin(rows, 1000) is rows


def test_missing_tracker_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    group, _, _ = _group()
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r'pip install "metricstream\[mlflow\]"'):
        log_to_mlflow(group)
    with pytest.raises(ImportError, match=r'pip install "metricstream\[wandb\]"'):
        log_to_wandb(group)


# ---------------------------------------------------------------- MLflow
@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    mlflow = pytest.importorskip("mlflow", reason="needs mlflow (pip install metricstream[mlflow])")
    # MLflow 3 keeps the file store for local use behind this switch.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    try:
        yield mlflow
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(previous)


@pytest.mark.slow
def test_mlflow_metrics_tables_and_figures(mlflow_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    mlflow = mlflow_store
    group, _, _ = _group()
    with mlflow.start_run() as run:
        logged = log_to_mlflow(group, step=2, prefix="val/")
    run_id = run.info.run_id
    client = mlflow.MlflowClient()
    expected_scalars = flat_scalars(group, "val/")
    assert logged == expected_scalars
    metrics = client.get_run(run_id).data.metrics
    assert metrics == expected_scalars  # exact floats, every key
    history = client.get_metric_history(run_id, "val/labels/accuracy")
    assert [(m.step, m.value) for m in history] == [(2, group["labels"].accuracy())]

    files = {a.path for a in client.list_artifacts(run_id, "val/labels")}
    files |= {a.path for a in client.list_artifacts(run_id, "val/scores")}
    for key, rows in _expected(group, "val/").items():
        assert {f"{key}_step2.json", f"{key}_step2.png"} <= files
        path = client.download_artifacts(run_id, f"{key}_step2.json", str(tmp_path / "dl"))
        with open(path) as handle:
            document = json.load(handle)
        assert document["data"] == rows, key
        png = client.download_artifacts(run_id, f"{key}_step2.png", str(tmp_path / "dl"))
        with open(png, "rb") as handle:
            assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    # The matrix itself, and the table as MLflow's own reader sees it.
    path = client.download_artifacts(
        run_id, "val/labels/confusion_matrix_matrix_step2.json", str(tmp_path / "dl")
    )
    with open(path) as handle:
        document = json.load(handle)
    assert document == {
        "class_names": NAMES,
        "matrix": group["labels"].confusion_matrix().tolist(),
    }
    table = mlflow.load_table("val/labels/confusion_matrix_step2.json", run_ids=[run_id])
    assert list(table.columns) == list(CONFUSION_COLUMNS)
    assert table["nPredictions"].tolist() == group["labels"].confusion_matrix().ravel().tolist()


@pytest.mark.slow
def test_mlflow_run_argument_and_errors(mlflow_store) -> None:  # type: ignore[no-untyped-def]
    mlflow = mlflow_store
    acc = ConfusionAccumulator(2).update([0, 1, 1], [0, 1, 0])
    with pytest.raises(ValueError, match="no MLflow run is active"):
        log_to_mlflow(acc)
    run = mlflow.MlflowClient().create_run(mlflow.MlflowClient().create_experiment("e"))
    log_to_mlflow(acc, run=run.info.run_id, figures=False)  # a run id, no figures
    log_to_mlflow(acc, run=run, figures=False, step=1)  # a Run
    client = mlflow.MlflowClient()
    history = client.get_metric_history(run.info.run_id, "f1")
    f1 = acc.f1(average="binary")
    assert [(m.step, m.value) for m in history] == [(0, f1), (1, f1)]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {
        "confusion_matrix.json",
        "confusion_matrix_matrix.json",
        "confusion_matrix_step1.json",
        "confusion_matrix_matrix_step1.json",
    }
    with pytest.raises(TypeError, match="`run` must be an MLflow run"):
        log_to_mlflow(acc, run=42)
    with pytest.raises(ValueError, match="`step` must be a non-negative integer"):
        log_to_mlflow(acc, run=run, step=-1)


# ---------------------------------------------------------------- Weights & Biases
@pytest.fixture
def wandb_run(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    wandb = pytest.importorskip("wandb", reason="needs wandb (pip install metricstream[wandb])")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(
        mode="offline",
        dir=tmp_path,
        project="metricstream-tests",
        settings=wandb.Settings(console="off", silent=True),
    )
    try:
        yield wandb, run
    finally:
        run.finish()


def _read_table(run, entry) -> dict:  # type: ignore[no-untyped-def]
    assert entry["_type"] == "table-file"
    with open(f"{run.dir}/{entry['path']}") as handle:
        return json.load(handle)


@pytest.mark.slow
def test_wandb_summary_and_native_tables(wandb_run) -> None:  # type: ignore[no-untyped-def]
    wandb, run = wandb_run
    group, y, p = _group()
    logged = log_to_wandb(group, prefix="val/", run=run)
    summary = run.summary._as_dict()
    assert logged == flat_scalars(group, "val/")
    for key, value in logged.items():
        assert summary[key] == value, key
    for key, rows in _expected(group, "val/").items():
        document = _read_table(run, summary[f"{key}_table"])
        assert document["data"] == rows, key
    # The same table W&B's own helper builds from every raw prediction (its counts are floats).
    reference = wandb.plot.confusion_matrix(
        y_true=y.tolist(), preds=p.argmax(axis=1).tolist(), class_names=NAMES
    )
    ours = _read_table(run, summary["val/labels/confusion_matrix_table"])
    assert ours["columns"] == list(reference.table.columns)
    assert ours["data"] == [[a, b, float(c)] for a, b, c in reference.table.data]


@pytest.mark.slow
def test_wandb_step_and_active_run(wandb_run) -> None:  # type: ignore[no-untyped-def]
    wandb, run = wandb_run
    acc = ScoreAccumulator("binary").update([0, 1, 1, 0, 1], [0.1, 0.8, 0.4, 0.35, 0.9])
    log_to_wandb(acc, step=4)  # the active run
    run.log({}, step=4, commit=True)  # W&B commits a step when the next begins
    summary = run.summary._as_dict()
    assert summary["_step"] == 4
    assert summary["auroc"] == acc.auroc() and math.isfinite(summary["log_loss"])
    assert _read_table(run, summary["roc_curve_table"])["data"] == _curve_rows(acc, "roc_curve")
    with pytest.raises(ValueError, match="`step`"):
        log_to_wandb(acc, step=1.5)  # type: ignore[arg-type]


def test_wandb_without_a_run() -> None:
    wandb = pytest.importorskip("wandb", reason="needs wandb (pip install metricstream[wandb])")
    if wandb.run is not None:
        pytest.skip("a W&B run is active in this process")
    with pytest.raises(ValueError, match="no W&B run is active"):
        log_to_wandb(ConfusionAccumulator(2))
