"""How view methods come to exist, for every family: declared in the class body.

A family whose views are the functions of :mod:`metricstream.metrics` applied to its state
declares each one as ``f1 = MetricView(metrics.f1, make_method)``: the class body then lists every
public method (type checkers, ``dir()`` and IDEs see them), and each method carries the function's
signature less its first argument, and its docstring, so ``help(acc.f1)`` and
``help(metrics.f1)`` cannot drift apart. ``make_method`` is the family's own wrapper (it routes the
call through the accumulator's view cache and translates class names, say).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["MetricView"]

P = ParamSpec("P")
R = TypeVar("R")


class MetricView(Generic[P, R]):
    """A method made from ``function(state, *args, **kwargs)``: typed as ``function`` less its
    first argument.

    Args:
        function: the metric, taking the family's view source first.
        make_method: builds the plain function ``method(self, *args, **kwargs)`` that is bound to
            each instance.
    """

    def __init__(
        self,
        function: Callable[Concatenate[Any, P], R],
        make_method: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> None:
        self.function = function
        self._method = make_method(function)

    def __set_name__(self, owner: type, name: str) -> None:
        self._method.__name__ = name
        self._method.__qualname__ = f"{owner.__qualname__}.{name}"

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Callable[..., R]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Callable[..., Any]:
        if instance is None:
            return self._method
        return types.MethodType(self._method, instance)
