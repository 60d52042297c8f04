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


def seeds(count: int, default: int) -> list:
    """``range(count)``, with all but the first ``default`` seeds marked slow (CI runs them)."""
    return [
        seed if seed < default else pytest.param(seed, marks=pytest.mark.slow)
        for seed in range(count)
    ]


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
    if k > 1 and rng.random() < 0.15:
        # nothing classified correctly: scikit-learn's supports become floats
        y_pred = (y_true + rng.integers(1, k, size=n)) % k
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
        return (
            isinstance(b, dict)
            and list(a) == list(b)
            and all(_dict_equal(a[key], b[key]) for key in a)
        )
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("seed", seeds(150, 30))
def test_classification_report_matches_sklearn(seed):
    k, y_true, y_pred, weights, labels, names, digits, zd = _random_case(seed)
    acc = ConfusionAccumulator(k, weighted=weights is not None).update(y_true, y_pred, weights)
    for output_dict in (False, True):
        kwargs = dict(
            labels=labels,
            target_names=names,
            digits=digits,
            zero_division=zd,
            output_dict=output_dict,
        )
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


@pytest.mark.parametrize("seed", seeds(20, 8))
def test_accumulator_report_uses_class_names(seed):
    k, y_true, y_pred, weights, labels, _, digits, _ = _random_case(1000 + seed)
    names = [f"class-{i}-name" for i in range(k)]
    acc = ConfusionAccumulator(k, class_names=names, weighted=weights is not None)
    acc.update(y_true, y_pred, weights)
    shown = np.union1d(y_true, y_pred) if labels is None else labels
    expected = sk_classification_report(
        y_true,
        y_pred,
        sample_weight=weights,
        labels=labels,
        digits=digits,
        zero_division=0,
        target_names=[names[i] for i in shown],
    )
    assert acc.classification_report(digits=digits, labels=labels, zero_division=0) == expected
    if labels is not None:  # class names are accepted as labels too
        by_name = [names[i] for i in labels]
        assert acc.classification_report(digits=digits, labels=by_name, zero_division=0) == expected


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
    return value is None or type(value) in (int, str, float, bool)


