"""Reports of a :class:`~metricstream.segmentation.SegmentationAccumulator`: the dataset-level
and the per-image aggregations side by side, labelled, and the hook of the command line's
report for ``.npz`` mask files.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "cli_arguments",
    "cli_enabled",
    "cli_section_data",
    "cli_section_markdown",
    "cli_section_text",
    "read_npz_masks",
    "summary",
    "summary_text",
]

_ROWS = (
    ("mIoU", "iou", "macro", True),
    ("mIoU without background", "iou", "macro", False),
    ("mDice", "dice", "macro", True),
    ("mDice without background", "dice", "macro", False),
    ("mAcc (mean class accuracy)", "accuracy", "macro", True),
    ("pixel accuracy", "accuracy", "micro", True),
)


def _json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_json(v) for v in value.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary(acc: Any) -> dict[str, Any]:
    """Both aggregations as JSON-ready data (undefined values are None).

    ``dataset`` holds the metrics of the dataset-level matrix, ``image`` the means over images
    of each image's metric (each image averaged over the classes it has in its truth or
    prediction, the rule "skip_both"), ``per_class`` each class's values and how many images
    had it present, only in the truth, only in the prediction or in neither.
    """
    data: dict[str, Any] = {
        "num_classes": acc.num_classes,
        "num_images": acc.num_images,
        "num_empty_images": acc.num_empty_images,
        "num_pixels": acc.num_pixels,
        "ignore_index": acc.ignore_index,
        "background": acc.background,
        "absent_rule": "skip_both",
    }
    for aggregation in ("dataset", "image"):
        part = {}
        for _, metric, average, background in _ROWS:
            key = f"{'m' if average == 'macro' else 'pixel_'}{metric}"
            if average == "micro":
                key = "pixel_accuracy"
            if not background:
                key += "_without_background"
            view = getattr(acc, metric)
            part[key] = _json(float(view(aggregation, average, include_background=background)))
        data[aggregation] = part
    names = acc.class_names or [str(c) for c in range(acc.num_classes)]
    counts = acc.absent_counts()
    per_class = {}
    values = {
        f"{metric}_{aggregation}": getattr(acc, metric)(aggregation, "none")
        for metric in ("iou", "dice", "accuracy")
        for aggregation in ("dataset", "image")
    }
    for c, name in enumerate(names):
        row = {key: _json(float(array[c])) for key, array in values.items()}
        row.update({f"images_{case}": int(array[c]) for case, array in counts.items()})
        per_class[name] = row
    data["per_class"] = per_class
    return data


def _number(value: float, digits: int) -> str:
    return "–" if not math.isfinite(value) else f"{value:.{digits}f}"


def summary_text(acc: Any, digits: int = 4) -> str:
    """A text block: the averages of both aggregations side by side, then per class."""
    lines = [
        f"Segmentation: {acc.num_images} images ({acc.num_empty_images} with no counted pixel), "
        f"{acc.num_pixels} pixels, {acc.num_classes} classes"
        + ("" if acc.ignore_index is None else f", ignore_index {acc.ignore_index}"),
        "dataset = every pixel of every image in one matrix (mmsegmentation); per image = each "
        "image's value, then the mean over images (MONAI, torchmetrics samplewise). A class "
        "absent from an image's truth and prediction is skipped; one in only one of them "
        "counts 0.",
        "",
    ]
    width = len("per-image mIoU 95% t interval") + 2
    cell = max(digits + 4, 9)
    lines.append(f"{'':<{width}}{'dataset':>{cell}}{'per image':>{cell + 2}}")
    for label, metric, average, background in _ROWS:
        if not background and acc.background is None:
            continue
        view = getattr(acc, metric)
        dataset = view("dataset", average, include_background=background)
        image = view("image", average, include_background=background)
        lines.append(
            f"{label:<{width}}{_number(dataset, digits):>{cell}}"
            f"{_number(image, digits):>{cell + 2}}"
        )
    interval = acc.interval("iou", "macro")
    if math.isfinite(interval.low):
        bounds = f"[{_number(interval.low, digits)}, {_number(interval.high, digits)}]"
        lines.append(f"{'per-image mIoU 95% t interval':<{width}}{bounds:>{2 * cell + 2}}")
    lines.append("")
    names = acc.class_names or [str(c) for c in range(acc.num_classes)]
    name_width = max(8, *(len(n) for n in names)) + 2
    header = ["IoU ds", "IoU img", "Dice ds", "Dice img", "Acc ds", "Acc img"]
    lines.append(
        f"{'class':<{name_width}}"
        + "".join(f"{h:>{cell}}" for h in header)
        + "   images: present / truth only / pred only / absent"
    )
    columns = [
        getattr(acc, metric)(aggregation, "none")
        for metric in ("iou", "dice", "accuracy")
        for aggregation in ("dataset", "image")
    ]
    counts = acc.absent_counts()
    for c, name in enumerate(names):
        cases = " / ".join(
            str(int(counts[case][c]))
            for case in ("present", "truth_only", "pred_only", "both_absent")
        )
        lines.append(
            f"{name:<{name_width}}"
            + "".join(f"{_number(float(column[c]), digits):>{cell}}" for column in columns)
            + f"   {cases}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- .npz masks
def _member_reader(archive: zipfile.ZipFile, name: str) -> tuple[tuple[int, ...], np.dtype, Any]:
    handle = archive.open(f"{name}.npy")
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    if fortran:
        raise ValueError(f"array {name!r} is stored in Fortran order; save it in C order.")
    if dtype.hasobject:
        raise ValueError(f"array {name!r} holds Python objects, not labels or scores.")
    return shape, dtype, handle


def read_npz_masks(
    path: str | Path,
    truth: str = "y_true",
    pred: str = "y_pred",
    images_per_batch: int = 16,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Whole images of an ``.npz`` file, ``images_per_batch`` at a time, read without loading
    the arrays whole: ``(y_true, y_pred)`` batches of ``(b, H, W)`` (any image shape), or with
    ``y_pred`` scores of one more axis."""
    with zipfile.ZipFile(path) as archive:
        members = {name[:-4] for name in archive.namelist() if name.endswith(".npy")}
        for name in (truth, pred):
            if name not in members:
                raise ValueError(f"{path}: no array {name!r}; arrays: {sorted(members)}.")
        truth_shape, truth_dtype, truth_handle = _member_reader(archive, truth)
        pred_shape, pred_dtype, pred_handle = _member_reader(archive, pred)
        if len(truth_shape) < 2 or not pred_shape or pred_shape[0] != truth_shape[0]:
            raise ValueError(
                f"{path}: {truth!r} {truth_shape} and {pred!r} {pred_shape} must be masks with "
                f"the image axis first and the same number of images."
            )
        truth_image = int(np.prod(truth_shape[1:], dtype=np.int64))
        pred_image = int(np.prod(pred_shape[1:], dtype=np.int64))
        with truth_handle, pred_handle:
            for start in range(0, truth_shape[0], images_per_batch):
                count = min(images_per_batch, truth_shape[0] - start)
                yield (
                    _read_items(truth_handle, truth_dtype, count, truth_image, truth_shape),
                    _read_items(pred_handle, pred_dtype, count, pred_image, pred_shape),
                )


