"""The ``metricstream`` command: an epoch-end report over a file of predictions.

Usage::

    metricstream report predictions.csv --plot confusion.png --json report.json

The file (CSV/TSV, Parquet, .npy or .npz) is streamed in chunks with bounded memory into one
confusion matrix (:mod:`metricstream.io.readers` says how, and how labels become classes); the
summary of :mod:`metricstream.report` is printed, and optionally written as JSON or markdown,
with plots from :mod:`metricstream.plotting`.

Exit codes: 0 on success, 1 when the file's content is wrong (an unparsable or invalid row),
2 when the command line is (an unknown option, a missing file, an unknown column). Errors are
one line on stderr naming the file, the column and the row.

The printed report is a list of :class:`Section` objects (``SECTIONS``): a new part of the
report, with its own options, is one more entry; a new input format is one reader registered in
:mod:`metricstream.io.readers` (``register_reader``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

from .bootstrap.resampling import interval_report
from .io.readers import (
    MAX_CLASSES,
    SUFFIXES,
    InputError,
    ReadResult,
    Selection,
    open_source,
    read_confusion,
)
from .multilabel.accumulator import read_multilabel_csv, read_multilabel_npz
from .report.scores import (
    ScoreReport,
    add_score_arguments,
    report_from_args,
    write_score_plots,
)
from .segmentation import report as _segmentation_report

__all__ = ["main"]

PROG = "metricstream"
EXIT_OK, EXIT_DATA, EXIT_USAGE = 0, 1, 2

_ZERO_DIVISION: dict[str, Any] = {"warn": "warn", "0": 0, "1": 1, "nan": np.nan}

_REPORT_EPILOG = """\
columns: the truth and prediction columns default to `y_true` and `y_pred`, else to the first
two columns (for .npz files: arrays). Numeric labels are class indices (the report lists those
that occur); text labels are class names, shared by truth and prediction and sorted. With
`--classes`, text labels must be among the names and numbers index into them. Rows are
counted from 1, not counting the header line (row N is on line N+1 of a CSV file).

limits: at most --max-classes classes (default %(max_classes)s; the matrix takes 8 K² bytes),
records of at most 4 MiB; memory does not grow with the number of rows.

exit codes: 0 success, 1 bad data in the file, 2 bad command line (including a missing file or
an unknown column).

examples:
  metricstream report examples/data/digits_predictions.csv --plot confusion.png
  metricstream report examples/data/digits_named.csv --format sklearn
  metricstream report examples/data/digits_segmentation.npz --ignore 255 --json report.json
