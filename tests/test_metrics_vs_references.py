"""Issue-4 metrics against scikit-learn on randomized streams (to 1e-12), else against PyCM.

Each case is a random stream from ``tests.streams.make_case`` (skewed classes, classes absent
from the truth, the prediction or both; unweighted, integer and float weights). One-vs-rest
rates come from scikit-learn's binary metrics on ``y == i``.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import sklearn.metrics as skm

from metricstream import ConfusionAccumulator
from metricstream import metrics as ms

from .marks import slow_beyond
from .streams import make_case

# The first 18 streams run by default (every K, N and weight kind of make_case); all 60 in CI.
SEEDS = slow_beyond(range(60), 18, ids=lambda seed: f"seed{seed}")
RTOL = 1e-12


def quietly(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


@functools.cache
def case_and_oracle(seed: int):
    """The case, its accumulator, and scikit-learn's per-class binary scores (NaN = 0/0)."""
    case = make_case(seed)
    acc = ConfusionAccumulator(
        case.num_classes, weighted=case.weights is not None and case.weights.dtype.kind == "f"
    )
    for y_true, y_pred, w in case.batches():
        acc.update(y_true, y_pred, w)
    k, yt, yp, w = case.num_classes, case.y_true, case.y_pred, case.weights
    oracle: dict[str, list] = {
        key: [] for key in ("tpr", "ppv", "tnr", "npv", "mcc", "lr+", "lr-", "mlcm")
    }
    for i in range(k):
        t, p = yt == i, yp == i
        prec, rec, _, _ = quietly(
            skm.precision_recall_fscore_support,
            t,
            p,
            labels=[False, True],
            sample_weight=w,
            zero_division=np.nan,
            average=None,
        )
        oracle["tpr"].append(rec[1])
        oracle["ppv"].append(prec[1])
        oracle["tnr"].append(rec[0])
        oracle["npv"].append(prec[0])
        oracle["mcc"].append(quietly(skm.matthews_corrcoef, t, p, sample_weight=w))
        if t.all() or not t.any():  # scikit-learn needs both classes in y_true
            oracle["lr+"].append(np.nan)
            oracle["lr-"].append(np.nan)
        else:
            lr = quietly(
                skm.class_likelihood_ratios,
                t,
                p,
                labels=[False, True],
                sample_weight=w,
                replace_undefined_by=np.nan,
            )
            oracle["lr+"].append(lr[0])
            oracle["lr-"].append(lr[1])
    mlcm = skm.multilabel_confusion_matrix(yt, yp, sample_weight=w, labels=np.arange(k))
    # scikit-learn gets TN by subtraction: float weights can leave -1e-13 for an exact 0
    oracle["mlcm"] = np.where(np.abs(mlcm) < 1e-9, 0, mlcm)
    oracle = {key: np.asarray(value, dtype=np.float64) for key, value in oracle.items()}
    return case, acc, oracle


def close(ours, expected):
    np.testing.assert_allclose(ours, expected, rtol=RTOL, atol=RTOL, equal_nan=True)


def averaged(per_class, support, average):
    defined = ~np.isnan(per_class)
    if not defined.any():
        return np.nan
    if average == "weighted" and support[defined].sum() > 0:
        return np.average(per_class[defined], weights=support[defined])
    return np.mean(per_class[defined])


