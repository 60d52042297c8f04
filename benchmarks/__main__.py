"""``python -m benchmarks [--quick] [--no-readme] [--only CASE ...]`` from the repository root."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import sys
import time
from pathlib import Path

from . import suite
from ._timing import cpu_description, format_seconds

README_START = "<!-- benchmarks:start -->"
README_END = "<!-- benchmarks:end -->"


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        pass
    versions = []
    for package in ("numpy", "numba", "scikit-learn", "torch", "torchmetrics", "boost-histogram"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} not installed")
    return (
        f"{cpu} ({cpu_description()}), {os.cpu_count()} cores{memory}; "
        f"{platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; " + ", ".join(versions)
    )


def _cell(seconds: float | None, reference: float) -> str:
    if seconds is None:
        return "–"
    if seconds is reference:
        return f"**{format_seconds(seconds)}**"
    return f"{format_seconds(seconds)} ({seconds / reference:.1f}×)"


def comparison_tables(rows: list[suite.Row]) -> list[str]:
    """Markdown tables, one per set of competitors; ratios are alternative / metricstream."""
    groups: dict[tuple[str, ...], list[suite.Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row.times), []).append(row)
    lines: list[str] = []
    for names, members in groups.items():
        ordered = ["metricstream"] + [name for name in names if name != "metricstream"]
        lines.append("| case | " + " | ".join(ordered) + " |")
        lines.append("|---" * (len(ordered) + 1) + "|")
        for row in members:
            reference = row.times["metricstream"]
            cells = [_cell(row.times.get(name), reference) for name in ordered]
            lines.append(f"| {row.case} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def targets_table(targets: list[suite.Target]) -> list[str]:
    lines = ["| # | target | measured | result |", "|---|---|---|---|"]
    for target in targets:
        lines.append(f"| {target.number} | {target.text} | {target.measured} | {target.verdict} |")
    return lines + [""]


def threshold_table(entries) -> list[str]:
    lines = ["| labels per update | 1 thread | 2 threads |", "|---|---|---|"]
    for size, serial, parallel in entries:
        lines.append(f"| {size:,} | {format_seconds(serial)} | {format_seconds(parallel)} |")
    return lines + [""]


def load_average() -> str:
    try:
        return ", ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def render(results: suite.Results, quick: bool, elapsed: float) -> str:
    command = "python -m benchmarks" + (" --quick" if quick else "")
    lines = [
        f"Measured with `{command}` (from the repository root; about "
        f"{elapsed / 60:.0f} min) on {datetime.date.today().isoformat()}: "
        f"{machine_description()}. Load average (1, 5, 15 min) at the start: "
        f"{results.extra.get('load_start', '?')}, at the end: {load_average()} (other jobs "
        f"shared the two cores).",
        "",
        "Times are medians of interleaved repeats (every repeat times every competitor once, in "
        "a shuffled order, because the machine is shared); `(n×)` is the competitor's time "
        "divided by metricstream's, so larger means metricstream is faster. Every competitor's "
        "matrix is checked equal to metricstream's before it is timed. metricstream runs with "
        "validation and `ignore_index` on; `np.bincount(K*y+p)` validates nothing. The "
        "read-only loop is a Numba loop that only sums both label arrays with the same number "
        "of threads: the memory-bandwidth limit.",
        "",
    ]
    lines += comparison_tables(results.rows)
    lines += ["Targets:", ""]
    lines += targets_table(results.targets)
    compile_times = results.extra.get("compile")
    if compile_times:
        lines += [
            "The kernels are compiled on first use, not at import, and cached on disk (next to "
            "the package, or in the user's cache directory when the package directory is "
            "read-only). The first-ever update of a kind costs one compilation: "
            + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in compile_times.items())
            + " on this machine; later processes load the cached machine code.",
            "",
        ]
    lines += [
        "Notes: narrow (uint8) labels are limited by the scattered increments (about one "
        "increment per cycle per core), not by memory: the read-only loop reads their 20 MB in "
        "well under a millisecond. Wide (int64) labels are limited by memory bandwidth, most "
        "of which one core already draws on this virtual machine, so the second thread adds "
        "less there than on cache-resident data (see the threshold table). Two-thread results "
        "move from run to run with the other jobs sharing the two cores; single-thread kernel "
        "costs are in the comments of `metricstream/_kernels.py`.",
        "",
    ]
    if "threshold" in results.extra:
        lines += [
            "Serial versus two threads for one update, int64 labels, K=10 (sets "
            "`PARALLEL_MIN_LABELS`):",
            "",
        ]
        lines += threshold_table(results.extra["threshold"])
    lines += [
        "Reproduce:",
        "",
        "```bash",
        'pip install -e ".[test]" torchmetrics '
        "boost-histogram   # the last two are optional competitors",
        command,
        "```",
    ]
    return "\n".join(lines) + "\n"


def update_readme(markdown: str, readme: Path) -> None:
    text = readme.read_text()
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{readme} has no {README_START} … {README_END} section")
    text = pattern.sub(lambda _: README_START + "\n" + markdown + README_END, text)
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="smaller inputs and fewer repeats (a minute or two)"
    )
    parser.add_argument(
        "--no-readme",
        action="store_true",
        help="do not rewrite the benchmark section of docs/benchmarks.md (a full run does)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=[case.__name__ for case in suite.CASES],
        help="run only these cases (docs/benchmarks.md untouched)",
    )
    args = parser.parse_args(argv)

    results = suite.Results()
    results.extra["load_start"] = load_average()
    start = time.perf_counter()
    for case in suite.CASES:
        if args.only and case.__name__ not in args.only:
            continue
        case_start = time.perf_counter()
        print(f"… {case.__name__}", file=sys.stderr, flush=True)
        case(results, args.quick)
        print(f"  done in {time.perf_counter() - case_start:.0f} s", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - start

    markdown = render(results, args.quick, elapsed)
    print(markdown)
    out_dir = Path(__file__).resolve().parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / ("quick.md" if args.quick else "latest.md")).write_text(markdown)
    if not (args.quick or args.no_readme or args.only):
        update_readme(markdown, suite.REPO / "docs" / "benchmarks.md")
        print("docs/benchmarks.md benchmark section updated.", file=sys.stderr)
    failed = [t for t in results.targets if t.passed is False]
    print(f"{len(failed)} target(s) FAIL" if failed else "every target PASS", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
