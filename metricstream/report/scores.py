"""Score metrics for the command line and reports: read probability columns into a
:class:`~metricstream.scores.ScoreAccumulator`, and render its summary as text, markdown or a
JSON-able dict.

``score_summary("preds.csv", "p_*")`` reads the columns whose names match the pattern (in file
order: one per class; a single column is the positive class of a binary task) and the truth
column, chunk by chunk with bounded memory, from any file ``metricstream report`` reads
(CSV/TSV, Parquet). For a ``.npz`` archive the pattern names one member holding an ``(N, C)``
or ``(B, C, H, W)`` score array. Truth labels are class indices, or names: the part of each
score column's name that the pattern's ``*`` matched (``p_cat`` is class ``cat``). Scores read
from text are counted as float32 (9 significant digits read back bit-exactly); binary files keep
their float type.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..confusion.accumulator import ConfusionAccumulator
from ..io.readers import (
    MAX_CLASSES,
    MAX_RECORD_BYTES,
    Coded,
    InputError,
    iter_npz_rows,
    npz_member_shapes,
    open_source,
)
from ..scores.accumulator import ScoreAccumulator

__all__ = [
    "ScoreReport",
    "add_score_arguments",
    "report_from_args",
    "score_summary",
    "summary_rows",
    "write_score_plots",
]

# Rows of a .npz score array read at a time, and the most bytes of one such block.
_NPZ_CHUNK = 1 << 16
_NPZ_BLOCK_BYTES = 16 << 20


@dataclass
class ScoreReport:
    """A filled accumulator and what the report says about it."""

    accumulator: ScoreAccumulator
    class_names: list[str] | None = None
    score_columns: list[str] = field(default_factory=list)
    rows: int = 0
    n_bins: int = 15
    top_k: tuple[int, ...] = (1, 5)
    #: The confusion matrix of the predictions the scores make (the first argmax; for a
    #: binary task ``score >= 0.5``, or ``>= 0`` for logits), counted in the same pass: the
    #: report's summary when the file has no column of predicted labels.
    confusion: ConfusionAccumulator | None = None

    def data(self) -> dict[str, Any]:
        """The score section as JSON-able data (None for undefined values)."""
        rows = summary_rows(self.accumulator, n_bins=self.n_bins, top_k=self.top_k)
        data: dict[str, Any] = {key: _json(value) for key, value in rows.items()}
        acc = self.accumulator
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if acc.task != "binary":
                names = self.class_names or [str(i) for i in range(acc.num_classes)]
                auroc = np.atleast_1d(np.asarray(acc.auroc(None)))
                ap = np.atleast_1d(np.asarray(acc.average_precision(None)))
                data["per_class"] = {
                    name: {"auroc": _json(a), "average_precision": _json(p)}
                    for name, a, p in zip(names, auroc, ap, strict=True)
                }
            data["exact"] = bool(acc.exact().all())
        return data

    def text(self, digits: int = 4) -> str:
        """The score section as a plain-text table."""
        return _render(self, digits, markdown=False)

    def markdown(self, digits: int = 4) -> str:
        """The score section as a markdown table."""
        return _render(self, digits, markdown=True)

    def plot_roc(self, path: str | Path | None = None) -> Any:
        """Draw the ROC curves (and save them to ``path`` when given); returns the ``Axes``."""
        return _save(self.accumulator.plot_roc(class_names=self.class_names), path)

    def plot_precision_recall(self, path: str | Path | None = None) -> Any:
        """Draw the precision-recall curves (saved to ``path`` when given)."""
        return _save(self.accumulator.plot_precision_recall(class_names=self.class_names), path)

    def plot_calibration(self, path: str | Path | None = None) -> Any:
        """Draw the reliability diagram (saved to ``path`` when given)."""
        return _save(self.accumulator.plot_calibration(self.n_bins), path)


def summary_rows(
    acc: ScoreAccumulator, *, n_bins: int = 15, top_k: Sequence[int] = (1, 5)
) -> dict[str, float]:
    """The rows a summary shows when scores were seen: AUROC and AP (macro and micro for
    several classes), ECE, MCE, Brier score, log loss and top-k accuracy (k < C). Undefined
    values are NaN; no warning is issued."""
    rows: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if acc.task == "binary":
            rows["auroc"] = _float(acc.auroc())
            rows["average_precision"] = _float(acc.average_precision())
        else:
            rows["auroc_macro"] = _float(acc.auroc("macro"))
            rows["auroc_micro"] = _float(acc.auroc("micro"))
            rows["average_precision_macro"] = _float(acc.average_precision("macro"))
            rows["average_precision_micro"] = _float(acc.average_precision("micro"))
        bound = acc.auroc("macro", with_bound=True)
        value, lower, upper = (_float(v) for v in bound)
        rows["auroc_error_bound"] = max(value - lower, upper - value)
        rows["ece"] = acc.calibration_error(n_bins)
        rows["mce"] = acc.max_calibration_error(n_bins)
        rows["brier_score"] = acc.brier_score()
        rows["log_loss"] = acc.log_loss()
        if acc.task == "multiclass":
            every_k = np.atleast_1d(acc.top_k_accuracy())
            for k in top_k:
                if 1 <= k < acc.num_classes:
                    rows[f"top_{k}_accuracy"] = float(every_k[k - 1])
    return rows


def score_summary(
    path: str | Path,
    scores: str = "p_*",
    *,
    truth: str | None = None,
    weight: str | None = None,
    logits: bool = False,
    ignore: str | None = None,
    bins: int | None = None,
    n_bins: int = 15,
    top_k: Sequence[int] = (1, 5),
    delimiter: str | None = None,
    header: bool = True,
    prefer_pyarrow: bool = True,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> ScoreReport:
    """Read the scores of a prediction file into a :class:`ScoreReport`.

    Args:
        path: a .csv/.tsv, .parquet or .npz file.
        scores: a pattern (``fnmatch``) for the score columns, or the name of one ``.npz``
            member holding all the scores.
        truth: the truth column (default ``y_true``, else the first column that is not a
            score or the weight).
        weight: an optional weight column.
        logits: the scores are logits (calibration, Brier score and log loss use their
            softmax/sigmoid).
        ignore: a truth label whose rows are skipped.
        bins: ``ScoreAccumulator``'s bins.
        n_bins, top_k: the calibration bins and the k of the top-k rows of the summary.

    Raises:
        InputError: one line naming the file, the column and, where it applies, the row.
    """
    path = Path(path)
    if path.suffix.lower() == ".npz":
        return _read_npz(path, scores, truth, weight, logits, ignore, bins, n_bins, top_k)
    src = open_source(path, delimiter=delimiter, header=header, prefer_pyarrow=prefer_pyarrow)
    columns = [c for c in src.columns if fnmatch.fnmatchcase(c, scores)]
    if not columns:
        raise InputError(
            f"{path}: no column matches `--scores {scores}`; the file's columns are "
            f"{', '.join(repr(c) for c in src.columns) or 'none'}.",
            usage=True,
        )
    if len(columns) > MAX_CLASSES:
        raise InputError(
            f"{path}: `--scores {scores}` matches {len(columns):,} columns, more classes than "
            f"{MAX_CLASSES:,} (the state of a score accumulator grows with the square of the "
            f"classes); narrow the pattern.",
            usage=True,
        )
    for name, flag in ((truth, "--true"), (weight, "--weight")):
        if name is not None and name not in src.columns:
            raise InputError(f"{path}: no column {name!r} (given by `{flag}`).", usage=True)
    chosen = set(columns)  # (a list lookup here was quadratic in the number of columns)
    rest = [c for c in src.columns if c not in chosen and c != weight]
    truth = (
        truth
        if truth is not None
        else ("y_true" if "y_true" in rest else (rest[0] if rest else None))
    )
    if truth is None or truth in columns:
        raise InputError(
            f"{path}: needs a truth column besides the score columns {columns}.", usage=True
        )
    for column in columns:
        if src.kinds[column] == "str" and not src.text:
            raise InputError(f"{path}: score column {column!r} holds text.", usage=True)
    names = _class_names(scores, columns)
    acc = _accumulator(len(columns), logits, ignore, names, bins, weight is not None)
    confusion = _confusion(acc, names)
    kinds = {column: "float" for column in columns}
    kinds[truth] = src.kinds[truth]
    if weight is not None:
        kinds[weight] = "float"
    selected = [truth, *columns] + ([weight] if weight is not None else [])
    rows = 0
    for chunk in src.read(selected, kinds):
        labels = _labels(chunk.columns[truth], names, ignore, path, truth, chunk.start)
        # Scores from text are counted as float32 (what a model wrote; 9 significant digits
        # read back bit-exactly), binary columns in their own float type.
        dtype = (
            np.float32
            if src.text or all(np.asarray(chunk.columns[c]).dtype == np.float32 for c in columns)
            else np.float64
        )
        matrix = np.column_stack([np.asarray(chunk.columns[c], dtype=dtype) for c in columns])
        values = matrix[:, 0] if acc.task == "binary" else matrix
        weights = None if weight is None else np.asarray(chunk.columns[weight], np.float64)
        _update(acc, labels, values, weights, path, chunk.start, confusion)
        rows += len(labels)
        if on_progress is not None:
            on_progress(chunk.position, src.progress_total, src.progress_unit)
    return ScoreReport(acc, names, columns, rows, n_bins, tuple(top_k), confusion)


# ---------------------------------------------------------------------- command line
def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``scores`` options of ``metricstream report`` to ``parser``."""
    group = parser.add_argument_group("scores")
    group.add_argument(
        "--scores",
        metavar="PATTERN",
        help="score columns (a pattern, e.g. 'p_*': one per class in file order; "
        "one column: binary) or the .npz member holding (N, C) scores; adds "
        "AUROC, average precision, calibration and top-k to the report",
    )
    group.add_argument(
        "--logits",
        action="store_true",
        help="the scores are logits (calibration and losses use their softmax)",
    )
    group.add_argument(
        "--calibration-bins",
        type=int,
        default=15,
        metavar="N",
        help="equal-width bins of the calibration error (default 15)",
    )
    group.add_argument(
        "--plot-roc",
        metavar="FILE",
        type=Path,
        help="write the ROC curves of every class (needs --scores, matplotlib)",
    )
    group.add_argument(
        "--plot-pr",
        metavar="FILE",
        type=Path,
        help="write the precision-recall curves (needs --scores, matplotlib)",
    )
    group.add_argument(
        "--plot-calibration",
        metavar="FILE",
        type=Path,
        help="write the reliability diagram (needs --scores, matplotlib)",
    )


