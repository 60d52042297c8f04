"""The integrations are optional and lazy: importing metricstream (or its integration modules)
imports none of torch, dask, distributed or mpi4py, and a missing one says which pip install
fixes it. Each check runs in a fresh interpreter, where ``sys.modules`` starts clean."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "dask", "distributed", "mpi4py", "torchmetrics")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_metricstream_imports_no_integration():
    proc = _run(
        "import sys\n"
        "import metricstream\n"
        "import metricstream.serialization, metricstream.distributed, metricstream.dask\n"
        "import metricstream.mpi\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "blocked, call, fragments",
    [
        (
            "torch",
            "from metricstream.distributed import all_reduce; all_reduce(acc)",
            [
                "metricstream.distributed needs PyTorch, which is not installed",
                'pip install "metricstream[torch]"',
            ],
        ),
        (
            "dask",
            "from metricstream.dask import confusion; confusion([0], [0], 2)",
            ["metricstream.dask needs dask", 'pip install "metricstream[dask]"'],
        ),
        (
            "dask",
            "from metricstream.dask import accumulate; accumulate(acc, [0], [0])",
            ["metricstream.dask needs dask", 'pip install "metricstream[dask]"'],
        ),
        (
            "torch",
            "from metricstream.distributed import all_reduce\n    "
            "from metricstream import AccumulatorGroup\n    "
            "all_reduce(AccumulatorGroup(a=acc))",
            ["metricstream.distributed needs PyTorch, which is not installed"],
        ),
        (
            "mpi4py",
            "from metricstream.mpi import allreduce; allreduce(acc)",
            [
                "metricstream.mpi needs mpi4py and an MPI library",
                'pip install "metricstream[mpi]" and install MPI',
            ],
        ),
    ],
    ids=["torch", "dask", "dask-accumulate", "torch-group", "mpi4py"],
)
def test_missing_extra_names_the_pip_command(blocked, call, fragments):
    proc = _run(
        f"import sys\nsys.modules[{blocked!r}] = None  # as if not installed\n"
        "from metricstream import ConfusionAccumulator\nacc = ConfusionAccumulator(2)\n"
        f"try:\n    {call}\nexcept ImportError as error:\n    print(error)\n"
    )
    assert proc.returncode == 0, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stdout
