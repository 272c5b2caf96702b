"""Scoring strategies, one module each, every name declared once in its module.

``get_strategy(name, args)`` builds one from its typed, validated arguments
(:mod:`~layersched.core.strategies.args`); ``STRATEGY_NAMES`` lists them in a stable
order for CLIs and docs.
"""

from __future__ import annotations

from collections.abc import Callable

from layersched.core.errors import InputError
from layersched.core.strategies import image_locality, in_flight, layer_locality, pull_time
from layersched.core.strategies.args import (
    ARGS_BY_STRATEGY,
    ImageLocalityArgs,
    InFlightArgs,
    LayerLocalityArgs,
    PullTimeArgs,
    StrategyArgs,
    strategy_args,
)
from layersched.core.strategies.base import (
    NodeScores,
    PlatformGroup,
    Strategy,
    pod_layers,
    resolve_pod_layers,
)

__all__ = [
    "STRATEGY_NAMES",
    "ImageLocalityArgs",
    "InFlightArgs",
    "LayerLocalityArgs",
    "NodeScores",
    "PlatformGroup",
    "PullTimeArgs",
    "Strategy",
    "StrategyArgs",
    "get_strategy",
    "pod_layers",
    "resolve_pod_layers",
    "strategy_args",
]


def _image_locality(args: StrategyArgs) -> Strategy:
    assert isinstance(args, ImageLocalityArgs)
    return image_locality.ImageLocality(args)


def _layer_locality(args: StrategyArgs) -> Strategy:
    assert isinstance(args, LayerLocalityArgs)
    return layer_locality.LayerLocality(args)


def _pull_time(args: StrategyArgs) -> Strategy:
    assert isinstance(args, PullTimeArgs)
    return pull_time.PullTime(args)


def _in_flight(args: StrategyArgs) -> Strategy:
    assert isinstance(args, InFlightArgs)
    return in_flight.InFlight(args)


_FACTORIES: dict[str, Callable[[StrategyArgs], Strategy]] = {
    image_locality.NAME: _image_locality,
    layer_locality.NAME: _layer_locality,
    pull_time.NAME: _pull_time,
    in_flight.NAME: _in_flight,
}

STRATEGY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def get_strategy(name: str, args: StrategyArgs | None = None) -> Strategy:
    """Build the strategy called ``name`` from ``args`` (its defaults when None), validated."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise InputError(f"unknown strategy {name!r}: choose one of {', '.join(STRATEGY_NAMES)}")
    expected = ARGS_BY_STRATEGY[name]
    if args is None:
        args = expected()
    elif not isinstance(args, expected):
        raise InputError(f"strategy {name!r} takes {expected.__name__}, not {type(args).__name__}")
    return factory(args)
