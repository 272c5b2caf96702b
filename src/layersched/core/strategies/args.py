"""Every strategy's arguments: typed, defaulted and validated in one place.

As kube-scheduler's plugins take a typed ``*Args`` object that ``Validate*Args`` checks
before the plugin is built (kubernetes-sigs/scheduler-plugins keeps both beside each
plugin), a strategy here is built from its :class:`StrategyArgs` by
:func:`~layersched.core.strategies.get_strategy`, which validates them first. Every
entry point (the CLI's flags, the simulator's settings, the testbed) fills these objects
and nothing else checks their values; an invalid value is an InputError naming the
strategy, the field and the allowed range. The native Go plugin's arguments mirror
:class:`LayerLocalityArgs` (src/kube-scheduler).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import ClassVar, TypeGuard

from layersched.core.errors import InputError
from layersched.core.inflight import (
    DEFAULT_MAX_PENDING_AGE_S,
    DEFAULT_NEW_BYTES_WEIGHT,
    PULL_MODES,
    SERIAL,
    PullMode,
)

#: Kubernetes ``(major, minor)``, e.g. ``(1, 20)``.
KubernetesMinor = tuple[int, int]

#: The oldest minor whose ImageLocality the image-locality port reproduces.
OLDEST_KUBERNETES_MINOR: KubernetesMinor = (1, 20)
#: The newest minor whose ImageLocality the port knows (image volumes raise the threshold).
NEWEST_KUBERNETES_MINOR: KubernetesMinor = (1, 37)
#: The default: the newest released minor (1.37, released 2026-08-26; the testbed's).
DEFAULT_KUBERNETES_MINOR: KubernetesMinor = (1, 37)
#: A common edge uplink; with no node labelled, any value gives the same ranking.
DEFAULT_BANDWIDTH_BITS_PER_S = 100_000_000
#: Creating and starting a container costs about a second even with every layer
#: cached; pull-time differences well below that hardly matter.
DEFAULT_OVERHEAD_S = 1.0


_VERSION = re.compile(r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.\d+)?(?:[-+].*)?$")


def format_kubernetes_minor(minor: KubernetesMinor) -> str:
    """``(1, 20)`` as ``"1.20"``."""
    return f"{minor[0]}.{minor[1]}"


def parse_kubernetes_minor(text: str) -> KubernetesMinor:
    """``"1.20"``, ``"v1.20.2"`` or ``"1.30"`` as ``(1, 20)`` / ``(1, 30)``; InputError on
    anything else, and on a minor the image-locality port does not reproduce."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise InputError(
            f"Kubernetes version {text!r}: expected MAJOR.MINOR such as 1.20 "
            "(`kubectl version` prints the cluster's as Server Version)"
        )
    minor = (int(match["major"]), int(match["minor"]))
    ImageLocalityArgs(minor).validate()
    return minor


@dataclass(frozen=True, slots=True)
class LayerLocalityArgs:
    """``layer-locality``: the bytes of the pod's layers a node holds."""

    strategy: ClassVar[str] = "layer-locality"
    #: Scale each present layer by (nodes holding it / all nodes) against node heating.
    #: On, as everything installed runs it (the chart, ``install/kustomize/``, the Go plugin's
    #: ``DefaultSpread``), so that ``score``, the simulator and the testbed predict the
    #: scheduler a user installs (issue 45); a caller that wants it off says so.
    spread: bool = True

    def validate(self) -> None:
        """Nothing to check beyond the type."""
        if not isinstance(self.spread, bool):
            raise InputError(f"{self.strategy}: spread={self.spread!r} must be true or false")


@dataclass(frozen=True, slots=True)
class PullTimeArgs:
    """``pull-time``: the estimated time to pull the pod's missing layers."""

    strategy: ClassVar[str] = "pull-time"
    #: Bandwidth assumed for a node without a readable label or annotation (> 0).
    default_bandwidth_bits_per_s: float = DEFAULT_BANDWIDTH_BITS_PER_S
    #: Fixed start cost added to every estimate (seconds, >= 0).
    overhead_s: float = DEFAULT_OVERHEAD_S

    def validate(self) -> None:
        """Bandwidth finite and > 0; overhead finite and >= 0."""
        _check_link(self.strategy, self.default_bandwidth_bits_per_s, self.overhead_s)


