"""Plots (matplotlib, imported only when a plot is drawn): ``confusion.py`` draws a matrix and
per-class bars, ``scores.py`` ROC/PR curves and reliability diagrams."""

from .confusion import (
    ANNOTATE_MAX_CLASSES,
    PER_CLASS_METRICS,
    TICK_LABEL_MAX_CLASSES,
    plot_confusion_matrix,
    plot_per_class,
)

__all__ = [
    "ANNOTATE_MAX_CLASSES",
    "PER_CLASS_METRICS",
    "TICK_LABEL_MAX_CLASSES",
    "plot_confusion_matrix",
    "plot_per_class",
]
