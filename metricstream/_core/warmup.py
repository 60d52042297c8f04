"""Compile Numba kernels in the background while the first batches are counted without them.

A kernel that has never been compiled on this machine costs seconds of CPU at its first call
(Numba's typing and LLVM's optimiser), every time a new environment meets it: a fresh virtual
environment, a container, a CI runner, a cluster node. A family that has a plain-numpy twin of
a kernel (``metricstream/<family>/_firstuse.py``, bit-identical state) asks ``defer`` before the
call: when the kernel's specialisation for these arguments is neither in memory nor in Numba's
on-disk cache, ``defer`` queues its compile on one daemon thread and answers True, and the
family counts the batch with its twin. Once the compile has finished (and nothing else is being
compiled, so that the caller never waits on Numba's compiler lock), ``defer`` answers False and
the kernel counts. A specialisation found in the on-disk cache is loaded at the call, as before.

``METRICSTREAM_BACKGROUND_COMPILE=0`` turns this off: kernels compile at their first call, on
the calling thread. ``warm_up`` (``python -m metricstream warm-up``) compiles the common
specialisations of every family into the on-disk cache, for images and CI runners.

The worker is a daemon thread: a process may end while it compiles (the compile is lost; Numba
writes a cache file whole or not at all). A failed compile is kept with its exception; the
route then compiles at the call, where the error surfaces as it would without this module.
"""

from __future__ import annotations

import atexit
import collections
import functools
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

ENV = "METRICSTREAM_BACKGROUND_COMPILE"

_OFF = ("0", "false", "no", "off")


def _env_enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


# Read once: whether the first batches of a route may be counted without its kernel.
_enabled = _env_enabled()


def enabled() -> bool:
    """Whether kernels compile in the background (``METRICSTREAM_BACKGROUND_COMPILE``)."""
    return _enabled


def set_enabled(flag: bool) -> None:
    """Turn background compiles on or off for this process (the environment variable sets the
    initial value). Off: a kernel compiles at its first call, on the calling thread."""
    global _enabled
    if not isinstance(flag, bool):
        raise TypeError(f"`flag` must be True or False, got {flag!r}.")
    _enabled = flag


class Job:
    """One queued compile: ``kernel`` for the Numba ``signature``."""

    __slots__ = ("kernel", "signature", "done", "error")

    def __init__(self, kernel: Any, signature: tuple) -> None:
        self.kernel = kernel
        self.signature = signature
        self.done = threading.Event()
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        name = getattr(self.kernel, "__name__", repr(self.kernel))
        state = "failed" if self.error is not None else "done" if self.done.is_set() else "queued"
        return f"Job({name}{self.signature}, {state})"


_lock = threading.Lock()
_jobs: dict[tuple[int, tuple], Job] = {}
_queue: collections.deque[Job] = collections.deque()
_worker: threading.Thread | None = None
# Jobs queued or running; while it is non-zero every ``defer`` answers True (a call that
# compiled, or even looked a signature up through ``Dispatcher.compile``, would wait on Numba's
# compiler lock for the running job).
_in_flight = 0


def signature(args: Sequence[Any]) -> tuple:
    """The Numba types of ``args``: the key of the specialisation a call with them uses."""
    from numba import typeof

    return tuple(typeof(argument) for argument in args)


def compiled(kernel: Any, types: tuple) -> bool:
    """Whether ``kernel`` holds a specialisation for ``types`` in this process."""
    return types in kernel.overloads


def cached_on_disk(kernel: Any, types: tuple) -> bool:
    """Whether Numba's on-disk cache holds ``kernel`` for ``types`` (for this kernel's source;
    the machine part of the key is not compared: a cache from another CPU then compiles)."""
    cache_file = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    if cache_file is None:
        return False
    try:
        index = cache_file._load_index()
    except Exception:  # an unreadable index: Numba itself would recompile
        return False
    return any(key[0] == types for key in index)


def busy() -> bool:
    """Whether a background compile is queued or running."""
    return _in_flight > 0


