"""The distributed examples run as the README says (with smaller sizes) and check themselves:
each asserts its merged or synced result equals one process counting all the data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def _run(script: str, *args: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _attempt in range(3):
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / script), *args],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        # A free port probed by the example can be taken by another process before it binds.
        if proc.returncode == 0 or "address already in use" not in proc.stderr.lower():
            break
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_ddp_training():
    pytest.importorskip("torch", reason='needs PyTorch: pip install "metricstream[torch]"')
    out = _run("ddp_training.py", "--epochs", "2")
    assert "epoch 2: train acc" in out and "(N=6000)" in out and "(N=1001;" in out
    assert "synced validation matrix == single-process evaluation of all 1001 samples" in out


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [False, True], ids=["threads", "local-cluster"])
def test_dask_offline_eval(tmp_path, cluster):
    pytest.importorskip("dask.dataframe", reason='needs dask: pip install "metricstream[dask]"')
    pytest.importorskip("distributed")
    args = ["--data", str(tmp_path), "--samples", "300000", "--chunk", "70000"]
    out = _run("dask_offline_eval.py", *args, *(["--cluster"] if cluster else []))
    assert "300000 samples in 5 chunks" in out
    assert "equal to each other and to the in-memory result: True" in out


@pytest.mark.slow
def test_process_pool_merge_and_resume(tmp_path):
    out = _run("process_pool_merge.py", "--shards", "4", "--out", str(tmp_path))
    assert "evaluating 4 in 2 processes" in out
    assert "all equal one process counting every shard: True" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"shard-00{i}.msacc" for i in range(4)]
    (tmp_path / "shard-002.msacc").unlink()
    again = _run("process_pool_merge.py", "--shards", "4", "--out", str(tmp_path))
    assert "3 shard(s) already saved" in again and "evaluating 1 in 2 processes" in again
    assert "all equal one process counting every shard: True" in again
