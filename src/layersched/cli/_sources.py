"""Command-line options shared by ``score`` and ``extender``: the strategy and the layer source."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from layersched.cli._io import read_document
from layersched.core.errors import InputError
from layersched.core.inflight import DEFAULT_MAX_PENDING_AGE_S, DEFAULT_NEW_BYTES_WEIGHT, PULL_MODES
from layersched.core.layers import LayerSource, StaticLayerSource
from layersched.core.manifest import Platform
from layersched.core.strategies import (
    STRATEGY_NAMES,
    ImageLocalityArgs,
    InFlightArgs,
    LayerLocalityArgs,
    PullTimeArgs,
    Strategy,
    StrategyArgs,
    get_strategy,
)
from layersched.core.strategies.args import (
    DEFAULT_BANDWIDTH_BITS_PER_S,
    DEFAULT_KUBERNETES_MINOR,
    DEFAULT_OVERHEAD_S,
    NEWEST_KUBERNETES_MINOR,
    OLDEST_KUBERNETES_MINOR,
    format_kubernetes_minor,
    parse_kubernetes_minor,
)

if TYPE_CHECKING:
    from layersched.registry import MemoryBudget, PullCredential
from layersched.core.strategies.image_locality import (
    IMAGE_VOLUMES_COUNT_SINCE,
    IMAGE_VOLUMES_RAISE_THRESHOLD_SINCE,
    INIT_CONTAINERS_COUNT_SINCE,
)
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.core.strategies.pull_time import BANDWIDTH_KEY
from layersched.core.strategies.pull_time import NAME as PULL_TIME


def add_strategy_options(parser: argparse.ArgumentParser) -> None:
    """``--strategy`` and the options of individual strategies."""
    parser.add_argument("--strategy", choices=STRATEGY_NAMES, default=LAYER_LOCALITY)
    parser.add_argument(
        "--spread",
        action=argparse.BooleanOptionalAction,
        help=f"{LAYER_LOCALITY} only: scale present layers by nodes-holding / nodes "
        "(anti node heating; default: on, as installed)",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="MAJOR.MINOR",
        help=f"{IMAGE_LOCALITY} only: the Kubernetes release whose ImageLocality to reproduce, "
        f"{format_kubernetes_minor(OLDEST_KUBERNETES_MINOR)} to "
        f"{format_kubernetes_minor(NEWEST_KUBERNETES_MINOR)}: init containers count from "
        f"{format_kubernetes_minor(INIT_CONTAINERS_COUNT_SINCE)}, image volumes from "
        f"{format_kubernetes_minor(IMAGE_VOLUMES_COUNT_SINCE)} (in the upper threshold too from "
        f"{format_kubernetes_minor(IMAGE_VOLUMES_RAISE_THRESHOLD_SINCE)}) "
        f"(default: {format_kubernetes_minor(DEFAULT_KUBERNETES_MINOR)}, the newest release)",
    )
    parser.add_argument(
        "--default-bandwidth-bits-per-s",
        type=float,
        metavar="BITS_PER_S",
        help=f"{PULL_TIME} and {IN_FLIGHT} only: bandwidth of a node without a {BANDWIDTH_KEY} "
        f"label or annotation (default: {DEFAULT_BANDWIDTH_BITS_PER_S})",
    )
    parser.add_argument(
        "--pull-overhead-s",
        type=float,
        metavar="SECONDS",
        help=f"{PULL_TIME} and {IN_FLIGHT} only: fixed start cost added to every pull estimate "
        f"(default: {DEFAULT_OVERHEAD_S})",
    )
    parser.add_argument(
        "--pull-mode",
        choices=PULL_MODES,
        help=f"{IN_FLIGHT} only: how the nodes' kubelets pull, serial (serializeImagePulls: "
        "true, the kubelet's default) or parallel (default: serial)",
    )
    parser.add_argument(
        "--new-bytes-weight",
        type=float,
        metavar="WEIGHT",
        help=f"{IN_FLIGHT} only: how much the link time of the pod's own new bytes counts "
        f"again, for the later pods on the node (default: {DEFAULT_NEW_BYTES_WEIGHT})",
    )
    parser.add_argument(
        "--max-pending-age-s",
        type=float,
        metavar="SECONDS",
        help=f"{IN_FLIGHT} only: a pod bound this long ago whose containers have not started "
        f"no longer counts as pulling (default: {DEFAULT_MAX_PENDING_AGE_S:g})",
    )


def strategy_args_from_flags(args: argparse.Namespace) -> StrategyArgs:
    """The typed arguments of the strategy ``args`` ask for, from its flags; a flag of
    another strategy is an InputError. Values are validated by the arguments themselves
    (:mod:`layersched.core.strategies.args`), when the strategy is built."""
    name: str = args.strategy
    link = frozenset({PULL_TIME, IN_FLIGHT})
    owner = {
        "spread": (frozenset({LAYER_LOCALITY}), "--spread"),
        "kubernetes_version": (frozenset({IMAGE_LOCALITY}), "--kubernetes-version"),
        "default_bandwidth_bits_per_s": (link, "--default-bandwidth-bits-per-s"),
        "pull_overhead_s": (link, "--pull-overhead-s"),
        "pull_mode": (frozenset({IN_FLIGHT}), "--pull-mode"),
        "new_bytes_weight": (frozenset({IN_FLIGHT}), "--new-bytes-weight"),
        "max_pending_age_s": (frozenset({IN_FLIGHT}), "--max-pending-age-s"),
    }
    for attribute, (strategies, flag) in owner.items():
        value = getattr(args, attribute)
        if value is not None and name not in strategies:
            if attribute == "spread":
                flag = "--spread" if value else "--no-spread"
                raise InputError(
                    f"{flag} applies to {LAYER_LOCALITY} only (image-locality always uses "
                    f"upstream's spread factor; {PULL_TIME} and {IN_FLIGHT} have none): drop {flag}"
                )
            raise InputError(
                f"{flag} applies to --strategy {' and '.join(sorted(strategies))} only: drop it"
            )
    if name == LAYER_LOCALITY:
        return LayerLocalityArgs() if args.spread is None else LayerLocalityArgs(args.spread)
    if name == IMAGE_LOCALITY:
        if args.kubernetes_version is None:
            return ImageLocalityArgs()
        try:
            return ImageLocalityArgs(parse_kubernetes_minor(args.kubernetes_version))
        except InputError as err:
            raise InputError(f"--kubernetes-version: {err}") from None
    given = {
        field: getattr(args, attribute)
        for attribute, field in (
            ("default_bandwidth_bits_per_s", "default_bandwidth_bits_per_s"),
            ("pull_overhead_s", "overhead_s"),
            ("pull_mode", "pull_mode"),
            ("new_bytes_weight", "new_bytes_weight"),
            ("max_pending_age_s", "max_pending_age_s"),
        )
        if getattr(args, attribute) is not None
    }
    if name == IN_FLIGHT:
        return InFlightArgs(**given)
    return PullTimeArgs(**given)


#: The flag that sets each strategy argument.
FLAG_OF_FIELD = {
    "spread": "--spread",
    "kubernetes_minor": "--kubernetes-version",
    "default_bandwidth_bits_per_s": "--default-bandwidth-bits-per-s",
    "overhead_s": "--pull-overhead-s",
    "pull_mode": "--pull-mode",
    "new_bytes_weight": "--new-bytes-weight",
    "max_pending_age_s": "--max-pending-age-s",
}


def strategy_from_args(args: argparse.Namespace) -> Strategy:
    """The strategy ``args`` ask for, built from its validated arguments (an invalid value
    is an InputError naming the flag that set it)."""
    try:
        return get_strategy(args.strategy, strategy_args_from_flags(args))
    except InputError as err:
        flags = [flag for field, flag in FLAG_OF_FIELD.items() if f"{field}=" in str(err)]
        raise InputError(f"{' '.join(flags)}: {err}" if flags else str(err)) from None


def add_layer_source_options(
    parser: argparse.ArgumentParser,
    *,
    registry_timeout_s: float,
    registry_retries: int,
    registry_deadline_s: float,
) -> None:
    """``--layers``, ``--platform``, ``--insecure-registry``, the registry client's limits,
    credentials and trust settings (docs/registry.md)."""
    parser.add_argument(
        "--layers",
        metavar="LAYERS.json",
        help="offline layer source: {image: [{digest, size}, …]}; no network access with it",
    )
    parser.add_argument(
        "--platform",
        default="linux/amd64",
        help="platform to pick from image indexes (default: %(default)s); the extender "
        "uses it for nodes whose platform is unknown, and each node's own otherwise",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="registry to reach over plain HTTP (repeatable)",
    )
    parser.add_argument(
        "--registry-timeout-s",
        type=float,
        default=registry_timeout_s,
        metavar="SECONDS",
        help="timeout of each registry request, without --layers (default: %(default)s)",
    )
    parser.add_argument(
        "--registry-retries",
        type=int,
        default=registry_retries,
        metavar="N",
        help="retries after a 429/5xx or connection error, without --layers (default: %(default)s)",
    )
    parser.add_argument(
        "--registry-deadline-s",
        type=float,
        default=registry_deadline_s,
        metavar="SECONDS",
        help="whole-request deadline of each registry attempt (token, redirects, body), "
        "against servers that trickle bytes (default: %(default)s)",
    )
    parser.add_argument(
        "--registry-config",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="docker config.json / mounted dockerconfigjson Secret with auths, credHelpers, "
        "credsStore (repeatable, first wins; default: $REGISTRY_AUTH_FILE, then "
        "~/.docker/config.json)",
    )
    parser.add_argument(
        "--registry-token-host",
        action="append",
        default=[],
        metavar="REGISTRY=HOST",
        help="HOST may serve REGISTRY's token realm (repeatable); without it a realm must be "
        "on the registry's own host (docker.io -> auth.docker.io is built in)",
    )
    parser.add_argument(
        "--allow-registry",
        action="append",
        default=None,
        metavar="HOST[:PORT]",
        help="contact only these registries (repeatable); images from others get neutral "
        "scores, with one log line per registry (default: any registry)",
    )


def open_layer_source(
    args: argparse.Namespace, *, cached: bool = False, budget: MemoryBudget | None = None
) -> LayerSource:
    """The offline source for ``--layers``, else a registry-backed one for ``--platform``
    (with ``cached``, behind the one layer cache: for callers resolving inline, such as the
    agent's fallback; the extender's resolver keeps its own; ``budget``: the memory budget
    the registries it refuses are charged to, the extender's)."""
    if not args.registry_timeout_s > 0:
        raise InputError(f"--registry-timeout-s {args.registry_timeout_s}: must be > 0 seconds")
    if args.registry_retries < 0:
        raise InputError(f"--registry-retries {args.registry_retries}: must be 0 or more")
    if not args.registry_deadline_s > 0:
        raise InputError(f"--registry-deadline-s {args.registry_deadline_s}: must be > 0 seconds")
    token_hosts_from_args(args.registry_token_host)  # a malformed entry fails here, early
    for path in args.registry_config:
        if not path.is_file():
            raise InputError(
                f"--registry-config {path}: no such file – mount the dockerconfigjson Secret "
                "there (key .dockerconfigjson) or drop the flag"
            )
    if args.layers:
        return StaticLayerSource.from_json(read_document(args.layers), args.layers)
    factory = registry_source_factory(args, budget)
    assert factory is not None
    source = factory(Platform.parse(args.platform))
    if cached:
        from layersched.registry import CachedLayerSource

        return CachedLayerSource(source)
    return source


def registry_source_factory(
    args: argparse.Namespace, budget: MemoryBudget | None = None
) -> Callable[[Platform], LayerSource] | None:
    """Makes a registry-backed source for a platform (one client each: a client resolves
    indexes for its platform); None with ``--layers``, whose layers have no platform.
    ``budget``: the memory budget the registries each refuses are charged to."""
    if args.layers:
        return None
    from layersched.registry import RegistryClient, RegistryLayerSource

    token_hosts = token_hosts_from_args(args.registry_token_host)

    def make(platform: Platform) -> LayerSource:
        client = RegistryClient(
            platform=platform,
            insecure_hosts=tuple(args.insecure_registry),
            timeout_s=args.registry_timeout_s,
            retries=args.registry_retries,
            deadline_s=args.registry_deadline_s,
            auth_files=args.registry_config or None,
            token_hosts=token_hosts,
            allowed_registries=args.allow_registry,
        )
        return RegistryLayerSource(client, budget)

    return make


def credential_source_factory(
    args: argparse.Namespace, budget: MemoryBudget | None = None
) -> Callable[[Platform, PullCredential], LayerSource]:
    """Makes a registry-backed source for a platform that resolves with one pull
    credential and nothing else (no docker config file, no credential helper), its errors
    scrubbed of it (:class:`~layersched.registry.CredentialSource`); the registry rules
    are the other sources' (allowed registries, token hosts, timeouts)."""
    from layersched.registry import CredentialSource, RegistryClient, RegistryLayerSource

    token_hosts = token_hosts_from_args(args.registry_token_host)

    def make(platform: Platform, credential: PullCredential) -> LayerSource:
        client = RegistryClient(
            platform=platform,
            insecure_hosts=tuple(args.insecure_registry),
            credentials={credential.registry: credential.credentials},
            timeout_s=args.registry_timeout_s,
            retries=args.registry_retries,
            deadline_s=args.registry_deadline_s,
            auth_files=(),
            token_hosts=token_hosts,
            allowed_registries=args.allow_registry,
        )
        return CredentialSource(RegistryLayerSource(client, budget), credential)

    return make


def token_hosts_from_args(values: list[str]) -> dict[str, list[str]]:
    """``["REGISTRY=HOST", …]`` as ``{REGISTRY: [HOST, …]}``; a malformed entry is an InputError."""
    found: dict[str, list[str]] = {}
    for value in values:
        registry, sep, host = value.partition("=")
        if not sep or not registry.strip() or not host.strip() or "/" in host:
            raise InputError(
                f"--registry-token-host {value!r}: expected REGISTRY=HOST, e.g. "
                "--registry-token-host reg.example.com=auth.example.com"
            )
        found.setdefault(registry.strip(), []).append(host.strip())
    return found
