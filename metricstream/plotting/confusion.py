"""Pictures of a confusion matrix: a heatmap, and a per-class bar chart of P, R, F1 and IoU.

matplotlib is optional (``pip install "metricstream[plot]"``) and imported only when a function
here is called, so ``import metricstream`` stays light. Without ``ax=``, a new figure is made:
through pyplot when the caller has already imported ``matplotlib.pyplot`` (so a notebook shows
it), otherwise as a bare ``Figure`` on an Agg canvas, which needs no display and leaves the
global backend alone (what the command line uses on a server).

Both functions take a K×K matrix (rows true, columns predicted) and return the ``Axes`` they drew
on; ``ax.figure.savefig("cm.png")`` writes the picture.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..metrics.counts import Normalize, as_counts, normalize_confusion_matrix

__all__ = ["plot_confusion_matrix", "plot_per_class"]

# Up to this many classes every cell gets its number; beyond, the numbers would overlap (and a
# person reads the colours anyway).
ANNOTATE_MAX_CLASSES = 20
# Up to this many classes every tick is named; beyond, matplotlib picks a readable subset.
TICK_LABEL_MAX_CLASSES = 60

PER_CLASS_METRICS = ("precision", "recall", "f1", "iou")
_METRIC_LABELS = {"precision": "precision", "recall": "recall", "f1": "F1", "iou": "IoU"}


def _require_matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install it with "
            "`pip install 'metricstream[plot]'` (or `pip install matplotlib`)."
        ) from None
    return matplotlib


def _new_axes(width: float, height: float) -> Any:
    _require_matplotlib()
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(width, height), layout="constrained")
        return ax
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure.add_subplot()


def _names(class_names: Sequence[str] | None, num_classes: int) -> list[str]:
    if class_names is None:
        return [str(i) for i in range(num_classes)]
    if isinstance(class_names, str):
        raise TypeError("`class_names` must be a sequence of strings, got a single string.")
    names = [str(name) for name in class_names]
    if len(names) != num_classes:
        raise ValueError(
            f"`class_names` has {len(names)} names, but the matrix has {num_classes} classes."
        )
    return names


def _format_count(value: float, integral: bool) -> str:
    if integral:
        value = int(round(value))
        if value >= 100_000:
            return f"{value / 1e6:.1f}M" if value >= 1_000_000 else f"{value / 1e3:.0f}k"
        return str(value)
    return f"{value:.3g}"


def _set_class_ticks(ax: Any, names: list[str], axis: str) -> None:
    num_classes = len(names)
    rotate = axis == "x" and (num_classes > 10 or max(len(n) for n in names) > 3)
    if num_classes <= TICK_LABEL_MAX_CLASSES:
        positions = list(range(num_classes))
    else:
        step = int(np.ceil(num_classes / TICK_LABEL_MAX_CLASSES))
        positions = list(range(0, num_classes, step))
    labels = [names[i] for i in positions]
    if axis == "x":
        ax.set_xticks(
            positions,
            labels,
            rotation=45 if rotate else 0,
            ha="right" if rotate else "center",
            rotation_mode="anchor",
        )
    else:
        ax.set_yticks(positions, labels)


def plot_confusion_matrix(
    matrix: Any,
    *,
    normalize: Normalize = None,
    class_names: Sequence[str] | None = None,
    annotate: bool | None = None,
    ax: Any = None,
    cmap: str = "Blues",
    colorbar: bool = True,
    title: str | None = None,
) -> Any:
    """Draw the confusion matrix as a heatmap (rows true, columns predicted).

    Args:
        matrix: K×K counts, a :class:`~metricstream.metrics.ClassCounts`, or anything
            :func:`~metricstream.metrics.normalize_confusion_matrix` accepts.
        normalize: None (counts), ``"true"`` (rows sum to 1: recall on the diagonal),
            ``"pred"`` (columns sum to 1: precision on the diagonal) or ``"all"``.
        class_names: tick labels, one per class (default ``0 … K-1``).
        annotate: write each cell's value. None (default) annotates when K is at most
            ``ANNOTATE_MAX_CLASSES`` (20) and leaves the numbers out for larger K.
        ax: matplotlib ``Axes`` to draw on (default: a new figure sized to K).
        cmap: colour map name.
        colorbar: draw a colour bar.
        title: the title (default says what the colours mean).

    Returns:
        The ``Axes``; ``ax.figure.savefig(path)`` writes it.

    Example:
        >>> ax = plot_confusion_matrix([[5, 1], [2, 7]], class_names=["cat", "dog"])
        >>> [t.get_text() for t in ax.texts]
        ['5', '1', '2', '7']
    """
    counts = as_counts(matrix)
    values = normalize_confusion_matrix(counts, normalize).astype(np.float64)
    num_classes = counts.num_classes
    names = _names(class_names, num_classes)
    if ax is None:
        longest = max(len(n) for n in names)
        side = float(np.clip(0.42 * num_classes + 0.09 * min(longest, 20) + 2.4, 4.5, 18.0))
        ax = _new_axes(side + (1.0 if colorbar else 0.0), side)

    top = 1.0 if normalize is not None else max(float(values.max()), 1.0)
    # aspect="auto": the figure is sized to be about square already, and a fixed aspect would
    # fight the constrained layout (the axes get re-centred after layout and long class names
    # are clipped at the left edge).
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=top, interpolation="nearest", aspect="auto")
    if colorbar:
        what = {
            None: "samples",
            "true": "fraction of the true class",
            "pred": "fraction of the predicted class",
            "all": "fraction of all samples",
        }
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        bar.set_label(what[normalize])

    if annotate is None:
        annotate = num_classes <= ANNOTATE_MAX_CLASSES
    if annotate:
        integral = normalize is None and counts.matrix.dtype.kind in "iub"
        if normalize is None and not integral:
            integral = bool(np.all(values == np.round(values)))
        colormap = image.cmap
        fontsize = 10 if num_classes <= 10 else 8 if num_classes <= 15 else 6.5
        for i in range(num_classes):
            for j in range(num_classes):
                value = values[i, j]
                text = _format_count(value, integral) if normalize is None else f"{value:.2f}"
                # White on dark cells, near-black on light ones (by the cell colour's luminance).
                red, green, blue, _ = colormap(image.norm(value))
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                # Zeros in grey, so that the off-diagonal mistakes stand out.
                color = "white" if dark else "#222222" if value else "#aaaaaa"
                ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=color)

    _set_class_ticks(ax, names, "x")
    _set_class_ticks(ax, names, "y")
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if title is None:
        total = counts.total
        shown = f"{int(total):,}" if float(total).is_integer() else f"{float(total):,.6g}"
        title = f"Confusion matrix ({shown} samples)"
        if normalize is not None:
            title += {
                "true": ", rows normalized",
                "pred": ", columns normalized",
                "all": ", normalized",
            }[normalize]
    ax.set_title(title)
    return ax


def plot_per_class(
    matrix: Any,
    *,
    metrics: Sequence[str] = PER_CLASS_METRICS,
    class_names: Sequence[str] | None = None,
    ax: Any = None,
    title: str | None = None,
) -> Any:
    """Grouped bars of per-class ``precision``, ``recall``, ``f1`` and ``iou`` (any subset).

    The numbers are those of :mod:`metricstream.metrics` with ``zero_division=np.nan``; an
    undefined value (a class never predicted has no precision) gets no bar.

    Returns:
        The ``Axes``.

    Example:
        >>> ax = plot_per_class([[5, 1], [2, 7]], metrics=["precision", "recall"])
        >>> len(ax.patches)
        4
    """
    from ..metrics.jaccard import jaccard
    from ..metrics.precision_recall import f1, precision, recall

    functions = {"precision": precision, "recall": recall, "f1": f1, "iou": jaccard}
    if isinstance(metrics, str):
        metrics = [metrics]
    unknown = [m for m in metrics if m not in functions]
    if unknown or not metrics:
        raise ValueError(
            f"`metrics` must be a non-empty subset of {list(functions)}, got {list(metrics)!r}."
        )
    counts = as_counts(matrix)
    num_classes = counts.num_classes
    names = _names(class_names, num_classes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = {m: np.asarray(functions[m](counts, zero_division=np.nan)) for m in metrics}
    if ax is None:
        width = float(np.clip(0.32 * num_classes * len(metrics) / 2 + 3.0, 6.0, 24.0))
        ax = _new_axes(width, 4.2)
    bar_width = 0.8 / len(metrics)
    positions = np.arange(num_classes)
    for offset, metric in enumerate(metrics):
        ax.bar(
            positions + (offset - (len(metrics) - 1) / 2) * bar_width,
            np.nan_to_num(scores[metric], nan=0.0),
            width=bar_width,
            label=_METRIC_LABELS[metric],
        )
    _set_class_ticks(ax, names, "x")
    ax.set_xlim(-0.6, num_classes - 0.4)
    # Headroom above 1.0 for the legend, so that it never covers a bar.
    ax.set_ylim(0.0, 1.16)
    ax.set_yticks(np.linspace(0.0, 1.0, 6))
    ax.set_ylabel("score")
    ax.set_xlabel("class")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper center", ncols=len(metrics), fontsize=8, frameon=False)
    ax.set_title(title if title is not None else "Per-class scores")
    return ax
