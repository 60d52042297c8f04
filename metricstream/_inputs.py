"""Turning user input into arrays the kernels can read, and wording errors about it.

Everything here is O(1) per call except where an input truly has to be copied (non-contiguous
N-d arrays, non-native byte order, half-precision labels); the usual case of contiguous numpy
arrays or CPU tensors is zero-copy.

Half-precision scores (numpy float16, torch float16 and bfloat16) are handed to the kernels as
int16 views of their bits, with a flag saying which format they hold: numpy has no bfloat16,
and reading the bits avoids an N-sized float32 copy. Only half-precision *labels*, and scores in
the general ``(A, C, R)`` layout (classes on a middle axis), are converted to float32 (a copy).

CPU torch tensors are read with ``Tensor.numpy()`` (about 1 µs cheaper than ``np.from_dlpack``
per array, which matters for 256-label training-loop batches); tensors that track gradients are
read through ``detach()``, which shares memory and copies nothing. The small-batch path of
``update`` reads plain CPU tensors through their data pointers instead (about 0.3 µs per tensor
against 0.7 µs for ``Tensor.numpy()``; see ``_dispatch.count_small``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._core import flags as _flags  # the kernels' flag bits, without importing Numba

_NUMERIC_KINDS = frozenset("biuf")

# Element order in which equally shaped arrays are flattened together.
Order = Literal["C", "F"]

# What a Batch asks the kernels to do.
LABELS = 0  # y_true, y_pred: flat labels of equal length
ROWS = 1  # y_pred: C-contiguous (N, C) scores, one row per label
GENERAL = 2  # y_pred: (A, C, R) scores, classes on the middle axis
THRESHOLD = 3  # y_pred: flat binary scores, class 1 where score >= threshold

# Marks of _convert: the array holds float16/bfloat16 bits (the kernels' flags), or was bool.
_HALF = _flags.HALF
_BFLOAT16 = _flags.BFLOAT16
_BOOL = 1 << 10


def as_array(value: Any, name: str) -> np.ndarray:
    """Return ``value`` as a numeric ndarray without copying when possible.

    Accepts numpy arrays, anything with ``__dlpack__`` or ``__array__`` (CPU torch tensors, JAX,
    CuPy after ``.get()``), Arrow arrays and chunked arrays (through :mod:`metricstream.arrow`:
    no copy for one null-free numeric chunk; nulls are refused), scalars and (nested) lists.
    Raises ``TypeError`` for non-numeric data. Booleans are read as uint8 and float16 as
    float32; a torch bfloat16 tensor is converted to float32 (a copy: numpy has no bfloat16).
    """
    array, mark = _convert(value, name)
    if mark & (_HALF | _BFLOAT16):
        return _half_to_float32(array, mark)
    return array


# ``torch.Tensor`` and ``torch.bfloat16``, learnt from the first tensor seen (metricstream never
# imports torch itself), for the training-loop fast path of ``prepare_batch``.
_tensor_type: list[Any] = [None, None]
# The same list, read by the small-batch path of ``update`` (see ``_dispatch.count_small``, which
# reads CPU tensors through their data pointers: ``Tensor.numpy()`` costs 0.7 µs per tensor, as
# much as counting 256 labels).
TENSOR_TYPES = _tensor_type
# torch dtype -> (numpy dtype, mark) of the tensors the small-batch path reads (float16 and
# bfloat16 as int16 bits, marked ``_HALF``/``_BFLOAT16``).
_torch_dtypes: dict[Any, tuple[np.dtype, int]] = {}


def _learn_torch(value: Any) -> None:
    """Remember torch's tensor type and dtypes when ``value`` is a ``torch.Tensor``."""
    torch = sys.modules.get("torch")
    if torch is not None and type(value) is torch.Tensor:
        for name in ("int8", "uint8", "int16", "int32", "int64", "float32", "float64"):
            _torch_dtypes[getattr(torch, name)] = (np.dtype(name), 0)
        _torch_dtypes[torch.float16] = (np.dtype(np.int16), _HALF)
        _torch_dtypes[torch.bfloat16] = (np.dtype(np.int16), _BFLOAT16)
        _tensor_type[:] = [torch.Tensor, torch.bfloat16]


