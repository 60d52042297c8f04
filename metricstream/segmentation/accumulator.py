"""Segmentation evaluation in one pass: the dataset-level K×K matrix and per-image aggregation.

:class:`SegmentationAccumulator` counts batches of whole images. Each update runs one kernel
pass (:mod:`metricstream.segmentation._kernels`) that adds every pixel to the dataset-level
matrix (what mmsegmentation and PaddleSeg report) and, per image, the per-class IoU, Dice and
accuracy and the class-averaged values of the image (what MONAI, torchmetrics' samplewise modes
and most medical-imaging papers report) to running sums: O(K²) state, whatever the number of
images. Views compute either aggregation, under any absent-class rule
(:mod:`metricstream.segmentation.absent`), from the same state.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from .._inputs import kernel_view
from ..base import Accumulator
from ..exceptions import UndefinedMetricWarning, caller_stacklevel
from . import _kernels as _k
from .absent import AbsentRule, reproduce, resolve_rule

__all__ = ["SegmentationAccumulator"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A state array's total must stay an int64 (the base refuses merges past this, too).
_TOTAL_LIMIT = 2.0**63 - 2.0**20
# Two threads pay off from about this many pixels per batch (each takes whole images).
_PARALLEL_MIN_PIXELS = 1 << 17
_FIXED_LOW = 2.0**-_k.FIXED_BITS
_FIXED_HIGH = 2.0 ** (_k.HALF_BITS - _k.FIXED_BITS)
_METRICS = ("iou", "dice", "accuracy")
_DATASET_AVERAGES = ("none", "macro", "micro", "weighted")
_IMAGE_AVERAGES = ("none", "macro", "micro", "weighted", "class_mean", "pooled")
_EMPTY_PLACEHOLDER: dict[np.dtype, np.ndarray] = {
    np.dtype(np.uint8): np.empty((0, 0), dtype=np.uint8),
    np.dtype(np.int64): np.empty((0, 0), dtype=np.int64),
}
_NO_SCORES = np.empty((0, 0, 0), dtype=np.float32)
_NO_MATRICES = np.empty((0, 0, 0), dtype=np.int64)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _get_pool(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < workers:  # type: ignore[attr-defined]
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="metricstream-seg")
        return _pool


@dataclass(frozen=True)
class _Batch:
    truth: np.ndarray  # (B, P) uint8 or int64
    pred: np.ndarray  # (B, P) labels of truth's dtype, or an empty placeholder
    scores: np.ndarray  # (B, K, P) or (B, P, K) float32, or an empty placeholder
    mode: int
    images: int
    pixels: int
    # for error messages: the arrays as given, and the image shape
    original_truth: np.ndarray
    original_pred: np.ndarray
    image_shape: tuple[int, ...]
    class_axis: int
    ignore: int | None  # the kernel's ignore value (None: no pixel is ignored)


@dataclass(frozen=True)
class _Matrices:
    matrices: np.ndarray  # (B, K, K) int64, C-contiguous: each image's own confusion matrix


def _state_specs(k: int) -> dict[str, tuple[tuple[int, ...], Any]]:
    return {
        "matrix": ((k, k), np.int64),
        "class_counts": ((4, k), np.int64),
        "iou_sums": ((4, k), np.int64),
        "dice_sums": ((4, k), np.int64),
        "accuracy_sums": ((4, k), np.int64),
        "image_counts": ((2, _k.NUM_IMAGE_COUNTS), np.int64),
        "image_sums": ((2, 4, _k.NUM_SLOTS), np.int64),
        "images": ((2,), np.int64),
    }


def _fixed(words: np.ndarray) -> np.ndarray:
    """The float value of fixed-point sums ``(high, low)`` along the first axis."""
    return words[0].astype(np.float64) * _FIXED_HIGH + words[1].astype(np.float64) * _FIXED_LOW


class SegmentationAccumulator(Accumulator):
    """Dataset-level and per-image IoU, Dice and accuracy of semantic segmentation, one pass.

    Every ``update(y_true, y_pred)`` takes a batch of **whole images**: ``y_true`` of shape
    ``(B, H, W)`` (or ``(B, D, H, W)`` volumes, any number of spatial axes) holds class labels;
    ``y_pred`` holds labels of the same shape, or scores/logits with a class axis
    (``class_axis``: 1 for ``(B, C, H, W)``, -1 for ``(B, H, W, C)``) whose argmax is taken in
    the kernel. The first axis is always the image axis: an image cannot be split across
    updates (stream the tiles of a large image by stitching them first, or count them with
    ``ConfusionAccumulator`` if only the dataset-level numbers are needed).

    Views (``iou``, ``dice``, ``accuracy``, ``interval``, ``summary``, ``reproduce``) give:

    * ``aggregation="dataset"``: from the K×K matrix of every pixel of every image;
    * ``aggregation="image"``: each image's values first, then their mean over images.

    Args:
        num_classes: K; labels are integers in ``[0, K)``.
        class_names: optional K unique names for reports.
        ignore_index: a true label whose pixels are left out of both aggregations (e.g. 255).
        background: the class that ``include_background=False`` leaves out (0 by default, as
            MONAI and torchmetrics assume); None if there is none.
        class_axis: the class axis of score inputs (1 or -1; any axis of the scores).

    Example:
        >>> import numpy as np
        >>> acc = SegmentationAccumulator(num_classes=2)
        >>> truth = np.array([[[0, 0], [1, 1]], [[0, 0], [0, 0]]])
        >>> pred = np.array([[[0, 0], [1, 0]], [[0, 0], [0, 1]]])
        >>> acc.update(truth, pred).iou("dataset", "none").round(4).tolist()
        [0.7143, 0.3333]
        >>> acc.iou("image", "none").round(4).tolist()  # image 2: class 1 only predicted
        [0.7083, 0.25]
    """

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        *,
        background: int | None = 0,
        class_axis: int = 1,
    ) -> None:
        self._num_classes = _check_int(num_classes, "num_classes")
        if not 1 <= self._num_classes <= 65535:
            raise ValueError(
                f"`num_classes` must be in [1, 65535], got {num_classes} (the per-image matrix "
                f"is K×K)."
            )
        self._class_names = _check_class_names(class_names, self._num_classes)
        if ignore_index is None:
            self._ignore_index = None
        else:
            self._ignore_index = _check_int(ignore_index, "ignore_index")
            if not _INT64_MIN <= self._ignore_index <= _INT64_MAX:
                raise ValueError(f"`ignore_index` must fit in int64, got {ignore_index}.")
        if background is None:
            self._background: int | None = None
        else:
            self._background = _check_int(background, "background")
            if not 0 <= self._background < self._num_classes:
                raise ValueError(
                    f"`background` must be a class in [0, {self._num_classes}) or None, got "
                    f"{background}."
                )
        self._class_axis = _check_int(class_axis, "class_axis")
        if not -32 <= self._class_axis < 32:
            raise ValueError(f"`class_axis` must be an axis in [-32, 32), got {class_axis}.")
        super().__init__(_state_specs(self._num_classes))

    def config(self) -> dict[str, Any]:
        """``num_classes``, ``class_names``, ``ignore_index``, ``background``, ``class_axis``."""
        return {
            "num_classes": self._num_classes,
            "class_names": None if self._class_names is None else list(self._class_names),
            "ignore_index": self._ignore_index,
            "background": self._background,
            "class_axis": self._class_axis,
        }

    @property
    def num_classes(self) -> int:
        """K."""
        return self._num_classes

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """The class names, or None."""
        return self._class_names

    @property
    def ignore_index(self) -> int | None:
        """The true label whose pixels are skipped, or None."""
        return self._ignore_index

    @property
    def background(self) -> int | None:
        """The class left out by ``include_background=False``, or None."""
        return self._background

    @property
    def matrix(self) -> np.ndarray:
        """The dataset-level K×K matrix (rows true, columns predicted), a read-only snapshot."""
        return self._snapshot()["matrix"]

    @property
    def num_images(self) -> int:
        """Images counted so far."""
        return int(self._snapshot()["images"][0])

    @property
    def num_empty_images(self) -> int:
        """Images with no pixel left after ``ignore_index`` (every class absent from both)."""
        return int(self._snapshot()["images"][1])

    @property
    def num_pixels(self) -> int:
        """Pixels counted (``ignore_index`` pixels excluded)."""
        return int(self._snapshot()["matrix"].sum())

    def absent_counts(self) -> dict[str, np.ndarray]:
        """Per class, the number of images in each case: ``present``, ``truth_only``,
        ``pred_only``, ``both_absent`` (see :mod:`metricstream.segmentation.absent`)."""
        counts = self._snapshot()["class_counts"]
        return {
            "present": counts[_k.PRESENT].copy(),
            "truth_only": counts[_k.TRUTH_ONLY].copy(),
            "pred_only": counts[_k.PRED_ONLY].copy(),
            "both_absent": counts[_k.BOTH_ABSENT].copy(),
        }

    # ------------------------------------------------------------------ counting
    def _prepare(self, y_true: Any, y_pred: Any, weights: Any = None) -> _Batch:
        if weights is not None:
            raise TypeError(
                "`weights` are not supported by SegmentationAccumulator: every pixel counts "
                "once (leave pixels out with `ignore_index`)."
            )
        truth = _read(y_true, "y_true")
        pred = _read(y_pred, "y_pred")
        if truth.ndim < 2:
            raise ValueError(
                f"`y_true` must have an image axis first, (B, H, W) or (B, D, H, W); got shape "
                f"{truth.shape}. Add one with y_true[None] for a single image."
            )
        truth_labels = _labels(truth, "y_true")
        images = truth.shape[0]
        image_shape = truth.shape[1:]
        pixels = int(np.prod(image_shape, dtype=np.int64))
        k = self._num_classes
        if pred.ndim == truth.ndim:
            if pred.shape != truth.shape:
                raise ValueError(
                    f"`y_pred` has shape {pred.shape} but `y_true` has {truth.shape}; labels must "
                    f"match pixel for pixel (scores need a class axis)."
                )
            pred_labels = _labels(pred, "y_pred")
            return self._label_batch(truth_labels, pred_labels, truth, pred, pixels)
        if pred.ndim != truth.ndim + 1:
            raise ValueError(
                f"`y_pred` must have `y_true`'s shape {truth.shape} (labels) or one more axis "
                f"(scores), got shape {pred.shape}."
            )
        axis = self._class_axis
        if not -pred.ndim <= axis < pred.ndim or axis % pred.ndim == 0:
            raise ValueError(
                f"`class_axis` {axis} is not an axis of `y_pred` (shape {pred.shape}) after the "
                f"image axis."
            )
        axis %= pred.ndim
        if pred.shape[axis] != k:
            raise ValueError(
                f"`y_pred` has {pred.shape[axis]} scores on `class_axis` {self._class_axis} "
                f"(shape {pred.shape}), but `num_classes` is {k}."
            )
        rest = pred.shape[:axis] + pred.shape[axis + 1 :]
        if rest != truth.shape:
            raise ValueError(
                f"`y_pred` scores of shape {pred.shape} (classes on axis {axis}) do not match "
                f"`y_true` of shape {truth.shape}."
            )
        if pred.dtype.kind not in "biuf":
            raise TypeError(f"`y_pred` scores must be numeric, got dtype {pred.dtype}.")
        pred = kernel_view(pred)  # one compiled kernel per dtype (see `_labels`)
        if pred.dtype != np.float32:
            # numpy's argmax, on the scores as given (a float32 copy could tie two scores).
            if pred.dtype.kind == "f":
                nan = np.isnan(pred)
                if nan.any():
                    where = np.argwhere(np.moveaxis(nan, axis, -1))[0]
                    _raise_nan(where, image_shape)
            arg = np.argmax(pred, axis=axis)
            arg = arg.astype(np.uint8 if k <= 255 else np.int64)
            return self._label_batch(truth_labels, arg, truth, pred, pixels)
        if axis == 1:
            scores = np.ascontiguousarray(pred).reshape(images, k, pixels)
            mode = _k.CHANNELS_FIRST
        else:
            scores = np.ascontiguousarray(np.moveaxis(pred, axis, -1)).reshape(images, pixels, k)
            mode = _k.CHANNELS_LAST
        kernel_truth, ignore = self._kernel_labels(truth_labels, "y_true", truth)
        flat = np.ascontiguousarray(kernel_truth).reshape(images, pixels)
        return _Batch(
            flat,
            _EMPTY_PLACEHOLDER[flat.dtype],
            scores,
            mode,
            images,
            pixels,
            truth,
            pred,
            image_shape,
            axis,
            ignore,
        )

    def _label_batch(
        self,
        truth: np.ndarray,
        pred: np.ndarray,
        original_truth: np.ndarray,
        original_pred: np.ndarray,
        pixels: int,
    ) -> _Batch:
        truth, ignore = self._kernel_labels(truth, "y_true", original_truth)
        pred, _ = self._kernel_labels(pred, "y_pred", original_pred)
        images = truth.shape[0]
        return _Batch(
            np.ascontiguousarray(truth).reshape(images, pixels),
            np.ascontiguousarray(pred).reshape(images, pixels),
            _NO_SCORES,
            _k.LABELS,
            images,
            pixels,
            original_truth,
            original_pred,
            original_truth.shape[1:],
            0,
            ignore,
        )

    def _kernel_labels(
        self, array: np.ndarray, name: str, original: np.ndarray
    ) -> tuple[np.ndarray, int | None]:
        """``array`` as the kernels take labels, and the kernel's ignore value.

        uint8 whenever K <= 255 (one compiled kernel for every label dtype; uint8 masks are
        read as they are, other dtypes are checked here and narrowed), else int64. A true
        ``ignore_index`` that uint8 cannot hold becomes 255, which no label < K <= 255 uses.
        """
        k = self._num_classes
        ignore = self._ignore_index if name == "y_true" else None
        if k > 255:
            return array.astype(np.int64, copy=False), ignore
        if array.dtype == np.uint8:
            return array, ignore if ignore is not None and 0 <= ignore <= 255 else None
        if array.size and (int(array.min()) < 0 or int(array.max()) >= k):
            outside = (array < 0) | (array >= k)
            if ignore is not None:
                outside &= array != ignore
            if outside.any():
                self._raise_label(name, original, int(np.argmax(outside.reshape(-1))))
        narrow = array.astype(np.uint8)
        if ignore is None or 0 <= ignore <= 255:
            return narrow, ignore
        narrow[array == ignore] = 255
        return narrow, 255

    def update_from_matrices(self, matrices: Any) -> SegmentationAccumulator:
        """Count images given by their own K×K confusion matrices (rows true, columns
        predicted, ``ignore_index`` pixels already left out); returns ``self``.

        ``matrices`` is ``(K, K)`` for one image or ``(B, K, K)``, of non-negative whole
        counts. This is how the tiles of an image too large for one array are streamed: count
        its tiles into a ``ConfusionAccumulator`` (any split is fine there), then add that
        image with ``update_from_matrices(tiles.matrix)``. Each image adds exactly what
        :meth:`update` adds for the same pixels. A bad matrix raises and counts nothing.
        """
        batch = self._prepare_matrices(matrices)
        with self._lock:
            self._count(self._arrays, batch)
            self._changed()
        return self

    def _prepare_matrices(self, matrices: Any) -> _Matrices:
        array = _read(matrices, "matrices")
        k = self._num_classes
        if array.ndim == 2:
            array = array[None]
        if array.ndim != 3 or array.shape[1:] != (k, k):
            raise ValueError(
                f"`matrices` must be ({k}, {k}) or (B, {k}, {k}) confusion matrices, got shape "
                f"{array.shape}."
            )
        if array.dtype.kind == "f":
            if not np.isfinite(array).all() or not np.array_equal(array, np.round(array)):
                bad = np.argwhere(~np.isfinite(array) | (array != np.round(array)))[0]
                raise ValueError(
                    f"`matrices` holds {array[tuple(bad)].item()!r} at {tuple(int(i) for i in bad)}"
                    f"; counts must be whole numbers."
                )
        elif array.dtype.kind not in "biu":
            raise TypeError(f"`matrices` must hold counts, got dtype {array.dtype}.")
        if array.size and (array < 0).any():
            bad = np.argwhere(array < 0)[0]
            raise ValueError(
                f"`matrices` holds {array[tuple(bad)].item()!r} at {tuple(int(i) for i in bad)}; "
                f"counts are non-negative."
            )
        totals = array.reshape(array.shape[0], -1).sum(axis=1, dtype=np.float64)
        if totals.size and totals.max() >= 2.0**62:
            raise ValueError("`matrices` holds an image of 2**62 or more pixels, beyond int64.")
        return _Matrices(np.ascontiguousarray(array, dtype=np.int64))

    def _count(self, arrays: dict[str, np.ndarray], batch: _Batch | _Matrices) -> None:
        parts = self._run(batch)
        # Commit only when every array stays within int64 (all state is non-negative).
        for name, part in parts.items():
            total = float(arrays[name].sum(dtype=np.float64)) + float(part.sum(dtype=np.float64))
            if total >= _TOTAL_LIMIT:
                raise ValueError(
                    f"counting this batch would take the total of state {name!r} to 2**63 or "
                    f"more, beyond int64; nothing was counted."
                )
        for name, part in parts.items():
            arrays[name] += part

    def _run(self, batch: _Batch | _Matrices) -> dict[str, np.ndarray]:
        """The batch's state, counted into fresh arrays (threads take whole images)."""
        if isinstance(batch, _Matrices):
            specs = _state_specs(self._num_classes)
            part = {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in specs.items()}
            background = -1 if self._background is None else self._background
            labels = _EMPTY_PLACEHOLDER[
                np.dtype(np.uint8 if self._num_classes <= 255 else np.int64)
            ]
            _k.count_images(
                labels,
                labels,
                _NO_SCORES,
                batch.matrices,
                _k.MATRICES,
                False,
                np.int64(0),
                background,
                0,
                batch.matrices.shape[0],
                *part.values(),
            )
            return part
        has_ignore = batch.ignore is not None
        ignore_value = np.int64(0 if batch.ignore is None else batch.ignore)
        background = -1 if self._background is None else self._background
        images = batch.images
        threads = 1
        if images > 1 and images * batch.pixels >= _PARALLEL_MIN_PIXELS:
            from .. import get_num_threads

            threads = max(1, min(get_num_threads(), images, os.cpu_count() or 1))
        bounds = np.linspace(0, images, threads + 1).astype(np.int64)
        specs = _state_specs(self._num_classes)

        def work(index: int) -> tuple[tuple[int, int, int], dict[str, np.ndarray]]:
            part = {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in specs.items()}
            status = _k.count_images(
                batch.truth,
                batch.pred,
                batch.scores,
                _NO_MATRICES,
                batch.mode,
                has_ignore,
                ignore_value,
                background,
                int(bounds[index]),
                int(bounds[index + 1]),
                *part.values(),
            )
            return status, part

        if threads == 1:
            results = [work(0)]
        else:
            pool = _get_pool(threads - 1)
            futures = [pool.submit(work, index) for index in range(1, threads)]
            results = [work(0)] + [future.result() for future in futures]
        for (status, image, pixel), _ in results:
            if status != _k.OK:
                self._raise_bad(batch, status, image, pixel)
        total = results[0][1]
        for _, part in results[1:]:
            for name, array in part.items():
                total[name] += array
        return total

    def _raise_bad(self, batch: _Batch, status: int, image: int, pixel: int) -> None:
        if status == _k.BAD_SCORE:
            where = (image, *(int(i) for i in np.unravel_index(pixel, batch.image_shape)))
            _raise_nan(np.array(where), batch.image_shape)
        name, array = (
            ("y_true", batch.original_truth)
            if status == _k.BAD_TRUE
            else ("y_pred", batch.original_pred)
        )
        self._raise_label(name, array, image * batch.pixels + pixel)

    def _raise_label(self, name: str, array: np.ndarray, flat: int) -> None:
        """Raise for the bad label at flat (C-order) index ``flat`` of ``array``."""
        where = tuple(int(i) for i in np.unravel_index(flat, array.shape))
        position = ", ".join(str(i) for i in where)
        ignore = "" if self._ignore_index is None else f" or `ignore_index` {self._ignore_index}"
        raise ValueError(
            f"`{name}` holds {array[where].item()!r} at [{position}] (image {where[0]}), outside "
            f"the labels [0, {self._num_classes}){ignore}; nothing of this batch was counted."
        )

    # ------------------------------------------------------------------ views
    def iou(
        self,
        aggregation: str = "dataset",
        average: str = "macro",
        *,
        include_background: bool = True,
        absent: str | AbsentRule = "skip_both",
    ) -> Any:
        """Intersection over union ``I / (T + P - I)`` per class, averaged.

        ``aggregation="dataset"``: ``I``, ``T``, ``P`` summed over every image (the dataset-level
        matrix). ``aggregation="image"``: the value of each image first, then the mean over the
        images.

        ``average``:

        * ``"none"``: per class (dataset: one value per class; image: each class's mean over
          the images in which the absent rule counts it);
        * ``"macro"``: the mean over classes (image: of each image, then over images);
        * ``"micro"``: ``ΣI / ΣU`` over the classes (image: of each image, then over images);
        * ``"weighted"``: the mean over classes weighted by truth pixels ``T`` (image: per
          image, over images whose truth is not empty);
        * image only: ``"class_mean"``, the mean over classes of the ``"none"`` values, and
          ``"pooled"``, the mean over every counted (image, class) pair at once.

        ``include_background=False`` leaves out the ``background`` class. ``absent`` is the rule
        for classes absent from an image (or from the whole dataset): a name of
        :data:`~metricstream.segmentation.absent.RULES` or an
        :class:`~metricstream.segmentation.absent.AbsentRule`; the per-image ``"macro"`` takes
        "skip_both", "skip_truth_absent", "both_absent_one", "both_absent_zero" or
        "both_absent_nan" (and any ``empty``). 0/0 rule: a mean over nothing is the rule's
        ``empty`` (NaN by default); a per-class value the rule skips is NaN.
        """
        return self._metric("iou", aggregation, average, include_background, absent)

    def dice(
        self,
        aggregation: str = "dataset",
        average: str = "macro",
        *,
        include_background: bool = True,
        absent: str | AbsentRule = "skip_both",
    ) -> Any:
        """Dice (F1) ``2I / (T + P)`` per class, averaged; arguments as :meth:`iou`."""
        return self._metric("dice", aggregation, average, include_background, absent)

    def accuracy(
        self,
        aggregation: str = "dataset",
        average: str = "macro",
        *,
        include_background: bool = True,
        absent: str | AbsentRule = "skip_both",
    ) -> Any:
        """Per-class accuracy (recall) ``I / T``, averaged; arguments as :meth:`iou`.

        Defined where the class is in the truth only: pred-only and both-absent classes never
        enter it, whatever the rule (its ``truth_only`` and ``empty`` apply). ``"macro"`` is the
        mean accuracy (mAcc), ``"micro"`` the pixel accuracy ``ΣI / ΣT``.
        """
        return self._metric("accuracy", aggregation, average, include_background, absent)

    def pixel_accuracy(self, aggregation: str = "dataset") -> float:
        """Correct pixels over counted pixels, ``ΣI / ΣT``: of the dataset, or of each image
        then the mean over images. NaN when there is no counted pixel (or image)."""
        return float(self.accuracy(aggregation, "micro"))

    def _metric(
        self, metric: str, aggregation: str, average: str, background: bool, absent: Any
    ) -> Any:
        if aggregation not in ("dataset", "image"):
            raise ValueError(f"`aggregation` must be 'dataset' or 'image', got {aggregation!r}.")
        averages = _DATASET_AVERAGES if aggregation == "dataset" else _IMAGE_AVERAGES
        if average not in averages:
            raise ValueError(
                f"`average` must be one of {averages} with aggregation={aggregation!r}, got "
                f"{average!r}."
            )
        if not isinstance(background, bool):
            raise TypeError(f"`include_background` must be True or False, got {background!r}.")
        rule = resolve_rule(absent)
        return self._view(
            _compute, metric, aggregation, average, background, rule, self._background
        )

    def interval(
        self,
        metric: str = "iou",
        average: str = "macro",
        *,
        include_background: bool = True,
        absent: str | AbsentRule = "skip_both",
        confidence: float = 0.95,
    ) -> Any:
        """A t interval for a per-image mean, from the image-level sums (``MetricInterval``).

        The per-image values ``v_1..v_n`` (each image's mIoU for ``average="macro"``; each
        class's per-image values for ``"none"``) are independent across images even though the
        pixels within an image are not, so the mean's standard error is the images' sample
        standard deviation over ``√n``: with ``S1 = Σv`` and ``S2 = Σv²`` kept in the state,
        ``m = S1/n``, ``s² = (S2 − n·m²)/(n − 1)``, ``SE = s/√n`` and the interval is
        ``m ± t_{n−1, (1+confidence)/2} · SE``. ``average`` is "none", "macro", "micro" or
        "weighted"; a class or mean over fewer than 2 images has NaN bounds (and NaN SE).
        """
        if metric not in _METRICS:
            raise ValueError(f"`metric` must be one of {_METRICS}, got {metric!r}.")
        if average not in ("none", "macro", "micro", "weighted"):
            raise ValueError(
                f"`average` must be 'none', 'macro', 'micro' or 'weighted' for an interval, got "
                f"{average!r}."
            )
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
            raise TypeError(f"`confidence` must be a number in (0, 1), got {confidence!r}.")
        if not 0 < confidence < 1:
            raise ValueError(f"`confidence` must lie in (0, 1), got {confidence!r}.")
        if not isinstance(include_background, bool):
            raise TypeError(
                f"`include_background` must be True or False, got {include_background!r}."
            )
        rule = resolve_rule(absent)
        return self._view(
            _interval,
            metric,
            average,
            include_background,
            rule,
            float(confidence),
            self._background,
        )

    def reproduce(self, anchor: str, **options: Any) -> Any:
        """The value another library's metric class reports for these images, options
        included; see :func:`metricstream.segmentation.absent.reproduce`.

        Example:
            >>> import numpy as np
            >>> acc = SegmentationAccumulator(num_classes=3)
            >>> _ = acc.update(np.array([[[0, 1], [1, 1]]]), np.array([[[0, 1], [2, 1]]]))
            >>> round(acc.reproduce("monai.DiceMetric", include_background=False), 12)
            0.8
        """
        return reproduce(self, anchor, **options)

    def summary(self, format: str = "dict", *, digits: int = 4) -> dict | str:
        """Both aggregations side by side: ``format="dict"`` (JSON-ready) or ``"text"``.

        See :func:`metricstream.segmentation.report.summary`.
        """
        from . import report

        if format == "dict":
            return report.summary(self)
        if format == "text":
            return report.summary_text(self, digits=digits)
        raise ValueError(f"`format` must be 'dict' or 'text', got {format!r}.")

    # ------------------------------------------------------------------ anchors' special cases
    def _image_totals(
        self, metric: str, background: bool, rule: AbsentRule
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per included class, the sum of per-image values and the number of images counted."""
        state = self._snapshot()
        numerator, denominator, _, _ = _class_terms(state, metric, rule)
        keep = self._included(background)
        return numerator[keep], denominator[keep]

    def _dataset_weighted_dice_torchmetrics(self, background: bool) -> float:
        state = self._snapshot()
        inter, truth, pred = _dataset_counts(state["matrix"])
        keep = self._included(background)
        inter, truth, pred = inter[keep], truth[keep], pred[keep]
        with np.errstate(divide="ignore", invalid="ignore"):
            dice = 2.0 * inter / (truth + pred)
        if np.isnan(dice).all():
            return math.nan
        if truth.sum() == 0:
            return 0.0  # the weights T/ΣT are all NaN, and nansum gives 0
        return float(np.nansum(dice * (truth / truth.sum())))

    def _image_weighted_dice_torchmetrics(self, background: bool) -> float:
        state = self._snapshot()
        variant = 0 if background or self._background is None else 1
        counts = state["image_counts"][variant]
        sums = _fixed(state["image_sums"][variant])[_k.WEIGHTED_DICE]
        n = counts[_k.WEIGHTED_DICE] + counts[_k.PRED_ONLY_IMAGES]
        return float(sums / n) if n else math.nan

    def _included(self, background: bool) -> np.ndarray:
        return _included(self._num_classes, self._background, background)


def _included(num_classes: int, background_class: int | None, background: bool) -> np.ndarray:
    """Which classes a view averages: all, or all but the background class."""
    keep = np.ones(num_classes, dtype=bool)
    if not background and background_class is not None:
        keep[background_class] = False
    return keep


# ---------------------------------------------------------------------------- view functions
def _dataset_counts(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inter = np.diagonal(matrix).astype(np.float64)
    return inter, matrix.sum(axis=1).astype(np.float64), matrix.sum(axis=0).astype(np.float64)


def _values(metric: str, inter: np.ndarray, truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "iou":
            return inter / (truth + pred - inter)
        if metric == "dice":
            return 2.0 * inter / (truth + pred)
        return inter / truth


def _rule_terms(
    metric: str, rule: AbsentRule, both: Any, pred_only: Any, truth_only: Any
) -> tuple[Any, Any, Any]:
    """(added numerator, added denominator, NaN flag) of the absent cases under ``rule``."""
    numerator = 0.0 * both
    denominator = 0 * both
    if rule.truth_only == "zero":
        denominator = denominator + truth_only
    nan = both * 0 > 0
    if metric != "accuracy":
        if rule.pred_only == "zero":
            denominator = denominator + pred_only
        if rule.both_absent in ("zero", "one"):
            denominator = denominator + both
            if rule.both_absent == "one":
                numerator = numerator + both
        elif rule.both_absent == "nan":
            nan = both > 0
    return numerator, denominator, nan


def _class_terms(
    state: Any, metric: str, rule: AbsentRule
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per class over images: (Σv, number of values, NaN flag, Σv²) under ``rule``."""
    counts = state["class_counts"]
    words = state[f"{metric}_sums"]
    sums = _fixed(words[0:2])
    squares = _fixed(words[2:4])
    present = counts[_k.PRESENT].astype(np.float64)
    extra, denominator, nan = _rule_terms(
        metric,
        rule,
        counts[_k.BOTH_ABSENT].astype(np.float64),
        counts[_k.PRED_ONLY].astype(np.float64),
        counts[_k.TRUTH_ONLY].astype(np.float64),
    )
    return sums + extra, present + denominator, nan, squares + extra


def _mean(numerator: Any, denominator: Any, nan: Any, empty: float) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(denominator > 0, numerator / np.maximum(denominator, 1), empty)
    return np.where(nan, np.nan, value)


def _dataset_class_values(state: Any, metric: str, rule: AbsentRule) -> np.ndarray:
    """Per class, the dataset-level value under ``rule`` (the dataset as one image)."""
    inter, truth, pred = _dataset_counts(state["matrix"])
    present = (truth > 0) & (pred > 0)
    values = np.where(present, _values(metric, inter, truth, pred), 0.0)
    both = ((truth == 0) & (pred == 0)).astype(np.float64)
    extra, denominator, nan = _rule_terms(
        metric,
        rule,
        both,
        ((truth == 0) & (pred > 0)).astype(np.float64),
        ((truth > 0) & (pred == 0)).astype(np.float64),
    )
    return np.asarray(_mean(values + extra, present + denominator, nan, math.nan), np.float64)


def _nanmean(values: np.ndarray, empty: float) -> float:
    if np.isnan(values).any() and not np.isnan(values).all():
        values = values[~np.isnan(values)]
    if values.size == 0 or np.isnan(values).all():
        return empty
    return float(values.mean())


def _image_slot(metric: str, average: str, rule: AbsentRule) -> int:
    if average == "micro":
        return {"iou": _k.MICRO_IOU, "dice": _k.MICRO_DICE, "accuracy": _k.MICRO_ACCURACY}[metric]
    if average == "weighted":
        if metric == "accuracy":
            return _k.MICRO_ACCURACY  # Σ (I_c/T_c)·T_c / ΣT = ΣI/ΣT
        return _k.WEIGHTED_IOU if metric == "iou" else _k.WEIGHTED_DICE
    if metric == "accuracy":
        return _k.MACRO_ACCURACY
    key = (rule.both_absent, rule.pred_only, rule.truth_only)
    slots = {
        ("skip", "zero", "zero"): (_k.MACRO_IOU_SKIP_BOTH, _k.MACRO_DICE_SKIP_BOTH),
        ("nan", "zero", "zero"): (_k.MACRO_IOU_SKIP_BOTH, _k.MACRO_DICE_SKIP_BOTH),
        ("skip", "skip", "zero"): (_k.MACRO_IOU_SKIP_TRUTH, _k.MACRO_DICE_SKIP_TRUTH),
        ("one", "zero", "zero"): (_k.MACRO_IOU_ONE, _k.MACRO_DICE_ONE),
        ("zero", "zero", "zero"): (_k.MACRO_IOU_ONE, _k.MACRO_DICE_ONE),
    }
    if key not in slots:
        raise ValueError(
            f"the per-image 'macro' average is kept for the rules skip_both, skip_truth_absent, "
            f"both_absent_one, both_absent_zero and both_absent_nan, not for {rule}; use "
            f"average='class_mean' or 'pooled', or aggregation='dataset'."
        )
    return slots[key][0 if metric == "iou" else 1]


def _image_mean(
    state: Any, bg: int | None, metric: str, average: str, background: bool, rule: Any
) -> tuple[float, float, float]:
    """(Σv, n, Σv²) of a per-image average over images."""
    variant = 0 if background or bg is None else 1
    slot = _image_slot(metric, average, rule)
    counts = state["image_counts"][variant]
    sums = _fixed(state["image_sums"][variant][0:2])[slot]
    squares = _fixed(state["image_sums"][variant][2:4])[slot]
    n = float(counts[slot])
    if metric != "accuracy" and average == "macro" and rule.both_absent == "zero":
        # Each image's mean with both-absent classes as 1, less (its both-absent classes)/m.
        keep = _included(state["matrix"].shape[0], bg, background)
        both = float(state["class_counts"][_k.BOTH_ABSENT][keep].sum())
        sums -= both / max(int(keep.sum()), 1)
        squares = math.nan  # not kept for this rule
    return float(sums), n, float(squares)


def _compute(
    state: Any,
    metric: str,
    aggregation: str,
    average: str,
    background: bool,
    rule: AbsentRule,
    bg: int | None,
) -> Any:
    keep = _included(state["matrix"].shape[0], bg, background)
    if not state["matrix"].any():
        # Nothing counted: every value is 0/0 (the rule of every accumulator's views).
        warnings.warn(
            f"{metric} of a SegmentationAccumulator that has counted no pixel is undefined "
            f"(0/0); returning the absent-class rule's value.",
            UndefinedMetricWarning,
            stacklevel=caller_stacklevel(),
        )
    if aggregation == "dataset":
        if average in ("none", "macro"):
            values = _dataset_class_values(state, metric, rule)[keep]
            return values if average == "none" else _nanmean_rule(values, rule)
        inter, truth, pred = (part[keep] for part in _dataset_counts(state["matrix"]))
        if average == "micro":
            value = _values(metric, inter.sum(), truth.sum(), pred.sum())
            return float(value) if np.isfinite(value) else rule.empty
        total = truth.sum()
        if total == 0:
            return rule.empty
        values = np.where(truth > 0, _values(metric, inter, truth, pred), 0.0)
        return float((values * truth).sum() / total)
    if average in ("none", "class_mean", "pooled"):
        numerator, denominator, nan, _ = (part[keep] for part in _class_terms(state, metric, rule))
        if average == "pooled":
            if nan.any():
                return math.nan
            total = denominator.sum()
            return float(numerator.sum() / total) if total > 0 else rule.empty
        values = np.asarray(_mean(numerator, denominator, nan, rule.empty), np.float64)
        if average == "none":
            return values
        defined = denominator > 0
        if nan.any():
            return math.nan
        return float(values[defined].mean()) if defined.any() else rule.empty
    if metric != "accuracy" and average == "macro" and rule.both_absent == "nan":
        variant = 0 if background or bg is None else 1
        if state["image_counts"][variant][_k.BOTH_ABSENT_IMAGES] > 0:
            return math.nan
    sums, n, _ = _image_mean(state, bg, metric, average, background, rule)
    return sums / n if n > 0 else rule.empty


def _nanmean_rule(values: np.ndarray, rule: AbsentRule) -> float:
    if rule.both_absent == "nan" and np.isnan(values).any():
        return math.nan
    return _nanmean(values, rule.empty)


def _interval(
    state: Any,
    metric: str,
    average: str,
    background: bool,
    rule: AbsentRule,
    confidence: float,
    bg: int | None,
) -> Any:
    from .. import MetricInterval

    if average == "none":
        keep = _included(state["matrix"].shape[0], bg, background)
        numerator, n, nan, squares = (part[keep] for part in _class_terms(state, metric, rule))
        n = np.where(nan, 0.0, n)
    else:
        if metric != "accuracy" and average == "macro" and rule.both_absent == "zero":
            raise ValueError(
                "the per-image 'macro' interval is not kept for the rule both_absent_zero (its "
                "sums of squares are not in the state); use both_absent_one or skip_both."
            )
        total, count, square = _image_mean(state, bg, metric, average, background, rule)
        numerator, n, squares = np.array([total]), np.array([count]), np.array([square])
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, numerator / np.maximum(n, 1), np.nan)
        variance = np.where(
            n > 1, np.maximum(squares - n * mean * mean, 0.0) / np.maximum(n - 1, 1), np.nan
        )
        error = np.sqrt(variance / np.maximum(n, 1))
    quantile = np.array(
        [t_quantile((1 + confidence) / 2, d) if d >= 1 else math.nan for d in n - 1]
    )
    low = mean - quantile * error
    high = mean + quantile * error
    label = f"{metric}(aggregation='image', average={average!r}, include_background={background})"
    shown: list[Any] = [mean, low, high, error]
    if average != "none":
        shown = [float(x[0]) for x in shown]
    return MetricInterval(
        metric=label,
        estimate=shown[0],
        low=shown[1],
        high=shown[2],
        standard_error=shown[3],
        method="t",
        confidence=confidence,
        n_resamples=0,
        resampling=None,
        seed=None,
    )


