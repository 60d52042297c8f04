"""Clustered bootstrap: B replicate confusion matrices kept while counting, for correlated data.

The read-time bootstrap of :mod:`metricstream.bootstrap` assumes independent samples. The pixels
of one image, the tokens of one document or the frames of one video are not independent: their
errors come in clumps, and an interval that treats them as independent is far too narrow (see
``docs/intervals.md``). The honest resampling unit is the *cluster* (the image, the document).

:class:`BootstrapConfusionAccumulator` implements the Poisson bootstrap by cluster (Chamandy,
Muralidharan, Najmi & Naidu 2012, "Estimating uncertainty for massive data streams"; Oza &
Russell's online bagging): besides the K×K matrix it keeps B replicate matrices, and every
cluster is added to replicate ``b`` with weight ``w ~ Poisson(1)``. The weight is a hash of
``(cluster id, b, seed)``, not a draw from a random stream, so every shard, thread and rank
computes the same weight for the same cluster without communicating, and replicates merge, sync
and serialize by summing like any other state. At the end, the spread of a metric over the B
replicate matrices estimates its sampling spread: :meth:`BootstrapConfusionAccumulator.interval`.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._inputs import THRESHOLD, as_array, prepare_batch
from ..base import Accumulator
from ..confusion._dispatch import count_batch
from ..confusion.accumulator import ConfusionAccumulator, _warn_probabilities
from ..confusion.accumulator import _upgrade_v2 as _upgrade_confusion_v2
from . import _firstuse
from . import _kernels as _k
from .resampling import MetricInterval, interval_from_replicates, undefined_interval

__all__ = ["BootstrapConfusionAccumulator", "DEFAULT_RESAMPLES", "WEIGHT_HASHES"]

WeightHash = Literal["keyed", "xor-legacy"]
#: How a cluster's weights are hashed from ``(seed, cluster, replicate)``: ``"keyed"`` (two
#: SplitMix64 rounds keyed by the seed; every new accumulator), or ``"xor-legacy"``, the hash of
#: states saved before format 2, under which cluster ``c`` with seed ``s`` got the weights of
#: cluster ``c ^ s`` with seed 0 (valid within one seed; seeds were not independent).
WEIGHT_HASHES: tuple[WeightHash, ...] = ("keyed", "xor-legacy")
#: The default B. In the coverage study of docs/intervals.md, nominal 95% percentile intervals
#: of 200 clustered images covered 92.2-92.3% with B = 100, 93.0-93.5% with 200, 93.7-93.9%
#: with 300 and 93.9-94.3% with 500 (94.4-94.5% with 1,000).
DEFAULT_RESAMPLES = 500

_INT64_MAX = int(np.iinfo(np.int64).max)
_MAX_WEIGHT = _k.MAX_POISSON1_WEIGHT
# A replicate cell is a sum of its main cell's counts times weights of at most _MAX_WEIGHT, so
# every replicate cell is at most _MAX_WEIGHT times the main matrix's, and the B replicates
# together hold at most _MAX_WEIGHT × B times its total N. Updates keep N at most
# count_limit(B) (counts: the replicates' int64 total, which merges and restores check, stays
# below 2**63) or WEIGHT_LIMIT (float weights: every replicate stays finite, with a margin of
# one more weight for rounding).
WEIGHT_LIMIT = float(np.finfo(np.float64).max) / (2 * (_MAX_WEIGHT + 1))
# A state's int64 totals must stay below this (a float64 sum is exact to 2**53 and within a
# few ulps beyond, so a margin below 2**63 keeps the true total an int64).
_TOTAL_LIMIT = 2.0**63 - 2.0**20


def count_limit(n_resamples: int) -> int:
    """The most samples an unweighted accumulator with ``n_resamples`` replicates counts:
    ``(2**63 - 2**22) // (MAX_POISSON1_WEIGHT × B + 1)`` (5.1e15 for B = 100)."""
    return (2**63 - 2**22) // (_MAX_WEIGHT * n_resamples + 1)


# Items (first-axis slices) of at least this many samples, each its own cluster, are counted
# one by one by the plain counting kernel; smaller ones go through the per-sample kernel.
ITEM_MIN_SAMPLES = 1024
# Accumulator methods that are not views of the matrix.
_NOT_VIEWS = frozenset({"from_batch", "from_matrix", "update", "bootstrap"})


