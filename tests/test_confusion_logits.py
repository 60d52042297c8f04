"""Binary thresholds of ConfusionAccumulator mean one thing: a probability, with ``logits=True``
for logits (decided exactly as the sigmoid would be), probabilities outside [0, 1] refused with
the remedy, logits that look like probabilities warned about; state format 3 and the upgrade of
format 2; ``_uncount``, the exact inverse of a count, which groups use to undo a member."""

from __future__ import annotations

import math
import warnings
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from metricstream import AccumulatorGroup, ConfusionAccumulator
from metricstream.base import Accumulator

FIXTURES = Path(__file__).parent / "fixtures"
REMEDY = r"logits=True"


def _logit_cut(p: float) -> float:
    from metricstream.confusion.accumulator import logit_cut

    return logit_cut(p)


def _sigmoid_reaches(x: float, p: float) -> bool:
    """``sigmoid(x) >= p`` in exact arithmetic (independent of the code under test: through
    ``exp`` instead of ``ln``): ``exp(x) * (1 - p) >= p``, with as many digits as it takes for
    the two sides to lie far apart compared with the precision."""
    if math.isinf(x):
        return x > 0 or p == 0.0
    if x == 0.0:
        return 0.5 >= p
    digits = 120
    while True:
        with localcontext() as context:
            context.prec = digits
            left = Decimal(x).exp() * (1 - Decimal(p))
            right = Decimal(p)
            if abs(left - right) > abs(right) * Decimal(10) ** (10 - digits):
                return left >= right
        digits *= 2


def _around(cut: float, steps: int = 3) -> list[float]:
    values = [cut]
    up = down = cut
    for _ in range(steps):
        up = math.nextafter(up, math.inf)
        down = math.nextafter(down, -math.inf)
        values += [up, down]
    return sorted(values)


# ---------------------------------------------------------------------------- refusals
def _probabilities_then(bad: float, position: int, n: int = 600):
    rng = np.random.default_rng(position)
    y_true = rng.integers(0, 2, n)
    scores = rng.random(n)
    scores[:4] = [0.0, -0.0, 1.0, 0.5]  # all inside [0, 1]: -0.0 too
    scores[position] = bad
    return y_true, scores


@pytest.mark.parametrize(
    "bad", [-0.5, 1.5, 3.0, -2.0, math.inf, -math.inf, 1 + 2**-52, -5e-324, -1e-300]
)
@pytest.mark.parametrize("position", [5, 300])  # the first block, and a later one
def test_probabilities_outside_unit_are_refused_with_the_remedy(bad, position):
    acc = ConfusionAccumulator(2, threshold=0.5).update([0, 1, 1], np.array([0.2, 0.9, 0.4]))
    before = acc.matrix.copy()
    y_true, scores = _probabilities_then(bad, position)
    for n in (position + 1, len(scores)):  # the small path and the general path
        with pytest.raises(ValueError, match=REMEDY) as error:
            acc.update(y_true[:n], scores[:n])
        message = str(error.value)
        assert f"at position {position}," in message
        assert repr(float(bad)) in message
        assert "Nothing was counted" in message
        np.testing.assert_array_equal(acc.matrix, before)
    weighted = ConfusionAccumulator(2, threshold=0.5, weighted=True)
    with pytest.raises(ValueError, match=REMEDY):
        weighted.update(y_true, scores, np.full(len(scores), 0.5))
    assert weighted.num_samples == 0


def test_logits_fed_to_a_probability_threshold_are_refused():
    """The mistake of the old idiom: logits to ``ConfusionAccumulator(2, threshold=0.5)``."""
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, 256)
    logits = rng.normal(size=256) * 2
    first = int(np.flatnonzero((logits < 0) | (logits > 1))[0])
    for scores in (logits, logits.astype(np.float32), logits[:, None]):
        acc = ConfusionAccumulator(2, threshold=0.5)
        with pytest.raises(ValueError, match=rf"at position {first}, .*logits=True"):
            acc.update(y_true, scores)
        assert acc.num_samples == 0
    expected = skm.confusion_matrix(y_true, (logits >= 0).astype(int), labels=[0, 1])
    acc = ConfusionAccumulator(2, threshold=0.5, logits=True).update(y_true, logits)
    np.testing.assert_array_equal(acc.matrix, expected)


