"""Evaluate shards in a ProcessPoolExecutor and merge the per-shard accumulators.

Usage: python examples/process_pool_merge.py [--shards 8] [--workers 2] [--out DIR]

Each worker process evaluates one shard (here: a synthetic segmentation shard of 16 masks of
128×128 pixels with void pixels labelled 255) and saves its accumulator atomically as
``DIR/shard-XXX.msacc`` (``acc.save``: versioned, checksummed, written to a temporary file and
renamed). The parent loads and sums them (``sum(...)``; merging is exact, associative and
commutative, so the order in which shards finish does not matter). Shards whose file already
exists are not recomputed, so an interrupted run resumes where it stopped.

Two other transports are shown: returning the accumulator itself (pickled by the pool), and
``acc.to_bytes()`` / ``ConfusionAccumulator.from_bytes`` (for a queue, a database or object
storage). All three must equal one process counting every shard.
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from metricstream import ConfusionAccumulator

CLASSES = ["road", "sidewalk", "building", "vegetation", "sky", "car"]
VOID = 255


def load_shard(index: int) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in for reading one shard of ground truth and model logits from storage."""
    rng = np.random.default_rng(index)
    masks = rng.integers(0, len(CLASSES), size=(16, 128, 128), dtype=np.uint8)
    masks[rng.random(masks.shape) < 0.05] = VOID
    logits = rng.normal(size=(16, len(CLASSES), 128, 128)).astype(np.float32)
    hit = np.where(masks == VOID, 0, masks)
    np.put_along_axis(logits, hit[:, None], 2.5, axis=1)  # a decent but imperfect model
    return masks, logits


def new_accumulator() -> ConfusionAccumulator:
    return ConfusionAccumulator(len(CLASSES), class_names=CLASSES, ignore_index=VOID)


def evaluate_shard(index: int, out: str) -> str:
    """Runs in a worker process: count one shard, save it atomically, return the path."""
    masks, logits = load_shard(index)
    acc = new_accumulator().update(masks, logits)  # argmax over axis 1 inside the kernel
    return str(acc.save(Path(out) / f"shard-{index:03d}.msacc"))


def evaluate_shard_to_object(index: int) -> ConfusionAccumulator:
    masks, logits = load_shard(index)
    return new_accumulator().update(masks, logits)


def evaluate_shard_to_bytes(index: int) -> bytes:
    masks, logits = load_shard(index)
    return new_accumulator().update(masks, logits).to_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="directory for per-shard files (kept)")
    args = parser.parse_args()

    with ExitStack() as stack:
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        out.mkdir(parents=True, exist_ok=True)
        pool = stack.enter_context(ProcessPoolExecutor(max_workers=args.workers))

        todo = [i for i in range(args.shards) if not (out / f"shard-{i:03d}.msacc").exists()]
        print(
            f"{args.shards - len(todo)} shard(s) already saved in {out}; "
            f"evaluating {len(todo)} in {args.workers} processes"
        )
        futures = [pool.submit(evaluate_shard, i, str(out)) for i in todo]
        for future in as_completed(futures):
            print(f"  saved {Path(future.result()).name}")
        from_files = sum(
            ConfusionAccumulator.load(out / f"shard-{i:03d}.msacc") for i in range(args.shards)
        )

        from_objects = sum(pool.map(evaluate_shard_to_object, range(args.shards)))
        from_bytes = sum(
            ConfusionAccumulator.from_bytes(blob)
            for blob in pool.map(evaluate_shard_to_bytes, range(args.shards))
        )

    single = new_accumulator()
    for i in range(args.shards):
        single.update(*load_shard(i))
    assert from_files == from_objects == from_bytes == single, "merged results differ"
    print("files, pickled objects and bytes all equal one process counting every shard: True")
    print()
    print(
        f"pixels counted {from_files.num_samples} (void pixels skipped), "
        f"pixel accuracy {from_files.accuracy():.4f}, mIoU {from_files.miou():.4f}"
    )
    for name, iou in zip(CLASSES, from_files.jaccard(), strict=True):
        print(f"  IoU {name:<11} {iou:.4f}")


if __name__ == "__main__":
    main()
