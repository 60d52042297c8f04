"""The score accumulator under a new user's and an attacker's inputs: multiclass logits ranked by
their softmax, thresholds that hold on the raw scores, inputs that can only be a mistake refused,
states that always load, counts that never wrap, exact label comparisons, exact and cheap group
rollback, and views before any update."""

from __future__ import annotations

import math
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.special
from sklearn import metrics as skm

from metricstream import AccumulatorGroup
from metricstream.exceptions import UndefinedMetricWarning
from metricstream.scores import ScoreAccumulator

LOG_LOSS_BOUND = -math.log(2.0**-52)


def _bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded toward zero to bfloat16 (still float32)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _state(acc: ScoreAccumulator) -> dict[str, np.ndarray]:
    return {name: array.copy() for name, array in acc.state_arrays().items()}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return all(a[k].tobytes() == b[k].tobytes() for k in a)


# ---------------------------------------------------------------- multiclass logits: softmax
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multiclass_logits_are_ranked_by_their_softmax(dtype):
    rng = np.random.default_rng(1)
    n, classes = 4000, 6
    y = rng.integers(0, classes, n)
    # per-class offsets make the one-vs-rest ranking of logits and softmax differ
    logits = (rng.normal(size=(n, classes)) * 2 + 1.5 * np.eye(classes)[y]).astype(dtype)
    logits += rng.normal(size=(n, 1)).astype(dtype) * 3
    acc = ScoreAccumulator("multiclass", classes, logits=True)
    for lo in range(0, n, 512):
        acc.update(y[lo : lo + 512], logits[lo : lo + 512])
    probabilities = scipy.special.softmax(logits.astype(np.float64), axis=1)
    expected_auroc = skm.roc_auc_score(y, probabilities, multi_class="ovr")
    value, lower, upper = acc.auroc(with_bound=True)
    assert lower <= expected_auroc <= upper
    assert abs(value - expected_auroc) < 1e-5
    onehot = np.eye(classes)[y]
    expected_ap = skm.average_precision_score(onehot, probabilities, average="macro")
    value, lower, upper = acc.average_precision(with_bound=True)
    assert lower <= expected_ap <= upper
    assert abs(value - expected_ap) < 1e-4
    # the ranking of raw logits would be far off (what the earlier version computed)
    raw = skm.roc_auc_score(y, probabilities, multi_class="ovr") - skm.roc_auc_score(
        onehot, logits, average="macro"
    )
    assert abs(raw) > 1e-3
    # thresholds and operating points are softmax probabilities
    fpr, tpr, thresholds = acc.roc_curve(label=2)
    assert np.all((thresholds[1:] >= 0) & (thresholds[1:] <= 1))


def test_earlier_states_of_multiclass_logits_are_refused_with_the_reason():
    acc = ScoreAccumulator("multiclass", 3, logits=True)
    acc.update([0, 1], np.array([[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]]))
    state = acc.state_dict()
    state["format"] = 2
    with pytest.raises(ValueError, match="ranked the raw logits"):
        ScoreAccumulator.from_state_dict(state)
    # other states of format 2 load unchanged
    other = ScoreAccumulator("multiclass", 3).update([0, 1], np.eye(3)[[0, 2]])
    state = other.state_dict()
    state["format"] = 2
    assert ScoreAccumulator.from_state_dict(state) == other


# ---------------------------------------------------------------- thresholds on the raw scores
def _reproduces(scores: np.ndarray, positive: np.ndarray, fps, tps, thresholds) -> None:
    """Every finite threshold selects exactly ``tps`` positives and ``fps`` negatives with
    ``score >= threshold``, in float64 and in the scores' own dtype (a Python float)."""
    for fp, tp, threshold in zip(fps, tps, thresholds, strict=True):
        if not np.isfinite(threshold):
            continue
        for chosen in (scores.astype(np.float64) >= threshold, scores >= float(threshold)):
            assert (chosen & positive).sum() == round(float(tp)), threshold
            assert (chosen & ~positive).sum() == round(float(fp)), threshold