def _tensor_values(value: Any) -> Any:
    """A CPU ``torch.Tensor`` as the ndarray sharing its memory (``Tensor.numpy()``, through
    ``detach()`` for tensors that track gradients); anything else is returned as it is."""
    if value.dtype is _tensor_type[1]:
        return value  # bfloat16: numpy has no such dtype; the general path reads the bits
    if value.requires_grad:
        value = value.detach()
    try:
        return value.numpy()
    except (TypeError, RuntimeError):
        return value  # another device, a conjugate view...: the general path explains


def learn_torch(value: Any) -> bool:
    """Remember torch's tensor type (in ``TENSOR_TYPES``) and dtypes when ``value`` is the first
    ``torch.Tensor`` seen; whether the tensor type is known now."""
    if _tensor_type[0] is None and type(value).__name__ == "Tensor":
        _learn_torch(value)
    return _tensor_type[0] is not None


def tensor_dtype(dtype: Any) -> tuple[np.dtype, int] | None:
    """The numpy dtype in which the kernels read the elements of a torch ``dtype``, and a mark:
    float16 and bfloat16 as int16 bits marked ``_flags.HALF`` or ``BFLOAT16``, the other
    numeric dtypes as themselves (mark 0). None for dtypes the kernels do not read (bool,
    complex, quantized...)."""
    return _torch_dtypes.get(dtype)


def _torch_tensor_array(value: Any, name: str) -> tuple[np.ndarray, int] | None:
    """A CPU torch tensor as an ndarray sharing its memory, or None to take the generic path."""
    if _tensor_type[0] is None and type(value).__name__ == "Tensor":
        _learn_torch(value)
    if value.requires_grad:
        value = value.detach()  # shares memory; the values are what we need
    if value.is_neg():
        # A negative view (the imaginary part of a conjugate): ``Tensor.numpy()`` refuses it and
        # DLPack would export the values without their sign. Resolving it is a copy.
        value = value.resolve_neg()
    torch = sys.modules.get("torch")
    mark = 0
    if torch is not None and value.dtype in (torch.bfloat16, torch.float16):
        mark = _BFLOAT16 if value.dtype == torch.bfloat16 else _HALF
        value = value.view(torch.int16)
    try:
        array = value.numpy()
    except (TypeError, RuntimeError):
        # Another device, a conjugate or negative view: the protocols below say what to do.
        return None
    if mark:
        return array, mark
    return _numeric(array, name)


def _convert(value: Any, name: str) -> tuple[np.ndarray, int]:
    """``value`` as a numeric ndarray and a mark (0, ``_HALF``, ``_BFLOAT16`` or ``_BOOL``)."""
    if isinstance(value, np.ndarray):
        return _numeric(value, name)
    cls = type(value)
    if cls.__module__.startswith("torch") and hasattr(value, "requires_grad"):
        converted = _torch_tensor_array(value, name)
        if converted is not None:
            return converted
    if not cls.__module__.startswith("pandas") and (
        hasattr(cls, "__arrow_c_array__") or hasattr(cls, "__arrow_c_stream__")
    ):
        # Arrow arrays and chunked arrays (pyarrow, Polars Series...): read by the Arrow module,
        # imported only now, so that `import metricstream` never imports pyarrow. It refuses
        # nulls and names strings; None means pyarrow is absent (the protocols below try).
        from . import arrow

        column = arrow.column_as_numpy(value, name)
        if column is not None:
            return _numeric(column, name)
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


def _numeric(array: np.ndarray, name: str) -> tuple[np.ndarray, int]:
    """Check that ``array`` is numeric and give it a dtype the kernels compile for."""
    kind = array.dtype.kind
    if kind not in _NUMERIC_KINDS:
        if kind == "O" and name == "weights":
            return _numeric_objects(array, name), 0
        raise TypeError(
            f"`{name}` must hold integers or floats, got dtype {array.dtype} "
            f"(first value: {_first_value(array)!r}); map class names to indices first."
        )
    if kind == "b":
        return array.view(np.uint8), _BOOL
    if array.dtype == np.float16:
        return array.view(np.int16), _HALF
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return kernel_view(array), 0


class _SharedMemory:
    """A read-only array's memory, offered to numpy as writable (see :func:`kernel_view`)."""

    __slots__ = ("array", "__array_interface__")

    def __init__(self, array: np.ndarray) -> None:
        self.array = array  # keeps the memory alive as long as the view
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], False)
        self.__array_interface__ = interface