def _read_items(
    handle: Any, dtype: np.dtype, count: int, per_image: int, shape: tuple[int, ...]
) -> np.ndarray:
    items = np.empty(count * per_image, dtype=dtype)
    view = items.data.cast("B")
    done = 0
    while done < len(view):
        read = handle.readinto(view[done:])
        if not read:
            raise ValueError(
                "the .npz member ends before its announced shape; the file is truncated."
            )
        done += read
    return items.reshape((count, *shape[1:]))


def cli_section_text(report: Any) -> str:
    """The command line's ``--per-image`` section for a ``.npz`` of masks: ``report.args``
    gives ``path``, ``truth`` and ``pred``, ``report.accumulator`` (the report's
    ``ConfusionAccumulator``) the classes and ``ignore_index``, ``report.digits`` the digits.
    The file is read a second time, whole images at a time."""
    return summary_text(_from_cli(report), digits=report.digits)


def cli_section_markdown(report: Any) -> str:
    """The same section for the markdown report (the text block, fenced)."""
    return f"```text\n{cli_section_text(report)}\n```"


def cli_section_data(report: Any) -> dict[str, Any]:
    """The same section as JSON-ready data (``summary``)."""
    return summary(_from_cli(report))


def cli_enabled(args: Any) -> bool:
    """Whether the report asked for the section (``--per-image``)."""
    return bool(getattr(args, "per_image", False))


def cli_arguments(parser: Any) -> None:
    """Add ``--per-image`` to the ``report`` command's parser."""
    group = parser.add_argument_group("segmentation masks (.npz)")
    group.add_argument(
        "--per-image",
        action="store_true",
        help="also report per-image IoU, Dice and accuracy (mean over images) beside the "
        "dataset-level values; the .npz arrays are (B, H, W) masks, read a second time, whole "
        "images at a time",
    )


def _from_cli(report: Any) -> Any:
    from .accumulator import SegmentationAccumulator

    cached = getattr(report, "_segmentation", None)
    if cached is not None:
        return cached
    args = report.args
    if Path(args.path).suffix != ".npz":
        raise ValueError(
            f"per-image metrics read (B, H, W) masks from a .npz file, not {Path(args.path).name}."
        )
    counted = report.accumulator  # the report's ConfusionAccumulator: K, names, ignore_index
    acc = SegmentationAccumulator(
        counted.num_classes,
        class_names=counted.class_names,
        ignore_index=counted.ignore_index,
    )
    for y_true, y_pred in read_npz_masks(
        args.path, truth=args.truth or "y_true", pred=args.pred or "y_pred"
    ):
        acc.update(y_true, y_pred)
    try:
        report._segmentation = acc
    except AttributeError:  # pragma: no cover - a frozen report
        pass
    return acc
