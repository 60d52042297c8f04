"""Train a small classifier with DistributedDataParallel on 2 CPU processes (gloo), and report
metrics synced across the ranks after every epoch.

Usage: python examples/ddp_training.py [--epochs 3] [--world-size 2]

Needs ``pip install "metricstream[torch]"``. The ranks rendezvous on 127.0.0.1 (a free port).

Each rank counts only the batches it saw; ``metricstream.distributed.all_reduce`` sums the
train and validation matrices of an epoch together, as one ``AccumulatorGroup``, in one
all_reduce (after a 6-value configuration check), so every metric printed is exact over the
whole epoch. Validation shards the data without padding (``indices[rank::world]``,
uneven shards are fine), so every validation sample is counted exactly once — unlike
``DistributedSampler``, which repeats samples to even out the shards. Rank 0 checks the synced
validation matrix against one process evaluating the whole validation set.
"""

from __future__ import annotations

import argparse
import os
import socket
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

from metricstream import AccumulatorGroup, ConfusionAccumulator
from metricstream.distributed import all_reduce

CLASSES = ["walk", "run", "cycle", "swim", "rest"]
FEATURES = 16


def make_data(n: int, seed: int) -> TensorDataset:
    """Gaussian blobs, one per class, overlapping enough that the metrics are interesting."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(42).normal(scale=1.2, size=(len(CLASSES), FEATURES))
    labels = rng.integers(0, len(CLASSES), size=n)
    features = centers[labels] + rng.normal(size=(n, FEATURES))
    return TensorDataset(torch.tensor(features, dtype=torch.float32), torch.tensor(labels))


def run(rank: int, world_size: int, port: int, epochs: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=120),
    )
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts them)
    train, val = make_data(6000, seed=1), make_data(1001, seed=2)  # 1001: uneven shards
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True)
    train_loader = DataLoader(train, batch_size=64, sampler=sampler)
    val_shard = Subset(val, range(rank, len(val), world_size))
    val_loader = DataLoader(val_shard, batch_size=256)

    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, len(CLASSES)))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train_acc = ConfusionAccumulator(len(CLASSES), class_names=CLASSES)
    val_acc = ConfusionAccumulator(len(CLASSES), class_names=CLASSES)
    # Updated separately, synced together: one check and one all_reduce for both matrices.
    epoch_metrics = AccumulatorGroup(train=train_acc, val=val_acc)

    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        train_acc.reset()
        for features, labels in train_loader:
            logits = model(features)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_acc.update(labels, logits)  # CPU tensors, read without copies; argmax fused

        model.eval()
        val_acc.reset()
        with torch.no_grad():
            for features, labels in val_loader:
                val_acc.update(labels, model(features))

        # Every rank calls all_reduce; the local accumulators stay as they were (inplace=False).
        synced = all_reduce(epoch_metrics, inplace=False)
        train_global, val_global = synced["train"], synced["val"]
        if rank == 0:
            print(
                f"epoch {epoch}: train acc {train_global.accuracy():.4f} "
                f"(N={train_global.num_samples}) | val acc {val_global.accuracy():.4f}, "
                f"macro F1 {val_global.f1(average='macro'):.4f}, "
                f"kappa {val_global.cohen_kappa():.4f} (N={val_global.num_samples}; "
                f"this rank alone: N={val_acc.num_samples}, acc {val_acc.accuracy():.4f})"
            )

    if rank == 0:
        # The oracle: one process, whole validation set, same weights.
        with torch.no_grad():
            features, labels = val.tensors
            single = ConfusionAccumulator(len(CLASSES), class_names=CLASSES)
            single.update(labels, model.module(features))
        assert val_global == single, "synced metrics differ from a single-process evaluation"
        print(f"synced validation matrix == single-process evaluation of all {len(val)} samples")
        print()
        print(val_global.classification_report(digits=3))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on the loopback interface
    mp.spawn(run, args=(args.world_size, _free_port(), args.epochs), nprocs=args.world_size)


if __name__ == "__main__":
    main()