# name -> (per-class oracle from the binary scores, micro oracle from summed tn/fp/fn/tp)
RATES = {
    "specificity": (lambda o: o["tnr"], lambda tn, fp, fn, tp: tn / (tn + fp)),
    "negative_predictive_value": (lambda o: o["npv"], lambda tn, fp, fn, tp: tn / (tn + fn)),
    "false_positive_rate": (lambda o: 1 - o["tnr"], lambda tn, fp, fn, tp: fp / (tn + fp)),
    "false_negative_rate": (lambda o: 1 - o["tpr"], lambda tn, fp, fn, tp: fn / (tp + fn)),
    "false_discovery_rate": (lambda o: 1 - o["ppv"], lambda tn, fp, fn, tp: fp / (tp + fp)),
    "false_omission_rate": (lambda o: 1 - o["npv"], lambda tn, fp, fn, tp: fn / (tn + fn)),
    "informedness": (
        lambda o: o["tpr"] + o["tnr"] - 1,
        lambda tn, fp, fn, tp: tp / (tp + fn) + tn / (tn + fp) - 1,
    ),
    "markedness": (
        lambda o: o["ppv"] + o["npv"] - 1,
        lambda tn, fp, fn, tp: tp / (tp + fp) + tn / (tn + fn) - 1,
    ),
}


@pytest.mark.parametrize("name", list(RATES))
@pytest.mark.parametrize("seed", SEEDS)
def test_rates_match_sklearn_binary_scores(name, seed):
    case, acc, oracle = case_and_oracle(seed)
    per_class, micro = RATES[name]
    expected = per_class(oracle)
    close(getattr(acc, name)(zero_division=np.nan), expected)
    close(getattr(ms, name)(acc.matrix, zero_division=np.nan), expected)
    support = acc.support()
    for average in ("macro", "weighted"):
        close(
            getattr(acc, name)(average=average, zero_division=np.nan),
            averaged(expected, support, average),
        )
    tn, fp, fn, tp = (oracle["mlcm"].reshape(-1, 4).sum(axis=0)).astype(np.float64)
    with np.errstate(all="ignore"):
        close(getattr(acc, name)(average="micro", zero_division=np.nan), micro(tn, fp, fn, tp))
    # labels select and order classes
    subset = case.labels_subset
    close(getattr(acc, name)(labels=subset, zero_division=np.nan), expected[subset])
    with np.errstate(all="ignore"):
        sub = oracle["mlcm"][subset].reshape(-1, 4).sum(axis=0).astype(np.float64)
        close(getattr(acc, name)(average="micro", labels=subset, zero_division=np.nan), micro(*sub))


@pytest.mark.parametrize("seed", SEEDS)
def test_ovr_mcc_matches_sklearn_binary_mcc(seed):
    _, acc, oracle = case_and_oracle(seed)
    close(acc.ovr_matthews_corrcoef(zero_division=0), oracle["mcc"])  # scikit-learn: 0 if 0/0
    per_class = acc.ovr_matthews_corrcoef(zero_division=np.nan)
    support = acc.support()
    close(
        acc.ovr_matthews_corrcoef(average="macro", zero_division=np.nan),
        averaged(per_class, support, "macro"),
    )
    close(
        acc.ovr_matthews_corrcoef(average="weighted", zero_division=np.nan),
        averaged(per_class, support, "weighted"),
    )
    tn, fp, fn, tp = oracle["mlcm"].reshape(-1, 4).sum(axis=0).astype(np.float64)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    micro = (tp * tn - fp * fn) / denominator if denominator else np.nan
    close(acc.ovr_matthews_corrcoef(average="micro", zero_division=np.nan), micro)