def report_from_args(args: argparse.Namespace) -> ScoreReport | None:
    """The score report of ``metricstream report`` arguments, or None without ``--scores``.

    Reads ``args.path`` with the options :func:`add_score_arguments` added and the report's
    ``--true``, ``--weight``, ``--ignore``, ``--delimiter``, ``--no-header`` and ``--reader``.
    """
    if getattr(args, "scores", None) is None:
        for option in ("plot_roc", "plot_pr", "plot_calibration"):
            if getattr(args, option, None) is not None:
                raise InputError(f"`--{option.replace('_', '-')}` needs `--scores`.", usage=True)
        return None
    return score_summary(
        args.path,
        args.scores,
        truth=getattr(args, "truth", None),
        weight=getattr(args, "weight", None),
        logits=bool(getattr(args, "logits", False)),
        ignore=getattr(args, "ignore", None),
        n_bins=getattr(args, "calibration_bins", 15),
        delimiter=getattr(args, "delimiter", None),
        header=getattr(args, "header", True),
        prefer_pyarrow=getattr(args, "reader", "auto") != "python",
    )


def write_score_plots(report: ScoreReport, args: argparse.Namespace) -> list[Path]:
    """Write the plots asked for by ``--plot-roc``, ``--plot-pr``, ``--plot-calibration``."""
    written = []
    for option, draw in (
        ("plot_roc", report.plot_roc),
        ("plot_pr", report.plot_precision_recall),
        ("plot_calibration", report.plot_calibration),
    ):
        path = getattr(args, option, None)
        if path is not None:
            draw(path)
            written.append(Path(path))
    return written