@pytest.mark.parametrize("zd", [0, 1, np.nan], ids=["0", "1", "nan"])
def test_summary_is_json_ready(zd):
    data = summary(MATRIX, class_names=["cat", "fish", "hen", "yak"], zero_division=zd)
    assert _is_json_ready(data)
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    yak = data["per_class"][3]
    assert yak["name"] == "yak" and yak["support"] == 0 and type(yak["support"]) is int
    expected = None if zd is not zd or (isinstance(zd, float) and np.isnan(zd)) else float(zd)
    assert yak["precision"] == expected and yak["recall"] == expected and yak["iou"] == expected
    assert yak["specificity"] == 1.0 and yak["npv"] == 1.0  # defined: N - AP = 25 > 0
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
    acc.update(
        np.repeat([0, 1, 2], [6, 10, 9]),
        np.array([0] * 4 + [1] + [2] + [0] * 6 + [1] * 2 + [2] * 2 + [0] * 3 + [2] * 6),
    )
    assert acc.confusion_matrix().tolist() == MATRIX.tolist()
    text = acc.summary("text", zero_division=np.nan, digits=2)
    assert "accuracy  0.48" in text and "y|k" in text and "–" in text
    markdown = acc.summary("markdown", zero_division=np.nan)
    assert "| y\\|k | 0 | 0 | – | – | – | 1.0000 | 1.0000 | – |" in markdown
    assert markdown == summary_markdown(MATRIX, class_names=acc.class_names, zero_division=np.nan)
    assert acc.summary("dict", zero_division=0) == summary(
        MATRIX, class_names=acc.class_names, zero_division=0
    )
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
@pytest.mark.parametrize(
    "digits", [d if d in (0, 2, 5) else pytest.param(d, marks=pytest.mark.slow) for d in range(7)]
)
def test_report_grid_digits_zero_division_weights(digits, zd, weighted):
    """Every digits × zero_division × weighting, on data with all three degenerate classes."""
    rng = np.random.default_rng(digits)
    y_true = rng.choice([0, 1, 3, 5], size=80)  # 2 and 4 never true, 6 absent
    y_pred = np.where(rng.random(80) < 0.6, y_true, rng.choice([0, 2, 4, 5], size=80))
    y_pred[y_true == 3] = 0  # 3 true but never predicted
    weights = rng.integers(1, 9, size=80) / 8 if weighted else None
    acc = ConfusionAccumulator(7, weighted=weighted).update(y_true, y_pred, weights)
    for labels in (None, [0, 1, 2, 3, 4, 5, 6], [5, 3, 2]):
        kwargs = dict(labels=labels, digits=digits, zero_division=zd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = sk_classification_report(y_true, y_pred, sample_weight=weights, **kwargs)
            got = acc.classification_report(**kwargs)
            expected_dict = sk_classification_report(
                y_true, y_pred, sample_weight=weights, output_dict=True, **kwargs
            )
            got_dict = acc.classification_report(output_dict=True, **kwargs)
        assert got == expected
        assert _dict_equal(got_dict, expected_dict)


# ---------------------------------------------------------------------- scikit-learn's corners
def test_supports_are_floats_when_nothing_is_classified_correctly():
    y_true, y_pred = [0, 0, 1], [1, 1, 0]
    matrix = ConfusionAccumulator(2).update(y_true, y_pred).matrix
    got = classification_report(matrix, zero_division=0)
    assert got == sk_classification_report(y_true, y_pred, zero_division=0)
    assert "       2.0\n" in got and "       3.0\n" in got
    assert _dict_equal(
        classification_report(matrix, zero_division=0, output_dict=True),
        sk_classification_report(y_true, y_pred, zero_division=0, output_dict=True),
    )


def _no_true_positive_case(seed: int):
    """Every prediction wrong: a random derangement of the true classes, some absent."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 12))
    n = int(rng.integers(1, 50))
    y_true = rng.integers(0, k, size=n)
    y_pred = (y_true + rng.integers(1, k, size=n)) % k
    labels = None
    if rng.random() < 0.3:
        labels = [int(v) for v in rng.choice(k, size=int(rng.integers(1, k + 1)), replace=False)]
    return k, y_true, y_pred, labels


@pytest.mark.parametrize("seed", seeds(40, 12))
def test_report_without_true_positives_matches_sklearn(seed):
    k, y_true, y_pred, labels = _no_true_positive_case(seed)
    acc = ConfusionAccumulator(k).update(y_true, y_pred)
    zd = ZERO_DIVISIONS[seed % 4]
    for digits in (0, 2, 5):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = sk_classification_report(
                y_true, y_pred, labels=labels, digits=digits, zero_division=zd
            )
            expected_dict = sk_classification_report(
                y_true, y_pred, labels=labels, zero_division=zd, output_dict=True
            )
            got = classification_report(acc.matrix, labels=labels, digits=digits, zero_division=zd)
            got_dict = classification_report(
                acc.matrix, labels=labels, zero_division=zd, output_dict=True
            )
        assert got == expected, f"\n{got}\n{expected}"
        assert _dict_equal(got_dict, expected_dict), (got_dict, expected_dict)


@pytest.mark.parametrize("seed", seeds(40, 12))
def test_nan_averages_are_bit_equal_to_sklearn(seed):
    """Many classes and ``zero_division=np.nan``: numpy's pairwise sums group by position."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(8, 40))
    n = int(rng.integers(k, 4 * k))
    y_true = rng.integers(0, k, size=n)
    y_pred = np.where(rng.random(n) < 0.4, y_true, rng.integers(0, k, size=n))
    weights = rng.integers(1, 9, size=n) / 8 if seed % 3 == 0 else None
    acc = ConfusionAccumulator(k, weighted=weights is not None).update(y_true, y_pred, weights)
    labels = None
    if seed % 2:  # a selection of labels, in another order, some never seen
        labels = [int(v) for v in rng.choice(k, size=int(rng.integers(8, k + 1)), replace=False)]
    expected = sk_classification_report(
        y_true, y_pred, labels=labels, sample_weight=weights, zero_division=np.nan, output_dict=True
    )
    got = classification_report(acc.matrix, labels=labels, zero_division=np.nan, output_dict=True)
    assert _dict_equal(got, expected), (got["macro avg"], expected["macro avg"])
    assert classification_report(
        acc.matrix, labels=labels, zero_division=np.nan, digits=17
    ) == sk_classification_report(
        y_true, y_pred, labels=labels, sample_weight=weights, zero_division=np.nan, digits=17
    )


def test_nan_macro_average_of_the_reported_case():
    # 10 classes, 3 of them never predicted: nanmean over all 10 entries, not mean over 7
    precision = np.array([0.5, np.nan, 0.2, 1 / 3, np.nan, 0.7, 0.1, np.nan, 0.9, 0.3])
    from metricstream.report.confusion import _nanaverage

    assert _nanaverage(precision) == np.nanmean(precision)
    assert np.isnan(_nanaverage(np.array([np.nan, np.nan])))
    assert _nanaverage(np.array([0.5, 1.0]), np.array([0, 0])) == 0.75


# ---------------------------------------------------------------------- summary: the whole state
def test_summary_carries_the_matrix_the_names_and_the_averages():
    from metricstream import metrics

    data = summary(MATRIX, class_names=["cat", "fish", "hen", "yak"], zero_division=0)
    assert data["confusion_matrix"] == MATRIX.tolist()
    assert data["class_names"] == ["cat", "fish", "hen", "yak"]
    assert data["weighted"] is False
    overall = data["overall"]
    for average in ("macro", "weighted"):
        assert overall[f"{average}_precision"] == metrics.precision(
            MATRIX, average=average, zero_division=0
        )
        assert overall[f"{average}_recall"] == metrics.recall(
            MATRIX, average=average, zero_division=0
        )
        assert overall[f"{average}_f1"] == metrics.f1(MATRIX, average=average, zero_division=0)
    assert _is_json_ready(data)


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "weights"])
def test_an_accumulator_is_rebuilt_from_the_json_summary(weighted):
    rng = np.random.default_rng(7)
    y_true, y_pred = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    weights = rng.random(300) * 3 if weighted else None
    names = ["a", "b", "c", "d", "e"]
    acc = ConfusionAccumulator(5, class_names=names, weighted=weighted)
    acc.update(y_true, y_pred, weights)
    data = json.loads(json.dumps(acc.summary("dict", zero_division=0), allow_nan=False))
    rebuilt = ConfusionAccumulator.from_matrix(
        np.array(data["confusion_matrix"]),
        class_names=data["class_names"],
        weighted=data["weighted"],
    )
    assert rebuilt == acc
    assert rebuilt.matrix.tobytes() == acc.matrix.tobytes()  # bit for bit, also the weights
    assert rebuilt.summary("dict", zero_division=0) == data


