"""metricstream.lightning against the real Lightning Trainer (CPU; DDP on 2 gloo processes).

The DDP test runs this file as a script (Lightning's "ddp" strategy starts the second rank by
running the same command again), writes what each rank logged and counted to JSON, and checks
it here against scikit-learn on the whole validation set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="metricstream.lightning needs PyTorch")
pl = pytest.importorskip("lightning.pytorch", reason="metricstream.lightning needs lightning")
import torch  # noqa: E402
from sklearn import metrics as skm  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator  # noqa: E402
from metricstream.lightning import MetricsCallback, TorchmetricsView  # noqa: E402

K = 3
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "reduce",
    "gather",
    "scatter",
)


class Indexed(Dataset):
    """Synthetic features with labels; each item carries its index so that tests can check."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, K, (n,), generator=g)
        self.x = torch.randn(n, 4, generator=g) + self.y[:, None].float()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


def make_metrics() -> AccumulatorGroup:
    return AccumulatorGroup(
        labels=ConfusionAccumulator(K), scores=ScoreAccumulator("multiclass", K)
    )


class Model(pl.LightningModule):
    def __init__(self, record: bool = False, view: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(4, K)
        self.record = record
        self.seen: list[tuple[int, list[float], int]] = []
        self.step_collectives: list[int] = []
        self.view = TorchmetricsView(ConfusionAccumulator(K), "f1_macro") if view else None

    def forward(self, x):
        return self.net(x)

    def _probs(self, x):
        # float16-representable probabilities: every score is its bin's value, so AUROC is exact
        return torch.softmax(self(x), dim=1).half().float()

    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        return {
            "loss": loss,
            "y_true": y,
            "y_pred": torch.softmax(logits.detach(), 1).half().float(),
        }

    def validation_step(self, batch, batch_idx):
        x, y, index = batch
        probs = self._probs(x)
        if self.record:
            for i, p, t in zip(index.tolist(), probs.tolist(), y.tolist(), strict=True):
                self.seen.append((i, p, t))
        if self.view is not None:
            self.view.update(probs, y)
            self.log("val/view_f1", self.view, on_epoch=True, on_step=False)
        return {"y_true": y, "y_pred": probs}

    test_step = validation_step

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _environment():
    # Named, so that Lightning does not probe the others (its MPI probe loads mpi4py, which
    # fails where mpi4py is installed without an MPI library).
    from lightning.fabric.plugins.environments import LightningEnvironment

    return LightningEnvironment()


def _trainer(tmp: Path, callbacks, **kwargs) -> pl.Trainer:
    options = dict(
        plugins=[_environment()],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp),
    )
    options.update(kwargs)
    return pl.Trainer(callbacks=callbacks, **options)


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
    data = Indexed(37, seed=1)
    model = Model(record=True, view=True)
    callback = MetricsCallback(make_metrics)
    trainer = _trainer(tmp_path, [callback])
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
    class Bare(Model):
        def validation_step(self, batch, batch_idx):
            return self(batch[0])

    trainer = _trainer(tmp_path, [MetricsCallback(make_metrics)])
    with pytest.raises(TypeError, match="the step returned a Tensor; return a dict with 'y_true'"):
        trainer.validate(Bare(), DataLoader(Indexed(5, 0), batch_size=4), verbose=False)
    with pytest.raises(TypeError, match="`metrics` must be an accumulator"):
        MetricsCallback(lambda: 3)  # type: ignore[arg-type,return-value]


class ResumableLoader:
    """A DataLoader that Lightning can resume mid-epoch (``state_dict``/``load_state_dict``)."""

    def __init__(self, dataset: Dataset, batch_size: int) -> None:
        self.loader = DataLoader(dataset, batch_size=batch_size)
        self.dataset = dataset
        self.served = 0
        self.skip = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        skip, self.skip = self.skip, 0
        self.served = skip
        for i, batch in enumerate(self.loader):
            if i < skip:
                continue
            self.served = i + 1
            yield batch

    def state_dict(self):
        return {"served": self.served}

    def load_state_dict(self, state):
        self.skip = state["served"]


@pytest.mark.slow
def test_resume_mid_epoch_keeps_training_state(tmp_path):
    data, val = Indexed(40, seed=2), Indexed(11, seed=3)

    def run(**fit_kwargs):
        callback = MetricsCallback(make_metrics, train=True, scalars={"zero_division": 0.0})
        checkpoint = pl.callbacks.ModelCheckpoint(
            dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, save_on_train_epoch_end=False
        )
        trainer = _trainer(
            tmp_path,
            [callback, checkpoint],
            max_epochs=1,
            enable_checkpointing=True,
            num_sanity_val_steps=0,
        )
        model = Model()
        trainer.fit(model, ResumableLoader(data, 4), DataLoader(val, batch_size=4), **fit_kwargs)
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


# ----------------------------------------------------------------------------- DDP, 2 ranks
def _count_collectives(counter: dict[str, int]) -> None:
    import torch.distributed as dist

    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def wrapped(*args, _original=original, _name=name, **kwargs):
            counter[_name] = counter.get(_name, 0) + 1
            return _original(*args, **kwargs)

        setattr(dist, name, wrapped)


class Counting(pl.Callback):
    """Counts every torch.distributed collective between a validation epoch's start and end."""

    def __init__(self) -> None:
        self.counter: dict[str, int] = {}
        self.epochs: list[dict[str, int]] = []
        self.per_step: list[int] = []
        self._installed = False

    def on_validation_epoch_start(self, trainer, pl_module):
        if not self._installed:
            _count_collectives(self.counter)
            self._installed = True
        self.counter.clear()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dl=0):
        self.per_step.append(sum(self.counter.values()))

    def on_validation_epoch_end(self, trainer, pl_module):
        # runs after MetricsCallback (callbacks run in order): its sync is counted
        self.epochs.append(dict(self.counter))


def _ddp_main(out: str) -> None:
    data = Indexed(53, seed=5)  # 53 % 2 == 1: rank 1 gets one padded duplicate
    model = Model(record=True)
    callback = MetricsCallback(make_metrics)
    counting = Counting()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        plugins=[_environment()],
        callbacks=[callback, counting],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_epochs=2,
        limit_train_batches=2,
        num_sanity_val_steps=0,
    )
    logged: list[dict[str, float]] = []

    class Keep(pl.Callback):
        def on_validation_end(self, trainer, pl_module):
            logged.append({k: float(v) for k, v in trainer.callback_metrics.items()})

    trainer.callbacks.append(Keep())
    trainer.fit(model, DataLoader(data, batch_size=5), DataLoader(data, batch_size=4))
    rank = trainer.global_rank
    record = {
        "logged": logged,
        "seen": model.seen,
        "collectives": counting.epochs,
        "per_step": counting.per_step,
        "sampler": type(trainer.val_dataloaders.sampler).__name__,
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))


@pytest.mark.slow
def test_ddp_two_ranks_logs_the_full_validation_set_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "ddp", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sampler"] == "DistributedSampler"
    data = Indexed(53, seed=5)
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


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "ddp":
    _ddp_main(sys.argv[2])