# ---------------------------------------------------------------------- helpers
def _class_names(pattern: str, columns: list[str]) -> list[str] | None:
    """What ``*`` matched in each column name, when the pattern has one ``*`` and no other
    wildcard (``p_*`` and ``p_cat`` give ``cat``)."""
    if pattern.count("*") != 1 or any(ch in pattern for ch in "?["):
        return None
    prefix, suffix = pattern.split("*")
    names = [c[len(prefix) : len(c) - len(suffix)] for c in columns]
    return names if len(set(names)) == len(names) and all(names) else None


def _accumulator(
    num_columns: int,
    logits: bool,
    ignore: str | None,
    names: list[str] | None,
    bins: int | None,
    weighted: bool = False,
) -> ScoreAccumulator:
    """The score accumulator of a report: weighted (float64 sums) when the file has a weight
    column, as the confusion report counts, so that fractional weights are counted as given."""
    ignore_index = None
    if ignore is not None:
        if names is not None and ignore in names:
            raise InputError(f"`--ignore` {ignore!r} is one of the classes.", usage=True)
        try:
            ignore_index = int(ignore)
        except ValueError:
            ignore_index = -1  # a name: mapped to -1 by _labels
    options: dict[str, Any] = {"logits": logits, "ignore_index": ignore_index, "bins": bins}
    if num_columns == 1:
        return ScoreAccumulator("binary", weighted=weighted, **options)
    return ScoreAccumulator("multiclass", num_columns, weighted=weighted, **options)


