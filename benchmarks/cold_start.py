"""``python -m benchmarks.cold_start``: the CPU time of a first update on a machine that has never
compiled metricstream's kernels, per accumulator and input kind, beside the warm time.

Each case runs in a fresh interpreter with an empty Numba cache directory (``NUMBA_CACHE_DIR``),
as in a new virtual environment, container or cluster node; then again in a fresh interpreter
with the cache that the first run left (a warm start: import, load from cache, update). CPU time
(user + system of the child), not wall time: the machine is shared. The last row runs every case
in one interpreter, as a training script would.
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
}

PROBE = """
import os, resource, time
{setup}
before = resource.getrusage(resource.RUSAGE_SELF)
{body}
after = resource.getrusage(resource.RUSAGE_SELF)
import json
print(json.dumps((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)))
"""


def run_case(body: str, cache: str) -> float:
    """CPU seconds of ``body`` in a fresh interpreter whose Numba cache is ``cache``."""
    code = PROBE.format(setup=SETUP, body=textwrap.indent(body, ""))
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1])
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="substrings of the case names to run")
    args = parser.parse_args(argv)
    print(f"machine: {cpu_description()}, {os.cpu_count()} cores")
    print(f"{'case':36s} {'cold CPU s':>10s} {'warm CPU s':>10s}")
    cases = {
        name: body
        for name, body in CASES.items()
        if not args.only or any(part in name for part in args.only)
    }
    for name, body in cases.items():
        with tempfile.TemporaryDirectory(prefix="metricstream-cold-") as cache:
            cold = run_case(body, cache)
            warm = run_case(body, cache)
        print(f"{name:36s} {cold:10.2f} {warm:10.3f}", flush=True)
    if not args.only:
        script = "\n".join(CASES.values())
        with tempfile.TemporaryDirectory(prefix="metricstream-cold-") as cache:
            cold = run_case(script, cache)
            warm = run_case(script, cache)
        print(f"{'whole first-use script':36s} {cold:10.2f} {warm:10.3f}")


if __name__ == "__main__":
    main()
