"""Scoring strategies, one module each, every name declared once in its module.

``get_strategy(name, **options)`` builds one by name; ``STRATEGY_NAMES`` lists
them in a stable order for CLIs and docs.
"""

from __future__ import annotations

from collections.abc import Callable

from layersched.core.errors import InputError
from layersched.core.strategies import image_locality, layer_locality, pull_time
from layersched.core.strategies.base import NodeScores, Strategy, pod_layers

__all__ = ["STRATEGY_NAMES", "NodeScores", "Strategy", "get_strategy", "pod_layers"]

_FACTORIES: dict[str, Callable[..., Strategy]] = {
    image_locality.NAME: image_locality.ImageLocality,
    layer_locality.NAME: layer_locality.LayerLocality,
    pull_time.NAME: pull_time.PullTime,
}

STRATEGY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def get_strategy(name: str, **options: object) -> Strategy:
    """Build the strategy called ``name`` with its typed options."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise InputError(
            f"unknown strategy {name!r}: choose one of {', '.join(STRATEGY_NAMES)}"
        ) from None
    try:
        return factory(**options)
    except TypeError as err:
        raise InputError(f"strategy {name!r} does not take these options: {err}") from None
