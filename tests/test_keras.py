"""metricstream.keras: ConfusionMetrics on the torch backend in-process, and model.fit/evaluate
with jit_compile=True on the JAX and torch backends in subprocesses (the backend is fixed when
Keras is first imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
from sklearn import metrics as skm  # noqa: E402

import metricstream as ms  # noqa: E402

# Keras takes seconds to import, and every test worker collects every module: it is imported
# when a test of this module first runs (the child processes below import it themselves).
keras: Any = None
ConfusionMetrics: Any = None


@pytest.fixture(autouse=True, scope="module")
def _keras() -> None:
    global keras, ConfusionMetrics
    keras = pytest.importorskip("keras", reason="metricstream.keras needs Keras 3")
    from metricstream.keras import ConfusionMetrics as metrics

    ConfusionMetrics = metrics


K = 4


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    logits = rng.normal(size=(n, K)).astype("float32") + 1.5 * np.eye(K, dtype="float32")[y]
    return y, logits


def test_eager_equals_sklearn_and_hands_over_exact_counts():
    y, logits = _data(301, 0)
    y[:5] = 3  # with the ignored label, too
    metric = ConfusionMetrics(K + 1, ignore_index=-1, name="cm")
    y_ignored = y.copy()
    y_ignored[-7:] = -1
    scores = np.concatenate([logits, np.full((len(y), 1), -9.0, "float32")], axis=1)
    for chunk in np.array_split(np.arange(len(y)), 4):
        metric.update_state(y_ignored[chunk], scores[chunk])
    keep = y_ignored != -1
    pred = scores.argmax(1)
    want = skm.confusion_matrix(y[keep], pred[keep], labels=range(K + 1))
    assert np.array_equal(metric.counts(), want)
    result = {k: float(v) for k, v in metric.result().items()}
    assert result["cm_accuracy"] == pytest.approx(skm.accuracy_score(y[keep], pred[keep]), 1e-6)
    f1 = skm.f1_score(y[keep], pred[keep], average="macro")
    assert result["cm_f1_macro"] == pytest.approx(f1, rel=1e-6)  # float32, present classes
    exact = metric.scalars()
    assert exact["cm_f1_macro"] == f1  # float64 from the exact counts
    assert exact["cm_precision_weighted"] == pytest.approx(
        skm.precision_score(y[keep], pred[keep], average="weighted"), rel=1e-15
    )
    metric.reset_state()
    assert metric.counts().sum() == 0


def test_binary_one_hot_and_whole_weights():
    metric = ConfusionMetrics(2, threshold=0.5)
    metric.update_state(np.array([[0], [1], [1], [0]]), np.array([[0.2], [0.5], [0.4], [0.9]]))
    assert metric.counts().tolist() == [[1, 1], [1, 1]]  # score >= threshold is class 1
    one_hot = ConfusionMetrics(3)
    one_hot.update_state(np.eye(3)[[0, 2, 1]], np.eye(3)[[0, 2, 2]], np.array([2.0, 1.0, 5.0]))
    assert one_hot.counts().tolist() == [[2, 0, 0], [0, 0, 5], [0, 0, 1]]


def test_counters_pass_2_24_and_2_31_without_sticking_or_wrapping():
    # Whole sample weights make huge counts cheap: 300 samples of weight 2**24 - 1 per step.
    metric = ConfusionMetrics(2)
    y = np.repeat([0, 1], [200, 100])
    p = np.eye(2)[y]
    w = np.full(300, 2.0**24 - 1)
    steps = 3  # cell (0, 0): 600 * (2**24 - 1) ~ 1.0e10 > 2**33, carried across steps
    for _ in range(steps):
        metric.update_state(y, p, w)
    metric.update_state(y[:1], p[:1])  # and one more: a float32 counter would not move
    counts = metric.counts()
    assert counts[0, 0] == 200 * steps * (2**24 - 1) + 1 > 2**33
    assert counts[1, 1] == 100 * steps * (2**24 - 1) > 2**32
    assert counts[0, 1] == counts[1, 0] == 0
    assert metric.to_accumulator().num_samples == 300 * steps * (2**24 - 1) + 1
    # the float32 result is close, not stuck
    assert float(metric.result()["confusion_num_samples"]) == pytest.approx(counts.sum(), 1e-6)


def test_invalid_inputs_are_flagged_not_counted():
    metric = ConfusionMetrics(3)
    metric.update_state([0, 5, 1], [[1.0, 0, 0], [0, 1.0, 0], [0, 1.0, 0]])
    metric.update_state([0], [[1.0, 0, 0]], sample_weight=[0.5])
    assert np.isnan(float(metric.result()["confusion_accuracy"]))
    with pytest.raises(ValueError, match="2 samples had a label outside \\[0, 3\\)"):
        metric.counts()
    with pytest.raises(ValueError, match="`num_classes` must be in \\[2, 46340\\], got 1"):
        ConfusionMetrics(1)
    with pytest.raises(ValueError, match="`ignore_index` is 2, a class of the 3"):
        ConfusionMetrics(3, ignore_index=2)


# ------------------------------------------------------------------ fit/evaluate, per backend
def _child(backend: str, out: str) -> None:
    import keras

    from metricstream.keras import ConfusionMetrics

    assert keras.backend.backend() == backend
    if backend == "torch":
        # jit_compile=True is torch.compile here: dynamo traces update_state; the inductor C++
        # code generation after it takes minutes on a small CPU, so this run lowers the traced
        # graph with aot_eager instead (the same graph capture, no C++ compiler).
        import functools

        import torch

        torch.compile = functools.partial(torch.compile, backend="aot_eager")
    y, logits = _data(517, 1)
    x = logits
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((K,)), keras.layers.Dense(K)])
    metric = ConfusionMetrics(K, name="cm")
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[metric],
        jit_compile=True,
    )
    # Each batch shape is a trace of its own under torch.compile (minutes of dynamo on a small
    # CPU): there, batches of one shape (517 = 11 x 47); JAX also meets a ragged last batch.
    ragged = backend != "torch"
    rows = 300 if ragged else 256
    model.fit(x[:rows], y[:rows], batch_size=64, epochs=1, verbose=0)
    logged = model.evaluate(x, y, batch_size=50 if ragged else 47, verbose=0, return_dict=True)
    pred = np.asarray(model.predict(x, batch_size=517, verbose=0)).argmax(1)
    counts = metric.counts()  # the object given to compile() holds the evaluation's counts
    big = ConfusionMetrics(2)  # past 2**31 on this backend's int32 words
    for _ in range(3):
        big.update_state(
            np.zeros(200, "int32"), np.zeros((200, 2), "float32") + [1, 0], [2**24 - 1] * 200
        )
    Path(out).write_text(
        json.dumps(
            {
                "logged": {k: float(v) for k, v in logged.items()},
                "pred": pred.tolist(),
                "counts": counts.tolist(),
                "big": int(big.counts()[0, 0]),
            }
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fit_evaluate_jit_compile_equals_sklearn(backend, tmp_path):
    if backend == "jax":
        pytest.importorskip("jax", reason="the JAX backend needs jax")
    out = tmp_path / "out.json"
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, __file__, "child", backend, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    record = json.loads(out.read_text())
    y, _ = _data(517, 1)
    pred = np.array(record["pred"])
    assert np.array_equal(record["counts"], skm.confusion_matrix(y, pred, labels=range(K)))
    logged = record["logged"]
    assert logged["cm_accuracy"] == pytest.approx(skm.accuracy_score(y, pred), rel=1e-6)
    assert logged["cm_f1_macro"] == pytest.approx(skm.f1_score(y, pred, average="macro"), 1e-6)
    assert logged["cm_num_samples"] == 517
    assert record["big"] == 600 * (2**24 - 1)


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "child":
    _child(sys.argv[2], sys.argv[3])


def test_binary_thresholds_are_probabilities_and_logits_are_declared() -> None:
    """As ConfusionAccumulator: a probability outside [0, 1] is an invalid sample unless
    ``logits=True``, which decides as ``sigmoid(logit) >= threshold`` exactly."""
    probabilities = np.array([0.2, 0.9, 0.6, 0.3, 0.5], dtype=np.float32)
    truth = np.array([0, 1, 1, 0, 1])
    logits = np.log(probabilities / (1 - probabilities)).astype(np.float32)
    reference = ms.ConfusionAccumulator(2, threshold=0.7, logits=True)
    reference.update(truth, logits)
    metric = ConfusionMetrics(2, threshold=0.7, logits=True)
    metric.update_state(truth, logits)
    assert metric.counts().tolist() == reference.matrix.tolist()
    assert metric.get_config()["logits"] is True
    plain = ConfusionMetrics(2, threshold=0.5)
    plain.update_state(truth, logits)  # logits where probabilities were declared
    with pytest.raises(ValueError, match="logits=True"):
        plain.counts()
    with pytest.raises(ValueError, match="probability in"):
        ConfusionMetrics(2, threshold=0.0 - 1.0)
