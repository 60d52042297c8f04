"""Every metric as a plain function of a K×K confusion matrix (rows true, columns predicted).

Each function also accepts a :class:`ClassCounts` (what an accumulator caches), so users who
already hold a matrix — from scikit-learn, a file or another library — get the same numbers as
:class:`~metricstream.ConfusionAccumulator`. Where each metric is defined:

========================  =============================================
module                    metrics
========================  =============================================
``counts``                N, TP, FP, FN, TN, support, predicted positives, normalized matrices
``accuracy``              accuracy (OA), balanced accuracy (AA), one-vs-rest accuracy
``precision_recall``      precision, recall, F-beta, F1
``jaccard``               Jaccard / IoU, mIoU
``agreement``             Cohen's kappa, Matthews correlation coefficient
``_zero_division``        the 0/0 rule shared by all of them
========================  =============================================
"""

from .accuracy import accuracy, balanced_accuracy, ovr_accuracy
from .agreement import cohen_kappa, matthews_corrcoef
from .counts import (
    ClassCounts,
    false_negatives,
    false_positives,
    normalize_confusion_matrix,
    num_samples,
    predicted_positives,
    support,
    true_negatives,
    true_positives,
)
from .jaccard import jaccard, miou
from .precision_recall import f1, fbeta, precision, precision_recall_fscore_support, recall

__all__ = [
    "ClassCounts",
    "accuracy",
    "balanced_accuracy",
    "cohen_kappa",
    "f1",
    "false_negatives",
    "false_positives",
    "fbeta",
    "jaccard",
    "matthews_corrcoef",
    "miou",
    "normalize_confusion_matrix",
    "num_samples",
    "ovr_accuracy",
    "precision",
    "precision_recall_fscore_support",
    "predicted_positives",
    "recall",
    "support",
    "true_negatives",
    "true_positives",
]
