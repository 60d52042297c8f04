"""The accumulator kinds the conformance kit (``tests/test_conformance.py``) checks.

A *kind* is one accumulator class in one configuration, with everything the kit needs to drive
it: a factory of fresh accumulators, a generator of random valid batches, generators of invalid
batches (each must raise and change nothing) and of hostile-but-valid ones (each must either be
refused atomically or leave a state that loads), the views to compare, and the ConfusionAccumulator
that shares a group with it. Adding a family to the kit is one function here::

    @register("my-family")
    def my_family() -> Kind:
        return Kind(make=lambda: MyAccumulator(3), make_batch=my_batch, views={...}, ...)

Factories run when a test asks for their kind (not at import), so a family that is absent or
whose factory is wrong shows up as that kind's failures only. Batches are ``(args, kwargs)``
for ``acc.update(*args, **kwargs)``; every array in them whose first axis has the batch's
length is split along that axis by the kit (any split of a batch is a valid batch). Arrays are
C-contiguous int64/float64 so that the kit compiles no kernel specialisation of its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metricstream import (
    Accumulator,
    AccumulatorGroup,
    BootstrapConfusionAccumulator,
    ConfusionAccumulator,
    MultilabelAccumulator,
    ScoreAccumulator,
)

__all__ = ["KINDS", "Batch", "Histogram", "Kind", "kind", "names", "register"]

Batch = tuple[tuple[Any, ...], dict[str, Any]]
BatchMaker = Callable[[np.random.Generator], Batch]
View = Callable[[Any], Any]


@dataclass(frozen=True)
class Invalid:
    """A batch that must be refused: ``ValueError``/``TypeError`` naming ``argument``."""

    make: BatchMaker
    argument: str | None = None


@dataclass(frozen=True)
class Kind:
    """What the kit needs to know about one accumulator configuration.

    Attributes:
        make: a fresh, empty accumulator.
        make_batch: a random valid batch (possibly empty) for ``update``.
        views: a few cheap views by name (each ``view(acc)``), deterministic functions of the
            state; the kit compares them between equal states and under concurrent updates.
        invalid: batches that must raise and leave the state bit-identical.
        extreme: valid but hostile batches (infinite logits, huge weights): each update must
            either raise and change nothing, or leave a state that ``from_bytes`` loads.
        incompatible: accumulators of the same type that must refuse to merge (another
            configuration).
        partner: the ConfusionAccumulator that shares a group with this kind and accepts its
            group batches.
        group_batch: batches for ``AccumulatorGroup.update`` (default: ``make_batch``).
        exact_arrays: the arrays that equal one update's whatever the split of a stream
            (default: all); e.g. bootstrap replicates drawn per call depend on the calls.
        float_rtol: tolerance of float64 state sums computed in another order (int64 states and
            float sums of equal operands in the same order are compared bit for bit).
    """

    make: Callable[[], Accumulator]
    make_batch: BatchMaker
    views: Mapping[str, View]
    invalid: Mapping[str, Invalid] = field(default_factory=dict)
    extreme: Mapping[str, BatchMaker] = field(default_factory=dict)
    incompatible: tuple[Callable[[], Accumulator], ...] = ()
    partner: Callable[[], Accumulator] | None = None
    group_batch: BatchMaker | None = None
    exact_arrays: tuple[str, ...] | None = None
    float_rtol: float = 1e-12

    def batch_for_group(self, rng: np.random.Generator) -> Batch:
        return (self.group_batch or self.make_batch)(rng)


KINDS: dict[str, Callable[[], Kind]] = {}


def register(name: str) -> Callable[[Callable[[], Kind]], Callable[[], Kind]]:
    """Register a factory of a :class:`Kind` under ``name`` (the kit's test ids)."""

    def decorate(factory: Callable[[], Kind]) -> Callable[[], Kind]:
        if name in KINDS:
            raise ValueError(f"the conformance kind {name!r} is registered twice")
        KINDS[name] = factory
        return factory

    return decorate


def names() -> list[str]:
    return list(KINDS)


_BUILT: dict[str, Kind] = {}


def kind(name: str) -> Kind:
    """The kind registered as ``name`` (built once)."""
    if name not in _BUILT:
        _BUILT[name] = KINDS[name]()
    return _BUILT[name]


def _accepts(cls: type, argument: str) -> bool:
    return argument in inspect.signature(cls.__init__).parameters


def _for_logits(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls`` reading logits: ``logits=True`` where the class has the flag (the threshold is
    then a probability), else the logit threshold 0.0."""
    if _accepts(cls, "logits"):
        return cls(*args, logits=True, threshold=0.5, **kwargs)
    return cls(*args, threshold=0.0, **kwargs)


# ---------------------------------------------------------------------------- batch helpers
def _size(rng: np.random.Generator, high: int = 40) -> int:
    # Empty batches are valid batches: draw them now and then.
    return 0 if rng.random() < 0.05 else int(rng.integers(1, high))


def _labels(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    return rng.integers(0, k, n).astype(np.int64)


def _at(array: np.ndarray, value: Any, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``array`` (at least one entry) with ``value`` at a random position."""
    array = np.array(array, copy=True)
    flat = array.reshape(-1)
    flat[int(rng.integers(0, flat.size))] = value
    return array


def _nonempty(make: BatchMaker) -> BatchMaker:
    def draw(rng: np.random.Generator) -> Batch:
        while True:
            args, kwargs = make(rng)
            if np.shape(args[0])[0] > 0:
                return args, kwargs

    return draw


def _replace(batch: Batch, position: int | str, value: Any) -> Batch:
    args, kwargs = batch
    if isinstance(position, str):
        return args, {**kwargs, position: value}
    listed = list(args)
    while len(listed) <= position:
        listed.append(None)
    listed[position] = value
    return tuple(listed), kwargs


def _spoil(make: BatchMaker, position: int | str, spoil: Callable[[Any, np.random.Generator], Any]):
    """An invalid-batch maker: a nonempty valid batch with one argument spoiled."""
    nonempty = _nonempty(make)

    def draw(rng: np.random.Generator) -> Batch:
        batch = nonempty(rng)
        args, kwargs = batch
        if isinstance(position, str):
            current = kwargs.get(position)
        else:
            current = args[position] if position < len(args) else None
        if current is None:  # e.g. weights: spoil a valid default
            current = np.ones(np.shape(args[0])[0])
        return _replace(batch, position, spoil(current, rng))

    return draw


def _value_at(value: Any) -> Callable[[Any, np.random.Generator], Any]:
    def spoil(array: Any, rng: np.random.Generator) -> Any:
        array = np.asarray(array)
        if isinstance(value, float) and array.dtype.kind in "iub":
            array = array.astype(np.float64)
        return _at(array, value, rng)

    return spoil


def _shorter(array: Any, rng: np.random.Generator) -> Any:
    return np.asarray(array)[:-1] if np.shape(array)[0] > 1 else np.concatenate([array, array])


def _text(array: Any, rng: np.random.Generator) -> Any:
    return np.asarray(array).astype(str)


# ---------------------------------------------------------------------------- confusion
K = 4
VOID = 255


def _confusion_labels(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, K, n), _labels(rng, K, n)), {}


def _confusion_logits(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, K, n), rng.normal(size=(n, K))), {}


