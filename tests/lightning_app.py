"""The Lightning side of tests/test_lightning.py: a small model, its data and trainers, and the
two-rank DDP run (Lightning's "ddp" strategy starts the second rank by running this file again
with the same arguments). Kept apart so that collecting the tests does not import Lightning
(seconds, in every test worker); the tests import this module when one of them runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator
from metricstream.lightning import MetricsCallback, TorchmetricsView

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


def environment():
    # Named, so that Lightning does not probe the others (its MPI probe loads mpi4py, which
    # fails where mpi4py is installed without an MPI library).
    from lightning.fabric.plugins.environments import LightningEnvironment

    return LightningEnvironment()


def trainer(tmp: Path, callbacks, **kwargs) -> pl.Trainer:
    options = dict(
        plugins=[environment()],
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


# ----------------------------------------------------------------------------- DDP, 2 ranks
def count_collectives(counter: dict[str, int]) -> None:
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
            count_collectives(self.counter)
            self._installed = True
        self.counter.clear()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dl=0):
        self.per_step.append(sum(self.counter.values()))

    def on_validation_epoch_end(self, trainer, pl_module):
        # runs after MetricsCallback (callbacks run in order): its sync is counted
        self.epochs.append(dict(self.counter))


def ddp_main(out: str) -> None:
    data = Indexed(53, seed=5)  # 53 % 2 == 1: rank 1 gets one padded duplicate
    model = Model(record=True)
    callback = MetricsCallback(make_metrics)
    counting = Counting()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        plugins=[environment()],
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


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "ddp":
    ddp_main(sys.argv[2])
