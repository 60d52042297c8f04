#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one run: the device-path tests on the GPU (every test of
# the device path, its CPU proofs included, with the Numba reference), then the device benchmark.
# Run from the repository root on a machine with torch (CUDA build), numba, numpy, pytest,
# hypothesis and pytest-xdist; metricstream is taken from the working tree. Logs go to $OUT
# (default /tmp/gpu_check).
set -u
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
    nvidia-smi -L
    python3 -c "import torch, numba, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numba', numba.__version__, 'numpy', numpy.__version__)"
    nproc
} 2>&1 | tee "$out/machine.log"
tests=${TESTS:-$(ls tests/test_device*.py)}
timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -o addopts="" -q -ra \
    --run-slow -n "${WORKERS:-8}" $tests 2>&1 | tee "$out/tests.log" | tail -60
timeout "${BENCH_TIMEOUT:-240}" python3 -m benchmarks.bench_device --device cuda 2>&1 |
    tee "$out/bench.log"