def test_the_issue_example_best_threshold_holds_on_the_raw_scores():
    scores = np.array([0.2, 0.9, 0.6, 0.3])
    y = np.array([0, 1, 1, 0])
    point = ScoreAccumulator("binary").update(y, scores).best_threshold("f1")
    assert point.value == 1.0
    predicted = scores >= point.threshold
    assert skm.f1_score(y, predicted) == 1.0


def _score_sets(rng: np.random.Generator):
    n = 3000
    y = rng.integers(0, 2, n)
    smooth = np.clip(rng.random(n) * 0.7 + 0.3 * y, 0, 1)
    yield "float64 probabilities", ScoreAccumulator("binary"), y, smooth
    yield "float32 probabilities", ScoreAccumulator("binary"), y, smooth.astype(np.float32)
    near_one = 1 - rng.random(n) ** 6 * 1e-3 * (2 - y)
    yield "near one", ScoreAccumulator("binary"), y, near_one
    near_zero = rng.random(n) ** 8 * 1e-30 * (1 + y)
    yield "near zero", ScoreAccumulator("binary"), y, near_zero
    logits = rng.normal(size=n) * 3 + y
    yield "logits", ScoreAccumulator("binary", logits=True), y, logits
    yield "coarse bins", ScoreAccumulator("binary", bins=64), y, smooth
    yield "coarse logits", ScoreAccumulator("binary", bins=64, logits=True), y, logits * 1e4
    exact = _bf16(smooth)
    yield "bfloat16 (exact)", ScoreAccumulator("binary"), y, exact


@pytest.mark.parametrize("seed", [0, 1])
def test_every_curve_point_and_operating_point_holds_on_the_raw_scores(seed):
    rng = np.random.default_rng(seed)
    for name, acc, y, scores in _score_sets(rng):
        acc.update(y, scores)
        positive = y == 1
        fpr, tpr, thresholds = acc.roc_curve(drop_intermediate=False)
        assert thresholds.size > 3, name
        _reproduces(scores, positive, fpr * (~positive).sum(), tpr * positive.sum(), thresholds)
        precision, recall, pr_thresholds = acc.precision_recall_curve()
        tps = recall[:-1] * positive.sum()
        predicted = np.array([(scores >= t).sum() for t in pr_thresholds])
        _reproduces(scores, positive, predicted - np.round(tps), np.round(tps), pr_thresholds)
        # operating points: the value recomputed on the raw scores at the threshold
        for method, argument, metric in (
            ("best_threshold", "f1", lambda t, p: skm.f1_score(t, p)),
            ("precision_at_recall", 0.8, lambda t, p: skm.precision_score(t, p, zero_division=0)),
            ("recall_at_precision", 0.7, lambda t, p: skm.recall_score(t, p)),
            ("sensitivity_at_specificity", 0.6, lambda t, p: skm.recall_score(t, p)),
            ("specificity_at_sensitivity", 0.9, lambda t, p: skm.recall_score(1 - t, 1 - p)),
        ):
            point = getattr(acc, method)(argument)
            if not np.isfinite(point.threshold):
                continue
            predicted = (scores >= point.threshold).astype(int)
            assert metric(y, predicted) == pytest.approx(point.value, abs=1e-12), (name, method)
            # confusion_at takes the threshold back to the same counts
            matrix = acc.confusion_at(point.threshold).confusion_matrix()
            assert np.array_equal(matrix, skm.confusion_matrix(y, predicted, labels=[0, 1]))


