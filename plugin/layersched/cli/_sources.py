"""Command-line options shared by commands that need a layer source."""

from __future__ import annotations

import argparse

from layersched.cli._io import read_document
from layersched.core.layers import LayerSource, StaticLayerSource


def add_layer_source_options(parser: argparse.ArgumentParser) -> None:
    """``--layers``, ``--platform`` and ``--insecure-registry``."""
    parser.add_argument(
        "--layers",
        metavar="LAYERS.json",
        help="offline layer source: {image: [{digest, size}, …]}; no network access with it",
    )
    parser.add_argument(
        "--platform",
        default="linux/amd64",
        help="platform to pick from image indexes (default: %(default)s)",
    )
    parser.add_argument(
        "--insecure-registry",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="registry to reach over plain HTTP (repeatable)",
    )


def open_layer_source(args: argparse.Namespace) -> LayerSource:
    """The offline source for ``--layers``, else a registry-backed one."""
    if args.layers:
        return StaticLayerSource.from_json(read_document(args.layers), args.layers)
    from layersched.core.manifest import Platform
    from layersched.registry import RegistryClient, RegistryLayerSource

    client = RegistryClient(
        platform=Platform.parse(args.platform), insecure_hosts=tuple(args.insecure_registry)
    )
    return RegistryLayerSource(client)
