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


def rotated_grid(
    cases: Iterable[Any], count: int, options: Iterable[Any], turns: Iterable[Any]
) -> list[Any]:
    """``pytest.param(case, option, turn)`` for every triple: CI runs them all; by default the
    first ``count`` cases each meet every option, with the values of ``turns`` taken in turn
    (case ``i`` with option ``j`` meets ``turns[(i + j) % len(turns)]``), so that every pair of
    option and turn still occurs when there are at least as many cases as turns.

    For grids such as (stream, average, zero_division): a sample of the same kinds of case at a
    fraction of the cost.
    """
    options, turns = list(options), list(turns)
    return [
        pytest.param(
            case,
            option,
            turn,
            id=f"{case}-{option}-{turn}",
            marks=[] if i < count and (i + j) % len(turns) == k else [pytest.mark.slow],
        )
        for i, case in enumerate(cases)
        for j, option in enumerate(options)
        for k, turn in enumerate(turns)
    ]