def _confusion_weighted(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, K, n), _labels(rng, K, n), rng.uniform(0.0, 3.0, n)), {}


def _confusion_void(rng: np.random.Generator) -> Batch:
    (y_true, y_pred), _ = _confusion_labels(rng)
    y_true = np.where(rng.random(y_true.size) < 0.15, VOID, y_true).astype(np.int64)
    return (y_true, y_pred), {}


CONFUSION_VIEWS: dict[str, View] = {
    "num_samples": lambda acc: acc.num_samples,
    "accuracy": lambda acc: acc.accuracy(),
    "f1_macro": lambda acc: acc.f1(average="macro", zero_division=0.0),
    "matrix": lambda acc: acc.matrix,
}

_CONFUSION_INVALID: dict[str, Invalid] = {
    "label_beyond_k": Invalid(_spoil(_confusion_labels, 1, _value_at(K)), "y_pred"),
    "negative_label": Invalid(_spoil(_confusion_labels, 0, _value_at(-1)), "y_true"),
    "fractional_label": Invalid(_spoil(_confusion_labels, 0, _value_at(0.5)), "y_true"),
    "nan_label": Invalid(_spoil(_confusion_labels, 1, _value_at(np.nan)), "y_pred"),
    "shorter_y_pred": Invalid(_spoil(_confusion_labels, 1, _shorter), "y_pred"),
    "text_y_true": Invalid(_spoil(_confusion_labels, 0, _text), "y_true"),
    "fractional_weight": Invalid(_spoil(_confusion_labels, 2, _value_at(0.5)), "weights"),
    "negative_weight": Invalid(_spoil(_confusion_labels, 2, _value_at(-1.0)), "weights"),
}


@register("confusion-labels")
def confusion_labels() -> Kind:
    return Kind(
        make=lambda: ConfusionAccumulator(K),
        make_batch=_confusion_labels,
        views=CONFUSION_VIEWS,
        invalid=_CONFUSION_INVALID,
        extreme={
            # whole-number weights near the int64 limit: refused before any count wraps
            "weights_2_62": lambda rng: (
                (np.zeros(3, np.int64), np.zeros(3, np.int64), np.full(3, 2.0**62)),
                {},
            ),
        },
        incompatible=(
            lambda: ConfusionAccumulator(K + 1),
            lambda: ConfusionAccumulator(K, weighted=True),
        ),
        partner=lambda: ConfusionAccumulator(K),
    )


