"""metricstream.distributed: summing accumulators across torch.distributed ranks.

The multi-process tests start 2 real gloo ranks (this file run as a script, ``--worker``) that
rendezvous over 127.0.0.1, each counting its shard of one dataset; every scenario's result is
compared with one process counting all the data. Each rank also logs every collective it issues
(name, element count, reduce op), so the tests pin "exactly two all_reduce calls per sync".
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from metricstream import ConfusionAccumulator

WORLD = 2
K = 7
NAMES = [f"class-{i}" for i in range(K)]
BIG_K = 1000
TIMEOUT = 300  # seconds for the whole 2-rank session, far above the ~10 s it needs

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
    "all_gather_object", "broadcast",
    "broadcast_object_list", "reduce", "gather", "scatter", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "send", "recv",
)

MISMATCHES = {
    # name: (rank-1 configuration change, expected message fragment)
    "num_classes": ({"num_classes": K + 1, "class_names": [*NAMES, "extra"]},
                    r"`num_classes` is 7 on rank 0 and 8 on rank 1\."),
    "class_names": ({"class_names": NAMES[::-1]},
                    r"`class_names` differ between ranks "
                    r"\(list 1 on rank 0 and list 2 on rank 1\)"),
    "ignore_index-None": ({"ignore_index": None},
                          r"`ignore_index` is 255 on rank 0 and None on rank 1\."),
    "ignore_index-value": ({"ignore_index": 254},
                           r"`ignore_index` is 255 on rank 0 and 254 on rank 1\."),
    "weighted": ({"weighted": True}, r"`weighted` is False on rank 0 and True on rank 1\."),
}


def dataset(n: int = 6000, seed: int = 0) -> dict[str, np.ndarray]:
    """The global data every rank shards (rank r takes every WORLD-th sample from r)."""
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, K, size=n)
    y_true[rng.random(n) < 0.05] = 255  # ignored samples
    logits = rng.normal(size=(n, K)) + 1.5 * np.eye(K)[np.minimum(y_true, K - 1)]
    return {
        "y_true": y_true,
        "y_pred": logits.argmax(axis=1),
        "logits": logits,
        "weights": rng.random(n) * 3,
        "big_true": rng.integers(0, BIG_K, size=200_000),
        "big_pred": rng.integers(0, BIG_K, size=200_000),
    }


def config(**changes) -> dict:
    base = {"num_classes": K, "class_names": NAMES, "ignore_index": 255}
    base.update(changes)
    return base


# ---------------------------------------------------------------------------- the worker
def _install_counter(dist, log: list) -> None:
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def wrapper(*args, _original=original, _name=name, **kwargs):
            tensor = args[0] if args and hasattr(args[0], "numel") else kwargs.get("tensor")
            op = kwargs.get("op", args[1] if len(args) > 1 and _name == "all_reduce" else None)
            log.append([_name, None if tensor is None else int(tensor.numel()),
                        None if op is None else str(op).split(".")[-1]])
            return _original(*args, **kwargs)

        setattr(dist, name, wrapper)


def worker(rank: int, port: int, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from metricstream.distributed import all_reduce

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=timedelta(seconds=120))
    log: list = []
    _install_counter(dist, log)
    data = dataset()
    shard = slice(rank, None, WORLD)
    results: dict = {}

    def record(name, acc, **extra):
        results[name] = {"matrix": acc.matrix.tolist(), "calls": list(log),
                         "config": {k: v for k, v in acc.state_dict().items() if k != "matrix"},
                         **extra}
        del log[:]

    # Labels, copy: the local accumulator stays as it was.
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    local = acc.matrix.copy()
    del log[:]
    synced = all_reduce(acc, inplace=False)
    record("copy", synced, local_untouched=bool(np.array_equal(acc.matrix, local)),
           distinct=synced is not acc)

    # In place: ``acc`` itself now holds the global counts.
    returned = all_reduce(acc)
    record("inplace", acc, returned_self=returned is acc)

    # Weighted counts from logits (fused argmax), float64.
    acc = ConfusionAccumulator(**config(), weighted=True)
    acc.update(data["y_true"][shard], data["logits"][shard], weights=data["weights"][shard])
    del log[:]
    record("weighted_logits", all_reduce(acc))

    # K = 1000.
    acc = ConfusionAccumulator(BIG_K).update(data["big_true"][shard], data["big_pred"][shard])
    del log[:]
    record("big", all_reduce(acc))

    # Uneven shards: rank 1 saw nothing.
    acc = ConfusionAccumulator(**config())
    if rank == 0:
        acc.update(data["y_true"], data["y_pred"])
    del log[:]
    record("uneven", all_reduce(acc))

    # An explicit process group.
    group = dist.new_group(list(range(WORLD)))
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    del log[:]
    record("subgroup", all_reduce(acc, group=group))

    # Mismatched configurations: every rank raises, then the group still works.
    errors = {}
    for name, (change, _) in MISMATCHES.items():
        acc = ConfusionAccumulator(**config(**(change if rank == 1 else {})))
        acc.update(data["y_true"][shard][:10] % K, data["y_pred"][shard][:10])
        before = acc.matrix.copy()
        del log[:]
        try:
            all_reduce(acc)
        except ValueError as error:
            errors[name] = {"message": str(error), "calls": list(log),
                            "unchanged": bool(np.array_equal(acc.matrix, before))}
        else:
            errors[name] = {"message": None, "calls": list(log)}
    results["mismatch"] = errors
    acc = ConfusionAccumulator(**config()).update(data["y_true"][shard], data["y_pred"][shard])
    del log[:]
    record("after_mismatch", all_reduce(acc))

    Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------- the tests
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(out: Path) -> tuple[list[int], list[str]]:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    port = _free_port()
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", str(rank), str(port), str(out)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(WORLD)
    ]
    deadline = time.monotonic() + TIMEOUT
    outputs = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            output, _ = proc.communicate()
            output += f"\n[killed after {TIMEOUT} s]"
        outputs.append(output)
    return [proc.returncode for proc in procs], outputs


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    out = tmp_path_factory.mktemp("gloo")
    for _attempt in range(3):  # a free port can be taken between probing and binding
        codes, outputs = _launch(out)
        if not any(codes) or "address already in use" not in "".join(outputs).lower():
            break
    assert not any(codes), "\n\n".join(
        f"rank {rank} exited with {code}:\n{text[-4000:]}"
        for rank, (code, text) in enumerate(zip(codes, outputs, strict=True))
    )
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


def _expected(name: str) -> np.ndarray:
    data = dataset()
    if name == "weighted_logits":
        acc = ConfusionAccumulator(**config(), weighted=True)
        return acc.update(data["y_true"], data["logits"], weights=data["weights"]).matrix
    if name == "big":
        return ConfusionAccumulator(BIG_K).update(data["big_true"], data["big_pred"]).matrix
    return ConfusionAccumulator(**config()).update(data["y_true"], data["y_pred"]).matrix


SCENARIOS = ["copy", "inplace", "weighted_logits", "big", "uneven", "subgroup", "after_mismatch"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_synced_result_equals_one_process_on_all_data(ranks, scenario):
    expected = _expected(scenario)
    for rank in ranks:
        synced = np.array(rank[scenario]["matrix"])
        if expected.dtype.kind == "f":
            # Float sums of two partial sums differ from one sequential sum in the last bits.
            np.testing.assert_allclose(synced, expected, rtol=1e-12)
        else:
            np.testing.assert_array_equal(synced, expected)
    assert ranks[0][scenario]["matrix"] == ranks[1][scenario]["matrix"]  # bit-identical


def test_synced_matches_scikit_learn(ranks):
    from sklearn.metrics import confusion_matrix

    data = dataset()
    kept = data["y_true"] != 255
    expected = confusion_matrix(data["y_true"][kept], data["y_pred"][kept], labels=range(K))
    np.testing.assert_array_equal(ranks[0]["copy"]["matrix"], expected)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_exactly_two_collectives_per_sync(ranks, scenario):
    """One all-gather of the 7-value configuration check (2 ranks: 14 values), one SUM of K*K."""
    k = BIG_K if scenario == "big" else K
    for rank in ranks:
        assert rank[scenario]["calls"] == [["all_gather_single", 14, None],
                                           ["all_reduce", k * k, "SUM"]]


def test_configuration_travels_with_the_result(ranks):
    for rank in ranks:
        assert rank["copy"]["config"]["class_names"] == NAMES
        assert rank["copy"]["config"]["ignore_index"] == 255
        assert rank["weighted_logits"]["config"]["weighted"] is True


def test_copy_leaves_local_counts_untouched(ranks):
    for rank in ranks:
        assert rank["copy"]["local_untouched"] is True
        assert rank["copy"]["distinct"] is True


def test_inplace_returns_the_accumulator(ranks):
    for rank in ranks:
        assert rank["inplace"]["returned_self"] is True


@pytest.mark.parametrize("name", MISMATCHES)
def test_mismatch_raises_the_same_error_on_every_rank(ranks, name):
    _, fragment = MISMATCHES[name]
    messages = [rank["mismatch"][name]["message"] for rank in ranks]
    assert messages[0] is not None and messages[0] == messages[1]
    assert "cannot all_reduce accumulators configured differently across the 2 ranks" in messages[0]
    assert re.search(fragment, messages[0])
    for rank in ranks:
        # Only the configuration check ran: no rank entered the data collective.
        assert rank["mismatch"][name]["calls"] == [["all_gather_single", 14, None]]
        assert rank["mismatch"][name]["unchanged"] is True


# ---------------------------------------------------------------------------- in-process checks
def _gathered(*accs):
    from metricstream import _sync

    return np.concatenate([_sync.fingerprint(acc) for acc in accs])


@pytest.mark.parametrize(
    "accs, message",
    [
        ([ConfusionAccumulator(7), ConfusionAccumulator(8), ConfusionAccumulator(7),
          ConfusionAccumulator(7)], "`num_classes` is 7 on ranks 0, 2, 3 and 8 on rank 1."),
        ([ConfusionAccumulator(3), ConfusionAccumulator(4), ConfusionAccumulator(5)],
         "`num_classes` is 3 on rank 0; 4 on rank 1; 5 on rank 2."),
        ([ConfusionAccumulator(2, ignore_index=-1), ConfusionAccumulator(2)],
         "`ignore_index` is -1 on rank 0 and None on rank 1."),
        ([ConfusionAccumulator(2, class_names=["a", "b"]), ConfusionAccumulator(2)],
         "`class_names` differ between ranks (list 1 on rank 0 and list 2 on rank 1)."),
    ],
    ids=["four-ranks", "three-values", "ignore-index", "names-vs-none"],
)
def test_mismatch_messages_name_the_ranks(accs, message):
    from metricstream import _sync

    with pytest.raises(ValueError) as info:
        _sync.check_gathered(_gathered(*accs), "all_reduce")
    assert f"configured differently across the {len(accs)} ranks: {message}" in str(info.value)


def test_matching_fingerprints_pass_and_class_axis_may_differ():
    from metricstream import _sync

    same = [ConfusionAccumulator(4, ["a", "b", "c", "d"], 255, class_axis=ax) for ax in (1, -1)]
    _sync.check_gathered(_gathered(*same), "all_reduce")  # class_axis does not affect merging


def test_protocol_mismatch_is_reported_first():
    from metricstream import _sync

    table = _gathered(ConfusionAccumulator(3), ConfusionAccumulator(4)).reshape(2, -1)
    table[1, 0] += 1
    with pytest.raises(ValueError, match=r"different sync protocols: 1 on rank 0 and 2 on rank 1"):
        _sync.check_gathered(table, "all_reduce")


def test_requires_an_initialized_process_group():
    pytest.importorskip("torch")
    from metricstream.distributed import all_reduce

    with pytest.raises(ValueError, match=r"torch.distributed is not initialized; call"):
        all_reduce(ConfusionAccumulator(3))


def test_rejects_non_accumulators():
    pytest.importorskip("torch")
    from metricstream.distributed import all_reduce

    with pytest.raises(TypeError, match=r"`acc` must be a ConfusionAccumulator, got ndarray"):
        all_reduce(np.zeros((3, 3)))


@pytest.mark.parametrize(
    "backend, expected",
    [("gloo", "cpu"), ("mpi", "cpu"), ("cpu:gloo,cuda:nccl", "cpu"), ("nccl", "cuda:0")],
)
def test_device_follows_the_backend(monkeypatch, backend, expected):
    torch = pytest.importorskip("torch")
    from metricstream import distributed

    class FakeDist:
        @staticmethod
        def get_backend(group):
            return backend

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert distributed._choose_device(torch, FakeDist, None, None) == torch.device(expected)
    assert distributed._choose_device(torch, FakeDist, None, "cpu") == torch.device("cpu")


def test_unknown_backend_asks_for_a_device():
    torch = pytest.importorskip("torch")
    from metricstream import distributed

    class FakeDist:
        @staticmethod
        def get_backend(group):
            return "xccl"

    with pytest.raises(ValueError, match=r"pass `device=`"):
        distributed._choose_device(torch, FakeDist, None, None)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"usage: {sys.argv[0]} --worker RANK PORT OUT_DIR (started by pytest)")