def test_thresholds_at_bin_edges_hold_on_scores_at_and_beside_them():
    rng = np.random.default_rng(5)
    for logits, bins in ((False, 256), (True, 256), (False, 64), (True, 16), (False, 16)):
        y = rng.integers(0, 2, 2000)
        scores = rng.normal(size=2000) * 4 if logits else rng.random(2000)
        first = ScoreAccumulator("binary", logits=logits, bins=bins).update(y, scores)
        edges = first.roc_curve(drop_intermediate=False)[2][1:]
        edges = edges[np.isfinite(edges)]
        # scores right at each reported threshold, the float64 and float32 just beside it
        probes = np.concatenate(
            [
                edges,
                np.nextafter(edges, -np.inf),
                np.nextafter(edges, np.inf),
                np.nextafter(edges.astype(np.float32), np.float32(-np.inf)).astype(np.float64),
            ]
        )
        if not logits:
            probes = np.clip(probes, 0, 1)
        labels = rng.permutation(np.arange(probes.size) % 2)
        acc = ScoreAccumulator("binary", logits=logits, bins=bins).update(labels, probes)
        positive = labels == 1
        fpr, tpr, thresholds = acc.roc_curve(drop_intermediate=False)
        _reproduces(probes, positive, fpr * (~positive).sum(), tpr * positive.sum(), thresholds)


def test_multiclass_thresholds_hold_on_the_softmax():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 3000)
    logits = rng.normal(size=(3000, 4)) * 2 + np.eye(4)[y]
    acc = ScoreAccumulator("multiclass", 4, logits=True).update(y, logits)
    probabilities = scipy.special.softmax(logits, axis=1)
    for label in range(4):
        positive = y == label
        fpr, tpr, thresholds = acc.roc_curve(label=label, drop_intermediate=False)
        _reproduces(
            probabilities[:, label],
            positive,
            fpr * (~positive).sum(),
            tpr * positive.sum(),
            thresholds,
        )


# ---------------------------------------------------------------- mistakes refused
@pytest.mark.parametrize(
    ("classes", "dtype", "rows"),
    [(3, np.float32, 40), (3, np.float64, 40), (40, np.float32, 40), (3, np.float32, 5000)],
)
def test_multiclass_rows_that_do_not_sum_to_one_are_refused(classes, dtype, rows):
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, rows)
    good = scipy.special.softmax(rng.normal(size=(rows, classes)), axis=1).astype(dtype)
    acc = ScoreAccumulator("multiclass", classes).update(y, good)
    before = _state(acc)
    sigmoids = (1 / (1 + np.exp(-rng.normal(size=(rows, classes))))).astype(dtype)
    bad = good.copy()
    bad[rows - 3] = sigmoids[rows - 3]
    with pytest.raises(ValueError, match=rf"position {rows - 3} sum to .*multilabel"):
        acc.update(y, bad)
    assert _same(before, _state(acc))
    # bfloat16 rounding of a softmax is accepted
    acc.update(y, _bf16(good.astype(np.float32)).astype(dtype))


def test_weighted_and_ignored_rows_follow_the_same_rule():
    acc = ScoreAccumulator("multiclass", 3, weighted=True, ignore_index=-1)
    scores = np.array([[0.5, 0.5, 0.5], [0.2, 0.3, 0.5]])
    acc.update([-1, 2], scores, weights=[1.0, 2.5])  # the ignored row may hold anything
    with pytest.raises(ValueError, match="sum to 1.5"):
        acc.update([0, 2], scores, weights=[1.0, 2.5])
    assert acc.num_samples == 2.5


