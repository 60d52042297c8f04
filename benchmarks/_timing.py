"""Timing helpers: interleaved medians, so that ratios come from the same noisy moments.

The benchmark machine is shared. Timing candidate A for a while and then candidate B lets a
burst of foreign load land on one of them only; here every repeat times every candidate once, in
an order shuffled anew each round (seeded: runs repeat), and the reported value is the median
over repeats. A fixed rotation would always run each candidate right after the same neighbour,
which then leaves it the same cache state (warm inputs it shares, or a cache it evicted) in
every round.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable


def _calibrate(
    function: Callable[[], object], min_sample: float, timer: Callable[[], float]
) -> int:
    """Calls per sample so that one sample lasts at least ``min_sample`` seconds."""
    number = 1
    while True:
        start = timer()
        for _ in range(number):
            function()
        elapsed = timer() - start
        if elapsed >= min_sample or number >= 1 << 20:
            return number
        number = max(number * 2, int(number * min_sample / max(elapsed, 1e-9) * 1.2))


def interleaved(
    candidates: dict[str, Callable[[], object]],
    repeats: int,
    min_sample: float = 0.0,
    timer: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds per call of each candidate, each timed once a round, in a shuffled order,
    over ``repeats`` rounds.

    ``timer`` is the wall clock by default; ``time.process_time`` gives CPU time, which other
    processes on a shared machine inflate less (it sums the CPU time of every thread of this
    process, so a threaded call counts all its threads' work).
    """
    numbers = {}
    for name, function in candidates.items():
        function()  # warm-up: JIT compilation, caches, page faults
        numbers[name] = _calibrate(function, min_sample, timer) if min_sample else 1
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    order = random.Random(len(names) * 1000 + repeats)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            order.shuffle(names)
            for name in names:
                function, number = candidates[name], numbers[name]
                start = timer()
                for _ in range(number):
                    function()
                samples[name].append((timer() - start) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: median(values) for name, values in samples.items()}


def cpu_description() -> str:
    """The processor as the kernels are compiled for it: LLVM's name for the host CPU and its
    widest vector instructions. Kernels written with 16-lane vectors run about twice as slow
    per row where they are split into two AVX2 halves, so timings are only comparable between
    machines of the same kind."""
    try:
        from llvmlite import binding
    except ImportError:  # pragma: no cover - numba always brings llvmlite
        return "unknown CPU"
    features = binding.get_host_cpu_features()
    widest = "no AVX2"
    for flag, name in (("avx512bw", "AVX-512"), ("avx2", "AVX2"), ("neon", "NEON")):
        if features.get(flag, False):
            widest = name
            break
    return f"LLVM target {binding.get_host_cpu_name()}, {widest}"


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return 0.5 * (ordered[middle - 1] + ordered[middle])


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"
