"""The chart's substitutions: the install generated with sentinel values (a namespace, a
weight, a socket path... that no real install has; the containers' images and resources
and the scheduler pods' egress rules set to sentinels in the objects themselves), and each
sentinel in its YAML replaced by its value's template expression; the scheduler's
configuration as a named template, which its ConfigMap is and its pod template hashes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY_STRATEGY
from layersched.deploy._chart import Variant
from layersched.deploy._chart_values import RESOURCES_KEYS
from layersched.deploy._network import EgressPeer, EgressSpec, scheduler_egress
from layersched.deploy._scheduler_deployment import config_checksum
from layersched.deploy._spec import (
    IN_FLIGHT_WEIGHT,
    KUBE_SCHEDULER_IMAGE,
    LAYER_LOCALITY_WEIGHT,
    LAYERSCHED_IMAGE,
    SCHEDULER_EXTENDER,
    StackSpec,
)
from layersched.deploy._versions import NEWEST_PATCH
from layersched.deploy._yaml import to_yaml

_NAMESPACE = "chart-sentinel-namespace"
_STRATEGY = "chart-sentinel-strategy"
_EXTRA_ARG = "chart-sentinel-extra-arg"
_REGISTRY = "chart-sentinel-registry"
_SOCKET = "/chart-sentinel/containerd.sock"
_CRIO_STORAGE = "/chart-sentinel/crio-storage"
_WEIGHT = 999_983
_QUORUM = 99_991
#: The pull secrets' sentinels: a namespace the extender may read pull secrets in (each a
#: Role and its binding: a ``range`` over the values) and one secret the Roles name.
_PULL_NAMESPACE = "chart-sentinel-pull-namespace"
_PULL_SECRET = "chart-sentinel-pull-secret"  # noqa: S105 (a name, no password)
_PULL_FLAG = "--pull-secrets"
#: The variable a pull-secret Role's ``range`` binds (its namespace).
PULL_VARIABLE = "$pullNamespace"
#: The egress rules' sentinels: list items where the API server's and the registries'
#: rules go, and one rule's address and port (a ``range`` item's fields).
_EGRESS_API = "chart-sentinel-egress-api-server"
_EGRESS_REGISTRIES = "chart-sentinel-egress-registries"
_PEER_CIDR = "chart-sentinel-cidr"
_PEER_PORT = 99_989
#: Named templates of the scheduler's configuration: ``layersched.schedulerConfig.<hex>``.
CONFIG_TEMPLATE_PREFIX = "layersched.schedulerConfig."
_CONFIG_TEMPLATE_HEX = 12
_IMAGES = {LAYERSCHED_IMAGE: "chart-sentinel-image-layersched",
           KUBE_SCHEDULER_IMAGE: "chart-sentinel-image-kube-scheduler"}  # fmt: skip


_RESOURCES = {name: f"chart-sentinel-resources-{name}" for name in RESOURCES_KEYS}

#: Scalar substitutions (sentinel text -> expression), longest first where one contains
#: another.
_SCALARS: tuple[tuple[str, str], ...] = (
    (_NAMESPACE, "{{ .Values.namespace }}"),
    (_STRATEGY, "{{ .Values.strategy | quote }}"),
    (_SOCKET, "{{ .Values.runtime.containerdSocket }}"),
    (_CRIO_STORAGE, "{{ .Values.runtime.crioStorage }}"),
    (f"'{_QUORUM}'", "{{ .Values.imageQuorum | quote }}"),
    (str(_QUORUM), "{{ int .Values.imageQuorum }}"),
    # a weight given, else the strategy's (recommended_weight)
    (
        str(_WEIGHT),
        f"{{{{ .Values.weight | default (ternary {IN_FLIGHT_WEIGHT} {LAYER_LOCALITY_WEIGHT} "
        f'(eq .Values.strategy "{IN_FLIGHT_STRATEGY}")) | int }}}}',
    ),
    (_IMAGES[LAYERSCHED_IMAGE], '{{ include "layersched.image" . | quote }}'),
    (_IMAGES[KUBE_SCHEDULER_IMAGE], '{{ include "layersched.kubeSchedulerImage" . | quote }}'),
)


def sentinel_spec(variant: Variant) -> StackSpec:
    """The variant's install with sentinel values. The extender's strategy is a sentinel
    (an argument); the plugin's is in-flight, whose ``inFlight`` args the configuration's
    template keeps for that strategy only (:func:`_plugin_strategy`)."""
    pulls = variant.scheduler == SCHEDULER_EXTENDER  # the plugin reads no pull secret
    return StackSpec(
        namespace=_NAMESPACE,
        strategy=_STRATEGY if pulls else IN_FLIGHT_STRATEGY,
        extender_args=(_EXTRA_ARG,),
        allowed_registries=(_REGISTRY,),
        scheduler=variant.scheduler,
        weight=_WEIGHT,
        image_quorum=_QUORUM,
        runtime=variant.runtime,
        containerd_socket=_SOCKET,
        crio_storage=_CRIO_STORAGE,
        pull_secret_namespaces=(_PULL_NAMESPACE,) if pulls else (),
        pull_secret_names=(_PULL_SECRET,) if pulls else (),
    ).for_version(f"v1.{variant.minor}.{NEWEST_PATCH[variant.minor]}")


def _containers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") not in ("Deployment", "DaemonSet"):
        return []
    containers: list[dict[str, Any]] = obj["spec"]["template"]["spec"]["containers"]
    return containers


#: The API server rule of an install that names no address (any address on 443 and 6443).
_ANY_API_SERVER = scheduler_egress(EgressSpec())[1]


def with_sentinels(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its containers' images and resources, and its egress rules to the API
    server and to registries, as sentinels."""
    for container in _containers(obj):
        container["image"] = _IMAGES[container["image"]]
        if container["name"] in _RESOURCES:
            container["resources"] = _RESOURCES[container["name"]]
    if obj.get("kind") == "NetworkPolicy" and "egress" in obj["spec"]:
        rules = obj["spec"]["egress"]
        if rules.count(_ANY_API_SERVER) != 1:
            raise AssertionError("the scheduler's egress has no rule to the API server")
        rules[rules.index(_ANY_API_SERVER)] = _EGRESS_API
        rules.append(_EGRESS_REGISTRIES)
    return obj


