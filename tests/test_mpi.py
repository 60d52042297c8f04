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

if __package__ in (None, ""):  # run by mpirun as a script: make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metricstream import AccumulatorGroup, ConfusionAccumulator  # noqa: E402
from tests.sync_fixtures import (  # noqa: E402
    GROUP_FLOAT_SIZE,
    GROUP_INT_SIZE,
    WeightTotals,
    feed,
    group_data,
    make_group,
    states,
)
from tests.sync_fixtures import (
    K as GROUP_K,
)

# Every test here runs inside one `mpirun -n 2` session (tens of seconds): slow tests.
pytestmark = pytest.mark.slow

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

        self._log.append(
            [
                "Allreduce",
                int(np.asarray(recvbuf).size),
                "SUM" if op == MPI.SUM else "MAX" if op == MPI.MAX else str(op),
            ]
        )
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
    results["copy"] = {
        "matrix": synced.matrix.tolist(),
        "calls": list(log),
        "untouched": bool(np.array_equal(acc.matrix, local)),
    }
    del log[:]
    returned = allreduce(acc, comm)
    results["inplace"] = {
        "matrix": acc.matrix.tolist(),
        "calls": list(log),
        "self": returned is acc,
    }
    del log[:]
    acc = ConfusionAccumulator(K, class_names=NAMES, ignore_index=-1, weighted=True)
    acc.update(y_true[shard], y_pred[shard], weights[shard])
    allreduce(acc)  # the default communicator, COMM_WORLD
    results["weighted"] = {"matrix": acc.matrix.tolist()}
    for name, change in {
        "num_classes": {"num_classes": K + 1, "class_names": None},
        "class_names": {"class_names": NAMES[::-1]},
    }.items():
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

    # A group of six accumulators: one Allgather, one Allreduce per state dtype.
    gdata = group_data()
    group = feed(make_group(), gdata, shard)
    local = states(group)
    del log[:]
    synced = allreduce(group, comm, inplace=False)
    results["group_copy"] = {
        "state": states(synced),
        "calls": list(log),
        "untouched": states(group) == local,
    }
    del log[:]
    returned = allreduce(group, comm)
    results["group_inplace"] = {
        "state": states(group),
        "calls": list(log),
        "self": returned is group,
    }

    def attempt(name, target):
        before = (
            states(target)
            if hasattr(target, "state_arrays") or isinstance(target, AccumulatorGroup)
            else None
        )
        del log[:]
        try:
            allreduce(target, comm)
        except Exception as error:  # noqa: BLE001 - recorded for the test
            outcome = {"error": type(error).__name__, "message": str(error)}
        else:
            outcome = {"error": None, "message": None}
        outcome.update(calls=list(log), unchanged=before is None or states(target) == before)
        results[name] = outcome

    attempt(
        "group_mismatch",
        make_group() if rank == 0 else make_group(totals=WeightTotals(GROUP_K + 1)),
    )
    attempt("non_accumulator", group if rank == 0 else [1, 2, 3])
    attempt("overflow", ConfusionAccumulator.from_matrix(np.array([[2**62, 0], [0, 0]])))
    group = feed(make_group(), gdata, shard)
    results["after_hostile"] = {"state": states(allreduce(group, comm))}
    Path(out, f"rank{rank}.json").write_text(json.dumps(results))


def _mpi_skip_reason() -> str | None:
    if shutil.which("mpirun") is None:
        return "no `mpirun` on PATH (install Open MPI: apt-get install openmpi-bin)"
    if importlib.util.find_spec("mpi4py") is None:
        return 'mpi4py is not installed (pip install "metricstream[mpi]")'
    probe = subprocess.run(
        [sys.executable, "-c", "from mpi4py import MPI"], capture_output=True, text=True, timeout=60
    )
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
    command += [
        "--oversubscribe",
        "--mca",
        "btl_tcp_if_include",
        "lo",
        sys.executable,
        __file__,
        "--worker",
        str(out),
    ]
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
        np.testing.assert_allclose(rank["weighted"]["matrix"], _expected(weighted=True), rtol=1e-12)


def test_two_collectives_and_local_copy_untouched(ranks):
    for rank in ranks:
        for scenario in ("copy", "inplace"):
            assert rank[scenario]["calls"] == [["Allgather", 12, None], ["Allreduce", K * K, "SUM"]]
        assert rank["copy"]["untouched"] is True
        assert rank["inplace"]["self"] is True


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("num_classes", r"`num_classes` is 5 on rank 0 and 6 on rank 1\."),
        ("class_names", r"`class_names\[0\]` is 'a' on rank 0 and 'e' on rank 1\."),
    ],
)
def test_mismatch_raises_the_same_error_on_every_rank(ranks, name, fragment):
    messages = [rank[f"mismatch-{name}"]["message"] for rank in ranks]
    assert messages[0] == messages[1]
    assert re.search(
        r"cannot allreduce accumulators configured differently across the 2 "
        r"ranks: " + fragment,
        messages[0],
    )
    for rank in ranks:
        calls = rank[f"mismatch-{name}"]["calls"]
        # The check, then the descriptions (lengths, texts); no Allreduce.
        assert [c[0] for c in calls] == ["Allgather"] * 3 and calls[0][1] == 12


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(f"usage: mpirun -n 2 {sys.argv[0]} --worker OUT_DIR (started by pytest)")


def test_group_of_six_in_one_allgather_and_one_allreduce_per_dtype(ranks):
    expected = states(feed(make_group(), group_data(), slice(None)))
    for rank in ranks:
        for scenario in ("group_copy", "group_inplace"):
            assert rank[scenario]["state"] == expected
            assert rank[scenario]["calls"] == [
                ["Allgather", 12, None],
                ["Allreduce", GROUP_INT_SIZE, "SUM"],
                ["Allreduce", GROUP_FLOAT_SIZE, "SUM"],
            ]
        assert rank["group_copy"]["untouched"] is True
        assert rank["group_inplace"]["self"] is True
        assert rank["after_hostile"]["state"] == expected  # still in step after the refusals


def test_group_mismatch_names_the_member_on_every_rank(ranks):
    outcomes = [rank["group_mismatch"] for rank in ranks]
    assert outcomes[0]["message"] == outcomes[1]["message"]
    assert "member 'totals': `size` is 7 on rank 0 and 8 on rank 1." in outcomes[0]["message"]
    assert all(o["error"] == "ValueError" and o["unchanged"] for o in outcomes)
    assert all("Allreduce" not in [c[0] for c in o["calls"]] for o in outcomes)


def test_non_accumulator_and_overflow_raise_on_every_rank(ranks):
    zero, one = ranks[0]["non_accumulator"], ranks[1]["non_accumulator"]
    assert one["error"] == "TypeError" and "got list" in one["message"]
    assert zero["error"] == "ValueError" and "rank(s) 1 could not take part" in zero["message"]
    assert zero["unchanged"] is True
    for rank in ranks:
        outcome = rank["overflow"]
        assert outcome["error"] == "ValueError"
        assert (
            "cannot allreduce: the summed int64 counts could pass 2**63 - 1" in outcome["message"]
        )
        assert outcome["calls"] == [["Allgather", 12, None]] and outcome["unchanged"] is True