@register("confusion-logits")
def confusion_logits() -> Kind:
    return Kind(
        make=lambda: ConfusionAccumulator(K),
        make_batch=_confusion_logits,
        views=CONFUSION_VIEWS,
        invalid={
            "nan_logit": Invalid(_spoil(_confusion_logits, 1, _value_at(np.nan)), "y_pred"),
            "three_class_scores": Invalid(
                _spoil(_confusion_logits, 1, lambda a, rng: np.ascontiguousarray(a[:, :3])),
                "y_pred",
            ),
            "label_beyond_k": Invalid(_spoil(_confusion_logits, 0, _value_at(K)), "y_true"),
        },
        extreme={
            "infinite_logits": lambda rng: (
                (
                    np.array([0, 1, 2, 3], np.int64),
                    np.array(
                        [[np.inf, 0, 0, 0], [-np.inf] * 4, [0, -np.inf, np.inf, 1], [1e308] * 4]
                    ),
                ),
                {},
            ),
        },
        incompatible=(lambda: ConfusionAccumulator(K, class_axis=-1),),
        partner=lambda: ConfusionAccumulator(K),
    )


@register("confusion-weighted")
def confusion_weighted() -> Kind:
    return Kind(
        make=lambda: ConfusionAccumulator(K, weighted=True),
        make_batch=_confusion_weighted,
        views=CONFUSION_VIEWS,
        invalid={
            "negative_weight": Invalid(_spoil(_confusion_weighted, 2, _value_at(-0.5)), "weights"),
            "nan_weight": Invalid(_spoil(_confusion_weighted, 2, _value_at(np.nan)), "weights"),
            "infinite_weight": Invalid(
                _spoil(_confusion_weighted, 2, _value_at(np.inf)), "weights"
            ),
            "shorter_weights": Invalid(_spoil(_confusion_weighted, 2, _shorter), "weights"),
            "label_beyond_k": Invalid(_spoil(_confusion_weighted, 0, _value_at(K)), "y_true"),
        },
        extreme={
            "weights_1e308": lambda rng: (
                (np.ones(2, np.int64), np.ones(2, np.int64), np.full(2, 1e308)),
                {},
            ),
        },
        incompatible=(lambda: ConfusionAccumulator(K),),
        partner=lambda: ConfusionAccumulator(K, weighted=True),
    )


@register("confusion-ignore-index")
def confusion_ignore_index() -> Kind:
    return Kind(
        make=lambda: ConfusionAccumulator(K, ignore_index=VOID),
        make_batch=_confusion_void,
        views=CONFUSION_VIEWS,
        invalid={
            # in y_true: a bad prediction of an ignored sample may go unchecked
            "label_beyond_k": Invalid(_spoil(_confusion_void, 0, _value_at(K)), "y_true"),
            "negative_label": Invalid(_spoil(_confusion_void, 0, _value_at(-1)), "y_true"),
        },
        incompatible=(
            lambda: ConfusionAccumulator(K),
            lambda: ConfusionAccumulator(K, ignore_index=-1),
        ),
        partner=lambda: ConfusionAccumulator(K, ignore_index=VOID),
    )


# ---------------------------------------------------------------------------- scores
SCORE_OPTIONS: dict[str, Any] = {"bins": 64, "calibration_bins": 60}  # small states, fast blobs
C = 3


def _probabilities(rng: np.random.Generator, n: int) -> np.ndarray:
    # Mostly inside (0, 1), with exact 0s and 1s (their own bins) now and then.
    p = rng.random(n)
    p[rng.random(n) < 0.1] = 0.0
    p[rng.random(n) < 0.1] = 1.0
    return p


def _score_binary(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, 2, n), _probabilities(rng, n)), {}


def _score_binary_weighted(rng: np.random.Generator) -> Batch:
    (y_true, scores), _ = _score_binary(rng)
    return (y_true, scores, rng.uniform(0.0, 3.0, y_true.size)), {}


def _score_multiclass(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, C, n), rng.dirichlet(np.ones(C), n)), {}


def _score_logits(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, C, n), rng.normal(scale=3.0, size=(n, C))), {}


def _score_multilabel(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, 2, n * C).reshape(n, C), _probabilities(rng, n * C).reshape(n, C)), {}


SCORE_VIEWS: dict[str, View] = {
    "num_samples": lambda acc: acc.num_samples,
    "auroc": lambda acc: acc.auroc(),
    "average_precision": lambda acc: acc.average_precision(),
    "log_loss": lambda acc: acc.log_loss(),
    "brier_score": lambda acc: acc.brier_score(),
}


