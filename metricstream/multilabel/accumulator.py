"""The streaming multilabel accumulator: L independent yes/no labels per sample.

:class:`MultilabelAccumulator` counts, per label, the multilabel confusion matrix (TP, FP, FN,
TN), and per sample the statistics behind scikit-learn's example-based metrics
(``average="samples"``, subset accuracy, Hamming and zero-one loss), in O(L) memory whatever
the number of samples. Every view is a function of :mod:`metricstream.metrics.multilabel`.

Inputs (``update(y_true, y_pred, weights=None)``):

* ``y_true``: an (N, L) 0/1 indicator matrix (bool or any integer width; float 0.0/1.0 is read
  with a copy), or :class:`LabelSets`;
* ``y_pred``: an (N, L) 0/1 indicator matrix, or (N, L) float scores — probabilities or
  logits — that are positive when ``score >= threshold`` (``threshold`` is configured: 0.5 for
  probabilities, 0.0 for logits, since ``sigmoid(x) >= 0.5`` exactly when ``x >= 0``; the
  same rule as :class:`~metricstream.ConfusionAccumulator`'s binary ``threshold``). The
  comparison is fused into the counting kernel (no thresholded copy); or :class:`LabelSets`
  when ``y_true`` is;
* label sets: :meth:`MultilabelAccumulator.update_sets` takes per-sample label lists, and
  :class:`LabelSets` the CSR form (``indptr``, ``indices``) or a SciPy CSR matrix, for L up to
  10^5 and beyond at a cost proportional to the number of labels listed.

Masking (``ignore_index``): a true entry equal to ``ignore_index`` (e.g. -1 or 255 for "not
annotated") is left out for that label of that sample: it counts as none of TP/FP/FN/TN, and
the sample's example-based ratios and exact match use its other labels. A sample with every
label masked is left out of the example-based metrics (and of subset accuracy), and counted
nowhere but in ``num_rows``. Without masked entries every number equals scikit-learn's.
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .._inputs import as_array, label_hint
from ..base import Accumulator, exact_total
from ..confusion._dispatch import get_num_threads
from ..exceptions import caller_stacklevel
from ..metrics import multilabel as _ml
from ..metrics._averaging import MultilabelAverage
from ..metrics._selection import LabelCounts
from ..metrics._zero_division import ZeroDivision
from ..metrics.counts import Labels
from . import _firstuse
from . import _kernels as _k

__all__ = ["LabelSets", "MultilabelAccumulator", "read_multilabel_csv", "read_multilabel_npz"]

_INT64_MAX = 2**63 - 1
# More labels could not be allocated anywhere, and their layout's int64 offsets could overflow.
_MAX_LABELS = 2**40
# beta² must be a ratio a/b of integers with a + b at most this (the F-beta sums of a sample
# are grouped by a |T| + b |P|, so the state grows as (a + b) L).
_MAX_BETA_TERMS = 64
# Unweighted calls count columns in int32 buffers: longer calls are split.
_MAX_ROWS_PER_CALL = 2**31 - 1
# What the kernels receive as ``weights`` for an unweighted call (see _multilabel_kernels).
_NO_WEIGHTS = np.zeros(0, dtype=np.int32)
# dtype -> the unsigned view the kernels read (indicators); scores are read as they are.
_FAST_VIEWS = {
    np.dtype(t): np.dtype(f"u{np.dtype(t).itemsize}")
    for t in (
        bool,
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
    )
}
_FAST_SCORES = {np.dtype(np.float32), np.dtype(np.float64)}
# Unweighted batches of at least this many entries are counted in row ranges on several threads
# (the kernel releases the GIL), each thread taking at least _PARALLEL_MIN_ROWS rows.
_PARALLEL_MIN_ENTRIES = 1 << 22
_PARALLEL_MIN_ROWS = 1 << 12
# A large batch is cut into about this many row ranges per thread, taken in turn.
_CHUNKS_PER_THREAD = 8
_UNSEEN = object()
# A flag of batches only (the kernels ignore it): the weights are the 1.0 given to an unweighted
# batch of a ``weighted`` accumulator, not the caller's (reports keep integer supports).
_UNIT_WEIGHTS = 1 << 8
_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()
_NO_COOCCURRENCE = {"i": np.zeros((0, 0), dtype=np.int64), "f": np.zeros((0, 0))}


# ---------------------------------------------------------------------------- label sets
@dataclass(frozen=True)
class LabelSets:
    """Per-sample label sets in CSR form: sample ``i`` holds ``indices[indptr[i]:indptr[i+1]]``.

    Build it with :meth:`from_lists` (one list of label indices per sample), :meth:`from_csr`
    or :meth:`from_sparse` (a SciPy CSR matrix/array of 0/1 values). Labels of a sample may come
    in any order but not twice. The structure is checked when the sets are made (``indptr``
    1-D integers starting at 0, never decreasing, ending at ``len(indices)``; ``indices`` 1-D
    integers); ``num_labels``, when known (the columns of a sparse matrix), must match the
    accumulator's.

    Example:
        >>> sets = LabelSets.from_lists([[0, 3], [], [2]])
        >>> sets.indptr.tolist(), sets.indices.tolist()
        ([0, 2, 2, 3], [0, 3, 2])
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_labels: int | None = None

    def __post_init__(self) -> None:
        indptr = np.ascontiguousarray(as_array(self.indptr, "indptr"))
        indices = np.ascontiguousarray(as_array(self.indices, "indices"))
        for array, label in ((indptr, "indptr"), (indices, "indices")):
            if array.ndim != 1 or array.dtype.kind not in "iu":
                raise TypeError(
                    f"`{label}` must be a 1-D integer array, got {array.dtype} "
                    f"of shape {array.shape}."
                )
        if indptr.shape[0] == 0 or indptr[0] != 0 or indptr[-1] != indices.shape[0]:
            raise ValueError(
                f"`indptr` must start at 0 and end at len(indices) = {indices.shape[0]}, got "
                f"{indptr[:1].tolist()}...{indptr[-1:].tolist()}."
            )
        if indptr.shape[0] > 1:
            down = indptr[1:] < indptr[:-1]
            if down.any():
                row = int(np.argmax(down))
                raise ValueError(
                    f"`indptr` decreases after position {row}: {int(indptr[row])} > "
                    f"{int(indptr[row + 1])}; it must never decrease."
                )
        if indices.dtype != np.int64:
            if indices.dtype == np.uint64 and indices.size and int(indices.max()) > 2**63 - 1:
                raise ValueError(
                    f"`indices` holds label {int(indices.max())}, past any `num_labels`."
                )
            indices = indices.astype(np.int64)
        num_labels = self.num_labels
        if num_labels is not None:
            if isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer)):
                raise TypeError(f"`num_labels` must be an integer or None, got {num_labels!r}.")
            num_labels = int(num_labels)
        # frozen: the checked arrays replace the given ones through object.__setattr__
        object.__setattr__(self, "indptr", indptr.astype(np.int64, copy=False))
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "num_labels", num_labels)

    def __len__(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @classmethod
    def from_lists(cls, lists: Iterable[Iterable[int]], *, name: str = "`y_true`") -> LabelSets:
        """Sets from one iterable of label indices per sample."""
        lengths = []
        flat: list[int] = []
        for position, labels in enumerate(lists):
            if isinstance(labels, (str, bytes)) or not isinstance(labels, Iterable):
                raise TypeError(
                    f"{name} must hold one list of label indices per sample; sample {position} "
                    f"is {labels!r}."
                )
            before = len(flat)
            flat.extend(labels)
            lengths.append(len(flat) - before)
        indices = np.asarray(flat) if flat else np.zeros(0, dtype=np.int64)
        if indices.dtype.kind not in "iu":
            if indices.dtype.kind == "b" or not np.all(np.equal(np.mod(indices, 1), 0)):
                raise TypeError(
                    f"{name} must hold integer label indices, got {indices.dtype} values."
                )
        indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return cls(indptr, indices.astype(np.int64))

    @classmethod
    def from_csr(cls, indptr: Any, indices: Any) -> LabelSets:
        """Sets from CSR arrays (``indptr`` of length N + 1, starting at 0, non-decreasing)."""
        return cls(indptr, indices)

    @classmethod
    def from_sparse(cls, matrix: Any, *, name: str = "`y_true`") -> LabelSets:
        """Sets from a SciPy CSR matrix or array of 0/1 values (explicit zeros are dropped)."""
        data = np.asarray(matrix.data)
        if data.size and not np.isin(data, (0, 1)).all():
            bad = int(np.argmax(~np.isin(data, (0, 1))))
            raise ValueError(
                f"{name} is a sparse matrix holding {data[bad]!r}; a label "
                "indicator holds only 0 and 1."
            )
        shape = getattr(matrix, "shape", None)
        columns = int(shape[1]) if shape is not None and len(shape) == 2 else None
        sets = cls(matrix.indptr, matrix.indices, columns)  # checks the structure
        if data.shape != sets.indices.shape:
            raise ValueError(
                f"{name} is a sparse matrix with {data.shape[0]} values for "
                f"{sets.indices.shape[0]} indices."
            )
        if data.size and (data == 0).any():
            # explicit zeros dropped: each row's new end is the kept entries before it
            kept = np.zeros(data.shape[0] + 1, dtype=np.int64)
            np.cumsum(data != 0, out=kept[1:])
            sets = cls(kept[sets.indptr], sets.indices[data != 0], columns)
        return sets


def _as_sets(value: Any, name: str) -> LabelSets | None:
    if isinstance(value, LabelSets):
        return value
    if hasattr(value, "indptr") and hasattr(value, "indices") and hasattr(value, "shape"):
        if getattr(value, "format", "csr") != "csr":
            raise TypeError(
                f"`{name}` is a sparse {value.format} matrix; convert it with .tocsr() first."
            )
        return LabelSets.from_sparse(value, name=f"`{name}`")
    return None


# ---------------------------------------------------------------------------- batches
@dataclass
class _DenseBatch:
    y_true: np.ndarray
    y_pred: np.ndarray
    weights: np.ndarray
    mask_value: Any
    flags: int
    total_weight: float
    original_true: np.ndarray
    original_pred: np.ndarray


@dataclass
class _SetsBatch:
    true: LabelSets
    pred: LabelSets
    weights: np.ndarray
    flags: int
    total_weight: float


class MultilabelAccumulator(Accumulator):
    """Multilabel classification over L labels, accumulated over a stream of batches.

    State (O(L), whatever the number of samples): per label TP/AP/PP (the multilabel
    confusion matrix), and per sample the histograms behind the example-based metrics:
    per-sample true positives summed by the denominator of each per-sample ratio, so that
    ``average="samples"`` is exact in integers and ``zero_division`` is chosen when reading.
    Optionally the L×L co-occurrence of true labels (``cooccurrence=True``, O(L²)).

    Invariants (each is tested): any split of a stream into batches, and any merge order, gives
    the same state (bit-identical: unweighted states are int64); a failed ``update`` leaves the
    state bit-identical; counts never wrap: an update after which the int64 counts of a state
    array would sum past 2**63 - 1 (the most ``load`` accepts) raises.

    Args:
        num_labels: L, the number of labels.
        label_names: optional L unique names, used by ``classification_report``.
        threshold: scores are positive when ``score >= threshold`` (0.5 for probabilities; use
            0.0 for logits).
        ignore_index: a true value marking "unknown" entries to leave out (see the module
            docstring); must not be 0 or 1.
        weighted: count in float64 so that ``weights`` may be fractional (by default counts are
            exact int64 and weights, if given, must be whole numbers).
        betas: the F-beta values whose ``average="samples"`` is counted (default ``(1.0,)``;
            each ``beta²`` must be a ratio ``a/b`` of integers with ``a + b <= 64``, e.g. 0.5, 1,
            2, 3). Label-wise F-beta works for any beta.
        cooccurrence: also count the L×L co-occurrence of true labels.

    Example:
        >>> acc = MultilabelAccumulator(3)
        >>> acc.update([[1, 0, 1], [0, 1, 0]], [[0.9, 0.2, 0.4], [0.1, 0.8, 0.3]])
        MultilabelAccumulator(num_labels=3, ...)
        >>> acc.recall(average="samples"), acc.subset_accuracy()
        (0.75, 0.5)
    """

    # 2: ``threshold`` is a probability and ``logits`` says what float scores are (format 1
    # compared scores with ``threshold`` as they were, 0.0 for logits).
    state_format = 2
    state_upgrades = {1: lambda state: _upgrade_v1(state)}

    def __init__(
        self,
        num_labels: int,
        label_names: Sequence[str] | None = None,
        *,
        threshold: float = 0.5,
        logits: bool = False,
        ignore_index: int | None = None,
        weighted: bool = False,
        betas: Sequence[float] = (1.0,),
        cooccurrence: bool = False,
    ) -> None:
        if isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer)):
            raise TypeError(f"`num_labels` must be an integer, got {type(num_labels).__name__}.")
        if num_labels < 1:
            raise ValueError(f"`num_labels` must be at least 1, got {num_labels}.")
        if num_labels > _MAX_LABELS:
            raise ValueError(
                f"`num_labels` must be at most 2**40 (the state holds several int64 counts per "
                f"label), got {num_labels}."
            )
        self._num_labels = int(num_labels)
        self._label_names = _check_names(label_names, self._num_labels)
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float, np.integer, np.floating))
            or not np.isfinite(threshold)
        ):
            raise TypeError(f"`threshold` must be a finite number, got {threshold!r}.")
        if not isinstance(logits, (bool, np.bool_)):
            raise TypeError(f"`logits` must be True or False, got {logits!r}.")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(
                f"`threshold` is a probability in [0, 1], got {threshold!r}; for logits create "
                f"the accumulator with `logits=True` and give the threshold as a probability "
                f"(0.5 is a logit of 0)."
            )
        self._threshold = float(threshold)
        self._logits = bool(logits)
        # What the kernels compare scores with: the probability itself, or its logit
        # (sigmoid(x) >= p exactly when x >= log(p / (1 - p)); 0.5 is 0 exactly).
        cut = _logit(self._threshold) if self._logits else self._threshold
        self._cut = cut
        # float32 scores are compared with the smallest float32 at or above the threshold:
        # the same decisions as comparing in float64, at twice the vector width.
        threshold32 = np.float32(cut)
        if float(threshold32) < cut:
            threshold32 = np.nextafter(threshold32, np.float32(np.inf))
        self._threshold32 = threshold32
        if ignore_index is not None:
            if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
                raise TypeError(f"`ignore_index` must be an integer or None, got {ignore_index!r}.")
            if ignore_index in (0, 1):
                raise ValueError(
                    f"`ignore_index` must not be 0 or 1 (they are label values), "
                    f"got {ignore_index}."
                )
            ignore_index = int(ignore_index)
        self._ignore_index = ignore_index
        for flag, label in ((weighted, "weighted"), (cooccurrence, "cooccurrence")):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"`{label}` must be True or False, got {flag!r}.")
        self._weighted = bool(weighted)
        self._cooccurrence = bool(cooccurrence)
        self._betas, ratios = _check_betas(betas)
        self._layout = _k.sample_layout(self._num_labels, ratios)
        self._ratios = ratios
        self._scratch: np.ndarray | None = None
        # Whether unweighted dense batches can take the one-call path of ``update``, and how
        # (see ``_route``), by the dtypes of (y_true, y_pred).
        self._plain = ignore_index is None and not cooccurrence and not weighted
        self._routes: dict[tuple[np.dtype, np.dtype], Any] = {}
        self._last_route: tuple[Any, Any, Any] = (None, None, None)
        self._route_scratch: np.ndarray | None = None
        # The table of the one-call kernel (filled by ``_route_table``); it also holds the room
        # left before an int64 total could pass 2**63 - 1, valid at ``_room_version``.
        self._table = np.zeros(_k.ROUTE_SIZE, dtype=np.int64)
        self._room_version = -1
        # The most one unit of weight adds to the total of any int64 state array: per label
        # TP + AP + PP; per sample 6 counts and histogram cells, and TP_s by 3 + len(betas)
        # denominators; L² pairs of co-occurring labels. A sample also adds 3 (its count, a
        # weighted row, a zero weight) whatever its weight.
        growth = (3 + len(ratios)) * self._num_labels + 6
        if cooccurrence:
            growth = max(growth, self._num_labels**2)
        self._growth = growth
        self._table[_k.ROUTE_GROWTH] = growth + 3
        dtype = np.float64 if self._weighted else np.int64
        rows = 4 if ignore_index is not None else 3
        arrays: dict[str, Any] = {
            "labels": ((rows, self._num_labels), dtype),
            "per_sample": ((int(self._layout[5]),), dtype),
        }
        if self._cooccurrence:
            arrays["cooccurrence"] = ((self._num_labels, self._num_labels), dtype)
        super().__init__(arrays)

    def _init_runtime(self) -> None:
        super()._init_runtime()

    def config(self) -> dict[str, Any]:
        return {
            "num_labels": self._num_labels,
            "label_names": None if self._label_names is None else list(self._label_names),
            "threshold": self._threshold,
            "logits": self._logits,
            "ignore_index": self._ignore_index,
            "weighted": self._weighted,
            "betas": list(self._betas),
            "cooccurrence": self._cooccurrence,
        }

    # ------------------------------------------------------------------ properties
    @property
    def num_labels(self) -> int:
        return self._num_labels

    @property
    def threshold(self) -> float:
        """The decision threshold, a probability (scores are logits when :attr:`logits`)."""
        return self._threshold

    @property
    def logits(self) -> bool:
        """Whether float scores are logits (else probabilities, which must lie in [0, 1])."""
        return self._logits

    @property
    def weighted(self) -> bool:
        return self._weighted

    @property
    def num_samples(self) -> int | float:
        """Samples counted (total weight when weighted), masked-out samples included."""
        value = self._snapshot()["per_sample"][_k.ROWS]
        return float(value) if self._weighted else int(value)

    # ------------------------------------------------------------------ updates
    def update_sets(
        self, y_true: Iterable[Iterable[int]], y_pred: Iterable[Iterable[int]], weights: Any = None
    ) -> MultilabelAccumulator:
        """Count per-sample label lists, e.g. ``[[0, 3], [], [2]]``; returns ``self``."""
        return self.update(
            LabelSets.from_lists(y_true, name="`y_true`"),
            LabelSets.from_lists(y_pred, name="`y_pred`"),
            weights,
        )

    def update(self, y_true: Any, y_pred: Any, weights: Any = None) -> MultilabelAccumulator:
        """Count a batch and return ``self``; on error nothing is counted.

        ``y_true``: an (N, L) 0/1 indicator matrix or :class:`LabelSets`; ``y_pred``: (N, L)
        indicators or scores (positive where ``score >= threshold``), or :class:`LabelSets`;
        ``weights``: one weight per sample (see the class docstring).
        """
        # The training-loop case in as little Python as possible (measured: the general path
        # costs 3 µs of Python per call, this one about 1 µs): unweighted, C-contiguous,
        # aligned, writeable numpy matrices of a native dtype, no masking or co-occurrence,
        # small enough for one thread. One call of the compiled kernel (no Numba dispatch)
        # validates, checks the headroom and counts; anything else, and every error, takes the
        # general path below.
        if weights is None and type(y_true) is np.ndarray and type(y_pred) is np.ndarray:
            # The route of the last pair of dtypes, by identity (numpy's built-in dtypes are
            # singletons; hashing a pair for ``_routes`` costs 0.1 µs more).
            true_dtype = y_true.dtype
            pred_dtype = y_pred.dtype
            last = self._last_route
            if true_dtype is last[0] and pred_dtype is last[1]:
                route = last[2]
            else:
                route = self._routes.get((true_dtype, pred_dtype), _UNSEEN)
                if route is _UNSEEN:
                    route = self._route(y_true, y_pred)
                self._last_route = (true_dtype, pred_dtype, route)
            # Numba reads an array's dimensions by its type: they are checked here, with the
            # size (large batches are counted on threads), and the kernel checks the rest
            # (shapes, layout, alignment: measured 0.2 µs less than ``shape`` and ``flags``
            # here).
            if (
                route is not None
                and y_true.ndim == 2
                and y_pred.ndim == 2
                and y_true.size < _PARALLEL_MIN_ENTRIES
            ):
                # the arguments one by one (a starred call builds a tuple: 30 ns more)
                true_view, pred_view, kernel, threshold, table = route
                true = y_true if true_view is None else y_true.view(true_view)
                pred = y_pred if pred_view is None else y_pred.view(pred_view)
                # acquire/release: half the cost of a ``with`` block (measured 90 vs 175 ns)
                lock = self._lock
                lock.acquire()
                try:
                    if self._room_version != self._version:
                        self._room(self._arrays)
                    code = kernel(true, pred, threshold, table)
                    if not code:
                        self._changed()
                        self._room_version = self._version  # the kernel took its share
                        return self
                    if code == _k.SUSPICIOUS:  # counted: logits that look like probabilities
                        self._changed()
                        self._room_version = self._version
                finally:
                    lock.release()
                if code == _k.SUSPICIOUS:
                    _warn_probabilities(y_pred)
                    return self
                # Nothing was counted: the general path finds the error and words it.
        return super().update(y_true, y_pred, weights)

    def _route(self, y_true: np.ndarray, y_pred: np.ndarray) -> Any:
        """How ``update`` counts matrices of these dtypes in one call: ``(dtype to view y_true
        as or None, the same for y_pred, the compiled kernel, the threshold, the kernel's
        table)``, or None for the general path. Computed once per pair of dtypes and kept in
        ``_routes`` (a restored or copied accumulator starts with none)."""
        true_view = _FAST_VIEWS.get(y_true.dtype)
        pred_view = _FAST_VIEWS.get(y_pred.dtype)
        threshold: Any = self._cut
        if y_pred.dtype == np.float32:
            threshold = self._threshold32
        route = None
        if (
            self._plain
            and true_view is not None
            and (pred_view is not None or y_pred.dtype in _FAST_SCORES)
        ):
            if _firstuse.warmup.enabled():  # counted with numpy while the kernel compiles
                dtypes = (y_true.dtype, y_pred.dtype)
                stand_in = _firstuse.stand_in(self, dtypes, true_view, pred_view, threshold)
                if stand_in is not None:
                    return stand_in
            true = np.zeros((1, self._num_labels), dtype=true_view)
            pred = np.zeros((1, self._num_labels), dtype=pred_view or y_pred.dtype)
            table = self._route_table()
            kernel = _k.compiled_for(_k.count_routed, (true, pred, threshold, table))
            route = (
                None if true_view == y_true.dtype else true_view,
                None if pred_view is None or pred_view == y_pred.dtype else pred_view,
                kernel,
                threshold,
                table,
            )
        self._routes[(y_true.dtype, y_pred.dtype)] = route
        return route

    def _route_table(self) -> np.ndarray:
        """The table of :func:`~metricstream.multilabel._kernels.count_routed`: the addresses
        of the state arrays, of the layout and of a scratch buffer held here (the kernel runs
        under the lock). The state arrays are never rebound (only written in place), so their
        addresses stay valid for the accumulator's life."""
        if self._route_scratch is None:
            size = int(_k.plain_buffer_size(self._num_labels))
            self._route_scratch = np.zeros(size, dtype=np.uint8)
            table = self._table
            labels = self._arrays["labels"]
            per_sample = self._arrays["per_sample"]
            for position, value in (
                (_k.ROUTE_LABELS, self._num_labels),
                (_k.ROUTE_LABELS_AT, labels.ctypes.data),
                (_k.ROUTE_SAMPLES_AT, per_sample.ctypes.data),
                (_k.ROUTE_SAMPLES, per_sample.shape[0]),
                (_k.ROUTE_SCRATCH_AT, self._route_scratch.ctypes.data),
                (_k.ROUTE_SCRATCH, size),
                (_k.ROUTE_LAYOUT_AT, self._layout.ctypes.data),
                (_k.ROUTE_LAYOUT, self._layout.shape[0]),
                (
                    _k.ROUTE_SCORES,
                    _k.SCORES_LOGITS if self._logits else _k.SCORES_PROBABILITIES,
                ),
            ):
                table[position] = value
        return self._table

    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> Any:
        # Fast path of the training loop: unweighted C-contiguous numpy indicator or score
        # matrices without masking (measured: a third of the Python cost of the general path).
        if (
            weights is None
            and type(y_true) is np.ndarray
            and type(y_pred) is np.ndarray
            and self._ignore_index is None
            and not self._weighted
        ):
            true_view = _FAST_VIEWS.get(y_true.dtype)
            pred_view = _FAST_VIEWS.get(y_pred.dtype)
            scores = y_pred.dtype in _FAST_SCORES
            if (
                true_view is not None
                and (pred_view is not None or scores)
                and y_true.ndim == 2
                and y_true.shape == y_pred.shape
                and y_true.shape[1] == self._num_labels
                and y_true.flags.c_contiguous
                and y_pred.flags.c_contiguous
            ):
                true = y_true.view(true_view)
                pred = y_pred if pred_view is None else y_pred.view(pred_view)
                if scores:
                    self._check_scores(y_pred)
                return _DenseBatch(
                    true, pred, _NO_WEIGHTS, 0, 0, float(true.shape[0]), y_true, y_pred
                )
        true_sets = _as_sets(y_true, "y_true")
        pred_sets = _as_sets(y_pred, "y_pred")
        if (true_sets is None) != (pred_sets is None):
            raise TypeError(
                "`y_true` and `y_pred` must both be label sets (LabelSets or sparse) or both "
                "dense (N, L) arrays; convert one to the other's form."
            )
        if true_sets is not None and pred_sets is not None:
            return self._prepare_sets(true_sets, pred_sets, weights)
        return self._prepare_dense(y_true, y_pred, weights)

    def _check_scores(self, scores: np.ndarray) -> None:
        """Probabilities must lie in [0, 1] (a ValueError naming the first that does not, with
        the remedy); logits that all lie in [0, 1] are counted with a warning."""
        if not scores.size:
            return
        flat = scores.reshape(-1) if scores.flags.c_contiguous else np.ravel(scores)
        outside = bool(_firstuse.outside_unit(flat))  # numpy while the kernel compiles
        if self._logits:
            if not outside and scores.size >= _k.SUSPICIOUS_MIN_SCORES:
                _warn_probabilities(scores)
            return
        if outside:
            bad = (scores < 0) | (scores > 1)
            if not bad.any():
                return  # NaN (outside for the range pass): the count words it
            row, column = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"`y_pred` holds {scores[row, column].item()!r} at row {row}, label {column}, "
                f"but this accumulator reads scores as probabilities, which lie in [0, 1]; "
                f"for logits create it with `logits=True` (the threshold stays a probability). "
                f"Nothing was counted."
            )

    def _prepare_weights(self, weights: Any, n: int) -> tuple[np.ndarray, int, float]:
        dtype = np.float64 if self._weighted else np.int64
        if weights is None:
            if self._weighted:
                # Weights of 1.0: the same float sums as no weights, through the kernels that
                # weighted batches compile anyway (one specialisation fewer per input type).
                return np.ones(n), _k.HAS_WEIGHTS | _UNIT_WEIGHTS, float(n)
            return _NO_WEIGHTS, 0, float(n)
        array = as_array(weights, "weights")
        if array.ndim != 1 or array.shape[0] != n:
            raise ValueError(
                f"`weights` must have shape ({n},) (one weight per sample), got {array.shape}."
            )
        if array.dtype.kind not in "iufb":
            raise TypeError(f"`weights` must hold numbers, got dtype {array.dtype}.")
        values = array.astype(np.float64, copy=False)
        bad = ~np.isfinite(values) | (values < 0)
        if not self._weighted:
            bad |= values != np.floor(values)
        if bad.any():
            position = int(np.argmax(bad))
            rule = (
                "finite and non-negative"
                if self._weighted
                else "whole non-negative numbers (use weighted=True for fractional weights)"
            )
            raise ValueError(
                f"`weights` holds {array[position].item()!r} at position {position}; "
                f"weights must be {rule}."
            )
        with np.errstate(over="ignore"):  # an infinite sum is refused below
            total = float(values.sum())
            finite = bool(np.isfinite(total * self._num_labels))
        if not finite:
            raise ValueError("`weights` sum to a value whose per-label sums overflow float64.")
        return np.ascontiguousarray(values.astype(dtype)), _k.HAS_WEIGHTS, total

    def _prepare_dense(self, y_true: Any, y_pred: Any, weights: Any) -> _DenseBatch:
        true = as_array(y_true, "y_true")
        pred = as_array(y_pred, "y_pred")
        true = _as_matrix(true, self._num_labels, "y_true")
        pred = _as_matrix(pred, self._num_labels, "y_pred")
        if true.shape[0] != pred.shape[0]:
            raise ValueError(
                f"`y_true` has {true.shape[0]} samples but `y_pred` has {pred.shape[0]}; both "
                f"must be (N, {self._num_labels})."
            )
        flags = 0
        mask_value: Any = np.uint8(0)
        original_true, original_pred = true, pred
        if true.dtype.kind == "f":
            true = _float_indicator(true, self._ignore_index)
        if true.dtype.kind not in "iub":
            raise TypeError(f"`y_true` must be a 0/1 indicator matrix, got dtype {true.dtype}.")
        unsigned = np.dtype(f"u{true.dtype.itemsize}")
        if self._ignore_index is not None:
            info = np.iinfo(true.dtype) if true.dtype.kind != "b" else None
            if info is not None and info.min <= self._ignore_index <= info.max:
                mask_value = np.array(self._ignore_index, dtype=true.dtype).view(unsigned)[()]
                flags |= _k.MASKED
            else:
                mask_value = unsigned.type(0)
        else:
            mask_value = unsigned.type(0)
        true = np.ascontiguousarray(true).view(unsigned)
        if pred.dtype.kind in "iub":
            pred = np.ascontiguousarray(pred).view(f"u{pred.dtype.itemsize}")
        elif pred.dtype.kind == "f":
            if pred.dtype.itemsize < 4:
                pred = pred.astype(np.float32)  # float16: numba has no half-precision loads
            pred = np.ascontiguousarray(pred)
            self._check_scores(pred)
        else:
            raise TypeError(
                f"`y_pred` must be a 0/1 indicator matrix or float scores, got dtype {pred.dtype}."
            )
        w, wflag, total = self._prepare_weights(weights, true.shape[0])
        return _DenseBatch(
            true, pred, w, mask_value, flags | wflag, total, original_true, original_pred
        )

    def _prepare_sets(self, true: LabelSets, pred: LabelSets, weights: Any) -> _SetsBatch:
        if len(true) != len(pred):
            raise ValueError(f"`y_true` has {len(true)} samples but `y_pred` has {len(pred)}.")
        for sets, name in ((true, "y_true"), (pred, "y_pred")):
            if sets.num_labels is not None and sets.num_labels != self._num_labels:
                raise ValueError(
                    f"`{name}` holds sets over {sets.num_labels} labels (a sparse matrix of "
                    f"{sets.num_labels} columns), but `num_labels` is {self._num_labels}."
                )
            indices = sets.indices
            bad = (indices < 0) | (indices >= self._num_labels)
            if bad.any():
                position = int(np.argmax(bad))
                sample = int(np.searchsorted(sets.indptr, position, side="right") - 1)
                raise ValueError(
                    f"`{name}` lists label {int(indices[position])} in sample {sample}, but "
                    f"label indices must be in [0, {self._num_labels}) (`num_labels` is "
                    f"{self._num_labels})."
                )
        w, wflag, total = self._prepare_weights(weights, len(true))
        return _SetsBatch(true, pred, w, wflag, total)

    def _room(self, arrays: dict[str, np.ndarray]) -> int:
        """How much the int64 total of any state array may still grow: 2**63 - 1 less the
        largest exact total (the bound that ``load`` applies to a state), kept in ``_table`` with
        the version it holds for. Any change but a count (merge, reset, restore, sync) moves the
        version on, and the room is then summed again (O(L))."""
        if self._room_version != self._version:
            largest = max(exact_total(array) for array in arrays.values())
            self._table[_k.ROUTE_ROOM] = _INT64_MAX - largest
            self._room_version = self._version
        return int(self._table[_k.ROUTE_ROOM])

    def _growth_of(self, batch: Any) -> tuple[int, int]:
        """``(bound, weight)``: an upper bound of what ``batch`` adds to the total of any int64
        state array, and its exact total weight."""
        n = batch.y_true.shape[0] if isinstance(batch, _DenseBatch) else len(batch.true)
        weight = n
        if batch.flags & _k.HAS_WEIGHTS and not batch.flags & _UNIT_WEIGHTS:
            weight = exact_total(batch.weights)
        return self._growth * weight + 3 * n, weight

    def _count(self, arrays: dict[str, np.ndarray], batch: Any) -> None:
        if self._weighted:  # float64 sums: the base refuses any that would become infinite
            self._count_batch(arrays, batch)
            return
        growth, weight = self._growth_of(batch)
        room = self._room(arrays)
        if growth > room:
            self._count_near_the_limit(arrays, batch, weight)
            return
        self._count_batch(arrays, batch)
        self._table[_k.ROUTE_ROOM] = room - growth
        # Whoever counts (``update``, a group) moves the version on once after a count.
        self._room_version = self._version + 1

    def _count_near_the_limit(self, arrays: dict[str, np.ndarray], batch: Any, weight: int) -> None:
        """Count a batch that could take an int64 total past 2**63 - 1, and undo it if one
        does (or if a count wraps): the bound of ``load``, exactly."""
        # No cell grows by more than L times the batch's weight, so that a count that passed
        # 2**63 - 1 is negative (it wrapped once) and the check below is exact.
        if weight * self._num_labels > _INT64_MAX:
            raise ValueError(
                f"this batch (total weight {weight}) could let an int64 count of "
                f"MultilabelAccumulator state pass 2**63 - 1 ({self._num_labels} labels); split "
                f"it. Nothing was counted."
            )
        backup = {name: array.copy() for name, array in arrays.items()}
        self._count_batch(arrays, batch)
        for name, array in arrays.items():
            if bool((array < 0).any()) or exact_total(array) > _INT64_MAX:
                for key, saved in backup.items():
                    arrays[key][...] = saved
                raise ValueError(
                    f"this batch would take the int64 counts of MultilabelAccumulator state "
                    f"{name!r} past 2**63 - 1 in total (the most a state that can be saved and "
                    f"loaded back holds); nothing was counted."
                )
        self._room_version = -1  # summed again at the next count

    def _count_batch(self, arrays: dict[str, np.ndarray], batch: Any) -> None:
        if isinstance(batch, _SetsBatch):
            self._count_sets(arrays, batch)
        else:
            self._count_dense(arrays, batch)
        if batch.flags & _k.HAS_WEIGHTS and not batch.flags & _UNIT_WEIGHTS:
            arrays["per_sample"][_k.WEIGHTED_ROWS] += batch.weights.shape[0]

    def _count_dense(self, arrays: dict[str, np.ndarray], batch: _DenseBatch) -> None:
        # The kernels validate every row before adding anything into ``arrays`` (they count
        # into local buffers first), so a failed call leaves the state untouched.
        n = batch.y_true.shape[0]
        if n > _MAX_ROWS_PER_CALL:
            raise ValueError(
                f"batches of 2**31 rows or more are not supported (got {n}); split them."
            )
        threshold: Any = self._cut
        if batch.y_pred.dtype == np.float32:
            threshold = self._threshold32
        if _firstuse.warmup.enabled() and _firstuse.count_dense(
            arrays, batch, threshold, self._layout
        ):
            return  # counted with numpy while the batch's kernels compile
        if not batch.flags and not self._weighted:
            self._count_plain(arrays, batch, threshold)
            return
        if batch.flags & _k.MASKED:
            status, row = _k.count_dense_masked(
                batch.y_true,
                batch.y_pred,
                batch.weights,
                threshold,
                batch.mask_value,
                batch.flags,
                self._layout,
                arrays["labels"],
                arrays["per_sample"],
            )
        else:
            status, row = _k.count_dense(
                batch.y_true,
                batch.y_pred,
                batch.weights,
                threshold,
                batch.flags,
                self._layout,
                arrays["labels"],
                arrays["per_sample"],
            )
        if status != _k.OK:
            raise ValueError(_dense_error(status, row, batch, self._ignore_index))
        self._count_cooccurrence(arrays, batch)

    def _count_cooccurrence(self, arrays: dict[str, np.ndarray], batch: _DenseBatch) -> None:
        cooc = arrays.get("cooccurrence")
        if cooc is not None:
            _k.count_cooccurrence(batch.y_true, batch.weights, batch.flags, cooc)

    def _count_plain(
        self, arrays: dict[str, np.ndarray], batch: _DenseBatch, threshold: Any
    ) -> None:
        """Count an unweighted, unmasked batch: on the calling thread, or for large batches in
        row ranges on several threads (private buffers, added once every range is valid)."""
        n, num_labels = batch.y_true.shape
        threads = min(get_num_threads(), n // _PARALLEL_MIN_ROWS)
        if n * num_labels < _PARALLEL_MIN_ENTRIES or threads < 2:
            # (the caller has checked the room: the kernel counts a valid batch)
            status, row = _k.split_status(
                _k.count_plain(
                    batch.y_true,
                    batch.y_pred,
                    threshold,
                    self._layout,
                    arrays["labels"],
                    arrays["per_sample"],
                    1,
                )
            )
        else:
            status, row = self._count_plain_parallel(arrays, batch, threshold, threads)
        if status != _k.OK:
            raise ValueError(_dense_error(status, row, batch, self._ignore_index))
        self._count_cooccurrence(arrays, batch)

    def _count_plain_parallel(
        self, arrays: dict[str, np.ndarray], batch: _DenseBatch, threshold: Any, threads: int
    ) -> tuple[int, int]:
        """Count a large batch in row ranges that the calling thread and ``threads - 1`` pool
        threads take in turn (a core busy with something else takes fewer), each into private
        buffers that are added to ``arrays`` only when every range is valid. Returns the
        ``(status, row)`` of the first bad row in stream order, or ``(OK, -1)``."""
        n = batch.y_true.shape[0]
        num_chunks = min(n // _PARALLEL_MIN_ROWS, threads * _CHUNKS_PER_THREAD)
        bounds = [n * c // num_chunks for c in range(num_chunks + 1)]
        shares = [
            (np.zeros_like(arrays["labels"]), np.zeros_like(arrays["per_sample"]))
            for _ in range(threads)
        ]
        next_chunk = itertools.count()  # next() on itertools.count is atomic under the GIL
        failures: dict[int, tuple[int, int]] = {}
        first_failure = [num_chunks]

        def take_chunks(share: int) -> None:
            labels, per_sample = shares[share]
            while True:
                chunk = next(next_chunk)
                # Chunks are handed out in order: every chunk before a failing one is counted,
                # so the first failing chunk holds the first bad row.
                if chunk >= num_chunks or chunk > first_failure[0]:
                    return
                lo, hi = bounds[chunk], bounds[chunk + 1]
                status, row = _k.split_status(
                    _k.count_plain(
                        batch.y_true[lo:hi],
                        batch.y_pred[lo:hi],
                        threshold,
                        self._layout,
                        labels,
                        per_sample,
                        0,
                    )
                )
                if status != _k.OK:
                    failures[chunk] = (status, lo + row)
                    first_failure[0] = min(first_failure[0], chunk)
                    return

        pool = _get_pool(threads - 1)
        helpers = [pool.submit(take_chunks, share) for share in range(1, threads)]
        try:
            take_chunks(0)
        finally:
            for helper in helpers:
                helper.result()
        if failures:
            return failures[min(failures)]
        for labels, per_sample in shares:
            arrays["labels"] += labels
            arrays["per_sample"] += per_sample
        return _k.OK, -1

    def _count_sets(self, arrays: dict[str, np.ndarray], batch: _SetsBatch) -> None:
        if _firstuse.warmup.enabled() and _firstuse.count_sets(arrays, batch, self._layout):
            return  # counted with numpy while the kernel compiles
        cooc = arrays.get("cooccurrence")
        if cooc is None:
            cooc = _NO_COOCCURRENCE[arrays["labels"].dtype.kind]
        if self._scratch is None:
            self._scratch = np.zeros(self._num_labels, dtype=np.uint8)
        status, row, column = _k.count_sets(
            batch.true.indptr,
            batch.true.indices,
            batch.pred.indptr,
            batch.pred.indices,
            batch.weights,
            batch.flags,
            self._layout,
            arrays["labels"],
            arrays["per_sample"],
            cooc,
            self._scratch,
        )
        if status != _k.OK:
            sets, name = (
                (batch.true, "y_true") if status == _k.DUPLICATE_TRUE else (batch.pred, "y_pred")
            )
            label = int(sets.indices[sets.indptr[row] + column])
            raise ValueError(
                f"`{name}` lists label {label} twice in sample {row}; a label set "
                "holds each label once. Nothing was counted."
            )

    # ------------------------------------------------------------------ views
    def _view_source(self) -> _ml.MultilabelCounts:
        return self._derived("counts", self._make_counts)  # type: ignore[no-any-return]

    def _make_counts(self, snap: Mapping[str, np.ndarray]) -> _ml.MultilabelCounts:
        labels, per_sample = snap["labels"], snap["per_sample"]
        rows = per_sample[_k.ROWS]
        total = np.full(self._num_labels, rows) if labels.shape[0] == 3 else rows - labels[3]
        # read-only like the state arrays beside it: the counts are cached until the next update,
        # so a write through one view would change every later view
        total.flags.writeable = False
        label_counts = LabelCounts(tp=labels[0], ap=labels[1], pp=labels[2], total=total)
        lay = self._layout
        size = self._num_labels + 1
        fbeta = {}
        for k, beta in enumerate(self._betas):
            a, b, offset = (int(x) for x in lay[6 + 3 * k : 9 + 3 * k])
            fbeta[beta] = (a, b, per_sample[offset : offset + (a + b) * self._num_labels + 1])
        stats = _ml.SampleStatistics(
            count=int(per_sample[_k.COUNT]),
            judged=per_sample[_k.JUDGED],
            exact=per_sample[_k.EXACT],
            neither=per_sample[_k.NEITHER],
            zero_weight=int(per_sample[_k.ZERO_WEIGHT]),
            cardinality_true=per_sample[lay[0] : lay[0] + size],
            cardinality_pred=per_sample[lay[1] : lay[1] + size],
            tp_by_pred=per_sample[lay[2] : lay[2] + size],
            tp_by_true=per_sample[lay[3] : lay[3] + size],
            tp_by_union=per_sample[lay[4] : lay[4] + size],
            tp_by_fbeta=fbeta,
        )
        # Supports print as scikit-learn prints them: floats once weights were given.
        integral = not per_sample[_k.WEIGHTED_ROWS]
        return _ml.MultilabelCounts(
            labels=label_counts,
            samples=stats,
            integral=integral,
            label_names=self._label_names,
            cooccurrence=snap.get("cooccurrence"),
        )

    def counts(self) -> _ml.MultilabelCounts:
        """The counts every view is computed from (read-only arrays of one state)."""
        return self._view_source()

    def precision(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Precision per label or averaged; see
        :func:`metricstream.metrics.multilabel.precision`."""
        return self._view(_ml.precision, average, labels=_key(labels), zero_division=zero_division)

    def recall(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Recall per label or averaged; see :func:`metricstream.metrics.multilabel.recall`."""
        return self._view(_ml.recall, average, labels=_key(labels), zero_division=zero_division)

    def fbeta(
        self,
        beta: float,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """F-beta per label or averaged; see :func:`metricstream.metrics.multilabel.fbeta`."""
        return self._view(
            _ml.fbeta, beta, average, labels=_key(labels), zero_division=zero_division
        )

    def f1(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """F1 per label or averaged; see :func:`metricstream.metrics.multilabel.f1`."""
        return self._view(_ml.f1, average, labels=_key(labels), zero_division=zero_division)

    def jaccard(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Jaccard index per label or averaged; see
        :func:`metricstream.metrics.multilabel.jaccard`."""
        return self._view(_ml.jaccard, average, labels=_key(labels), zero_division=zero_division)

    def precision_recall_fscore_support(
        self,
        beta: float = 1.0,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> tuple:
        """``(precision, recall, fbeta, support)``; see
        :func:`metricstream.metrics.multilabel.precision_recall_fscore_support`."""
        return self._view(
            _ml.precision_recall_fscore_support,
            beta,
            average,
            labels=_key(labels),
            zero_division=zero_division,
        )

    def subset_accuracy(
        self, *, normalize: bool = True, zero_division: ZeroDivision = "warn"
    ) -> float:
        """Share of exactly matched samples; see
        :func:`metricstream.metrics.multilabel.subset_accuracy`."""
        return self._view(_ml.subset_accuracy, normalize=normalize, zero_division=zero_division)

    def zero_one_loss(
        self, *, normalize: bool = True, zero_division: ZeroDivision = "warn"
    ) -> float:
        """``1 - subset_accuracy``; see :func:`metricstream.metrics.multilabel.zero_one_loss`."""
        return self._view(_ml.zero_one_loss, normalize=normalize, zero_division=zero_division)

    def hamming_loss(self, *, zero_division: ZeroDivision = "warn") -> float:
        """Share of wrong (sample, label) entries; see
        :func:`metricstream.metrics.multilabel.hamming_loss`."""
        return self._view(_ml.hamming_loss, zero_division=zero_division)

    def multilabel_confusion_matrix(self, *, labels: Labels = None) -> np.ndarray:
        """(L, 2, 2) matrices ``[[TN, FP], [FN, TP]]``; see
        :func:`metricstream.metrics.multilabel.multilabel_confusion_matrix`."""
        return self._view(_ml.multilabel_confusion_matrix, labels=_key(labels))

    def label_cardinality(
        self, *, predicted: bool = False, zero_division: ZeroDivision = "warn"
    ) -> float:
        """Mean number of true (``predicted``: predicted) labels per sample."""
        return self._view(_ml.label_cardinality, predicted=predicted, zero_division=zero_division)

    def cardinality_histogram(self, *, predicted: bool = False) -> np.ndarray:
        """``h[k]``: samples with ``k`` true (``predicted``: predicted) labels, ``k = 0..L``."""
        return self._view(_ml.cardinality_histogram, predicted=predicted)

    def cooccurrence(self) -> np.ndarray:
        """``C[i, j]``: samples truly carrying both labels ``i`` and ``j`` (``C[i, i] = AP_i``).

        Needs ``cooccurrence=True`` in the configuration.
        """
        if not self._cooccurrence:
            raise ValueError(
                "co-occurrence is not counted; create the accumulator with cooccurrence=True."
            )
        return self._snapshot()["cooccurrence"].copy()

    def classification_report(
        self,
        *,
        target_names: Sequence[str] | None = None,
        digits: int = 2,
        output_dict: bool = False,
        zero_division: ZeroDivision = "warn",
    ) -> str | dict:
        """scikit-learn's multilabel ``classification_report``; see
        :func:`metricstream.metrics.multilabel.classification_report`."""
        names = None if target_names is None else tuple(target_names)
        return self._view(
            _ml.classification_report,
            target_names=names,
            digits=digits,
            output_dict=output_dict,
            zero_division=zero_division,
        )

    def _rate(
        self, function: Any, average: Any, labels: Labels, zero_division: ZeroDivision
    ) -> Any:
        return self._view(function, average, labels=_key(labels), zero_division=zero_division)

    def specificity(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label specificity ``TN_j / (TN_j + FP_j)``; see
        :func:`metricstream.metrics.specificity`."""
        return self._rate(_ml.specificity, average, labels, zero_division)

    def negative_predictive_value(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label NPV ``TN_j / (TN_j + FN_j)``; see
        :func:`metricstream.metrics.negative_predictive_value`."""
        return self._rate(_ml.negative_predictive_value, average, labels, zero_division)

    def false_positive_rate(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label FPR ``FP_j / (FP_j + TN_j)``."""
        return self._rate(_ml.false_positive_rate, average, labels, zero_division)

    def false_negative_rate(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label FNR ``FN_j / AP_j``."""
        return self._rate(_ml.false_negative_rate, average, labels, zero_division)

    def false_discovery_rate(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label FDR ``FP_j / PP_j``."""
        return self._rate(_ml.false_discovery_rate, average, labels, zero_division)

    def false_omission_rate(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label FOR ``FN_j / (FN_j + TN_j)``."""
        return self._rate(_ml.false_omission_rate, average, labels, zero_division)

    def informedness(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label informedness ``TPR_j + TNR_j - 1``."""
        return self._rate(_ml.informedness, average, labels, zero_division)

    def markedness(
        self,
        average: MultilabelAverage = None,
        *,
        labels: Labels = None,
        zero_division: ZeroDivision = "warn",
    ) -> float | np.ndarray:
        """Per-label markedness ``PPV_j + NPV_j - 1``."""
        return self._rate(_ml.markedness, average, labels, zero_division)

    def prevalence(
        self, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Per-label prevalence ``AP_j / N_j``."""
        return self._view(_ml.prevalence, labels=_key(labels), zero_division=zero_division)

    def positive_likelihood_ratio(
        self, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Per-label ``LR+_j = TPR_j / FPR_j``."""
        return self._view(
            _ml.positive_likelihood_ratio, labels=_key(labels), zero_division=zero_division
        )

    def negative_likelihood_ratio(
        self, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Per-label ``LR-_j = FNR_j / TNR_j``."""
        return self._view(
            _ml.negative_likelihood_ratio, labels=_key(labels), zero_division=zero_division
        )

    def diagnostic_odds_ratio(
        self, *, labels: Labels = None, zero_division: ZeroDivision = "warn"
    ) -> np.ndarray:
        """Per-label ``DOR_j = TP_j TN_j / (FP_j FN_j)``."""
        return self._view(
            _ml.diagnostic_odds_ratio, labels=_key(labels), zero_division=zero_division
        )


# ---------------------------------------------------------------------------- helpers
def _key(labels: Labels) -> Any:
    """``labels`` in a hashable form for the view cache (a tuple), None unchanged."""
    if labels is None:
        return None
    array = np.asarray(labels)
    if array.ndim == 0:
        return (array.item(),)
    return tuple(array.tolist()) if array.ndim == 1 else labels


def _check_names(names: Sequence[str] | None, num_labels: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(name, str) for name in names):
        raise TypeError("`label_names` must be a sequence of strings.")
    names = tuple(names)
    if len(names) != num_labels or len(set(names)) != num_labels:
        raise ValueError(
            f"`label_names` must hold {num_labels} unique names, got "
            f"{len(names)} ({len(set(names))} unique)."
        )
    return names


def _check_betas(betas: Sequence[float]) -> tuple[tuple[float, ...], list[tuple[int, int]]]:
    if isinstance(betas, (str, bytes)) or not isinstance(betas, Iterable):
        raise TypeError(f"`betas` must be a sequence of numbers, got {betas!r}.")
    values: list[float] = []
    ratios = []
    for beta in betas:
        if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
            raise TypeError(f"`betas` must hold numbers, got {beta!r}.")
        beta = float(beta)
        if not (np.isfinite(beta * beta) and beta * beta > 0):
            raise ValueError(
                f"`betas` must hold positive finite numbers whose square is a positive finite "
                f"float (beta 0 and inf are precision and recall, always available), got "
                f"{beta!r}."
            )
        ratio = Fraction(beta * beta).limit_denominator(_MAX_BETA_TERMS)
        a, b = ratio.numerator, ratio.denominator
        if a + b > _MAX_BETA_TERMS or abs(a / b - beta * beta) > 1e-12 * beta * beta:
            raise ValueError(
                f"`betas` holds {beta!r}, whose square is not a ratio a/b of integers with "
                f"a + b <= {_MAX_BETA_TERMS} (e.g. 0.5, 1, 2, 3); example-based F-beta is "
                f"counted exactly only for those."
            )
        if beta not in values:
            values.append(beta)
            ratios.append((a, b))
    if not values:
        raise ValueError("`betas` must hold at least one value (1.0 for F1).")
    return tuple(values), ratios


def _as_matrix(array: np.ndarray, num_labels: int, name: str) -> np.ndarray:
    if array.ndim == 1 and num_labels == 1:
        return array.reshape(-1, 1)
    if array.ndim != 2 or array.shape[1] != num_labels:
        hint = ""
        if array.ndim == 1:
            hint = (
                " For per-sample label lists use update_sets(); for a single label, num_labels=1."
            )
        raise ValueError(
            f"`{name}` must be an (N, {num_labels}) label indicator matrix (`num_labels` is "
            f"{num_labels}), got shape {array.shape}.{hint}"
        )
    return array


def _float_indicator(array: np.ndarray, ignore_index: int | None) -> np.ndarray:
    """A float 0.0/1.0 truth as int8 (or int64 when the mask value needs it): a copy."""
    allowed = [0.0, 1.0] if ignore_index is None else [0.0, 1.0, float(ignore_index)]
    ok = np.isin(array, allowed)
    if not ok.all():
        row, column = (int(i) for i in np.argwhere(~ok)[0])
        value = array[row, column].item()
        raise ValueError(
            f"`y_true` holds {value!r} at row {row}, label {column}; a "
            f"label indicator holds only 0 and 1"
            + ("" if ignore_index is None else f" (or `ignore_index` {ignore_index})")
            + "."
            + label_hint("y_true", value, 2, ignore_index)
        )
    return array.astype(np.int64 if ignore_index is not None else np.int8)


def _dense_error(status: int, row: int, batch: _DenseBatch, ignore_index: int | None) -> str:
    if status == _k.BAD_TRUE:
        values = batch.y_true[row]
        bad = values > 1
        if batch.flags & _k.MASKED:
            bad &= values != batch.mask_value
        column = int(np.argmax(bad))
        value = batch.original_true[row, column]
        allowed = "0 or 1" if ignore_index is None else f"0, 1 or `ignore_index` {ignore_index}"
        return (
            f"`y_true` holds {value.item()!r} at row {row}, label {column}, but a label "
            f"indicator holds {allowed}. Nothing was counted."
            + label_hint("y_true", value.item(), 2, ignore_index)
        )
    if status == _k.BAD_SCORE:
        column = int(np.argmax(np.isnan(batch.y_pred[row])))
        return (
            f"`y_pred` holds NaN at row {row}, label {column}; scores must be numbers. "
            f"Nothing was counted."
        )
    column = int(np.argmax(batch.y_pred[row] > 1))
    value = batch.original_pred[row, column]
    return (
        f"`y_pred` holds {value.item()!r} at row {row}, label {column}, but a label "
        f"indicator holds 0 or 1 (float scores are thresholded at `threshold`). Nothing "
        f"was counted."
    )


def _upgrade_v1(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 to 2: a threshold ``t`` in (0, 1] stays a probability threshold; any other (0.0,
    the documented threshold for logits, or any value outside [0, 1]) compared logits, and
    becomes ``logits=True`` with the probability ``sigmoid(t)`` (0.5 for 0.0: the same
    decisions; others to the nearest float)."""
    config = dict(state["config"])
    threshold = float(config["threshold"])
    if 0.0 < threshold <= 1.0:
        config["logits"] = False
    else:
        config["logits"] = True
        config["threshold"] = 1.0 / (1.0 + math.exp(-threshold)) if threshold > -745 else 0.0
    return {**state, "format": 2, "config": config}


def _logit(probability: float) -> float:
    """``log(p / (1 - p))`` (``-inf`` at 0, ``inf`` at 1, exactly 0 at 0.5)."""
    if probability <= 0.0:
        return -math.inf
    if probability >= 1.0:
        return math.inf
    return math.log(probability) - math.log1p(-probability)


def _warn_probabilities(scores: Any) -> None:
    warnings.warn(
        "every score of this batch lies in [0, 1]: they look like probabilities, but the "
        "accumulator was created with `logits=True`, which compares them with the logit of "
        "`threshold`; create it without `logits=True` for probabilities.",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


def _get_pool(workers: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads for large batches, made on first use."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != workers:
            if _pool is not None:
                _pool[1].shutdown(wait=False)
            _pool = (
                workers,
                ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="metricstream-multilabel"
                ),
            )
        return _pool[1]


# ---------------------------------------------------------------------------- file input
# The most labels the file readers make an accumulator for unless told otherwise (the
# command line's --max-classes default): a stray large index must not allocate gigabytes.
MAX_LABELS_READ = 4096
_CSV_CHUNK_ROWS = 65_536


def read_multilabel_csv(
    path: Any,
    *,
    num_labels: int | None = None,
    separator: str = "|",
    true_column: str = "y_true",
    pred_column: str = "y_pred",
    weight_column: str | None = None,
    delimiter: str = ",",
    max_labels: int = MAX_LABELS_READ,
) -> MultilabelAccumulator:
    """Count a CSV file whose ``y_true``/``y_pred`` columns hold label sets, e.g. ``0|3``.

    Each cell lists the sample's label indices separated by ``separator`` (an empty cell is the
    empty set). Labels may also be names: then ``num_labels`` is the number of distinct names
    and the names (sorted) become ``label_names``. ``weight_column`` names a column of sample
    weights (fractional weights make the accumulator ``weighted``).

    At most ``max_labels`` labels are read (a label index or a number of names beyond it is
    refused before anything is allocated). The file is read twice — once for the label
    vocabulary and the kind of weights, once to count in chunks of 65,536 rows — so memory is
    bounded by the vocabulary and one chunk, whatever the file's length (a stream that cannot
    seek is held in memory instead).

    Example:
        >>> import io
        >>> text = "y_true,y_pred\\n0|2,0\\n1,1|2\\n,\\n"
        >>> acc = read_multilabel_csv(io.StringIO(text), num_labels=3)
        >>> acc.subset_accuracy(), acc.num_samples
        (0.3333333333333333, 3)
    """
    columns = (true_column, pred_column, weight_column)
    held: list[tuple[list[str], list[str], float]] | None = None
    seekable = not hasattr(path, "read") or (hasattr(path, "seekable") and path.seekable())
    tokens: set[str] = set()
    fractional = False
    if seekable:
        start = path.tell() if hasattr(path, "read") else 0
        for true, pred, weight in _csv_rows(path, columns, separator, delimiter):
            tokens.update(true)
            tokens.update(pred)
            fractional |= weight != int(weight)
        if hasattr(path, "read"):
            path.seek(start)
    else:
        held = list(_csv_rows(path, columns, separator, delimiter))
        for true, pred, weight in held:
            tokens.update(true)
            tokens.update(pred)
            fractional |= weight != int(weight)
    names: list[str] | None = None
    if all(token.lstrip("-").isdigit() for token in tokens):
        index = {token: int(token) for token in tokens}
        size = num_labels if num_labels is not None else (max(index.values(), default=-1) + 1)
        largest = max(index.values(), default=-1)
        if largest >= max_labels:
            raise ValueError(
                f"the file lists label {largest:,}, which needs {largest + 1:,} labels, more "
                f"than the limit of {max_labels:,} (`max_labels`; `--max-classes` on the "
                f"command line): raise it if the file really has that many labels."
            )
    else:
        names = sorted(tokens)
        index = {name: position for position, name in enumerate(names)}
        size = len(names) if num_labels is None else num_labels
        if len(names) > max_labels:
            raise ValueError(
                f"the file lists {len(names):,} distinct label names, more than the limit of "
                f"{max_labels:,} (`max_labels`; `--max-classes` on the command line)."
            )
    acc = MultilabelAccumulator(
        max(size, 1), names if names and len(names) == size else None, weighted=fractional
    )
    rows = held if held is not None else _csv_rows(path, columns, separator, delimiter)
    chunk: list[tuple[list[str], list[str], float]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _CSV_CHUNK_ROWS:
            _count_csv_chunk(acc, chunk, index, weight_column is not None)
            chunk = []
    _count_csv_chunk(acc, chunk, index, weight_column is not None)
    return acc


def _csv_rows(
    path: Any, columns: tuple[str, str, str | None], separator: str, delimiter: str
) -> Iterator[tuple[list[str], list[str], float]]:
    """``(true labels, predicted labels, weight)`` of each row, with the file's line numbers
    in errors."""
    import csv

    true_column, pred_column, weight_column = columns
    opened = None
    if hasattr(path, "read"):
        handle = path
    else:
        opened = handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115
    try:
        reader = csv.DictReader(handle, delimiter=delimiter)
        fields = reader.fieldnames or []
        for column in (true_column, pred_column) + ((weight_column,) if weight_column else ()):
            if column not in fields:
                raise ValueError(f"the file has no column {column!r}; its columns are {fields}.")
        for row in reader:
            weight = 1.0
            if weight_column:
                cell = row[weight_column]
                try:
                    weight = float(cell)
                except (TypeError, ValueError):
                    raise ValueError(
                        f"line {reader.line_num}: weight {cell!r} is not a number."
                    ) from None
                if not (np.isfinite(weight) and weight >= 0):
                    raise ValueError(
                        f"line {reader.line_num}: weight {cell!r} must be finite and non-negative."
                    )
            yield (_split(row[true_column], separator), _split(row[pred_column], separator), weight)
    finally:
        if opened is not None:
            opened.close()


def _count_csv_chunk(
    acc: MultilabelAccumulator,
    chunk: list[tuple[list[str], list[str], float]],
    index: dict[str, int],
    weighted: bool,
) -> None:
    if not chunk:
        return
    acc.update_sets(
        [[index[t] for t in true] for true, _, _ in chunk],
        [[index[t] for t in pred] for _, pred, _ in chunk],
        np.array([w for _, _, w in chunk]) if weighted else None,
    )


def read_multilabel_npz(
    path: Any,
    *,
    threshold: float = 0.5,
    logits: bool = False,
    weighted: bool | None = None,
    max_labels: int = MAX_LABELS_READ,
) -> MultilabelAccumulator:
    """Count an ``.npz`` file holding (N, L) ``y_true`` and ``y_pred`` members.

    ``y_pred`` holds 0/1 indicators or scores: probabilities in [0, 1] positive where
    ``score >= threshold``, or with ``logits=True`` logits positive where
    ``sigmoid(score) >= threshold``;
    optional members: ``weights`` (N,) and ``label_names`` (L strings). ``weighted`` defaults to
    whether the weights are fractional. Members are streamed in blocks of rows (never loaded
    whole, no pickle); at most ``max_labels`` labels are read. A batch that fails leaves the
    file's earlier blocks counted: the error names the row (a ``ValueError``).

    Example:
        >>> import io, numpy as np
        >>> buffer = io.BytesIO()
        >>> np.savez(buffer, y_true=[[1, 0], [0, 1]], y_pred=[[0.9, 0.2], [0.6, 0.7]],
        ...          label_names=["cat", "dog"])
        >>> _ = buffer.seek(0)
        >>> acc = read_multilabel_npz(buffer)
        >>> acc.config()["label_names"], acc.subset_accuracy()
        (['cat', 'dog'], 0.5)
    """
    from ..io.readers import InputError, iter_npz_rows, npz_member_shapes

    try:
        shapes = npz_member_shapes(path)
        for member in ("y_true", "y_pred"):
            if member not in shapes:
                raise ValueError(
                    f"the .npz file has no member {member!r}; its members are {list(shapes)}."
                )
        true_shape = shapes["y_true"][0]
        if len(true_shape) != 2:
            raise ValueError(
                f"member 'y_true' must be an (N, L) indicator matrix, got shape {true_shape}."
            )
        if not 1 <= true_shape[1] <= max_labels:
            raise ValueError(
                f"member 'y_true' has {true_shape[1]:,} labels, outside 1 to the limit of "
                f"{max_labels:,} (`max_labels`; `--max-classes` on the command line)."
            )
        names = None
        if "label_names" in shapes:
            (name_shape, name_dtype) = shapes["label_names"]
            if len(name_shape) != 1 or name_shape[0] != true_shape[1]:
                raise ValueError(
                    f"member 'label_names' must hold {true_shape[1]} names, got shape {name_shape}."
                )
            (block,) = iter_npz_rows(path, ["label_names"], max(1, name_shape[0]))
            names = [str(name) for name in block["label_names"]]
        members = ["y_true", "y_pred"] + (["weights"] if "weights" in shapes else [])
        if weighted is None:
            weighted = False
            if "weights" in shapes:
                for block in iter_npz_rows(path, ["weights"], _NPZ_ROWS):
                    weighted |= bool(np.any(np.asarray(block["weights"]) % 1 != 0))
        acc = MultilabelAccumulator(
            true_shape[1], names, threshold=threshold, logits=logits, weighted=weighted
        )
        # rows in blocks of about 2**22 entries: memory bounded whatever the file expands to
        rows = max(1, (1 << 22) // true_shape[1])
        for block in iter_npz_rows(path, members, rows):
            acc.update(block["y_true"], block["y_pred"], block.get("weights"))
    except InputError as error:
        raise ValueError(str(error)) from None
    return acc


_NPZ_ROWS = 1 << 20


def _split(cell: str | None, separator: str) -> list[str]:
    cell = (cell or "").strip()
    return [token.strip() for token in cell.split(separator)] if cell else []