"""


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors turned into our one-line form (exit code 2)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.print_usage(sys.stderr)
        _fail(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _fail(message: str, code: int) -> Any:
    # one line, whatever a library's message holds (pyarrow's may end in a newline)
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _version() -> str:
    from . import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Exact classification reports from prediction files.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    report = commands.add_parser(
        "report",
        help="print the metrics of a file of predictions (and write JSON, markdown, plots)",
        description="Stream a file of predictions into one confusion matrix and report every "
        "metric. Reads " + ", ".join(SUFFIXES) + " files; delimited text may be "
        "compressed (gzip, bzip2 or xz, e.g. predictions.csv.gz).",
        epilog=_REPORT_EPILOG % {"max_classes": f"{MAX_CLASSES:,}"},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("path", metavar="PATH", help="the file of predictions")

    columns = report.add_argument_group("columns")
    columns.add_argument(
        "--true",
        metavar="COLUMN",
        dest="truth",
        help="column of true labels (default: y_true, else the first column)",
    )
    columns.add_argument(
        "--pred",
        metavar="COLUMN",
        help="column of predicted labels (default: y_pred, else the second)",
    )
    columns.add_argument(
        "--weight", metavar="COLUMN", help="column of non-negative sample weights (default: none)"
    )

    labels = report.add_argument_group("labels")
    labels.add_argument(
        "--classes",
        metavar="NAMES",
        help="comma-separated class names, in report order; text labels must be "
        "among them, integer labels index into them",
    )
    labels.add_argument(
        "--ignore",
        metavar="LABEL",
        help="true label whose rows are skipped, e.g. 255 for void pixels",
    )
    labels.add_argument(
        "--labels",
        choices=("auto", "int", "str"),
        default="auto",
        help="read labels as class indices (int) or names (str); default: auto, "
        "from the column types",
    )
    labels.add_argument(
        "--max-classes",
        type=_positive_int,
        default=MAX_CLASSES,
        metavar="K",
        help=f"read at most K classes: integer labels must be below K and at "
        f"most K distinct names are read (default {MAX_CLASSES}; the "
        f"matrix takes 8·K² bytes)",
    )

    multilabel = report.add_argument_group("multilabel")
    multilabel.add_argument(
        "--multilabel",
        action="store_true",
        help="the file holds multilabel predictions: a CSV whose truth and "
        "prediction cells list labels separated by '|' (e.g. '0|3', "
        "indices or names; empty = no label), or an .npz with (N, L) "
        "y_true and y_pred members (0/1 or scores)",
    )
    multilabel.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        metavar="T",
        help="with --multilabel and .npz scores: a probability; positive where score >= T "
        "(with --logits: where sigmoid(score) >= T) (default 0.5)",
    )

    reading = report.add_argument_group("reading")
    reading.add_argument(
        "--delimiter",
        metavar="CHAR",
        help="field delimiter of a text file (default: from the suffix, "
        "',' for .csv and tab for .tsv)",
    )
    reading.add_argument(
        "--no-header",
        dest="header",
        action="store_false",
        help="the text file has no header line; columns are f0, f1, ...",
    )
    reading.add_argument(
        "--reader",
        choices=("auto", "pyarrow", "python"),
        default="auto",
        help="CSV reader: pyarrow (fast; default when installed) or Python's csv",
    )

    output = report.add_argument_group("output")
    output.add_argument(
        "--format",
        choices=("text", "markdown", "json", "sklearn"),
        default="text",
        help="what to print: the summary as text (default), markdown or JSON, "
        "or scikit-learn's classification_report",
    )
    output.add_argument(
        "--digits",
        type=_non_negative_int,
        metavar="N",
        help="decimals printed (default 4; 2 for --format sklearn)",
    )
    output.add_argument(
        "--zero-division",
        choices=tuple(_ZERO_DIVISION),
        default="warn",
        help="value of a 0/0 metric: warn (0 and a warning, the default), 0, 1, "
        "or nan (shown as '–', null in JSON, left out of averages)",
    )
    output.add_argument(
        "--json",
        metavar="FILE",
        type=Path,
        help="write the summary as JSON (metricstream.report.summary)",
    )
    output.add_argument(
        "--markdown", metavar="FILE", type=Path, help="write the summary as markdown tables"
    )
    output.add_argument(
        "--plot",
        metavar="FILE",
        type=Path,
        help="write the confusion-matrix heatmap (.png, .svg, .pdf; needs "
        "matplotlib); a directory gets confusion_matrix.png",
    )
    output.add_argument(
        "--plot-per-class",
        metavar="FILE",
        type=Path,
        help="write a bar chart of per-class precision, recall, F1 and IoU; a "
        "directory gets per_class.png",
    )
    output.add_argument(
        "--normalize",
        choices=("true", "pred", "all"),
        help="plot rates instead of counts: rows (true), columns (pred) or all",
    )
    output.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: only when stdout and "
        "stderr are both terminals)",
    )
    for section in SECTIONS:
        if section.add_arguments is not None:
            section.add_arguments(report)
    commands.add_parser(
        "warm-up",
        help="compile the kernels for the common inputs into Numba's on-disk cache",
        description="Run a first update of every family's common inputs, so that a container "
        "image or CI runner built with this step starts with the kernels compiled.",
    )
    return parser


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive number, got 0")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {value}")
    return value


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``metricstream`` command: :func:`main`, then leave without the interpreter's teardown.

    Native thread pools (pyarrow's CSV parser) may still hold threads when the report is done,
    and tearing them down at exit can abort the process ("terminate called without an active
    exception", status -6) after a successful report; everything written is flushed first.
    """
    from ._core import warmup

    # One pass over whole files, then exit: kernels compile at their first call (and are
    # cached for the next run), as a background compile would only be cut short by the exit.
    warmup.set_enabled(False)
    try:
        code = main(argv)
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (also raised as ``SystemExit`` on errors)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "report":
            return _report(args)
        if args.command == "warm-up":
            from ._core.warmup import main as warm_up

            return warm_up()
    except InputError as error:
        _fail(str(error), EXIT_USAGE if error.usage else EXIT_DATA)
    except MemoryError:
        _fail(
            f"{args.path}: out of memory while reading; lower `--max-classes` or check that "
            f"the columns are labels.",
            EXIT_DATA,
        )
    except BrokenPipeError:
        # `metricstream report ... | head`: the reader left; nothing more to say.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
        return EXIT_OK
    except OSError as error:  # e.g. permission denied, a disk error while reading
        where = error.filename or args.path
        _fail(f"{where}: cannot read ({error.strerror or error}).", EXIT_DATA)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return EXIT_OK  # pragma: no cover - argparse requires a command


