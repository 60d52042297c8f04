"""The switches the device-path tests share: which path CPU torch tensors take, and eager mode.

``metricstream.device`` imports torch: it is imported inside the switches, so that collecting
this module (pytest's doctest collection does) needs no torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def device_path(forced: bool) -> Iterator[None]:
    """CPU tensors take the device path when ``forced``; eager mode off; both restored after."""
    from metricstream import device

    previous = device.force_device_path(forced)
    eager = device.eager(False)
    try:
        yield
    finally:
        device.force_device_path(previous)
        device.eager(eager)


@contextlib.contextmanager
def cpu_path() -> Iterator[None]:
    """CPU tensors take the Numba path (the reference) inside the block."""
    from metricstream import device

    previous = device.force_device_path(False)
    try:
        yield
    finally:
        device.force_device_path(previous)