# ---------------------------------------------------------------------------- Student's t
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float, y: float) -> float:
    """``I_x(a, b)``, with ``y = 1 - x`` given separately (computing it would cancel)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
    log_front += b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def _t_tail(t: float, df: float) -> float:
    """``P(T > t)`` for ``t >= 0``: half the regularized incomplete beta function."""
    square = t * t
    return 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + square), square / (df + square))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom: bisection on the CDF
    (the regularized incomplete beta function), a series in ``1/df`` from 1000 degrees of
    freedom on; within 1e-12 relative of ``scipy.stats.t.ppf``."""
    if not 0.0 < p < 1.0 or not df > 0:
        return math.nan
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df >= 1000:
        # Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5), within 3e-13 of the
        # quantile from 1000 degrees of freedom on, where differences of lgamma of large
        # arguments lose digits (4e-12 at 10^4).
        z = NormalDist().inv_cdf(p)
        z2 = z * z
        terms = (
            z * (z2 + 1.0) / 4.0,
            z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0,
            z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0,
            z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0,
        )
        return z + sum(term / df ** (power + 1) for power, term in enumerate(terms))
    tail = 1.0 - p  # bisect on the upper tail: no cancellation for p near 1
    low, high = 0.0, 1.0
    while _t_tail(high, df) > tail:
        high *= 2.0
        if high > 1e300:
            return math.inf
    for _ in range(2000):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        if _t_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


