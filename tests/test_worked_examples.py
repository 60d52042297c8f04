"""The worked examples of the seed notes (../shared/seeds), checked by hand."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from metricstream import ConfusionAccumulator, metrics

# Seed 004: cats, fish and hens. Rows are the true class, columns the predicted class.
CAT_FISH_HEN = np.array([[4, 1, 1], [6, 2, 2], [3, 0, 6]])


@pytest.fixture
def animals():
    return ConfusionAccumulator.from_matrix(CAT_FISH_HEN, class_names=["cat", "fish", "hen"])


def test_seed004_counts(animals):
    np.testing.assert_array_equal(animals.true_positives(), [4, 2, 6])
    np.testing.assert_array_equal(animals.true_negatives(), [10, 14, 13])
    np.testing.assert_array_equal(animals.false_positives(), [9, 1, 3])
    np.testing.assert_array_equal(animals.false_negatives(), [2, 8, 3])
    assert animals.num_samples == 25


def test_seed004_per_class(animals):
    np.testing.assert_allclose(animals.ovr_accuracy(), [0.56, 0.64, 0.76])
    np.testing.assert_allclose(animals.recall(), [4 / 6, 2 / 10, 6 / 9])
    np.testing.assert_allclose(animals.precision(), [4 / 13, 2 / 3, 6 / 9])


def test_seed004_averages(animals):
    assert animals.ovr_accuracy(average="macro") == pytest.approx((0.56 + 0.64 + 0.76) / 3)
    assert animals.recall(average="macro") == pytest.approx((4 / 6 + 2 / 10 + 6 / 9) / 3)
    assert animals.precision(average="macro") == pytest.approx((4 / 13 + 2 / 3 + 6 / 9) / 3)
    # Micro: 12 / 25 for accuracy, precision and recall alike.
    assert animals.accuracy() == animals.precision(average="micro") == 0.48
    assert animals.recall(average="micro") == 0.48
    # Weighted by class frequency r = (0.24, 0.40, 0.36).
    assert animals.ovr_accuracy(average="weighted") == pytest.approx(0.664)
    # The note prints 0.476 and 0.5754 because it rounds 2/3 to 0.66 before weighting; the exact
    # values are 0.48 (weighted recall always equals accuracy) and 0.5805...
    assert animals.recall(average="weighted") == pytest.approx(0.48)
    expected = float(F(4, 13) * F(6, 25) + F(2, 3) * F(10, 25) + F(6, 9) * F(9, 25))
    assert animals.precision(average="weighted") == pytest.approx(expected, abs=1e-15)


def test_seed004_class_names_select_labels(animals):
    assert animals.recall(labels=["fish"], average="macro") == pytest.approx(0.2)
    np.testing.assert_allclose(animals.precision(labels=["hen", "cat"]), [6 / 9, 4 / 13])


def test_seed001_binary_example():
    # gt = [0, 1, 0, 0], pd = [0, 1, 0, 1]. The note's code computes "Precision" as
    # cmat[1,1] / sum(cmat[1,:]), which is the recall of class 1 (rows are true classes) and
    # vice versa; here are the standard definitions.
    acc = ConfusionAccumulator(2).update([0, 1, 0, 0], [0, 1, 0, 1])
    np.testing.assert_array_equal(acc.matrix, [[2, 1], [0, 1]])
    assert acc.accuracy() == 0.75  # OA
    assert acc.balanced_accuracy() == pytest.approx((2 / 3 + 1) / 2)  # AA
    assert acc.precision()[1] == 0.5
    assert acc.recall()[1] == 1.0
    assert acc.f1()[1] == pytest.approx(2 * 0.5 * 1 / 1.5)
    np.testing.assert_allclose(acc.jaccard(), [2 / 3, 1 / 2])
    assert acc.miou() == pytest.approx((2 / 3 + 1 / 2) / 2)
    # po = 0.75, pe = (3*2 + 1*2) / 16 = 0.5, kappa = (po - pe) / (1 - pe) = 0.5
    assert acc.cohen_kappa() == pytest.approx(0.5)


def test_seed001_multiclass_example():
    acc = ConfusionAccumulator(3).update([2, 0, 2, 2, 0, 1], [0, 0, 2, 2, 0, 2])
    np.testing.assert_array_equal(acc.matrix, [[2, 0, 0], [0, 0, 1], [1, 0, 2]])
    assert acc.accuracy() == pytest.approx(4 / 6)
    assert acc.balanced_accuracy() == pytest.approx((1 + 0 + 2 / 3) / 3)
    np.testing.assert_allclose(acc.jaccard(), [2 / 3, 0, 1 / 2])
    assert acc.miou() == pytest.approx((2 / 3 + 0 + 1 / 2) / 3)
    # pe = (2*3 + 1*0 + 3*3) / 36 = 15/36; kappa = (24/36 - 15/36) / (21/36) = 9/21
    assert acc.cohen_kappa() == pytest.approx(9 / 21)


@pytest.mark.parametrize(
    ("tp", "fn", "fp", "tn", "iou"),
    [(1, 4, 1, 4, 1 / 6), (3, 2, 4, 1, 1 / 3), (2, 3, 2, 3, 2 / 7)],
    ids=["C1", "C2", "C3"],
)
def test_seed001_iou_table(tp, fn, fp, tn, iou):
    # Class 0 is "positive": row 0 holds TP and FN, row 1 holds FP and TN.
    matrix = np.array([[tp, fn], [fp, tn]])
    assert metrics.jaccard(matrix)[0] == pytest.approx(iou)


def test_miou_differs_from_macro_jaccard_on_absent_classes():
    # Class 2 never occurs: mIoU leaves it out, macro Jaccard scores it zero_division.
    matrix = np.array([[4, 1, 0], [6, 2, 0], [0, 0, 0]])
    per_class = [4 / 11, 2 / 9]
    assert metrics.miou(matrix) == pytest.approx(np.mean(per_class))
    assert metrics.jaccard(matrix, average="macro", zero_division=0) == pytest.approx(
        sum(per_class) / 3
    )
    assert metrics.jaccard(matrix, average="macro", zero_division=np.nan) == pytest.approx(
        np.mean(per_class)
    )