def kernel_view(array: np.ndarray) -> np.ndarray:
    """``array`` itself, or for a read-only array a writable view of the same memory (no copy).

    Numba types a read-only array as a type of its own, so each kernel would compile a second
    specialisation for Arrow columns, memory-mapped files or ``np.frombuffer`` data, seconds of
    CPU each, that ``python -m metricstream warm-up`` does not cover. The kernels and the code
    around them only read their inputs, so one specialisation serves both.
    """
    if array.flags.writeable:
        return array
    return np.asarray(_SharedMemory(array))


def _numeric_objects(array: np.ndarray, name: str) -> np.ndarray:
    """An object array of numbers (e.g. from pandas) as the numeric array numpy infers for it,
    as scikit-learn accepts ``sample_weight`` of object dtype."""
    try:
        inferred = np.array(array.tolist())
    except (TypeError, ValueError):
        inferred = array
    if inferred.dtype.kind not in "iuf" or inferred.shape != array.shape:
        raise TypeError(
            f"`{name}` must hold numbers, got dtype object with first value "
            f"{_first_value(array)!r}; give one number per label."
        )
    return inferred


def _half_to_float32(bits: np.ndarray, mark: int) -> np.ndarray:
    """float32 values of an int16 array holding float16 or bfloat16 bits (an exact copy)."""
    if mark & _HALF:
        return bits.view(np.float16).astype(np.float32)
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _first_value(array: np.ndarray) -> Any:
    return array.flat[0] if array.size else None


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which costs about
# 1 µs per update, a third of the budget of a 256-label update. Nothing mutates a Batch.
@dataclass(slots=True)
class Batch:
    """A validated-by-shape batch ready for a kernel.

    ``kind`` says which kernel reads it. For ``LABELS`` and ``THRESHOLD``, ``y_true``,
    ``y_pred`` and ``weights`` are 1-D of equal length; for ``ROWS`` ``y_pred`` is ``(N, C)``; for
    ``GENERAL`` ``y_true`` and ``weights`` are ``(A, R)`` and ``y_pred`` is ``(A, C, R)``.
    ``label_shape`` is the user's ``y_true`` shape (positions in messages are given in it).
    ``flags`` carries ``_flags.HALF``/``BFLOAT16`` when int16 scores hold half-precision bits;
    ``threshold`` is the float64 threshold (for half-precision scores, the key of the smallest
    value >= the threshold).
    """

    y_true: np.ndarray
    y_pred: np.ndarray
    weights: np.ndarray | None
    label_shape: tuple[int, ...]
    is_scores: bool
    size: int
    originals: tuple[np.ndarray, np.ndarray, np.ndarray | None]
    order: Order = "C"
    kind: int = LABELS
    flags: int = 0
    threshold: float = 0.0


def _shared_order(arrays: list[np.ndarray]) -> Order:
    """The element order in which all ``arrays`` flatten without a copy, preferring C."""
    if arrays[0].ndim > 1 and all(
        a.flags.f_contiguous and not a.flags.c_contiguous for a in arrays
    ):
        return "F"
    return "C"