def _peer_rules(pad: str, values: str, otherwise: list[dict[str, Any]] | None) -> list[str]:
    """A ``range`` over ``values`` (``{cidr, port}`` items), each the rule
    :meth:`EgressPeer.rule` writes, else (``otherwise``) those rules; indented by ``pad``."""

    def lines(rules: list[Any]) -> list[str]:
        return [f"{pad}{line}" for line in to_yaml(rules).splitlines()]

    rule = lines([EgressPeer(_PEER_CIDR, _PEER_PORT).rule()])
    rule = [
        line.replace(_PEER_CIDR, "{{ .cidr | quote }}").replace(str(_PEER_PORT), "{{ int .port }}")
        for line in rule
    ]
    out = [f"{pad}{{{{- range {values} }}}}", *rule]
    if otherwise is not None:
        out += [f"{pad}{{{{- else }}}}", *lines(otherwise)]
    return [*out, f"{pad}{{{{- end }}}}"]


def _scalars(line: str, extra: Mapping[str, str]) -> str:
    for sentinel, expression in (*_SCALARS, (_PULL_NAMESPACE, f"{{{{ {PULL_VARIABLE} }}}}"),
                                 *extra.items()):  # fmt: skip
        line = line.replace(sentinel, expression)
    return line


_LIST_ITEM = re.compile(r"^(?P<indent> *)- (?P<value>.*)$")


def _ranged(pad: str, values: str, before: Sequence[str] = (), item: str = "quote") -> list[str]:
    """List items, one per entry of the values list ``values`` (each through ``item``:
    quoted, or ``toYaml`` where the list is text inside a ConfigMap, so that it reads as
    the generator's YAML writes it: quoted only where YAML needs it), each after the lines
    ``before``."""
    return [
        f"{pad}{{{{- range {values} }}}}",
        *before,
        f"{pad}- {{{{ . | {item} }}}}",
        f"{pad}{{{{- end }}}}",
    ]


_STRATEGY_ARG = re.compile(rf"^(?P<indent> *)strategy: {IN_FLIGHT_STRATEGY}$")
_IN_FLIGHT_ARGS = re.compile(r"^(?P<indent> *)inFlight:$")
_PULL_MODE_ARG = re.compile(r"^(?P<indent> *)pullMode: \S+$")


def _plugin_strategy(lines: Sequence[str]) -> list[str]:
    """The plugin's args (rendered for in-flight) for either strategy: ``strategy`` the
    value's, and the ``inFlight`` block (its ``pullMode`` the value's) under a test of
    in-flight. Lines of other objects pass as they are."""
    out: list[str] = []
    block: str | None = None  # the inFlight block's indent, while inside it
    for line in lines:
        if block is not None:
            if line.startswith(block + " "):
                mode = _PULL_MODE_ARG.match(line)
                out.append(
                    f"{mode['indent']}pullMode: {{{{ .Values.pullMode }}}}" if mode else line
                )
                continue
            out.append(f"{block}{{{{- end }}}}")
            block = None
        arg = _STRATEGY_ARG.match(line)
        if arg is not None:
            out.append(f"{arg['indent']}strategy: {{{{ .Values.strategy }}}}")
            continue
        start = _IN_FLIGHT_ARGS.match(line)
        if start is not None:
            block = start["indent"]
            out += [f'{block}{{{{- if eq .Values.strategy "{IN_FLIGHT_STRATEGY}" }}}}', line]
            continue
        out.append(line)
    if block is not None:
        out.append(f"{block}{{{{- end }}}}")
    return out


