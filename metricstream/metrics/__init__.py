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
from .jaccard import dice, fwiou, jaccard, miou
from .precision_recall import f1, fbeta, precision, precision_recall_fscore_support, recall
from .rates import (
    diagnostic_odds_ratio,
    false_discovery_rate,
    false_negative_rate,
    false_omission_rate,
    false_positive_rate,
    informedness,
    markedness,
    negative_likelihood_ratio,
    negative_predictive_value,
    positive_likelihood_ratio,
    prevalence,
    specificity,
)

__all__ = [
    "ClassCounts",
    "accuracy",
    "balanced_accuracy",
    "cohen_kappa",
    "diagnostic_odds_ratio",
    "dice",
    "f1",
    "false_discovery_rate",
    "false_negative_rate",
    "false_negatives",
    "false_omission_rate",
    "false_positive_rate",
    "false_positives",
    "fbeta",
    "fwiou",
    "informedness",
    "jaccard",
    "markedness",
    "matthews_corrcoef",
    "miou",
    "negative_likelihood_ratio",
    "negative_predictive_value",
    "normalize_confusion_matrix",
    "num_samples",
    "ovr_accuracy",
    "positive_likelihood_ratio",
    "precision",
    "precision_recall_fscore_support",
    "predicted_positives",
    "prevalence",
    "recall",
    "specificity",
    "support",
    "true_negatives",
    "true_positives",
]
