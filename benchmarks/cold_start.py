"""``python -m benchmarks.cold_start``: the CPU time of a first update on a machine that has never
compiled metricstream's kernels, per accumulator and input kind, beside the warm time.

Each case runs in a fresh interpreter with an empty Numba cache directory (``NUMBA_CACHE_DIR``),
as in a new virtual environment, container or cluster node; then again in a fresh interpreter
with the cache that the first run left (a warm start: import, load from cache, update). CPU time
(user + system of the child, all its threads), not wall time: the machine is shared. The last row
runs every case in one interpreter, as a training script would.

Each case is timed twice: "before", with ``METRICSTREAM_BACKGROUND_COMPILE=0`` (kernels compile
at their first call), and "after", the default (a family with a numpy twin counts its first
batches with it while the kernel compiles on a background thread). "+compiles" is the cold run's
CPU once those background compiles have finished: the cost is moved off the first result, not
removed (``python -m metricstream warm-up`` pays it once, when an image is built).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from ._timing import cpu_description

SETUP = """
import numpy as np
rng = np.random.default_rng(0)
y = rng.integers(0, 10, size=256)
logits = rng.normal(size=(256, 10)).astype(np.float32)
probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
binary = rng.random(256).astype(np.float32)
y2 = rng.integers(0, 2, size=256)
ml_true = rng.integers(0, 2, size=(256, 20))
ml_logits = rng.normal(size=(256, 20)).astype(np.float32)
"""

CASES = {
    "confusion: int64 labels": (
        "from metricstream import ConfusionAccumulator\n"
        "ConfusionAccumulator(10).update(y, rng.integers(0, 10, size=256))"
    ),
    "confusion: float32 logits": (
        "from metricstream import ConfusionAccumulator\nConfusionAccumulator(10).update(y, logits)"
    ),
    "confusion: binary float32": (
        "from metricstream import ConfusionAccumulator\n"
        "ConfusionAccumulator(2, threshold=0.5).update(y2, binary)"
    ),
    "confusion: weighted": (
        "from metricstream import ConfusionAccumulator\n"
        "ConfusionAccumulator(10, weighted=True).update(y, logits, rng.random(256))"
    ),
    "scores: float32 probabilities": (
        "from metricstream import ScoreAccumulator\n"
        "ScoreAccumulator('multiclass', 10).update(y, probabilities)"
    ),
    "scores: float32 logits": (
        "from metricstream import ScoreAccumulator\n"
        "ScoreAccumulator('multiclass', 10, logits=True).update(y, logits)"
    ),
    "scores: binary float32": (
        "from metricstream import ScoreAccumulator\nScoreAccumulator('binary').update(y2, binary)"
    ),
    "multilabel: int64 indicators": (
        "from metricstream import MultilabelAccumulator\n"
        "MultilabelAccumulator(20).update(ml_true, rng.integers(0, 2, size=(256, 20)))"
    ),
    "multilabel: float32 logits": (
        "from metricstream import MultilabelAccumulator\n"
        "MultilabelAccumulator(20, logits=True).update(ml_true, ml_logits)"
    ),
    "bootstrap of a matrix": (
        "from metricstream import ConfusionAccumulator\n"
        "from metricstream.bootstrap import bootstrap\n"
        "acc = ConfusionAccumulator(10).update(y, rng.integers(0, 10, size=256))\n"
        "bootstrap(acc, 'accuracy', n_resamples=200, seed=0)"
    ),
    "bootstrap: clustered": (
        "from metricstream import BootstrapConfusionAccumulator\n"
        "BootstrapConfusionAccumulator(10, n_resamples=100).update(\n"
        "    y, rng.integers(0, 10, size=256), cluster_ids=np.arange(256) // 8)"
    ),
}

PROBE = """
import os, resource, time
{setup}
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
before = cpu()
{body}
first = cpu() - before
try:
    from metricstream._core import warmup
except ImportError:  # a metricstream without background compiles
    pass
else:
    warmup.wait()
import json
print(json.dumps([first, cpu() - before]))
"""

# "before": every kernel compiles at its first call, on the calling thread (the behaviour
# without background compiles). "after": the default, first batches counted by a family's
# numpy twin while its kernel compiles on a background thread.
MODES = {"before": "0", "after": "1"}


def run_case(body: str, cache: str, background: str) -> tuple[float, float]:
    """CPU seconds of ``body`` in a fresh interpreter whose Numba cache is ``cache``, and of
    ``body`` plus the background compiles it started (the process CPU of both threads)."""
    code = PROBE.format(setup=SETUP, body=textwrap.indent(body, ""))
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "METRICSTREAM_BACKGROUND_COMPILE": background}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1])
    first, total = json.loads(out.stdout.strip().splitlines()[-1])
    return float(first), float(total)


def measure(body: str, background: str) -> tuple[float, float, float]:
    """(cold first use, cold with its compiles finished, warm first use) CPU seconds: an empty
    cache, then a fresh interpreter with the cache the first one left."""
    with tempfile.TemporaryDirectory(prefix="metricstream-cold-") as cache:
        cold, compiled = run_case(body, cache, background)
        warm, _ = run_case(body, cache, background)
    return cold, compiled, warm


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="substrings of the case names to run")
    parser.add_argument(
        "--modes", nargs="*", choices=sorted(MODES), default=list(MODES), help="what to time"
    )
    args = parser.parse_args(argv)
    print(f"machine: {cpu_description()}, {os.cpu_count()} cores")
    print(
        "CPU seconds of the first update in a fresh interpreter (import included): cold = empty "
        "Numba cache, +compiles = cold until its background compiles finished, warm = the cache "
        "the cold run left"
    )
    header = f"{'case':32s}"
    for mode in args.modes:
        header += f" {mode + ' cold':>12s} {'+compiles':>10s} {mode + ' warm':>12s}"
    print(header)
    cases = {
        name: body
        for name, body in CASES.items()
        if not args.only or any(part in name for part in args.only)
    }
    if not args.only:
        cases["whole first-use script"] = "\n".join(CASES.values())
    for name, body in cases.items():
        line = f"{name:32s}"
        for mode in args.modes:
            cold, compiled, warm = measure(body, MODES[mode])
            line += f" {cold:12.2f} {compiled:10.2f} {warm:12.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
