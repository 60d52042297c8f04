"""The accuracy table of ``benchmarks/bench_scores.py`` as a functional test on fixed data:
default bins against scikit-learn's exact AUROC and AP, and the bounds always containing them.
(No torchmetrics here: the benchmark prints those columns.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special

from benchmarks.bench_scores import ScoreSet, accumulate, exact_values, score_sets
from metricstream.scores import ScoreAccumulator


@pytest.fixture(scope="module")
def sets() -> list[ScoreSet]:
    return score_sets()


@pytest.fixture(scope="module")
def rows(sets) -> dict[str, dict]:
    return {row["name"]: row for row in _rows(sets)}


def _exact(s: ScoreSet) -> tuple[float, float]:
    """scikit-learn's values on the raw scores; multiclass logits are ranked by their softmax
    (as scikit-learn's ``roc_auc_score`` takes probabilities)."""
    if s.logits and s.task == "multiclass":
        probabilities = scipy.special.softmax(s.scores.astype(np.float64), axis=1)
        return exact_values(ScoreSet(s.name, s.y, probabilities, s.task))
    return exact_values(s)


def _rows(sets: list[ScoreSet]) -> list[dict]:
    out = []
    for s in sets:
        exact_auroc, exact_ap = _exact(s)
        acc = accumulate(s)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            auroc = acc.auroc("macro", with_bound=True)
            ap = acc.average_precision("macro", with_bound=True)
        out.append(
            {
                "name": s.name,
                "set": s,
                "acc": acc,
                "exact": (exact_auroc, exact_ap),
                "auroc": auroc,
                "ap": ap,
            }
        )
    return out


def test_at_least_ten_score_sets(sets):
    assert len(sets) >= 10
    assert any(s.logits for s in sets) and any(s.task == "binary" for s in sets)


def test_bound_always_contains_exact(rows):
    for name, row in rows.items():
        exact_auroc, exact_ap = row["exact"]
        assert row["auroc"].lower - 1e-12 <= exact_auroc <= row["auroc"].upper + 1e-12, name
        assert row["ap"].lower - 1e-12 <= exact_ap <= row["ap"].upper + 1e-12, name


def test_default_bins_auroc_within_1e5(rows):
    for name, row in rows.items():
        assert abs(row["auroc"].value - row["exact"][0]) <= 1e-5, name


def test_default_average_precision_within_1e4(rows):
    """The default (``within_bins="auto"``): AP within 1e-4 of scikit-learn on every set
    (continuous, rare positives, ties, exact 0/1, logits, log-probabilities, 16-bit)."""
    for name, row in rows.items():
        assert abs(row["ap"].value - row["exact"][1]) <= 1e-4, name


def test_sixteen_bit_scores_are_exact(rows, sets):
    for name in ("bfloat16 softmax", "float16 binary"):
        row = rows[name]
        assert row["acc"].exact().all(), name
        assert row["auroc"].value == pytest.approx(row["exact"][0], rel=1e-12, abs=1e-12)
        assert row["ap"].value == pytest.approx(row["exact"][1], rel=1e-12, abs=1e-12)
    # every float16 probability has a bin of its own
    probabilities = np.arange(0x3C01, dtype=np.uint16).view(np.float16)  # 0 .. 1
    acc = ScoreAccumulator("binary").update(np.arange(probabilities.size) % 2, probabilities)
    assert acc.exact().all()
    assert np.count_nonzero(acc.state_arrays()["curves"].sum(axis=-1)) == probabilities.size


def test_more_bins_bring_tied_ap_within_1e4(sets):
    smooth = next(s for s in sets if s.name.startswith("smooth"))
    exact_auroc, exact_ap = exact_values(smooth)
    acc = accumulate(smooth, bins=2**18)
    assert abs(acc.average_precision(within_bins="tied") - exact_ap) <= 1e-4
    assert abs(acc.auroc() - exact_auroc) <= 1e-6


def test_every_within_bins_rule_stays_inside_the_bound(rows):
    """``"spread"`` and ``"tied"`` share the default's bound; ``"spread"`` is within 1e-4 on
    every set of continuous scores, ``"tied"`` exact on the sets of repeated values."""
    for name, row in rows.items():
        for rule in ("tied", "spread"):
            value = row["acc"].average_precision("macro", with_bound=True, within_bins=rule)
            assert (value.lower, value.upper) == (row["ap"].lower, row["ap"].upper), name
            assert value.lower <= value.value <= value.upper, name
        spread = row["acc"].average_precision("macro", within_bins="spread")
        tied = row["acc"].average_precision("macro", within_bins="tied")
        if name.startswith("ties"):
            assert tied == pytest.approx(row["exact"][1], abs=1e-12), name
            continue
        assert abs(spread - row["exact"][1]) <= 1e-4, name
