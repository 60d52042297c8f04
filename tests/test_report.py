"""classification_report against scikit-learn, character for character; summary reports."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import classification_report as sk_classification_report

from metricstream import ConfusionAccumulator, UndefinedMetricWarning
from metricstream.report import (
    classification_report,
    summary,
    summary_html,
    summary_markdown,
    summary_text,
)

ZERO_DIVISIONS = ["warn", 0, 1, np.nan]


def _random_case(seed: int):
    """Random labels with absent/degenerate classes, optional dyadic weights, subsets, names."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 9))
    n = int(rng.integers(1, 60))
    # concentrate on a random subset of classes so some are absent, never true or never predicted
    true_classes = rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False)
    pred_classes = rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False)
    y_true = rng.choice(true_classes, size=n)
    y_pred = np.where(rng.random(n) < 0.5, y_true, rng.choice(pred_classes, size=n))
    weights = None
    if rng.random() < 0.3:
        # multiples of 1/4 keep every sum exact, so supports print the same digits
        # (non-zero: a zero-weight sample still adds its class to scikit-learn's
        # unique_labels, but leaves no trace in a matrix)
        weights = rng.integers(1, 12, size=n) / 4
    labels = None
    if rng.random() < 0.4:
        size = int(rng.integers(1, k + 1))
        labels = [int(v) for v in rng.choice(k, size=size, replace=False)]
    present = np.union1d(y_true, y_pred)
    shown = present if labels is None else np.asarray(labels)
    target_names = None
    if rng.random() < 0.5:
        width = int(rng.choice([1, 5, 12, 13, 30]))
        target_names = [f"c{int(i)}".ljust(width, "x") for i in shown]
    digits = int(rng.integers(0, 7))
    zero_division = ZERO_DIVISIONS[int(rng.integers(0, 4))]
    return k, y_true, y_pred, weights, labels, target_names, digits, zero_division


def _dict_equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(
            _dict_equal(a[key], b[key]) for key in a)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("seed", range(150))
def test_classification_report_matches_sklearn(seed):
    k, y_true, y_pred, weights, labels, names, digits, zd = _random_case(seed)
    acc = ConfusionAccumulator(k, weighted=weights is not None).update(y_true, y_pred, weights)
    for output_dict in (False, True):
        kwargs = dict(labels=labels, target_names=names, digits=digits,
                      zero_division=zd, output_dict=output_dict)
        with warnings.catch_warnings(record=True) as sk_record:
            warnings.simplefilter("always")
            expected = sk_classification_report(y_true, y_pred, sample_weight=weights, **kwargs)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = classification_report(acc.matrix, **kwargs)
        if output_dict:
            assert _dict_equal(got, expected), (got, expected)
        else:
            assert got == expected, f"\n{got}\n{expected}"
        # the same warnings, word for word (scikit-learn's wording is reused)
        sk_undefined = {str(w.message) for w in sk_record if "ill-defined" in str(w.message)}
        ours = {str(w.message) for w in record if w.category is UndefinedMetricWarning}
        assert ours == sk_undefined


@pytest.mark.parametrize("seed", range(20))
def test_accumulator_report_uses_class_names(seed):
    k, y_true, y_pred, weights, labels, _, digits, _ = _random_case(1000 + seed)
    names = [f"class-{i}-name" for i in range(k)]
    acc = ConfusionAccumulator(k, class_names=names, weighted=weights is not None)
    acc.update(y_true, y_pred, weights)
    shown = np.union1d(y_true, y_pred) if labels is None else labels
    expected = sk_classification_report(
        y_true, y_pred, sample_weight=weights, labels=labels, digits=digits, zero_division=0,
        target_names=[names[i] for i in shown])
    assert acc.classification_report(digits=digits, labels=labels, zero_division=0) == expected
    if labels is not None:  # class names are accepted as labels too
        by_name = [names[i] for i in labels]
        assert acc.classification_report(digits=digits, labels=by_name,
                                          zero_division=0) == expected


def test_report_accuracy_row_versus_micro_avg():
    y_true, y_pred = [0, 1, 2, 2, 3], [0, 2, 2, 1, 3]
    matrix = ConfusionAccumulator(4).update(y_true, y_pred).matrix
    full = classification_report(matrix, labels=[0, 1, 2, 3, 4 % 4])
    assert "accuracy" in full
    subset = classification_report(matrix, labels=[0, 1])
    assert "micro avg" in subset and "accuracy" not in subset
    assert subset == sk_classification_report(y_true, y_pred, labels=[0, 1])


def test_report_dict_is_not_shared_with_cache():
    acc = ConfusionAccumulator(2).update([0, 1], [0, 1])
    first = acc.classification_report(output_dict=True, zero_division=0)
    first["0"]["precision"] = -1.0
    assert acc.classification_report(output_dict=True, zero_division=0)["0"]["precision"] == 1.0


def test_report_target_names_mismatch():
    with pytest.raises(ValueError, match="does not match size of target_names"):
        classification_report([[1, 0], [0, 1]], target_names=["a", "b", "c"])
    with pytest.warns(UserWarning, match="labels size, 1, does not match"):
        classification_report([[1, 0], [0, 1]], labels=[0], target_names=["a", "b", "c"])


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_report_digits_validated(bad, error):
    with pytest.raises(error, match="`digits`"):
        classification_report([[1, 0], [0, 1]], digits=bad)


