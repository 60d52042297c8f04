"""Inputs that can only be a mistake, hints that point the right way, and views that cannot be
changed through their results: multilabel, confusion and the shared input layer."""

from __future__ import annotations

import numpy as np
import pytest

from metricstream import ConfusionAccumulator, MultilabelAccumulator
from metricstream.multilabel import LabelSets


# ---------------------------------------------------------------------------- read-only counts
@pytest.mark.parametrize("ignore_index", [None, -1])
def test_multilabel_counts_are_read_only(ignore_index):
    acc = MultilabelAccumulator(3, ignore_index=ignore_index)
    acc.update([[1, 0, 1], [0, 1, 0]], [[1, 0, 0], [0, 1, 1]])
    before = (acc.specificity(), acc.hamming_loss())
    counts = acc.counts()
    for name in ("tp", "ap", "pp", "total"):
        array = getattr(counts.labels, name)
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 10**6
    assert np.array_equal(acc.specificity(), before[0])
    assert acc.hamming_loss() == before[1]


# ---------------------------------------------------------------------------- malformed CSR
def _state(acc):
    return {name: array.copy() for name, array in acc.state_arrays().items()}


_GOOD = LabelSets.from_lists([[0], [1]])


@pytest.mark.parametrize(
    ("indptr", "indices", "match"),
    [
        ([0, 5, 2], [0, 1], "indptr. decreases after position 1"),
        ([1, 2, 2], [0, 1], "must start at 0"),
        ([0, 1, 1], [0, 1, 3], "end at len"),
        ([0, 2, 1, 2], [0, 1], "decreases"),
        ([[0, 1, 2]], [0, 1], "1-D integer"),
    ],
)
def test_label_sets_refuse_a_bad_structure(indptr, indices, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LabelSets(np.array(indptr), np.array(indices))
    with pytest.raises((ValueError, TypeError), match=match):
        LabelSets.from_csr(indptr, indices)


def test_label_sets_refuse_float_indices():
    with pytest.raises(TypeError, match="indices. must be a 1-D integer array"):
        LabelSets(np.array([0, 1, 2]), np.array([0.5, 1.0]))


def test_sparse_label_sets_refuse_bad_indptr_and_width():
    sparse = pytest.importorskip("scipy.sparse")
    acc = MultilabelAccumulator(4)
    before = _state(acc)
    matrix = sparse.csr_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 4))
    matrix.indptr = np.array([0, 3, 2], dtype=np.int32)
    with pytest.raises(ValueError, match="decreases"):
        acc.update(matrix, _GOOD)
    wide = sparse.csr_matrix((np.ones(2), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 9))
    with pytest.raises(ValueError, match="9 columns.*`num_labels` is 4"):
        acc.update(wide, _GOOD)
    with pytest.raises(ValueError, match="9 columns"):
        acc.update(_GOOD, wide)
    assert all(np.array_equal(before[k], v) for k, v in acc.state_arrays().items())


def test_sparse_explicit_zeros_and_trailing_empty_rows():
    sparse = pytest.importorskip("scipy.sparse")
    # explicit zeros, one in the last non-empty row, then an empty row
    matrix = sparse.csr_matrix(
        (np.array([0, 1, 0]), np.array([0, 1, 2]), np.array([0, 2, 3, 3])), shape=(3, 4)
    )
    sets = LabelSets.from_sparse(matrix)
    assert sets.indptr.tolist() == [0, 1, 1, 1] and sets.indices.tolist() == [1]


def test_duplicates_refused_and_unsorted_sets_counted_as_the_dense_matrix():
    acc = MultilabelAccumulator(4)
    with pytest.raises(ValueError, match="twice"):
        acc.update(LabelSets.from_csr([0, 2, 2], [1, 1]), _GOOD)
    # any order within a sample (documented): the counts of the dense equivalent
    true = LabelSets.from_csr([0, 2, 3], [3, 1, 0])
    pred = LabelSets.from_csr([0, 3, 3], [2, 0, 1])
    acc.update(true, pred)
    dense = MultilabelAccumulator(4).update(
        [[0, 1, 0, 1], [1, 0, 0, 0]], [[1, 1, 1, 0]] + [[0] * 4]
    )
    for name, array in dense.state_arrays().items():
        assert np.array_equal(acc.state_arrays()[name], array)