def _unnormalized(rows: Any, rng: np.random.Generator) -> Any:
    # Per-class sigmoids, not a distribution: rows summing to 1.6
    return np.asarray(rows) * 0.0 + np.array([0.9, 0.4, 0.3])


@register("scores-binary")
def scores_binary() -> Kind:
    return Kind(
        make=lambda: ScoreAccumulator("binary", **SCORE_OPTIONS),
        make_batch=_score_binary,
        views=SCORE_VIEWS,
        invalid={
            "score_above_one": Invalid(_spoil(_score_binary, 1, _value_at(1.5)), "y_pred"),
            "negative_score": Invalid(_spoil(_score_binary, 1, _value_at(-0.25)), "y_pred"),
            "nan_score": Invalid(_spoil(_score_binary, 1, _value_at(np.nan)), "y_pred"),
            "label_two": Invalid(_spoil(_score_binary, 0, _value_at(2)), "y_true"),
            "shorter_y_pred": Invalid(_spoil(_score_binary, 1, _shorter), "y_pred"),
            "fractional_weight": Invalid(_spoil(_score_binary, 2, _value_at(0.5)), "weights"),
        },
        extreme={
            # probability 0 for the true class: a log loss of +inf per sample if not clipped
            "confidently_wrong": lambda rng: (
                (np.array([1, 0], np.int64), np.array([0.0, 1.0])),
                {},
            ),
            "weights_2_62": lambda rng: (
                (np.array([1, 0], np.int64), np.array([0.75, 0.25]), np.full(2, 2.0**62)),
                {},
            ),
        },
        incompatible=(
            lambda: ScoreAccumulator("binary", bins=128, calibration_bins=60),
            lambda: ScoreAccumulator("binary", **SCORE_OPTIONS, logits=True),
        ),
        partner=lambda: ConfusionAccumulator(2, threshold=0.5),
    )


@register("scores-binary-weighted")
def scores_binary_weighted() -> Kind:
    return Kind(
        make=lambda: ScoreAccumulator("binary", **SCORE_OPTIONS, weighted=True),
        make_batch=_score_binary_weighted,
        views=SCORE_VIEWS,
        invalid={
            "negative_weight": Invalid(
                _spoil(_score_binary_weighted, 2, _value_at(-1.0)), "weights"
            ),
            "nan_weight": Invalid(_spoil(_score_binary_weighted, 2, _value_at(np.nan)), "weights"),
            "score_above_one": Invalid(_spoil(_score_binary_weighted, 1, _value_at(1.5)), "y_pred"),
        },
        extreme={
            "weights_1e308": lambda rng: (
                (np.array([1, 0], np.int64), np.array([0.25, 0.75]), np.full(2, 1e308)),
                {},
            ),
        },
        incompatible=(lambda: ScoreAccumulator("binary", **SCORE_OPTIONS),),
        partner=lambda: ConfusionAccumulator(2, threshold=0.5, weighted=True),
    )


@register("scores-multiclass")
def scores_multiclass() -> Kind:
    return Kind(
        make=lambda: ScoreAccumulator("multiclass", C, **SCORE_OPTIONS),
        make_batch=_score_multiclass,
        views={**SCORE_VIEWS, "top_2": lambda acc: acc.top_k_accuracy(2)},
        invalid={
            "label_beyond_c": Invalid(_spoil(_score_multiclass, 0, _value_at(C)), "y_true"),
            "nan_score": Invalid(_spoil(_score_multiclass, 1, _value_at(np.nan)), "y_pred"),
            "score_above_one": Invalid(_spoil(_score_multiclass, 1, _value_at(1.5)), "y_pred"),
            "rows_not_summing_to_one": Invalid(
                _spoil(_score_multiclass, 1, _unnormalized), "y_pred"
            ),
            "two_class_scores": Invalid(
                _spoil(_score_multiclass, 1, lambda a, rng: np.ascontiguousarray(a[:, :2])),
                "y_pred",
            ),
        },
        extreme={
            "zero_probability_for_the_truth": lambda rng: (
                (np.array([0, 1], np.int64), np.array([[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]])),
                {},
            ),
        },
        incompatible=(
            lambda: ScoreAccumulator("multiclass", C + 1, **SCORE_OPTIONS),
            lambda: ScoreAccumulator("multiclass", C, **SCORE_OPTIONS, logits=True),
        ),
        partner=lambda: ConfusionAccumulator(C),
    )


