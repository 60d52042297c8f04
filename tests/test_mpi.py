"""metricstream.mpi: ``allreduce`` across the ranks of ``mpirun -n 2``.

Runs when ``mpirun`` and mpi4py are available (CI installs Open MPI from Debian packages);
otherwise the tests are skipped with the reason. This file is also the MPI program
(``--worker``); every scenario is compared with one process counting all the data.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from metricstream import ConfusionAccumulator

K = 5
NAMES = list("abcde")
TIMEOUT = 180


def dataset(n: int = 4000):
    rng = np.random.default_rng(3)
    y_true = rng.integers(0, K, size=n)
    y_true[rng.random(n) < 0.05] = -1
    return y_true, rng.integers(0, K, size=n), rng.random(n)


class CountingComm:
    """A communicator proxy that logs each collective (name, element count, op)."""

    def __init__(self, comm, log):
        self._comm, self._log = comm, log

    def Allreduce(self, sendbuf, recvbuf, op):  # noqa: N802 - mpi4py's spelling
        from mpi4py import MPI

        self._log.append(["Allreduce", int(np.asarray(recvbuf).size),
                          "SUM" if op == MPI.SUM else "MAX" if op == MPI.MAX else str(op)])
        return self._comm.Allreduce(sendbuf, recvbuf, op=op)

    def Allgather(self, sendbuf, recvbuf):  # noqa: N802
        self._log.append(["Allgather", int(np.asarray(recvbuf).size), None])
        return self._comm.Allgather(sendbuf, recvbuf)

    def __getattr__(self, name):
        if name[:1].isupper() and name not in ("Get_size", "Get_rank"):
            self._log.append([name, None, None])
        return getattr(self._comm, name)


def worker(out: str) -> None:
    from mpi4py import MPI

    from metricstream.mpi import allreduce

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    log: list = []
    comm = CountingComm(world, log)
    y_true, y_pred, weights = dataset()
    shard = slice(rank, None, size)
    results: dict = {"size": size}

    acc = ConfusionAccumulator(K, class_names=NAMES, ignore_index=-1)
    acc.update(y_true[shard], y_pred[shard])
    local = acc.matrix.copy()
    synced = allreduce(acc, comm, inplace=False)
    results["copy"] = {"matrix": synced.matrix.tolist(), "calls": list(log),
                       "untouched": bool(np.array_equal(acc.matrix, local))}
    del log[:]
    returned = allreduce(acc, comm)
    results["inplace"] = {"matrix": acc.matrix.tolist(), "calls": list(log),
                          "self": returned is acc}
    del log[:]
    acc = ConfusionAccumulator(K, class_names=NAMES, ignore_index=-1, weighted=True)
    acc.update(y_true[shard], y_pred[shard], weights[shard])
    allreduce(acc)  # the default communicator, COMM_WORLD
    results["weighted"] = {"matrix": acc.matrix.tolist()}
    for name, change in {"num_classes": {"num_classes": K + 1, "class_names": None},
                         "class_names": {"class_names": NAMES[::-1]}}.items():
        kwargs = {"num_classes": K, "class_names": NAMES, "ignore_index": -1}
        if rank == 1:
            kwargs.update(change)
        del log[:]
        try:
            allreduce(ConfusionAccumulator(**kwargs), comm)
        except ValueError as error:
            results[f"mismatch-{name}"] = {"message": str(error), "calls": list(log)}
    acc = ConfusionAccumulator(K, class_names=NAMES, ignore_index=-1)
    acc.update(y_true[shard], y_pred[shard])
    results["after_mismatch"] = {"matrix": allreduce(acc, comm).matrix.tolist()}
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))


def _mpi_skip_reason() -> str | None:
    if shutil.which("mpirun") is None:
        return "no `mpirun` on PATH (install Open MPI: apt-get install openmpi-bin)"
    if importlib.util.find_spec("mpi4py") is None:
        return 'mpi4py is not installed (pip install "metricstream[mpi]")'
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode:
        return f"mpi4py cannot load an MPI library: {probe.stderr.strip().splitlines()[-1:]}"
    return None


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    reason = _mpi_skip_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("mpi")
    command = ["mpirun", "-n", "2"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    command += ["--oversubscribe", "--mca", "btl_tcp_if_include", "lo",
                sys.executable, __file__, "--worker", str(out)]
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"mpirun did not finish in {TIMEOUT} s: {error.stdout}\n{error.stderr}")
    assert proc.returncode == 0, f"mpirun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


def _expected(weighted=False):
    y_true, y_pred, weights = dataset()
    acc = ConfusionAccumulator(K, class_names=NAMES, ignore_index=-1, weighted=weighted)
    return acc.update(y_true, y_pred, weights if weighted else None).matrix


@pytest.mark.parametrize("scenario", ["copy", "inplace", "after_mismatch"])
def test_allreduce_equals_one_process_on_all_data(ranks, scenario):
    for rank in ranks:
        assert rank["size"] == 2
        np.testing.assert_array_equal(rank[scenario]["matrix"], _expected())


def test_weighted_allreduce(ranks):
    for rank in ranks:
        np.testing.assert_allclose(rank["weighted"]["matrix"], _expected(weighted=True),
                                   rtol=1e-12)


def test_two_collectives_and_local_copy_untouched(ranks):
    for rank in ranks:
        for scenario in ("copy", "inplace"):
            assert rank[scenario]["calls"] == [["Allgather", 14, None],
                                               ["Allreduce", K * K, "SUM"]]
        assert rank["copy"]["untouched"] is True
        assert rank["inplace"]["self"] is True


@pytest.mark.parametrize("name, fragment", [
    ("num_classes", r"`num_classes` is 5 on rank 0 and 6 on rank 1\."),
    ("class_names",
     r"`class_names` differ between ranks \(list 1 on rank 0 and list 2 on rank 1\)"),
])
def test_mismatch_raises_the_same_error_on_every_rank(ranks, name, fragment):
    messages = [rank[f"mismatch-{name}"]["message"] for rank in ranks]
    assert messages[0] == messages[1]
    assert re.search(r"cannot allreduce accumulators configured differently across the 2 "
                     r"ranks: " + fragment, messages[0])
    for rank in ranks:
        assert rank[f"mismatch-{name}"]["calls"] == [["Allgather", 14, None]]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(f"usage: mpirun -n 2 {sys.argv[0]} --worker OUT_DIR (started by pytest)")
