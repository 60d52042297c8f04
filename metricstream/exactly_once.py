"""Exactly-once distributed evaluation: count every sample once, not the padding.

``torch.utils.data.DistributedSampler`` (``drop_last=False``, the default and what Lightning
puts under every distributed evaluation loader) pads the index list with repeats of its first
indices until it divides by the world size ``W``, so ``len(dataset) % W`` ranks see one sample
twice and every metric library counts it twice. Which samples are padding follows from the
sampler alone: rank ``r``'s ``j``-th sample sits at position ``r + j*W`` of the padded list, and
is padding iff that position is ``>= len(dataset)``. Padding therefore only ever ends a rank's
stream (at most one sample per rank), so no sample ids and no gather are needed:

* :class:`PaddingGuard` counts the samples a rank has seen and says how many of the next batch
  are real (``guard.trim(y_true, y_pred)`` cuts the batch to them);
* :class:`UnpaddedDistributedSampler` hands out every index exactly once (rank ``r`` gets
  ``r, r+W, r+2W, ... < len(dataset)``), with no padding at all. Ranks may then run different
  numbers of batches; that is safe with metricstream because nothing is synchronised per batch,
  only once at the end (:func:`metricstream.distributed.all_reduce`), which a rank with zero
  batches joins all the same.

Either gives, after the one sync, the state of one process counting the dataset once.
PyTorch is imported on first use (``pip install "metricstream[torch]"``).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["PaddingGuard", "UnpaddedDistributedSampler", "padded_sampler_layout"]

INSTALL_HINT = 'pip install "metricstream[torch]"'


def padded_sampler_layout(sampler: Any) -> tuple[int, int, int, int]:
    """``(dataset_len, num_replicas, rank, real)`` of a ``DistributedSampler``.

    ``real`` is how many of this rank's ``sampler.num_samples`` samples are not padding:
    ``ceil((dataset_len - rank) / num_replicas)`` (rank ``r``'s ``j``-th sample is global
    position ``r + j*W``; padding iff ``>= dataset_len``), never below 0.

    Accepts the sampler, a ``DataLoader`` (its ``sampler``, or its ``batch_sampler.sampler``)
    or anything with ``dataset``, ``num_replicas``, ``rank`` and ``num_samples`` attributes.

    Raises:
        TypeError: no distributed sampler can be found in ``sampler``.
        ValueError: the sampler drops the tail (``drop_last=True``): those samples are never
            seen, so no guard can make the evaluation exact.
    """
    sampler = _find_sampler(sampler)
    dataset_len = len(sampler.dataset)
    world, rank = int(sampler.num_replicas), int(sampler.rank)
    if getattr(sampler, "drop_last", False) and dataset_len % world:
        raise ValueError(
            f"the sampler has drop_last=True: {dataset_len % world} of the {dataset_len} samples "
            f"are never evaluated on any of the {world} ranks. Use drop_last=False (the guard "
            f"then leaves out the padding) or UnpaddedDistributedSampler."
        )
    real = max(0, math.ceil((dataset_len - rank) / world))
    return dataset_len, world, rank, min(real, int(sampler.num_samples))


class PaddingGuard:
    """How many samples of each batch a ``DistributedSampler`` really meant (not padding).

    Make one per evaluation loader and rank; call :meth:`reset` (or make a new one) at the start
    of each pass over the loader, then for every batch in order either :meth:`keep` (the number
    of real samples at the start of the batch), :meth:`mask` (a boolean mask) or :meth:`trim`
    (the arrays cut to them). Real samples are this rank's first
    ``real = ceil((len(dataset) - rank) / W)``; the rest (0 or 1 sample) are padding.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> sampler = DistributedSampler(range(7), num_replicas=2, rank=1, shuffle=False)
        >>> list(sampler)  # rank 1 of 2: positions 1, 3, 5 and 7, and 7 is past the end
        [1, 3, 5, 0]
        >>> guard = PaddingGuard(sampler)
        >>> guard.keep(2), guard.keep(2)
        (2, 1)
    """

    def __init__(self, sampler: Any) -> None:
        self.dataset_len, self.num_replicas, self.rank, self.real = padded_sampler_layout(sampler)
        self.seen = 0

    def reset(self) -> PaddingGuard:
        """Start a new pass over the loader; returns ``self``."""
        self.seen = 0
        return self

    def real_count(self, start: int, stop: int) -> int:
        """How many of this rank's samples ``start .. stop - 1`` are real (stateless)."""
        return max(0, min(stop, self.real) - max(start, 0))

    def keep(self, batch_size: int) -> int:
        """The number of real samples at the start of the next ``batch_size`` samples."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"`batch_size` must be an int, got {type(batch_size).__name__}.")
        if batch_size < 0:
            raise ValueError(f"`batch_size` must be >= 0, got {batch_size}.")
        kept = self.real_count(self.seen, self.seen + int(batch_size))
        self.seen += int(batch_size)
        return kept

    def mask(self, batch_size: int) -> np.ndarray:
        """A boolean mask of the next ``batch_size`` samples: True for real ones."""
        mask = np.zeros(int(batch_size), dtype=bool)
        mask[: self.keep(batch_size)] = True
        return mask

    def trim(self, *arrays: Any) -> tuple[Any, ...]:
        """The arrays (first axis: samples; ``None`` passes through) cut to the real samples.

        All arrays must have the same first-axis length: the batch size.
        """
        lengths = {len(array) for array in arrays if array is not None}
        if len(lengths) != 1:
            raise ValueError(
                f"the arrays given to trim() must share one batch size, got lengths "
                f"{sorted(lengths)}."
            )
        kept = self.keep(lengths.pop())
        return tuple(None if array is None else array[:kept] for array in arrays)

    @property
    def padded(self) -> int:
        """How many padding samples this rank's pass holds (0 or 1)."""
        return math.ceil(self.dataset_len / self.num_replicas) - self.real

    def __repr__(self) -> str:
        return (
            f"PaddingGuard(dataset_len={self.dataset_len}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, real={self.real}, seen={self.seen})"
        )