@register("scores-multiclass-logits")
def scores_multiclass_logits() -> Kind:
    return Kind(
        make=lambda: ScoreAccumulator("multiclass", C, **SCORE_OPTIONS, logits=True),
        make_batch=_score_logits,
        views={**SCORE_VIEWS, "top_2": lambda acc: acc.top_k_accuracy(2)},
        invalid={
            "nan_logit": Invalid(_spoil(_score_logits, 1, _value_at(np.nan)), "y_pred"),
            "label_beyond_c": Invalid(_spoil(_score_logits, 0, _value_at(C)), "y_true"),
        },
        extreme={
            # masked logits: -inf for the true class (the log-loss sum must not become inf)
            "minus_inf_for_the_truth": lambda rng: (
                (np.array([0, 1], np.int64), np.array([[-np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]])),
                {},
            ),
            "plus_inf_logit": lambda rng: (
                (np.array([0, 1], np.int64), np.array([[np.inf, 0.0, 1.0], [0.0, np.inf, 2.0]])),
                {},
            ),
        },
        incompatible=(lambda: ScoreAccumulator("multiclass", C, **SCORE_OPTIONS),),
        partner=lambda: ConfusionAccumulator(C),
    )


@register("scores-multilabel")
def scores_multilabel() -> Kind:
    return Kind(
        make=lambda: ScoreAccumulator("multilabel", C, **SCORE_OPTIONS),
        make_batch=_score_multilabel,
        views=SCORE_VIEWS,
        invalid={
            "target_two": Invalid(_spoil(_score_multilabel, 0, _value_at(2)), "y_true"),
            "score_above_one": Invalid(_spoil(_score_multilabel, 1, _value_at(1.5)), "y_pred"),
            "two_columns": Invalid(
                _spoil(_score_multilabel, 1, lambda a, rng: np.ascontiguousarray(a[:, :2])),
                "y_pred",
            ),
        },
        extreme={
            "confidently_wrong": lambda rng: (
                (np.array([[1, 0, 1]], np.int64), np.array([[0.0, 1.0, 0.0]])),
                {},
            ),
        },
        incompatible=(lambda: ScoreAccumulator("multilabel", C + 1, **SCORE_OPTIONS),),
        partner=lambda: ConfusionAccumulator(2, threshold=0.5),
    )


# ---------------------------------------------------------------------------- multilabel
L = 4


def _indicators(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, 2, n * L).reshape(n, L), _labels(rng, 2, n * L).reshape(n, L)), {}


def _multilabel_logits(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, 2, n * L).reshape(n, L), rng.normal(size=(n, L))), {}


def _multilabel_weighted(rng: np.random.Generator) -> Batch:
    (y_true, y_pred), _ = _indicators(rng)
    return (y_true, y_pred, rng.uniform(0.0, 3.0, y_true.shape[0])), {}


MULTILABEL_VIEWS: dict[str, View] = {
    "num_samples": lambda acc: acc.num_samples,
    "f1_micro": lambda acc: acc.f1(average="micro", zero_division=0.0),
    "f1_samples": lambda acc: acc.f1(average="samples", zero_division=0.0),
    "hamming_loss": lambda acc: acc.hamming_loss(),
    "subset_accuracy": lambda acc: acc.subset_accuracy(),
}


@register("multilabel-indicators")
def multilabel_indicators() -> Kind:
    return Kind(
        make=lambda: MultilabelAccumulator(L),
        make_batch=_indicators,
        views=MULTILABEL_VIEWS,
        invalid={
            "target_two": Invalid(_spoil(_indicators, 0, _value_at(2)), "y_true"),
            "negative_target": Invalid(_spoil(_indicators, 0, _value_at(-1)), "y_true"),
            "three_columns": Invalid(
                _spoil(_indicators, 1, lambda a, rng: np.ascontiguousarray(a[:, :3])), "y_pred"
            ),
            "fractional_weight": Invalid(_spoil(_indicators, 2, _value_at(0.5)), "weights"),
            # a logit at the probability threshold 0.5: only a mistake can produce it
            "logit_at_probability_threshold": Invalid(
                _spoil(_indicators, 1, _value_at(-2.5)), "y_pred"
            ),
        },
        extreme={
            "weights_2_62": lambda rng: (
                (np.ones((2, L), np.int64), np.ones((2, L), np.int64), np.full(2, 2.0**62)),
                {},
            ),
        },
        incompatible=(
            lambda: MultilabelAccumulator(L + 1),
            lambda: MultilabelAccumulator(L, threshold=0.25),
        ),
        partner=lambda: ConfusionAccumulator(2),
    )


@register("multilabel-logits")
def multilabel_logits() -> Kind:
    return Kind(
        make=lambda: _for_logits(MultilabelAccumulator, L),
        make_batch=_multilabel_logits,
        views=MULTILABEL_VIEWS,
        invalid={
            "nan_logit": Invalid(_spoil(_multilabel_logits, 1, _value_at(np.nan)), "y_pred"),
            "target_two": Invalid(_spoil(_multilabel_logits, 0, _value_at(2)), "y_true"),
        },
        extreme={
            "infinite_logits": lambda rng: (
                (np.array([[1, 0, 1, 0]], np.int64), np.array([[np.inf, -np.inf, -np.inf, 0.0]])),
                {},
            ),
        },
        incompatible=(lambda: MultilabelAccumulator(L),),
        partner=lambda: _for_logits(ConfusionAccumulator, 2),
    )


