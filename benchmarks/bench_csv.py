"""Benchmark: ``metricstream report`` over a 10-million-row CSV against pyarrow merely reading it.

Run from the repository root (needs pyarrow)::

    python -m benchmarks.bench_csv               # 10 million rows, 7 rounds
    python -m benchmarks.bench_csv --rows 1e6    # a quicker run

The CSV (two integer columns ``y_true,y_pred``, 20 classes, ~80 % agreement) is generated into a
temporary directory and deleted afterwards; it is never committed. Three comparisons:

* **in process** — the report's work (:func:`metricstream.io.readers.read_confusion`: streaming
  read, counting, growing the matrix, then the summary of :mod:`metricstream.report`) against
  ``pyarrow.csv.read_csv`` (pyarrow's fastest way to read the file: all cores, whole table in
  memory) and against pyarrow's streaming reader alone, timed round-robin so that a burst of
  foreign load on this shared machine lands on every candidate alike; medians over the rounds.
* **command line** — ``python -m metricstream report FILE --format json`` against
  ``python -c "pyarrow.csv.read_csv(FILE)"``, each a fresh process (interpreter start and
  imports included: numba's import is most of the difference), medians over the rounds.
* **memory** — the peak resident memory of the command on this file and on a file a tenth of
  its size: bounded memory means the two are about equal, whereas ``read_csv`` grows with
  the file.

Before any time is reported, the matrix counted by the report is checked equal to one counted
with ``np.bincount`` from pyarrow's table. Target: report ≤ 2 × pyarrow's read.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

NUM_CLASSES = 20
TARGET_RATIO = 2.0


def write_csv(path: Path, num_rows: int, seed: int = 0) -> None:
    """Write ``y_true,y_pred`` integer rows with pyarrow's CSV writer (seconds, not minutes)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    with pacsv.CSVWriter(
        path,
        pa.schema([("y_true", pa.int64()), ("y_pred", pa.int64())]),
        write_options=pacsv.WriteOptions(quoting_style="none"),
    ) as writer:
        for start in range(0, num_rows, 1 << 21):
            size = min(1 << 21, num_rows - start)
            y_true = rng.integers(0, NUM_CLASSES, size)
            noise = rng.integers(0, NUM_CLASSES, size)
            y_pred = np.where(rng.random(size) < 0.8, y_true, noise)
            writer.write_table(pa.table({"y_true": y_true, "y_pred": y_pred}))