def prepare_batch(
    y_true: Any,
    y_pred: Any,
    weights: Any,
    num_classes: int,
    class_axis: int,
    threshold: float | None = None,
) -> Batch:
    """Convert and shape-check one ``update`` call's inputs.

    With ``threshold`` (binary tasks, ``num_classes == 2``), float scores of ``y_true``'s shape
    (or ``(N, 1)`` for ``(N,)`` labels) predict class 1 where ``score >= threshold``, else 0;
    integer ``y_pred`` is still read as labels.
    """
    # Fast paths for the training-loop cases: 1-D numpy labels, and (N, C) logits next to 1-D
    # labels, that need no conversion (the general path below costs about 1 µs more). CPU
    # tensors become ndarrays first (``Tensor.numpy()`` is the cheapest way: 0.7 µs per tensor,
    # ``np.from_dlpack`` about 1.5 µs).
    tensor = _tensor_type[0]
    if tensor is not None:
        if type(y_true) is tensor:
            y_true = _tensor_values(y_true)
        if type(y_pred) is tensor:
            y_pred = _tensor_values(y_pred)
    if (
        weights is None
        and type(y_true) is np.ndarray
        and type(y_pred) is np.ndarray
        and y_true.ndim == 1
        and y_true.dtype.kind in "iu"
        and y_true.dtype.isnative
    ):
        y_true, y_pred = kernel_view(y_true), kernel_view(y_pred)
        if y_pred.shape == y_true.shape and y_pred.dtype.kind in "iu" and y_pred.dtype.isnative:
            return Batch(
                y_true, y_pred, None, y_true.shape, False, y_true.size, (y_true, y_pred, None), "C"
            )
        if (
            threshold is None
            and y_pred.ndim == 2
            and y_pred.shape[0] == y_true.shape[0]
            and y_pred.shape[1] == num_classes
            and (class_axis == 1 or class_axis == -1)
            and (y_pred.dtype == np.float32 or y_pred.dtype == np.float64)
            and y_pred.flags.c_contiguous
        ):
            return Batch(
                y_true,
                y_pred,
                None,
                y_true.shape,
                True,
                y_true.size,
                (y_true, y_pred, None),
                "C",
                ROWS,
            )
    true_array, true_mark = _convert(y_true, "y_true")
    pred_array, pred_mark = _convert(y_pred, "y_pred")
    weight_array = None
    if weights is not None:
        weight_array, weight_mark = _convert(weights, "weights")
        if weight_mark & (_HALF | _BFLOAT16):
            weight_array = _half_to_float32(weight_array, weight_mark)
    if true_mark & (_HALF | _BFLOAT16):
        true_array = _half_to_float32(true_array, true_mark)
    label_shape = true_array.shape

    if weight_array is not None and weight_array.shape != label_shape:
        raise ValueError(
            f"`weights` has shape {weight_array.shape}, but `y_true` has shape {label_shape}; "
            f"give one weight per label."
        )

    if (
        threshold is not None
        and (pred_array.dtype.kind == "f" or pred_mark & (_HALF | _BFLOAT16))
        and pred_array.shape in (label_shape, label_shape + (1,))
    ):
        return _threshold_batch(
            true_array, pred_array, pred_mark, weight_array, num_classes, threshold
        )

    if pred_array.shape == label_shape:
        if pred_mark & (_HALF | _BFLOAT16):
            pred_array = _half_to_float32(pred_array, pred_mark)
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
        if pred_mark & _BOOL:
            raise TypeError(
                f"`y_pred` scores must be numbers, got a boolean array of shape "
                f"{pred_array.shape}; give logits or probabilities (or labels of `y_true`'s "
                f"shape)."
            )
        if pred_array.ndim == 2 and axis == 1:
            # (N, C) rows: no copy for contiguous scores, half-precision bits included.
            return Batch(
                y_true=true_array,
                y_pred=np.ascontiguousarray(pred_array),
                weights=weight_array,
                label_shape=label_shape,
                is_scores=True,
                size=true_array.size,
                originals=(true_array, pred_array, weight_array),
                kind=ROWS,
                flags=pred_mark & (_HALF | _BFLOAT16),
            )
        if pred_mark & (_HALF | _BFLOAT16):
            pred_array = _half_to_float32(pred_array, pred_mark)
        outer = 1
        for extent in pred_array.shape[:axis]:
            outer *= extent
        inner = 1
        for extent in pred_array.shape[axis + 1 :]:
            inner *= extent
        scores = np.ascontiguousarray(pred_array).reshape(outer, num_classes, inner)
        labels = np.ascontiguousarray(true_array).reshape(outer, inner)
        weights2d = None
        if weight_array is not None:
            weights2d = np.ascontiguousarray(weight_array).reshape(outer, inner)
        if inner == 1:
            return Batch(
                y_true=labels.reshape(-1),
                y_pred=scores.reshape(outer, num_classes),
                weights=None if weights2d is None else weights2d.reshape(-1),
                label_shape=label_shape,
                is_scores=True,
                size=true_array.size,
                originals=(true_array, pred_array, weight_array),
                kind=ROWS,
            )
        return Batch(
            y_true=labels,
            y_pred=scores,
            weights=weights2d,
            label_shape=label_shape,
            is_scores=True,
            size=true_array.size,
            originals=(true_array, pred_array, weight_array),
            kind=GENERAL,
        )

    raise ValueError(_shape_message(label_shape, pred_array, true_array, num_classes))


