"""The CPU path as a torch custom operator, so that ``torch.compile`` traces ``update``.

Dynamo cannot trace into Numba, and a metric call in a compiled step would otherwise break the
graph at every step. ``metricstream::host_update`` wraps the family's CPU update (the Numba
kernels) as an opaque operator: its fake implementation does nothing (it returns nothing and
changes no tensor the graph sees), and its real one counts the batch into the accumulator,
found by its handle (``acc._handle``, registered weakly when the accumulator is made), an
integer attribute that the graph carries as a constant.

The operator declares that it mutates ``token``, a one-element tensor of the accumulator's, so
that no graph pass may drop or reorder it as a call without effects.
"""

from __future__ import annotations

from typing import Any

import torch

from .._core import devices as _devices

# The tensor the operator declares it mutates (one for all accumulators).
_token = torch.zeros(1, dtype=torch.int64)


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

    acc = _devices.by_handle(handle)
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
    host_update(_token, acc._handle, y_true, y_pred, weights)
