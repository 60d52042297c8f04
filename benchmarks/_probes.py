"""Measurements that need a fresh process: memory peaks and start-up time.

Run as ``python -m benchmarks._probes <probe> [args]``; each probe prints one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory(method: str, num_labels: int, num_classes: int) -> dict:
    """Peak memory of one update (``method`` "metricstream") or one bincount ("bincount")."""
    import tracemalloc

    import numpy as np

    rng = np.random.default_rng(0)
    y_true = rng.integers(0, num_classes, num_labels, dtype=np.int64)
    y_pred = rng.integers(0, num_classes, num_labels, dtype=np.int64)
    if method == "metricstream":
        from metricstream import ConfusionAccumulator

        accumulator = ConfusionAccumulator(num_classes, ignore_index=-100)
        # Warm up on a slice that takes the same (parallel) path: JIT cache load, pool threads.
        accumulator.update(y_true[: 1 << 20], y_pred[: 1 << 20])

        def run():
            accumulator.update(y_true, y_pred)
    else:
        np.bincount(num_classes * y_true[:1000] + y_pred[:1000], minlength=num_classes**2)

        def run():
            np.bincount(num_classes * y_true + y_pred, minlength=num_classes**2)

    rss_before = _rss_bytes()
    peak_before = _peak_rss_bytes()
    tracemalloc.start()
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_after = _peak_rss_bytes()
    # Growth of the peak resident set above what was resident just before the call (0 when the
    # call never went above the earlier peak, which the inputs' creation set).
    rss_growth = (
        max(0, peak_after - max(rss_before, peak_before)) if peak_after > peak_before else 0
    )
    return {
        "traced_peak": traced_peak,
        "rss_growth": rss_growth,
        "seconds": elapsed,
        "input_bytes": int(y_true.nbytes + y_pred.nbytes),
    }


def startup() -> dict:
    """``import metricstream`` + first update in this fresh process."""
    start = time.perf_counter()
    import numpy as np

    import metricstream
    from metricstream.confusion import _kernels

    imported = time.perf_counter()
    dispatchers = [
        getattr(_kernels, name)
        for name in dir(_kernels)
        if hasattr(getattr(_kernels, name), "signatures")
    ]
    compiled_at_import = sum(len(d.signatures) for d in dispatchers)
    heavy = sorted(
        m
        for m in ("torch", "torchmetrics", "boost_histogram", "sklearn", "pandas")
        if m in sys.modules
    )
    accumulator = metricstream.ConfusionAccumulator(10, ignore_index=-100)
    accumulator.update(np.arange(256) % 10, np.arange(256) % 7)
    done = time.perf_counter()
    assert accumulator.num_samples == 256
    stats = [d.stats for d in dispatchers]
    cache_hits = sum(sum(s.cache_hits.values()) for s in stats)
    cache_misses = sum(sum(s.cache_misses.values()) for s in stats)
    return {
        "import_seconds": imported - start,
        "first_update_seconds": done - imported,
        "compiled_at_import": compiled_at_import,
        "heavy_modules": heavy,
        "cache_hits": cache_hits,
        "cache_misses": cache_misses,
        "package_dir": os.path.dirname(metricstream.__file__),
    }


def compile_all() -> dict:
    """First-ever compile cost of the common kernels (run with an empty NUMBA_CACHE_DIR)."""
    import numpy as np

    from metricstream import ConfusionAccumulator

    timings = {}
    cases = {
        "int64 labels": (np.arange(256) % 10, np.arange(256) % 7),
        "uint8 labels": (
            (np.arange(256) % 10).astype(np.uint8),
            (np.arange(256) % 7).astype(np.uint8),
        ),
        "float32 (N, C) scores": (np.arange(256) % 10, np.ones((256, 10), dtype=np.float32)),
    }
    for name, (y_true, y_pred) in cases.items():
        start = time.perf_counter()
        ConfusionAccumulator(10, ignore_index=-100).update(y_true, y_pred)
        timings[name] = time.perf_counter() - start
    return timings


def main(argv: list[str]) -> None:
    probe = argv[0]
    if probe == "memory":
        result = memory(argv[1], int(argv[2]), int(argv[3]))
    elif probe == "startup":
        result = startup()
    elif probe == "compile":
        result = compile_all()
    else:
        raise SystemExit(f"unknown probe {probe!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
