"""flat_scalars: one flat dict of floats from any accumulator or group, equal to scikit-learn."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from metricstream import (
    AccumulatorGroup,
    BootstrapConfusionAccumulator,
    ConfusionAccumulator,
    MultilabelAccumulator,
    ScoreAccumulator,
)
from metricstream.exceptions import UndefinedMetricWarning
from metricstream.scalars import flat_scalars


def _confusion_reference(y, p, labels=None):
    out = {
        "num_samples": float(len(y)),
        "accuracy": skm.accuracy_score(y, p),
        "balanced_accuracy": skm.balanced_accuracy_score(y, p),
        "cohen_kappa": skm.cohen_kappa_score(y, p),
        "matthews_corrcoef": skm.matthews_corrcoef(y, p),
    }
    for average in ("macro", "weighted"):
        out[f"precision_{average}"] = skm.precision_score(y, p, average=average, labels=labels)
        out[f"recall_{average}"] = skm.recall_score(y, p, average=average, labels=labels)
        out[f"f1_{average}"] = skm.f1_score(y, p, average=average, labels=labels)
    return out


@pytest.mark.filterwarnings("ignore::metricstream.exceptions.UndefinedMetricWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")  # scikit-learn: a class predicted, never true
@pytest.mark.parametrize("seed", range(4))
def test_group_equals_sklearn(seed):
    rng = np.random.default_rng(seed)
    k = 4
    n = int(rng.integers(30, 300))
    y = rng.integers(0, k, n)
    y[y == 3] = 2  # class 3 absent from the truth
    # Multiples of 1/64 summing to 1: every one is its score bin's value, so curves are exact.
    probs = (rng.multinomial(60, np.ones(k) / k, size=n) + 1) / 64.0
    group = AccumulatorGroup(
        labels=ConfusionAccumulator(k), scores=ScoreAccumulator("multiclass", k)
    )
    for part in np.array_split(np.arange(n), 3):
        group.update(y[part], probs[part])
    got = flat_scalars(group, "val/")
    pred = probs.argmax(axis=1)
    present = None  # sklearn's labels=None: the classes present in truth or predictions
    for key, value in _confusion_reference(y, pred, present).items():
        assert got[f"val/labels/{key}"] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    mask = np.isin(np.arange(k), np.unique(np.concatenate([y, pred])))
    iou = skm.jaccard_score(y, pred, average=None, labels=np.arange(k), zero_division=0)
    assert got["val/labels/miou"] == pytest.approx(iou[mask].mean(), rel=1e-12)
    y_one_hot = np.eye(k)[y][:, :3]
    assert got["val/scores/num_samples"] == n
    assert got["val/scores/top1_accuracy"] == skm.top_k_accuracy_score(
        y, probs, k=1, labels=range(k)
    )
    assert got["val/scores/brier_score"] == pytest.approx(
        np.mean(np.sum((probs - np.eye(k)[y]) ** 2, axis=1)), rel=1e-9
    )
    assert got["val/scores/log_loss"] == pytest.approx(
        skm.log_loss(y, probs, labels=range(k)), rel=1e-9
    )
    # The per-class AUROC of the three present classes (class 3 has no positives: NaN).
    assert got["val/scores/auroc_macro"] == pytest.approx(
        np.mean([skm.roc_auc_score(y_one_hot[:, c], probs[:, c]) for c in range(3)]), rel=1e-12
    )
    assert all(isinstance(v, float) for v in got.values())


def test_torchmetrics_convention_and_per_class():
    y, p = [0, 1, 1, 2], [0, 1, 0, 2]
    acc = ConfusionAccumulator(5, class_names=list("abcde")).update(y, p)
    got = flat_scalars(acc, ignore_absent=False, per_class=True, zero_division=0.0)
    labels = list(range(5))
    assert got["f1_macro"] == pytest.approx(
        skm.f1_score(y, p, average="macro", labels=labels, zero_division=0.0)
    )
    f1 = skm.f1_score(y, p, average=None, labels=labels, zero_division=0.0)
    assert [got[f"f1/{c}"] for c in "abcde"] == pytest.approx(f1)
    iou = skm.jaccard_score(y, p, average=None, labels=labels, zero_division=0.0)
    assert [got[f"iou/{c}"] for c in "abcde"] == pytest.approx(iou)


def test_binary_and_worked_example():
    # Worked example: 4 samples, one positive missed. TP=1, FN=1, FP=0, TN=2.
    acc = ConfusionAccumulator(2).update([0, 1, 1, 0], [0, 1, 0, 0])
    got = flat_scalars(acc)
    assert got["accuracy"] == 0.75
    assert got["precision"] == 1.0 and got["recall"] == 0.5 and got["f1"] == 2 / 3
    scores = ScoreAccumulator("binary").update([0, 1, 1, 0], [0.25, 0.75, 0.5, 0.125])
    s = flat_scalars(scores)
    assert s["auroc"] == 1.0 and s["average_precision"] == 1.0
    assert s["brier_score"] == skm.brier_score_loss([0, 1, 1, 0], [0.25, 0.75, 0.5, 0.125])


def test_multilabel_equals_sklearn():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, (80, 5))
    p = rng.integers(0, 2, (80, 5))
    y[:, 4] = 1  # every sample has a true and a predicted label: per-sample ratios are defined
    p[:, 0] = 1
    got = flat_scalars(MultilabelAccumulator(5).update(y, p), "ml/")
    assert got["ml/subset_accuracy"] == skm.accuracy_score(y, p)
    assert got["ml/hamming_loss"] == pytest.approx(skm.hamming_loss(y, p))
    for average in ("micro", "macro", "weighted"):
        for name, ref in (("f1", skm.f1_score), ("jaccard", skm.jaccard_score)):
            want = ref(y, p, average=average, zero_division=0)
            assert got[f"ml/{name}_{average}"] == pytest.approx(want, rel=1e-12)
    assert got["ml/recall_samples"] == pytest.approx(skm.recall_score(y, p, average="samples"))


def test_bootstrap_carries_intervals():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    boot = BootstrapConfusionAccumulator(3, n_resamples=50, seed=1)
    for chunk in np.array_split(np.arange(300), 30):  # one cluster per update
        boot.update(y[chunk], p[chunk])
    got = flat_scalars(boot)
    assert got["accuracy"] == skm.accuracy_score(y, p)
    assert got["accuracy_low"] <= got["accuracy"] <= got["accuracy_high"]
    assert got["f1_macro_low"] <= got["f1_macro_high"]
    assert "accuracy_low" not in flat_scalars(boot, intervals=False)


def test_empty_accumulators_give_nan_not_errors():
    group = AccumulatorGroup(c=ConfusionAccumulator(3), s=ScoreAccumulator("binary"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        got = flat_scalars(group, zero_division=np.nan)
    assert got["c/num_samples"] == 0.0
    assert math.isnan(got["c/accuracy"]) and math.isnan(got["s/auroc"])


def test_summary_objects_and_bad_input():
    class Custom:
        def summary(self):
            return {"loss": np.float32(0.5), "nested": {"n": 3, "name": "x"}, "flag": True}

    assert flat_scalars(Custom(), "p/") == {"p/loss": 0.5, "p/nested/n": 3.0}
    with pytest.raises(TypeError, match="cannot make scalars of a list"):
        flat_scalars([1, 2])
    with pytest.raises(TypeError, match="`prefix` must be a string"):
        flat_scalars(ConfusionAccumulator(2), prefix=1)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=40),
    cut=st.integers(0, 40),
)
def test_any_split_gives_the_same_scalars(data, cut):
    y, p = np.array(data).T
    whole = ConfusionAccumulator(3).update(y, p)
    parts = ConfusionAccumulator(3).update(y[:cut], p[:cut]) + ConfusionAccumulator(3).update(
        y[cut:], p[cut:]
    )
    a = flat_scalars(whole, zero_division=np.nan)
    b = flat_scalars(parts, zero_division=np.nan)
    assert a.keys() == b.keys()
    assert all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_optional_hosts_are_imported_only_by_their_modules():
    # `import metricstream` (and the scalars) import no host; each integration module, with its
    # host missing, raises an ImportError naming the extra to install.
    import subprocess
    import sys

    code = """