def _labels(
    values: Any, names: list[str] | None, ignore: str | None, path: Path, column: str, start: int
) -> np.ndarray:
    if isinstance(values, Coded):
        lookup: dict[str, int] = {}
        if names is not None:
            lookup = {name: i for i, name in enumerate(names)}
        table = np.empty(len(values.dictionary), dtype=np.int64)
        for code, text in enumerate(values.dictionary):
            if text in lookup:
                table[code] = lookup[text]
            elif ignore is not None and text == ignore:
                table[code] = -1
            else:
                try:
                    table[code] = int(text)
                except ValueError:
                    row = start + int(np.argmax(values.codes == code)) + 1
                    known = f"; the classes are {names}" if names else ""
                    raise InputError(
                        f"{path}: column {column!r} holds {text!r} at row {row}, "
                        f"which is not a class{known}."
                    ) from None
        return table[values.codes]
    return np.asarray(values)


def _confusion(acc: ScoreAccumulator, names: list[str] | None) -> ConfusionAccumulator:
    classes = 2 if acc.task == "binary" else acc.num_classes
    config = acc.config()
    return ConfusionAccumulator(
        classes,
        names if acc.task != "binary" else None,
        config["ignore_index"],
        weighted=config["weighted"],
    )


def _update(
    acc: ScoreAccumulator,
    labels: np.ndarray,
    values: np.ndarray,
    weights: np.ndarray | None,
    path: Path,
    start: int,
    confusion: ConfusionAccumulator,
) -> None:
    try:
        acc.update(labels, values, weights)
    except ValueError as error:
        sample = getattr(error, "sample", None)
        where = "" if sample is None else f"row {start + sample + 1}: "
        raise InputError(f"{path}: {where}{error}") from None
    if acc.task == "binary":
        cut = 0.0 if acc.config()["logits"] else 0.5
        values = (np.asarray(values).reshape(np.shape(labels)) >= cut).astype(np.int64)
    # Valid for the score accumulator, so valid here: the argmax is taken in the kernel.
    confusion.update(labels, values, weights)