def _exact_total(counts: np.ndarray) -> int:
    """The sum of non-negative int64 counts as a Python int (never wraps)."""
    if float(counts.sum(dtype=np.float64)) < 2.0**62:
        return int(counts.sum())  # no int64 sum of these can wrap
    return sum(int(v) for v in counts.reshape(-1))


def _check_restored(matrix: np.ndarray, replicates: np.ndarray) -> None:
    """Refuse a state from outside that no sequence of updates and merges can make: totals past
    int64 (or infinite), or a replicate cell above the largest weight times its main cell (the
    bound every later update relies on to keep the replicates from wrapping)."""
    integral = matrix.dtype.kind == "i"
    if integral:
        total = _exact_total(matrix)
        if total > _INT64_MAX:
            raise ValueError(
                f"state `matrix` holds {total:,} samples in all, beyond int64 (2**63 - 1): the "
                f"cells of a real state never sum past it; it is damaged or forged."
            )
        sums = replicates.sum(axis=(1, 2), dtype=np.float64)
        if (sums >= _TOTAL_LIMIT).any():
            b = int(np.argmax(sums >= _TOTAL_LIMIT))
            raise ValueError(
                f"state `replicates` holds about {sums[b]:.6g} samples in replicate {b}, beyond "
                f"int64 (2**63 - 1); it is damaged or forged."
            )
        # r <= W m  <=>  ceil(r / W) <= m, computed without overflow.
        over = -(-replicates // _MAX_WEIGHT) > matrix
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            finite = bool(np.isfinite(matrix.sum())) and bool(
                np.isfinite(replicates.sum(axis=(1, 2))).all()
            )
            over = replicates > (_MAX_WEIGHT + 1) * matrix
        if not finite:
            raise ValueError(
                "the state's weights sum to infinity (in `matrix` or in a replicate); a real "
                "state never does; it is damaged or forged."
            )
    if over.any():
        b, i, j = (int(v) for v in np.argwhere(over)[0])
        raise ValueError(
            f"state `replicates` holds {replicates[b, i, j].item()!r} at ({b}, {i}, {j}), more "
            f"than {_MAX_WEIGHT} (the largest weight) times the matrix's cell ({i}, {j}) = "
            f"{matrix[i, j].item()!r}; no stream makes that state: it is damaged or forged."
        )


def _upgrade_format_1(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: ``n_replicates`` is renamed ``n_resamples``; the replicates were drawn
    with the earlier hash, which the state keeps using (``weight_hash="xor-legacy"``)."""
    config = dict(state["config"])
    config["n_resamples"] = config.pop("n_replicates")
    config["weight_hash"] = "xor-legacy"
    return {**state, "config": config, "format": 2}


def _upgrade_format_2(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2 -> 3: the threshold rule of :class:`ConfusionAccumulator` (a threshold of 0.0
    or outside [0, 1] compared logits, and becomes ``logits=True`` with its sigmoid)."""
    upgraded = _upgrade_confusion_v2(state)
    return {**upgraded, "format": 3}


@dataclass(slots=True)
class _ClusterBatch:
    """One update, validated: its K×K counts, and how its samples map to clusters."""

    local: np.ndarray  # the batch's own K×K counts (what the main matrix gets)
    key: int | None  # the cluster key when the whole batch is one cluster
    y_true: np.ndarray | None = None  # flat labels, when clusters are given per sample
    y_pred: np.ndarray | None = None
    weights: np.ndarray | None = None
    cluster_ids: np.ndarray | None = None
    run_length: int = 1
    items: list[tuple[int, np.ndarray]] | None = None  # (cluster key, its K×K counts)


class BootstrapConfusionAccumulator(Accumulator):
    """A confusion matrix plus ``n_resamples`` Poisson-bootstrap replicates of it, by cluster.

    Each update adds its samples to ``matrix`` and, for every replicate ``b``, adds each cluster
    ``c``'s counts times ``w(c, b) ~ Poisson(1)`` to ``replicates[b]``, where ``w`` is a keyed
    hash of ``(seed, c, b)`` (see :mod:`metricstream.bootstrap._kernels`). A cluster is

    * the whole ``update`` call when ``cluster_ids`` is None (one image per call, say), with a
      fresh random key (replicates are then not bit-reproducible between runs, only
      statistically equivalent; pass ids to fix them);
    * ``cluster_ids`` itself when it is one integer (e.g. the image's dataset index);
    * ``cluster_ids[i]`` for item ``i`` of the batch's first axis (a ``(N,)`` id array for
      ``(N, H, W)`` masks), or for each sample (an id array of ``y_true``'s shape, e.g. the
      document of each token).

    A cluster may span several updates, shards and ranks: wherever its samples are counted they
    get the same weights, so the state is the same however the stream is split, merged or
    synced. Give distinct clusters distinct ids (the id is hashed with the seed; ids are
    integers, compared exactly).

    State: ``{"matrix": (K, K), "replicates": (B, K, K)}``, int64 (float64 when ``weighted``),
    i.e. ``(B + 1) × K² × 8`` bytes: 348 KiB for K = 21, B = 100; 84 MiB for K = 1000, B = 10.
    Cost per update: the plain count of the batch, plus ``B ×`` (distinct cells of each
    cluster) multiply-adds; for one cluster per call (a 256×256 mask, B = 100) that is well
    under the cost of counting the mask once more.

    Views: every metric method of :class:`~metricstream.ConfusionAccumulator` (``f1``,
    ``miou``, ``summary``, ...) on the main matrix, :meth:`confusion` (that accumulator), and
    :meth:`interval` from the replicates (``metricstream.bootstrap.bootstrap(acc, ...)`` gives
    the same interval). Before any update, views follow the confusion accumulator's rule and
    intervals are NaN with an ``UndefinedMetricWarning``.

    Invariants (tested): the main matrix equals a ``ConfusionAccumulator`` fed the same
    batches (float weights: up to rounding); any split into batches, shards or merge order
    gives the same state; a failed update leaves the state bit-identical; counts never wrap
    and weighted sums never become infinite: an update that would take the matrix past
    :func:`count_limit` samples (5.1e15 for B = 100), or its weights past ``WEIGHT_LIMIT``,
    raises; a restored state is checked to be one that counting can make.

    Saved states: format 3 (format 2 loads with the threshold rule of
    :class:`~metricstream.ConfusionAccumulator`). A state saved by format 1 loads with
    ``weight_hash="xor-legacy"``: its replicates were drawn with the earlier hash, under which
    cluster ``c`` with seed ``s`` got the weights of cluster ``c ^ s`` with seed 0. Within the
    one accumulator those are valid bootstrap weights, so its intervals mean what they meant;
    it keeps counting with that hash (a cluster spanning the checkpoint keeps its weights) and
    merges only with states of the same hash. Runs with different seeds under it were not
    independent resamples.

    Args:
        num_classes: K.
        n_resamples: B, at least 2 (default 500: fewer replicates under-cover 95% percentile
            intervals; see ``docs/intervals.md``). Memory and update cost grow with B.
        seed: an int (default 0); shards that merge must share it (it is part of the
            configuration).
        class_names, ignore_index, weighted, class_axis, threshold, logits: as
            :class:`~metricstream.ConfusionAccumulator`.
        weight_hash: ``"keyed"`` (default); ``"xor-legacy"`` only describes states of format
            1 (see above).
        n_replicates: deprecated name of ``n_resamples`` (warns).

    Example:
        >>> import numpy as np
        >>> acc = BootstrapConfusionAccumulator(3, n_resamples=200, seed=0)
        >>> rng = np.random.default_rng(0)
        >>> for image in range(40):                       # one cluster per update call
        ...     truth = rng.integers(0, 3, size=(16, 16))
        ...     noisy = np.where(rng.random((16, 16)) < 0.8, truth, rng.integers(0, 3))
        ...     _ = acc.update(truth, noisy, cluster_ids=image)
        >>> result = acc.interval("miou")
        >>> bool(result.low < acc.miou() < result.high)
        True
    """

    #: 2: the configuration says ``n_resamples`` (was ``n_replicates``) and ``weight_hash``;
    #: a format-1 state is the ``"xor-legacy"`` hash (see :data:`WEIGHT_HASHES`).
    state_format = 3
    state_upgrades = {1: _upgrade_format_1, 2: _upgrade_format_2}

    def __init__(
        self,
        num_classes: int,
        n_resamples: int | None = None,
        seed: int = 0,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        *,
        weighted: bool = False,
        class_axis: int = 1,
        threshold: float | None = None,
        logits: bool = False,
        weight_hash: WeightHash = "keyed",
        n_replicates: int | None = None,
    ) -> None:
        # The confusion accumulator validates the shared settings (and words the errors).
        prototype = ConfusionAccumulator(
            num_classes,
            class_names,
            ignore_index,
            weighted=weighted,
            class_axis=class_axis,
            threshold=threshold,
            logits=logits,
        )
        if n_replicates is not None:
            if n_resamples is not None:
                raise TypeError(
                    "give `n_resamples` only (`n_replicates` is its deprecated name), not both."
                )
            warnings.warn(
                "`n_replicates` is deprecated; the number of replicates is `n_resamples` "
                "everywhere (bootstrap(), interval_report(), MetricInterval).",
                DeprecationWarning,
                stacklevel=2,
            )
            n_resamples = n_replicates
        if n_resamples is None:
            n_resamples = DEFAULT_RESAMPLES
        if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)):
            raise TypeError(f"`n_resamples` must be an int, got {n_resamples!r}.")
        if n_resamples < 2:
            raise ValueError(f"`n_resamples` must be at least 2, got {n_resamples}.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"`seed` must be an int, got {seed!r}.")
        if not 0 <= seed < 2**64:
            raise ValueError(f"`seed` must be in [0, 2**64), got {seed}.")
        if weight_hash not in WEIGHT_HASHES:
            raise ValueError(
                f"`weight_hash` must be one of {list(WEIGHT_HASHES)}, got {weight_hash!r}."
            )
        self._num_classes = prototype.num_classes
        self._class_names = prototype.class_names
        self._ignore_index = prototype.ignore_index
        self._weighted = prototype.weighted
        self._class_axis = prototype.class_axis
        self._threshold = prototype.threshold
        self._logits = prototype.logits
        # What binary scores are compared with, and the range check the kernel runs on them.
        self._cut = prototype._cut
        self._score_rule = prototype._score_rule
        self._n_resamples = int(n_resamples)
        self._seed = int(seed)
        self._weight_hash: WeightHash = weight_hash
        self._legacy = weight_hash == "xor-legacy"
        self._keys = _k.seed_keys(self._seed, self._legacy)
        k = self._num_classes
        dtype = np.float64 if self._weighted else np.int64
        super().__init__(
            {"matrix": ((k, k), dtype), "replicates": ((self._n_resamples, k, k), dtype)}
        )

    @classmethod
    def _restore(
        cls, config: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> BootstrapConfusionAccumulator:
        new = super()._restore(config, arrays)
        _check_restored(new._arrays["matrix"], new._arrays["replicates"])
        return new

    def _init_runtime(self) -> None:
        super()._init_runtime()

    def config(self) -> dict[str, Any]:
        """Everything two shards must share to merge: the confusion settings, B and the seed."""
        return {
            "num_classes": self._num_classes,
            "n_resamples": self._n_resamples,
            "seed": self._seed,
            "class_names": None if self._class_names is None else list(self._class_names),
            "ignore_index": self._ignore_index,
            "weighted": self._weighted,
            "class_axis": self._class_axis,
            "threshold": self._threshold,
            "logits": self._logits,
            "weight_hash": self._weight_hash,
        }

    # ------------------------------------------------------------------ configuration
    @property
    def num_classes(self) -> int:
        """K, the number of classes."""
        return self._num_classes

    @property
    def n_resamples(self) -> int:
        """B, the number of replicate matrices."""
        return self._n_resamples

    @property
    def n_replicates(self) -> int:
        """Deprecated name of :attr:`n_resamples`."""
        warnings.warn(
            "`n_replicates` is deprecated; use `n_resamples`.", DeprecationWarning, stacklevel=2
        )
        return self._n_resamples

    @property
    def seed(self) -> int:
        """The seed hashed into every cluster's weights."""
        return self._seed

    @property
    def weight_hash(self) -> WeightHash:
        """How cluster weights are hashed: ``"keyed"``, or ``"xor-legacy"`` for old states."""
        return self._weight_hash

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """The class names, or None."""
        return self._class_names

    @property
    def ignore_index(self) -> int | None:
        """The true label whose samples are skipped, or None."""
        return self._ignore_index

    @property
    def weighted(self) -> bool:
        """Whether counts are float64 weights."""
        return self._weighted

    @property
    def threshold(self) -> float | None:
        """The probability at which binary scores count as class 1, or None."""
        return self._threshold

    @property
    def logits(self) -> bool:
        """Whether binary scores are logits (compared as ``sigmoid(score) >= threshold``)."""
        return self._logits

    @property
    def state_nbytes(self) -> int:
        """Bytes of state: ``(B + 1) × K² × 8``."""
        return (self._n_resamples + 1) * self._num_classes**2 * 8

    # ------------------------------------------------------------------ counting
    def update(
        self, y_true: Any, y_pred: Any, weights: Any = None, *, cluster_ids: Any = None
    ) -> BootstrapConfusionAccumulator:
        """Count a batch into the matrix and, cluster by cluster, into the replicates.

        Args:
            y_true, y_pred, weights: as :meth:`ConfusionAccumulator.update`.
            cluster_ids: None (this call is one cluster), one integer (the cluster of the whole
                batch), integers of length ``y_true.shape[0]`` (one cluster per item of the
                first axis) or of ``y_true``'s shape (one per sample).

        Raises:
            TypeError / ValueError: as :meth:`ConfusionAccumulator.update`, or bad
                ``cluster_ids`` (named, with its shape or value); nothing is counted.
        """
        return super().update(y_true, y_pred, weights, cluster_ids=cluster_ids)

    def _prepare(
        self, y_true: Any, y_pred: Any, weights: Any = None, *, cluster_ids: Any = None
    ) -> _ClusterBatch:
        ids = None if cluster_ids is None else as_array(cluster_ids, "cluster_ids")
        if ids is not None and ids.dtype.kind not in "iu":
            raise TypeError(f"`cluster_ids` must hold integers, got dtype {ids.dtype}.")
        if ids is not None and ids.ndim > 0:
            items = self._prepare_items(y_true, y_pred, weights, ids)
            if items is not None:
                return items
            y_true, y_pred = self._labels_for_clusters(y_true, y_pred)
        batch = self._batch(y_true, y_pred, weights, self._class_axis)
        dtype = np.float64 if self._weighted else np.int64
        local: np.ndarray = np.zeros((self._num_classes, self._num_classes), dtype=dtype)
        notes: list[int] | None = [] if self._logits and batch.kind == THRESHOLD else None
        # Validates labels and weights; `local` is new, its total 0 (lets the twin count).
        count_batch(local, batch, self._ignore_index, 0.0, notes)
        if notes:  # logits that all lie in [0, 1]: counted, with the confusion family's warning
            _warn_probabilities()
        if ids is None:
            return _ClusterBatch(local, secrets.randbits(64))
        if ids.ndim == 0:
            return _ClusterBatch(local, int(ids.astype(np.uint64)))
        shape = batch.label_shape
        if ids.shape == shape:
            flat_ids = ids.reshape(-1, order=batch.order)
            run = 1
        elif ids.ndim == 1 and len(shape) >= 1 and ids.shape[0] == shape[0]:
            if batch.order == "C" or len(shape) == 1:
                flat_ids, run = ids, max(1, int(np.prod(shape[1:], dtype=np.int64)))
            else:
                expanded = np.broadcast_to(ids.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
                flat_ids, run = expanded.reshape(-1, order="F"), 1
        else:
            raise ValueError(
                f"`cluster_ids` has shape {ids.shape}, but `y_true` has shape {shape}; give one "
                f"id per sample (shape {shape}), one per item of the first axis "
                f"({shape[:1]}), one integer, or None (the call is one cluster)."
            )
        return _ClusterBatch(
            local,
            None,
            batch.y_true,
            batch.y_pred,
            batch.weights,
            np.ascontiguousarray(flat_ids, dtype=np.int64),
            run,
        )

    def _batch(self, y_true: Any, y_pred: Any, weights: Any, class_axis: int) -> Any:
        if self._cut is None:
            return prepare_batch(y_true, y_pred, weights, self._num_classes, class_axis)
        batch = prepare_batch(
            y_true, y_pred, weights, self._num_classes, class_axis, threshold=self._cut
        )
        if batch.kind == THRESHOLD:  # binary scores: the kernel checks their range as it counts
            batch.flags |= self._score_rule
        return batch

    def _prepare_items(
        self, y_true: Any, y_pred: Any, weights: Any, ids: np.ndarray
    ) -> _ClusterBatch | None:
        """One cluster per item of the first axis of large items (images): each item is
        counted by the plain kernel into its own K×K matrix. None when this does not apply."""
        true_array = as_array(y_true, "y_true")
        if not (
            ids.ndim == 1
            and true_array.ndim >= 2
            and ids.shape[0] == true_array.shape[0]
            and true_array.shape[0] > 0
            and true_array[0].size >= ITEM_MIN_SAMPLES
        ):
            return None
        pred_array = as_array(y_pred, "y_pred")
        weight_array = None if weights is None else as_array(weights, "weights")
        item_axis = self._class_axis
        if pred_array.ndim == true_array.ndim + 1:
            axis = self._class_axis % pred_array.ndim
            if axis == 0:
                return None  # classes on the item axis: items cannot be sliced off
            item_axis = axis - 1
        dtype = np.float64 if self._weighted else np.int64
        local: np.ndarray = np.zeros((self._num_classes, self._num_classes), dtype=dtype)
        by_key: dict[int, np.ndarray] = {}
        try:
            for item in range(true_array.shape[0]):
                counts: np.ndarray = np.zeros_like(local)
                count_batch(
                    counts,
                    self._batch(
                        true_array[item],
                        pred_array[item],
                        None if weight_array is None else weight_array[item],
                        item_axis,
                    ),
                    self._ignore_index,
                    0.0,  # `counts` is new (lets the twin count it)
                )
                key = int(ids[item].astype(np.uint64))
                if key in by_key:
                    by_key[key] += counts
                else:
                    by_key[key] = counts
                if not self._weighted:
                    local += counts  # exact: the batch's counts are the sum of its items'
        except ValueError:
            # Word the error with the position in the user's whole array.
            count_batch(
                local,
                self._batch(true_array, pred_array, weight_array, self._class_axis),
                self._ignore_index,
            )
            raise
        if self._weighted:
            # The batch's float sums in the order a ConfusionAccumulator adds them (into the
            # still zero `local`).
            count_batch(
                local,
                self._batch(true_array, pred_array, weight_array, self._class_axis),
                self._ignore_index,
                0.0,
            )
        return _ClusterBatch(local, None, items=list(by_key.items()))

    def _labels_for_clusters(self, y_true: Any, y_pred: Any) -> tuple[Any, Any]:
        """Scores become predicted labels (the per-sample kernel reads labels only)."""
        true_array = as_array(y_true, "y_true")
        pred_array = as_array(y_pred, "y_pred")
        if pred_array.ndim == true_array.ndim + 1 and pred_array.dtype.kind == "f":
            if np.isnan(pred_array).any():
                raise ValueError(
                    "`y_pred` (scores) holds NaN; the predicted class of that sample is undefined."
                )
            return true_array, np.argmax(pred_array, axis=self._class_axis)
        if (
            self._threshold is not None
            and pred_array.dtype.kind == "f"
            and pred_array.size == true_array.size
        ):
            if np.isnan(pred_array).any():
                raise ValueError(
                    "`y_pred` (scores) holds NaN; the predicted class of that sample is undefined."
                )
            if not self._logits and not ((pred_array >= 0) & (pred_array <= 1)).all():
                position = int(np.flatnonzero(~((pred_array >= 0) & (pred_array <= 1)))[0])
                raise ValueError(
                    f"`y_pred` (scores) holds {pred_array.reshape(-1)[position]!r} at flat "
                    f"position {position}, outside [0, 1]: `threshold` is a probability; for "
                    f"logits pass `logits=True`."
                )
            labels = (pred_array >= self._cut).astype(np.int64)
            return true_array, labels.reshape(true_array.shape)
        return true_array, pred_array

    def _check_room(self, matrix: np.ndarray, local: np.ndarray) -> None:
        """Refuse (before anything changes) a batch that would take the main matrix's total past
        the limit that keeps every replicate in int64, or finite."""
        if matrix.dtype.kind == "i":
            total, added = _exact_total(matrix), _exact_total(local)
            limit = count_limit(self._n_resamples)
            if total + added > limit:
                raise ValueError(
                    f"this update would take the matrix to {total + added:,} samples; its "
                    f"{self._n_resamples} replicates (each sample weighted up to {_MAX_WEIGHT} "
                    f"times) keep counts in int64 only up to {limit:,} samples in all; nothing "
                    f"was counted. Count further samples into a new accumulator."
                )
            return
        with np.errstate(over="ignore", invalid="ignore"):
            weight = float(matrix.sum()) + float(local.sum())
        if not (np.isfinite(local).all() and weight <= WEIGHT_LIMIT):
            raise ValueError(
                f"this update would take the matrix's total weight to {weight:.6g}; the "
                f"replicates (each weight multiplied by up to {_MAX_WEIGHT}) stay finite only up "
                f"to {WEIGHT_LIMIT:.6g} in all; nothing was counted. Rescale the weights."
            )

    def _count(self, arrays: dict[str, np.ndarray], batch: _ClusterBatch) -> None:
        # Checked here, under the lock, against the live matrix; the kernels' own cell limit
        # then never binds (it is the dtype's largest value).
        self._check_room(arrays["matrix"], batch.local)
        self._add(arrays, batch, 1)

    def _uncount(self, arrays: dict[str, np.ndarray], batch: _ClusterBatch) -> None:
        # The same weights (a hash of the batch's keys) times the negated counts: integer
        # counts come back exactly. (Float sums may not; see _count_undoable.)
        self._add(arrays, batch, -1)

    def _count_undoable(self, batch: Any) -> Callable[[], None]:
        if self._weighted:
            # Subtracting float products does not give the old sums back bit for bit: restore a
            # copy (the base's way for states without an exact undo).
            backup = {name: array.copy() for name, array in self._arrays.items()}
            self._count_finite(batch)

            def restore() -> None:
                for name, array in backup.items():
                    self._arrays[name][...] = array

            return restore
        return super()._count_undoable(batch)  # counts, then _uncount: no copy of the state

    def _add(self, arrays: dict[str, np.ndarray], batch: _ClusterBatch, sign: int) -> None:
        """Add ``sign`` times the batch: the main matrix gets its counts and every replicate
        each cluster's counts times the cluster's weight."""
        matrix, replicates = arrays["matrix"], arrays["replicates"]
        flat = replicates.reshape(self._n_resamples, -1)
        limit = _INT64_MAX if matrix.dtype.kind == "i" else np.inf
        if batch.key is not None:
            key = np.uint64(batch.key)
            local = batch.local if sign > 0 else -batch.local
            args: tuple = (local, key, *self._keys, self._legacy, flat, matrix, True, limit)
            if _firstuse.add_cluster_matrix(*args) is None:  # None: the kernel's turn
                _k.add_cluster_matrix(*args)
            return
        if sign > 0:
            matrix += batch.local
        else:
            matrix -= batch.local
        if batch.items is not None:
            # The main matrix got the whole batch's counts, summed as a ConfusionAccumulator
            # sums them (float weights: the same rounding); the replicates get the items.
            for key, counts in batch.items:
                args = (counts if sign > 0 else -counts, np.uint64(key), *self._keys)
                args += (self._legacy, flat, matrix, False, limit)
                if _firstuse.add_cluster_matrix(*args) is None:
                    _k.add_cluster_matrix(*args)
            return
        scratch = np.zeros(self._num_classes**2, dtype=matrix.dtype)
        touched = np.empty(self._num_classes**2, dtype=np.int64)
        # Scanning K² cells per flush beats tracking touched cells when runs are long.
        ids, y_true = batch.cluster_ids, batch.y_true
        assert ids is not None and y_true is not None  # a batch of clusters per sample
        runs = 1 + int(np.count_nonzero(ids[1:] != ids[:-1])) if ids.size else 1
        scan = self._num_classes**2 * runs <= 4 * y_true.shape[0]
        ignore = 0 if self._ignore_index is None else self._ignore_index
        args = (
            batch.y_true,
            batch.y_pred,
            batch.weights,
            batch.cluster_ids,
            batch.run_length,
            ignore,
            self._ignore_index is not None,
            self._num_classes,
            *self._keys,
            self._legacy,
            flat,
            scratch,
            touched,
            scan,
            sign,
        )
        if _firstuse.add_clusters(*args) is None:
            _k.add_clusters(*args)

    # ------------------------------------------------------------------ views
    @property
    def matrix(self) -> np.ndarray:
        """The main K×K matrix, a read-only snapshot."""
        return self._snapshot()["matrix"]

    @property
    def replicates(self) -> np.ndarray:
        """The ``(B, K, K)`` replicate matrices, a read-only snapshot."""
        return self._snapshot()["replicates"]

    def confusion(self) -> ConfusionAccumulator:
        """A new :class:`~metricstream.ConfusionAccumulator` holding the main matrix."""
        return self._confusion().copy()

    def _confusion(self) -> ConfusionAccumulator:
        # Tied to the version of the snapshot it holds (the base's derived cache): an update
        # landing meanwhile makes it rebuilt, never paired with a newer version.
        return self._derived("confusion", self._make_confusion)  # type: ignore[no-any-return]

    def _make_confusion(self, snapshot: Mapping[str, np.ndarray]) -> ConfusionAccumulator:
        return ConfusionAccumulator.from_matrix(
            snapshot["matrix"], self._class_names, self._ignore_index, weighted=self._weighted
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class does not define: the metric views of the main
        # matrix, delegated to a confusion accumulator that holds it (cached per state).
        if name.startswith("_") or name in _NOT_VIEWS or not hasattr(ConfusionAccumulator, name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self._confusion(), name)

    def __dir__(self) -> list[str]:
        views = [
            n for n in dir(ConfusionAccumulator) if not n.startswith("_") and n not in _NOT_VIEWS
        ]
        return sorted(set(super().__dir__()) | set(views))

    def interval(
        self,
        metric: str | Callable[..., Any],
        *,
        method: Literal["percentile", "basic", "normal"] = "percentile",
        confidence: float = 0.95,
        **metric_kwargs: Any,
    ) -> MetricInterval:
        """Cluster-bootstrap interval of a metric, from the B replicate matrices.

        The estimate is the metric of the main matrix; the standard error is the standard
        deviation over the replicates; ``method`` is ``"percentile"``, ``"basic"`` or
        ``"normal"`` (BCa needs a jackknife over clusters, which the state does not keep; the
        delta method assumes independent samples). ``metric`` and ``metric_kwargs`` as
        :func:`metricstream.bootstrap.bootstrap`, which gives this same interval for this
        accumulator. Before any sample is counted: NaN estimate and bounds, with an
        ``UndefinedMetricWarning``.

        Raises:
            ValueError: a bad argument (named).
        """
        if method in ("delta", "bca"):
            raise ValueError(
                f"`method` {method!r} is not available for clustered samples: "
                + (
                    "the delta method assumes independent samples; method='normal' gives "
                    "estimate ± z·SE with the clusters' standard error."
                    if method == "delta"
                    else "BCa needs a jackknife over the clusters, which the state does not "
                    "keep; use 'percentile', 'basic' or 'normal'."
                )
            )
        snapshot = self._snapshot()
        if not snapshot["matrix"].any():
            if method not in ("percentile", "basic", "normal"):
                raise ValueError(
                    f"`method` must be 'percentile', 'basic' or 'normal', got {method!r}."
                )
            return undefined_interval(
                metric,
                snapshot["matrix"].shape,
                method=method,
                confidence=confidence,
                n_resamples=self._n_resamples,
                resampling="cluster-poisson",
                seed=self._seed,
                class_names=self._class_names,
                **metric_kwargs,
            )
        return interval_from_replicates(
            snapshot["matrix"],
            snapshot["replicates"],
            metric,
            method=method,
            confidence=confidence,
            resampling="cluster-poisson",
            seed=self._seed,
            class_names=self._class_names,
            **metric_kwargs,
        )

    def bootstrap(
        self,
        metric: str | Callable[..., Any],
        *,
        method: Literal["percentile", "basic", "normal"] = "percentile",
        confidence: float = 0.95,
        **metric_kwargs: Any,
    ) -> MetricInterval:
        """Deprecated name of :meth:`interval` (every accumulator's interval is ``interval``)."""
        warnings.warn(
            "`acc.bootstrap(metric)` is deprecated; use `acc.interval(metric)` (the same "
            "cluster-bootstrap interval).",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.interval(metric, method=method, confidence=confidence, **metric_kwargs)