def _find_sampler(obj: Any) -> Any:
    candidates = [obj, getattr(obj, "sampler", None)]
    batch_sampler = getattr(obj, "batch_sampler", None)
    if batch_sampler is not None:
        candidates.append(getattr(batch_sampler, "sampler", None))
    for candidate in candidates:
        if candidate is not None and all(
            hasattr(candidate, name) for name in ("dataset", "num_replicas", "rank", "num_samples")
        ):
            return candidate
    raise TypeError(
        f"found no DistributedSampler in the {type(obj).__name__} given: pass the sampler, or "
        f"a DataLoader built with one (it needs `dataset`, `num_replicas`, `rank` and "
        f"`num_samples`)."
    )


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise ImportError(
            f"metricstream.exactly_once needs PyTorch, which is not installed; {INSTALL_HINT}."
        ) from error


class UnpaddedDistributedSampler:
    """Every index of ``dataset`` exactly once over the ranks: rank ``r`` gets ``r, r+W, ...``.

    A drop-in for ``DistributedSampler`` in evaluation loaders (``set_epoch`` included, and
    ``shuffle`` draws the same permutation on every rank from ``seed + epoch``): ranks get
    ``ceil((N - r) / W)`` samples, so their batch counts may differ by one, and a rank may get
    none. Use it only where nothing is synchronised per batch (metricstream syncs once, at the
    end); a per-step collective (``self.log(..., sync_dist=True)``, DDP's forward in
    training) would wait forever for the rank that has finished.

    Example:
        >>> [list(UnpaddedDistributedSampler(range(7), num_replicas=2, rank=r)) for r in (0, 1)]
        [[0, 2, 4, 6], [1, 3, 5]]
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
    ) -> None:
        if num_replicas is None or rank is None:
            _torch()
            dist = importlib.import_module("torch.distributed")
            if not dist.is_available() or not dist.is_initialized():
                raise ValueError(
                    "torch.distributed is not initialized: pass `num_replicas` and `rank`, or "
                    "call `torch.distributed.init_process_group(...)` first."
                )
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"`num_replicas` must be an int >= 1, got {num_replicas!r}.")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"`rank` must be an int in [0, {num_replicas}), got {rank!r}.")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.drop_last = False
        self.num_samples = len(range(rank, len(dataset), num_replicas))

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            torch = _torch()
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=generator).tolist()
            return iter(order[self.rank : n : self.num_replicas])
        return iter(range(self.rank, n, self.num_replicas))

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently in each epoch (same permutation on every rank)."""
        self.epoch = int(epoch)
