"""Shared helpers: reproducible random label streams and a scikit-learn oracle."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Case:
    """One randomized stream: labels, optional weights, and how to cut it into batches."""

    seed: int
    num_classes: int
    y_true: np.ndarray
    y_pred: np.ndarray
    weights: np.ndarray | None
    cuts: np.ndarray
    labels_subset: np.ndarray

    @property
    def id(self) -> str:
        kind = (
            "unweighted"
            if self.weights is None
            else ("intw" if self.weights.dtype.kind == "i" else "floatw")
        )
        return f"seed{self.seed}-K{self.num_classes}-N{self.y_true.size}-{kind}"

    def batches(self):
        bounds = np.concatenate([[0], self.cuts, [self.y_true.size]])
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            w = None if self.weights is None else self.weights[lo:hi]
            yield self.y_true[lo:hi], self.y_pred[lo:hi], w


def make_case(seed: int) -> Case:
    """A stream with a random K, N, skewed class frequencies and classes absent from the truth,
    the prediction or both; a third unweighted, a third integer weights, a third float weights."""
    rng = np.random.default_rng(seed)
    num_classes = int(rng.choice([1, 2, 3, 5, 8, 13, 30]))
    size = int(rng.choice([1, 5, 40, 300, 2000]))
    true_classes = rng.choice(
        num_classes, size=max(1, rng.integers(1, num_classes + 1)), replace=False
    )
    pred_classes = rng.choice(
        num_classes, size=max(1, rng.integers(1, num_classes + 1)), replace=False
    )
    p_true = rng.dirichlet(np.ones(true_classes.size) * 0.7)
    y_true = rng.choice(true_classes, size=size, p=p_true)
    # Predictions agree with the truth part of the time, so metrics are not all near chance.
    noise = rng.choice(pred_classes, size=size)
    agree = rng.random(size) < rng.uniform(0, 0.9)
    y_pred = np.where(agree, y_true, noise)
    kind = seed % 3
    weights = None
    if kind == 1:
        weights = rng.integers(0, 4, size=size)
    elif kind == 2:
        weights = rng.exponential(size=size)
        weights[rng.random(size) < 0.1] = 0.0
    if weights is not None and not weights.any():
        weights[0] = 1  # scikit-learn (the oracle) rejects all-zero weights
    num_cuts = int(rng.integers(0, 5))
    cuts = np.sort(rng.integers(0, size + 1, size=num_cuts))
    subset_size = int(rng.integers(1, num_classes + 1))
    labels_subset = rng.choice(num_classes, size=subset_size, replace=False)
    return Case(
        seed,
        num_classes,
        y_true.astype(np.int64),
        y_pred.astype(np.int64),
        weights,
        cuts,
        labels_subset,
    )