@register("multilabel-weighted")
def multilabel_weighted() -> Kind:
    return Kind(
        make=lambda: MultilabelAccumulator(L, weighted=True),
        make_batch=_multilabel_weighted,
        views=MULTILABEL_VIEWS,
        invalid={
            "negative_weight": Invalid(_spoil(_multilabel_weighted, 2, _value_at(-1.0)), "weights"),
            "nan_weight": Invalid(_spoil(_multilabel_weighted, 2, _value_at(np.nan)), "weights"),
            "infinite_weight": Invalid(
                _spoil(_multilabel_weighted, 2, _value_at(np.inf)), "weights"
            ),
            "target_two": Invalid(_spoil(_multilabel_weighted, 0, _value_at(2)), "y_true"),
        },
        extreme={
            "weights_1e308": lambda rng: (
                (np.ones((2, L), np.int64), np.ones((2, L), np.int64), np.full(2, 1e308)),
                {},
            ),
        },
        incompatible=(lambda: MultilabelAccumulator(L),),
        # weights are per sample here, per label for the confusion matrix: groups get none
        partner=lambda: ConfusionAccumulator(2),
        group_batch=lambda rng: (_indicators(rng)[0], {}),
    )


# ---------------------------------------------------------------------------- bootstrap
B = 8
KB = 3


def _bootstrap_clusters(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    clusters = rng.integers(0, 6, n).astype(np.int64)
    return (_labels(rng, KB, n), _labels(rng, KB, n)), {"cluster_ids": clusters}


def _bootstrap_calls(rng: np.random.Generator) -> Batch:
    n = _size(rng)
    return (_labels(rng, KB, n), _labels(rng, KB, n)), {}


def _bootstrap_weighted(rng: np.random.Generator) -> Batch:
    (y_true, y_pred), kwargs = _bootstrap_clusters(rng)
    return (y_true, y_pred, rng.uniform(0.0, 3.0, y_true.size)), kwargs


BOOTSTRAP_VIEWS: dict[str, View] = {
    "num_samples": lambda acc: acc.num_samples,
    "accuracy": lambda acc: acc.accuracy(),
    "matrix": lambda acc: acc.matrix,
    "f1_macro": lambda acc: acc.f1(average="macro", zero_division=0.0),
}


def _interval(result: Any) -> tuple[float, float, float]:
    return (result.low, result.high, result.standard_error)


BOOTSTRAP_INTERVAL: dict[str, View] = {
    "replicates": lambda acc: acc.replicates,
    "interval": lambda acc: _interval(acc.interval("accuracy", method="normal")),
}


@register("bootstrap-clusters")
def bootstrap_clusters() -> Kind:
    return Kind(
        make=lambda: BootstrapConfusionAccumulator(KB, n_resamples=B, seed=1),
        make_batch=_bootstrap_clusters,
        views={**BOOTSTRAP_VIEWS, **BOOTSTRAP_INTERVAL},
        invalid={
            "label_beyond_k": Invalid(_spoil(_bootstrap_clusters, 1, _value_at(KB)), "y_pred"),
            "shorter_cluster_ids": Invalid(
                _spoil(_bootstrap_clusters, "cluster_ids", _shorter), "cluster_ids"
            ),
            "fractional_cluster_id": Invalid(
                _spoil(_bootstrap_clusters, "cluster_ids", _value_at(0.5)), "cluster_ids"
            ),
            "fractional_weight": Invalid(_spoil(_bootstrap_clusters, 2, _value_at(0.5)), "weights"),
        },
        extreme={
            # whole weights that fit the matrix but not a replicate drawing a cluster twice+
            "weights_2_61": lambda rng: (
                (np.zeros(2, np.int64), np.zeros(2, np.int64), np.full(2, 2.0**61)),
                {"cluster_ids": np.array([0, 1], np.int64)},
            ),
        },
        incompatible=(
            lambda: BootstrapConfusionAccumulator(KB, n_resamples=B, seed=2),
            lambda: BootstrapConfusionAccumulator(KB, n_resamples=B + 1, seed=1),
        ),
        partner=lambda: ConfusionAccumulator(KB),
    )


@register("bootstrap-calls")
def bootstrap_calls() -> Kind:
    return Kind(
        make=lambda: BootstrapConfusionAccumulator(KB, n_resamples=B, seed=1),
        make_batch=_bootstrap_calls,
        views=BOOTSTRAP_VIEWS,  # the replicates are drawn per call: not a function of the data
        invalid={
            "label_beyond_k": Invalid(_spoil(_bootstrap_calls, 0, _value_at(KB)), "y_true"),
            "nan_label": Invalid(_spoil(_bootstrap_calls, 1, _value_at(np.nan)), "y_pred"),
        },
        incompatible=(lambda: BootstrapConfusionAccumulator(KB + 1, n_resamples=B, seed=1),),
        partner=lambda: ConfusionAccumulator(KB),
        exact_arrays=("matrix",),
    )


@register("bootstrap-weighted")
def bootstrap_weighted() -> Kind:
    return Kind(
        make=lambda: BootstrapConfusionAccumulator(KB, n_resamples=B, seed=1, weighted=True),
        make_batch=_bootstrap_weighted,
        views={**BOOTSTRAP_VIEWS, **BOOTSTRAP_INTERVAL},
        invalid={
            "negative_weight": Invalid(_spoil(_bootstrap_weighted, 2, _value_at(-1.0)), "weights"),
            "nan_weight": Invalid(_spoil(_bootstrap_weighted, 2, _value_at(np.nan)), "weights"),
        },
        extreme={
            # one finite weight; a replicate that draws its cluster twice doubles it to inf
            "weight_1e308": lambda rng: (
                (np.ones(1, np.int64), np.ones(1, np.int64), np.full(1, 1e308)),
                {"cluster_ids": np.zeros(1, np.int64)},
            ),
        },
        incompatible=(lambda: BootstrapConfusionAccumulator(KB, n_resamples=B, seed=1),),
        partner=lambda: ConfusionAccumulator(KB, weighted=True),
    )


# ---------------------------------------------------------------------------- docs/developer.md
# The smallest accumulator, copied from docs/developer.md ("The smallest accumulator"): the kit
# checks that what the guide teaches gets the whole protocol.
class Histogram(Accumulator):
    """Counts of integer values in [0, size)."""

    def __init__(self, size: int) -> None:
        # 1. Validate every configuration argument here, naming it; never later.
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"`size` must be a positive int, got {size!r}.")
        self._size = size
        # 2. Last: declare the state arrays as (shape, dtype); the base allocates them.
        super().__init__({"counts": ((size,), np.int64)})

    def config(self) -> dict:
        # Exactly the constructor's keyword arguments: type(self)(**config) is an empty twin.
        return {"size": self._size}

    def _prepare(self, y_true, y_pred=None, weights=None):  # type: ignore[no-untyped-def]
        # Convert and check outside the lock. The (y_true, y_pred, weights) signature lets
        # groups and the Dask reduction feed this accumulator.
        values = np.asarray(y_true, dtype=np.int64).reshape(-1)
        if values.size and (values.min() < 0 or values.max() >= self._size):
            bad = int(np.flatnonzero((values < 0) | (values >= self._size))[0])
            raise ValueError(
                f"`y_true` holds {values[bad]} at position {bad}, outside [0, {self._size})."
            )
        return values

    def _count(self, arrays, batch) -> None:  # type: ignore[no-untyped-def]
        # Lock held. All checks are done: this cannot fail half-way.
        arrays["counts"] += np.bincount(batch, minlength=self._size)

    def total(self) -> int:
        return self._view(lambda state: int(state["counts"].sum()))


