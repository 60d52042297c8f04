"""Hugging Face ``Trainer``: exact evaluation metrics batch by batch, without keeping the logits.

Install with ``pip install "metricstream[huggingface]"``.

With ``TrainingArguments(batch_eval_metrics=True)`` the ``Trainer`` calls
``compute_metrics(eval_pred, compute_result=...)`` after every evaluation batch and keeps no
logits; :class:`ComputeMetrics` is that callable: it feeds an accumulator or
:class:`~metricstream.AccumulatorGroup` with each batch and, on the last one
(``compute_result=True``), returns :func:`metricstream.scalars.flat_scalars` of it and resets.
Called without ``compute_result`` (``batch_eval_metrics=False``: the whole evaluation set at
once) it does the same in one call.

Under ``torchrun`` / ``accelerate launch`` the Trainer hands every rank the batch gathered from all
ranks, with the duplicates its sampler padded the last batch with already dropped
(``gather_for_metrics``), so the accumulator sees each sample once and no metric sync is needed.
:func:`preprocess_logits` shrinks the logits before that gather, to what the accumulators need:
``(B, T, V)`` token logits become ``(B, T)`` class ids, so a gather moves ``V`` times less.

Labels equal to ``ignore_index`` (``-100``, the Trainer's padding and the label of special
tokens) are left out, whatever the accumulators' own configuration (for multilabel ``(B, L)``
targets pass ``ignore_index=None``: rows are never split).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np

from .base import Accumulator, AccumulatorGroup
from .scalars import flat_scalars

__all__ = ["ComputeMetrics", "preprocess_logits"]

INSTALL_HINT = 'pip install "metricstream[huggingface]"'

Metrics = Accumulator | AccumulatorGroup

try:  # transformers is what calls these; they need only numpy, and torch if given tensors
    importlib.import_module("transformers")
except ImportError as _error:
    raise ImportError(
        f"metricstream.huggingface needs transformers, which is not installed; {INSTALL_HINT}."
    ) from _error


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, (tuple, list)) and value and not np.isscalar(value[0]):
        value = value[0]  # (logits, hidden_states, ...): the logits
    if hasattr(value, "detach"):  # a torch tensor, possibly on a GPU, possibly bfloat16
        value = value.detach()
        if str(value.dtype) in ("torch.bfloat16", "torch.float16"):
            value = value.float()
        value = value.cpu().numpy()
    return np.asarray(value)


class ComputeMetrics:
    """A stateful ``compute_metrics`` for ``Trainer(..., batch_eval_metrics=True)``.

    Args:
        metrics: an accumulator or group (kept and reset between evaluations), or a function
            returning a new one.
        ignore_index: labels left out before counting (``None``: keep every label).
        prefix: prepended to every key (the Trainer adds ``eval_`` itself).
        scalars: keyword arguments of :func:`~metricstream.scalars.flat_scalars`.

    ``metrics.last`` is the accumulator of the last finished evaluation (for reports, curves
    and intervals), ``metrics.results`` its scalars.

    Example:
        >>> import numpy as np
        >>> from metricstream import ConfusionAccumulator
        >>> from transformers import EvalPrediction
        >>> compute_metrics = ComputeMetrics(ConfusionAccumulator(3))
        >>> logits = np.array([[2.0, 0.1, 0.0], [0.0, 3.0, 0.5], [0.2, 0.1, 0.9], [0.1, 0.8, 0.2]])
        >>> compute_metrics(EvalPrediction(logits[:2], np.array([0, 1])), compute_result=False)
        {}
        >>> last = EvalPrediction(logits[2:], np.array([2, 2]))
        >>> out = compute_metrics(last, compute_result=True)
        >>> out["accuracy"], out["num_samples"]
        (0.75, 4.0)
    """

    def __init__(
        self,
        metrics: Metrics | Callable[[], Metrics],
        *,
        ignore_index: int | None = -100,
        prefix: str = "",
        scalars: Mapping[str, Any] | None = None,
    ) -> None:
        made = metrics() if callable(metrics) and not isinstance(metrics, Accumulator) else metrics
        if not isinstance(made, (Accumulator, AccumulatorGroup)):
            raise TypeError(
                f"`metrics` must be an accumulator, an AccumulatorGroup, or a function "
                f"returning one; got {type(made).__name__}."
            )
        self.acc: Metrics = made
        self.ignore_index = ignore_index
        self.prefix = prefix
        self.scalar_options = dict(scalars or {})
        with warnings.catch_warnings():  # the empty accumulator's 0/0: only the options count
            warnings.simplefilter("ignore")
            flat_scalars(self.acc, **self.scalar_options)
        self.last: Metrics | None = None
        self.results: dict[str, float] = {}

    def update(self, predictions: Any, label_ids: Any) -> ComputeMetrics:
        """Count one batch: ``label_ids`` ``(B, ...)``, ``predictions`` of the same leading shape
        (and, for scores, a trailing class axis). Returns ``self``."""
        labels = _to_numpy(label_ids)
        preds = _to_numpy(predictions)
        if preds.shape[: labels.ndim] != labels.shape:
            raise ValueError(
                f"`predictions` has shape {preds.shape}, which does not start with the labels' "
                f"shape {labels.shape}; give one prediction (or one row of class scores, last "
                f"axis) per label."
            )
        if self.ignore_index is not None:
            keep = labels != self.ignore_index
            if not keep.all():  # token tasks: padding and special tokens
                labels, preds = labels[keep], preds[keep]
        if preds.ndim == labels.ndim + 1 and labels.ndim > 1:  # (B, T) labels, (B, T, C) scores
            labels, preds = labels.reshape(-1), preds.reshape(-1, preds.shape[-1])
        if len(labels):
            self.acc.update(labels, preds)
        return self

    def compute(self) -> dict[str, float]:
        """The scalars of everything counted since the last reset, then reset."""
        self.last = self.acc.copy()
        self.results = flat_scalars(self.last, self.prefix, **self.scalar_options)
        self.acc.reset()
        return dict(self.results)

    def __call__(self, eval_pred: Any, compute_result: bool | None = None) -> dict[str, float]:
        predictions = getattr(eval_pred, "predictions", None)
        label_ids = getattr(eval_pred, "label_ids", None)
        if predictions is None and isinstance(eval_pred, (tuple, list)):
            predictions, label_ids = eval_pred[0], eval_pred[1]
        if label_ids is None:
            raise ValueError(
                "compute_metrics got no labels (`eval_pred.label_ids` is None): give the "
                "dataset a 'labels' column, or set `label_names` in TrainingArguments."
            )
        self.update(predictions, label_ids)
        if compute_result is False:
            return {}
        return self.compute()


def preprocess_logits(
    output: Literal["argmax", "softmax", "sigmoid", "logits"] = "argmax",
) -> Callable[[Any, Any], Any]:
    """A ``preprocess_logits_for_metrics`` that shrinks the logits before the Trainer gathers
    them across processes (class axis last).

    * ``"argmax"``: ``(..., C)`` logits -> ``(...)`` class ids (int64): for confusion-matrix
      metrics; a ``(B, T, V)`` language-model output shrinks ``V``-fold;
    * ``"softmax"`` / ``"sigmoid"``: probabilities, for a ``ScoreAccumulator`` (multiclass /
      binary or multilabel);
    * ``"logits"``: unchanged (the first element of a tuple output).

    Example:
        >>> import torch
        >>> shrink = preprocess_logits("argmax")
        >>> shrink(torch.tensor([[[0.1, 2.0], [3.0, 0.0]]]), None)
        tensor([[1, 0]])
    """
    if output not in ("argmax", "softmax", "sigmoid", "logits"):
        raise ValueError(
            f"`output` must be 'argmax', 'softmax', 'sigmoid' or 'logits', got {output!r}."
        )

    def preprocess(logits: Any, labels: Any) -> Any:
        if isinstance(logits, (tuple, list)):
            logits = logits[0]
        if output == "argmax":
            return logits.argmax(dim=-1)
        if output == "softmax":
            return logits.float().softmax(dim=-1)
        if output == "sigmoid":
            return logits.float().sigmoid()
        return logits

    return preprocess
