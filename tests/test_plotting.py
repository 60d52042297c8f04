"""Heatmap and per-class bar chart: what is drawn (values, names, colour bar), the automatic
annotation threshold, and a PNG that renders."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from metricstream import ConfusionAccumulator  # noqa: E402
from metricstream.plotting import (  # noqa: E402
    ANNOTATE_MAX_CLASSES,
    plot_confusion_matrix,
    plot_per_class,
)

MATRIX = np.array([[5, 1, 0], [2, 7, 1], [0, 0, 4]])


def test_heatmap_annotates_counts_and_names_the_classes():
    ax = plot_confusion_matrix(MATRIX, class_names=["cat", "dog", "hen"])
    assert [t.get_text() for t in ax.texts] == [str(v) for v in MATRIX.ravel()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cat", "dog", "hen"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cat", "dog", "hen"]
    assert ax.get_xlabel() == "predicted class" and ax.get_ylabel() == "true class"
    assert ax.get_title() == "Confusion matrix (20 samples)"
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    np.testing.assert_array_equal(ax.images[0].get_array(), MATRIX)


@pytest.mark.parametrize(
    ("normalize", "row"),
    [
        ("true", ["0.83", "0.17", "0.00"]),
        ("pred", ["0.71", "0.12", "0.00"]),
        ("all", ["0.25", "0.05", "0.00"]),
    ],
)
def test_normalized_heatmap_shows_rates(normalize, row):
    ax = plot_confusion_matrix(MATRIX, normalize=normalize)
    assert [t.get_text() for t in ax.texts[:3]] == row
    assert ax.images[0].get_clim() == (0.0, 1.0)


def test_annotation_is_left_out_for_many_classes_unless_asked():
    big = np.eye(ANNOTATE_MAX_CLASSES + 1, dtype=np.int64) * 3
    assert len(plot_confusion_matrix(big).texts) == 0
    assert len(plot_confusion_matrix(big, annotate=True).texts) == big.size
    assert len(plot_confusion_matrix(MATRIX, annotate=False).texts) == 0
    small = np.eye(ANNOTATE_MAX_CLASSES, dtype=np.int64)
    assert len(plot_confusion_matrix(small).texts) == small.size


def test_large_counts_are_shortened_and_weights_keep_decimals():
    ax = plot_confusion_matrix([[1_234_567, 120_000], [99_999, 0]], colorbar=False)
    assert [t.get_text() for t in ax.texts] == ["1.2M", "120k", "99999", "0"]
    assert len(ax.figure.axes) == 1
    ax = plot_confusion_matrix(np.array([[0.5, 2.25], [1.0, 0.0]]))
    assert [t.get_text() for t in ax.texts] == ["0.5", "2.25", "1", "0"]


def test_draws_on_a_given_axes():
    from matplotlib.figure import Figure

    figure = Figure()
    left, right = figure.subplots(1, 2)
    assert plot_confusion_matrix(MATRIX, ax=left, colorbar=False) is left
    assert plot_per_class(MATRIX, ax=right) is right


def test_per_class_bars_are_the_library_metrics():
    acc = ConfusionAccumulator.from_matrix(MATRIX, class_names=["cat", "dog", "hen"])
    ax = acc.plot_per_class()
    heights = np.array([patch.get_height() for patch in ax.patches]).reshape(4, 3)
    np.testing.assert_allclose(heights[0], acc.precision())
    np.testing.assert_allclose(heights[1], acc.recall())
    np.testing.assert_allclose(heights[2], acc.f1())
    np.testing.assert_allclose(heights[3], acc.jaccard())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "precision",
        "recall",
        "F1",
        "IoU",
    ]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cat", "dog", "hen"]


def test_per_class_undefined_values_get_no_bar_and_no_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = plot_per_class([[2, 0], [1, 0]], metrics=["precision"])  # class 1 never predicted
    assert [patch.get_height() for patch in ax.patches] == [pytest.approx(2 / 3), 0.0]


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`metrics` must be a non-empty subset"):
        plot_per_class(MATRIX, metrics=["accuracy"])
    with pytest.raises(ValueError, match=r"`class_names` has 2 names, but the matrix has 3"):
        plot_confusion_matrix(MATRIX, class_names=["a", "b"])
    with pytest.raises(ValueError, match=r"`normalize` must be"):
        plot_confusion_matrix(MATRIX, normalize="rows")


def test_accumulator_plot_uses_its_class_names_and_writes_a_png(tmp_path):
    acc = ConfusionAccumulator(3, class_names=["cat", "dog", "hen"])
    acc.update([0, 1, 2, 2], [0, 2, 2, 1])
    ax = acc.plot(normalize="true")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cat", "dog", "hen"]
    assert acc.plot(class_names=["a", "b", "c"]).get_xticklabels()[0].get_text() == "a"
    ax.figure.savefig(tmp_path / "cm.png")
    data = (tmp_path / "cm.png").read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000


def test_many_classes_get_a_subset_of_tick_labels():
    from metricstream.plotting.confusion import TICK_LABEL_MAX_CLASSES

    k = 3 * TICK_LABEL_MAX_CLASSES
    ax = plot_confusion_matrix(np.eye(k, dtype=np.int64), class_names=[f"c{i}" for i in range(k)])
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) <= TICK_LABEL_MAX_CLASSES and labels[:2] == ["c0", "c3"]