# ---------------------------------------------------------------------- report
@dataclass
class Report:
    """What the sections of a report see: the file's counts and the output options."""

    result: ReadResult
    zero_division: Any
    digits: int
    args: argparse.Namespace
    scores: ScoreReport | None = None

    @property
    def accumulator(self) -> Any:
        return self.result.accumulator


@dataclass
class Section:
    """One part of the printed report.

    ``enabled(args)`` says whether it is printed; ``text``/``markdown`` render it for the text
    and markdown formats, ``data`` for JSON (under the key ``name``, except the summary, whose
    keys are the top level); ``add_arguments(parser)`` adds its options to ``report``.
    A new part of the report (e.g. confidence intervals) is one more entry in ``SECTIONS``.
    """

    name: str
    text: Callable[[Report], str]
    markdown: Callable[[Report], str]
    data: Callable[[Report], dict]
    enabled: Callable[[argparse.Namespace], bool] = lambda args: True
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


SECTIONS: list[Section] = [
    Section(
        "summary",
        text=lambda r: str(
            r.accumulator.summary("text", zero_division=r.zero_division, digits=r.digits)
        ),
        markdown=lambda r: str(
            r.accumulator.summary("markdown", zero_division=r.zero_division, digits=r.digits)
        ),
        data=lambda r: r.accumulator.summary("dict", zero_division=r.zero_division),
    ),
]


def _interval_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("intervals")
    group.add_argument(
        "--intervals",
        action="store_true",
        help="bootstrap confidence intervals of accuracy, balanced accuracy, macro "
        "F1, mIoU, MCC and kappa (rows assumed independent)",
    )
    group.add_argument(
        "--resamples",
        type=_positive_int,
        default=1000,
        metavar="B",
        help="bootstrap replicates for --intervals (default: 1000)",
    )
    group.add_argument(
        "--confidence",
        type=_confidence,
        default=0.95,
        metavar="LEVEL",
        help="confidence level for --intervals (default: 0.95)",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed of --intervals, for reproducible reports (default: 0)",
    )


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _intervals(report: Report, kind: Literal["dict", "text", "markdown"]) -> Any:
    try:
        return interval_report(
            report.accumulator,
            format=kind,
            n_resamples=report.args.resamples,
            confidence=report.args.confidence,
            seed=report.args.seed,
            digits=report.digits,
        )
    except ValueError as error:  # fractional weights say nothing about which samples to resample
        _fail(f"--intervals: {str(error).replace('`source`', 'the matrix')}", EXIT_DATA)


SECTIONS.append(
    Section(
        "intervals",
        text=lambda r: str(_intervals(r, "text")),
        markdown=lambda r: str(_intervals(r, "markdown")),
        data=lambda r: _intervals(r, "dict"),
        enabled=lambda args: bool(getattr(args, "intervals", False)),
        add_arguments=_interval_arguments,
    )
)


