"""ScoreBinning: the score accumulator's bins as one small type (layout, values, edges, the bin of
a threshold), the same answers the accumulator gives, and the checks of its arguments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from metricstream.scores import ScoreAccumulator, ScoreBinning


@pytest.mark.parametrize(
    ("task", "options"),
    [
        ("binary", {}),
        ("binary", {"logits": True}),
        ("multiclass", {"logits": True}),  # keyed by the softmax: probability bins
        ("binary", {"thresholds": [0.1, 0.5, 0.9]}),
        ("binary", {"bins": 256, "logits": True}),
        ("binary", {"bins": 4096, "key_shifts": (20, 17, 18)}),
    ],
)
def test_the_accumulator_answers_from_its_binning(task, options):
    acc = ScoreAccumulator(task, None if task == "binary" else 3, **options)
    binning = acc.binning
    assert isinstance(binning, ScoreBinning)
    assert binning.num_bins == acc.num_bins == acc.state_arrays()["curves"].shape[1]
    assert binning.logit_keys == (bool(options.get("logits")) and task != "multiclass")
    np.testing.assert_array_equal(binning.values(), acc.bin_values())
    config = acc.config()
    assert {key: config[key] for key in ("bins", "thresholds", "key_shifts")} == binning.config()
    for threshold in (-3.0, 0.0, 0.25, 0.5, 0.999, 1.0, 7.5):
        assert binning.index(threshold) == acc.bin_index(threshold)
    spread = binning.spread()
    assert spread.shape == (binning.num_bins,)
    if binning.thresholds is None and not binning.logit_keys:
        assert not spread[0] and not spread[-1] and spread[1:-1].all()
    else:
        assert spread.all()


@pytest.mark.parametrize("logit_keys", [False, True])
def test_edges_and_values_select_exactly_the_scores_of_each_bin(logit_keys):
    """``score >= edges[b]`` holds exactly for the scores of bins ``>= b`` (and a bin's value
    lies in its bin), on random scores and on the edges and their neighbours."""
    binning = ScoreBinning.create(num_classes=1, logit_keys=logit_keys, bins=4096)
    edges, values = binning.edges(), binning.values()
    rng = np.random.default_rng(0)
    if logit_keys:
        scores = np.r_[rng.standard_normal(300) * 10, rng.standard_normal(100) * 1e-8]
    else:
        scores = np.r_[rng.random(300), rng.random(100) ** 8, 1 - rng.random(100) ** 8]
    probes = edges[np.isfinite(edges)][:: max(1, edges.size // 300)]
    scores = np.r_[scores, probes, np.nextafter(probes, -np.inf), np.nextafter(probes, np.inf)]
    if not logit_keys:
        scores = scores[(scores >= 0) & (scores <= 1)]
    acc = ScoreAccumulator("binary", logits=logit_keys, bins=4096)
    for score in scores:
        b = binning.index(score)
        one = ScoreAccumulator("binary", logits=logit_keys, bins=4096)
        one.update([1], [score])
        counted = int(np.flatnonzero(one.state_arrays()["curves"][0, :, 1])[0])
        assert counted == b, score  # the bin the kernels count a score in
        assert score >= edges[b]
        if b + 1 < edges.size and np.isfinite(edges[b + 1]):
            assert score < edges[b + 1]
        if np.isfinite(values[b]):
            assert binning.index(values[b]) == b
    assert acc.num_bins == binning.num_bins
    np.testing.assert_array_equal(binning.reported_thresholds(True), values)
    np.testing.assert_array_equal(binning.reported_thresholds(False), edges)


def test_explicit_thresholds_are_their_own_values_and_edges():
    binning = ScoreBinning.create(num_classes=4, thresholds=[0.25, 0.5, 0.75])
    assert (binning.num_bins, binning.bins, binning.key_shifts, binning.shift) == (4, None, None, 0)
    np.testing.assert_array_equal(binning.values(), [-np.inf, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(binning.edges(), binning.values())
    assert [binning.index(t) for t in (0.0, 0.25, 0.3, 0.5, 0.75, 2.0)] == [0, 1, 1, 2, 3, 3]


def test_binning_is_immutable_and_hands_out_copies():
    binning = ScoreBinning.create(num_classes=2, thresholds=[0.2, 0.4])
    with pytest.raises(dataclasses.FrozenInstanceError):
        binning.num_bins = 3  # type: ignore[misc]
    assert binning.thresholds is not None
    with pytest.raises(ValueError, match="read-only"):
        binning.thresholds[0] = 0.0
    values = binning.values()
    values[:] = 0
    assert binning.values()[1] == 0.2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bins": 1000}, r"`bins` must be a power of two from 16 to 2\*\*24"),
        ({"bins": 8}, "power of two"),
        ({"bins": True}, "power of two"),
        ({"thresholds": [0.5, 0.2]}, "strictly increasing"),
        ({"thresholds": [0.5, np.nan]}, "finite"),
        ({"thresholds": [0.5, 1.5]}, r"must lie in \[0, 1\], got 1.5"),
        ({"thresholds": [0.5], "bins": 64}, "not both"),
        ({"thresholds": [0.5], "key_shifts": (1, 1, 1)}, "does not apply"),
        ({"key_shifts": (1, 2)}, "3 integers"),
        ({"key_shifts": (1, 2, 40)}, r"in \[1, 31\]"),
        ({"key_shifts": (13, 16, 14)}, "outer range"),
        ({"bins": 16, "key_shifts": (16, 13, 14)}, "more than `bins` = 16"),
    ],
)
def test_bad_binning_arguments_name_the_argument_and_value(options, message):
    with pytest.raises(ValueError, match=message):
        ScoreBinning.create(num_classes=2, **options)
    with pytest.raises(ValueError, match=message):  # the accumulator says the same
        ScoreAccumulator("multiclass", 2, **options)


def test_default_bins_shrink_with_many_classes():
    assert ScoreBinning.create(num_classes=10).bins == 65536
    assert ScoreBinning.create(num_classes=100).bins == 32768
    assert ScoreBinning.create(num_classes=1000).bins == 4096
    with pytest.raises(ValueError, match="NaN"):
        ScoreBinning.create(num_classes=1).index(float("nan"))
