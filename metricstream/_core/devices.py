"""Which inputs count on their own device (torch tensors on a GPU, say) instead of the host.

Kept apart from :mod:`metricstream.device`, which imports torch: this check runs on every general
``update`` and must cost nothing for numpy input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Count CPU torch tensors on the device path too (set by ``metricstream.device.force_device_path``
#: or the environment variable ``METRICSTREAM_DEVICE_PATH=1``): proves the device path on
#: machines without a GPU.
force_cpu_tensors = False


def on_device(value: Any) -> bool:
    """Whether ``value`` is a torch tensor that the device path counts."""
    if type(value) is np.ndarray or isinstance(value, (list, tuple, int, float)):
        return False
    if type(value).__module__.partition(".")[0] != "torch":
        return False
    device = getattr(value, "device", None)
    kind = getattr(device, "type", None)
    if kind is None:
        return False
    return kind != "cpu" or force_cpu_tensors