def _score_section(report: Report, kind: str) -> Any:
    scores = report.scores
    assert scores is not None  # enabled only with --scores
    if kind == "dict":
        return scores.data()
    return scores.text(report.digits) if kind == "text" else scores.markdown(report.digits)


SECTIONS.append(
    Section(
        "scores",
        text=lambda r: str(_score_section(r, "text")),
        markdown=lambda r: str(_score_section(r, "markdown")),
        data=lambda r: _score_section(r, "dict"),
        enabled=lambda args: getattr(args, "scores", None) is not None,
        add_arguments=add_score_arguments,
    )
)


def _per_image_section(report: Report, kind: str) -> Any:
    render = {
        "text": _segmentation_report.cli_section_text,
        "markdown": _segmentation_report.cli_section_markdown,
        "dict": _segmentation_report.cli_section_data,
    }[kind]
    try:
        return render(report)
    except ValueError as error:
        _fail(f"--per-image: {error}", EXIT_DATA)


# Segmentation masks (.npz): the per-image mIoU/mDice beside the dataset-level ones.
SECTIONS.append(
    Section(
        "per_image",
        text=lambda r: str(_per_image_section(r, "text")),
        markdown=lambda r: str(_per_image_section(r, "markdown")),
        data=lambda r: _per_image_section(r, "dict"),
        enabled=_segmentation_report.cli_enabled,
        add_arguments=_segmentation_report.cli_arguments,
    )
)


def _sections(report: Report) -> list[Section]:
    return [section for section in SECTIONS if section.enabled(report.args)]


def _report_data(report: Report) -> dict:
    data: dict[str, Any] = {}
    for section in _sections(report):
        part = section.data(report)
        if section.name == "summary":
            data.update(part)
        else:
            data[section.name] = part
    return data


def _report_text(report: Report, kind: str) -> str:
    render = (lambda s: s.text(report)) if kind == "text" else (lambda s: s.markdown(report))
    return "\n\n".join(render(section) for section in _sections(report))


_MATRIX_MARK = "\x00confusion matrix\x00"


def _json_text(data: dict) -> str:
    """``data`` as indented JSON, with each row of the confusion matrix on one line."""
    matrix = data.get("confusion_matrix")
    if not isinstance(matrix, list):
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    text = json.dumps({**data, "confusion_matrix": _MATRIX_MARK}, indent=2, allow_nan=False)
    rows = ",\n    ".join(json.dumps(row, allow_nan=False) for row in matrix)
    return text.replace(json.dumps(_MATRIX_MARK), f"[\n    {rows}\n  ]" if rows else "[]") + "\n"


