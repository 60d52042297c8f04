#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one run: the device benchmark, then the device-path tests
# on the GPU (with the Numba path as their reference). Run from the repository root on a machine
# with torch (CUDA build), numba, numpy, pytest, hypothesis and pytest-xdist; metricstream is
# taken from the working tree. Logs go to $OUT (default /tmp/gpu_check).
#   TESTS         test files (default: every tests/test_device*.py)
#   PYTEST_ARGS   extra pytest arguments (default: --run-slow)
#   PYTEST_K      a pytest -k expression (default: every test)
#   BENCH_ARGS    arguments of benchmarks.bench_device (default: none: full sizes)
set -u
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
    nvidia-smi -L
    python3 -c "import torch, numba, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numba', numba.__version__, 'numpy', numpy.__version__)"
    nproc
} 2>&1 | tee "$out/machine.log"
timeout "${BENCH_TIMEOUT:-240}" python3 -m benchmarks.bench_device --device cuda ${BENCH_ARGS:-} 2>&1 |
    tee "$out/bench.log"
tests=${TESTS:-$(ls tests/test_device*.py)}
timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -p no:cacheprovider -o addopts="" -q -ra \
    -n "${WORKERS:-8}" ${PYTEST_ARGS:---run-slow} -k "${PYTEST_K:-}" $tests 2>&1 | grep -v "^DEBUG" |
    tee "$out/tests.log" | tail -40
