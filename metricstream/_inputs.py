"""Turning user input into arrays the kernels can read, and wording errors about it.

Everything here is O(1) per call except where an input truly has to be copied (non-contiguous
N-d arrays, non-native byte order, float16); the usual case of contiguous numpy arrays or CPU
tensors is zero-copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

_NUMERIC_KINDS = frozenset("biuf")

# Element order in which equally shaped arrays are flattened together.
Order = Literal["C", "F"]


def as_array(value: Any, name: str) -> np.ndarray:
    """Return ``value`` as a numeric ndarray without copying when possible.

    Accepts numpy arrays, anything with ``__dlpack__`` or ``__array__`` (CPU torch tensors, JAX,
    CuPy after ``.get()``), scalars and (nested) lists. Raises ``TypeError`` for non-numeric data.
    """
    if isinstance(value, np.ndarray):
        return _numeric(value, name)
    # Autograd-tracked tensors refuse both protocols; the values are what we need.
    if getattr(value, "requires_grad", False) and callable(getattr(value, "detach", None)):
        value = value.detach()
    if hasattr(value, "__dlpack__"):
        try:
            exported = np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError, ValueError) as error:
            if not hasattr(value, "__array__"):
                raise TypeError(
                    f"`{name}` could not be read through DLPack ({error}); move it to host "
                    f"memory first (for a torch tensor: `.cpu()`)."
                ) from error
        else:
            return _numeric(exported, name)
    try:
        array = np.asarray(value)
    except (TypeError, RuntimeError) as error:
        raise TypeError(
            f"`{name}` must be an array-like of numbers; converting "
            f"{type(value).__name__} failed: {error}"
        ) from error
    except ValueError as error:
        raise ValueError(f"`{name}` is not a rectangular array: {error}") from error
    return _numeric(array, name)


def _numeric(array: np.ndarray, name: str) -> np.ndarray:
    """Check that ``array`` is numeric and give it a dtype the kernels compile for."""
    kind = array.dtype.kind
    if kind not in _NUMERIC_KINDS:
        raise TypeError(
            f"`{name}` must hold integers or floats, got dtype {array.dtype} "
            f"(first value: {_first_value(array)!r}); map class names to indices first."
        )
    if kind == "b":
        array = array.view(np.uint8)
    elif array.dtype == np.float16:
        array = array.astype(np.float32)
    elif not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _first_value(array: np.ndarray) -> Any:
    return array.flat[0] if array.size else None


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which costs about
# 1 µs per update, a third of the budget of a 256-label update. Nothing mutates a Batch.
@dataclass(slots=True)
class Batch:
    """A validated-by-shape batch ready for a kernel.

    For labels, ``y_true``, ``y_pred`` and ``weights`` are 1-D of equal length. For scores,
    ``y_true`` and ``weights`` are ``(A, R)`` and ``y_pred`` is ``(A, C, R)``. ``label_shape`` is
    the user's ``y_true`` shape (positions in messages are given in it).
    """

    y_true: np.ndarray
    y_pred: np.ndarray
    weights: np.ndarray | None
    label_shape: tuple[int, ...]
    is_scores: bool
    size: int
    originals: tuple[np.ndarray, np.ndarray, np.ndarray | None]
    order: Order = "C"


def _shared_order(arrays: list[np.ndarray]) -> Order:
    """The element order in which all ``arrays`` flatten without a copy, preferring C."""
    if arrays[0].ndim > 1 and all(
        a.flags.f_contiguous and not a.flags.c_contiguous for a in arrays
    ):
        return "F"
    return "C"


def prepare_batch(
    y_true: Any, y_pred: Any, weights: Any, num_classes: int, class_axis: int
) -> Batch:
    """Convert and shape-check one ``update`` call's inputs."""
    # Fast path for the training-loop case (1-D numpy labels that need no conversion): about
    # 1 µs of the 3 µs budget of a 256-label update goes to the general path below.
    if (weights is None and type(y_true) is np.ndarray and type(y_pred) is np.ndarray
            and y_true.ndim == 1 and y_pred.shape == y_true.shape
            and y_true.dtype.kind in "iu" and y_pred.dtype.kind in "iu"
            and y_true.dtype.isnative and y_pred.dtype.isnative):
        return Batch(y_true, y_pred, None, y_true.shape, False, y_true.size,
                     (y_true, y_pred, None), "C")
    true_array = as_array(y_true, "y_true")
    pred_array = as_array(y_pred, "y_pred")
    weight_array = None if weights is None else as_array(weights, "weights")
    label_shape = true_array.shape

    if weight_array is not None and weight_array.shape != label_shape:
        raise ValueError(
            f"`weights` has shape {weight_array.shape}, but `y_true` has shape {label_shape}; "
            f"give one weight per label."
        )

    if pred_array.shape == label_shape:
        arrays = [true_array, pred_array] + ([weight_array] if weight_array is not None else [])
        order = _shared_order(arrays)
        # 1-D arrays go to the kernel as they are, strided or not; N-d ones are flattened (a view
        # when contiguous).
        flat = [a if a.ndim == 1 else a.reshape(-1, order=order) for a in arrays]
        return Batch(
            y_true=flat[0],
            y_pred=flat[1],
            weights=flat[2] if weight_array is not None else None,
            label_shape=label_shape,
            is_scores=False,
            size=true_array.size,
            originals=(true_array, pred_array, weight_array),
            order=order,
        )

    if pred_array.ndim == true_array.ndim + 1:
        axis = class_axis if class_axis >= 0 else class_axis + pred_array.ndim
        if not 0 <= axis < pred_array.ndim:
            raise ValueError(
                f"`class_axis` is {class_axis}, but `y_pred` (scores) has only "
                f"{pred_array.ndim} dimensions."
            )
        without_classes = pred_array.shape[:axis] + pred_array.shape[axis + 1 :]
        if without_classes != label_shape:
            raise ValueError(
                f"`y_pred` looks like scores of shape {pred_array.shape} with classes on axis "
                f"{axis}, which leaves shape {without_classes}, but `y_true` has shape "
                f"{label_shape}; the shapes must match once the class axis is removed "
                f"(set `class_axis` if the classes are on another axis)."
            )
        if pred_array.shape[axis] != num_classes:
            raise ValueError(
                f"`y_pred` (scores) has {pred_array.shape[axis]} classes on axis {axis}, "
                f"but `num_classes` is {num_classes}."
            )
        if pred_array.dtype.kind == "b":
            raise TypeError("`y_pred` scores must be numbers, got a boolean array.")
        outer = int(np.prod(pred_array.shape[:axis], dtype=np.int64))
        inner = int(np.prod(pred_array.shape[axis + 1 :], dtype=np.int64))
        scores = np.ascontiguousarray(pred_array).reshape(outer, num_classes, inner)
        labels = np.ascontiguousarray(true_array).reshape(outer, inner)
        weights2d = None
        if weight_array is not None:
            weights2d = np.ascontiguousarray(weight_array).reshape(outer, inner)
        return Batch(
            y_true=labels,
            y_pred=scores,
            weights=weights2d,
            label_shape=label_shape,
            is_scores=True,
            size=true_array.size,
            originals=(true_array, pred_array, weight_array),
        )

    raise ValueError(
        f"`y_true` has shape {label_shape} and `y_pred` has shape {pred_array.shape}; `y_pred` "
        f"must have the same shape (labels) or one more dimension holding {num_classes} class "
        f"scores (logits/probabilities)."
    )


