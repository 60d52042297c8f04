"""The CPU path as a torch custom operator, so that ``torch.compile`` traces ``update``.

Dynamo cannot trace into Numba, and a metric call in a compiled step would otherwise break the
graph at every step. ``metricstream::host_update`` wraps the family's CPU update (the Numba
kernels) as an opaque operator: its fake implementation does nothing (it returns nothing and
changes no tensor the graph sees), and its real one counts the batch into the accumulator,
found by a handle, an integer the graph carries as a constant.

The operator declares that it mutates ``token``, a one-element tensor of the accumulator's, so
that no graph pass may drop or reorder it as a call without effects.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

# Accumulators by handle (their id), held weakly: a handle names a live accumulator only.
# Plain weak references in a dict (torch.compile traces these, not a WeakValueDictionary);
# the operator drops dead entries.
_handles: dict[int, weakref.ref[Any]] = {}


# The tensor the operator declares it mutates (one for all accumulators).
_token = torch.zeros(1, dtype=torch.int64)


@torch._dynamo.assume_constant_result
def _handle_of(acc: Any) -> int:
    """The accumulator's handle, registered when a compiled step is traced (this runs then, in
    Python, and the graph keeps the result as a constant): the operator finds the accumulator
    by it from the first compiled call on."""
    handle = id(acc)
    ref = _handles.get(handle)
    if ref is None or ref() is not acc:
        _handles[handle] = weakref.ref(acc)
    return handle


@torch.library.custom_op("metricstream::host_update", mutates_args=("token",))
def host_update(
    token: torch.Tensor,
    handle: int,
    y_true: torch.Tensor,
    y_pred: torch.Tensor,
    weights: torch.Tensor | None,
) -> None:
    """Count a batch of CPU tensors into the accumulator ``handle`` with its Numba path."""
    from . import host_update as count_on_host

    ref = _handles.get(handle)
    acc = None if ref is None else ref()
    if len(_handles) > 64:
        for key in [key for key, value in _handles.items() if value() is None]:
            _handles.pop(key, None)
    if acc is None:
        raise RuntimeError("the accumulator of this compiled update no longer exists.")
    count_on_host(acc, y_true, y_pred, weights)
    token += 1


@host_update.register_fake
def _host_update_fake(
    token: torch.Tensor,
    handle: int,
    y_true: torch.Tensor,
    y_pred: torch.Tensor,
    weights: torch.Tensor | None,
) -> None:
    return None


def host_update_op(acc: Any, y_true: Any, y_pred: Any, weights: Any) -> None:
    """Call the operator for ``acc`` (from a compiled step)."""
    host_update(_token, _handle_of(acc), y_true, y_pred, weights)