def _read_npz(
    path: Path,
    member: str,
    truth: str | None,
    weight: str | None,
    logits: bool,
    ignore: str | None,
    bins: int | None,
    n_bins: int,
    top_k: Sequence[int],
) -> ScoreReport:
    """The score report of an .npz archive, its members streamed a block of rows at a time
    (never loaded whole): the members' headers are checked first against the limits the CSV
    reader keeps (a sample of at most ``MAX_RECORD_BYTES``, at most ``MAX_CLASSES`` classes),
    and only the elements the headers declare are read."""
    if not path.is_file():
        raise InputError(f"{path}: no such file.", usage=True)
    shapes = npz_member_shapes(path)
    members = list(shapes)
    matches = [m for m in members if fnmatch.fnmatchcase(m, member)]
    if len(matches) != 1:
        raise InputError(
            f"{path}: `--scores {member}` must name one member holding the "
            f"scores; the archive holds {members}.",
            usage=True,
        )
    name = matches[0]
    others = [m for m in members if m not in (name, weight)]
    truth = (
        truth
        if truth is not None
        else ("y_true" if "y_true" in others else (others[0] if others else None))
    )
    if truth is None or truth not in shapes or truth == name:
        raise InputError(f"{path}: needs a truth member besides {name!r}.", usage=True)
    if weight is not None and weight not in shapes:
        raise InputError(f"{path}: no member {weight!r} (given by `--weight`).", usage=True)
    selected = [truth, name] + ([weight] if weight is not None else [])
    for chosen in selected:
        shape, dtype = shapes[chosen]
        if dtype.kind not in "biuf" or not shape:
            raise InputError(
                f"{path}: member {chosen!r} must be an array of numbers with a first axis of "
                f"samples, got shape {shape} of dtype {dtype}.",
                usage=True,
            )
    score_shape, label_shape = shapes[name][0], shapes[truth][0]
    binary = len(score_shape) == len(label_shape) or (
        len(score_shape) == len(label_shape) + 1 and score_shape[1] == 1
    )
    expected = label_shape if binary else (label_shape[:1] + score_shape[1:2] + label_shape[1:])
    if score_shape not in (expected, label_shape[:1] + (1,) + label_shape[1:]):
        raise InputError(
            f"{path}: scores {name!r} have shape {score_shape}, which does not fit the truth "
            f"{truth!r} of shape {label_shape}: (N, C) scores for (N,) labels, (B, C, H, W) "
            f"for (B, H, W), or one score per label for a binary task.",
            usage=True,
        )
    if weight is not None and shapes[weight][0] != label_shape:
        raise InputError(
            f"{path}: weights {weight!r} have shape {shapes[weight][0]}, but there is one "
            f"weight per label: shape {label_shape}.",
            usage=True,
        )
    classes = 1 if binary else score_shape[1]
    if classes > MAX_CLASSES:
        raise InputError(
            f"{path}: scores {name!r} hold {classes:,} classes, more than {MAX_CLASSES:,} "
            f"(the state of a score accumulator grows with the square of the classes).",
            usage=True,
        )
    sample_bytes = sum(
        math.prod(shapes[chosen][0][1:]) * shapes[chosen][1].itemsize for chosen in selected
    )
    if sample_bytes > MAX_RECORD_BYTES:
        raise InputError(
            f"{path}: one sample of {selected} takes {sample_bytes:,} bytes, more than a "
            f"record may ({MAX_RECORD_BYTES >> 20} MiB).",
            usage=True,
        )
    block_rows = max(1, min(_NPZ_CHUNK, _NPZ_BLOCK_BYTES // max(sample_bytes, 1)))
    acc = _accumulator(classes, logits, ignore, None, bins, weight is not None)
    confusion = _confusion(acc, None)
    start = 0
    for block in iter_npz_rows(path, selected, block_rows):
        _update(
            acc,
            block[truth],
            block[name],
            None if weight is None else block[weight],
            path,
            start,
            confusion,
        )
        start += block[truth].shape[0]
    return ScoreReport(acc, None, [name], start, n_bins, tuple(top_k), confusion)


def _float(value: Any) -> float:
    return float(np.asarray(value).reshape(-1)[0])


def _json(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


_LABELS = {
    "auroc": "AUROC",
    "average_precision": "average precision",
    "auroc_macro": "AUROC (macro, one-vs-rest)",
    "auroc_micro": "AUROC (micro)",
    "average_precision_macro": "average precision (macro)",
    "average_precision_micro": "average precision (micro)",
    "auroc_error_bound": "AUROC error bound (binning)",
    "ece": "expected calibration error",
    "mce": "maximum calibration error",
    "brier_score": "Brier score",
    "log_loss": "log loss",
}


def _render(report: ScoreReport, digits: int, *, markdown: bool) -> str:
    rows = summary_rows(report.accumulator, n_bins=report.n_bins, top_k=report.top_k)
    label = {**_LABELS, **{f"top_{k}_accuracy": f"top-{k} accuracy" for k in report.top_k}}
    lines = [
        (label.get(key, key), "nan" if math.isnan(value) else f"{value:.{digits}f}")
        for key, value in rows.items()
    ]
    if markdown:
        out = ["| score metric | value |", "|---|---:|"]
        out += [f"| {name} | {value} |" for name, value in lines]
        return "\n".join(out)
    width = max(len(name) for name, _ in lines)
    title = (
        f"scores ({report.accumulator.num_classes} classes, "
        if (report.accumulator.task != "binary")
        else "scores (binary, "
    )
    title += f"ECE over {report.n_bins} bins)"
    return "\n".join([title] + [f"  {name:<{width}}  {value:>10}" for name, value in lines])


def _save(ax: Any, path: str | Path | None) -> Any:
    if path is not None:
        ax.figure.savefig(path, dpi=120)
    return ax