def _report(args: argparse.Namespace) -> int:
    if args.multilabel:
        return _multilabel_report(args)
    plots = [p for p in (args.plot, args.plot_per_class) if p is not None]
    if plots and importlib.util.find_spec("matplotlib") is None:
        _fail(
            "writing plots needs matplotlib, which is not installed; install it with "
            "`pip install 'metricstream[plot]'`.",
            EXIT_USAGE,
        )
    classes = None
    if args.classes is not None:
        classes = [name.strip() for name in args.classes.split(",")]
        if any(name == "" for name in classes):
            _fail(f"`--classes` holds an empty name: {args.classes!r}.", EXIT_USAGE)
        twice = sorted({name for name in classes if classes.count(name) > 1})
        if twice:
            _fail(
                f"`--classes` lists {', '.join(map(repr, twice))} more than once; class names "
                f"must be unique.",
                EXIT_USAGE,
            )
    if args.reader == "pyarrow" and importlib.util.find_spec("pyarrow") is None:
        _fail(
            "`--reader pyarrow` needs pyarrow, which is not installed; `pip install pyarrow`.",
            EXIT_USAGE,
        )
    delimiter = args.delimiter
    if delimiter is not None:
        delimiter = {"\\t": "\t", "tab": "\t"}.get(delimiter, delimiter)
        if len(delimiter) != 1:
            _fail(f"`--delimiter` must be one character, got {args.delimiter!r}.", EXIT_USAGE)
    # Check every output before the (possibly long) read.
    for option, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path is not None:
            _check_output(option, path)
    plot = _plot_path("--plot", args.plot, "confusion_matrix.png")
    plot_per_class = _plot_path("--plot-per-class", args.plot_per_class, "per_class.png")

    # With --scores and no --pred, the summary is the confusion matrix of the scores' argmax,
    # counted in the same pass (a file of probabilities has no column of predicted labels).
    if getattr(args, "scores", None) is not None:
        _check_score_options(args)
        args.truth = _score_truth(args, delimiter)
    for option in ("plot_roc", "plot_pr", "plot_calibration"):
        chosen = getattr(args, option, None)
        if chosen is not None:
            flag = "--" + option.replace("_", "-")
            setattr(args, option, _plot_path(flag, chosen, option[5:] + ".png"))
    try:
        with _warnings_to_stderr():
            scores = report_from_args(args)
    except InputError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as error:
        # one line, not a traceback, whatever the score reader met
        _fail(f"{args.path}: {error or type(error).__name__}", EXIT_DATA)
    if scores is not None and args.pred is None and scores.confusion is not None:
        result = ReadResult(
            accumulator=scores.confusion,
            selection=Selection(
                truth=args.truth, pred=f"argmax of {args.scores!r}", weight=args.weight
            ),
            num_rows=scores.rows,
            mode="index",
            path=Path(args.path),
        )
    else:
        result = _read(args, classes, delimiter)
    for note in result.notes:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    acc = result.accumulator
    default_digits = 2 if args.format == "sklearn" else 4
    report = Report(
        result,
        _ZERO_DIVISION[args.zero_division],
        default_digits if args.digits is None else args.digits,
        args,
        scores,
    )
    _print_report(args, report)
    if plot is not None:
        _save_plot(plot, acc.plot(normalize=args.normalize))
    if plot_per_class is not None:
        _save_plot(plot_per_class, acc.plot_per_class())
    if scores is not None:
        for written in write_score_plots(scores, args):
            print(f"{PROG}: wrote {written}", file=sys.stderr)
    return EXIT_OK


def _check_score_options(args: argparse.Namespace) -> None:
    """The options of ``--scores`` that argparse cannot check alone (usage errors)."""
    bins = getattr(args, "calibration_bins", 15)
    if not 1 <= bins <= _MAX_CALIBRATION_BINS:
        _fail(
            f"`--calibration-bins` must be between 1 and {_MAX_CALIBRATION_BINS:,}, got {bins}.",
            EXIT_USAGE,
        )
    if not args.scores:
        _fail("`--scores` needs a pattern of score columns, e.g. 'p_*'.", EXIT_USAGE)


# More calibration bins than this say nothing a reliability diagram can show.
_MAX_CALIBRATION_BINS = 10_000


def _score_truth(args: argparse.Namespace, delimiter: str | None) -> str:
    """The truth column of ``--scores``: ``--true``, else ``y_true``, else the one column that
    is neither a score, the weight nor ``--pred``; anything else is ambiguous (a usage error
    naming the candidates), never a guess printed as ``y_true``."""
    path = Path(args.path)
    if path.suffix.lower() == ".npz":
        columns = _npz_members(path)
    else:
        columns = open_source(
            path, delimiter=delimiter, header=args.header, prefer_pyarrow=args.reader != "python"
        ).columns
    matched = set(_matching(columns, args.scores))
    if path.suffix.lower() == ".npz":
        _check_npz_expansion(path, [*matched, args.truth or "y_true", args.weight])
    _check_score_columns(args, path, len(matched))
    if args.truth is not None:
        return str(args.truth)
    rest = [c for c in columns if c not in matched and c not in (args.weight, args.pred)]
    if "y_true" in rest:
        return "y_true"
    if len(rest) == 1:
        return rest[0]
    shown = ", ".join(repr(c) for c in rest[:10]) + (", ..." if len(rest) > 10 else "")
    _fail(
        f"{path}: which column holds the true labels? There is no `y_true` column, and "
        + (
            f"besides the score columns there are {shown}; name it with `--true COLUMN`."
            if rest
            else "every column is a score column; name the truth column with `--true COLUMN`."
        ),
        EXIT_USAGE,
    )
    raise AssertionError  # pragma: no cover - _fail raises