def test_half_precision_and_torch_probabilities_are_checked():
    torch = pytest.importorskip("torch")
    y_true = np.array([0, 1, 1, 0, 1, 0])
    scores = np.array([0.1, 0.9, 0.5, -0.0, 1.0, 0.0])
    expected = skm.confusion_matrix(y_true, (scores >= 0.5).astype(int))
    for values in (scores.astype(np.float16), torch.tensor(scores, dtype=torch.bfloat16)):
        acc = ConfusionAccumulator(2, threshold=0.5).update(y_true, values)
        np.testing.assert_array_equal(acc.matrix, expected)
    bad = scores.copy()
    bad[4] = 1.25  # exact in float16 and bfloat16
    for values in (bad.astype(np.float16), torch.tensor(bad, dtype=torch.bfloat16)):
        acc = ConfusionAccumulator(2, threshold=0.5)
        with pytest.raises(ValueError, match=r"holds 1\.25 at position 4, .*logits=True"):
            acc.update(y_true, values)
        assert acc.num_samples == 0
    # masks: the position is given in the user's shape, whatever the memory order
    masks = np.asfortranarray(np.array([[0.3, 0.2], [-0.5, 1.0]]))
    with pytest.raises(ValueError, match=r"holds -0\.5 at position \(1, 0\)"):
        ConfusionAccumulator(2, threshold=0.5).update(np.array([[0, 1], [1, 1]]), masks)


def test_nan_scores_keep_their_message_in_both_modes():
    for acc in (
        ConfusionAccumulator(2, threshold=0.5),
        ConfusionAccumulator(2, threshold=0.5, logits=True),
    ):
        with pytest.raises(ValueError, match=r"holds NaN at position 1; the predicted class"):
            acc.update([0, 1, 0], np.array([0.5, np.nan, 0.2]))
        assert acc.num_samples == 0


