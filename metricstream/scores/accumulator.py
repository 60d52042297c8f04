"""The streaming score accumulator: ROC/PR curves, AUROC, average precision, calibration and
top-k accuracy from constant-memory histograms.

The views are plain functions of the histograms, in :mod:`metricstream.metrics.curves`,
:mod:`~metricstream.metrics.calibration` and :mod:`~metricstream.metrics.topk`; counting is done
by the Numba kernels of :mod:`metricstream.scores._kernels`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np

from .._core import flags as _flags
from .._inputs import as_array, kernel_view, label_hint, one_hot_hint
from ..base import Accumulator, exact_total
from ..confusion.accumulator import ConfusionAccumulator
from ..exceptions import UndefinedMetricWarning, caller_stacklevel
from ..metrics import calibration as _calibration
from ..metrics import curves as _curves
from ..metrics import topk as _topk
from ..metrics.calibration import Norm, ReliabilityDiagram
from ..metrics.curves import Bounded, CurveAverage, OperatingPoint, WithinBins
from . import _firstuse
from . import _kernels as _k
from .binning import MAX_BINS, MIN_BINS, ScoreBinning

__all__ = ["ScoreAccumulator"]

Task = Literal["binary", "multiclass", "multilabel"]
Ties = Literal["sklearn", "optimistic"]

# 25200 = 2^4 * 3^2 * 5^2 * 7: divisible by every n_bins from 1 to 10 and by 12, 14, 15, 16,
# 18, 20, 21, 24, 25, 28, 30, 35, 36, 40, 42, 45, 48, 50, 56, 60, 63, 70, 72, 75, 80, 84, 90, 100.
DEFAULT_CALIBRATION_BINS = 25200
# Rows validated at a time before they are counted: a chunk of float32 scores stays in L2.
_CHUNK_ROWS = 4096
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min
# Float sums stay below this total weight: every float cell is at most the total weight times
# the largest per-sample term (the log loss, at most 36.04), far below float64's 1.8e308.
_FLOAT_TOTAL_LIMIT = 1e300
# An empty undo log for the kernels' ``log`` argument (no logging).
_NO_LOG = np.empty(0)
# The kernels' answers the fast path of ``update`` tests (module constants: no attribute lookup).
_OK, _NOT_TAKEN, _LOOKS_LIKE_PROBABILITIES = _k.OK, _k.NOT_TAKEN, _k.LOOKS_LIKE_PROBABILITIES
# A score dtype the fast path of ``update`` leaves to the general path.
_UNSUPPORTED = object()
# Log loss clips probabilities to [eps, 1 - eps] with the eps of their float type (scikit-learn).
_EPS = {
    np.dtype(np.float32): float(np.finfo(np.float32).eps),
    np.dtype(np.float64): float(np.finfo(np.float64).eps),
}


@dataclass(slots=True)
class _Batch:
    """One converted batch: ``(N,)`` labels or ``(N, C)`` targets, ``(N, C)`` scores, weights
    ``(N,)`` in the state dtype or None."""

    y: np.ndarray
    scores: np.ndarray
    weights: np.ndarray | None
    eps: float | None
    # To word errors: the user's score shape, where classes are, and the sample shape.
    score_shape: tuple[int, ...]
    class_axis: int
    sample_shape: tuple[int, ...]
    total_weight: float


class ScoreAccumulator(Accumulator):
    """Score histograms of a stream: ROC/PR curves, AUROC, AP, calibration and top-k.

    Every score lands in a bin of an order-preserving integer key of its float32 bits (see
    :mod:`metricstream.scores._kernels`). Probabilities (the default): ``0`` and ``1`` have bins
    of their own, below 1/2 the bin is the top bits of ``p``, above 1/2 the top bits of ``1 -
    p``, so that scores near 1 are resolved as finely as scores near 0 (by default 11
    significant bits for ``2**-16 <= p < 1/2``, 10 for ``1 - p`` and 8 below ``2**-16``, in
    41,347 bins: **every float16 and bfloat16 probability is counted exactly**). Multiclass
    logits are keyed by their softmax probability (one-vs-rest ranking is not invariant under
    the softmax). Binary and multilabel logits (``logits=True``): the sortable float32 key
    over the whole float range, with 11 significant bits for ``2**-6 <= |x| < 2**7`` and 8
    (bfloat16's) out to ``2**-64`` and ``2**64`` (60,160 bins). Scores that are their bin's
    value are counted exactly, and every curve and area of a class made only of them equals
    scikit-learn's (``exact()`` says so per class); other scores share bins with their near
    neighbours, and each area and operating point can report an interval guaranteed to
    contain the value on the raw scores (``with_bound=True``).

    State (memory O(C x bins), whatever the number of samples):

    * ``curves`` ``(C, num_bins, 2)``: per class and bin, the negatives and positives
      (one-vs-rest); ``C x num_bins x 2 x 8`` bytes: 6.6 MB for 10 classes of probabilities
      (9.6 MB for 10 labels of multilabel logits). The default budget ``bins`` is 65,536 up to
      64 classes, then the
      largest power of two keeping ``C x bins <= 2**22`` (64 MB): 32,768 at 100 classes,
      4,096 at 1,000 (2,587 probability bins: 7 significant bits from ``2**-16`` up); pass
      ``bins`` to trade memory for resolution;
    * ``inexact`` ``(C,)``: scores that were not their bin's own value (0: the class is exact);
    * ``ranks`` ``(2, C, C)`` (multiclass): histograms of the rank of the true class under
      scikit-learn's tie rule and the optimistic one (top-k for every k);
    * ``calibration`` ``(F, 2)`` and ``confidence`` ``(F,)``: per fine confidence bin, weight,
      correct weight and summed confidence (ECE/MCE for any ``n_bins`` dividing ``F``);
    * ``losses`` ``(2,)``: exact running sums of the Brier score and the log loss.

    Invariants (tested): any split of a stream into batches gives the same counts as one
    update; merging is associative and commutative (float sums up to rounding); a failed
    update changes nothing.

    Args:
        task: ``"binary"`` (``y_true`` 0/1, scores ``(N,)`` or ``(N, 1)`` of the positive
            class), ``"multiclass"`` (``y_true`` labels, scores with one more axis holding the
            ``num_classes`` class scores, one-vs-rest curves, as ``roc_auc_score(...,
            multi_class="ovr")``), or ``"multilabel"`` (``y_true`` a 0/1 matrix of the scores'
            shape).
        num_classes: classes (multiclass, >= 2) or labels (multilabel); unused for binary.
        bins: the budget of key bins, a power of two from 16 to 2**24 (see above): logits use
            exactly ``bins``, probabilities the finest key that fits (``num_bins``).
        thresholds: explicit increasing finite thresholds instead of key bins, e.g.
            ``np.linspace(0, 1, 100)`` as torchmetrics' ``thresholds=100``: a sample is
            predicted positive at ``t`` when ``score >= t`` (for Keras' ``score > t`` pass the
            next float up, ``np.nextafter(t, np.inf)``).
        logits: scores are logits. Multiclass: curves, areas and operating points rank the
            softmax probabilities (their thresholds are probabilities), top-k the logits (the
            same order within a sample). Binary and multilabel: curves rank the logits (the
            sigmoid is monotone; thresholds are logits). Calibration, Brier score and log loss
            use the softmax or sigmoid; the log loss of a sample is clipped at 36.04 (see
            :meth:`log_loss`). Without it scores must be probabilities in ``[0, 1]``, and
            the class probabilities of a multiclass sample must sum to one within 0.01.
        weighted: accumulate float64 weights; by default counts are exact int64 and weights,
            if given, must be whole numbers.
        ignore_index: a label (or multilabel target) whose samples are skipped; an int64,
            compared with the labels exactly (never through float64).
        class_axis: the axis of the class scores (multiclass and multilabel), 1 by default
            (``(N, C)`` and ``(B, C, H, W)``), -1 for channels-last.
        calibration_bins: ``F``, the number of fine confidence bins.
        key_shifts: the low bits of a score's float32 key dropped per range: for
            probabilities ``(coarse, fine, complement)``, for ``p`` below ``2**-16``, for
            ``p`` from it to 1/2 and for ``1 - p`` above 1/2; for logits ``(outer, middle,
            fine)``, for ``|x|`` beyond ``2**-64 .. 2**64``, inside it, and in ``2**-6 ..
            2**7``. Chosen from ``bins`` when None (the finest that fits)
            and recorded in the state, so that a state keeps the layout it was counted in;
            equal values drop the same bits everywhere.

    Example:
        >>> acc = ScoreAccumulator("binary")
        >>> acc.update([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]).auroc()
        0.75
        >>> acc.average_precision()
        0.8333333333333333
    """

    # Format 2 records the key layout (``key_shifts``); format 1 states were counted with
    # the uniform key of their budget. Format 3 keys multiclass logits by their softmax
    # probability: earlier states of multiclass logits hold curves of the raw logits, which
    # cannot be converted (see _rank_by_softmax).
    state_format = 3
    state_upgrades = {
        1: lambda state: _with_uniform_key(state),
        2: lambda state: _rank_by_softmax(state),
    }
    # _reserve refuses, before anything is counted, a batch that could take an int64 total
    # past 2**63 - 1 or a float sum to overflow; a bad row found later is undone exactly.
    _counts_safely = True

    def __init__(
        self,
        task: Task,
        num_classes: int | None = None,
        *,
        bins: int | None = None,
        thresholds: Sequence[float] | np.ndarray | None = None,
        logits: bool = False,
        weighted: bool = False,
        ignore_index: int | None = None,
        class_axis: int = 1,
        calibration_bins: int = DEFAULT_CALIBRATION_BINS,
        key_shifts: Sequence[int] | None = None,
    ) -> None:
        if task not in ("binary", "multiclass", "multilabel"):
            raise ValueError(
                f"`task` must be 'binary', 'multiclass' or 'multilabel', got {task!r}."
            )
        self._task: Task = task
        if task == "binary":
            if num_classes not in (None, 1, 2):
                raise ValueError(
                    f"`num_classes` is {num_classes!r}, but a binary task has one score per "
                    f"sample; leave it None (or use task='multiclass')."
                )
            self._num_classes = 1
        else:
            least = 2 if task == "multiclass" else 1
            if (
                isinstance(num_classes, bool)
                or not isinstance(num_classes, (int, np.integer))
                or num_classes < least
            ):
                raise ValueError(
                    f"`num_classes` must be an integer >= {least} for task={task!r}, got "
                    f"{num_classes!r}."
                )
            self._num_classes = int(num_classes)
        for name, flag in (("logits", logits), ("weighted", weighted)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"`{name}` must be True or False, got {flag!r}.")
        self._logits = bool(logits)
        self._weighted = bool(weighted)
        if ignore_index is not None and (
            isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer))
        ):
            raise TypeError(f"`ignore_index` must be an integer or None, got {ignore_index!r}.")
        if ignore_index is not None and not _INT64_MIN <= int(ignore_index) <= _INT64_MAX:
            raise ValueError(
                f"`ignore_index` must fit in int64 (labels are compared with it exactly), got "
                f"{ignore_index!r}."
            )
        self._ignore_index = None if ignore_index is None else int(ignore_index)
        # Multiclass logits are ranked by their softmax probability (one-vs-rest ranking is not
        # invariant under the softmax), so their curves use the probability key; binary and
        # multilabel logits by the logit itself (the sigmoid is monotone).
        self._logit_keys = self._logits and task != "multiclass"
        if isinstance(class_axis, bool) or not isinstance(class_axis, (int, np.integer)):
            raise TypeError(f"`class_axis` must be an integer, got {class_axis!r}.")
        self._class_axis = int(class_axis)
        if (
            isinstance(calibration_bins, bool)
            or not isinstance(calibration_bins, (int, np.integer))
            or not 1 <= calibration_bins <= 1 << 24
        ):
            raise ValueError(
                f"`calibration_bins` must be an integer in [1, 2**24], got {calibration_bins!r}."
            )
        self._calibration_bins = int(calibration_bins)
        self._binning = binning = ScoreBinning.create(
            num_classes=self._num_classes,
            logit_keys=self._logit_keys,
            bins=bins,
            thresholds=thresholds,
            key_shifts=key_shifts,
        )
        # (The binning's parts, under the names the kernels' callers read.)
        self._thresholds = binning.thresholds
        self._shift = binning.shift
        self._num_bins = num_bins = binning.num_bins
        count = np.float64 if self._weighted else np.int64
        classes = self._num_classes
        arrays: dict[str, Any] = {
            "curves": ((classes, num_bins, 2), count),
            "inexact": ((classes,), np.int64),
            "calibration": ((self._calibration_bins, 2), count),
            "confidence": ((self._calibration_bins,), np.float64),
            "losses": ((2,), np.float64),
        }
        if task == "multiclass":
            arrays["ranks"] = ((2, classes, classes), count)
        super().__init__(arrays)
        # [state version, rows, weight]: how many more samples (and, weighted, how much more
        # weight) may be counted before the totals are checked again (see _reserve); version
        # -1: not known yet.
        self._room: list[Any] = [-1, 0, 0.0]
        self._fast_args = self._make_fast_args()

    def _make_fast_args(self) -> tuple[Any, ...] | None:
        """What the small-batch path of :meth:`update` needs, prepared once (None when it does
        not apply: multilabel, weighted): ``(state, head, flags, ignore, routes, table,
        ndim, last)``. ``state`` is the state mapping the rest belongs to; ``head`` the block
        kernels' arguments from the state arrays to ``start`` (unpacked in one call);
        ``routes`` maps (label dtype, score dtype, plain kernels) to a route (see
        :meth:`_route`); ``table`` the row kernel's table of addresses (see
        :func:`~metricstream.scores._kernels.count_small_rows`) or None; ``ndim`` the score
        dimensions of the path (2 multiclass, 1 binary); ``last`` the key and route of the last
        call."""
        if self._task == "multilabel" or self._weighted:
            return None
        a = self._arrays
        ranks = (a["ranks"],) if self._task == "multiclass" else ()
        head = (
            a["curves"],
            a["inexact"],
            *ranks,
            a["calibration"],
            a["confidence"],
            a["losses"],
            self._thresholds,
            self._shift,
            0,
        )
        table = None
        if (
            self._task == "multiclass"
            and not self._logits
            and self._thresholds is None
            and self._num_classes <= _k.ROW_LANES
        ):
            # Unweighted probabilities of at most ROW_LANES classes on key bins: the row
            # kernel, which reads the state at these addresses (the arrays live as long as the
            # accumulator and are only written in place; the scratch is used under the lock).
            scratch = np.zeros(_k.SCRATCH_SIZE, np.int32)
            table = np.zeros(_k.TABLE_SIZE, np.int64)
            for position, array in (
                (_k.TABLE_CURVES, a["curves"]),
                (_k.TABLE_INEXACT, a["inexact"]),
                (_k.TABLE_RANKS, a["ranks"]),
                (_k.TABLE_CALIBRATION, a["calibration"]),
                (_k.TABLE_CONFIDENCE, a["confidence"]),
                (_k.TABLE_LOSSES, a["losses"]),
                (_k.TABLE_SCRATCH, scratch),
            ):
                table[position] = array.ctypes.data
            table[_k.TABLE_BINS] = self._num_bins
            table[_k.TABLE_FINE_BINS] = self._calibration_bins
            table[_k.TABLE_SHIFT] = self._shift
            table[_k.TABLE_FLAGS] = _k.HAS_IGNORE if self._ignore_index is not None else 0
            table[_k.TABLE_IGNORE] = -1 if self._ignore_index is None else self._ignore_index
            table[_k.TABLE_CLASSES] = self._num_classes
            self._row_scratch = scratch
        routes: dict[tuple[np.dtype, np.dtype, bool], tuple[Any, ...] | None] = {}
        return (
            a,
            head,
            _k.HAS_IGNORE if self._ignore_index is not None else 0,
            -1 if self._ignore_index is None else self._ignore_index,
            routes,
            table,
            2 if self._task == "multiclass" else 1,
            [None, None, None, None],
        )

    def _route(self, labels: np.dtype, scores: np.dtype, plain: bool) -> tuple[Any, ...] | None:
        """The small-batch route for these label and score dtypes (None: the general path),
        cached: ``(row, kernel, eps, extra)``. ``row``: the kernel is the row kernel, called
        ``kernel(y_true, y_pred, table, eps, *extra)`` (``extra``: the state arrays, scratch
        and an empty undo log for its plain twin, which takes arrays rather than addresses);
        else a block kernel, called with the arguments of :meth:`_run`. ``kernel`` is compiled
        machine code, called without Numba's dispatch (which types every argument on each
        call: about 0.35 us of a 256 x 10 update): for the block kernels, of C-contiguous,
        aligned, writeable arrays of these dtypes; the row kernel takes any layout and checks
        it itself. ``plain``: the kernels' plain twins (see
        :func:`metricstream._core.flags.plain_kernels`)."""
        fast = self._fast_args
        assert fast is not None
        route: tuple[Any, ...] | None = None
        if labels.kind in "iu" and labels.isnative and scores in _EPS:
            kernels = _k.plain() if plain else _k
            eps = None if self._logits else _EPS[scores]
            if fast[5] is not None:
                if plain:
                    a = self._arrays
                    state: tuple[np.ndarray, ...] = (a["curves"], a["inexact"], a["ranks"])
                    state += (a["calibration"], a["confidence"], a["losses"])
                    state += (self._row_scratch, _NO_LOG)
                    route = (True, kernels.count_small_rows_arrays, eps, state)
                else:
                    route = (True, _k.small_rows_for(labels, scores), eps, ())
            else:
                if self._task == "multiclass":
                    kernel = kernels.count_multiclass
                    y = np.zeros(1, labels)
                else:
                    kernel = kernels.count_elementwise
                    y = np.zeros((1, 1), labels)
                args = (y, np.zeros((1, self._num_classes), scores), None, *fast[1], 1)
                args += (_CHUNK_ROWS, 1, fast[2], fast[3], eps, _NO_LOG)
                route = (False, _k.compiled_for(kernel, args), eps, ())
        fast[4][(labels, scores, plain)] = route
        return route

    # ------------------------------------------------------------------ configuration
    def config(self) -> dict[str, Any]:
        return {
            "task": self._task,
            "num_classes": None if self._task == "binary" else self._num_classes,
            "bins": self._binning.bins,
            "thresholds": self._binning.config()["thresholds"],
            "logits": self._logits,
            "weighted": self._weighted,
            "ignore_index": self._ignore_index,
            "class_axis": self._class_axis,
            "calibration_bins": self._calibration_bins,
            "key_shifts": self._binning.config()["key_shifts"],
        }

    @property
    def task(self) -> Task:
        """``"binary"``, ``"multiclass"`` or ``"multilabel"``."""
        return self._task

    @property
    def num_classes(self) -> int:
        """Number of one-vs-rest curves: 1 (binary), the classes or the labels."""
        return self._num_classes

    @property
    def num_bins(self) -> int:
        """Bins per class: at most ``bins`` (41,347 of 65,536 for probabilities, 60,160 for
        logits), the number of thresholds + 1 with explicit thresholds."""
        return self._num_bins

    @property
    def num_samples(self) -> int | float:
        """Samples counted (binary, multiclass) or scores counted (multilabel); total weight
        when weighted."""
        total = self._snapshot()["calibration"][:, 0].sum()
        return float(total) if self._weighted else int(total)

    @property
    def binning(self) -> ScoreBinning:
        """How scores are binned: the key layout or the explicit thresholds, each bin's
        value, lower edge and reported threshold (see
        :class:`~metricstream.scores.binning.ScoreBinning`)."""
        return self._binning

    def bin_values(self) -> np.ndarray:
        """The value each bin stands for, ascending: the scores of the bin's significant bits
        (see ``key_shifts``), rounded toward zero for logits and toward 0 or 1 (whichever is
        nearer) for probabilities; NaN for bins no score can reach; ``[-inf, t_1, ..., t_m]``
        with explicit thresholds."""
        return self._binning.values()

    def exact(self) -> np.ndarray:
        """Per class: True when every score counted was its bin's value, so that every result
        of that class equals scikit-learn's on the raw scores (no bound needed)."""
        return self._snapshot()["inexact"] == 0

    def bin_index(self, threshold: float) -> int:
        """The bin of ``threshold``: at that threshold, the samples in bins
        ``>= bin_index(threshold)`` are predicted positive (``score >= threshold`` exactly
        when ``threshold`` is a bin value, see :meth:`bin_values`, or a threshold this
        accumulator returned; multiclass logits: a softmax probability)."""
        return self._binning.index(threshold)

    # ------------------------------------------------------------------ counting
    def update(self, y_true: Any, y_pred: Any, weights: Any = None) -> ScoreAccumulator:
        """Count a batch and return ``self``; on error nothing is counted.

        Args:
            y_true: labels (multiclass, integers in ``[0, num_classes)`` or ``ignore_index``)
                or 0/1 targets (binary, multilabel).
            y_pred: scores: probabilities in ``[0, 1]``, or logits with ``logits=True``; for
                multiclass and multilabel with the classes on ``class_axis``.
            weights: optional non-negative finite weights, one per sample (whole numbers
                unless ``weighted``).

        Raises:
            TypeError: non-numeric input.
            ValueError: mismatched shapes, a bad label, target, score or weight (the message
                names the argument, the value and its position); the state is unchanged.
        """
        # Fast path of the training-loop call: numpy (N,) integer labels and (N, C) float32 or
        # float64 scores (multiclass; (N,) targets and scores for binary), no weights: one
        # call of compiled machine code with arguments prepared at construction. The general
        # path costs about 3 us more.
        fast = self._fast_args
        if (
            fast is None
            or weights is not None
            or type(y_pred) is not np.ndarray
            or type(y_true) is not np.ndarray
            or y_true.ndim != 1
            or y_pred.ndim != fast[6]
        ):
            return super().update(y_true, y_pred, weights)
        last = fast[7]  # the route of the last call, checked by identity (no hashing)
        plain = _flags.PLAIN_KERNELS
        if last[0] is y_true.dtype and last[1] is y_pred.dtype and last[2] is plain:
            route = last[3]
        else:
            route = fast[4].get((y_true.dtype, y_pred.dtype, plain), _UNSUPPORTED)
            if route is _UNSUPPORTED:
                if _firstuse.defer_fast(self, y_true.dtype, y_pred.dtype, plain):
                    return super().update(y_true, y_pred)  # its kernel compiles meanwhile
                route = self._route(y_true.dtype, y_pred.dtype, plain)
            fast[7][:] = (y_true.dtype, y_pred.dtype, plain, route)
        if route is None or fast[0] is not self._arrays:
            return super().update(y_true, y_pred)
        rows = y_true.shape[0]
        row = route[0]
        if not row:
            # The block kernels take C-contiguous, aligned, writeable arrays (the route's
            # types) of at most one validation chunk.
            if not (
                0 < rows <= _CHUNK_ROWS
                and y_pred.shape[0] == rows
                and y_pred.flags.carray
                and y_true.flags.carray
            ):
                return super().update(y_true, y_pred)
            if fast[6] == 1:  # binary: one column of targets and scores
                y_true, y_pred = y_true.reshape(-1, 1), y_pred.reshape(-1, 1)
            elif y_pred.shape[1] != self._num_classes:
                return super().update(y_true, y_pred)
        lock = self._lock
        lock.acquire()  # (a `with` block costs 0.14 us more)
        try:
            room = self._room
            if room[0] != self._version or rows > room[1]:
                self._reserve(self._arrays, rows, rows)
            if row:
                # The row kernel checks the layout and shapes itself (NOT_TAKEN: the general
                # path) and validates the whole batch before it counts any of it.
                if route[3]:  # the plain twin, which takes the state arrays
                    code = route[1](y_true, y_pred, fast[5], route[2], *route[3])
                else:
                    code = route[1](y_true, y_pred, fast[5], route[2])
                if code == 0:
                    self._changed()
                    room[0] = self._version
                    room[1] -= rows
                    return self
                status, position = (code & 7, code >> 3) if code > 0 else (_NOT_TAKEN, 0)
            else:
                status, position, _ = route[1](
                    y_true,
                    y_pred,
                    None,
                    *fast[1],
                    rows,
                    _CHUNK_ROWS,
                    1,
                    fast[2],
                    fast[3],
                    route[2],
                    _NO_LOG,
                )
                if status == _OK:
                    self._changed()
                    room[0] = self._version
                    room[1] -= rows
                    if position == _LOOKS_LIKE_PROBABILITIES:
                        _warn_probabilities(self._task)
                    return self
        finally:
            lock.release()
        if status == _NOT_TAKEN:
            return super().update(y_true, y_pred)
        # Rows are validated before any is counted: the state is unchanged.
        shape = (rows,) if fast[6] == 1 else y_pred.shape
        batch = _Batch(y_true, y_pred, None, route[2], shape, 1, (rows,), float(rows))
        raise self._error(status, position, batch)

    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> _Batch:
        # Fast path for the training-loop case (numpy (N,) labels and C-contiguous (N, C)
        # float scores): the general path below costs about 4 us of a 256x10 update.
        if (
            weights is None
            and self._task == "multiclass"
            and type(y_true) is np.ndarray
            and type(y_pred) is np.ndarray
            and y_true.ndim == 1
            and y_pred.ndim == 2
            and y_pred.shape == (y_true.shape[0], self._num_classes)
            and y_true.dtype.kind in "iu"
            and y_pred.dtype in _EPS
            and y_pred.flags.c_contiguous
            and y_true.dtype.isnative
        ):
            return _Batch(
                kernel_view(y_true),
                kernel_view(y_pred),
                None,
                None if self._logits else _EPS[y_pred.dtype],
                y_pred.shape,
                1,
                y_true.shape,
                float(y_true.shape[0]),
            )
        scores = as_array(y_pred, "y_pred")
        if scores.dtype not in _EPS:  # integers, bools, long double
            scores = scores.astype(np.float64)
        y = as_array(y_true, "y_true")
        if self._task == "multiclass":
            labels, matrix, axis, sample_shape = self._multiclass_layout(y, scores)
        else:
            labels, matrix, axis, sample_shape = self._elementwise_layout(y, scores)
        weight_array = None
        total = float(matrix.shape[0])
        if weights is not None:
            weight_array, total = self._weights(weights, sample_shape)
        eps = None if self._logits else _EPS[matrix.dtype]
        return _Batch(labels, matrix, weight_array, eps, scores.shape, axis, sample_shape, total)

    def _multiclass_layout(
        self, y: np.ndarray, scores: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
        if scores.ndim != y.ndim + 1:
            raise ValueError(
                f"`y_pred` must hold {self._num_classes} class scores per label: one more "
                f"dimension than `y_true` (shape {y.shape}), got shape {scores.shape}."
                + (one_hot_hint(y, self._num_classes) if y.shape == scores.shape else "")
            )
        axis = self._axis(scores)
        if scores.shape[axis] != self._num_classes:
            raise ValueError(
                f"`y_pred` has {scores.shape[axis]} class scores on axis {axis}, but "
                f"`num_classes` is {self._num_classes}."
            )
        rest = scores.shape[:axis] + scores.shape[axis + 1 :]
        if rest != y.shape:
            raise ValueError(
                f"`y_pred` has shape {scores.shape} (classes on axis {axis}), which leaves "
                f"{rest}, but `y_true` has shape {y.shape}; set `class_axis` if the classes "
                f"are on another axis."
            )
        if axis != scores.ndim - 1:  # np.moveaxis costs about 5 us, even when it moves nothing
            scores = np.moveaxis(scores, axis, -1)
        matrix = np.ascontiguousarray(scores).reshape(-1, self._num_classes)
        labels = np.ascontiguousarray(y).reshape(-1)
        return labels, matrix, axis, y.shape

    def _elementwise_layout(
        self, y: np.ndarray, scores: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
        if self._task == "binary":
            if scores.ndim == y.ndim + 1 and scores.shape[-1] == 1:
                scores = scores[..., 0]
            if scores.shape != y.shape:
                raise ValueError(
                    f"`y_pred` must hold one score per label (shape {y.shape}, or with a "
                    f"trailing axis of 1), got shape {scores.shape}."
                )
            matrix = np.ascontiguousarray(scores).reshape(-1, 1)
            targets = np.ascontiguousarray(y).reshape(-1, 1)
            return targets, matrix, scores.ndim, y.shape
        if scores.shape != y.shape:
            raise ValueError(
                f"`y_true` (targets) and `y_pred` (scores) must have the same shape for "
                f"task='multilabel', got {y.shape} and {scores.shape}."
            )
        if scores.ndim < 2:
            raise ValueError(f"multilabel scores need a label axis, got shape {scores.shape}.")
        axis = self._axis(scores)
        if scores.shape[axis] != self._num_classes:
            raise ValueError(
                f"`y_pred` has {scores.shape[axis]} labels on axis {axis}, but `num_classes` "
                f"is {self._num_classes}."
            )
        classes = self._num_classes
        sample_shape = scores.shape[:axis] + scores.shape[axis + 1 :]
        if axis != scores.ndim - 1:
            scores, y = np.moveaxis(scores, axis, -1), np.moveaxis(y, axis, -1)
        matrix = np.ascontiguousarray(scores).reshape(-1, classes)
        targets = np.ascontiguousarray(y).reshape(-1, classes)
        return targets, matrix, axis, sample_shape

    def _axis(self, scores: np.ndarray) -> int:
        axis = self._class_axis + scores.ndim if self._class_axis < 0 else self._class_axis
        if not 0 <= axis < scores.ndim:
            raise ValueError(
                f"`class_axis` is {self._class_axis}, but `y_pred` has only {scores.ndim} "
                f"dimensions."
            )
        return axis

    def _weights(self, weights: Any, sample_shape: tuple[int, ...]) -> tuple[np.ndarray, float]:
        array = as_array(weights, "weights")
        if array.shape != sample_shape:
            raise ValueError(
                f"`weights` has shape {array.shape}, but there is one weight per sample: "
                f"shape {sample_shape}."
            )
        flat = np.ascontiguousarray(array).reshape(-1).astype(np.float64, copy=False)
        # One pass checks every weight and sums them (numpy's masks and reductions cost about
        # 6 us of a 256-row update); the sum only guards integer counts against overflow.
        first_bad, total = _firstuse.check_weights(flat, not self._weighted)
        if first_bad >= 0:
            where = np.unravel_index(first_bad, sample_shape) if sample_shape else ()
            value = float(flat[first_bad])  # nan, not np.float64(nan)
            rule = "finite and non-negative"
            if not self._weighted and np.isfinite(value) and value >= 0:
                rule = (
                    "whole numbers: this accumulator counts integers; create it with "
                    "`weighted=True` for fractional weights"
                )
            position = where[0] if len(where) == 1 else tuple(int(i) for i in where)
            raise ValueError(
                f"`weights` holds {value!r} at position {position}, but weights must be {rule}."
            )
        if self._weighted:
            return flat, total
        return flat.astype(np.int64), total

    def _count(
        self, arrays: dict[str, np.ndarray], batch: _Batch, log: np.ndarray = _NO_LOG
    ) -> None:
        rows = batch.scores.shape[0]
        if rows == 0:
            return
        weight = rows if batch.weights is None else batch.total_weight
        self._reserve(arrays, rows, weight, batch.weights is not None)
        if _firstuse.warmup.enabled() and _firstuse.count(self, arrays, batch, log):
            if arrays is self._arrays:  # counted with numpy while the kernel compiles
                self._spend(rows, weight, 1)
            return
        if batch.weights is None and arrays is self._arrays:
            code = self._count_rows(batch.y, batch.scores, log)
            if code == 0:
                self._spend(rows, weight, 1)
                return
            if code > 0:
                raise self._error(code & 7, code >> 3, batch)
        # Rows are validated a chunk at a time before they are counted. A failure after the
        # first chunk is undone: integer counts by counting the same rows with sign -1 (exact),
        # the float sums from a copy taken before (weighted accumulators validate everything
        # first instead, as their float counts cannot be undone exactly).
        chunk = rows if self._weighted else _CHUNK_ROWS
        if chunk < rows and self._task == "multiclass":
            # Large batches: chunks of one kernel block, validated by the block's own checks
            # rather than by a pass of their own.
            chunk = _k.BLOCK_ROWS
        flags = _k.HAS_IGNORE if self._ignore_index is not None else 0
        backup = None
        if rows > chunk:
            backup = (arrays["confidence"].copy(), arrays["losses"].copy())
        status, position, counted = self._run(arrays, batch, 0, rows, chunk, 1, flags, log)
        if status == _k.OK:
            if arrays is self._arrays:
                self._spend(rows, weight, 1)
            if position == _k.LOOKS_LIKE_PROBABILITIES:
                _warn_probabilities(self._task)
            return
        if counted > 0 and backup is not None:
            self._run(arrays, batch, 0, counted, counted, -1, flags)
            arrays["confidence"][...] = backup[0]
            arrays["losses"][...] = backup[1]
        raise self._error(status, position, batch)

    def _count_rows(self, y_true: np.ndarray, y_pred: np.ndarray, log: np.ndarray) -> int:
        """Count ``(N,)`` labels and ``(N, C)`` scores with the row kernel (lock held): 0, the
        first bad element (``status + 8 * position``, nothing counted), or ``NOT_TAKEN`` when
        the row kernel does not take these arrays. A non-empty ``log`` receives the undo log
        (see ``_count_undoable``)."""
        fast = self._fast_args
        if fast is None or fast[5] is None or fast[0] is not self._arrays:
            return _k.NOT_TAKEN
        if y_true.ndim != 1 or y_pred.ndim != 2:
            return _k.NOT_TAKEN
        plain = _flags.PLAIN_KERNELS
        route = fast[4].get((y_true.dtype, y_pred.dtype, plain), _UNSUPPORTED)
        if route is _UNSUPPORTED:
            route = self._route(y_true.dtype, y_pred.dtype, plain)
        if route is None:
            return _k.NOT_TAKEN
        table = fast[5]
        if route[3]:  # the plain twin: the state arrays and the log as arguments
            return int(route[1](y_true, y_pred, table, route[2], *route[3][:-1], log))
        if log.size:
            table[_k.TABLE_LOG] = log.ctypes.data
        try:
            return int(route[1](y_true, y_pred, table, route[2]))
        finally:
            table[_k.TABLE_LOG] = 0

    def _reserve(
        self, arrays: dict[str, np.ndarray], rows: int, weight: float, weights: bool = False
    ) -> None:
        """Refuse (lock held) a batch of ``rows`` samples (multilabel: rows of labels) of
        total ``weight`` that could leave a state ``load`` refuses: an int64 array whose exact
        total passes ``2**63 - 1`` (the bound of the base's merges, restores and syncs), or,
        weighted, float sums near overflow.

        A counted row adds to each int64 array at most its ``_growth`` (per unit of weight;
        ``inexact`` per row); the room left, in rows, is cached per state version, so that the
        totals are read again only after something else changed the state."""
        room = self._room
        units = rows if self._weighted else max(rows, weight)
        if (
            arrays is self._arrays
            and room[0] == self._version
            and units <= room[1]
            and (not self._weighted or weight <= room[2])
        ):
            return
        left_rows = min(
            (_INT64_MAX - _upper_total(arrays[name])) // factor
            for name, factor in self._growth().items()
        )
        if not units <= left_rows:
            counted = max(_upper_total(arrays[name]) for name in self._growth())
            if weights:
                what = f"`weights` sum to {weight:g}"
                remedy = "create the accumulator with `weighted=True`"
            else:
                what = f"this batch adds {rows} samples"
                remedy = (
                    "start a new accumulator (or merge partial ones in float with `weighted=True`)"
                )
            raise ValueError(
                f"{what}, which would overflow the int64 counts: the total of a state array "
                f"(already up to {counted:,}) could pass 2**63 - 1, a state that could not be "
                f"loaded back; nothing was counted. {remedy[0].upper() + remedy[1:]}."
            )
        left_weight = 0.0
        if self._weighted:
            total = float(arrays["calibration"][:, 0].sum(dtype=np.float64))
            left_weight = _FLOAT_TOTAL_LIMIT - total
            if not weight <= left_weight:
                raise ValueError(
                    f"this batch (total weight {weight:g}) would take the accumulated weight "
                    f"to {total + weight:g}, beyond {_FLOAT_TOTAL_LIMIT:g}, where float64 sums "
                    f"could overflow; nothing was counted. Rescale the weights."
                )
        if arrays is self._arrays:
            room[0] = self._version
            room[1] = left_rows
            room[2] = left_weight

    def _growth(self) -> dict[str, int]:
        """The most a row (of unit weight) adds to the total of each int64 state array."""
        classes = self._num_classes
        if self._weighted:
            return {"inexact": classes}
        growth = {"curves": classes, "inexact": classes}
        if self._task == "multiclass":
            growth.update(ranks=2, calibration=2)
        else:
            growth["calibration"] = 2 * classes
        return growth

    def _spend(self, rows: int, weight: float, ahead: int) -> None:
        """Take a counted batch from the cached room, for the state version ``ahead`` changes
        on (1: the caller's ``_changed`` is still to come)."""
        room = self._room
        room[0] = self._version + ahead
        room[1] -= rows if self._weighted else max(rows, weight)
        room[2] -= weight

    def _count_undoable(self, batch: _Batch) -> Any:
        """Count ``batch`` (lock held) and return a function that undoes it exactly, for
        groups. Counts are undone by counting the same rows with sign -1 (exact); the float
        sums of unweighted accumulators from a log of the confidence cells' values before and
        a copy of the two loss sums, so that no copy of the histograms is taken. Weighted
        accumulators, whose histograms are float sums, restore a copy of the state."""
        if self._weighted:
            return super()._count_undoable(batch)
        arrays = self._arrays
        rows = batch.scores.shape[0]
        if rows == 0:
            return lambda: None
        losses = arrays["losses"].copy()
        per_row = 1 if self._task == "multiclass" else self._num_classes
        log = np.full(2 * rows * per_row, np.nan)
        self._count(arrays, batch, log)

        def undo() -> None:
            flags = _k.HAS_IGNORE if self._ignore_index is not None else 0
            self._run(arrays, batch, 0, rows, rows, -1, flags)
            cells = log[0::2]
            logged = ~np.isnan(cells)
            cells = cells[logged].astype(np.intp)
            before = log[1::2][logged]
            # A cell added to twice goes back to its value before the first addition.
            unique, first = np.unique(cells, return_index=True)
            arrays["confidence"][unique] = before[first]
            arrays["losses"][...] = losses

        return undo

    def _run(
        self,
        arrays: dict[str, np.ndarray],
        batch: _Batch,
        start: int,
        stop: int,
        chunk: int,
        sign: int,
        flags: int,
        log: np.ndarray = _NO_LOG,
    ) -> tuple[int, int, int]:
        ignore = -1 if self._ignore_index is None else self._ignore_index
        kernels = _k.plain() if _flags.PLAIN_KERNELS else _k
        if self._task == "multiclass":
            return kernels.count_multiclass(
                batch.y,
                batch.scores,
                batch.weights,
                arrays["curves"],
                arrays["inexact"],
                arrays["ranks"],
                arrays["calibration"],
                arrays["confidence"],
                arrays["losses"],
                self._thresholds,
                self._shift,
                start,
                stop,
                chunk,
                sign,
                flags,
                ignore,
                batch.eps,
                log,
            )
        return kernels.count_elementwise(
            batch.y,
            batch.scores,
            batch.weights,
            arrays["curves"],
            arrays["inexact"],
            arrays["calibration"],
            arrays["confidence"],
            arrays["losses"],
            self._thresholds,
            self._shift,
            start,
            stop,
            chunk,
            sign,
            flags,
            ignore,
            batch.eps,
            log,
        )

    def _error(self, status: int, position: int, batch: _Batch) -> ValueError:
        """The error for a kernel's status; ``error.sample`` is the flat index of the sample
        (row of the flattened labels), for readers that report file rows."""
        classes = batch.scores.shape[1]
        row = position
        if status == _k.BAD_SCORE or (status == _k.BAD_TRUE and self._task != "multiclass"):
            row, column = divmod(position, classes)
            sample = _unravel(row, batch.sample_shape)
            if self._task == "binary":
                where = sample
            else:
                where = sample[: batch.class_axis] + (column,) + sample[batch.class_axis :]
            shown = where[0] if len(where) == 1 else where
            if status == _k.BAD_TRUE:
                value = batch.y[row, column]
                message = (
                    f"`y_true` holds {_show(value)} at position {shown}, but targets must be 0 or 1"
                )
                if self._ignore_index is not None:
                    message += f" (or `ignore_index` {self._ignore_index})"
                hint = label_hint("y_true", value.item(), 2, self._ignore_index)
                error = ValueError(message + "." + hint)
            else:
                if self._logits:
                    rule = "logits must not be NaN or +inf"
                else:
                    rule = (
                        "probabilities must lie in [0, 1]; create the accumulator with "
                        "`logits=True` for logits or other unbounded scores"
                    )
                error = ValueError(
                    f"`y_pred` (scores) holds {_show(batch.scores[row, column])} "
                    f"at position {shown}, but {rule}."
                )
        else:
            sample = _unravel(position, batch.sample_shape)
            shown = sample[0] if len(sample) == 1 else sample
            if status == _k.BAD_SUM:
                total = float(np.sum(batch.scores[position], dtype=np.float64))
                error = ValueError(
                    f"`y_pred` (probabilities) at position {shown} sum to {total:.6g}, but "
                    f"the class probabilities of a sample must sum to 1 (within "
                    f"{_k.ROW_SUM_TOLERANCE}): apply a softmax, create the accumulator with "
                    f"`logits=True` for logits, or use task='multilabel' for independent "
                    f"per-class (sigmoid) scores."
                )
            elif status == _k.BAD_ROW:
                error = ValueError(
                    f"`y_pred` (logits) at position {shown} are all -inf: the "
                    f"softmax of that sample is undefined."
                )
            else:
                value = batch.y[position]
                allowed = f"labels must be integers in [0, {classes})"
                if self._ignore_index is not None:
                    allowed += f" or equal `ignore_index` ({self._ignore_index})"
                hint = label_hint("y_true", value.item(), classes, self._ignore_index)
                error = ValueError(
                    f"`y_true` holds label {_show(value)} at position {shown}, but {allowed}."
                    + hint
                )
        error.sample = row  # type: ignore[attr-defined]
        return error

    # ------------------------------------------------------------------ curves and areas
    def _hist(self, snap: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        curves = snap["curves"]
        return curves[:, :, 1], curves[:, :, 0], snap["inexact"] == 0

    def _class(self, label: int | None) -> int:
        if self._task == "binary":
            return 0
        if label is None or isinstance(label, bool) or not isinstance(label, (int, np.integer)):
            raise ValueError(
                f"`label` must be a class index in [0, {self._num_classes}) for "
                f"task={self._task!r}, got {label!r}."
            )
        if not 0 <= label < self._num_classes:
            raise ValueError(f"`label` is {label}, but `num_classes` is {self._num_classes}.")
        return int(label)

    def _default_average(self, average: Any) -> CurveAverage:
        if average == "binary" or (average == "macro" and self._task == "binary"):
            return None
        return average

    def roc_curve(
        self, label: int | None = None, *, micro: bool = False, drop_intermediate: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fpr, tpr, thresholds)`` of the positive class (binary), of class ``label``
        (one-vs-rest), or of the pooled one-vs-rest histograms (``micro=True``); see
        :func:`metricstream.metrics.curves.roc_curve`."""
        pos, neg, exact = self._one(label, micro)
        return _curves.roc_curve(
            pos, neg, self._binning.reported_thresholds(exact), drop_intermediate=drop_intermediate
        )

    def precision_recall_curve(
        self, label: int | None = None, *, micro: bool = False, drop_intermediate: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(precision, recall, thresholds)``, as scikit-learn's function of that name; see
        :func:`metricstream.metrics.curves.precision_recall_curve`."""
        pos, neg, exact = self._one(label, micro)
        return _curves.precision_recall_curve(
            pos, neg, self._binning.reported_thresholds(exact), drop_intermediate=drop_intermediate
        )

    def _one(self, label: int | None, micro: bool) -> tuple[np.ndarray, np.ndarray, bool]:
        pos, neg, exact = self._hist(self._snapshot())
        if micro:
            return pos.sum(axis=0), neg.sum(axis=0), bool(exact.all())
        index = self._class(label)
        return pos[index], neg[index], bool(exact[index])

    @overload
    def auroc(
        self, average: CurveAverage = ..., *, with_bound: Literal[False] = ...
    ) -> float | np.ndarray: ...

    @overload
    def auroc(self, average: CurveAverage = ..., *, with_bound: Literal[True]) -> Bounded: ...

    def auroc(
        self, average: CurveAverage = "macro", *, with_bound: bool = False
    ) -> float | np.ndarray | Bounded:
        """Area under the ROC curve; one-vs-rest ``average`` for multiclass/multilabel
        (``"macro"``, ``"weighted"``, ``"micro"`` or None per class; ignored for binary).

        ``with_bound=True`` returns ``Bounded(value, lower, upper)``: the exact AUROC of the
        raw scores lies in ``[lower, upper]`` (equal to the value for exact classes). See
        :func:`metricstream.metrics.curves.auroc` for the formula and the NaN rule.
        """
        # The cache hands back plain tuples: rebuild the named one.
        result = Bounded(*self._view(_auroc_view, self._default_average(average)))
        return result if with_bound else result.value

    @overload
    def average_precision(
        self,
        average: CurveAverage = ...,
        *,
        with_bound: Literal[False] = ...,
        within_bins: WithinBins = ...,
    ) -> float | np.ndarray: ...

    @overload
    def average_precision(
        self,
        average: CurveAverage = ...,
        *,
        with_bound: Literal[True],
        within_bins: WithinBins = ...,
    ) -> Bounded: ...

    def average_precision(
        self,
        average: CurveAverage = "macro",
        *,
        with_bound: bool = False,
        within_bins: WithinBins = "auto",
    ) -> float | np.ndarray | Bounded:
        """Average precision, scikit-learn's step sum; ``average`` and ``with_bound`` as
        :meth:`auroc`. See :func:`metricstream.metrics.curves.average_precision`.

        Inside a bin of an inexact class the order of the samples is unknown (the bound
        covers every order); ``within_bins`` picks the value:

        * ``"auto"`` (the default): the bins of a stretch of continuous scores (the bin and
          at least two of its four nearest bins hold samples:
          :func:`~metricstream.metrics.curves.continuous_bins`) are spread, the others
          counted as tied. Continuous scores get the expected step sum of a random order
          inside each bin, discrete ones (rounded scores, exact 0 and 1) scikit-learn's rule
          for equal scores. With explicit ``thresholds`` it is ``"tied"``, the rule of
          torchmetrics' and Keras' binned values;
        * ``"tied"`` counts the samples of every bin as tied: exact when every bin holds one
          value (``exact()``), as scikit-learn counts equal scores;
        * ``"spread"`` spreads the positives and negatives of every bin evenly through it
          (p = 0 and p = 1 keep their own bins): closest for continuous scores, further off
          when bins hold repeated values.

        Classes whose every score was its bin's value are exact whatever ``within_bins``.
        """
        if within_bins not in ("auto", "tied", "spread"):
            raise ValueError(
                f"`within_bins` must be 'auto', 'tied' or 'spread', got {within_bins!r}."
            )
        average = self._default_average(average)
        if not self._snapshot()["calibration"][:, 0].any():
            # Nothing counted: the 0/0 value of every class (not scikit-learn's 0.0 for a class
            # without positives, which needs samples of other classes to be meaningful).
            _warn_empty("Average precision")
            nan: float | np.ndarray = float("nan")
            if average is None and self._task != "binary":
                nan = np.full(self._num_classes, np.nan)
            result = Bounded(nan, nan, nan)
            return result if with_bound else result.value
        if within_bins == "tied" or (within_bins == "auto" and self._thresholds is not None):
            result = Bounded(*self._view(_ap_view, average))
        else:
            snap = self._snapshot()
            spread = self._binning.spread()
            if within_bins == "auto":
                curves = snap["curves"]
                spread = spread & _curves.continuous_bins(curves[:, :, 1], curves[:, :, 0])
            result = Bounded(*_ap_view(snap, average, spread))
        return result if with_bound else result.value

    def _point(
        self, target: _curves.Target, constraint: float, label: int | None, with_bound: bool
    ) -> Any:
        pos, neg, exact = self._hist(self._snapshot())
        indices = (
            [self._class(label)]
            if (label is not None or self._task == "binary")
            else (range(self._num_classes))
        )
        results = [
            _curves.operating_point(
                pos[i],
                neg[i],
                self._binning.reported_thresholds(bool(exact[i])),
                target,
                constraint,
                exact=exact[i],
            )
            for i in indices
        ]
        if label is not None or self._task == "binary":
            point, bound = results[0]
            return (point, bound) if with_bound else point
        point = OperatingPoint(
            np.array([r[0].value for r in results]), np.array([r[0].threshold for r in results])
        )
        bound = Bounded(
            point.value,
            np.array([r[1].lower for r in results]),
            np.array([r[1].upper for r in results]),
        )
        return (point, bound) if with_bound else point

    def precision_at_recall(
        self, min_recall: float, label: int | None = None, *, with_bound: bool = False
    ) -> Any:
        """``OperatingPoint(precision, threshold)``: the highest precision at a threshold
        whose recall is ``>= min_recall`` (per class unless ``label`` is given). With
        ``with_bound=True`` also the ``Bounded`` interval of the best value; see
        :func:`metricstream.metrics.curves.operating_point`."""
        return self._point("precision_at_recall", min_recall, label, with_bound)

    def recall_at_precision(
        self, min_precision: float, label: int | None = None, *, with_bound: bool = False
    ) -> Any:
        """The highest recall at a threshold whose precision is ``>= min_precision``."""
        return self._point("recall_at_precision", min_precision, label, with_bound)

    def sensitivity_at_specificity(
        self, min_specificity: float, label: int | None = None, *, with_bound: bool = False
    ) -> Any:
        """The highest sensitivity (TPR) at a threshold whose specificity is
        ``>= min_specificity``."""
        return self._point("sensitivity_at_specificity", min_specificity, label, with_bound)

    def specificity_at_sensitivity(
        self, min_sensitivity: float, label: int | None = None, *, with_bound: bool = False
    ) -> Any:
        """The highest specificity at a threshold whose sensitivity is ``>= min_sensitivity``."""
        return self._point("specificity_at_sensitivity", min_sensitivity, label, with_bound)

    def best_threshold(
        self,
        criterion: _curves.Criterion = "f1",
        label: int | None = None,
        *,
        with_bound: bool = False,
    ) -> Any:
        """``OperatingPoint(value, threshold)`` maximising F1 (``criterion="f1"``) or Youden's
        J = TPR - FPR (``"youden"``)."""
        if criterion not in ("f1", "youden"):
            raise ValueError(f"`criterion` must be 'f1' or 'youden', got {criterion!r}.")
        return self._point(criterion, 0.0, label, with_bound)

    def confusion_at(self, threshold: float, label: int | None = None) -> ConfusionAccumulator:
        """The 2x2 confusion matrix (rows true 0/1, columns predicted 0/1) at ``threshold``
        of the positive class (binary) or of class ``label`` against the rest, as a
        :class:`~metricstream.ConfusionAccumulator` with every metric of a confusion matrix.

        A sample is predicted positive when its bin is at or above the bin of ``threshold``:
        exactly ``score >= threshold`` when the threshold is a bin value (see
        :meth:`bin_values`; every 16-bit score is one) or a threshold returned by the curves or
        the operating points (multiclass logits: of the softmax probability).
        """
        index = self._class(label)
        pos, neg, _ = self._hist(self._snapshot())
        matrix = _curves.confusion_at(pos[index], neg[index], self.bin_index(threshold))
        if not self._weighted:
            matrix = matrix.astype(np.int64)
        return ConfusionAccumulator.from_matrix(matrix, weighted=self._weighted)

    def multilabel_confusion_matrix(self, threshold: float) -> np.ndarray:
        """``(C, 2, 2)`` one-vs-rest matrices ``[[TN, FP], [FN, TP]]`` at ``threshold``, as
        ``sklearn.metrics.multilabel_confusion_matrix``."""
        pos, neg, _ = self._hist(self._snapshot())
        index = self.bin_index(threshold)
        result = np.stack(
            [_curves.confusion_at(pos[i], neg[i], index) for i in range(self._num_classes)]
        )
        return result if self._weighted else result.astype(np.int64)

    # ------------------------------------------------------------------ calibration
    def reliability_diagram(self, n_bins: int = 15) -> ReliabilityDiagram:
        """Weight, accuracy and mean confidence per confidence bin (``n_bins`` must divide
        ``calibration_bins``); see :mod:`metricstream.metrics.calibration`. Multiclass uses
        the top-label confidence; binary and multilabel the positive-class probability against
        the fraction of positives (scikit-learn's ``calibration_curve``)."""
        diagram = ReliabilityDiagram(*self._view(_diagram_view, n_bins))
        if not diagram.counts.any():
            _warn_empty("The reliability diagram (accuracy and confidence per bin)")
        return diagram

    def calibration_error(self, n_bins: int = 15, norm: Norm = "l1") -> float:
        """Expected calibration error (``norm="l1"``; ``"l2"``) or the maximum one
        (``"max"``) over ``n_bins`` equal-width bins; see
        :func:`metricstream.metrics.calibration.calibration_error`."""
        snap = self._snapshot()
        return _calibration.calibration_error(
            snap["calibration"][:, 0], snap["calibration"][:, 1], snap["confidence"], n_bins, norm
        )

    def max_calibration_error(self, n_bins: int = 15) -> float:
        """Maximum calibration error, ``calibration_error(n_bins, norm="max")``."""
        return self.calibration_error(n_bins, "max")

    def brier_score(self) -> float:
        """Mean squared error of the probabilities: ``mean (p - y)^2`` (binary, per label for
        multilabel) or ``mean sum_c (p_c - [c == y])^2`` (multiclass), as scikit-learn's
        ``brier_score_loss``; an exact running sum, not binned. NaN (with a warning) when
        empty."""
        snap = self._snapshot()
        return _calibration.mean_loss(
            snap["losses"][0], snap["calibration"][:, 0].sum(), "Brier score"
        )

    def log_loss(self) -> float:
        """Mean negative log-likelihood, as scikit-learn's ``log_loss`` (probabilities clipped
        to ``[eps, 1 - eps]`` with ``eps`` of their float type; from logits the loss of a sample
        is ``logsumexp(s) - s_true``, or its sigmoid form, clipped at ``-log(eps)`` of float64
        = 36.04 as scikit-learn clips float64 probabilities, so that a ``-inf`` true-class
        logit counts 36.04); an exact running sum. NaN (with a warning) when empty."""
        snap = self._snapshot()
        return _calibration.mean_loss(
            snap["losses"][1], snap["calibration"][:, 0].sum(), "Log loss"
        )

    # ------------------------------------------------------------------ top-k
    def _ranks(self, ties: Ties) -> np.ndarray:
        if self._task != "multiclass":
            raise ValueError(f"top-k accuracy needs task='multiclass', not {self._task!r}.")
        if ties not in ("sklearn", "optimistic"):
            raise ValueError(f"`ties` must be 'sklearn' or 'optimistic', got {ties!r}.")
        return self._snapshot()["ranks"][0 if ties == "sklearn" else 1]

    def top_k_accuracy(self, k: int | None = None, *, ties: Ties = "sklearn") -> float | np.ndarray:
        """Fraction of samples whose true class is among the ``k`` highest scores, for every
        k at once when ``k`` is None. ``ties="sklearn"`` ranks tied classes as
        ``top_k_accuracy_score`` (higher class index first); ``"optimistic"`` ranks the true
        class before every class tied with it (Keras' ``in_top_k``). See
        :mod:`metricstream.metrics.topk`."""
        return _topk.top_k_accuracy(self._ranks(ties), k)

    def top_k_recall(self, k: int, *, ties: Ties = "sklearn") -> np.ndarray:
        """Per class, the fraction of its samples ranked within the top ``k``."""
        return _topk.top_k_recall(self._ranks(ties), k)

    def rank_histogram(self, *, ties: Ties = "sklearn") -> np.ndarray:
        """``(C, C)``: samples of true class ``t`` (rows) whose class was ranked ``r``."""
        return self._ranks(ties).copy()

    # ------------------------------------------------------------------ plots
    def plot_roc(self, ax: Any = None, **kwargs: Any) -> Any:
        """ROC curves of every class in one figure; see
        :func:`metricstream.plotting.scores.plot_roc`."""
        from ..plotting.scores import plot_roc

        return plot_roc(self, ax=ax, **kwargs)

    def plot_precision_recall(self, ax: Any = None, **kwargs: Any) -> Any:
        """Precision-recall curves of every class in one figure; see
        :func:`metricstream.plotting.scores.plot_precision_recall`."""
        from ..plotting.scores import plot_precision_recall

        return plot_precision_recall(self, ax=ax, **kwargs)

    def plot_calibration(self, n_bins: int = 15, ax: Any = None, **kwargs: Any) -> Any:
        """The reliability diagram; see :func:`metricstream.plotting.scores.plot_calibration`."""
        from ..plotting.scores import plot_calibration

        return plot_calibration(self, n_bins=n_bins, ax=ax, **kwargs)


def _warn_empty(what: str) -> None:
    warnings.warn(
        f"{what} is undefined (NaN): no samples were counted.",
        UndefinedMetricWarning,
        stacklevel=caller_stacklevel(),
    )


def _warn_probabilities(task: str) -> None:
    what = (
        "every score lies in [0, 1] and every sample's scores sum to 1"
        if task == "multiclass"
        else "every score lies in [0, 1]"
    )
    warnings.warn(
        f"the scores look like probabilities ({what}), but the accumulator was created with "
        f"`logits=True`, which applies a {'softmax' if task == 'multiclass' else 'sigmoid'} "
        f"to them; create it without `logits=True` for probabilities.",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


# ---------------------------------------------------------------------- cached view functions
def _auroc_view(snap: dict[str, np.ndarray], average: CurveAverage) -> Bounded:
    curves = snap["curves"]
    pos, neg = curves[:, :, 1], curves[:, :, 0]
    if pos.shape[0] == 1:
        pos, neg = pos[0], neg[0]
    return _curves.auroc_bounds(pos, neg, exact=snap["inexact"] == 0, average=average)


def _ap_view(
    snap: dict[str, np.ndarray], average: CurveAverage, spread: np.ndarray | None = None
) -> Bounded:
    curves = snap["curves"]
    pos, neg = curves[:, :, 1], curves[:, :, 0]
    if pos.shape[0] == 1:
        pos, neg = pos[0], neg[0]
    return _curves.average_precision_bounds(
        pos, neg, exact=snap["inexact"] == 0, average=average, spread=spread
    )


def _diagram_view(snap: dict[str, np.ndarray], n_bins: int) -> ReliabilityDiagram:
    return _calibration.reliability_diagram(
        snap["calibration"][:, 0], snap["calibration"][:, 1], snap["confidence"], n_bins
    )


# ---------------------------------------------------------------------- configuration helpers
def _with_uniform_key(state: dict[str, Any]) -> dict[str, Any]:
    """Format 1 -> 2: the key those states were counted with, the uniform key of their
    budget (the finest that fits; the same shift for logits)."""
    config = state["config"]
    if not isinstance(config, dict):
        raise ValueError("`state` has no configuration dict.")
    config = dict(config)
    bins = config.get("bins")
    shifts = None
    if bins is not None:
        if (
            isinstance(bins, bool)
            or not isinstance(bins, (int, np.integer))
            or not MIN_BINS <= bins <= MAX_BINS
        ):
            raise ValueError(f"`state` has a bad 'bins' entry: {bins!r}.")
        if config.get("logits"):
            shift = 32 - int(bins).bit_length() + 1
        else:
            shift = 1
            while int(_k.probability_key_layout(shift)[1]) + 1 > bins:
                shift += 1
        shifts = [shift, shift, shift]
    config["key_shifts"] = shifts
    return {**state, "config": config}


def _rank_by_softmax(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2 -> 3: unchanged, except multiclass logits, whose curves were counted on the
    raw logits (a ranking that is not the softmax's): refused."""
    config = state["config"]
    if isinstance(config, dict) and config.get("task") == "multiclass" and config.get("logits"):
        raise ValueError(
            "this state of multiclass logits was saved by an earlier version, which ranked "
            "the raw logits for its curves instead of their softmax probabilities; its "
            "curves cannot be converted: count the scores again."
        )
    return state


def _upper_total(array: np.ndarray) -> int:
    """At least the exact total of a non-negative int64 array: its float64 sum raised by more
    than that sum's rounding error, or, near 2**63, the exact total (:func:`exact_total`)."""
    estimate = float(array.sum(dtype=np.float64))
    if estimate < 2.0**62:
        return int(estimate * (1.0 + 2.0**-40)) + 1
    return exact_total(array)


def _show(value: np.generic) -> str:
    """A value as its dtype prints it (float32 1.8, not 1.7999999523162842)."""
    return str(value) if isinstance(value, np.floating) else repr(value.item())


def _unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    if not shape:
        return (index,)
    return tuple(int(i) for i in np.unravel_index(index, shape))