H = 5


def _histogram(rng: np.random.Generator) -> Batch:
    return (_labels(rng, H, _size(rng)),), {}


@register("docs-histogram")
def docs_histogram() -> Kind:
    return Kind(
        make=lambda: Histogram(H),
        make_batch=_histogram,
        views={
            "total": lambda acc: acc.total(),
            "counts": lambda acc: acc.state_arrays()["counts"],
        },
        invalid={
            "value_beyond_size": Invalid(_spoil(_histogram, 0, _value_at(H)), "y_true"),
            "negative_value": Invalid(_spoil(_histogram, 0, _value_at(-1)), "y_true"),
        },
        incompatible=(lambda: Histogram(H + 1),),
        partner=lambda: ConfusionAccumulator(H),
        group_batch=lambda rng: _confusion_pair(rng, H),
    )


def _confusion_pair(rng: np.random.Generator, k: int) -> Batch:
    n = _size(rng)
    return (_labels(rng, k, n), _labels(rng, k, n)), {}


# ============================================================================ HOOK: new families
# Families being written now register here when their package lands; until then the import
# fails and the kind is simply not registered. Check each factory against the class when it
# lands (constructor, views) and add its invalid and extreme batches.
try:  # metricstream/regression/: update(y_true, y_pred, weights=None) with float targets
    from metricstream.regression import RegressionAccumulator
except ImportError:  # pragma: no cover - before the family lands
    HAVE_REGRESSION = False
else:
    HAVE_REGRESSION = True

