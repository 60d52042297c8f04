"""Recipes: how an engine (Dask, Spark, Ray) rebuilds an empty twin of a template in a task.

A recipe is ``("single", class, config)`` for one accumulator and ``("group", ((name, class,
config), ...))`` for a group: a few hundred bytes, where a pickled empty state would carry every
zero of the arrays to every task.
"""

from __future__ import annotations

from typing import Any

Recipe = tuple[Any, ...]


def recipe_of(template: Any, where: str = "in a task", remedy: str = "") -> Recipe:
    """The recipe of an empty accumulator or group, checked by building it once here.

    ``where`` says where a template that cannot be rebuilt would otherwise fail; ``remedy`` is
    added to the message for a template that already holds counts.
    """
    from ..base import Accumulator, AccumulatorGroup

    if isinstance(template, AccumulatorGroup):
        members = template.members()
        recipe: Recipe = (
            "group",
            tuple((name, type(member), member.config()) for name, member in members.items()),
        )
    elif isinstance(template, Accumulator):
        members = {"": template}
        recipe = ("single", type(template), template.config())
    else:
        raise TypeError(
            f"`template` must be an accumulator or an AccumulatorGroup, got "
            f"{type(template).__name__}."
        )
    for name, member in members.items():
        if any(array.any() for array in member.state_arrays().values()):
            part = f" (member {name!r})" if name else ""
            raise ValueError(
                f"`template`{part} already holds counts; pass an empty accumulator (e.g. "
                f"`acc.copy().reset()`) and merge the result into yours{remedy}."
            )
    try:  # every task rebuilds the template this way: fail here, not there
        build(recipe)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`template` cannot be rebuilt from its type and config(): {error} (it would be "
            f"rebuilt so {where})"
        ) from error
    return recipe


def build(recipe: Recipe) -> Any:
    """A new empty accumulator or group from its recipe."""
    from ..base import AccumulatorGroup

    if recipe[0] == "single":
        _, cls, config = recipe
        return cls(**config)
    return AccumulatorGroup({name: cls(**config) for name, cls, config in recipe[1]})
