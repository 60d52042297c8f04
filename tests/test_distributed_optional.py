"""The integrations are optional and lazy: importing metricstream (or its integration modules)
imports none of torch, dask, distributed or mpi4py, and a missing one says which pip install
fixes it. The checks run in fresh interpreters, where ``sys.modules`` starts clean (the
missing-extra calls share one, with every library they need blocked)."""

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


MISSING_EXTRA_CASES = [
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
]
MISSING_EXTRA_IDS = ["torch", "dask", "dask-accumulate", "torch-group", "mpi4py"]


@pytest.fixture(scope="module")
def missing_extra_messages() -> list[str]:
    """What each call of ``MISSING_EXTRA_CASES`` printed, all run in one fresh interpreter where
    none of the blocked libraries can be imported (each call imports only its own integration)."""
    blocked = sorted({case[0] for case in MISSING_EXTRA_CASES})
    lines = ["import sys"]
    lines += [f"sys.modules[{name!r}] = None  # as if not installed" for name in blocked]
    lines += ["from metricstream import ConfusionAccumulator", "acc = ConfusionAccumulator(2)"]
    for _, call, _ in MISSING_EXTRA_CASES:
        lines += ["try:", f"    {call}", "except ImportError as error:", "    print(error)"]
        lines += ["print('-- next --')"]
    proc = _run("\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    messages = proc.stdout.split("-- next --\n")
    assert len(messages) == len(MISSING_EXTRA_CASES) + 1, proc.stdout
    return messages[:-1]


@pytest.mark.parametrize("case", range(len(MISSING_EXTRA_CASES)), ids=MISSING_EXTRA_IDS)
def test_missing_extra_names_the_pip_command(case, missing_extra_messages):
    _, _, fragments = MISSING_EXTRA_CASES[case]
    for fragment in fragments:
        assert fragment in missing_extra_messages[case]