def test_probabilities_given_as_logits_warn():
    probabilities = scipy.special.softmax(np.random.default_rng(0).normal(size=(64, 5)), axis=1)
    acc = ScoreAccumulator("multiclass", 5, logits=True)
    with pytest.warns(UserWarning, match="look like probabilities"):
        acc.update(np.arange(64) % 5, probabilities.astype(np.float32))
    binary = ScoreAccumulator("binary", logits=True)
    with pytest.warns(UserWarning, match="look like probabilities"):
        binary.update(np.arange(64) % 2, probabilities[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.update(np.arange(64) % 5, np.log(probabilities))  # log-probabilities: fine
        binary.update(np.arange(64) % 2, probabilities[:, 0] - 0.5)


def test_probability_thresholds_must_lie_in_the_unit_interval():
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\].*logits=True"):
        ScoreAccumulator("binary", thresholds=[-2.0, 0.0, 2.0])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        ScoreAccumulator("multiclass", 3, logits=True, thresholds=[0.5, 1.5])
    ScoreAccumulator("binary", logits=True, thresholds=[-2.0, 0.0, 2.0])


# ---------------------------------------------------------------- states that load
def _loads(acc: ScoreAccumulator, tmp_path) -> None:
    path = acc.save(tmp_path / "state.bin")
    assert ScoreAccumulator.load(path) == acc
    assert ScoreAccumulator.from_state_dict(acc.state_dict()) == acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_minus_inf_true_class_logit_has_a_bounded_loss_and_loads(tmp_path, dtype):
    logits = np.array([[0.0, -np.inf, 1.0], [1.0, 2.0, 3.0], [5.0, -np.inf, -np.inf]], dtype)
    y = np.array([1, 2, 0])
    acc = ScoreAccumulator("multiclass", 3, logits=True).update(y, logits)
    second = np.log1p(np.exp(-1.0) + np.exp(-2.0))
    assert acc.log_loss() == pytest.approx((LOG_LOSS_BOUND + second + 0.0) / 3, rel=1e-12)
    # scikit-learn's log loss of the float64 softmax (which clips at float64's eps)
    probabilities = scipy.special.softmax(logits.astype(np.float64), axis=1)
    assert acc.log_loss() == pytest.approx(skm.log_loss(y, probabilities), rel=1e-9)
    _loads(acc, tmp_path)
    # the weighted path and finite logits far apart (float64: their difference is inf)
    big = np.array([[1e308, -1e308, 0.0]])
    weighted = ScoreAccumulator("multiclass", 3, logits=True, weighted=True)
    weighted.update(y, logits, weights=[0.5, 1.0, 2.0]).update([1], big, weights=[1.0])
    assert np.isfinite(weighted.log_loss())
    _loads(weighted, tmp_path)
    binary = ScoreAccumulator("binary", logits=True).update([1, 0, 1], [-np.inf, -np.inf, 3.0])
    assert binary.log_loss() == pytest.approx((LOG_LOSS_BOUND + 0 + np.log1p(np.exp(-3))) / 3)
    _loads(binary, tmp_path)


@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_weighted_updates_never_make_a_float_sum_infinite(tmp_path, task):
    classes = {"binary": None, "multiclass": 2, "multilabel": 2}[task]
    acc = ScoreAccumulator(task, classes, weighted=True)
    y = {"binary": [1, 0], "multiclass": [1, 0], "multilabel": [[1, 0], [0, 1]]}[task]
    scores = [0.0, 1.0] if task == "binary" else [[0.0, 1.0], [1.0, 0.0]]
    acc.update(y, scores, weights=[1e299, 1e299])
    _loads(acc, tmp_path)
    before = _state(acc)
    with pytest.raises(ValueError, match="float64 sums could overflow; nothing was counted"):
        acc.update(y, scores, weights=[1e300, 1e300])
    assert _same(before, _state(acc))
    for name, array in acc.state_arrays().items():
        assert np.isfinite(array).all(), name
    _loads(acc, tmp_path)


# ---------------------------------------------------------------- counts that never wrap
@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_an_unweighted_update_onto_a_near_full_count_is_refused(task):
    classes = None if task == "binary" else 3
    acc = ScoreAccumulator(task, classes)
    y = np.array([1, 1, 1, 1])
    scores = np.array([0.75, 0.75, 0.75, 0.75])
    if task == "multiclass":
        scores = np.tile([0.125, 0.75, 0.125], (4, 1))
    acc.update(y[:1], scores[:1])
    state = acc.state_dict()
    arrays = {name: np.array(v) for name, v in acc.state_arrays().items()}
    # the sample's positive cell and its calibration count near 2**63 (the rest as counted:
    # every array's total stays below 2**63, a state that loads)
    near = 2**63 - 2**21  # near the largest total a state may carry (2**63 - 2**20)
    positive = arrays["curves"][:, :, 1]
    positive[positive == 1] = near
    counts = arrays["calibration"][:, 0]
    counts[counts == 1] = near
    state = ScoreAccumulator.from_state_dict({**state, "arrays": _records(state, arrays)})
    before = _state(state)
    many = 2**21 + 8  # enough rows to wrap the cell
    for rows in (2**20 + 8, many):
        with pytest.raises(ValueError, match="overflow the int64 counts"):
            state.update(np.repeat(y[:1], rows), np.repeat(scores[:1], rows, axis=0))
        assert _same(before, _state(state))
    assert (state.state_arrays()["curves"] >= 0).all()


def _records(state: dict, arrays: dict[str, np.ndarray]) -> dict:
    """State-dict array records holding ``arrays`` (same layout as the originals)."""
    template = ScoreAccumulator.from_state_dict(state)
    for name, array in arrays.items():
        template._arrays[name][...] = array
    return template.state_dict()["arrays"]


# ---------------------------------------------------------------- exact label comparisons
def test_ignore_index_is_compared_exactly():
    with pytest.raises(ValueError, match="fit in int64"):
        ScoreAccumulator("binary", ignore_index=2**64)
    with pytest.raises(ValueError, match="fit in int64"):
        ScoreAccumulator("multiclass", 3, ignore_index=-(2**63) - 1)
    # a uint64 target 2**63 is not ignore_index 2**63 - 1: refused, not skipped
    acc = ScoreAccumulator("binary", ignore_index=2**63 - 1)
    with pytest.raises(ValueError, match="9223372036854775808"):
        acc.update(np.array([1, 2**63], np.uint64), np.array([0.5, 0.5]))
    acc.update(np.array([1, 2**63 - 1], np.uint64), np.array([0.5, 0.5]))
    assert acc.num_samples == 1
    # a float target 2**53 is not ignore_index 2**53 + 1
    acc = ScoreAccumulator("binary", ignore_index=2**53 + 1)
    with pytest.raises(ValueError, match="y_true"):
        acc.update(np.array([1.0, 2.0**53]), np.array([0.5, 0.5]))
    for classes, dtype in ((3, np.float32), (40, np.float64)):
        acc = ScoreAccumulator("multiclass", classes, ignore_index=2**63 - 1)
        scores = np.full((2, classes), 1 / classes, dtype)
        with pytest.raises(ValueError, match="label 9223372036854775808"):
            acc.update(np.array([1, 2**63], np.uint64), scores)
        acc.update(np.array([1, 2**63 - 1], np.uint64), scores)
        assert acc.num_samples == 1
        acc = ScoreAccumulator("multiclass", classes, ignore_index=2**53 + 1)
        with pytest.raises(ValueError, match="y_true"):
            acc.update(np.array([1.0, 2.0**53]), scores)
    multilabel = ScoreAccumulator("multilabel", 2, ignore_index=2**63 - 1)
    with pytest.raises(ValueError, match="y_true"):
        multilabel.update(np.array([[1, 2**63]], np.uint64), np.array([[0.5, 0.5]]))


# ---------------------------------------------------------------- groups: exact, cheap rollback
def _group_cases():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    probabilities = scipy.special.softmax(rng.normal(size=(300, 3)), axis=1)
    unnormalised = probabilities * 1.5  # valid logits, invalid probabilities
    yield {"task": "multiclass", "num_classes": 3}, y, probabilities, unnormalised
    wide = scipy.special.softmax(rng.normal(size=(300, 20)), axis=1)
    y20 = rng.integers(0, 20, 300)
    yield {"task": "multiclass", "num_classes": 20}, y20, wide, wide * 1.5
    wide64 = wide.astype(np.float32)  # another dtype, the block kernel
    yield {"task": "multiclass", "num_classes": 20}, y20, wide64, wide64 * 1.5
    yb = rng.integers(0, 2, 300)
    yield {"task": "binary"}, yb, probabilities[:, 0], probabilities[:, 0] + 1.0
    targets = rng.integers(0, 2, (300, 3))
    yield {"task": "multilabel", "num_classes": 3}, targets, probabilities, probabilities + 1.0


@pytest.mark.parametrize("refusal", ["score", "label"])
def test_a_group_rolls_a_score_member_back_bit_for_bit(refusal):
    """The first member (logits) counts the batch, the second refuses it: the first is left
    bit for bit as it was, float sums included."""
    for config, y, good, bad in _group_cases():
        first = ScoreAccumulator(**config, logits=True, ignore_index=-1)
        second = ScoreAccumulator(**config, logits=refusal == "label")
        group = AccumulatorGroup(first=first, second=second)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # probabilities as logits
            group.update(y, good)
            group.update(y, good)
            before = _state(first), _state(second)
            if refusal == "label":  # a label only the first member ignores
                bad_y = y.copy()
                bad_y.reshape(len(bad_y), -1)[250, 0] = -1
                bad_scores = good
            else:
                bad_y, bad_scores = y, bad
            with pytest.raises(ValueError):
                group.update(bad_y, bad_scores)
        assert _same(before[0], _state(first)), config
        assert _same(before[1], _state(second)), config


def test_a_group_update_does_not_copy_the_score_state(no_background_compiles):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 256)
    scores = scipy.special.softmax(rng.normal(size=(256, 10)), axis=1).astype(np.float32)
    acc = ScoreAccumulator("multiclass", 10)
    group = AccumulatorGroup(scores=acc, twin=ScoreAccumulator("multiclass", 10))
    group.update(y, scores)
    tracemalloc.start()
    try:
        group.update(y, scores)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(a.nbytes for a in acc.state_arrays().values()) > 6e6
    assert peak < 1e6