def test_threshold_is_a_probability():
    with pytest.raises(ValueError, match=r"probability in \[0, 1\], got -1.0; .*logits=True"):
        ConfusionAccumulator(2, threshold=-1.0)
    with pytest.raises(ValueError, match=r"probability in \[0, 1\], got 1.5"):
        ConfusionAccumulator(2, threshold=1.5, logits=True)
    with pytest.raises(TypeError, match="`logits` must be True or False"):
        ConfusionAccumulator(2, threshold=0.5, logits="yes")  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match=r"`threshold=0.0` predicts every probability"):
        acc = ConfusionAccumulator(2, threshold=0.0)
    assert acc.update([0, 1], np.array([0.0, 0.3])).matrix.tolist() == [[0, 1], [0, 1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ConfusionAccumulator(2, threshold=0.0, logits=True)  # a cut at -inf: no warning
    acc = ConfusionAccumulator(2, threshold=0.5, logits=True)
    assert acc.threshold == 0.5 and acc.logits
    assert (
        repr(acc)
        == "ConfusionAccumulator(num_classes=2, num_samples=0, threshold=0.5, logits=True)"
    )


# ---------------------------------------------------------------------------- warnings
def test_logits_that_look_like_probabilities_are_counted_with_a_warning():
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 2, 40)
    probabilities = rng.random(40)
    expected = skm.confusion_matrix(y_true, (probabilities >= 0).astype(int), labels=[0, 1])
    acc = ConfusionAccumulator(2, threshold=0.5, logits=True)
    with pytest.warns(UserWarning, match=r"look like probabilities.*without `logits=True`"):
        acc.update(y_true, probabilities)
    np.testing.assert_array_equal(acc.matrix, expected)  # counted, as the scores accumulator
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.update(y_true[:31], probabilities[:31])  # fewer than 32: could be chance
        acc.update(y_true, probabilities - 0.5)  # some logits below 0
    torch = pytest.importorskip("torch")
    with pytest.warns(UserWarning, match="look like probabilities"):
        acc.update(torch.tensor(y_true), torch.tensor(probabilities, dtype=torch.float32))


def test_group_member_warning_as_error_counts_nothing():
    """A warning turned into an error refuses the batch atomically across a group."""
    group = AccumulatorGroup(
        {
            "first": ConfusionAccumulator(2, threshold=0.3),
            "logits": ConfusionAccumulator(2, threshold=0.5, logits=True),
            "weighted": ConfusionAccumulator(2, threshold=0.5, logits=True, weighted=True),
        }
    )
    y_true = np.array([0, 1] * 20)
    probabilities = np.linspace(0, 1, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="look like probabilities"):
            group.update(y_true, probabilities)
    assert [member.num_samples for member in group.members().values()] == [0, 0, 0]
    with pytest.warns(UserWarning, match="look like probabilities"):
        group.update(y_true, probabilities)
    assert [member.num_samples for member in group.members().values()] == [40, 40, 40.0]
    # in a group a weighted member turns the warning-as-error into nothing counted, bit for
    # bit; alone, ``update`` warns once the batch is counted and the lock released (as
    # MultilabelAccumulator does), so the batch stays counted
    weighted = group["weighted"]
    before = weighted.matrix.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            AccumulatorGroup({"w": weighted}).update(y_true, probabilities * 0.3, np.full(40, 0.1))
        assert weighted.matrix.tobytes() == before
        with pytest.raises(UserWarning):
            weighted.update(y_true, probabilities * 0.3, np.full(40, 0.1))
    assert weighted.num_samples == pytest.approx(44.0)


# ---------------------------------------------------------------------------- exact cut
ADVERSARIAL = [
    0.5,
    math.nextafter(0.5, 1),
    math.nextafter(0.5, 0),
    0.25,
    0.75,
    0.1,
    0.9,
    1 / 3,
    2 / 3,
    1e-300,
    5e-324,
    2**-60,
    1 - 2**-53,
    1 - 2**-40,
    0.999,
    0.001,
]


def test_logit_cut_is_the_smallest_float_whose_sigmoid_reaches_the_threshold():
    rng = np.random.default_rng(2)
    thresholds = ADVERSARIAL + [float(t) for t in rng.random(60)]
    naive_wrong = 0
    for t in thresholds:
        cut = _logit_cut(t)
        assert _sigmoid_reaches(cut, t), t
        assert not _sigmoid_reaches(math.nextafter(cut, -math.inf), t), t
        naive = math.log(t) - math.log1p(-t)
        if (
            naive != cut
            and _sigmoid_reaches(naive, t) != _sigmoid_reaches(cut, t)
            or (naive < cut and _sigmoid_reaches(naive, t))
        ):
            naive_wrong += 1
        # decisions of the accumulator on logits straddling the cut, float64 and float32
        logits = np.array(_around(cut, 4))
        truth = np.array([_sigmoid_reaches(x, t) for x in logits])
        acc = ConfusionAccumulator(2, threshold=t, logits=True)
        acc.update(np.ones(len(logits), dtype=np.int64), logits)
        assert acc.matrix[1].tolist() == [int((~truth).sum()), int(truth.sum())], t
        low = np.float32(cut)
        logits32 = np.array(
            [np.nextafter(low, np.float32(-np.inf)), low, np.nextafter(low, np.float32(np.inf))],
            dtype=np.float32,
        )
        truth32 = np.array([_sigmoid_reaches(float(x), t) for x in logits32])
        acc = ConfusionAccumulator(2, threshold=t, logits=True)
        acc.update(np.ones(3, dtype=np.int64), logits32)
        assert acc.matrix[1].tolist() == [int((~truth32).sum()), int(truth32.sum())], t
    # the float formula lands on the wrong side for some of these thresholds
    assert naive_wrong > 0
    assert _logit_cut(0.0) == -math.inf and _logit_cut(1.0) == math.inf
    assert _logit_cut(0.5) == 0.0


def test_float16_logits_follow_the_exact_sigmoid():
    values = np.arange(-(2**15), 2**15, dtype=np.int64).astype(np.int16).view(np.float16)
    values = values[np.isfinite(values) & (np.abs(values) < 12)]
    for t in (0.3, 0.5, 0.9, 1 / 3):
        truth = np.array([_sigmoid_reaches(float(x), t) for x in values[::37]])
        acc = ConfusionAccumulator(2, threshold=t, logits=True)
        acc.update(np.ones(len(truth), dtype=np.int64), values[::37])
        assert acc.matrix[1].tolist() == [int((~truth).sum()), int(truth.sum())]


def test_logits_match_scikit_learn_on_their_sigmoid():
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, 2, 1000)
    logits = rng.normal(size=1000) * 3
    weights = rng.integers(0, 4, 1000)
    for t in (0.2, 0.5, 0.8):
        decided = (1 / (1 + np.exp(-logits)) >= t).astype(int)
        acc = ConfusionAccumulator(2, threshold=t, logits=True, ignore_index=-1)
        for lo, hi in ((0, 10), (10, 700), (700, 1000)):
            acc.update(y_true[lo:hi], logits[lo:hi], weights[lo:hi])
        expected = skm.confusion_matrix(y_true, decided, sample_weight=weights)
        np.testing.assert_array_equal(acc.matrix, expected)


