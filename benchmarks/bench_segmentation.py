"""Segmentation benchmark: ``python -m benchmarks.bench_segmentation [--quick]``.

Cases, for (16, 512, 512) uint8 masks with K = 21 and K = 150 classes (blocky masks as real
segmentations have, 20% of pixels mislabelled, 255 marking void pixels):

1. ``SegmentationAccumulator.update`` (the dataset-level matrix and the per-image sums, one
   pass) beside ``ConfusionAccumulator.update`` (the dataset-level matrix only), both on every
   thread of ``metricstream.get_num_threads()``: target ≤ 1.3×;
2. beside the per-image modes of torchmetrics' ``MeanIoU(per_class=True)`` and
   ``DiceScore(aggregation_level="samplewise")`` and MONAI's ``DiceMetric`` on CPU tensors:
   target ≥ 20×. Their one-hot encodings take B·K·H·W int64 values (5 GiB for K = 150), so
   they are timed on the first few images and compared per image.

Every compared result is checked equal (to 1e-6: the references divide in float32) before
anything is timed; ratios come from the same interleaved run (``_timing.interleaved``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from metricstream import ConfusionAccumulator, get_num_threads, set_num_threads
from metricstream.segmentation import SegmentationAccumulator

from ._timing import cpu_description, format_seconds, interleaved

VOID = 255


def blocky_masks(k: int, images: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Masks of 32×32 blocks of one class each, 20% of predicted pixels replaced by a random
    class, 2% of true pixels void."""
    rng = np.random.default_rng(seed)
    block = 32
    cells = rng.integers(0, k, (images, size // block, size // block)).astype(np.uint8)
    truth = np.repeat(np.repeat(cells, block, axis=1), block, axis=2)
    noise = rng.random(truth.shape) < 0.2
    pred = np.where(noise, rng.integers(0, k, truth.shape).astype(np.uint8), truth)
    truth[rng.random(truth.shape) < 0.02] = VOID
    return np.ascontiguousarray(truth), np.ascontiguousarray(pred)


def _references(k: int, truth: np.ndarray, pred: np.ndarray) -> dict:
    """Per-image references on CPU tensors (what is importable), each checked against us."""
    found: dict = {}
    try:
        import torch
    except ImportError:
        return found
    t = torch.from_numpy(truth.astype(np.int64))
    p = torch.from_numpy(pred.astype(np.int64))
    ours = SegmentationAccumulator(k, ignore_index=VOID).update(truth, pred)
    valid = t != VOID
    t_clean = torch.where(valid, t, torch.zeros_like(t))
    try:
        from torchmetrics.segmentation import DiceScore, MeanIoU
    except ImportError:
        pass
    else:

        def one_hot(x: torch.Tensor) -> torch.Tensor:
            # index input; void pixels set to all-zero one-hot rows (counted nowhere)
            hot = torch.nn.functional.one_hot(x, k).movedim(-1, 1)
            return hot * valid[:, None]

        def tm_iou() -> object:
            metric = MeanIoU(num_classes=k, per_class=True)
            metric.update(one_hot(p), one_hot(t_clean))
            return metric.compute()

        def tm_dice() -> object:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                metric = DiceScore(num_classes=k, average="none", aggregation_level="samplewise")
            metric.update(one_hot(p), one_hot(t_clean))
            return metric.compute()

        check = np.asarray(tm_iou(), dtype=np.float64)
        assert np.allclose(ours.reproduce("torchmetrics.MeanIoU", per_class=True), check, atol=1e-6)
        check = np.asarray(tm_dice(), dtype=np.float64)
        assert np.allclose(
            ours.reproduce("torchmetrics.DiceScore", average="none"),
            check,
            atol=1e-6,
            equal_nan=True,
        )
        found["torchmetrics MeanIoU(per_class)"] = tm_iou
        found["torchmetrics DiceScore(samplewise)"] = tm_dice
    try:
        from monai.metrics import DiceMetric
    except ImportError:
        pass
    else:

        def monai_dice() -> object:
            metric = DiceMetric(reduction="mean_batch", num_classes=k, ignore_index=VOID)
            metric(p[:, None], t[:, None])
            return metric.aggregate()

        check = np.asarray(monai_dice(), dtype=np.float64)
        assert np.allclose(
            ours.reproduce("monai.DiceMetric", reduction="mean_batch"), check, atol=1e-6
        )
        found["MONAI DiceMetric"] = monai_dice
    return found


def run(quick: bool, with_references: bool = True) -> None:
    print(f"CPU: {cpu_description()}; metricstream threads: {get_num_threads()}")
    for k in (21, 150):
        case(k, quick, with_references)


def case(k: int, quick: bool, with_references: bool = True) -> None:
    images, size = 16, 512
    repeats = 5 if quick else 15
    truth, pred = blocky_masks(k, images, size)
    seg = SegmentationAccumulator(k, ignore_index=VOID)
    conf = ConfusionAccumulator(k, ignore_index=VOID)
    seg.update(truth, pred)
    conf.update(truth, pred)
    assert np.array_equal(seg.matrix, conf.matrix)
    times = interleaved(
        {
            "segmentation (dataset + per image)": lambda: seg.update(truth, pred),
            "confusion (dataset only)": lambda: conf.update(truth, pred),
        },
        repeats,
    )
    ours = times["segmentation (dataset + per image)"]
    base = times["confusion (dataset only)"]
    print(f"\n({images}, {size}, {size}) uint8, K = {k}")
    print(
        f"  segmentation update   {format_seconds(ours):>10}   {ours / base:.2f}× the "
        f"dataset-level-only update (target ≤ 1.3×)"
    )
    print(f"  confusion update      {format_seconds(base):>10}")
    threads = get_num_threads()
    set_num_threads(1)
    try:
        times = interleaved(
            {
                "segmentation": lambda: seg.update(truth, pred),
                "confusion": lambda: conf.update(truth, pred),
            },
            repeats,
        )
    finally:
        set_num_threads(threads)
    print(
        f"  on one thread: {format_seconds(times['segmentation'])} against "
        f"{format_seconds(times['confusion'])}, "
        f"{times['segmentation'] / times['confusion']:.2f}×"
    )
    if not with_references:
        return
    few = 1 if quick else (4 if k <= 32 else 1)
    start = time.perf_counter()
    references = _references(k, truth[:few], pred[:few])
    if not references:
        print("  (torchmetrics / MONAI not installed: no reference timings)")
        return
    small = {name: function for name, function in references.items()}
    small["segmentation"] = lambda: SegmentationAccumulator(k, ignore_index=VOID).update(
        truth[:few], pred[:few]
    )
    ref_times = interleaved(small, 1 if quick else 3)
    mine = ref_times.pop("segmentation") / few
    for name, seconds in ref_times.items():
        per_image = seconds / few
        print(
            f"  {name:<36} {format_seconds(per_image):>10} per image   "
            f"{per_image / mine:7.1f}× ours per image (target ≥ 20×)"
        )
    print(
        f"  (references on {few} image(s); ours {format_seconds(mine)} per image there; "
        f"{time.perf_counter() - start:.0f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument(
        "--no-references", action="store_true", help="skip torchmetrics and MONAI (minutes)"
    )
    args = parser.parse_args(argv)
    run(args.quick, not args.no_references)


if __name__ == "__main__":
    main()