def _shape_message(
    label_shape: tuple[int, ...], pred_array: np.ndarray, true_array: np.ndarray, num_classes: int
) -> str:
    message = (
        f"`y_true` has shape {label_shape} and `y_pred` has shape {pred_array.shape}; `y_pred` "
        f"must have the same shape (labels) or one more dimension holding {num_classes} class "
        f"scores (logits/probabilities)."
    )
    one_hot = one_hot_hint(true_array, num_classes)
    if true_array.ndim == pred_array.ndim + 1 and one_hot:
        message += one_hot
    elif true_array.ndim == pred_array.ndim + 1 and num_classes in true_array.shape:
        message += (
            f" `y_true` looks like scores ({num_classes} classes on an axis) and `y_pred` like "
            f"labels: were the arguments swapped? The order is `update(y_true, y_pred)`; "
            f"torchmetrics' `update(preds, target)` takes them the other way round."
        )
    elif true_array.ndim == pred_array.ndim + 1:
        message += (
            " `y_true` has one more dimension than `y_pred`: if `y_true` holds scores, the "
            "arguments are swapped (the order is `update(y_true, y_pred)`, torchmetrics' "
            "`update(preds, target)` is the other way round)."
        )
    return message


# Keys of every float16 / bfloat16 value, sorted, for turning a float64 threshold into the key
# of the smallest representable value >= it (built on first use: 65,536 entries each).
_half_tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _half_table(mark: int) -> tuple[np.ndarray, np.ndarray]:
    table = _half_tables.get(mark)
    if table is None:
        bits = np.arange(-(2**15), 2**15, dtype=np.int64).astype(np.int16)
        with np.errstate(invalid="ignore"):  # the NaN bit patterns
            values = _half_to_float32(bits, mark).astype(np.float64)
        key = bits.astype(np.int64) ^ ((bits.astype(np.int64) >> 15) & 0x7FFF)
        key = key - (key >> 15)
        keep = ~np.isnan(values)
        order = np.argsort(key[keep], kind="stable")
        table = (values[keep][order], key[keep][order])
        _half_tables[mark] = table
    return table


def _threshold_key(threshold: float, mark: int) -> float:
    """The threshold for the kernel: itself for float scores; for half-precision bits, the key
    of the smallest representable value >= ``threshold`` (so that comparing keys is exactly
    ``score >= threshold``)."""
    if not mark & (_HALF | _BFLOAT16):
        return threshold
    values, keys = _half_table(mark)
    index = int(np.searchsorted(values, threshold, side="left"))
    if index == values.size:
        return float(keys[-1] + 1)  # above +inf: nothing reaches it
    return float(keys[index])