@pytest.mark.parametrize("seed", SEEDS)
def test_likelihood_ratios_match_sklearn(seed):
    _, acc, oracle = case_and_oracle(seed)
    tp, fp, fn, tn = (
        acc.true_positives(),
        acc.false_positives(),
        acc.false_negatives(),
        acc.true_negatives(),
    )
    for ours, expected, zero_rate in (
        (acc.positive_likelihood_ratio(zero_division=np.nan), oracle["lr+"], fp),
        (acc.negative_likelihood_ratio(zero_division=np.nan), oracle["lr-"], tn),
    ):
        defined = ~np.isnan(expected)
        close(ours[defined], expected[defined])
        # where scikit-learn gives up, ours is inf (x/0, x > 0) or undefined (0/0 or no class)
        for i in np.flatnonzero(~defined):
            assert np.isnan(ours[i]) or (np.isposinf(ours[i]) and zero_rate[i] == 0)
    dor = acc.diagnostic_odds_ratio(zero_division=np.nan)
    with np.errstate(all="ignore"):
        expected = (tp.astype(float) * tn) / (fp.astype(float) * fn)
    finite = np.isfinite(expected)
    close(dor[finite], expected[finite])
    with np.errstate(all="ignore"):
        lr_ratio = oracle["lr+"] / oracle["lr-"]
    both = np.isfinite(lr_ratio) & finite
    np.testing.assert_allclose(dor[both], lr_ratio[both], rtol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.filterwarnings("ignore:A single label was found:UserWarning")  # MCC of one class
def test_overlap_losses_and_agreement_match_sklearn(seed):
    case, acc, _ = case_and_oracle(seed)
    yt, yp, w = case.y_true, case.y_pred, case.weights
    labels = np.arange(case.num_classes)
    for average in (None, "micro", "macro", "weighted"):
        expected = quietly(
            skm.f1_score,
            yt,
            yp,
            labels=labels,
            average=average,
            sample_weight=w,
            zero_division=np.nan,
        )
        close(acc.dice(average=average, zero_division=np.nan), expected)
    close(
        acc.fwiou(),
        quietly(
            skm.jaccard_score,
            yt,
            yp,
            labels=labels,
            average="weighted",
            sample_weight=w,
            zero_division=0,
        ),
    )
    close(acc.hamming_loss(), skm.hamming_loss(yt, yp, sample_weight=w))
    close(acc.zero_one_loss(), skm.zero_one_loss(yt, yp, sample_weight=w))
    close(
        acc.zero_one_loss(normalize=False),
        skm.zero_one_loss(yt, yp, sample_weight=w, normalize=False),
    )
    close(
        acc.prevalence(),
        np.bincount(yt, weights=w, minlength=case.num_classes)
        / (yt.size if w is None else w.sum()),
    )
    for weights in (None, "linear", "quadratic"):
        close(
            acc.cohen_kappa(weights=weights, zero_division=np.nan),
            quietly(
                skm.cohen_kappa_score,
                yt,
                yp,
                labels=labels,
                weights=weights,
                sample_weight=w,
                replace_undefined_by=np.nan,
            ),
        )
    # a user weight matrix equal to the linear one gives the linear kappa
    k = case.num_classes
    linear = np.abs(np.subtract.outer(np.arange(k), np.arange(k))).astype(float)
    close(
        acc.cohen_kappa(weights=linear, zero_division=np.nan),
        acc.cohen_kappa(weights="linear", zero_division=np.nan),
    )
    close(acc.matthews_corrcoef(), skm.matthews_corrcoef(yt, yp, sample_weight=w))


@pytest.mark.parametrize("seed", SEEDS)
def test_information_scores_match_sklearn(seed):
    case, acc, _ = case_and_oracle(seed)
    if case.weights is not None:  # scikit-learn's clustering scores take no weights: use counts
        acc = ConfusionAccumulator(case.num_classes).update(case.y_true, case.y_pred)
    yt, yp = case.y_true, case.y_pred
    close(acc.mutual_information(), skm.mutual_info_score(yt, yp))
    for method in ("arithmetic", "geometric", "min", "max"):
        close(
            acc.normalized_mutual_information(average_method=method),
            skm.normalized_mutual_info_score(yt, yp, average_method=method),
        )
    close(acc.adjusted_rand_index(), skm.adjusted_rand_score(yt, yp))


@pytest.mark.parametrize("seed", SEEDS)
def test_balanced_accuracy_adjusted_matches_sklearn(seed):
    case, acc, _ = case_and_oracle(seed)
    ours = quietly(acc.balanced_accuracy, adjusted=True, zero_division=np.nan)
    if (acc.support() > 0).sum() < 2:
        # scikit-learn divides by 1 - 1/1 = 0 (NaN or inf with a RuntimeWarning); ours is 0/0
        assert np.isnan(ours)
        return
    expected = quietly(
        skm.balanced_accuracy_score,
        case.y_true,
        case.y_pred,
        sample_weight=case.weights,
        adjusted=True,
    )
    close(ours, expected)


def test_informedness_is_binary_adjusted_balanced_accuracy():
    rng = np.random.default_rng(7)
    yt, yp = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    acc = ConfusionAccumulator(2).update(yt, yp)
    expected = skm.balanced_accuracy_score(yt, yp, adjusted=True)
    close(acc.informedness(), [expected, expected])


# ---------------------------------------------------------------------- PyCM


@pytest.fixture(scope="module")
def pycm():
    """PyCM (in the test extra); only the tests that compare with it skip without it."""
    return pytest.importorskip("pycm", reason='needs PyCM: pip install ".[test]"')


def _pycm(pycm, matrix):
    k = len(matrix)
    return pycm.ConfusionMatrix(
        matrix={i: {j: int(matrix[i][j]) for j in range(k)} for i in range(k)}
    )


def _num(value):
    return np.nan if value == "None" or value is None else float(value)


@pytest.mark.parametrize("seed", slow_beyond(range(40), 10, ids=lambda seed: f"seed{seed}"))
def test_against_pycm(pycm, seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 7))
    matrix = rng.integers(0, 20, size=(k, k)) * (rng.random((k, k)) < 0.8)
    matrix[np.diag_indices(k)] += rng.integers(0, 30, size=k)
    if matrix.sum(axis=1).min() == 0 or matrix.sum(axis=0).min() == 0:
        matrix += np.eye(k, dtype=matrix.dtype)  # PyCM prints "None" for these: keep defined
    cm = _pycm(pycm, matrix)
    per_class = {
        "TNR": ms.specificity,
        "NPV": ms.negative_predictive_value,
        "FPR": ms.false_positive_rate,
        "FNR": ms.false_negative_rate,
        "FDR": ms.false_discovery_rate,
        "FOR": ms.false_omission_rate,
        "BM": ms.informedness,
        "MK": ms.markedness,
        "PLR": ms.positive_likelihood_ratio,
        "NLR": ms.negative_likelihood_ratio,
        "DOR": ms.diagnostic_odds_ratio,
        "PRE": ms.prevalence,
        "MCC": ms.ovr_matthews_corrcoef,
        "J": ms.jaccard,
        "F1": ms.dice,
    }
    for key, function in per_class.items():
        expected = np.array([_num(cm.class_stat[key][i]) for i in range(k)])
        ours = function(matrix, zero_division=np.nan)
        defined = ~np.isnan(expected)
        close(ours[defined], expected[defined])
    overall = cm.overall_stat
    close(ms.scott_pi(matrix), overall["Scott PI"])
    close(ms.cohen_kappa_standard_error(matrix), overall["Kappa Standard Error"])
    close(ms.cohen_kappa(matrix), overall["Kappa"])
    close(ms.matthews_corrcoef(matrix), overall["Overall MCC"])
    close(ms.mutual_information(matrix) / np.log(2), overall["Mutual Information"])
    close(ms.hamming_loss(matrix), 1 - overall["Overall ACC"])
    close(
        ms.informedness(matrix, average="macro"),
        np.mean([_num(cm.class_stat["BM"][i]) for i in range(k)]),
    )
    close(ms.specificity(matrix, average="micro"), overall["TNR Micro"])
    close(ms.specificity(matrix, average="macro"), overall["TNR Macro"])
    close(ms.false_positive_rate(matrix, average="micro"), overall["FPR Micro"])
    close(ms.negative_predictive_value(matrix, average="micro"), overall["NPV Micro"])
    low, high = ms.cohen_kappa_interval(matrix, z=1.96)
    expected_low, expected_high = overall["Kappa 95% CI"]
    close([low, high], [max(expected_low, -1), min(expected_high, 1)])
