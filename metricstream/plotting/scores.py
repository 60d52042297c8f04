"""Pictures of a :class:`~metricstream.scores.ScoreAccumulator`: ROC curves, precision-recall
curves (every class in one figure) and the reliability diagram.

matplotlib is optional (``pip install "metricstream[plot]"``) and imported only when a function
here is called. Without ``ax=``, a new figure is made: through pyplot when the caller has
already imported ``matplotlib.pyplot`` (so a notebook shows it), otherwise as a bare ``Figure``
on an Agg canvas (no display needed; what the command line uses). Each function returns the
``Axes`` it drew on; ``ax.figure.savefig("roc.png")`` writes the picture.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..scores.accumulator import ScoreAccumulator

__all__ = ["plot_calibration", "plot_precision_recall", "plot_roc"]

# Up to this many classes each gets its own curve; beyond, the figure shows the micro-average
# (pass ``labels=`` to pick classes).
MAX_CURVES = 20


def _axes(ax: Any, width: float = 5.5, height: float = 5.0) -> Any:
    if ax is not None:
        return ax
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            "plotting needs matplotlib, which is not installed; install it with "
            "`pip install 'metricstream[plot]'` (or `pip install matplotlib`)."
        ) from None
    if "matplotlib.pyplot" in sys.modules:
        import matplotlib.pyplot as plt

        _, new = plt.subplots(figsize=(width, height), layout="constrained")
        return new
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure.add_subplot()


def _selection(
    acc: ScoreAccumulator, labels: Sequence[int] | None, class_names: Sequence[str] | None
) -> tuple[list[int], list[str], bool]:
    """Classes to draw, their names, and whether to add the micro-average curve."""
    if acc.task == "binary":
        return [0], ["positive" if class_names is None else str(class_names[0])], False
    count = acc.num_classes
    if class_names is not None and len(class_names) != count:
        raise ValueError(
            f"`class_names` has {len(class_names)} names, but there are {count} classes."
        )
    if labels is None:
        chosen = list(range(count)) if count <= MAX_CURVES else []
    else:
        chosen = [int(label) for label in labels]
        for label in chosen:
            if not 0 <= label < count:
                raise ValueError(f"`labels` holds {label}, but there are {count} classes.")
    names = [str(i) if class_names is None else str(class_names[i]) for i in chosen]
    return chosen, names, True


def plot_roc(
    acc: ScoreAccumulator,
    ax: Any = None,
    *,
    labels: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
    micro: bool | None = None,
) -> Any:
    """ROC curves (one-vs-rest per class, plus the micro-average) with their AUROC.

    Args:
        acc: the accumulator.
        ax: matplotlib ``Axes`` to draw on (a new figure by default).
        labels: class indices to draw (default: every class up to 20, else none).
        class_names: names shown in the legend.
        micro: draw the micro-averaged curve (default: for multiclass/multilabel).
    """
    import warnings

    chosen, names, default_micro = _selection(acc, labels, class_names)
    ax = _axes(ax)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined classes are drawn as NaN (nothing)
        per_class = np.atleast_1d(np.asarray(acc.auroc(None)))
        for index, name in zip(chosen, names, strict=True):
            fpr, tpr, _ = acc.roc_curve(index)
            ax.plot(fpr, tpr, lw=1.2, label=f"{name} (AUC {per_class[index]:.3f})")
        if default_micro if micro is None else micro:
            fpr, tpr, _ = acc.roc_curve(micro=True)
            ax.plot(
                fpr,
                tpr,
                color="black",
                lw=2,
                ls="--",
                label=f"micro-average (AUC {acc.auroc('micro'):.3f})",
            )
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1.01),
        xlabel="false positive rate",
        ylabel="true positive rate",
        title="ROC",
    )
    ax.legend(loc="lower right", fontsize="small")
    return ax


def plot_precision_recall(
    acc: ScoreAccumulator,
    ax: Any = None,
    *,
    labels: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
    micro: bool | None = None,
) -> Any:
    """Precision-recall curves (steps, as average precision sums them) with their AP;
    arguments as :func:`plot_roc`."""
    import warnings

    chosen, names, default_micro = _selection(acc, labels, class_names)
    ax = _axes(ax)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_class = np.atleast_1d(np.asarray(acc.average_precision(None)))
        for index, name in zip(chosen, names, strict=True):
            precision, recall, _ = acc.precision_recall_curve(index)
            ax.step(
                recall, precision, where="post", lw=1.2, label=f"{name} (AP {per_class[index]:.3f})"
            )
        if default_micro if micro is None else micro:
            precision, recall, _ = acc.precision_recall_curve(micro=True)
            ax.step(
                recall,
                precision,
                where="post",
                color="black",
                lw=2,
                ls="--",
                label=f"micro-average (AP {acc.average_precision('micro'):.3f})",
            )
    ax.set(
        xlim=(0, 1), ylim=(0, 1.01), xlabel="recall", ylabel="precision", title="Precision-recall"
    )
    ax.legend(loc="lower left", fontsize="small")
    return ax


def plot_calibration(acc: ScoreAccumulator, n_bins: int = 15, ax: Any = None) -> Any:
    """Reliability diagram: accuracy per confidence bin (bars), each bin's point (mean
    confidence, accuracy), which lies on the dotted diagonal when calibrated, and the ECE/MCE
    in the title."""
    import warnings

    diagram = acc.reliability_diagram(n_bins)
    ax = _axes(ax)
    centers = 0.5 * (diagram.edges[:-1] + diagram.edges[1:])
    width = diagram.edges[1] - diagram.edges[0]
    filled = diagram.counts > 0
    ax.bar(
        centers[filled],
        diagram.accuracy[filled],
        width=width * 0.95,
        color="tab:blue",
        alpha=0.8,
        edgecolor="white",
        label="accuracy",
    )
    ax.plot(
        diagram.confidence[filled],
        diagram.accuracy[filled],
        "o",
        color="tab:red",
        markersize=4,
        label="(mean confidence, accuracy)",
    )
    ax.plot([0, 1], [0, 1], color="grey", ls=":", lw=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ece = acc.calibration_error(n_bins)
        mce = acc.max_calibration_error(n_bins)
    what = "top-label confidence" if acc.task == "multiclass" else "predicted probability"
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1),
        xlabel=what,
        ylabel="accuracy" if acc.task == "multiclass" else "fraction of positives",
        title=f"Reliability (ECE {ece:.4f}, MCE {mce:.4f}, {n_bins} bins)",
    )
    ax.legend(loc="lower right", fontsize="small")
    return ax