def _check_score_columns(args: argparse.Namespace, path: Path, count: int) -> None:
    """Refuse score columns whose state the file cannot justify: more columns than
    ``--max-classes``, or (at the default limit) a state far larger than the file."""
    if count > args.max_classes:
        _fail(
            f"{path}: `--scores {args.scores}` matches {count:,} columns, more than "
            f"`--max-classes` {args.max_classes:,}; raise it if the file really has that many "
            f"classes, or narrow the pattern.",
            EXIT_USAGE,
        )
    if count < 2 or args.max_classes != MAX_CLASSES:
        return  # one binary column, or a limit the user chose
    needed = _SCORE_STATE_BASE + _SCORE_STATE_PER_CLASS * count
    allowed = max(_SCORE_STATE_FLOOR, _SCORE_STATE_RATIO * path.stat().st_size)
    if needed > allowed:
        _fail(
            f"{path}: {count:,} score columns need about {needed / 2**20:,.0f} MiB of state, "
            f"far more than a file of {path.stat().st_size:,} bytes can fill; pass "
            f"`--max-classes {count}` if the file really has {count:,} classes.",
            EXIT_USAGE,
        )


# ScoreAccumulator's state grows by about this many bytes per class (measured: 2 classes
# 1.9 MB, 100 classes 33.8 MB); a report of a small file may take at least the floor, else
# this many times the file's size.
_SCORE_STATE_BASE = 1 << 20
_SCORE_STATE_PER_CLASS = 340_000
_SCORE_STATE_FLOOR = 256 << 20
_SCORE_STATE_RATIO = 64


def _check_npz_expansion(path: Path, members: list[str | None]) -> None:
    """Refuse .npz members that would expand far beyond the file (a few zeros compress to
    gigabytes), before the score reader loads them."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {
                info.filename[:-4]: info.file_size
                for info in archive.infolist()
                if info.filename.endswith(".npy")
            }
    except (zipfile.BadZipFile, OSError) as error:
        _fail(f"{path}: not a readable .npz file ({error}).", EXIT_DATA)
    expanded = sum(sizes.get(member, 0) for member in set(members) if member)
    allowed = max(_NPZ_EXPANSION_FLOOR, _NPZ_EXPANSION_RATIO * path.stat().st_size)
    if expanded > allowed:
        _fail(
            f"{path}: the score members expand to {expanded:,} bytes, "
            f"{expanded / max(1, path.stat().st_size):,.0f} times the file's size; a file of "
            f"predictions does not compress that well (save the arrays with `np.savez`, not "
            f"compressed, if they are real).",
            EXIT_DATA,
        )


_NPZ_EXPANSION_FLOOR = 64 << 20
_NPZ_EXPANSION_RATIO = 64


def _matching(columns: list[str], pattern: str) -> list[str]:
    """The columns ``fnmatch`` matches: one compiled pattern for all (linear in the columns)."""
    import fnmatch
    import re

    regex = re.compile(fnmatch.translate(pattern))
    return [c for c in columns if regex.match(c)]


def _npz_members(path: Path) -> list[str]:
    """The array names of an .npz file, from its directory alone (no member is read)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as error:
        _fail(f"{path}: not a readable .npz file ({error}).", EXIT_DATA)
    return [name[:-4] if name.endswith(".npy") else name for name in names]


def _read(args: argparse.Namespace, classes: list[str] | None, delimiter: str | None) -> ReadResult:
    with _progress_bar(args.progress) as on_progress:
        return read_confusion(
            args.path,
            truth=args.truth,
            pred=args.pred,
            weight=args.weight,
            classes=classes,
            ignore=args.ignore,
            labels=args.labels,
            delimiter=delimiter,
            header=args.header,
            prefer_pyarrow=args.reader != "python",
            max_classes=args.max_classes,
            on_progress=on_progress,
        )