# ---------------------------------------------------------------------------- hints
_ONE_HOT = np.eye(3, dtype=np.int64)[[0, 1, 2, 1]]
_LABELS = np.array([0, 1, 2, 1])


def _message(function, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as error:
        function(*args, **kwargs)
    return str(error.value)


@pytest.mark.parametrize("scores", ["logits", "probabilities", "labels"])
def test_a_one_hot_y_true_is_named_not_y_pred(scores):
    rng = np.random.default_rng(0)
    y_pred = {
        "logits": rng.normal(size=(4, 3)),
        "probabilities": rng.dirichlet(np.ones(3), 4),
        "labels": _LABELS,
    }[scores]
    message = _message(ConfusionAccumulator(3).update, _ONE_HOT, y_pred)
    assert "`y_true` looks one-hot" in message and "argmax(axis=-1)" in message
    assert "negative labels" not in message or "one-hot" in message
    assert "swapped" not in message


def test_scores_as_y_true_still_get_the_swap_hint():
    probs = np.random.default_rng(1).dirichlet(np.ones(3), 4)
    message = _message(ConfusionAccumulator(3).update, probs, _LABELS)
    assert "swapped" in message and "one-hot" not in message
    message = _message(ConfusionAccumulator(3).update, np.array([0.2, 0.5]), np.array([0, 1]))
    assert "swapped" in message


def test_the_swap_hint_reaches_the_multilabel_family():
    probs = np.random.default_rng(2).random((4, 3))
    message = _message(MultilabelAccumulator(3).update, probs, _ONE_HOT)
    assert "the arguments are swapped" in message


@pytest.mark.parametrize("family", ["confusion", "multilabel"])
def test_minus_100_suggests_ignore_index(family):
    if family == "confusion":
        update = ConfusionAccumulator(3).update
        args = (np.array([0, -100, 1]), np.array([0, 1, 1]))
    else:
        update = MultilabelAccumulator(3).update
        args = (np.array([[0, -100, 1]]), np.array([[0, 1, 1]]))
    message = _message(update, *args)
    assert "ignore_index=-100" in message
    # and the suggestion works
    if family == "confusion":
        acc = ConfusionAccumulator(3, ignore_index=-100).update(*args)
        assert acc.num_samples == 2
    else:
        MultilabelAccumulator(3, ignore_index=-100).update(*args)


def test_another_negative_label_suggests_itself_as_ignore_index():
    message = _message(ConfusionAccumulator(3).update, np.array([0, -1]), np.array([0, 1]))
    assert "ignore_index=-1" in message


def test_a_missing_value_of_a_pandas_int64_column_is_not_a_swap():
    pd = pytest.importorskip("pandas")
    column = pd.Series([0, 1, None, 2], dtype="Int64")
    message = _message(ConfusionAccumulator(3).update, column, _LABELS)
    assert "swapped" not in message
    assert "missing value" in message and "dropna" in message
    message = _message(ConfusionAccumulator(3).update, _LABELS, column)
    assert "swapped" not in message and "missing value" in message


def test_binary_scores_without_threshold_still_get_the_threshold_hint():
    message = _message(ConfusionAccumulator(2).update, np.array([0, 1]), np.array([0.2, 0.7]))
    assert "give a `threshold`" in message


# ---------------------------------------------------------------------------- thresholds
def _scores(seed=0, shape=(256, 20)):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 2, shape).astype(np.uint8)
    logits = rng.normal(size=shape).astype(np.float32)
    return y_true, logits, (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)


