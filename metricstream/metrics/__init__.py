"""Every metric as a plain function of a K×K confusion matrix (rows true, columns predicted).

Each function also accepts a :class:`ClassCounts` (what an accumulator caches), so users who
already hold a matrix — from scikit-learn, a file or another library — get the same numbers as
:class:`~metricstream.ConfusionAccumulator`. Where each metric is defined:

========================  =============================================
module                    metrics
========================  =============================================
``counts``                N, TP, FP, FN, TN, support, predicted positives, normalized matrices
``accuracy``              accuracy (OA), balanced accuracy (AA), one-vs-rest accuracy,
                          hamming loss, zero-one loss
``precision_recall``      precision, recall, F-beta, F1
``rates``                 specificity, NPV, FPR, FNR, FDR, FOR, informedness, markedness,
                          LR+, LR−, diagnostic odds ratio, prevalence
``jaccard``               Jaccard / IoU, Dice, mIoU, frequency-weighted IoU
``agreement``             Cohen's kappa (+ standard error), Scott's pi, Matthews correlation
                          coefficient (multiclass R_K and one-vs-rest)
``information``           mutual information, normalized MI, adjusted Rand index
``intervals``             confidence intervals (Wilson, normal, Agresti–Coull; kappa)
``curves``                ROC and precision-recall curves, AUROC, average precision, operating
                          points (of score histograms: :class:`~metricstream.ScoreAccumulator`)
``calibration``           expected/maximum calibration error, reliability diagram
``topk``                  top-k accuracy and per-class top-k recall
``multilabel``            label- and example-based multilabel metrics (``average="samples"``,
                          subset accuracy, Hamming/zero-one loss, report) of ``MultilabelCounts``
``batched``               the common metrics of B confusion matrices at once (bootstrap)
``_zero_division``        the 0/0 rule shared by all of them
``_selection``            ``labels``, ``average`` and ``ignore_absent``, shared by all of them
========================  =============================================

Degenerate classes are treated alike everywhere: a ratio whose denominator is 0 takes the
``zero_division`` value (``"warn"``: 0.0 with an ``UndefinedMetricWarning``; 0; 1; np.nan,
left out of averages); ``ignore_absent=True`` leaves classes absent from both truth and
prediction out of averages (the segmentation convention).
"""

from . import multilabel
from .accuracy import accuracy, balanced_accuracy, hamming_loss, ovr_accuracy, zero_one_loss
from .agreement import (
    cohen_kappa,
    cohen_kappa_standard_error,
    matthews_corrcoef,
    ovr_matthews_corrcoef,
    scott_pi,
)
from .calibration import ReliabilityDiagram, calibration_error, reliability_diagram
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
from .curves import (
    Bounded,
    OperatingPoint,
    auroc,
    auroc_bounds,
    average_precision,
    average_precision_bounds,
    confusion_at,
    continuous_bins,
    operating_point,
    precision_recall_curve,
    roc_curve,
)
from .information import adjusted_rand_index, mutual_information, normalized_mutual_information
from .intervals import (
    accuracy_interval,
    cohen_kappa_interval,
    critical_value,
    negative_predictive_value_interval,
    precision_interval,
    proportion_interval,
    recall_interval,
    specificity_interval,
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
from .topk import top_k_accuracy, top_k_recall

__all__ = [
    "Bounded",
    "ClassCounts",
    "OperatingPoint",
    "ReliabilityDiagram",
    "auroc",
    "auroc_bounds",
    "average_precision",
    "average_precision_bounds",
    "continuous_bins",
    "calibration_error",
    "confusion_at",
    "multilabel",
    "operating_point",
    "precision_recall_curve",
    "reliability_diagram",
    "roc_curve",
    "top_k_accuracy",
    "top_k_recall",
    "accuracy",
    "accuracy_interval",
    "adjusted_rand_index",
    "balanced_accuracy",
    "cohen_kappa",
    "cohen_kappa_interval",
    "cohen_kappa_standard_error",
    "critical_value",
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
    "hamming_loss",
    "informedness",
    "jaccard",
    "markedness",
    "matthews_corrcoef",
    "miou",
    "mutual_information",
    "negative_likelihood_ratio",
    "negative_predictive_value",
    "negative_predictive_value_interval",
    "normalize_confusion_matrix",
    "normalized_mutual_information",
    "num_samples",
    "ovr_accuracy",
    "ovr_matthews_corrcoef",
    "positive_likelihood_ratio",
    "precision",
    "precision_interval",
    "precision_recall_fscore_support",
    "predicted_positives",
    "prevalence",
    "proportion_interval",
    "recall",
    "recall_interval",
    "scott_pi",
    "specificity",
    "specificity_interval",
    "support",
    "true_negatives",
    "true_positives",
    "zero_one_loss",
]