def _print_report(args: argparse.Namespace, report: Report) -> None:
    result, acc = report.result, report.accumulator
    with _warnings_to_stderr():
        if args.format == "json":
            sys.stdout.write(_json_text(_report_data(report)))
        elif args.format == "sklearn":
            # exactly scikit-learn's classification_report (its trailing newline included), so
            # that the output can be compared with `diff`; what was read goes to stderr
            print(_header(result), file=sys.stderr)
            sys.stdout.write(
                str(
                    acc.classification_report(
                        digits=report.digits, zero_division=report.zero_division
                    )
                )
            )
        elif args.format == "markdown":
            sys.stdout.write(_report_text(report, "markdown") + "\n")
        else:
            sys.stdout.write(_header(result) + "\n\n" + _report_text(report, "text") + "\n")
        sys.stdout.flush()

        if args.json is not None:
            _write(args.json, _json_text(_report_data(report)))
        if args.markdown is not None:
            _write(args.markdown, _report_text(report, "markdown") + "\n")


def _multilabel_report(args: argparse.Namespace) -> int:
    """``--multilabel``: scikit-learn's multilabel report, subset accuracy and Hamming loss."""
    unsupported = [
        option
        for option, value in (
            ("--scores", getattr(args, "scores", None)),
            ("--intervals", args.intervals),
            ("--plot", args.plot),
            ("--plot-per-class", args.plot_per_class),
            ("--classes", args.classes),
            ("--ignore", args.ignore),
        )
        if value
    ]
    if unsupported:
        _fail(f"`--multilabel` does not combine with {', '.join(unsupported)} yet.", EXIT_USAGE)
    path = Path(args.path)
    if not path.is_file():
        _fail(f"{path}: no such file.", EXIT_USAGE)
    zero_division = _ZERO_DIVISION[args.zero_division]
    digits = (2 if args.format == "sklearn" else 4) if args.digits is None else args.digits
    try:
        if path.suffix == ".npz":
            acc = read_multilabel_npz(
                path,
                threshold=args.threshold,
                logits=bool(getattr(args, "logits", False)),
                max_labels=args.max_classes,
            )
        else:
            delimiter = {"\\t": "\t", "tab": "\t"}.get(args.delimiter or "", args.delimiter)
            acc = read_multilabel_csv(
                path,
                true_column=args.truth or "y_true",
                pred_column=args.pred or "y_pred",
                weight_column=args.weight,
                delimiter=delimiter or ("\t" if path.suffix == ".tsv" else ","),
                max_labels=args.max_classes,
            )
    except (ValueError, TypeError, KeyError, OSError, UnicodeDecodeError) as error:
        _fail(
            f"{path}: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            EXIT_DATA,
        )
    names = acc.config().get("label_names")
    header = f"{path}: {acc.num_samples:,} samples, {acc.num_labels} labels (multilabel)"
    with _warnings_to_stderr():
        report = (
            ""
            if args.format == "json"
            else acc.classification_report(
                target_names=names, digits=digits, zero_division=zero_division
            )
        )
        overall = {
            "subset_accuracy": acc.subset_accuracy(zero_division=zero_division),
            "hamming_loss": acc.hamming_loss(zero_division=zero_division),
        }
        if args.format in ("json",) or args.json is not None:
            data = {
                "num_samples": acc.num_samples,
                "num_labels": acc.num_labels,
                "label_names": names,
                **overall,
                "report": acc.classification_report(
                    target_names=names, output_dict=True, zero_division=zero_division
                ),
            }
            text = json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"
            if args.json is not None:
                _write(args.json, text)
    lines = [f"{name.replace('_', ' '):>15}  {value:.{digits}f}" for name, value in overall.items()]
    if args.format == "json":
        sys.stdout.write(text)
    elif args.format == "sklearn":
        print(header, file=sys.stderr)
        sys.stdout.write(str(report))
    elif args.format == "markdown":
        sys.stdout.write(
            "\n".join(f"- {line}" for line in lines) + "\n\n```text\n" + str(report) + "```\n"
        )
    else:
        sys.stdout.write(header + "\n\n" + "\n".join(lines) + "\n\n" + str(report))
    return EXIT_OK


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Formats matplotlib writes (its default backends); anything else is refused before reading.
_PLOT_FORMATS = (
    "png",
    "svg",
    "svgz",
    "pdf",
    "eps",
    "ps",
    "jpg",
    "jpeg",
    "tif",
    "tiff",
    "webp",
    "pgf",
    "raw",
    "rgba",
)