def _threshold_batch(
    true_array: np.ndarray,
    pred_array: np.ndarray,
    pred_mark: int,
    weight_array: np.ndarray | None,
    num_classes: int,
    threshold: float,
) -> Batch:
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(
        threshold, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"`threshold` must be a real number, got {threshold!r}.")
    threshold = float(threshold)
    if threshold != threshold:
        raise ValueError(
            "`threshold` is NaN; give a number (e.g. 0.5 for probabilities, 0.0 for logits)."
        )
    if num_classes != 2:
        raise ValueError(
            f"`threshold` applies to binary tasks, but `num_classes` is {num_classes}; "
            f"give scores with one column per class instead."
        )
    label_shape = true_array.shape
    scores = pred_array
    if scores.shape != label_shape:  # (N, 1): one score column
        scores = scores.reshape(label_shape)
    arrays = [true_array, scores] + ([weight_array] if weight_array is not None else [])
    order = _shared_order(arrays)
    flat = [a if a.ndim == 1 else a.reshape(-1, order=order) for a in arrays]
    return Batch(
        y_true=flat[0],
        y_pred=flat[1],
        weights=flat[2] if weight_array is not None else None,
        label_shape=label_shape,
        is_scores=True,
        size=true_array.size,
        originals=(true_array, pred_array, weight_array),
        order=order,
        kind=THRESHOLD,
        flags=pred_mark & (_HALF | _BFLOAT16),
        threshold=_threshold_key(threshold, pred_mark),
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


# The arguments as each family's ``update`` takes them, for the swap hint.
_SWAP = (
    " If `y_true` holds scores, the arguments are swapped: the order is "
    "`update(y_true, y_pred)` (torchmetrics' `update(preds, target)` is the other way round)."
)


def one_hot_hint(true_array: Any, num_classes: int) -> str:
    """A hint when ``true_array`` is one-hot: 0/1 with exactly one 1 on a last axis of
    ``num_classes`` entries ("" otherwise). Only for messages: it reads the whole array."""
    array = np.asarray(true_array)
    if array.ndim < 2 or array.shape[-1] != num_classes or array.size == 0:
        return ""
    if array.dtype.kind not in "biuf":
        return ""
    with np.errstate(invalid="ignore"):
        if not np.isin(array, (0, 1)).all() or not (array.sum(axis=-1) == 1).all():
            return ""
    return (
        f" `y_true` looks one-hot (one 1 in each row of {num_classes} columns): give class "
        f"indices instead, e.g. `y_true.argmax(axis=-1)` (`y_pred` may stay scores of "
        f"{num_classes} columns)."
    )


def label_hint(
    name: str,
    value: Any,
    num_classes: int,
    ignore_index: int | None,
    *,
    true_array: Any = None,
    pred_array: Any = None,
) -> str:
    """What most likely went wrong when ``name`` (``"y_true"`` or ``"y_pred"``) holds the
    invalid label ``value``, for every family's messages ("" when nothing fits):

    * NaN: a missing value (a pandas nullable ``Int64`` column reads its missing entries as NaN),
      not scores: drop or fill it;
    * a negative ``y_true`` label while no ``ignore_index`` is set: that value as
      ``ignore_index`` (-100 is PyTorch's ``CrossEntropyLoss`` default);
    * a ``y_pred`` score next to a one-hot ``y_true`` of the same shape: class indices;
    * a fractional ``y_true``: the arguments swapped.

    ``true_array``/``pred_array``: the user's arrays, when known (read only here, on the error
    path).
    """
    if isinstance(value, (float, np.floating)) and np.isnan(value):
        return (
            f" A NaN in `{name}` is usually a missing value (a pandas nullable column such as "
            f"Int64 gives NaN for <NA>): drop those samples (e.g. `.dropna()` on both columns) "
            f"or fill them with a value given as `ignore_index`."
        )
    if name == "y_pred" and true_array is not None:
        one_hot = one_hot_hint(true_array, num_classes)
        shape = np.shape(pred_array) if pred_array is not None else None
        if one_hot and (shape is None or shape == np.shape(true_array)):
            return one_hot
    whole = float(value).is_integer() if np.isfinite(value) else False
    if name == "y_true" and whole and value < 0 and ignore_index is None:
        label = int(value)
        if label == -100:
            return (
                " -100 marks ignored targets in PyTorch (CrossEntropyLoss' default "
                "`ignore_index`): to leave those entries out, create the accumulator with "
                "`ignore_index=-100`."
            )
        return (
            f" If {label} marks entries to leave out, create the accumulator with "
            f"`ignore_index={label}`."
        )
    if name == "y_true" and not whole and np.isfinite(value):
        return _SWAP
    return ""


def describe_label_error(
    name: str,
    array: np.ndarray,
    flat_index: int,
    num_classes: int,
    ignore_index: int | None,
    order: Order = "C",
    *,
    true_array: Any = None,
    pred_array: Any = None,
) -> ValueError:
    value, where = _value_at(array, flat_index, order)
    message = (
        f"`{name}` holds label {value!r} at position {where}, but "
        f"{_label_problem(value, num_classes, ignore_index)}."
    )
    hint = label_hint(
        name, value, num_classes, ignore_index, true_array=true_array, pred_array=pred_array
    )
    if hint:
        message += hint
    elif name == "y_pred" and num_classes == 2 and isinstance(value, float):
        if not float(value).is_integer() or value < 0:
            message += (
                " For binary scores or probabilities, give a `threshold` (or one "
                "column of scores per class)."
            )
    return ValueError(message)


def describe_weight_error(
    array: np.ndarray, flat_index: int, integral: bool, order: Order = "C"
) -> ValueError:
    value, where = _value_at(array, flat_index, order)
    if not (value >= 0 and np.isfinite(value)):
        return ValueError(
            f"`weights` holds {value!r} at position {where}, but weights must be finite and "
            f"non-negative."
        )
    if integral and value >= _flags.MAX_INTEGRAL_WEIGHT and float(value).is_integer():
        limit = "2^63" if isinstance(value, int) else f"{_flags.MAX_INTEGRAL_WEIGHT:.2g}"
        return ValueError(
            f"`weights` holds {value!r} at position {where}, but this accumulator counts in "
            f"int64 and takes whole weights below {limit} only; create it with "
            f"`weighted=True` to accumulate weights in float64."
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