def test_multiclass_argmax_is_the_same_for_logits():
    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 4, 300)
    logits = rng.normal(size=(300, 4)) * 5  # far outside [0, 1]: nothing to refuse
    plain = ConfusionAccumulator(4).update(y_true, logits)
    flagged = ConfusionAccumulator(4, logits=True).update(y_true, logits)
    np.testing.assert_array_equal(plain.matrix, flagged.matrix)
    np.testing.assert_array_equal(
        flagged.matrix, skm.confusion_matrix(y_true, logits.argmax(1), labels=range(4))
    )


# ---------------------------------------------------------------------------- state
def test_state_format_3_carries_logits():
    acc = ConfusionAccumulator(2, threshold=0.25, logits=True).update([0, 1], np.array([-3.0, 2]))
    state = acc.state_dict()
    assert state["format"] == 3
    assert state["config"]["logits"] is True and state["config"]["threshold"] == 0.25
    for copy in (
        ConfusionAccumulator.from_state_dict(state),
        ConfusionAccumulator.from_bytes(acc.to_bytes()),
    ):
        assert copy.logits and copy.threshold == 0.25
        np.testing.assert_array_equal(copy.matrix, acc.matrix)
    with pytest.raises(ValueError, match="different `logits`"):
        acc.merge(ConfusionAccumulator(2, threshold=0.25))


@pytest.mark.parametrize(
    "threshold, logits, probability",
    [
        (None, False, None),
        (0.5, False, 0.5),
        (0.25, False, 0.25),
        (1.0, False, 1.0),
        (0.0, True, 0.5),
        (3.0, True, 1 / (1 + math.exp(-3.0))),
        (-2.0, True, 1 / (1 + math.exp(2.0))),
    ],
)
def test_format_2_state_dicts_are_upgraded(threshold, logits, probability):
    matrix = np.array([[3, 1], [2, 5]])
    v2 = {
        "type": "ConfusionAccumulator",
        "format": 2,
        "config": {
            "num_classes": 2,
            "class_names": None,
            "ignore_index": None,
            "weighted": False,
            "class_axis": 1,
            "threshold": threshold,
        },
        "arrays": {"matrix": matrix},
    }
    acc = ConfusionAccumulator.from_state_dict(v2)
    assert acc.logits is logits and acc.threshold == probability
    np.testing.assert_array_equal(acc.matrix, matrix)
    assert acc.state_dict()["format"] == 3


def test_format_2_files_saved_by_the_previous_version_load():
    """Files written by the format-2 code (threshold 0.0 for logits; 0.25 for probabilities)."""
    logits = ConfusionAccumulator.load(FIXTURES / "state_v2_threshold_logits.msacc")
    assert logits.logits and logits.threshold == 0.5
    assert logits.matrix.tolist() == [[57, 53], [45, 45]]
    # the same decisions as before: logits at or above 0 are positive
    logits.update([1, 1, 0], np.array([0.0, -(2**-1074), 7.0]))
    assert logits.matrix.tolist() == [[57, 54], [46, 46]]
    probabilities = ConfusionAccumulator.load(FIXTURES / "state_v2_threshold_probability.msacc")
    assert not probabilities.logits and probabilities.threshold == 0.25
    assert probabilities.ignore_index == -1
    assert probabilities.matrix.tolist() == [[42, 68], [36, 54]]