def _check_output(option: str, path: Path) -> None:
    if path.is_dir():
        _fail(f"`{option}` {path} is a directory; give a file name.", EXIT_USAGE)
    parent = path.parent
    if not parent.is_dir():
        _fail(f"`{option}` {path}: the directory {parent} does not exist.", EXIT_USAGE)


def _plot_path(option: str, path: Path | None, default_name: str) -> Path | None:
    """Where a plot goes: a directory gets ``default_name``; no suffix means .png."""
    if path is None:
        return None
    if path.is_dir():
        path = path / default_name
    elif not path.suffix:
        path = path.with_name(path.name + ".png")  # what matplotlib would write
    suffix = path.suffix[1:].lower()
    if suffix not in _PLOT_FORMATS:
        _fail(
            f"`{option}` {path}: unknown image format {path.suffix!r}; use one of "
            f"{', '.join('.' + s for s in _PLOT_FORMATS[:6])}, ...",
            EXIT_USAGE,
        )
    _check_output(option, path)
    return path


def _header(result: ReadResult) -> str:
    sel = result.selection
    if result.shape is not None and len(result.shape) > 1:
        counted = f"{result.num_rows:,} labels in arrays of shape {result.shape}"
        unit = "label"
    else:
        counted = f"{result.num_rows:,} rows"
        unit = "row"
    parts = [f"{result.path}: {counted}", f"truth {sel.truth!r}, prediction {sel.pred!r}"]
    if sel.weight:
        parts.append(f"weights {sel.weight!r}")
    if result.ignore is not None:
        shown = result.ignore if result.mode == "index" else repr(result.ignore)
        skipped = result.ignored_rows
        plural = "" if skipped == 1 else "s"
        parts.append(f"ignoring true label {shown} ({skipped:,} {unit}{plural})")
    return "; ".join(parts)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        _fail(f"{path}: cannot write ({error.strerror or error}).", EXIT_DATA)
    print(f"{PROG}: wrote {path}", file=sys.stderr)


def _save_plot(path: Path, ax: Any) -> None:
    try:
        ax.figure.savefig(path, dpi=150)
    except (OSError, ValueError) as error:
        _fail(f"{path}: cannot write the plot ({error}).", EXIT_DATA)
    print(f"{PROG}: wrote {path}", file=sys.stderr)


@contextlib.contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Show each distinct warning (e.g. an undefined precision) once, as one line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    seen = set()
    for warning in caught:
        message = " ".join(str(warning.message).split())
        # the library's advice names its argument; here the option is the way to choose
        message = message.replace(
            "Use `zero_division` parameter to control this behavior.",
            "Pass `--zero-division 0`, `1` or `nan` to choose the value and silence this warning.",
        )
        if message not in seen:
            seen.add(message)
            print(f"{PROG}: warning: {message}", file=sys.stderr)


@contextlib.contextmanager
def _progress_bar(requested: bool | None) -> Iterator[Any]:
    """Yield an ``on_progress(position, total, unit)`` callback, drawing a bar on stderr.

    By default the bar is drawn only when stdout and stderr are both terminals: a report piped
    to a file or read by CI gets no progress output. It needs tqdm (the ``cli`` extra); without
    it there is no bar.
    """
    enabled = requested if requested is not None else (sys.stdout.isatty() and sys.stderr.isatty())
    if not enabled:
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield None
        return
    state: dict[str, Any] = {}

    def on_progress(position: int, total: int, unit: str) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = tqdm(
                total=total,
                unit=unit,
                unit_scale=True,
                leave=False,
                file=sys.stderr,
                desc="reading",
                dynamic_ncols=True,
            )
        bar.update(min(position, total) - bar.n)

    try:
        yield on_progress
    finally:
        if "bar" in state:
            state["bar"].close()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
