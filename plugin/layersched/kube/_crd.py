"""The ``NodeLayerInventory`` CustomResourceDefinition (apiextensions.k8s.io/v1).

Its structural OpenAPI schema is what the API server validates every object against:
digests must look like digests, sizes must be non-negative integers, and the lists are
bounded, so a broken or hostile agent cannot store an object the extender would choke
on. What the schema cannot say (an image's layer indexes point into ``layers``) the
extender checks when it reads the object, and ignores the node's object with a warning.
"""

from __future__ import annotations

from typing import Any

from layersched.core.nodelayers import (
    GROUP,
    KIND,
    LIST_KIND,
    MAX_IMAGES,
    MAX_LAYERS,
    MAX_NAMES_PER_IMAGE,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    SOURCES,
    VERSION,
)

#: A layer or manifest digest: algorithm, colon, hex (sha256 and sha512).
DIGEST_PATTERN = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$"
#: An image name as a runtime reports it can be long (a registry, a path, a digest).
MAX_NAME_CHARS = 512
#: Layers per image: OCI allows any number; 1,000 is far past real images (~127 max
#: under overlayfs's lower-dir limit).
MAX_LAYERS_PER_IMAGE = 1_000
CRD_NAME = f"{PLURAL}.{GROUP}"


def _schema() -> dict[str, Any]:
    digest = {"type": "string", "pattern": DIGEST_PATTERN}
    size = {"type": "integer", "format": "int64", "minimum": 0}
    return {
        "type": "object",
        "description": "The images a node's runtime holds and their distinct compressed "
        "layers, published by the layersched node agent.",
        "required": ["layers", "images"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "runtime": {
                "type": "string",
                "maxLength": 128,
                "description": "The runtime read, as the kubelet names it (containerd://1.6.20).",
            },
            "source": {
                "type": "string",
                "enum": list(SOURCES),
                "description": "Where the layers came from.",
            },
            "observedAt": {
                "type": "string",
                "format": "date-time",
                "description": "When the agent last read the runtime.",
            },
            "truncated": {
                "type": "boolean",
                "description": "True when the smallest images were left out to bound the size.",
            },
            "omittedImages": {"type": "integer", "minimum": 0},
            "layers": {
                "type": "array",
                "maxItems": MAX_LAYERS,
                "description": "The node's distinct compressed layers.",
                "items": {
                    "type": "object",
                    "required": ["digest", "sizeBytes"],
                    "properties": {"digest": digest, "sizeBytes": size},
                },
            },
            "images": {
                "type": "array",
                "maxItems": MAX_IMAGES,
                "items": {
                    "type": "object",
                    "required": ["digest", "layers"],
                    "properties": {
                        "names": {
                            "type": "array",
                            "maxItems": MAX_NAMES_PER_IMAGE,
                            "items": {"type": "string", "maxLength": MAX_NAME_CHARS},
                        },
                        "digest": digest,
                        "layers": {
                            "type": "array",
                            "maxItems": MAX_LAYERS_PER_IMAGE,
                            "description": "Indexes into layers, in manifest order.",
                            "items": {"type": "integer", "minimum": 0, "maximum": MAX_LAYERS - 1},
                        },
                    },
                },
            },
        },
    }


def node_layers_crd() -> dict[str, Any]:
    """The CRD object, ready to create or apply."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "layersched"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["layersched"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _schema()},
                    "additionalPrinterColumns": [
                        {"name": "Truncated", "type": "boolean", "jsonPath": ".truncated"},
                        {"name": "Source", "type": "string", "jsonPath": ".source"},
                        {"name": "Observed", "type": "date", "jsonPath": ".observedAt"},
                    ],
                }
            ],
        },
    }