def defer(routes: Iterable[tuple[Any, Sequence[Any]]]) -> bool:
    """Whether to count without the kernels of ``routes`` (pairs ``(kernel, args)``) now.

    False when background compiles are off, when the JIT is disabled, or when every kernel is
    compiled for its arguments (or can be loaded from the on-disk cache) and no background
    compile runs. Otherwise the missing specialisations are queued (once each) and True.
    """
    if not _enabled:
        return False
    missing = []
    for kernel, args in routes:
        if getattr(kernel, "overloads", None) is None:
            return False  # NUMBA_DISABLE_JIT: plain Python functions
        types = signature(args)
        if types in kernel.overloads:
            continue
        if cached_on_disk(kernel, types) and not _in_flight:
            continue  # loaded at the call, as without this module
        missing.append((kernel, types))
    if not missing:
        return _in_flight > 0
    failed = False
    for kernel, types in missing:
        job = submit(kernel, types)
        failed |= job.error is not None
    # A failed compile is retried at the call, where its error surfaces.
    return not failed


def submit(kernel: Any, types: tuple) -> Job:
    """Queue the compile of ``kernel`` for ``types`` (once; later calls return the same job)."""
    global _in_flight, _worker
    key = (id(kernel), types)
    with _lock:
        job = _jobs.get(key)
        if job is not None:
            return job
        job = Job(kernel, types)
        _jobs[key] = job
        _queue.append(job)
        _in_flight += 1
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="metricstream-compile", daemon=True)
            _worker.start()
            if not _exit_hook:
                atexit.register(_finish_at_exit)
                _exit_hook.append(True)
    return job


_exit_hook: list[bool] = []


def _finish_at_exit() -> None:
    """At interpreter exit: start none of the queued compiles, and let the running one finish
    (a compile cut off by the interpreter's teardown can abort the process: "terminate called
    without an active exception"). Costs at most the rest of one compile."""
    global _in_flight
    with _lock:
        for job in _queue:
            job.error = RuntimeError("the interpreter exited before this compile started")
            job.done.set()
        _in_flight -= len(_queue)
        _queue.clear()
        worker = _worker
    if worker is not None:
        worker.join()


def _work() -> None:
    global _in_flight, _worker
    while True:
        with _lock:
            if not _queue:
                _worker = None
                return
            job = _queue.popleft()
        try:
            job.kernel.compile(job.signature)
        except BaseException as error:  # kept for the caller; the call compiles again
            job.error = error
        finally:
            with _lock:
                _in_flight -= 1
            job.done.set()


def jobs() -> list[Job]:
    """Every compile queued in this process, in order."""
    with _lock:
        return list(_jobs.values())


