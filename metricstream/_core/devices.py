"""Which inputs count on their own device (torch tensors on a GPU, say) instead of the host.

Kept apart from :mod:`metricstream.device`, which imports torch: this check runs on every general
``update`` and must cost nothing for numpy input.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import numpy as np

#: Count CPU torch tensors on the device path too (set by ``metricstream.device.force_device_path``
#: or the environment variable ``METRICSTREAM_DEVICE_PATH=1``): proves the device path on
#: machines without a GPU.
force_cpu_tensors = os.environ.get("METRICSTREAM_DEVICE_PATH", "") == "1"


def on_device(value: Any) -> bool:
    """Whether ``value`` is a torch tensor that the device path counts (one on a device; any,
    when forced or while ``torch.compile`` traces, so that a compiled step stays one graph)."""
    if type(value) is np.ndarray:
        return False
    torch = sys.modules.get("torch")  # never imported here: a tensor means torch is loaded
    if torch is None or not isinstance(value, torch.Tensor):
        return False
    return not value.is_cpu or force_cpu_tensors or torch.compiler.is_compiling()


# Accumulators by handle, held weakly: a compiled step carries an accumulator's handle (a plain
# int attribute, which torch.compile reads as a constant) to the custom operator that counts
# CPU tensors with the Numba path (metricstream.device.compile), which finds it here.
_by_handle: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def register(accumulator: Any) -> int:
    """A handle for ``accumulator`` (its id, while it lives), for :func:`by_handle`."""
    handle = id(accumulator)
    _by_handle[handle] = accumulator
    return handle


def by_handle(handle: int) -> Any:
    """The live accumulator registered under ``handle``, or None."""
    return _by_handle.get(handle)
