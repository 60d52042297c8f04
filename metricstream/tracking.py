"""Log an accumulator or group to MLflow or Weights & Biases: scalars, tables and figures.

``log_to_mlflow(group, step=epoch)`` and ``log_to_wandb(group, step=epoch)`` log what
:func:`~metricstream.scalars.flat_scalars` gives as metrics, and the rich parts as each tracker's
own tables: the confusion matrix, the ROC and precision-recall curves and the reliability
diagram. Everything is computed from the accumulator's state through its public views, never
from raw predictions (W&B's own ``wandb.plot.confusion_matrix`` needs every prediction; here
the table is built from the counts and rendered with the same preset).

mlflow, wandb and matplotlib are optional and imported only when a function here is called.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import Accumulator, AccumulatorGroup
from .exceptions import UndefinedMetricWarning
from .scalars import flat_scalars

__all__ = ["log_to_mlflow", "log_to_wandb", "rich_tables"]

CONFUSION_COLUMNS = ("Actual", "Predicted", "nPredictions")
ROC_COLUMNS = ("class", "fpr", "tpr", "threshold")
PR_COLUMNS = ("class", "precision", "recall", "threshold")
RELIABILITY_COLUMNS = ("bin_lower", "bin_upper", "count", "accuracy", "confidence")


@dataclass
class Table:
    """One table of a rich part: ``columns``, ``rows`` (plain Python values, JSON-ready) and the
    accumulator it came from (to draw its figure)."""

    kind: str
    columns: tuple[str, ...]
    rows: list[list[Any]]
    source: Any = field(repr=False, default=None)


def rich_tables(obj: Accumulator | AccumulatorGroup | Any, prefix: str = "") -> dict[str, Table]:
    """The rich parts of an accumulator or group as ``{key: Table}``, computed from the state.

    Keys are ``prefix + member path + kind``, ``kind`` one of ``confusion_matrix`` (a
    :class:`~metricstream.ConfusionAccumulator`, or a bootstrap accumulator's main matrix),
    ``roc_curve``, ``precision_recall_curve`` and ``reliability_diagram`` (a
    :class:`~metricstream.ScoreAccumulator`). Other accumulators have scalars only. An
    accumulator that has counted nothing has no rich parts.

    * ``confusion_matrix``: one row per cell, ``(Actual, Predicted, nPredictions)`` with the
      class names (or indices) and ``confusion_matrix()[i, j]``: the long format W&B's
      confusion-matrix chart takes;
    * ``roc_curve`` / ``precision_recall_curve``: ``(class, fpr, tpr, threshold)`` /
      ``(class, precision, recall, threshold)``, the points of ``roc_curve(label)`` /
      ``precision_recall_curve(label)`` with ``drop_intermediate=True`` (the same curve, without
      the collinear points), per class (``"positive"`` for a binary task) and for the pooled
      one-vs-rest histograms (``"micro"``, multiclass and multilabel). A threshold of ``inf``
      (the ROC curve's first point) and the precision-recall curve's last point, which has no
      threshold, are None. A class whose curve is undefined (no positives or no negatives: NaN
      rates) is left out;
    * ``reliability_diagram``: the 15 bins of ``reliability_diagram(15)`` that hold a sample.
    """
    if not isinstance(prefix, str):
        raise TypeError(f"`prefix` must be a string, got {type(prefix).__name__}.")
    return dict(_rich(obj, prefix))


def _rich(obj: Any, prefix: str) -> Iterator[tuple[str, Table]]:
    import metricstream as ms

    if isinstance(obj, AccumulatorGroup):
        for name, member in obj.items():
            yield from _rich(member, f"{prefix}{name}/")
        return
    if isinstance(obj, ms.BootstrapConfusionAccumulator):
        obj = obj.confusion()
    if isinstance(obj, ms.ConfusionAccumulator):
        if obj.num_samples > 0:
            yield f"{prefix}confusion_matrix", _confusion_table(obj)
    elif isinstance(obj, ms.ScoreAccumulator) and obj.num_samples > 0:
        yield f"{prefix}roc_curve", _curve_table(obj, "roc_curve", ROC_COLUMNS)
        yield (
            f"{prefix}precision_recall_curve",
            _curve_table(obj, "precision_recall_curve", PR_COLUMNS),
        )
        yield f"{prefix}reliability_diagram", _reliability_table(obj)


def _class_names(acc: Any) -> list[str]:
    names = acc.class_names
    return [str(name) for name in names] if names else [str(i) for i in range(acc.num_classes)]


def _confusion_table(acc: Any) -> Table:
    names = _class_names(acc)
    matrix = acc.confusion_matrix().tolist()  # int64 counts -> int, weights -> float
    rows = [
        [names[i], names[j], matrix[i][j]] for i in range(len(names)) for j in range(len(names))
    ]
    return Table("confusion_matrix", CONFUSION_COLUMNS, rows, acc)


def _curves(acc: Any) -> list[tuple[str, dict[str, Any]]]:
    if acc.task == "binary":
        return [("positive", {})]
    return [(str(i), {"label": i}) for i in range(acc.num_classes)] + [("micro", {"micro": True})]


def _curve_table(acc: Any, view: str, columns: tuple[str, ...]) -> Table:
    rows: list[list[Any]] = []
    for name, where in _curves(acc):
        with warnings.catch_warnings():
            # A class without positives or negatives: NaN rates, left out below.
            warnings.simplefilter("ignore", UndefinedMetricWarning)
            x, y, thresholds = getattr(acc, view)(drop_intermediate=True, **where)
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            continue
        cut = thresholds.tolist() + [None] * (len(x) - len(thresholds))
        rows.extend(
            [name, a, b, t if t is None or math.isfinite(t) else None]
            for a, b, t in zip(x.tolist(), y.tolist(), cut, strict=True)
        )
    return Table(view, columns, rows, acc)


def _reliability_table(acc: Any) -> Table:
    diagram = acc.reliability_diagram(15)
    counts = np.asarray(diagram.counts)
    rows = [
        [
            float(diagram.edges[i]),
            float(diagram.edges[i + 1]),
            counts[i].item(),
            float(diagram.accuracy[i]),
            float(diagram.confidence[i]),
        ]
        for i in np.flatnonzero(counts > 0)
    ]
    return Table("reliability_diagram", RELIABILITY_COLUMNS, rows, acc)


def _figure(table: Table) -> Any:
    acc = table.source
    if table.kind == "confusion_matrix":
        return acc.plot().figure
    if table.kind == "roc_curve":
        return acc.plot_roc().figure
    if table.kind == "precision_recall_curve":
        return acc.plot_precision_recall().figure
    return acc.plot_calibration(15).figure


def _close(figure: Any) -> None:
    # Figures made through pyplot stay registered there until closed.
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close(figure)


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"logging to {extra} needs {module}, which is not installed: "
            f'pip install "metricstream[{extra}]"'
        ) from error


def _check_step(step: Any) -> int | None:
    if step is None:
        return None
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"`step` must be a non-negative integer or None, got {step!r}.")
    return int(step)


def log_to_mlflow(
    acc_or_group: Accumulator | AccumulatorGroup | Any,
    *,
    step: int | None = None,
    prefix: str = "",
    run: Any = None,
    figures: bool = True,
) -> dict[str, float]:
    """Log an accumulator or group to an MLflow run: metrics, tables and figures.

    * metrics: ``flat_scalars(acc_or_group, prefix)`` (formulas and the 0/0 rule there: a 0/0
      ratio is 0.0 with an ``UndefinedMetricWarning``, undefined score metrics NaN) at ``step``
      (0 when None), in one ``log_batch``;
    * for every rich part of :func:`rich_tables` (key ``k``): the artifact ``k.json`` in the
      format of MLflow's ``log_table`` (``{"columns": [...], "data": [[...]]}``, readable with
      ``mlflow.load_table``), written with ``log_dict`` because ``log_table`` rounds floats to
      10 digits; for the confusion matrix also ``k_matrix.json``, ``{"class_names": [...],
      "matrix": [[...]]}`` (rows true, columns predicted); and with ``figures=True`` (needs
      matplotlib) the picture ``k.png`` through ``log_figure``. With ``step`` the artifact
      names end in ``_step<step>``, so that every epoch keeps its own.

    ``run`` is an ``mlflow.ActiveRun``/``Run`` or a run id; by default the active run. Returns
    the scalars logged.

    Raises:
        ImportError: mlflow is not installed (``pip install "metricstream[mlflow]"``).
        ValueError: no run is given and none is active, or ``step`` is not a non-negative int.
    """
    step = _check_step(step)
    mlflow = _require("mlflow", "mlflow")
    from mlflow.entities import Metric

    run_id = _mlflow_run_id(mlflow, run)
    scalars = flat_scalars(acc_or_group, prefix)
    tables = rich_tables(acc_or_group, prefix)
    client = mlflow.MlflowClient()
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now, step or 0) for key, value in scalars.items()]
    for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    suffix = "" if step is None else f"_step{step}"
    for key, table in tables.items():
        document = {"columns": list(table.columns), "data": table.rows}
        client.log_dict(run_id, document, f"{key}{suffix}.json")
        if table.kind == "confusion_matrix":
            matrix = {
                "class_names": _class_names(table.source),
                "matrix": table.source.confusion_matrix().tolist(),
            }
            client.log_dict(run_id, matrix, f"{key}_matrix{suffix}.json")
        if figures:
            figure = _figure(table)
            try:
                client.log_figure(run_id, figure, f"{key}{suffix}.png")
            finally:
                _close(figure)
    if tables:
        _register_tables(client, run_id, [f"{key}{suffix}.json" for key in tables])
    return scalars


def _register_tables(client: Any, run_id: str, paths: list[str]) -> None:
    """Declare the files tables, as ``log_table`` does, so that ``mlflow.load_table`` and the
    MLflow UI read them as such."""
    tag = "mlflow.loggedArtifacts"
    listed = json.loads(client.get_run(run_id).data.tags.get(tag, "[]"))
    for path in paths:
        entry = {"path": path, "type": "table"}
        if entry not in listed:
            listed.append(entry)
    client.set_tag(run_id, tag, json.dumps(listed))


def _mlflow_run_id(mlflow: Any, run: Any) -> str:
    if run is None:
        active = mlflow.active_run()
        if active is None:
            raise ValueError(
                "log_to_mlflow: no MLflow run is active and `run` is None; call it inside "
                "`with mlflow.start_run():` or pass run=<run or run id>."
            )
        return str(active.info.run_id)
    if isinstance(run, str):
        return run
    info = getattr(run, "info", None)
    if info is None or not hasattr(info, "run_id"):
        raise TypeError(
            f"`run` must be an MLflow run (with .info.run_id) or a run id string, "
            f"got {type(run).__name__}."
        )
    return str(info.run_id)


_WANDB_CHARTS = {
    "confusion_matrix": (
        "wandb/confusion_matrix/v1",
        {"Actual": "Actual", "Predicted": "Predicted", "nPredictions": "nPredictions"},
        {},
    ),
    "roc_curve": (
        "wandb/area-under-curve/v0",
        {"x": "fpr", "y": "tpr", "class": "class"},
        {"x-axis-title": "False positive rate", "y-axis-title": "True positive rate"},
    ),
    "precision_recall_curve": (
        "wandb/area-under-curve/v0",
        {"x": "recall", "y": "precision", "class": "class"},
        {"x-axis-title": "Recall", "y-axis-title": "Precision"},
    ),
    "reliability_diagram": (
        "wandb/line/v0",
        {"x": "confidence", "y": "accuracy", "stroke": None},
        {},
    ),
}


def log_to_wandb(
    acc_or_group: Accumulator | AccumulatorGroup | Any,
    *,
    step: int | None = None,
    prefix: str = "",
    run: Any = None,
) -> dict[str, float]:
    """Log an accumulator or group to a Weights & Biases run: metrics and native charts.

    One ``run.log`` call (at ``step``, or W&B's own step when None) with the scalars of
    ``flat_scalars(acc_or_group, prefix)`` (formulas and the 0/0 rule there) and, for every
    rich part of :func:`rich_tables` (key ``k``), a ``wandb.Table`` rendered as W&B's own
    charts render it (``wandb.plot_table``; the table itself lands under ``k_table``): the
    confusion matrix with the ``wandb/confusion_matrix/v1`` preset of
    ``wandb.plot.confusion_matrix``, but from the counts, so its cells are exactly
    ``confusion_matrix()`` (weights included); the ROC and precision-recall curves with the
    ``wandb/area-under-curve/v0`` preset of ``wandb.plot.roc_curve`` / ``pr_curve``, every
    point of the curves (``pr_curve`` interpolates 21 recalls from the raw scores); the
    reliability diagram as a line of (mean confidence, accuracy) per bin. A table keeps at most
    ``wandb.Table.MAX_ROWS`` rows: a longer curve table keeps evenly spaced points of each
    curve, its end points included.

    ``run`` is a ``wandb`` run; by default ``wandb.run``. Returns the scalars logged.

    Raises:
        ImportError: wandb is not installed (``pip install "metricstream[wandb]"``).
        ValueError: no run is given and none is active, or ``step`` is not a non-negative int.
    """
    step = _check_step(step)
    wandb = _require("wandb", "wandb")
    if run is None:
        run = wandb.run
        if run is None:
            raise ValueError(
                "log_to_wandb: no W&B run is active and `run` is None; call wandb.init() "
                "first or pass run=<run>."
            )
    scalars = flat_scalars(acc_or_group, prefix)
    payload: dict[str, Any] = dict(scalars)
    for key, table in rich_tables(acc_or_group, prefix).items():
        spec, fields, strings = _WANDB_CHARTS[table.kind]
        rows = table.rows
        if table.kind in ("roc_curve", "precision_recall_curve"):
            rows = _thin(rows, int(wandb.Table.MAX_ROWS))
        data = wandb.Table(columns=list(table.columns), data=rows)
        title = key.rsplit("/", 1)[-1].replace("_", " ")
        payload[key] = wandb.plot_table(spec, data, fields, {"title": title, **strings})
    run.log(payload, step=step)
    return scalars


def _thin(rows: list[list[Any]], limit: int) -> list[list[Any]]:
    """At most ``limit`` rows: evenly spaced rows of each curve (same first column), end points
    kept (a table longer than W&B's limit is not logged whole)."""
    if len(rows) <= limit:
        return rows
    groups: dict[Any, list[list[Any]]] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row)
    each = max(2, limit // len(groups))
    kept: list[list[Any]] = []
    for members in groups.values():
        if len(members) <= each:
            kept.extend(members)
        else:
            index = np.unique(np.linspace(0, len(members) - 1, each).round().astype(np.int64))
            kept.extend(members[i] for i in index.tolist())
    return kept[:limit]
