"""metricstream.lightning against the real Lightning Trainer (CPU; DDP on 2 gloo processes).

The DDP test runs tests/lightning_app.py as a script (Lightning's "ddp" strategy starts the
second rank by running the same command again), which writes what each rank logged and counted
to JSON; the test checks it against scikit-learn on the whole validation set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn import metrics as skm

from metricstream import AccumulatorGroup, ConfusionAccumulator

K = 3
# Lightning takes seconds to import, and every test worker collects every module: the model,
# data and trainers live in tests/lightning_app.py, imported when a test of this module runs.
app: Any = None
pl: Any = None
torch: Any = None
DataLoader: Any = None
MetricsCallback: Any = None
TorchmetricsView: Any = None


@pytest.fixture(autouse=True, scope="module")
def _lightning() -> None:
    global app, pl, torch, DataLoader, MetricsCallback, TorchmetricsView
    pytest.importorskip("torch", reason="metricstream.lightning needs PyTorch")
    pytest.importorskip("lightning.pytorch", reason="metricstream.lightning needs lightning")
    from tests import lightning_app

    app = lightning_app
    pl, torch, DataLoader = app.pl, app.torch, app.DataLoader
    MetricsCallback, TorchmetricsView = app.MetricsCallback, app.TorchmetricsView


def _reference(y: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    pred = probs.argmax(axis=1)
    return {
        "val/labels/accuracy": skm.accuracy_score(y, pred),
        "val/labels/f1_macro": skm.f1_score(y, pred, average="macro"),
        "val/labels/precision_weighted": skm.precision_score(y, pred, average="weighted"),
        "val/labels/matthews_corrcoef": skm.matthews_corrcoef(y, pred),
        # one-vs-rest, macro (sklearn's multi_class="ovr", without its sum-to-one check: the
        # probabilities are rounded to float16)
        "val/scores/auroc_macro": np.mean(
            [skm.roc_auc_score(y == c, probs[:, c]) for c in range(K)]
        ),
        "val/scores/top1_accuracy": skm.top_k_accuracy_score(y, probs, k=1, labels=range(K)),
        "val/labels/num_samples": float(len(y)),
    }


def _check(logged: dict[str, float], y: np.ndarray, probs: np.ndarray) -> None:
    for key, want in _reference(y, probs).items():
        assert logged[key] == pytest.approx(want, rel=1e-12, abs=1e-15), key


def test_validate_logs_scalars_equal_to_sklearn(tmp_path):
    data = app.Indexed(37, seed=1)
    model = app.Model(record=True, view=True)
    callback = MetricsCallback(app.make_metrics)
    trainer = app.trainer(tmp_path, [callback])
    (logged,) = trainer.validate(model, DataLoader(data, batch_size=8), verbose=False)
    index = [i for i, _, _ in model.seen]
    assert sorted(index) == list(range(37))
    probs = np.array([p for _, p, _ in model.seen])
    y = np.array([t for _, _, t in model.seen])
    _check(logged, y, probs)
    assert logged == pytest.approx(
        {**callback.results["val"], "val/view_f1": logged["val/view_f1"]}
    )
    assert logged["val/view_f1"] == pytest.approx(skm.f1_score(y, probs.argmax(1), average="macro"))
    # the state is reset after logging; the synced copy is kept for reports
    assert callback.states["val"][0]["labels"].num_samples == 0
    assert callback.synced["val"][0]["labels"].num_samples == 37


def test_torchmetrics_view_forward_keeps_the_state():
    view = TorchmetricsView(ConfusionAccumulator(K), "accuracy", scalars={"zero_division": 0.0})
    y = torch.tensor([0, 1, 2, 2])
    first = view(torch.eye(K)[[0, 1, 2, 0]], y)  # 3 of 4 right
    second = view(torch.eye(K)[[0, 1, 2, 2]], y)  # 4 of 4
    assert (float(first), float(second)) == (0.75, 1.0)
    assert float(view.compute()) == 7 / 8
    state = view.state_dict()
    restored = TorchmetricsView(ConfusionAccumulator(K), "accuracy")
    restored.load_state_dict(state)
    assert restored.acc == view.acc
    view.reset()
    assert view.acc.num_samples == 0
    with pytest.raises(ValueError, match="`key` 'f2' is not one of the scalars"):
        TorchmetricsView(ConfusionAccumulator(K), "f2")


def test_bad_step_output_is_named(tmp_path):
    class Bare(app.Model):
        def validation_step(self, batch, batch_idx):
            return self(batch[0])

    trainer = app.trainer(tmp_path, [MetricsCallback(app.make_metrics)])
    with pytest.raises(TypeError, match="the step returned a Tensor; return a dict with 'y_true'"):
        trainer.validate(Bare(), DataLoader(app.Indexed(5, 0), batch_size=4), verbose=False)
    with pytest.raises(TypeError, match="`metrics` must be an accumulator"):
        MetricsCallback(lambda: 3)  # type: ignore[arg-type,return-value]


@pytest.mark.slow
def test_resume_mid_epoch_keeps_training_state(tmp_path):
    data, val = app.Indexed(40, seed=2), app.Indexed(11, seed=3)

    def run(**fit_kwargs):
        callback = MetricsCallback(app.make_metrics, train=True, scalars={"zero_division": 0.0})
        checkpoint = pl.callbacks.ModelCheckpoint(
            dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, save_on_train_epoch_end=False
        )
        trainer = app.trainer(
            tmp_path,
            [callback, checkpoint],
            max_epochs=1,
            enable_checkpointing=True,
            num_sanity_val_steps=0,
        )
        model = app.Model()
        trainer.fit(
            model, app.ResumableLoader(data, 4), DataLoader(val, batch_size=4), **fit_kwargs
        )
        return callback, trainer

    whole, _ = run()
    checkpoints = sorted(tmp_path.glob("*step=6*.ckpt"))
    assert checkpoints, list(tmp_path.iterdir())
    state = torch.load(checkpoints[0], weights_only=True)["callbacks"]
    (saved,) = [v for k, v in state.items() if k.startswith("MetricsCallback")]
    counted = AccumulatorGroup.from_state_dict(saved["states"]["train"][0])
    assert counted["labels"].num_samples == 6 * 4  # the first six batches, mid-epoch
    resumed, _ = run(ckpt_path=str(checkpoints[0]))
    assert resumed.results["train"] == whole.results["train"]
    assert resumed.results["train"]["train/labels/num_samples"] == 40
    assert resumed.results["val"] == whole.results["val"]


@pytest.mark.slow
def test_ddp_two_ranks_logs_the_full_validation_set_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("lightning_app.py").resolve()),
            "ddp",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sampler"] == "DistributedSampler"
    data = app.Indexed(53, seed=5)
    for epoch in range(2):
        # what each rank's model predicted for each sample this epoch (weights are equal on
        # both ranks under DDP); the padded duplicate is one of them
        per_epoch = {}
        for record in ranks:
            seen = record["seen"]
            half = len(seen) // 2
            for i, p, t in seen[epoch * half : (epoch + 1) * half]:
                per_epoch.setdefault(i, (p, t))
        assert sorted(per_epoch) == list(range(53))
        probs = np.array([per_epoch[i][0] for i in range(53)])
        y = data.y.numpy()
        for record in ranks:
            _check(record["logged"][epoch], y, probs)
        assert ranks[0]["logged"][epoch] == ranks[1]["logged"][epoch]
    for record in ranks:
        # per validation epoch: 1 configuration check (all_gather) + 1 all_reduce of the int64
        # counts + 1 of the float64 sums; nothing per step
        for epoch in record["collectives"]:
            gathers = sum(v for k, v in epoch.items() if k.startswith("all_gather"))
            assert gathers == 1 and epoch.get("all_reduce", 0) <= 2, epoch
            assert sum(epoch.values()) <= 3, epoch
        assert set(record["per_step"]) == {0}
