"""The Helm chart's values: ``values.yaml`` (the install ``deploy render`` writes, each key
under its comment), ``values.schema.json`` (helm refuses values outside it, naming the
field), and the values that make the chart render a given :class:`StackSpec`."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from layersched import __version__
from layersched.core.errors import InputError
from layersched.core.inflight import PULL_MODES
from layersched.core.strategies import STRATEGY_NAMES
from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy._chart import CHART_OLDEST_MINOR, HEADER
from layersched.deploy._network import (
    API_SERVER_PORT,
    HTTPS_PORT,
    MAX_PORT,
    EgressPeer,
)
from layersched.deploy._published import PublishedImages, default_published
from layersched.deploy._scheduler_config import (
    DEFAULT_ALLOWED_REGISTRIES,
    DEFAULT_IMAGE_QUORUM,
    MAX_EXTENDER_WEIGHT,
    MAX_IMAGE_QUORUM,
    MIN_EXTENDER_WEIGHT,
)
from layersched.deploy._spec import (
    CONTAINERD_SOCKET,
    DEFAULT_STRATEGY,
    IN_FLIGHT_WEIGHT,
    LAYER_LOCALITY_WEIGHT,
    RUNTIME_CONTAINERD,
    RUNTIMES,
    SCHEDULER_EXTENDER,
    SCHEDULER_KINDS,
    StackSpec,
)
from layersched.deploy._versions import NEWEST_MINOR, UPSTREAM_KUBE_SCHEDULER
from layersched.deploy._workloads import (
    AGENT_RESOURCES,
    EXTENDER_RESOURCES,
    NAMESPACE,
    SCHEDULER_RESOURCES,
)
from layersched.deploy._yaml import to_yaml

#: Where values.yaml's comments wrap.
VALUES_COMMENT_COLUMNS = 92


#: Each container's resources, by the values key that sets them.
RESOURCES_KEYS = {"kube-scheduler": "kubeScheduler", "extender": "extender", "agent": "agent"}


def _plugin_values(published: PublishedImages) -> dict[str, Any]:
    repositories = {image.repository for image in published.kube_scheduler.values()}
    if len(repositories) != 1:
        raise InputError(
            f"the published kube-scheduler images are in {len(repositories)} repositories "
            f"({', '.join(sorted(repositories))}); the chart takes them from one"
        )
    return {
        "repository": repositories.pop(),
        "images": {
            f"1.{minor}": {"tag": image.tag, "digest": image.digest}
            for minor, image in sorted(published.kube_scheduler.items())
        },
    }


def default_values(published: PublishedImages | None = None) -> dict[str, Any]:
    """``values.yaml``: the install ``deploy render --kubernetes-version`` writes, with the
    published images (``published``: a release's record, by digest; default: their tags)."""
    published = published or default_published()
    layersched = published.layersched
    return {
        "namespace": NAMESPACE,
        "createNamespace": True,
        "kubernetesVersion": "",
        "scheduler": SCHEDULER_EXTENDER,
        "image": {
            "repository": layersched.repository,
            # the chart's appVersion when it is the release's own tag
            "tag": "" if layersched.tag == __version__ else layersched.tag,
            "digest": layersched.digest,
        },
        "kubeScheduler": {
            "image": {"repository": "", "tag": "", "digest": ""},
            "plugin": _plugin_values(published),
        },
        "strategy": StackSpec().strategy,
        "pullMode": StackSpec().pull_mode,
        "weight": None,
        "imageQuorum": DEFAULT_IMAGE_QUORUM,
        "extender": {
            "spread": StackSpec().spread,
            "allowedRegistries": list(DEFAULT_ALLOWED_REGISTRIES),
            "pullSecrets": {"namespaces": [], "names": []},
            "extraArgs": [],
        },
        "egress": {"apiServer": [], "registries": []},
        "runtime": {
            "kind": RUNTIME_CONTAINERD,
            "containerdSocket": CONTAINERD_SOCKET,
            "crioStorage": StackSpec().crio_storage,
        },
        "resources": {
            "kubeScheduler": SCHEDULER_RESOURCES,
            "extender": EXTENDER_RESOURCES,
            "agent": AGENT_RESOURCES,
        },
        "crd": {"install": True},
    }


_VALUES_COMMENTS = {
    "namespace": "The namespace the stack runs in (created by the chart with createNamespace).",
    "kubernetesVersion": (
        f"The cluster's Kubernetes version, 1.X or 1.X.Y (1.{CHART_OLDEST_MINOR}-1."
        f'{NEWEST_MINOR}); "" reads it from the cluster (helm\'s .Capabilities).'
    ),
    "scheduler": (
        "How layers are scored: extender (a sidecar, every version) or plugin "
        "(layersched's kube-scheduler build with the LayerLocality plugin, 1.35+: "
        "kubeScheduler.plugin's image for the cluster's minor)."
    ),
    "image": (
        'The layersched image (extender and agent); tag "" is the chart\'s appVersion, '
        "a digest wins over the tag (a release's chart carries the digest it published)."
    ),
    "kubeScheduler": (
        "kube-scheduler's image. image.repository \"\" is the default: upstream's "
        f'{UPSTREAM_KUBE_SCHEDULER} of the cluster\'s version with the extender (tag "": '
        "the version's, the newest patch we know of for a bare minor), and with the plugin "
        "layersched's build for the cluster's minor from plugin.images (by digest once a "
        "release wrote it; a minor not listed is refused). Set image to a mirror or a build "
        "of your own instead."
    ),
    "strategy": (
        f"How layers are scored, by the extender or the plugin: {DEFAULT_STRATEGY} (each "
        "node's estimated start of the pod, pulls in flight counted: docs/in-flight.md) or "
        f"{LAYER_LOCALITY_STRATEGY} (the bytes of the pod's layers a node holds); the "
        "extender serves the core's other strategies too."
    ),
    "pullMode": (
        f"How the nodes' kubelets pull, for {IN_FLIGHT_STRATEGY}: serial (their default, "
        "serializeImagePulls: true) or parallel (serializeImagePulls: false)."
    ),
    "weight": (
        "The weight of layer scores against the default plugins; null: the strategy's, "
        f"{IN_FLIGHT_WEIGHT} for {IN_FLIGHT_STRATEGY} (docs/in-flight.md) and "
        f"{LAYER_LOCALITY_WEIGHT} for the others (docs/extender.md); a change rolls the "
        "scheduler pods (their template hashes the config)."
    ),
    "imageQuorum": "Nodes that must publish the same layers for a pod image.",
    "extender": (
        "The extender's spread (layer-locality's --spread, on by default), the "
        "registries it may resolve images from, the namespaces whose pods' pull secrets it "
        "may read (pullSecrets.namespaces: a Role granting get on secrets in each, and "
        "--pull-secrets; pullSecrets.names: only those secrets; default: none), and extra "
        "arguments."
    ),
    "egress": (
        "Where the scheduler pods may connect besides DNS and public registries on 443 "
        "(their NetworkPolicy). apiServer: the API server's addresses as pods reach it, "
        "each {cidr, port}: the endpoints of default/kubernetes (kubectl get endpointslices "
        "-n default -l kubernetes.io/service-name=kubernetes) and its cluster IP on 443; "
        f"empty (the default) allows any address on {HTTPS_PORT} and {API_SERVER_PORT}. "
        "registries: registries on internal addresses the extender must reach, each "
        "{cidr, port} (layersched deploy render's --api-server and --registry-address)."
    ),
    "runtime": (
        "The nodes' runtime: containerd (k3s and RKE2: containerdSocket "
        "/run/k3s/containerd/containerd.sock) or crio (its storage, read-only)."
    ),
    "resources": "Each container's requests and limits.",
    "crd": "Install the NodeLayerInventory CRD (uninstall removes it and every inventory).",
}


def values_yaml(published: PublishedImages | None = None) -> str:
    """``values.yaml``, each top-level key under its comment."""
    out = [HEADER]
    for key, value in default_values(published).items():
        comment = _VALUES_COMMENTS.get(key)
        if comment is not None:
            lines = textwrap.wrap(comment, VALUES_COMMENT_COLUMNS - len("# "))
            out.append("\n" + "".join(f"# {line}\n" for line in lines))
        out.append(to_yaml({key: value}))
    return "".join(out)


def _object_schema(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": dict(properties)}


def values_schema() -> dict[str, Any]:
    """``values.schema.json``: helm refuses values outside it, naming the field."""
    digest = {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"}

    def image(repository: dict[str, Any]) -> dict[str, Any]:
        return _object_schema({"repository": repository, "tag": {"type": "string"},
                               "digest": digest})  # fmt: skip

    peers = {
        "type": "array",
        "items": {
            **_object_schema(
                {
                    # an address block as NetworkPolicy takes it: the prefix is not optional
                    "cidr": {"type": "string", "pattern": "^[0-9a-fA-F:.]+/[0-9]{1,3}$"},
                    "port": {"type": "integer", "minimum": 1, "maximum": MAX_PORT},
                }
            ),
            "required": ["cidr", "port"],
        },
    }
    plugin_image = _object_schema({"tag": {"type": "string", "minLength": 1}, "digest": digest})
    resources = {"type": "object"}
    return {
        "$comment": HEADER.replace("# ", "").replace("\n", " ").strip(),
        "$schema": "http://json-schema.org/draft-07/schema#",
        **_object_schema(
            {
                "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "createNamespace": {"type": "boolean"},
                "kubernetesVersion": {
                    "type": "string",
                    "pattern": r"^(v?1\.[0-9]+(\.[0-9]+)?)?$",
                },
                "scheduler": {"enum": list(SCHEDULER_KINDS)},
                "image": image({"type": "string", "minLength": 1}),
                "kubeScheduler": _object_schema(
                    {
                        "image": image({"type": "string"}),
                        "plugin": _object_schema(
                            {
                                "repository": {"type": "string", "minLength": 1},
                                "images": {
                                    "type": "object",
                                    "propertyNames": {"pattern": r"^1\.[0-9]+$"},
                                    "additionalProperties": plugin_image,
                                },
                            }
                        ),
                    }
                ),
                "strategy": {"enum": list(STRATEGY_NAMES)},
                "pullMode": {"enum": list(PULL_MODES)},
                "weight": {
                    "type": ["integer", "null"],
                    "minimum": MIN_EXTENDER_WEIGHT,
                    "maximum": MAX_EXTENDER_WEIGHT,
                },
                "imageQuorum": {"type": "integer", "minimum": 1, "maximum": MAX_IMAGE_QUORUM},
                "extender": _object_schema(
                    {
                        "spread": {"type": "boolean"},
                        "allowedRegistries": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "minLength": 1},
                        },
                        "pullSecrets": _object_schema(
                            {
                                "namespaces": {
                                    "type": "array",
                                    "items": {
                                        "type": "string",
                                        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                        "maxLength": 63,
                                    },
                                },
                                "names": {
                                    "type": "array",
                                    "items": {
                                        "type": "string",
                                        "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                        "maxLength": 253,
                                    },
                                },
                            }
                        ),
                        "extraArgs": {"type": "array", "items": {"type": "string"}},
                    }
                ),
                "egress": _object_schema({"apiServer": peers, "registries": peers}),
                "runtime": _object_schema(
                    {
                        "kind": {"enum": list(RUNTIMES)},
                        "containerdSocket": {"type": "string", "pattern": "^/"},
                        "crioStorage": {"type": "string", "pattern": "^/"},
                    }
                ),
                "resources": _object_schema({key: resources for key in RESOURCES_KEYS.values()}),
                "crd": _object_schema({"install": {"type": "boolean"}}),
            }
        ),
    }


def _peers(peers: Sequence[EgressPeer]) -> list[dict[str, Any]]:
    return [{"cidr": peer.cidr, "port": peer.port} for peer in peers]


def chart_values(spec: StackSpec, **images: Mapping[str, str]) -> dict[str, Any]:
    """The values that make the chart render ``spec`` (a test's and a user's bridge from
    ``layersched deploy render``'s settings); ``images`` as ``image``/``kubeScheduler``."""
    values = default_values()
    values["egress"] = {
        "apiServer": _peers(spec.egress.api_server),
        "registries": _peers(spec.egress.registries),
    }
    values.update(
        namespace=spec.namespace,
        kubernetesVersion=spec.kubernetes_version,
        scheduler=spec.scheduler,
        strategy=spec.strategy,
        pullMode=spec.pull_mode,
        weight=spec.weight,
        imageQuorum=spec.image_quorum,
    )
    values["extender"] = {
        "spread": spec.spread,
        "allowedRegistries": list(spec.allowed_registries),
        "pullSecrets": {
            "namespaces": list(spec.pull_secret_namespaces),
            "names": list(spec.pull_secret_names),
        },
        "extraArgs": list(spec.extender_args),
    }
    values["runtime"] = {
        "kind": spec.runtime,
        "containerdSocket": spec.containerd_socket,
        "crioStorage": spec.crio_storage,
    }
    if "image" in images:
        values["image"] = {**values["image"], **images["image"]}
    if "kube_scheduler" in images:
        scheduler = values["kubeScheduler"]
        scheduler["image"] = {**scheduler["image"], **images["kube_scheduler"]}
    return values
