"""Hostile files through the real command, each in its own process with its time and peak memory
measured: the command must finish (or fail with one line) within generous bounds, whatever the
file holds. The bounds are functional limits with about ten times headroom over what a quiet
2-core machine needs, not benchmarks; each case once took minutes or gigabytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

# Peak resident memory allowed to any run: the interpreter with numpy, numba and pyarrow takes
# about 200-300 MB warm, and up to about 1.1 GiB in a fresh install where the child compiles its
# kernels (LLVM); the failures these tests guard against took 2.4 to 44 GiB.
MEMORY_BOUND = 7 << 28  # 1.75 GiB


@dataclass
class Run:
    returncode: int
    stderr: str
    seconds: float
    peak_bytes: int


# Spawns the command from a small process and reports its exit code and peak RSS. Linux counts
# in a child's peak RSS the pages it shared with its parent before exec: started straight from a
# test worker that has grown (torch, Spark or a compiled model loaded by an earlier test), the
# command would "peak" at the worker's size.
_SPAWNER = """
import os, subprocess, sys
process = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss * 1024}")
"""


def measure(tmp_path: Path, *args: str | os.PathLike, timeout: float) -> Run:
    """Run ``python -m metricstream ARGS``; its exit code, stderr, wall time and peak RSS.

    ``os.wait4`` in a small spawning process gives the resource usage of exactly the command
    (``RUSAGE_CHILDREN`` would mix in every earlier child); a timer kills both if the command
    runs past ``timeout``.
    """
    err_path = tmp_path / "stderr.txt"
    result_path = tmp_path / "usage.txt"
    command = [sys.executable, "-m", "metricstream", *map(str, args)]
    with open(err_path, "wb") as err:
        start = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-c", _SPAWNER, str(result_path), *command],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            process.wait()
        finally:
            timer.cancel()
        seconds = time.monotonic() - start
    stderr = err_path.read_text(encoding="utf-8", errors="replace")
    assert seconds < timeout, f"still running after {timeout} s: {args}"
    code, peak = (int(part) for part in result_path.read_text().split())
    return Run(code, stderr, seconds, peak)


def assert_bounded(run: Run, seconds: float) -> None:
    assert run.seconds < seconds, f"took {run.seconds:.1f} s (bound {seconds} s)"
    assert run.peak_bytes < MEMORY_BOUND, f"peak {run.peak_bytes / 2**20:.0f} MiB"


def one_line_error(run: Run, code: int = 1) -> str:
    assert run.returncode == code, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("metricstream: error: "), (
        run.stderr
    )
    return run.stderr


@pytest.mark.slow
def test_stray_quotes_in_unquoted_fields_stay_linear(tmp_path):
    # 700,000 rows with `tv 12"` in a free-text column: once did not finish in ten minutes
    path = tmp_path / "p.csv"
    with open(path, "w", encoding="utf-8") as file:
        file.write("y_true,y_pred,item\n")
        for _ in range(70):
            file.write("".join(f'{i % 3},{(i * 7) % 3},tv 12"\n' for i in range(10_000)))
    run = measure(tmp_path, "report", path, "--format", "json", timeout=120)
    assert run.returncode == 0, run.stderr
    assert_bounded(run, 120)


@pytest.mark.parametrize("names", [10_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_many_distinct_names_stop_at_the_class_limit(tmp_path, names):
    # 118 KB with 10,000 names once took 2.4 GiB; 1.4 MB with 100,000 tried to allocate 43.6 GiB
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred\n" + "".join(f"n{i},n{i // 2}\n" for i in range(names)))
    run = measure(tmp_path, "report", path, timeout=60)
    message = one_line_error(run)
    assert "over the limit of 4,096 classes" in message and "`--max-classes 8192`" in message
    assert_bounded(run, 60)


@pytest.mark.slow
def test_a_ten_million_character_field(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("y_true,y_pred,note\n0,0,a\n1,1," + "x" * 10_000_000 + "\n1,0,b\n")
    for reader in ("pyarrow", "python"):
        run = measure(tmp_path, "report", path, "--reader", reader, timeout=60)
        message = one_line_error(run)
        assert "longer than" in message
        assert_bounded(run, 60)


@pytest.mark.slow
def test_a_quote_that_never_closes(tmp_path):
    # an opening quote at the start of a field swallows the rest of a 40 MB file
    path = tmp_path / "p.csv"
    with open(path, "w", encoding="utf-8") as file:
        file.write('y_true,y_pred,note\n0,0,"open\n')
        file.write("1,1,x\n" * 7_000_000)
    run = measure(tmp_path, "report", path, timeout=60)
    assert "(a quoted field that is never closed?)" in one_line_error(run)
    assert_bounded(run, 60)


@pytest.mark.slow  # ~6 s
def test_a_failed_parse_never_aborts_the_interpreter(tmp_path):
    # pyarrow's streaming reader over the open file once left a read-ahead thread behind when the
    # type inference failed: "terminate called without an active exception", exit -6, about one
    # run in seven. Run it often enough that a return would be caught (0.85**16 < 8 %).
    path = tmp_path / "p.csv"
    with open(path, "w", encoding="utf-8") as file:
        file.write('y_true,y_pred,note\n0,0,"open\n')
        file.write("1,1,x\n" * 2_000_000)
    for _ in range(16):
        run = measure(tmp_path, "report", path, timeout=60)
        assert "(a quoted field that is never closed?)" in one_line_error(run)


@pytest.mark.slow  # ~10 s: 400 MB to compress and count (test_io checks the same path's counts)
def test_fortran_order_npz_is_streamed(tmp_path):
    # a 3 MB compressed Fortran-order archive once peaked at 4.6 GiB: it was loaded whole
    def archive(name: str, shape: tuple[int, ...]) -> Path:
        truth = np.zeros(shape, dtype=np.uint8, order="F")
        truth[0, 0, :7] = 1
        np.savez_compressed(tmp_path / name, y_true=truth, y_pred=truth)
        return tmp_path / name

    small = measure(
        tmp_path, "report", archive("s.npz", (1, 10, 10)), "--format", "json", timeout=60
    )
    assert small.returncode == 0, small.stderr
    size = 200_000_000  # two members of 200 MB each (uint8), about 0.4 MB compressed
    big = archive("m.npz", (200, 1000, 1000))
    # Once to compile what this archive's path needs (compiling takes tens of MB on a cold
    # cache), then measured.
    measure(tmp_path, "report", big, "--format", "json", timeout=120)
    run = measure(tmp_path, "report", big, "--format", "json", timeout=120)
    assert run.returncode == 0, run.stderr
    assert_bounded(run, 120)
    # streamed in the members' own order: a few chunks of a million elements, never a member
    # (measured: 2 MB over the small archive's peak; loading one member whole would add 200 MB)
    assert run.peak_bytes - small.peak_bytes < size // 8


# ---------------------------------------------------------------------- mutated files, in process
def _seed_files(tmp_path: Path) -> dict[str, bytes]:
    import gzip

    truth = np.random.default_rng(0).integers(0, 4, (3, 6, 5))
    pred = (truth + 1) % 4
    np.savez(tmp_path / "s.npz", y_true=truth, y_pred=pred, class_names=np.array(list("abcd")))
    np.savez_compressed(tmp_path / "f.npz", y_true=np.asfortranarray(truth), y_pred=pred)
    np.save(tmp_path / "s.npy", np.stack([truth.ravel(), pred.ravel()], 1))
    text = "y_true,y_pred,w\n" + "".join(
        f'{t},"{p}",1.5\n' for t, p in zip(truth.ravel(), pred.ravel(), strict=True)
    )
    files = {
        ".npz": (tmp_path / "s.npz").read_bytes(),
        "f.npz": (tmp_path / "f.npz").read_bytes(),
        ".npy": (tmp_path / "s.npy").read_bytes(),
        ".csv": text.encode(),
        ".csv.gz": gzip.compress(text.encode()),
    }
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the environment
        return files
    pq.write_table(
        pa.table({"y_true": truth.ravel(), "y_pred": pred.ravel()}), tmp_path / "s.parquet"
    )
    files[".parquet"] = (tmp_path / "s.parquet").read_bytes()
    return files


def _mutate(rng: np.random.Generator, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(int(rng.integers(1, 7))):
        op = rng.random()
        at = int(rng.integers(0, len(out) + 1))
        if op < 0.4 and out:
            out[min(at, len(out) - 1)] = int(rng.integers(0, 256))
        elif op < 0.6:
            del out[at:]
        elif op < 0.8:
            out[at:at] = rng.integers(0, 256, int(rng.integers(1, 20)), dtype=np.uint8).tobytes()
        else:
            out[at:at] = [b'"', b"\n", b",", b"\xff", b"255", b"-1", b"nan", b"\r"][
                int(rng.integers(0, 8))
            ]
    return bytes(out)


def test_mutated_files_give_a_report_or_one_line(tmp_path):
    """Random damage to every kind of input: a report, or exit 1/2 with one error line."""
    import contextlib
    import io

    from metricstream.cli import main

    seeds = _seed_files(tmp_path)
    names = sorted(seeds)
    options = [
        [],
        ["--weight", "w"],
        ["--ignore", "255"],
        ["--labels", "str"],
        ["--classes", "a,b,c,d"],
        ["--reader", "python"],
    ]
    rng = np.random.default_rng(20261123)
    for case in range(150):
        name = names[case % len(names)]
        path = tmp_path / f"case{case}{name}"
        path.write_bytes(_mutate(rng, seeds[name]))
        argv = [
            "report",
            str(path),
            "--format",
            "json",
            *options[int(rng.integers(0, len(options)))],
        ]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exit_:
                code = exit_.code
        errors = [
            line for line in err.getvalue().splitlines() if line.startswith("metricstream: error: ")
        ]
        if code == 0:
            assert errors == [] and out.getvalue().startswith("{"), argv
        else:
            assert code in (1, 2) and len(errors) == 1, (argv, err.getvalue())
            assert err.getvalue().splitlines()[-1] == errors[0]
