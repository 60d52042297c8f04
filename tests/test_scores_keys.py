"""The key layout of the score histograms: every float16 and bfloat16 probability in a bin of
its own, ``key_shifts`` recorded in the state, and states of the earlier uniform layout."""

from __future__ import annotations

import numpy as np
import pytest
import sklearn.metrics as skm

from metricstream.scores import ScoreAccumulator


def _float16_probabilities() -> np.ndarray:
    return np.arange(0x3C01, dtype=np.uint16).view(np.float16)  # every float16 in [0, 1]


def test_default_layout_and_memory():
    acc = ScoreAccumulator("binary")
    assert acc.config()["key_shifts"] == [16, 13, 14]
    assert acc.num_bins == 41347
    values = acc.bin_values()
    assert values[0] == 0.0 and values[-1] == 1.0 and np.all(np.diff(values) > 0)
    assert ScoreAccumulator("multiclass", 100).config()["key_shifts"] == [17, 14, 15]
    assert ScoreAccumulator("multiclass", 1000).num_bins == 2587
    logits = ScoreAccumulator("binary", logits=True)
    assert logits.config()["key_shifts"] == [19, 16, 13]
    assert logits.num_bins == 60160
    values = logits.bin_values()
    finite = values[~np.isnan(values)]
    assert np.all(np.diff(finite) >= 0) and finite[0] == -np.inf and finite[-1] == np.inf
    # small budgets drop the same bits everywhere
    assert ScoreAccumulator("binary", logits=True, bins=1024).config()["key_shifts"] == [22] * 3
    assert ScoreAccumulator("binary", thresholds=[0.5]).config()["key_shifts"] is None


def test_every_float16_probability_is_its_bins_value():
    probabilities = _float16_probabilities()
    acc = ScoreAccumulator("binary")
    bins = np.array([acc.bin_index(float(p)) for p in probabilities[1:]])
    assert np.all(np.diff(bins) > 0)  # distinct, in order
    values = acc.bin_values()
    np.testing.assert_array_equal(values[bins], probabilities[1:].astype(np.float64))


def test_float16_scores_equal_scikit_learn():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 30_000)
    # many values near 1 and near 0, where float16 is finest
    logits = rng.normal(size=30_000) * 4 + 2 * y
    scores = (1 / (1 + np.exp(-logits))).astype(np.float16)
    acc = ScoreAccumulator("binary").update(y, scores)
    assert acc.exact().all()
    wide = scores.astype(np.float64)
    assert acc.auroc() == pytest.approx(skm.roc_auc_score(y, wide), abs=1e-12)
    assert acc.average_precision() == pytest.approx(skm.average_precision_score(y, wide), abs=1e-12)


def test_logit_bins_are_in_order_and_exact_on_their_values():
    acc = ScoreAccumulator("binary", logits=True)
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.normal(size=4000) * 10,
            rng.normal(size=2000) * 1e-3,
            rng.normal(size=1000) * 1e-25,
            rng.normal(size=1000) * 1e25,
            [0.0, -0.0, np.inf, -np.inf, 2.0**-64, -(2.0**-64), 2.0**-6, 2.0**7, 2.0**64],
        ]
    ).astype(np.float32)
    x.sort()
    bins = np.array([acc.bin_index(float(v)) for v in x])
    assert np.all(np.diff(bins) >= 0)
    values = acc.bin_values()
    # a score equal to its bin's value is exact, and the bin of that value is the bin
    on_values = values[bins]
    assert np.array_equal(np.array([acc.bin_index(v) for v in on_values]), bins)
    counted = on_values[on_values < np.inf]  # +inf logits are rejected
    exact = ScoreAccumulator("binary", logits=True).update(
        (np.arange(counted.size) % 2), counted.astype(np.float32)
    )
    assert exact.exact().all()
    # every float16 logit in the fine region (2**-6 <= |x| < 2**7) has a bin of its own
    halves = np.arange(0x2400, 0x5800, dtype=np.uint16).view(np.float16).astype(np.float64)
    fine = np.array([acc.bin_index(v) for v in halves])
    assert np.all(np.diff(fine) > 0)


def test_key_shifts_pin_the_layout():
    acc = ScoreAccumulator("binary", key_shifts=(15, 15, 15))  # the uniform key of format 1
    assert acc.num_bins == 38147
    y = np.array([0, 1, 1, 0, 1])
    scores = np.array([0.1, 0.7, 0.95, 0.3, 0.999], dtype=np.float32)
    acc.update(y, scores)
    assert acc.auroc() == skm.roc_auc_score(y, scores)
    copy = ScoreAccumulator.from_bytes(acc.to_bytes())
    assert copy.config() == acc.config()
    with pytest.raises(ValueError, match="different `key_shifts`"):
        acc.merge(ScoreAccumulator("binary").update(y, scores))  # another layout


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key_shifts": (13,)}, "3 integers"),
        ({"key_shifts": (16, 13)}, "3 integers"),
        ({"key_shifts": (16, 0, 14)}, "3 integers"),
        ({"key_shifts": (16, 32, 14)}, "3 integers"),
        ({"key_shifts": (True, 13, 14)}, "3 integers"),
        ({"key_shifts": "16,13,14"}, "3 integers"),
        ({"key_shifts": (13, 16, 14)}, "outer range"),
        ({"key_shifts": (24, 13, 14), "bins": 1 << 20}, "at most 23"),
        ({"key_shifts": (16, 13, 14), "bins": 4096}, "more than `bins`"),
        ({"key_shifts": (17, 16), "logits": True}, "3 integers"),
        ({"key_shifts": (13, 16, 19), "logits": True}, "outer range"),
        ({"key_shifts": (24, 20, 17), "logits": True, "bins": 1 << 20}, "at most 23"),
        ({"key_shifts": (16, 16, 16), "thresholds": [0.5]}, "does not apply"),
    ],
)
def test_bad_key_shifts_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScoreAccumulator("binary", **kwargs)