def test_fractional_sample_counts_are_formatted():
    matrix = np.array([[20.1, 0.089], [4.1, 30.0]])
    text = summary_text(matrix, zero_division=0, digits=4)
    assert text.startswith("samples: 54.2890, classes: 2\n")
    assert "20.1890" in text and "54.288999" not in text
    assert summary_text(MATRIX, zero_division=0).startswith("samples: 25, classes: 4\n")
    assert "54.2890 samples" in summary_html(matrix)


def _cell_by_cell_tables(data: dict, digits: int) -> tuple[list[str], list[str]]:
    """The per-class rows of the text and markdown summaries, formatted one cell at a time from
    the summary dict (the reference for the one-pass formatting of whole columns)."""

    def rate(value):
        return "–" if value is None else f"{value:.{digits}f}"

    def count(value):
        return str(value) if isinstance(value, int) else f"{value:.{digits}f}"

    keys = ["precision", "recall", "f1", "specificity", "npv", "iou"]
    header = ["class", "support", "predicted", "precision", "recall", "F1", "specificity"]
    header += ["NPV", "IoU"]
    rows = [
        [entry["name"], count(entry["support"]), count(entry["predicted"])]
        + [rate(entry[key]) for key in keys]
        for entry in data["per_class"]
    ]
    table = [header, *rows]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    text = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    markdown = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return text, markdown


@pytest.mark.parametrize("seed", seeds(60, 20))
def test_summary_tables_equal_cell_by_cell_formatting(seed):
    # Integer counts, whole and fractional weights (a float matrix can leave a tiny negative TN,
    # so a rate formats as "-0.0000"), absent classes (NaN rates shown as "–"), names with "|",
    # "%" and non-ASCII characters, large counts (wider columns), every digits from 0 to 7.
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 30))
    kind = seed % 4
    if kind == 0:
        matrix = rng.integers(0, 50, (k, k)) * (rng.random((k, k)) < 0.5)
    elif kind == 1:
        matrix = rng.integers(0, 10**12, (k, k))
    elif kind == 2:
        matrix = (rng.random((k, k)) * 3.3) * (rng.random((k, k)) < 0.6)
    else:
        matrix = rng.integers(0, 9, (k, k)).astype(np.float64) / 4
    absent = rng.random(k) < 0.2
    matrix[absent, :] = 0
    matrix[:, absent] = 0
    names = [
        ["c|%d", "ünï %s", "x" * int(rng.integers(0, 15)), "%"][i % 4] + str(i) for i in range(k)
    ]
    digits = int(rng.integers(0, 8))
    zero_division = ZERO_DIVISIONS[seed % 4]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        data = summary(matrix, class_names=names, zero_division=zero_division)
        text = summary_text(matrix, class_names=names, zero_division=zero_division, digits=digits)
        markdown = summary_markdown(
            matrix, class_names=names, zero_division=zero_division, digits=digits
        )
    text_rows, markdown_rows = _cell_by_cell_tables(data, digits)
    assert text.split("\n")[-(k + 1) :] == text_rows
    assert markdown.split("\n")[-k:] == markdown_rows


@pytest.mark.parametrize("digits", [0, 4])
def test_summary_tables_with_a_negative_rounding_residue(digits):
    # TN_0 = N - AP_0 - PP_0 + TP_0 is -5.6e-17 here (float sums), so specificity prints as
    # "-0.0000": that column is formatted cell by cell (its width is not the largest value's).
    matrix = np.array([[0.2, 0.0, 0.4], [0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
    data = summary(matrix, zero_division=np.nan)
    assert data["per_class"][0]["specificity"] < 0
    text_rows, markdown_rows = _cell_by_cell_tables(data, digits)
    assert "-0" in text_rows[1]
    text = summary_text(matrix, zero_division=np.nan, digits=digits)
    assert text.split("\n")[-4:] == text_rows
    assert summary_markdown(matrix, zero_division=np.nan, digits=digits).split("\n")[-3:] == (
        markdown_rows
    )
