"""The chart's ``templates/``: every variant's objects (sentinels substituted), each
distinct object once, under the test of the variants it belongs to and of the value that
turns it on; and ``_helpers.tpl`` (package data, its fields filled in)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources

from layersched.core.strategies.in_flight import NAME as IN_FLIGHT_STRATEGY
from layersched.deploy._chart import (
    CHART_MINORS,
    CHART_OLDEST_MINOR,
    TEMPLATE_HEADER,
    VARIANTS,
    Variant,
    variants_condition,
)
from layersched.deploy._chart_sentinels import (
    PULL_VARIABLE,
    ConfigTemplate,
    config_template,
    sentinel_spec,
    templated,
    with_sentinels,
)
from layersched.deploy._plugin_config import PLUGIN_FRAMEWORK_SINCE_MINOR
from layersched.deploy._rbac import pending_pods_rbac
from layersched.deploy._spec import PLUGIN_STRATEGIES
from layersched.deploy._stack import stack_objects
from layersched.deploy._tree import FILE_ORDER
from layersched.deploy._versions import NEWEST_MINOR, NEWEST_PATCH, UPSTREAM_KUBE_SCHEDULER
from layersched.deploy._workloads import SCHEDULER_CONFIG_FILE
from layersched.deploy._yaml import to_yaml

#: The CRD's file: behind ``crd.install`` (a cluster may hold it from elsewhere).
CRD_FILE = "crd.yaml"
NAMESPACE_FILE = "namespace.yaml"
#: The file of the scheduler's ConfigMap and Deployment (its config's named templates too).
SCHEDULER_FILE = "scheduler.yaml"


_FILE_PRELUDE = (
    '{{- $minor := include "layersched.minor" . | atoi }}\n'
    "{{- $scheduler := .Values.scheduler }}\n"
    "{{- $runtime := .Values.runtime.kind }}\n"
)


def _file_template(
    objects: Sequence[tuple[str, frozenset[Variant], str | None]],
    guard: str | None,
    defines: Sequence[ConfigTemplate] = (),
) -> str:
    """One template file: each object under the test of its variants, and of its own
    value (``objects``' third item: a test on ``.Values``, or None)."""
    parts = [TEMPLATE_HEADER, *(define.define() for define in defines), _FILE_PRELUDE]
    if guard is not None:
        parts.append(f"{{{{- if {guard} }}}}\n")
    for text, variants, when in objects:
        condition = variants_condition(variants)
        if when is not None:
            if condition is not None and not condition.startswith("("):
                condition = f"({condition})"
            condition = when if condition is None else f"and {condition} {when}"
        document = _per_pull_namespace(text) if PULL_VARIABLE in text else f"---\n{text}"
        if condition is None:
            parts.append(document)
        else:
            parts.append(f"{{{{- if {condition} }}}}\n{document}{{{{- end }}}}\n")
    if guard is not None:
        parts.append("{{- end }}\n")
    return "".join(parts)


def _per_pull_namespace(text: str) -> str:
    """An object of a pull-secret namespace (a Role, its binding), once per namespace of
    ``extender.pullSecrets.namespaces`` (inside the ``range``, the values are ``$``'s)."""
    body = text.replace("{{ .Values.", "{{ $.Values.")
    return (
        f"{{{{- range {PULL_VARIABLE} := .Values.extender.pullSecrets.namespaces }}}}\n"
        f"---\n{body}{{{{- end }}}}\n"
    )


#: Files that a value turns off as a whole.
_FILE_GUARDS = {NAMESPACE_FILE: ".Values.createNamespace", CRD_FILE: ".Values.crd.install"}


#: What the extender needs only with one strategy, and the value that asks for it: the
#: right to list and watch pods, with ``in-flight`` (``pending_pods_rbac``).
_STRATEGY_OBJECTS = (("rbac.yaml", IN_FLIGHT_STRATEGY, pending_pods_rbac),)


def templates() -> dict[str, str]:
    """``templates/<file>``: every variant's objects, each distinct object once, in the
    order the variants first render them; the scheduler's configurations as named
    templates in its file; the objects one strategy needs under a test of
    ``strategy``."""
    by_file: dict[str, dict[tuple[str, str | None], set[Variant]]] = {}
    configs: dict[str, ConfigTemplate] = {}
    for variant in VARIANTS:
        spec = sentinel_spec(variant)
        groups = stack_objects(spec)
        for obj in groups[SCHEDULER_FILE]:
            if obj["kind"] == "ConfigMap":
                checksum, template = config_template(obj["data"][SCHEDULER_CONFIG_FILE])
                configs[checksum] = template
        # the annotation's hex, as YAML writes it quoted (when it reads as a number) or bare
        checksums = {
            form: template.checksum
            for checksum, template in configs.items()
            for form in (f"'{checksum}'", checksum)
        }

        strategies = [
            (name, f'(eq .Values.strategy "{strategy}")', obj)
            for name, strategy, render in _STRATEGY_OBJECTS
            for obj in render(replace(spec, strategy=strategy))
        ]
        placed = [(name, None, obj) for name, objects in groups.items() for obj in objects]
        for name, when, obj in [*placed, *strategies]:
            text = templated(to_yaml(with_sentinels(json.loads(json.dumps(obj)))), checksums)
            by_file.setdefault(name, {}).setdefault((text, when), set()).add(variant)
    files = {}
    for name in FILE_ORDER:
        found = by_file.get(name)
        if not found:
            continue
        entries = [(text, frozenset(variants), when) for (text, when), variants in found.items()]
        defines = list(configs.values()) if name == SCHEDULER_FILE else []
        files[f"templates/{name}"] = _file_template(entries, _FILE_GUARDS.get(name), defines)
    return files


#: The helpers' template, package data beside this module (@NAME@ fields filled in).
HELPERS_TEMPLATE = "chart_helpers.tpl"


def helpers() -> str:
    text = resources.files(__package__).joinpath(HELPERS_TEMPLATE).read_text(encoding="utf-8")
    fields = {
        "@OLDEST@": str(CHART_OLDEST_MINOR),
        "@NEWEST@": str(NEWEST_MINOR),
        "@PLUGIN@": str(PLUGIN_FRAMEWORK_SINCE_MINOR[1]),
        "@PATCHES@": " ".join(f'"{m}" "{NEWEST_PATCH[m]}"' for m in CHART_MINORS),
        "@UPSTREAM@": UPSTREAM_KUBE_SCHEDULER,
        "@PLUGIN_STRATEGIES@": " ".join(f'"{name}"' for name in PLUGIN_STRATEGIES),
        "@PLUGIN_STRATEGIES_TEXT@": " or ".join(PLUGIN_STRATEGIES),
    }
    for field, value in fields.items():
        text = text.replace(field, value)
    return TEMPLATE_HEADER + text