@dataclass(frozen=True, slots=True)
class InFlightArgs:
    """``in-flight``: the pod's estimated start, the pulls in flight on each node counted
    (``layersched.core.inflight``; the Go plugin's ``strategy: in-flight`` args)."""

    strategy: ClassVar[str] = "in-flight"
    #: How the nodes' kubelets pull: "serial" (``serializeImagePulls: true``, the
    #: default) or "parallel" (``serializeImagePulls: false``).
    pull_mode: PullMode = SERIAL
    #: Bandwidth assumed for a node without a readable label or annotation (> 0).
    default_bandwidth_bits_per_s: float = DEFAULT_BANDWIDTH_BITS_PER_S
    #: Fixed start cost added to every estimate (seconds, >= 0).
    overhead_s: float = DEFAULT_OVERHEAD_S
    #: How much the link time of the pod's own new bytes counts again, for the later
    #: pods on the node (>= 0; 0: the pod's start alone).
    new_bytes_weight: float = DEFAULT_NEW_BYTES_WEIGHT
    #: A pending pull stops counting this long after its pod was bound (seconds, > 0).
    max_pending_age_s: float = DEFAULT_MAX_PENDING_AGE_S

    def validate(self) -> None:
        """A known pull mode; bandwidth > 0, overhead and weight >= 0, age > 0, finite."""
        if self.pull_mode not in PULL_MODES:
            raise InputError(
                f"{self.strategy}: pull_mode={self.pull_mode!r}: choose {' or '.join(PULL_MODES)} "
                "(the kubelet's serializeImagePulls: true is serial)"
            )
        _check_link(self.strategy, self.default_bandwidth_bits_per_s, self.overhead_s)
        weight = self.new_bytes_weight
        if not _finite(weight) or weight < 0:
            raise InputError(
                f"{self.strategy}: new_bytes_weight={weight!r} must be a finite number >= 0"
            )
        age = self.max_pending_age_s
        if not _finite(age) or age <= 0:
            raise InputError(
                f"{self.strategy}: max_pending_age_s={age!r} must be a finite number of seconds > 0"
            )


@dataclass(frozen=True, slots=True)
class ImageLocalityArgs:
    """``image-locality``: upstream's ImageLocality as released in one Kubernetes minor."""

    strategy: ClassVar[str] = "image-locality"
    #: The Kubernetes release whose ImageLocality to reproduce (which images count).
    kubernetes_minor: KubernetesMinor = DEFAULT_KUBERNETES_MINOR

    def validate(self) -> None:
        """A 1.x minor from :data:`OLDEST_KUBERNETES_MINOR` to :data:`NEWEST_KUBERNETES_MINOR`."""
        minor = self.kubernetes_minor
        if (
            not isinstance(minor, tuple)
            or len(minor) != len(OLDEST_KUBERNETES_MINOR)
            or not all(isinstance(part, int) for part in minor)
            or minor[0] != 1
            or minor < OLDEST_KUBERNETES_MINOR
        ):
            oldest = format_kubernetes_minor(OLDEST_KUBERNETES_MINOR)
            raise InputError(
                f"Kubernetes {_shown(minor)}: the image-locality port "
                f"reproduces ImageLocality from {oldest} on (older releases are unchecked, "
                f"and some scored on a fixed upper threshold or on 0-10 buckets): pass "
                f"{oldest} or later"
            )
        if minor > NEWEST_KUBERNETES_MINOR:
            oldest = format_kubernetes_minor(OLDEST_KUBERNETES_MINOR)
            newest = format_kubernetes_minor(NEWEST_KUBERNETES_MINOR)
            raise InputError(
                f"Kubernetes {_shown(minor)}: the image-locality port knows ImageLocality up "
                f"to {newest} (which images a later release counts is not known yet): pass "
                f"{oldest} .. {newest}"
            )


#: The arguments of one strategy.
StrategyArgs = LayerLocalityArgs | PullTimeArgs | InFlightArgs | ImageLocalityArgs
#: Each strategy's arguments type, by strategy name.
ARGS_BY_STRATEGY: dict[str, type[StrategyArgs]] = {
    args.strategy: args
    for args in (LayerLocalityArgs, PullTimeArgs, InFlightArgs, ImageLocalityArgs)
}


def field_names(args: type[StrategyArgs]) -> tuple[str, ...]:
    """The fields of a strategy's arguments (what its options are called)."""
    return tuple(f.name for f in fields(args))


def _check_link(strategy: str, bandwidth: object, overhead_s: object) -> None:
    """A default bandwidth finite and > 0, an overhead finite and >= 0 (pull-time's and
    in-flight's)."""
    if not _finite(bandwidth) or bandwidth <= 0:
        raise InputError(
            f"{strategy}: default_bandwidth_bits_per_s={bandwidth!r} must be a "
            "finite number of bits per second > 0"
        )
    if not _finite(overhead_s) or overhead_s < 0:
        raise InputError(
            f"{strategy}: overhead_s={overhead_s!r} must be a finite number of seconds >= 0"
        )


def _finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(minor: object) -> str:
    if isinstance(minor, tuple) and len(minor) == len(OLDEST_KUBERNETES_MINOR):
        return f"{minor[0]}.{minor[1]}"
    return repr(minor)


def strategy_args(name: str, **options: object) -> StrategyArgs:
    """Strategy ``name``'s arguments from keyword ``options`` (its defaults for the rest);
    an unknown strategy or option is an InputError naming what it takes."""
    kind = ARGS_BY_STRATEGY.get(name)
    if kind is None:
        raise InputError(f"unknown strategy {name!r}: choose one of {', '.join(ARGS_BY_STRATEGY)}")
    known = field_names(kind)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InputError(
            f"strategy {name!r} does not take {', '.join(unknown)}: it takes "
            f"{', '.join(known) or 'no options'}"
        )
    return kind(**options)  # type: ignore[arg-type]
