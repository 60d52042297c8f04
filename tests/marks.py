"""Parametrization helpers for the `slow` marker (see tests/conftest.py for when slow tests run)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest


def slow_beyond(
    values: Iterable[Any], count: int, ids: Callable[[Any], str] | None = None
) -> list[Any]:
    """``pytest.param`` for each value: the first ``count`` run by default, the rest are slow.

    Use it for randomized seeds and large grids: the default run keeps a sample that covers every
    kind of case, CI (``--run-slow`` or ``CI=true``) runs them all.
    """
    return [
        pytest.param(
            value,
            id=None if ids is None else ids(value),
            marks=[pytest.mark.slow] if i >= count else [],
        )
        for i, value in enumerate(values)
    ]