def _value_at(array: np.ndarray, flat_index: int, order: Order) -> tuple[Any, str]:
    if array.ndim == 0:
        return array.item(), "0"
    index = np.unravel_index(flat_index, array.shape, order=order)
    where = str(int(index[0])) if array.ndim == 1 else str(tuple(int(i) for i in index))
    return array[index].item(), where


def _label_problem(value: Any, num_classes: int, ignore_index: int | None) -> str:
    allowed = f"labels must be integers in [0, {num_classes})"
    if ignore_index is not None:
        allowed += f" or equal `ignore_index` ({ignore_index})"
    if isinstance(value, float):
        if np.isnan(value):
            return f"NaN is not a label; {allowed}"
        if 0 <= value < num_classes:
            return f"it is not a whole number; {allowed}"
    if value < 0:
        return f"negative labels are not allowed; {allowed}"
    return f"`num_classes` is {num_classes}; {allowed}"


def describe_label_error(name: str, array: np.ndarray, flat_index: int, num_classes: int,
                         ignore_index: int | None, order: Order = "C") -> ValueError:
    value, where = _value_at(array, flat_index, order)
    return ValueError(
        f"`{name}` holds label {value!r} at position {where}, but "
        f"{_label_problem(value, num_classes, ignore_index)}."
    )


def describe_weight_error(array: np.ndarray, flat_index: int, integral: bool,
                          order: Order = "C") -> ValueError:
    value, where = _value_at(array, flat_index, order)
    if not (value >= 0 and np.isfinite(value)):
        return ValueError(
            f"`weights` holds {value!r} at position {where}, but weights must be finite and "
            f"non-negative."
        )
    return ValueError(
        f"`weights` holds fractional value {value!r} at position {where}, but this accumulator "
        f"counts integers and will not truncate it; create it with `weighted=True` to "
        f"accumulate fractional weights in float64."
    )


def describe_score_error(array: np.ndarray, flat_index: int) -> ValueError:
    _, where = _value_at(array, flat_index, "C")
    return ValueError(
        f"`y_pred` (scores) holds NaN at position {where}; the predicted class of that sample "
        f"is undefined."
    )
