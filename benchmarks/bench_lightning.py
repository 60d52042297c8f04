"""Benchmark: the metric overhead of a Lightning validation epoch, metricstream against
torchmetrics' ``MetricCollection`` computing the same metrics (one process, CPU).

Run from the repository root::

    python -m benchmarks.bench_lightning            # 200 batches of 256, K = 10, 7 repeats
    python -m benchmarks.bench_lightning --quick    # 40 batches, 3 repeats

Three ``trainer.validate`` runs of the same model over the same loader, timed interleaved
(:func:`benchmarks._timing.interleaved`, CPU time of the process, which
other processes on a shared machine inflate less than the wall clock):

* ``no metrics``: the loop alone (the model returns precomputed logits, so the loop is cheap
  and the metric overhead stands out);
* ``metricstream``: :class:`metricstream.lightning.MetricsCallback` over a group of a
  ``ConfusionAccumulator`` and a ``ScoreAccumulator``: update per batch, one sync and every
  scalar logged once at the epoch end (25 scalars);
* ``torchmetrics``: a ``MetricCollection`` of multiclass accuracy, macro precision, recall and
  F1, AUROC and average precision (exact, ``thresholds=None``), updated in ``validation_step``
  and logged with ``self.log_dict(collection)``, the way its documentation shows.

The overhead of each is its time minus ``no metrics``; the ratio is torchmetrics' overhead over
metricstream's. Both results are checked against each other before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

from benchmarks._timing import cpu_description, format_seconds, interleaved

K = 10


def _build(num_batches: int, batch_size: int):
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.plugins.environments import LightningEnvironment
    from torch.utils.data import DataLoader, TensorDataset

    from metricstream import AccumulatorGroup, ConfusionAccumulator, ScoreAccumulator
    from metricstream.lightning import MetricsCallback

    g = torch.Generator().manual_seed(0)
    n = num_batches * batch_size
    y = torch.randint(0, K, (n,), generator=g)
    logits = torch.randn(n, K, generator=g) + 2.0 * torch.nn.functional.one_hot(y, K)
    loader = DataLoader(TensorDataset(logits, y), batch_size=batch_size)

    class Passthrough(pl.LightningModule):
        def __init__(self, collection=None):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))
            self.collection = collection

        def validation_step(self, batch, batch_idx):
            x, target = batch
            probs = torch.softmax(x * self.scale.detach(), dim=1)
            if self.collection is not None:
                self.collection.update(probs, target)
                self.log_dict(self.collection, on_step=False, on_epoch=True)
            return {"y_true": target, "y_pred": probs}

    def trainer(callbacks):
        return pl.Trainer(
            accelerator="cpu",
            devices=1,
            plugins=[LightningEnvironment()],
            callbacks=callbacks,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )

    def group():
        return AccumulatorGroup(
            labels=ConfusionAccumulator(K), scores=ScoreAccumulator("multiclass", K)
        )

    def collection():
        from torchmetrics import MetricCollection
        from torchmetrics.classification import (
            MulticlassAccuracy,
            MulticlassAUROC,
            MulticlassAveragePrecision,
            MulticlassF1Score,
            MulticlassPrecision,
            MulticlassRecall,
        )

        return MetricCollection(
            {
                "accuracy": MulticlassAccuracy(K, average="micro"),
                "precision_macro": MulticlassPrecision(K, average="macro"),
                "recall_macro": MulticlassRecall(K, average="macro"),
                "f1_macro": MulticlassF1Score(K, average="macro"),
                "auroc_macro": MulticlassAUROC(K, average="macro", thresholds=None),
                "average_precision_macro": MulticlassAveragePrecision(
                    K, average="macro", thresholds=None
                ),
            },
            prefix="val/",
        )

    plain_model = Passthrough()
    callback = MetricsCallback(group)
    tm_model = Passthrough(collection())

    def run_none():
        return trainer([]).validate(plain_model, loader, verbose=False)

    def run_metricstream():
        return trainer([callback]).validate(plain_model, loader, verbose=False)

    def run_torchmetrics():
        return trainer([]).validate(tm_model, loader, verbose=False)

    return run_none, run_metricstream, run_torchmetrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 batches, 3 repeats")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.repeats = 40, 3
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    run_none, run_ms, run_tm = _build(args.batches, args.batch_size)

    (ms,) = run_ms()
    (tm,) = run_tm()
    for key in ("accuracy", "f1_macro", "precision_macro", "recall_macro"):
        a, b = ms[f"val/labels/{key}"], tm[f"val/{key}"]
        assert abs(a - b) < 1e-5, (key, a, b)  # torchmetrics computes in float32
    for key in ("auroc_macro", "average_precision_macro"):
        a, b = ms[f"val/scores/{key}"], tm[f"val/{key}"]
        assert abs(a - b) < 1e-3, (key, a, b)  # float32 scores, binned: close, not equal

    times = interleaved(
        {"no metrics": run_none, "metricstream": run_ms, "torchmetrics": run_tm},
        repeats=args.repeats,
        timer=time.process_time,
    )
    base = times["no metrics"]
    over_ms = max(times["metricstream"] - base, 1e-9)
    over_tm = max(times["torchmetrics"] - base, 1e-9)
    n = args.batches * args.batch_size
    print(
        f"Lightning validation epoch, {args.batches} batches x {args.batch_size} samples "
        f"({n:,}), K = {K}, one process; median CPU time of {args.repeats} interleaved repeats"
    )
    print(
        f"CPU: {platform.processor() or platform.machine()}, {cpu_description()}, "
        f"{os.cpu_count()} logical cores"
    )
    print(f"{'':<14}{'epoch':>12}{'metric overhead':>18}{'per batch':>14}")
    for name, value in times.items():
        overhead = value - base
        per_batch = overhead / args.batches if name != "no metrics" else None
        print(
            f"{name:<14}{format_seconds(value):>12}"
            f"{format_seconds(overhead) if name != 'no metrics' else '–':>18}"
            f"{format_seconds(per_batch):>14}"
        )
    print(f"torchmetrics overhead / metricstream overhead: {over_tm / over_ms:.1f}x")
    print(
        f"(metricstream logs {sum(k.startswith('val/') for k in ms)} scalars, "
        f"torchmetrics {sum(k.startswith('val/') for k in tm)})"
    )


if __name__ == "__main__":
    main()