# ---------------------------------------------------------------------------- inputs
def _read(value: Any, name: str) -> np.ndarray:
    """A numpy array of ``value`` (numpy arrays, lists, CPU torch tensors through DLPack)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor
        value = value.detach()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()  # numpy has no bfloat16; float32 holds every value exactly
        if getattr(value, "device", None) is not None and str(value.device) != "cpu":
            raise TypeError(
                f"`{name}` is a tensor on {value.device}; move it to the CPU first (`.cpu()`)."
            )
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError):
            return np.asarray(value)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"`{name}` cannot be read as an array: {error}") from None
    if array.dtype == object:
        raise TypeError(f"`{name}` must be a numeric array, not ragged or object data.")
    return array


def _labels(array: np.ndarray, name: str) -> np.ndarray:
    # Numba compiles read-only arrays as another type: one kernel per dtype, without a copy.
    array = kernel_view(array)
    if array.dtype == np.bool_:
        return array.view(np.uint8)
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"`{name}` must hold integer class labels, got dtype {array.dtype}; pass scores "
            f"with a class axis, or convert whole-number labels with .astype(int)."
        )
    return array


def _raise_nan(where: Any, image_shape: tuple[int, ...]) -> None:
    position = ", ".join(str(int(i)) for i in where[: 1 + len(image_shape)])
    raise ValueError(
        f"`y_pred` holds a NaN score at pixel [{position}] (image {int(where[0])}); the argmax "
        f"of NaN scores is undefined. Nothing of this batch was counted."
    )


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}.")
    return int(value)


def _check_class_names(names: Any, num_classes: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str):
        raise TypeError("`class_names` must be a sequence of strings, got a single string.")
    names = tuple(names)
    if len(names) != num_classes:
        raise ValueError(
            f"`class_names` has {len(names)} names, but `num_classes` is {num_classes}."
        )
    for position, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(
                f"`class_names` holds {name!r} at position {position}; names must be strings."
            )
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"`class_names` holds {duplicate!r} more than once; names must be unique.")
    return names