if HAVE_REGRESSION:

    def _regression(rng: np.random.Generator) -> Batch:
        n = _size(rng)
        y_true = rng.normal(size=n)
        return (y_true, y_true + rng.normal(scale=0.5, size=n), rng.uniform(0.0, 3.0, n)), {}

    def _regression_whole(rng: np.random.Generator) -> Batch:
        # whole-number targets in [0, K): a ConfusionAccumulator in the same group accepts them
        n = _size(rng)
        return (
            _labels(rng, K, n).astype(np.float64),
            _labels(rng, K, n).astype(np.float64),
        ), {}

    def _first_view(*names: str) -> View:
        def view(acc: Any) -> Any:
            for name in names:
                if hasattr(acc, name):
                    return getattr(acc, name)()
            raise AttributeError(f"none of the views {names} exists")

        return view

    @register("regression")
    def regression() -> Kind:
        return Kind(
            make=lambda: RegressionAccumulator(),
            make_batch=_regression,
            views={
                "num_samples": lambda acc: acc.num_samples,
                "mae": _first_view("mean_absolute_error", "mae"),
                "mse": _first_view("mean_squared_error", "mse"),
                "r2": _first_view("r2_score", "r2"),
            },
            invalid={
                "nan_prediction": Invalid(_spoil(_regression, 1, _value_at(np.nan)), "y_pred"),
                "infinite_target": Invalid(_spoil(_regression, 0, _value_at(np.inf)), "y_true"),
                "shorter_y_pred": Invalid(_spoil(_regression, 1, _shorter), "y_pred"),
                "negative_weight": Invalid(_spoil(_regression, 2, _value_at(-1.0)), "weights"),
            },
            extreme={
                # finite values whose squares or co-moments overflow float64
                "targets_1e200": lambda rng: (
                    (np.array([1e200, -1e200]), np.array([0.0, 0.0])),
                    {},
                ),
                "targets_1e308": lambda rng: (
                    (np.array([1e308, -1e308]), np.array([-1e308, 1e308])),
                    {},
                ),
                "weights_1e308": lambda rng: (
                    (np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.full(2, 1e308)),
                    {},
                ),
            },
            incompatible=(lambda: RegressionAccumulator(num_outputs=2),),
            partner=lambda: ConfusionAccumulator(K),
            group_batch=_regression_whole,
            float_rtol=1e-9,  # co-moments merged in another order (Chan et al.)
        )


try:  # metricstream/segmentation/: batches of whole label masks (B, H, W)
    from metricstream.segmentation import SegmentationAccumulator
except ImportError:  # pragma: no cover - before the family lands
    HAVE_SEGMENTATION = False
else:
    HAVE_SEGMENTATION = True

if HAVE_SEGMENTATION:

    def _masks(rng: np.random.Generator) -> Batch:
        n = _size(rng, 5)
        return (
            _labels(rng, K, n * 36).reshape(n, 6, 6),
            _labels(rng, K, n * 36).reshape(n, 6, 6),
        ), {}

    def _void_masks(rng: np.random.Generator) -> Batch:
        (y_true, y_pred), _ = _masks(rng)
        y_true = np.where(rng.random(y_true.shape) < 0.1, VOID, y_true).astype(np.int64)
        return (y_true, y_pred), {}

    @register("segmentation")
    def segmentation() -> Kind:
        return Kind(
            make=lambda: SegmentationAccumulator(K, ignore_index=VOID),
            make_batch=_void_masks,
            views={
                "num_images": lambda acc: acc.num_images,
                "num_pixels": lambda acc: acc.num_pixels,
                "matrix": lambda acc: acc.matrix,
                "iou_dataset": lambda acc: acc.iou("dataset"),
                "iou_image": lambda acc: acc.iou("image"),
                "dice_image": lambda acc: acc.dice("image"),
            },
            invalid={
                "label_beyond_k": Invalid(_spoil(_void_masks, 0, _value_at(K)), "y_true"),
                "negative_label": Invalid(_spoil(_void_masks, 0, _value_at(-1)), "y_true"),
                "no_image_axis": Invalid(
                    _spoil(_void_masks, 1, lambda a, rng: np.ascontiguousarray(a[0, 0])), "y_pred"
                ),
                "weights": Invalid(_spoil(_void_masks, 2, lambda a, rng: np.ones(1)), "weights"),
            },
            incompatible=(
                lambda: SegmentationAccumulator(K),
                lambda: SegmentationAccumulator(K, ignore_index=VOID, background=None),
            ),
            partner=lambda: ConfusionAccumulator(K, ignore_index=VOID),
        )


def group_of(name: str) -> AccumulatorGroup:
    """The kind and its ConfusionAccumulator partner, as one group."""
    spec = kind(name)
    partner = spec.partner() if spec.partner is not None else ConfusionAccumulator(K)
    return AccumulatorGroup(member=spec.make(), partner=partner)