# ---------------------------------------------------------------------------- _uncount
def _batches(rng: np.random.Generator):
    n = int(rng.integers(0, 50))
    yield "labels", ConfusionAccumulator(3), (rng.integers(0, 3, n), rng.integers(0, 3, n))
    yield "rows", ConfusionAccumulator(3), (rng.integers(0, 3, n), rng.normal(size=(n, 3)))
    masks = rng.normal(size=(2, 3, 4, 5))
    yield "masks", ConfusionAccumulator(3), (rng.integers(0, 3, (2, 4, 5)), masks)
    yield (
        "ignore, weights",
        ConfusionAccumulator(3, ignore_index=7),
        (rng.choice([0, 1, 2, 7], n), rng.integers(0, 3, n), rng.integers(0, 5, n)),
    )
    yield (
        "threshold",
        ConfusionAccumulator(2, threshold=0.4),
        (rng.integers(0, 2, n), rng.random(n)),
    )
    yield (
        "logits",
        ConfusionAccumulator(2, threshold=0.7, logits=True),
        (rng.integers(0, 2, n), rng.normal(size=n) - 3),
    )


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_uncount_is_the_exact_inverse_of_count(seed):
    rng = np.random.default_rng(seed)
    for name, acc, batch in _batches(rng):
        acc.update(*batch)  # something to start from
        before = acc.matrix.copy()
        prepared = acc._prepare(*batch)
        with acc._lock:
            acc._count(acc._arrays, prepared)
            counted = acc._arrays["matrix"].copy()
            acc._uncount(acc._arrays, prepared)
            acc._changed()
        np.testing.assert_array_equal(counted - before, acc.update(*batch).matrix - before)
        acc._arrays["matrix"][...] = before
        acc._changed()
        np.testing.assert_array_equal(acc.matrix, before, err_msg=name)


def test_groups_undo_a_confusion_member_with_uncount():
    assert ConfusionAccumulator._uncount is not Accumulator._uncount
    # the first two read logits; the last reads probabilities and refuses the batch
    first = ConfusionAccumulator(2, threshold=0.3, logits=True).update([0, 1], np.array([-2, 3.0]))
    weighted = ConfusionAccumulator(2, threshold=0.3, logits=True, weighted=True)
    weighted.update([0, 1, 1], np.array([0.1, 0.6, -0.2]), [0.1, 0.2, 0.3])
    refusing = ConfusionAccumulator(2, threshold=0.3)
    group = AccumulatorGroup({"first": first, "weighted": weighted, "last": refusing})
    before = {name: member.matrix.copy() for name, member in group.members().items()}
    calls = []
    original = ConfusionAccumulator._uncount

    def spy(self, arrays, batch):
        calls.append(self)
        original(self, arrays, batch)

    ConfusionAccumulator._uncount = spy  # type: ignore[method-assign]
    try:
        with pytest.raises(ValueError, match=r"holds 1\.5 at position 2, .*logits=True"):
            group.update([0, 1, 1], np.array([0.9, 0.2, 1.5]), [1, 1, 1])
    finally:
        ConfusionAccumulator._uncount = original  # type: ignore[method-assign]
    assert calls == [first]  # the weighted member restored its copy instead
    for name, member in group.members().items():
        assert member.matrix.tobytes() == before[name].tobytes(), name


# ---------------------------------------------------------------------------- the device path
def test_device_path_thresholds_probabilities_and_logits_alike():
    torch = pytest.importorskip("torch")
    from metricstream import device

    rng = np.random.default_rng(5)
    y_true = rng.integers(0, 2, 200)
    logits = rng.normal(size=200) * 2
    logits[:3] = [_logit_cut(0.3), math.nextafter(_logit_cut(0.3), -math.inf), 0.0]
    probabilities = rng.random(200)
    probabilities[:2] = [-0.0, 1.0]
    previous = device.force_device_path(True)
    try:
        for scores, options in ((logits, {"logits": True}), (probabilities, {})):
            on_device = ConfusionAccumulator(2, threshold=0.3, **options)
            on_device.update(torch.tensor(y_true), torch.tensor(scores))
            host = ConfusionAccumulator(2, threshold=0.3, **options).update(y_true, scores)
            np.testing.assert_array_equal(on_device.matrix, host.matrix)
        acc = ConfusionAccumulator(2, threshold=0.5)
        acc.update(torch.tensor(y_true), torch.tensor(probabilities))
        acc.update(torch.tensor(y_true), torch.tensor(logits))  # recorded, not raised
        acc.update(torch.tensor(y_true), torch.tensor(probabilities))
        with pytest.raises(ValueError, match=r"holds -0\.84.* device batch 1 .*logits=True"):
            _ = acc.matrix
        twice = ConfusionAccumulator(2, threshold=0.5).update(y_true, probabilities)
        twice.update(y_true, probabilities)
        np.testing.assert_array_equal(acc.matrix, twice.matrix)  # the bad batch left out
        nan = probabilities.copy()
        nan[7] = np.nan
        acc.update(torch.tensor(y_true), torch.tensor(nan))
        with pytest.raises(ValueError, match="predicted class of that sample is undefined"):
            _ = acc.matrix
    finally:
        device.force_device_path(previous)