# ---------------------------------------------------------------- views before any update
@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_views_before_any_update_are_nan_with_a_warning(task):
    classes = {"binary": None, "multiclass": 3, "multilabel": 3}[task]
    acc = ScoreAccumulator(task, classes)
    label = None if task == "binary" else 0
    scalar_views = [
        lambda: acc.auroc(),
        lambda: acc.average_precision(),
        lambda: acc.calibration_error(),
        lambda: acc.max_calibration_error(),
        lambda: acc.brier_score(),
        lambda: acc.log_loss(),
        lambda: acc.best_threshold("f1", label).value,
        lambda: acc.best_threshold("youden", label).value,
        lambda: acc.precision_at_recall(0.5, label).value,
        lambda: acc.recall_at_precision(0.5, label).value,
        lambda: acc.sensitivity_at_specificity(0.5, label).value,
        lambda: acc.specificity_at_sensitivity(0.5, label).value,
    ]
    if task == "multiclass":
        scalar_views.append(lambda: acc.top_k_accuracy(1))
    for view in scalar_views:
        with pytest.warns(UndefinedMetricWarning):
            value = view()
        assert np.isnan(value)
    with pytest.warns(UndefinedMetricWarning):
        fpr, tpr, _ = acc.roc_curve(label)
    assert np.isnan(fpr).all() and np.isnan(tpr).all()
    with pytest.warns(UndefinedMetricWarning):
        precision, recall, _ = acc.precision_recall_curve(label)
    with pytest.warns(UndefinedMetricWarning):
        diagram = acc.reliability_diagram()
    assert diagram.counts.sum() == 0
    if task == "multiclass":
        with pytest.warns(UndefinedMetricWarning):
            assert np.isnan(acc.top_k_accuracy()).all()


