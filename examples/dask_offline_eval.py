"""Offline evaluation of an on-disk prediction dataset, chunk by chunk, with Dask.

Usage: python examples/dask_offline_eval.py [--data DIR] [--samples 2000000] [--chunk 250000]
                                            [--cluster]

Needs ``pip install "metricstream[dask]"``. The first run writes a synthetic dataset to ``DIR``
(default: a temporary directory), in two layouts a real pipeline might produce:

* ``labels/`` and ``logits/``: ``.npy`` stacks (one file per chunk, ``dask.array.to_npy_stack``),
  ``--samples`` labels and float32 logits over 10 classes (80 MB of logits by default);
* ``predictions/``: a parquet dataset with ``label`` and ``prediction`` columns.

Then ``metricstream.dask.confusion`` counts each chunk (the argmax of the logits is fused into
the kernel) and tree-merges the partial K×K matrices; no chunk other than the ones being counted
is in memory. ``metricstream.dask.accumulate`` does the same for a group of accumulators in one
pass. ``--cluster`` runs the same on a ``distributed.LocalCluster`` of 2 worker processes
(on 127.0.0.1) instead of the threaded scheduler. Both layouts must give the same matrix, and,
as a check, the one computed in memory from the same files.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np

from metricstream import AccumulatorGroup, ConfusionAccumulator
from metricstream.dask import accumulate, confusion

K = 10


def write_dataset(root: Path, samples: int, chunk: int) -> None:
    """Labels, logits (classes on axis 1) and argmax predictions, generated chunk by chunk."""
    rng = da.random.default_rng(0)
    labels = rng.integers(0, K, size=samples, chunks=chunk)
    # Logits favour the true class; the confusions are uneven so per-class metrics differ.
    noise = rng.normal(size=(samples, K), chunks=(chunk, K)).astype(np.float32)
    boost = da.map_blocks(
        lambda y: np.eye(K, dtype=np.float32)[y] * (1.0 + 0.15 * y[:, None]),
        labels,
        new_axis=1,
        chunks=(labels.chunks[0], (K,)),
        dtype=np.float32,
    )
    logits = noise + 2.0 * boost
    da.to_npy_stack(root / "labels", labels)
    da.to_npy_stack(root / "logits", logits)
    predictions = dd.from_dask_array(
        da.stack([labels, logits.argmax(axis=1)], axis=1), columns=["label", "prediction"]
    )
    predictions.to_parquet(root / "predictions", write_index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="dataset directory (created if missing)")
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--chunk", type=int, default=250_000)
    parser.add_argument(
        "--cluster", action="store_true", help="use a LocalCluster of 2 worker processes"
    )
    args = parser.parse_args()

    with ExitStack() as stack:
        root = args.data or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if not (root / "labels").exists():
            start = time.perf_counter()
            write_dataset(root, args.samples, args.chunk)
            print(
                f"wrote {args.samples} samples in chunks of {args.chunk} to {root} "
                f"({time.perf_counter() - start:.1f} s)"
            )

        compute = {"scheduler": "threads"}
        if args.cluster:
            import distributed

            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=2,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            )
            client = stack.enter_context(distributed.Client(cluster))
            compute = {"scheduler": client}
            print(f"LocalCluster with {len(client.scheduler_info()['workers'])} worker processes")

        labels = da.from_npy_stack(root / "labels")
        logits = da.from_npy_stack(root / "logits")
        print(
            f"labels: {labels.shape[0]} samples in {labels.numblocks[0]} chunks; "
            f"logits: {logits.nbytes / 1e6:.0f} MB"
        )

        start = time.perf_counter()
        acc = confusion(labels, logits, K, class_axis=1, **compute)
        print(f"from the .npy stacks (argmax fused): {time.perf_counter() - start:.2f} s")

        frame = dd.read_parquet(root / "predictions")
        start = time.perf_counter()
        from_parquet = confusion(frame["label"], frame["prediction"], K, **compute)
        print(
            f"from parquet columns ({frame.npartitions} partitions): "
            f"{time.perf_counter() - start:.2f} s"
        )

        # Several accumulators in one pass over the chunks: a group as the template.
        template = AccumulatorGroup(
            all=ConfusionAccumulator(K), without_class_0=ConfusionAccumulator(K, ignore_index=0)
        )
        start = time.perf_counter()
        group = accumulate(template, labels, logits, **compute)
        print(
            f"a group of {len(group)} accumulators in one pass: {time.perf_counter() - start:.2f} s"
        )

        in_memory = ConfusionAccumulator(K).update(*dask.compute(labels, logits))
        assert acc == from_parquet == in_memory == group["all"], "chunked results differ"
        print("equal to each other and to the in-memory result: True")
        print()
        print(
            f"samples {acc.num_samples}, accuracy {acc.accuracy():.4f}, "
            f"macro F1 {acc.f1(average='macro'):.4f}, mIoU {acc.miou():.4f}, "
            f"kappa {acc.cohen_kappa():.4f}"
        )
        print("recall per class:", np.round(acc.recall(), 3).tolist())


if __name__ == "__main__":
    main()
