"""The accuracy table of ``benchmarks/bench_scores.py`` as a functional test on fixed data:
default bins against scikit-learn's exact AUROC and AP, and the bounds always containing them.
(No torchmetrics here: the benchmark prints those columns.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from benchmarks.bench_scores import ScoreSet, accumulate, exact_values, score_sets


@pytest.fixture(scope="module")
def sets() -> list[ScoreSet]:
    return score_sets()


@pytest.fixture(scope="module")
def rows(sets) -> dict[str, dict]:
    return {row["name"]: row for row in _rows(sets)}


def _rows(sets: list[ScoreSet]) -> list[dict]:
    out = []
    for s in sets:
        exact_auroc, exact_ap = exact_values(s)
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
        # logits use the any-range key (8 significant bits): 1.0e-5 on the digits logits
        tolerance = 1.5e-5 if row["set"].logits else 1e-5
        assert abs(row["auroc"].value - row["exact"][0]) <= tolerance, name


def test_average_precision_of_real_classifiers_within_1e4(rows):
    for name, row in rows.items():
        if name.startswith("digits") and not row["set"].logits:
            assert abs(row["ap"].value - row["exact"][1]) <= 1e-4, name
        # smooth synthetic scores have many distinct values per bin: within 1e-3
        assert abs(row["ap"].value - row["exact"][1]) <= 1e-3, name


def test_sixteen_bit_scores_are_exact(rows, sets):
    row = rows["bfloat16 softmax"]
    assert row["acc"].exact().all()
    assert row["auroc"].value == pytest.approx(row["exact"][0], rel=1e-12, abs=1e-12)
    assert row["ap"].value == pytest.approx(row["exact"][1], rel=1e-12, abs=1e-12)
    # float16 keeps 11 significant bits: 2**19 bins (12 bits) count it exactly
    half = next(s for s in sets if s.scores.dtype == np.float16)
    acc = accumulate(half, bins=2**19)
    assert acc.exact().all()
    exact_auroc, exact_ap = exact_values(half)
    assert acc.auroc() == pytest.approx(exact_auroc, rel=1e-12, abs=1e-12)
    assert acc.average_precision() == pytest.approx(exact_ap, rel=1e-12, abs=1e-12)


def test_more_bins_bring_ap_within_1e4(sets):
    smooth = next(s for s in sets if s.name.startswith("smooth"))
    exact_auroc, exact_ap = exact_values(smooth)
    acc = accumulate(smooth, bins=2**18)
    assert abs(acc.average_precision() - exact_ap) <= 1e-4
    assert abs(acc.auroc() - exact_auroc) <= 1e-6


def test_spread_bins_bring_ap_of_continuous_scores_within_1e4(rows):
    """``within_bins="spread"``: AP within 1e-4 wherever bins hold continuous scores; sets
    of tied values (2 decimals, float16) are what the tied default is for."""
    for name, row in rows.items():
        spread = row["acc"].average_precision("macro", with_bound=True, within_bins="spread")
        assert row["ap"].lower <= spread.value <= row["ap"].upper, name
        if name.startswith("ties") or name.startswith("float16"):
            continue
        assert abs(spread.value - row["exact"][1]) <= 1e-4, name