# ---------------------------------------------------------------- hints of label errors
@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_label_errors_carry_the_shared_hints(task):
    """The hints of every family (metricstream._inputs.label_hint): -100 suggests
    ``ignore_index=-100``, a fractional label the swapped arguments, NaN a missing value; the
    state is left as it was."""
    classes = None if task == "binary" else 3
    acc = ScoreAccumulator(task, classes)
    scores = np.array([0.2, 0.6, 0.9]) if task == "binary" else np.full((3, 3), 1 / 3)
    acc.update(np.array([0, 1, 1]) if task == "binary" else np.array([0, 1, 2]), scores)
    before = _state(acc)
    cases = [
        (np.array([0, -100, 1]), r"at position 1.*create the accumulator with `ignore_index=-100`"),
        (np.array([0, -7, 1]), r"-7 at position 1.*`ignore_index=-7`"),
        (np.array([0.0, 0.35, 1.0]), r"0\.35 at position 1.*arguments are swapped"),
        (np.array([0.0, np.nan, 1.0]), r"nan at position 1.*missing value.*dropna"),
    ]
    for y, message in cases:
        with pytest.raises(ValueError, match=message):
            acc.update(y, scores)
        assert _same(before, _state(acc))
    ignoring = ScoreAccumulator(task, classes, ignore_index=-100)
    with pytest.raises(ValueError) as error:
        ignoring.update(np.array([0, -7, 1]), scores)
    assert "ignore_index=-7" not in str(error.value)  # one ignore_index is already set