import sys
import metricstream, metricstream.scalars
hosts = ("torch", "lightning", "pytorch_lightning", "transformers", "keras", "torchmetrics")
assert not [h for h in hosts if h in sys.modules], [h for h in hosts if h in sys.modules]
for host in hosts:
    sys.modules[host] = None  # as if not installed
for module, extra in (("lightning", "lightning"), ("huggingface", "huggingface"),
                      ("keras", "keras")):
    try:
        __import__("metricstream." + module)
    except ImportError as error:
        assert f'pip install "metricstream[{extra}]"' in str(error), error
    else:
        raise AssertionError(module)
from metricstream.exactly_once import UnpaddedDistributedSampler
try:
    list(UnpaddedDistributedSampler(range(3), 2, 0, shuffle=True))
except ImportError as error:
    assert 'pip install "metricstream[torch]"' in str(error), error
else:
    raise AssertionError("exactly_once")
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def test_a_group_summary_leaves_no_member_out_and_scalars_are_one_flat_dict():
    import warnings

    from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator

    y = np.array([0, 1, 2, 1, 0])
    probabilities = np.array(
        [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3], [0.5, 0.4, 0.1]]
    )
    group = AccumulatorGroup(
        labels=ConfusionAccumulator(3), scores=ScoreAccumulator("multiclass", 3)
    )
    group["labels"].update(y, probabilities.argmax(axis=1))
    group["scores"].update(y, probabilities)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = group.summary()
        flat = group.scalars("val/")
        member = group["scores"].scalars("val/scores/")
    assert set(summary) == {"labels", "scores"}  # the score member is no longer left out
    assert all(isinstance(value, float) for value in flat.values())
    assert flat["val/labels/accuracy"] == 1.0
    assert {key: flat[key] for key in member} == member  # a member's own keys, prefixed alike