# ---------------------------------------------------------------------- summary

MATRIX = np.array([[4, 1, 1, 0], [6, 2, 2, 0], [3, 0, 6, 0], [0, 0, 0, 0]])


def _is_json_ready(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_ready(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_is_json_ready(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or type(value) in (int, str, float)


@pytest.mark.parametrize("zd", [0, 1, np.nan], ids=["0", "1", "nan"])
def test_summary_is_json_ready(zd):
    data = summary(MATRIX, class_names=["cat", "fish", "hen", "yak"], zero_division=zd)
    assert _is_json_ready(data)
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    yak = data["per_class"][3]
    assert yak["name"] == "yak" and yak["support"] == 0 and type(yak["support"]) is int
    expected = None if zd is not zd or (isinstance(zd, float) and np.isnan(zd)) else float(zd)
    assert yak["precision"] == expected and yak["recall"] == expected and yak["iou"] == expected
    assert yak["specificity"] == 1.0 and yak["npv"] == 1.0   # defined: N - AP = 25 > 0
    assert data["overall"]["accuracy"] == 0.48
    assert data["num_samples"] == 25


def test_summary_warns_by_default():
    with pytest.warns(UndefinedMetricWarning):
        summary(MATRIX)


def test_summary_values_match_functions():
    from metricstream import metrics

    data = summary(MATRIX, zero_division=0)
    overall = data["overall"]
    assert overall["balanced_accuracy"] == metrics.balanced_accuracy(MATRIX[:3, :3])
    assert overall["cohen_kappa"] == metrics.cohen_kappa(MATRIX, zero_division=0)
    assert overall["miou"] == metrics.miou(MATRIX, zero_division=0)
    assert overall["fwiou"] == metrics.fwiou(MATRIX)
    assert [c["f1"] for c in data["per_class"]] == list(metrics.f1(MATRIX, zero_division=0))


def test_summary_weighted_counts_are_plain_numbers():
    data = summary(np.array([[1.5, 0.5], [0.0, 2.0]]), zero_division=0)
    assert data["num_samples"] == 4 and type(data["num_samples"]) is int
    assert data["per_class"][0]["support"] == 2 and data["per_class"][1]["predicted"] == 2.5
    assert _is_json_ready(data)


def test_summary_text_markdown_html():
    acc = ConfusionAccumulator(4, class_names=["cat", "fish", "hen", "y|k"])
    acc.update(np.repeat([0, 1, 2], [6, 10, 9]),
               np.array([0] * 4 + [1] + [2] + [0] * 6 + [1] * 2 + [2] * 2 + [0] * 3 + [2] * 6))
    assert acc.confusion_matrix().tolist() == MATRIX.tolist()
    text = acc.summary("text", zero_division=np.nan, digits=2)
    assert "accuracy  0.48" in text and "y|k" in text and "–" in text
    markdown = acc.summary("markdown", zero_division=np.nan)
    assert "| y\\|k | 0 | 0 | – | – | – | 1.0000 | 1.0000 | – |" in markdown
    assert markdown == summary_markdown(MATRIX, class_names=acc.class_names,
                                        zero_division=np.nan)
    assert acc.summary("dict", zero_division=0) == summary(MATRIX, class_names=acc.class_names,
                                                           zero_division=0)
    html = acc._repr_html_()
    assert html.startswith("<div") and "y|k" in html and "<table>" in html
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc._repr_html_()  # never warns in a notebook
    with pytest.raises(ValueError, match="`format` must be"):
        acc.summary("json")
    assert summary_text(MATRIX, zero_division=0).startswith("samples: 25, classes: 4")


def test_summary_html_truncates_many_classes():
    html = summary_html(np.eye(200, dtype=np.int64), max_rows=10)
    assert html.count("<tr>") < 40 and "…" in html


def test_summary_class_names_checked():
    with pytest.raises(ValueError, match="`class_names` must hold 2 names"):
        summary([[1, 0], [0, 1]], class_names=["a"])


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weights"])
@pytest.mark.parametrize("zd", ZERO_DIVISIONS, ids=["warn", "0", "1", "nan"])
@pytest.mark.parametrize("digits", range(7))
def test_report_grid_digits_zero_division_weights(digits, zd, weighted):
    """Every digits × zero_division × weighting, on data with all three degenerate classes."""
    rng = np.random.default_rng(digits)
    y_true = rng.choice([0, 1, 3, 5], size=80)   # 2 and 4 never true, 6 absent
    y_pred = np.where(rng.random(80) < 0.6, y_true, rng.choice([0, 2, 4, 5], size=80))
    y_pred[y_true == 3] = 0                       # 3 true but never predicted
    weights = rng.integers(1, 9, size=80) / 8 if weighted else None
    acc = ConfusionAccumulator(7, weighted=weighted).update(y_true, y_pred, weights)
    for labels in (None, [0, 1, 2, 3, 4, 5, 6], [5, 3, 2]):
        kwargs = dict(labels=labels, digits=digits, zero_division=zd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = sk_classification_report(y_true, y_pred, sample_weight=weights, **kwargs)
            got = acc.classification_report(**kwargs)
            expected_dict = sk_classification_report(y_true, y_pred, sample_weight=weights,
                                                     output_dict=True, **kwargs)
            got_dict = acc.classification_report(output_dict=True, **kwargs)
        assert got == expected
        assert _dict_equal(got_dict, expected_dict)