def wait(timeout: float | None = None) -> bool:
    """Wait until no background compile is queued or running; True if none is left."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _lock:
            pending = [job for job in _jobs.values() if not job.done.is_set()]
        if not pending:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        pending[0].done.wait(left)


def _scenarios() -> dict[str, Callable[[], Any]]:
    """First updates of the common inputs of every family, small (what they compile is the
    point, not what they count)."""
    import numpy as np

    from .. import ConfusionAccumulator, MultilabelAccumulator, ScoreAccumulator

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=8)
    binary = rng.integers(0, 2, size=8)
    weights = rng.random(8)
    indicators = rng.integers(0, 2, size=(8, 3))

    def scores(dtype: Any, shape: tuple[int, ...] = (8, 3)) -> Any:
        """Probabilities: rows that sum to one (binary: one probability per sample)."""
        values = rng.random(shape)
        if len(shape) > 1:
            values = (values + 0.1) / (values + 0.1).sum(axis=1, keepdims=True)
        return values.astype(dtype)

    def logits(dtype: Any) -> Any:
        return (rng.normal(size=(8, 3)) * 3).astype(dtype)

    def bootstrap() -> None:
        from ..bootstrap import bootstrap as resample

        accumulator = ConfusionAccumulator(3).update(labels, labels)
        resample(accumulator, "accuracy", n_resamples=10, seed=0)
        resample(accumulator, lambda matrix: matrix[0, 0] / matrix.sum(), n_resamples=10, seed=0)

    def clustered(weighted: bool) -> None:
        from ..bootstrap.accumulator import BootstrapConfusionAccumulator

        accumulator = BootstrapConfusionAccumulator(3, n_resamples=10, weighted=weighted)
        sample_weights = weights if weighted else None
        accumulator.update(labels, labels, sample_weights, cluster_ids=0)
        accumulator.update(labels, labels, sample_weights, cluster_ids=np.arange(8))

    found: dict[str, Callable[[], Any]] = {
        "confusion: int64 labels": lambda: ConfusionAccumulator(3).update(labels, labels),
        "confusion: weighted": lambda: ConfusionAccumulator(3, weighted=True).update(
            labels, labels, weights
        ),
        "scores: binary float64": lambda: ScoreAccumulator("binary").update(
            binary, scores(np.float64, (8,))
        ),
        "multilabel: int64 indicators": lambda: MultilabelAccumulator(3).update(
            indicators, indicators
        ),
        "multilabel: bool predictions": lambda: MultilabelAccumulator(3).update(
            indicators, indicators.astype(bool)
        ),
        "multilabel: weighted": lambda: MultilabelAccumulator(3, weighted=True).update(
            indicators, indicators, weights
        ),
        "bootstrap": bootstrap,
        "bootstrap: clustered": functools.partial(clustered, False),
        "bootstrap: clustered weighted": functools.partial(clustered, True),
    }

    def confusion_logits(dtype: Any) -> Any:
        return ConfusionAccumulator(3).update(labels, logits(dtype))

    def confusion_binary(dtype: Any) -> Any:
        return ConfusionAccumulator(2, threshold=0.5).update(binary, scores(dtype, (8,)))

    def score_probabilities(dtype: Any) -> Any:
        return ScoreAccumulator("multiclass", 3).update(labels, scores(dtype))

    def score_logits(dtype: Any) -> Any:
        return ScoreAccumulator("multiclass", 3, logits=True).update(labels, logits(dtype))

    def multilabel_logits(dtype: Any) -> Any:
        return MultilabelAccumulator(3, logits=True).update(indicators, logits(dtype))

    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
        found[f"confusion: {name} logits"] = functools.partial(confusion_logits, dtype)
        found[f"confusion: binary {name}"] = functools.partial(confusion_binary, dtype)
        found[f"scores: {name} probabilities"] = functools.partial(score_probabilities, dtype)
        found[f"scores: {name} logits"] = functools.partial(score_logits, dtype)
        found[f"multilabel: {name} logits"] = functools.partial(multilabel_logits, dtype)
    found["scores: binary float32"] = lambda: ScoreAccumulator("binary").update(
        binary, scores(np.float32, (8,))
    )
    found["scores: binary float32 logits"] = lambda: ScoreAccumulator("binary", logits=True).update(
        binary, logits(np.float32)[:, 0]
    )
    found["scores: weighted"] = lambda: ScoreAccumulator("binary", weighted=True).update(
        binary, scores(np.float32, (8,)), weights
    )
    return found


def warm_up(progress: Callable[[str], None] | None = None) -> tuple[int, list[str]]:
    """Run the first update of every family's common inputs now, on this thread, with
    background compiles off, so that what they need is compiled into Numba's on-disk cache.
    Returns how many ran, and the names of those that failed (each with its error, told to
    ``progress``); a failure does not stop the others."""
    import time

    global _enabled
    previous = _enabled
    _enabled = False
    failed: list[str] = []
    try:
        scenarios = _scenarios()
        for name, scenario in scenarios.items():
            started = time.process_time()
            try:
                scenario()
            except Exception as error:  # reported; the other input kinds still compile
                failed.append(name)
                line = f"{name}: failed: {type(error).__name__}: {error}"
            else:
                line = f"{name}: {time.process_time() - started:.2f} s CPU"
            if progress is not None:
                progress(line)
    finally:
        _enabled = previous
    return len(scenarios), failed


def main() -> int:
    """``python -m metricstream warm-up``: compile into the cache, one line per input kind on
    stderr; exit status 1 when one of them failed."""
    import sys

    count, failed = warm_up(progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(
        f"metricstream warm-up: {count - len(failed)} of {count} input kinds compiled or loaded "
        f"from Numba's cache"
    )
    return 1 if failed else 0