def _format1_state(acc: ScoreAccumulator) -> dict:
    state = acc.state_dict()
    config = dict(state["config"])
    del config["key_shifts"]
    return {**state, "format": 1, "config": config}


@pytest.mark.parametrize("logits", [False, True])
def test_format1_states_load_with_the_uniform_key(logits):
    rng = np.random.default_rng(6)
    y = rng.integers(0, 3, 500)
    scores = rng.random((500, 3))
    scores = (scores / scores.sum(axis=1, keepdims=True)).astype(np.float32)
    if logits:
        scores = np.log(scores)
    # what the earlier layout counted: the uniform key of the default budget (the logit key:
    # multilabel; earlier multiclass logits ranked the raw logits and are refused)
    shift = 16 if logits else 15
    task = "multilabel" if logits else "multiclass"
    if logits:
        y = np.eye(3, dtype=np.int64)[y]
        refused = ScoreAccumulator("multiclass", 3, logits=True, key_shifts=(16, 13, 14))
        with pytest.raises(ValueError, match="ranked the raw logits"):
            ScoreAccumulator.from_state_dict(_format1_state(refused))
    old = ScoreAccumulator(task, 3, logits=logits, key_shifts=(shift,) * 3)
    old.update(y, scores)
    loaded = ScoreAccumulator.from_state_dict(_format1_state(old))
    assert loaded.config()["key_shifts"] == [shift] * 3
    assert loaded.num_bins == old.num_bins
    np.testing.assert_array_equal(loaded.state_arrays()["curves"], old.state_arrays()["curves"])
    assert loaded.auroc() == old.auroc()
    # and it keeps counting in that layout
    loaded.update(y, scores)
    assert loaded.state_arrays()["curves"].sum() == 2 * old.state_arrays()["curves"].sum()


def test_format1_states_with_bad_budgets_are_rejected():
    state = _format1_state(ScoreAccumulator("binary", key_shifts=(15, 15, 15)))
    for bins in (True, 3.5, 0, 1 << 30, "65536"):
        bad = {**state, "config": {**state["config"], "bins": bins}}
        with pytest.raises(ValueError):
            ScoreAccumulator.from_state_dict(bad)
    # a format 2 state whose recorded layout does not fit its arrays
    state = ScoreAccumulator("binary").state_dict()
    bad = {**state, "config": {**state["config"], "key_shifts": [15, 15, 15]}}
    with pytest.raises(ValueError):
        ScoreAccumulator.from_state_dict(bad)


def _expected_curves(acc: ScoreAccumulator, y: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The histograms counted score by score through ``bin_index``."""
    expected = np.zeros((scores.shape[1], acc.num_bins, 2), dtype=np.int64)
    for row, label in zip(scores, y, strict=True):
        for c, value in enumerate(row):
            expected[c, acc.bin_index(float(value)), int(c == label)] += 1
    return expected


@pytest.mark.parametrize("rows", [256, 5000])  # the small-batch row path, then the general one
def test_every_path_bins_as_bin_index(rows):
    rng = np.random.default_rng(8)
    y = rng.integers(0, 4, rows)
    # probabilities near 0 (some below 2**-24), near 1, and on either side of 1/2
    scores = rng.random((rows, 4)) ** rng.choice([1.0, 8.0, 40.0], size=(rows, 4))
    scores[::7, 1] = 1.0 - scores[::7, 1] * 1e-6
    scores[::7, 2:] *= 1e-7
    scores[::5, 2] = 0.5
    scores[::5, 1] *= 0.25
    scores[::5, 3] *= 0.25
    scores[::11, 3] = 2.0**-30
    # rows of probabilities sum to one: the first class takes the rest
    rest = scores[:, 1:].sum(axis=1)
    over = rest > 1
    scores[over, 1:] /= rest[over, None]
    scores[:, 0] = np.maximum(1.0 - scores[:, 1:].sum(axis=1), 0.0)
    scores = scores.astype(np.float32)
    acc = ScoreAccumulator("multiclass", 4).update(y, scores)
    np.testing.assert_array_equal(acc.state_arrays()["curves"], _expected_curves(acc, y, scores))