def interleaved(candidates: dict[str, Callable[[], object]], rounds: int) -> dict[str, list]:
    """Seconds of each call, every candidate once per round in an order shuffled each round
    (seeded), so that no candidate always runs after the same neighbour."""
    for function in candidates.values():
        function()  # warm-up: JIT cache load, page cache, thread pools
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    order = random.Random(rounds)
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            gc.collect()
            start = time.perf_counter()
            candidates[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def report_work(path: Path) -> np.ndarray:
    """What ``metricstream report`` computes: the streamed matrix and the summary."""
    from metricstream.io.readers import read_confusion
    from metricstream.report import summary

    acc = read_confusion(path).accumulator
    summary(acc.matrix, class_names=acc.class_names)
    return acc.matrix


def pyarrow_read(path: Path) -> object:
    import pyarrow.csv as pacsv

    return pacsv.read_csv(path)


def pyarrow_stream(path: Path) -> int:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    options = pacsv.ConvertOptions(column_types={"y_true": pa.int64(), "y_pred": pa.int64()})
    rows = 0
    with pacsv.open_csv(path, convert_options=options) as reader:
        for batch in reader:
            rows += batch.num_rows
    return rows


def check_equal(path: Path) -> None:
    table = pyarrow_read(path)
    y_true = table.column("y_true").to_numpy()
    y_pred = table.column("y_pred").to_numpy()
    expected = np.bincount(NUM_CLASSES * y_true + y_pred, minlength=NUM_CLASSES**2).reshape(
        NUM_CLASSES, NUM_CLASSES
    )
    matrix = report_work(path)
    if not np.array_equal(matrix, expected):
        raise SystemExit("metricstream's matrix differs from np.bincount over pyarrow's table")


def run_process(args: list[str]) -> tuple[float, int]:
    """Wall time and peak resident memory (bytes) of one fresh Python process (Linux)."""
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child would
    # report at least the (large) peak of this parent process.
    probe = (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "status = open('/proc/self/status').read()\n"
        "print(status.split('VmHWM:')[1].split()[0], file=sys.stderr)\n"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
    return elapsed, int(done.stderr.strip().splitlines()[-1]) * 1024


READ_MODULE = "benchmarks.bench_csv"  # `python -m benchmarks.bench_csv --read FILE`


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_csv", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=float, default=10_000_000, help="rows of the CSV")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (medians)")
    parser.add_argument("--read", type=Path, help=argparse.SUPPRESS)  # the pyarrow-only process
    args = parser.parse_args(argv)
    if args.read is not None:
        pyarrow_read(args.read)
        return 0
    try:
        import pyarrow
    except ImportError:
        print("bench_csv needs pyarrow: pip install pyarrow", file=sys.stderr)
        return 1
    num_rows = int(args.rows)

    with tempfile.TemporaryDirectory(prefix="metricstream-bench-csv-") as tmp:
        path, small = Path(tmp) / "predictions.csv", Path(tmp) / "small.csv"
        start = time.perf_counter()
        write_csv(path, num_rows)
        write_csv(small, max(num_rows // 10, 1))
        size = path.stat().st_size
        print(
            f"CSV: {num_rows:,} rows of 2 integer columns, {NUM_CLASSES} classes, "
            f"{size / 1e6:.0f} MB (written in {time.perf_counter() - start:.1f} s); "
            f"pyarrow {pyarrow.__version__}, numpy {np.__version__}"
        )
        check_equal(path)
        print("check: metricstream's matrix == np.bincount over pyarrow's table")

        print(f"\nin process, median of {args.rounds} interleaved rounds:")
        samples = interleaved(
            {
                "pyarrow.csv.read_csv (read only)": lambda: pyarrow_read(path),
                "pyarrow open_csv stream (read only)": lambda: pyarrow_stream(path),
                "metricstream report (read + count + summary)": lambda: report_work(path),
            },
            args.rounds,
        )
        medians = {name: statistics.median(values) for name, values in samples.items()}
        base = medians["pyarrow.csv.read_csv (read only)"]
        width = max(len(name) for name in medians)
        for name, seconds in medians.items():
            rate = num_rows / seconds / 1e6
            print(
                f"  {name:<{width}}  {seconds:7.3f} s  {rate:6.1f} M rows/s  "
                f"{seconds / base:5.2f}x read_csv"
            )
        ratio = medians["metricstream report (read + count + summary)"] / base

        cli = ["metricstream", "report", str(path), "--format", "json"]
        read = [READ_MODULE, "--read", str(path)]
        rounds = max(3, args.rounds // 2)
        times: dict[str, list[float]] = {"cli": [], "read": []}
        peaks: dict[str, list[int]] = {"cli": [], "read": [], "cli_small": []}
        run_process(cli)  # warm the page cache and numba's on-disk cache
        for _ in range(rounds):
            for key, command in (("read", read), ("cli", cli)):
                seconds, peak = run_process(command)
                times[key].append(seconds)
                peaks[key].append(peak)
        peaks["cli_small"].append(
            run_process(["metricstream", "report", str(small), "--format", "json"])[1]
        )
        cli_median, read_median = (statistics.median(times[k]) for k in ("cli", "read"))
        print(f"\ncommand line, fresh processes, median of {rounds}:")
        print(
            f"  python -c 'pyarrow.csv.read_csv(FILE)'               {read_median:7.3f} s  "
            f"peak {max(peaks['read']) / 2**20:5.0f} MiB"
        )
        print(
            f"  python -m metricstream report FILE --format json     {cli_median:7.3f} s  "
            f"peak {max(peaks['cli']) / 2**20:5.0f} MiB "
            f"({max(peaks['cli_small']) / 2**20:.0f} MiB on a file 10x smaller)"
        )
        cli_ratio = cli_median / read_median

    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print(
        f"\nratio report / pyarrow read: {ratio:.2f}x in process, {cli_ratio:.2f}x as commands "
        f"({verdict} the target of at most {TARGET_RATIO:.0f}x in process)"
    )
    print(
        json.dumps(
            {
                "rows": num_rows,
                "in_process_seconds": medians,
                "ratio": ratio,
                "cli_seconds": cli_median,
                "read_process_seconds": read_median,
                "cli_ratio": cli_ratio,
                "cli_peak_bytes": max(peaks["cli"]),
                "cli_small_peak_bytes": max(peaks["cli_small"]),
                "read_peak_bytes": max(peaks["read"]),
            }
        )
    )
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
