"""The ``NodeLayerInventory`` CustomResourceDefinition (apiextensions.k8s.io/v1).

Its structural OpenAPI schema is what the API server validates every object against:
digests must look like digests, sizes are integers from 0 to a cap, and the lists and
strings are bounded, so a broken or hostile agent cannot store an object the extender
would choke on. Every bound comes from :data:`layersched.core.nodelayers.LIMITS`, the
same object the agent's builder applies, so the agent never builds an object this schema
refuses. What the schema cannot say (an image's layer indexes point into ``layers``) the
extender checks when it reads the object, and ignores the node's object with a warning.

A digest is one a runtime computes: ``sha256:`` and 64 lowercase hex digits, or
``sha512:`` and 128 (:data:`CRD_DIGEST_PATTERN`, at most 135 characters). The parsers
accept any algorithm and length (``DIGEST_PATTERN``); the schema is the bound on what a
hostile agent can store (issue 44: a digest had no length limit).
"""

from __future__ import annotations

from typing import Any

from layersched.core.nodelayers import (
    GROUP,
    KIND,
    LIMITS,
    LIST_KIND,
    OMIT_REASONS,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    SOURCES,
    VERSION,
    Limits,
)

CRD_NAME = f"{PLURAL}.{GROUP}"
#: What a published digest may be (OCI's registered algorithms, lowercase hex as the
#: image spec writes it): the digests containerd and CRI-O compute.
CRD_DIGEST_PATTERN = "^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$"
#: ... and so its length at most ("sha512:" and 128 digits).
CRD_DIGEST_MAX_CHARS = len("sha512:") + 128


def _schema(limits: Limits) -> dict[str, Any]:
    digest = {"type": "string", "pattern": CRD_DIGEST_PATTERN, "maxLength": CRD_DIGEST_MAX_CHARS}
    size = {
        "type": "integer",
        "format": "int64",
        "minimum": 0,
        "maximum": limits.max_layer_size_bytes,
    }
    count = {"type": "integer", "minimum": 0}
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
                "maxLength": limits.max_runtime_chars,
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
                "description": "True when images were left out: past a limit of this "
                "schema, or the smallest ones to bound the object's size.",
            },
            "omittedImages": {**count, "description": "How many images were left out."},
            "omittedByReason": {
                "type": "object",
                "description": "How many images were left out, by why.",
                "properties": {reason: count for reason in OMIT_REASONS},
            },
            "layers": {
                "type": "array",
                "maxItems": limits.max_layers,
                "description": "The node's distinct compressed layers.",
                "items": {
                    "type": "object",
                    "required": ["digest", "sizeBytes"],
                    "properties": {"digest": digest, "sizeBytes": size},
                },
            },
            "images": {
                "type": "array",
                "maxItems": limits.max_images,
                "items": {
                    "type": "object",
                    "required": ["digest", "layers"],
                    "properties": {
                        "names": {
                            "type": "array",
                            "maxItems": limits.max_names_per_image,
                            "items": {"type": "string", "maxLength": limits.max_name_chars},
                        },
                        "digest": digest,
                        "layers": {
                            "type": "array",
                            "maxItems": limits.max_layers_per_image,
                            "description": "Indexes into layers, in manifest order.",
                            "items": {
                                "type": "integer",
                                "minimum": 0,
                                "maximum": limits.max_layers - 1,
                            },
                        },
                    },
                },
            },
        },
    }


def node_layers_crd(limits: Limits = LIMITS) -> dict[str, Any]:
    """The CRD object, ready to create or apply; its schema's bounds are ``limits``."""
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
                    "schema": {"openAPIV3Schema": _schema(limits)},
                    "additionalPrinterColumns": [
                        {"name": "Truncated", "type": "boolean", "jsonPath": ".truncated"},
                        {"name": "Source", "type": "string", "jsonPath": ".source"},
                        {"name": "Observed", "type": "date", "jsonPath": ".observedAt"},
                    ],
                }
            ],
        },
    }