def test_a_one_hot_y_true_is_named_as_the_cause():
    acc = ScoreAccumulator("multiclass", 4)
    y = np.eye(4)[[0, 2, 1]]
    with pytest.raises(ValueError, match=r"`y_true` looks one-hot.*argmax"):
        acc.update(y, np.full((3, 4), 0.25))
    acc.update(y.argmax(axis=1), np.full((3, 4), 0.25))  # the remedy works
    assert acc.num_samples == 3


# ---------------------------------------------------------------- the bound of restored states
@pytest.mark.parametrize("task", ["binary", "multiclass", "multilabel"])
def test_updates_never_make_a_state_that_load_refuses(task):
    """A restored state whose int64 array totals sit just below 2**63 - 1 (what load accepts):
    an update that could pass it is refused and changes nothing; one that fits is counted and
    the state loads back."""
    classes = {"binary": None, "multiclass": 3, "multilabel": 2}[task]
    acc = ScoreAccumulator(task, classes)
    state = acc.state_dict()
    y = {"binary": np.array([1]), "multiclass": np.array([1]), "multilabel": np.array([[1, 0]])}
    p = {
        "binary": np.array([0.75]),
        "multiclass": np.array([[0.125, 0.75, 0.125]]),
        "multilabel": np.array([[0.75, 0.25]]),
    }
    for name in ("curves", "inexact"):
        arrays = {key: np.array(v) for key, v in acc.state_arrays().items()}
        arrays[name].reshape(-1)[-1] = 2**63 - 1 - 4  # room for less than one row per class
        full = ScoreAccumulator.from_state_dict({**state, "arrays": _records(state, arrays)})
        before = _state(full)
        with pytest.raises(ValueError, match="overflow the int64 counts"):
            full.update(np.repeat(y[task], 5, axis=0), np.repeat(p[task], 5, axis=0))
        assert _same(before, _state(full))
    arrays = {key: np.array(v) for key, v in acc.state_arrays().items()}
    arrays["calibration"][-1, 0] = 2**63 - 1 - 2**40
    roomy = ScoreAccumulator.from_state_dict({**state, "arrays": _records(state, arrays)})
    roomy.update(np.repeat(y[task], 5, axis=0), np.repeat(p[task], 5, axis=0))
    type(roomy).from_bytes(roomy.to_bytes())  # loads back