@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multilabel_logits_at_the_default_threshold_are_refused(ignore_index, dtype):
    y_true, logits, _ = _scores()
    acc = MultilabelAccumulator(20, ignore_index=ignore_index)
    before = _state(acc)
    with pytest.raises(ValueError, match=r"probabilities, which lie in \[0, 1\].*logits=True"):
        acc.update(y_true, logits.astype(dtype))
    assert all(np.array_equal(before[k], v) for k, v in acc.state_arrays().items())


@pytest.mark.parametrize("shape", [(256, 20), (256, 1000), (3, 70), (1, 1)])
def test_multilabel_logits_flag_counts_as_the_probabilities(shape):
    y_true, logits, probs = _scores(1, shape)
    from_probs = MultilabelAccumulator(shape[1]).update(y_true, probs)
    for scores in (logits, logits.astype(np.float64)):
        from_logits = MultilabelAccumulator(shape[1], logits=True).update(y_true, scores)
        for name, array in from_probs.state_arrays().items():
            assert np.array_equal(from_logits.state_arrays()[name], array), name
    # and scikit-learn's F1 on the thresholded probabilities
    sklearn = pytest.importorskip("sklearn.metrics")
    expected = sklearn.f1_score(y_true, probs >= 0.5, average="micro")
    assert from_probs.f1("micro") == pytest.approx(expected, abs=1e-15)


def test_multilabel_threshold_is_a_probability_for_logits_too():
    y_true, logits, probs = _scores(2)
    for p in (0.0, 0.3, 0.5, 0.8, 1.0):
        a = MultilabelAccumulator(20, threshold=p).update(y_true, probs.astype(np.float64))
        b = MultilabelAccumulator(20, threshold=p, logits=True).update(
            y_true, np.log(probs.astype(np.float64)) - np.log1p(-probs.astype(np.float64))
        )
        # equal decisions but for scores within rounding of the threshold
        assert abs(a.counts().labels.pp.sum() - b.counts().labels.pp.sum()) <= 1
    with pytest.raises(ValueError, match=r"probability in \[0, 1\].*logits=True"):
        MultilabelAccumulator(3, threshold=0.0 - 1.0)
    with pytest.raises(ValueError, match="probability"):
        MultilabelAccumulator(3, threshold=2.0, logits=True)


def test_multilabel_probabilities_declared_as_logits_warn_and_count():
    y_true, _, probs = _scores(3)
    acc = MultilabelAccumulator(20, logits=True)
    with pytest.warns(UserWarning, match="look like probabilities"):
        acc.update(y_true, probs)
    assert acc.num_samples == 256
    masked = MultilabelAccumulator(20, logits=True, ignore_index=-1)
    with pytest.warns(UserWarning, match="look like probabilities"):
        masked.update(y_true, probs)


def test_multilabel_indicators_are_not_scores():
    y_true, _, probs = _scores(4)
    for logits in (False, True):
        acc = MultilabelAccumulator(20, logits=logits).update(
            y_true, (probs > 0.5).astype(np.uint8)
        )
        assert acc.num_samples == 256


def test_multilabel_states_of_format_1_load_with_their_decisions():
    y_true, logits, probs = _scores(5)
    for scores, logits_flag in ((logits, True), (probs, False)):
        acc = MultilabelAccumulator(20, threshold=0.5, logits=logits_flag)
        acc.update(y_true, scores)
        state = acc.state_dict()
        state["format"] = 1
        config = dict(state["config"])
        config.pop("logits")
        config["threshold"] = 0.0 if logits_flag else 0.5  # format 1: logits compared with 0.0
        state["config"] = config
        restored = MultilabelAccumulator.from_state_dict(state)
        assert restored.logits is logits_flag and restored.threshold == 0.5
        assert restored == acc
        # the restored accumulator takes the same scores as before
        restored.update(y_true, scores)
        assert restored.num_samples == 512
