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