def templated(text: str, extra: Mapping[str, str] | None = None) -> str:
    """The YAML of one object with every sentinel replaced by its expression (``extra``:
    more substitutions, sentinel text to expression)."""
    lines = _plugin_strategy(text.splitlines())
    out: list[str] = []
    for number, line in enumerate(lines):
        item = _LIST_ITEM.match(line)
        if item is not None and item["value"] == _EGRESS_API:
            out += _peer_rules(item["indent"], ".Values.egress.apiServer", [_ANY_API_SERVER])
            continue
        if item is not None and item["value"] == _EGRESS_REGISTRIES:
            out += _peer_rules(item["indent"], ".Values.egress.registries", None)
            continue
        if item is not None and item["value"] == _REGISTRY:
            # the extender's "- --allow-registry" (already written) and "- REGISTRY": one
            # pair per value; the plugin's registry.allowRegistries: "- REGISTRY" alone
            flag = [out.pop()] if out and out[-1].strip() == "- --allow-registry" else []
            out += _ranged(
                item["indent"],
                ".Values.extender.allowedRegistries",
                flag,
                "quote" if flag else "toYaml",
            )
            continue
        if item is not None and item["value"] == f"'{_QUORUM}'":
            # the extender's quorum, then layer-locality's --spread (extender_args' rule)
            pad = item["indent"]
            out += [
                f"{pad}- {{{{ .Values.imageQuorum | quote }}}}",
                f'{pad}{{{{- if eq .Values.strategy "{LAYER_LOCALITY_STRATEGY}" }}}}',
                f"{pad}- {{{{ if .Values.extender.spread }}}}--spread"
                "{{ else }}--no-spread{{ end }}",
                f"{pad}{{{{- end }}}}",
                # in-flight's --pull-mode (extender_args' rule)
                f'{pad}{{{{- if eq .Values.strategy "{IN_FLIGHT_STRATEGY}" }}}}',
                f"{pad}- --pull-mode",
                f"{pad}- {{{{ .Values.pullMode | quote }}}}",
                f"{pad}{{{{- end }}}}",
            ]
            continue
        if item is not None and item["value"] == _PULL_FLAG:
            pad = item["indent"]
            out += [
                f"{pad}{{{{- if .Values.extender.pullSecrets.namespaces }}}}",
                line,
                f"{pad}{{{{- end }}}}",
            ]
            continue
        if item is not None and item["value"] == _PULL_SECRET:
            # "resourceNames:" (already written) and its one sentinel item: the names given
            key = out.pop()
            pad = key[: len(key) - len(key.lstrip())]
            out += [
                f"{pad}{{{{- with $.Values.extender.pullSecrets.names }}}}",
                key,
                f"{pad}{{{{- toYaml . | nindent {len(pad)} }}}}",
                f"{pad}{{{{- end }}}}",
            ]
            continue
        if item is not None and item["value"] == _EXTRA_ARG:
            out += _ranged(item["indent"], ".Values.extender.extraArgs")
            continue
        key, sep, value = line.partition(": ")
        if sep and value in _RESOURCES.values():
            name = next(n for n, s in _RESOURCES.items() if s == value)
            pad = len(key) - len(key.lstrip()) + 2
            out.append(f"{key}:")
            out.append(
                f"{' ' * (pad - 2)}  {{{{- toYaml .Values.resources.{RESOURCES_KEYS[name]} "
                f"| nindent {pad} }}}}"
            )
            continue
        line = _scalars(line, extra or {})
        if "chart-sentinel" in line or str(_WEIGHT) in line:
            raise AssertionError(f"line {number + 1}: a sentinel left in {line!r}")
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass(frozen=True, slots=True)
class ConfigTemplate:
    """A variant's ``KubeSchedulerConfiguration`` as a named template: the ConfigMap's text,
    and what the scheduler pod template's checksum annotation hashes."""

    name: str
    body: str

    def define(self) -> str:
        # the body exactly: no whitespace trimmed inside the define
        return f"{{{{- define {json.dumps(self.name)} }}}}{self.body}{{{{ end }}}}\n"

    @property
    def checksum(self) -> str:
        return f"{{{{ include {json.dumps(self.name)} . | sha256sum | quote }}}}"


def config_template(config_text: str) -> tuple[str, ConfigTemplate]:
    """The sentinel config's checksum (as the sentinel Deployment carries it) and its
    named template."""
    checksum = config_checksum(config_text)
    lines: list[str] = []
    for line in _plugin_strategy(config_text.split("\n")):
        item = _LIST_ITEM.match(line)
        if item is not None and item["value"] == _REGISTRY:
            # the plugin's registry.allowRegistries: one item per allowed registry
            lines += _ranged(item["indent"], ".Values.extender.allowedRegistries", item="toYaml")
            continue
        lines.append(_scalars(line, {}))
    body = "\n".join(lines)
    if "chart-sentinel" in body or str(_WEIGHT) in body:
        raise AssertionError(f"a sentinel left in the scheduler config: {body!r}")
    return checksum, ConfigTemplate(
        f"{CONFIG_TEMPLATE_PREFIX}{checksum[:_CONFIG_TEMPLATE_HEX]}", body
    )
