"""Counting torch tensors where they live: device-resident state, no host sync per update.

``Accumulator.update`` hands a torch tensor on a device other than the CPU (or any torch tensor
once :func:`force_device_path` is on) to :func:`update_on_device`. A family with a device kernel
(:class:`~metricstream.ConfusionAccumulator`) counts there with plain torch operations into
device tensors kept beside the host state; the host sees them only when a view, ``merge``,
``state_dict``, a save or a sync reads the state, with one device-to-host copy then. The other
families copy the batch to the host and count it there (one copy and one sync per update).

Validation does not wait for the device: a batch holding an invalid value (a label outside
``[0, K)``, a NaN score, a bad weight) is left out of the counts on the device and recorded, and
the next read raises a ``ValueError`` naming how many bad values were seen, the first one and its
batch; the state then holds every other batch. :func:`eager` raises at ``update`` instead, at
the cost of one sync per update.

Under ``torch.compile`` a step calling ``update`` traces without a graph break: device tensors
through the same torch operations, CPU tensors through the Numba kernels registered as the
custom operator ``metricstream::host_update`` (see :mod:`metricstream.device.compile`).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from .._core import devices as _devices
from . import compile as _compile

__all__ = ["eager", "force_device_path", "is_eager", "update_on_device"]

_eager = [os.environ.get("METRICSTREAM_DEVICE_EAGER", "") == "1"]
if os.environ.get("METRICSTREAM_DEVICE_PATH", "") == "1":
    _devices.force_cpu_tensors = True


def force_device_path(enabled: bool = True) -> bool:
    """Count CPU torch tensors on the device path too (as a GPU's would be); returns the
    previous setting. For tests and for checking the device path on a machine without a GPU;
    the environment variable ``METRICSTREAM_DEVICE_PATH=1`` sets it at import."""
    if not isinstance(enabled, bool):
        raise TypeError(f"`enabled` must be True or False, got {enabled!r}.")
    previous = bool(_devices.force_cpu_tensors)
    _devices.force_cpu_tensors = enabled
    return previous


def eager(enabled: bool = True) -> bool:
    """Raise a device batch's bad value at ``update`` (one sync per update) instead of at the
    next read; returns the previous setting. For debugging; the environment variable
    ``METRICSTREAM_DEVICE_EAGER=1`` sets it at import. Inside a compiled step the check waits
    for the next read, as without it."""
    if not isinstance(enabled, bool):
        raise TypeError(f"`enabled` must be True or False, got {enabled!r}.")
    previous = _eager[0]
    _eager[0] = enabled
    return previous


def is_eager() -> bool:
    """Whether :func:`eager` is on."""
    return _eager[0]


def _device_of(name: str, value: Any) -> torch.device | None:
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            raise ValueError(
                f"`{name}` is a tensor on the 'meta' device, which holds shapes but no values; "
                f"metricstream counts values, so give it a tensor on a real device (e.g. "
                f"materialise the model with `to_empty(device=...)` and run it)."
            )
        return value.device
    return None


def _tensors(acc: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The batch's arguments as tensors on ``y_true``'s device (detached), checked."""
    names = ["y_true", "y_pred", "weights"]
    values = list(args) + [kwargs.pop(name) for name in names[len(args) :] if name in kwargs]
    if kwargs:
        raise TypeError(
            f"{type(acc).__name__}.update() on the device path takes y_true, y_pred and "
            f"weights; got the keyword argument(s) {sorted(kwargs)}."
        )
    if not 2 <= len(values) <= 3:
        raise TypeError(
            f"{type(acc).__name__}.update() takes y_true, y_pred and optional weights, got "
            f"{len(values)} arguments."
        )
    device = _device_of("y_true", values[0])
    assert device is not None
    tensors: list[Any] = []
    for name, value in zip(names, values, strict=False):
        if value is None:
            tensors.append(None)
            continue
        where = _device_of(name, value)
        if where is None:
            value = torch.as_tensor(value, device=device)
        elif where != device:
            raise ValueError(
                f"`{name}` is on {where}, but `y_true` is on {device}; give every tensor of a "
                f"batch on one device."
            )
        tensors.append(value.detach())
    if len(tensors) == 2:
        tensors.append(None)
    return tensors


# The families that count on the device: the accumulator's exact type (a subclass may change
# what an update means) -> the module of this package whose ``count(acc, y_true, y_pred,
# weights)`` counts one batch of tensors on their device. The others copy to the host. Looked
# up by the class's qualified name, so that a compiled step reads only constants.
_FAMILY_MODULES = {
    "metricstream.confusion.accumulator.ConfusionAccumulator": "confusion",
    "metricstream.scores.accumulator.ScoreAccumulator": "scores",
    "metricstream.multilabel.accumulator.MultilabelAccumulator": "multilabel",
    "metricstream.regression.accumulator.RegressionAccumulator": "regression",
}
_families: dict[str, Any] = {}
for _name, _module in _FAMILY_MODULES.items():
    try:
        _families[_name] = importlib.import_module(f"{__name__}.{_module}")
    except ModuleNotFoundError as _error:  # a family whose device module is not built
        if _error.name != f"{__name__}.{_module}":
            raise


def _family_of(acc: Any) -> Any:
    """The device module that counts ``acc``'s batches on their device, or None."""
    kind = type(acc)
    return _families.get(f"{kind.__module__}.{kind.__qualname__}")


def update_on_device(acc: Any, *args: Any, **kwargs: Any) -> None:
    """Count one batch of torch tensors into ``acc`` on their device (see the module doc)."""
    for name, value in zip(("y_true", "y_pred", "weights"), args, strict=False):
        _device_of(name, value)  # the meta device is refused by name
    for name, value in kwargs.items():
        _device_of(name, value)
    on_cpu = getattr(getattr(args[0], "device", None), "type", None) == "cpu" if args else True
    family = _family_of(acc)
    if family is not None and (not on_cpu or _devices.force_cpu_tensors):
        y_true, y_pred, weights = _tensors(acc, args, dict(kwargs))
        family.count(acc, y_true, y_pred, weights)
        if _eager[0] and not torch.compiler.is_compiling() and acc._device is not None:
            acc._device.check_now()
        return
    if torch.compiler.is_compiling() and not kwargs and 2 <= len(args) <= 3:
        host = [value.detach() if isinstance(value, torch.Tensor) else value for value in args]
        if all(isinstance(value, torch.Tensor) for value in host[:2]):
            weights = host[2] if len(host) == 3 else None
            _compile.host_update_op(acc, host[0], host[1], weights)
            return
    host_update(acc, *args, **kwargs)


def host_update(acc: Any, *args: Any, **kwargs: Any) -> None:
    """Count a batch on the host through the family's Numba path: device tensors are copied
    to the host first (one copy each, which waits for the device)."""

    def to_host(value: Any) -> Any:
        return value.detach().cpu() if isinstance(value, torch.Tensor) else value

    batch = acc._prepare(
        *(to_host(value) for value in args), **{k: to_host(v) for k, v in kwargs.items()}
    )
    with acc._lock:
        acc._count_finite(batch)
        acc._changed()
