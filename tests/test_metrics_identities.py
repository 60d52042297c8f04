"""Identities between the metrics, on arbitrary matrices (hypothesis), wherever both sides are
defined: complements, informedness/markedness/MCC, LR and DOR, Dice/IoU, micro averages."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from metricstream import metrics as ms

NAN = np.nan


@st.composite
def matrices(draw):
    k = draw(st.integers(1, 6))
    return draw(arrays(np.int64, (k, k), elements=st.integers(0, 30)))


def both(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    mask = np.isfinite(a) & np.isfinite(b)
    np.testing.assert_allclose(a[mask], b[mask], rtol=1e-12, atol=1e-12)
    return mask


# Examples per property: the profile's (tests/conftest.py): 60 by default, 300 in CI.
@given(matrices())
def test_identities(matrix):
    m = dict(zero_division=NAN)
    tpr, tnr = ms.recall(matrix, **m), ms.specificity(matrix, **m)
    ppv, npv = ms.precision(matrix, **m), ms.negative_predictive_value(matrix, **m)
    both(ms.false_negative_rate(matrix, **m), 1 - tpr)
    both(ms.false_positive_rate(matrix, **m), 1 - tnr)
    both(ms.false_discovery_rate(matrix, **m), 1 - ppv)
    both(ms.false_omission_rate(matrix, **m), 1 - npv)
    bm, mk = ms.informedness(matrix, **m), ms.markedness(matrix, **m)
    both(bm, tpr + tnr - 1)
    both(mk, ppv + npv - 1)
    # per-class MCC is the signed geometric mean of informedness and markedness
    mcc = ms.ovr_matthews_corrcoef(matrix, **m)
    both(mcc**2, bm * mk)
    # Dice = 2 IoU / (1 + IoU); DOR = LR+ / LR-
    iou = ms.jaccard(matrix, **m)
    both(ms.dice(matrix, **m), 2 * iou / (1 + iou))
    with np.errstate(all="ignore"):
        lr_ratio = ms.positive_likelihood_ratio(matrix, **m) / ms.negative_likelihood_ratio(
            matrix, **m
        )
    both(ms.diagnostic_odds_ratio(matrix, **m), lr_ratio)
    # micro averages over all classes
    k, n = matrix.shape[0], matrix.sum()
    if n:
        accuracy = ms.accuracy(matrix)
        both(ms.false_negative_rate(matrix, average="micro", **m), 1 - accuracy)
        if k > 1:
            both(ms.false_positive_rate(matrix, average="micro", **m), (1 - accuracy) / (k - 1))
        both(ms.hamming_loss(matrix), 1 - accuracy)
        both(ms.fwiou(matrix), ms.jaccard(matrix, average="weighted", zero_division=0))
        both(ms.prevalence(matrix).sum(), 1.0)
        both(ms.zero_one_loss(matrix, normalize=False), n - np.trace(matrix))
    # the segmentation mean and ignore_absent agree
    both(ms.miou(matrix, **m), ms.jaccard(matrix, average="macro", ignore_absent=True, **m))
    # rates are in [0, 1], scores in [-1, 1]
    for values in (tpr, tnr, ppv, npv, iou):
        assert ((values[np.isfinite(values)] >= 0) & (values[np.isfinite(values)] <= 1)).all()
    for values in (bm, mk, mcc):
        finite = values[np.isfinite(values)]
        assert ((finite >= -1 - 1e-12) & (finite <= 1 + 1e-12)).all()


@given(matrices(), st.sampled_from([0, 1, NAN]))
def test_averages_never_nan_unless_asked(matrix, zd):
    for name in (
        "precision",
        "recall",
        "f1",
        "jaccard",
        "specificity",
        "negative_predictive_value",
        "informedness",
        "markedness",
        "ovr_matthews_corrcoef",
    ):
        for average in ("micro", "macro", "weighted"):
            for ignore_absent in (False, True):
                value = getattr(ms, name)(
                    matrix, average=average, zero_division=zd, ignore_absent=ignore_absent
                )
                assert isinstance(value, float)
                if not np.isnan(zd):
                    assert not np.isnan(value), (name, average, ignore_absent)
