"""YAML as a human would write Kubernetes files: keys in insertion order, block scalars."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line strings (kubeadm patches read like the docs), no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(document: dict[str, Any] | list[Any]) -> str:
    """One YAML document, keys in insertion order (what a human would write)."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False)


def to_yaml_stream(documents: list[dict[str, Any]]) -> str:
    """Several documents separated by ``---`` (one file of a kustomization)."""
    return "---\n".join(to_yaml(document) for document in documents)
