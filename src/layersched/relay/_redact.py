"""Secrets taken out of CRI messages before the dump shows them, and the methods that carry
them.

**Redacted in every dump mode** (named fields or schema-less), with or without
``--allow-sensitive-dumps``:

======================================  =========  ==============================================
method                                  message    fields
======================================  =========  ==============================================
``ImageService/PullImage``              request    ``auth`` (``AuthConfig``): ``username``,
                                                   ``password``, ``auth``, ``identity_token``,
                                                   ``registry_token``, and any field it gains
                                                   (only ``server_address`` is kept)
``RuntimeService/CreateContainer``      request    ``config.envs[].value``: environment values,
                                                   through which Secrets reach containers (the
                                                   names are kept)
``RuntimeService/ContainerStatus``      response   ``info`` values: the verbose answer is the
                                                   runtime's JSON of the container, its
                                                   environment included
``RuntimeService/Status``               response   ``info`` values: containerd's verbose
                                                   ``config`` holds its registry credentials
                                                   (``registry.configs.*.auth``)
``RuntimeService/PodSandboxStatus``     response   ``info`` values: the sandbox's spec and
                                                   the pod's annotations
``ImageService/ImageStatus``            response   ``info`` values: the image's spec
``Exec``, ``Attach``, ``PortForward``   response   ``url``: a one-time token for the runtime's
                                                   streaming server
======================================  =========  ==============================================

The rules are keyed by ``Service/Method`` whatever the CRI version:
``runtime.v1alpha2`` and ``runtime.v1`` give these messages the same field
numbers (a test holds the table against both upstream ``api.proto`` files).
The rewrite works on the wire format, by field number, before anything is
decoded, so the named form (protobuf's JSON mapping) and the schema-less one
(``#<number>``) are both made from bytes that no longer hold the secret.

A redacted value becomes the string ``[redacted]``: it shows that the field
was there, not how long it was or any digest of it (a short password's hash is
as good as the password). A field the rules expect to be a message but that
does not parse as one is redacted whole; a message of a method with rules that
does not parse at all is not shown (:data:`UNREADABLE`).

Every verbose ``info`` map of the CRI is in the table (issue 30: the relay
dumped containerd's registry credentials through ``Status``): a test holds the
table against every ``map<string, string> info`` of the upstream ``api.proto``.

**Sensitive methods** (:func:`is_sensitive`): every method but those of
:data:`FULL_DUMP_METHODS`, an allow-list of calls that carry neither a verbose
``info`` map nor anything a pod's spec or annotations put there (a pod's
``last-applied-configuration`` annotation holds its environment, and sandbox,
container and stats messages carry annotations). Whatever the selectors say,
they are dumped in full only when the relay was started with
``--allow-sensitive-dumps``: ``CreateContainer``'s arguments hold expanded
``$(VAR)`` references to Secret-fed variables, and a redaction by field number
is only as good as the schema it was written for.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from layersched.relay._methods import IMAGE_SERVICE, KNOWN_METHODS, RUNTIME_SERVICE, Method
from layersched.relay._wire import WireError, encode_len, fields

#: What a redacted value becomes.
REDACTED = "[redacted]"
#: What the dump shows for a message that carries secrets but does not parse.
UNREADABLE: Mapping[str, Any] = {
    "redacted": "the message does not parse as protobuf, and this method carries secrets"
}
_REDACTED_BYTES = REDACTED.encode()


class Action(enum.Enum):
    KEEP = "keep"
    REDACT = "redact"


@dataclass(frozen=True, slots=True)
class Shape:
    """What becomes of each field of one message type."""

    #: The message type's name in the CRI's ``api.proto``.
    name: str
    #: Field number -> (field name in ``api.proto``, what to do or the nested message's shape).
    fields: Mapping[int, tuple[str, Action | Shape]] = field(default_factory=dict)
    #: What to do with fields not listed (a message made of secrets redacts fields it gains).
    others: Action = Action.KEEP


_AUTH_CONFIG = Shape(
    "AuthConfig",
    {
        1: ("username", Action.REDACT),
        2: ("password", Action.REDACT),
        3: ("auth", Action.REDACT),
        4: ("server_address", Action.KEEP),
        5: ("identity_token", Action.REDACT),
        6: ("registry_token", Action.REDACT),
    },
    others=Action.REDACT,
)
_ENV = Shape("KeyValue", {1: ("key", Action.KEEP), 2: ("value", Action.REDACT)}, Action.REDACT)
#: A map<string, string> entry, as protobuf encodes it.
_MAP_ENTRY = Shape("map entry", {1: ("key", Action.KEEP), 2: ("value", Action.REDACT)})
_STREAM_URL = {1: ("url", Action.REDACT)}

#: (``Service/Method``, ``Request`` or ``Response``) -> what to redact.
RULES: Mapping[tuple[str, str], Shape] = {
    (f"{IMAGE_SERVICE}/PullImage", "Request"): Shape(
        "PullImageRequest", {2: ("auth", _AUTH_CONFIG)}
    ),
    (f"{RUNTIME_SERVICE}/CreateContainer", "Request"): Shape(
        "CreateContainerRequest",
        {2: ("config", Shape("ContainerConfig", {6: ("envs", _ENV)}))},
    ),
    (f"{RUNTIME_SERVICE}/ContainerStatus", "Response"): Shape(
        "ContainerStatusResponse", {2: ("info", _MAP_ENTRY)}
    ),
    (f"{RUNTIME_SERVICE}/Status", "Response"): Shape("StatusResponse", {2: ("info", _MAP_ENTRY)}),
    (f"{RUNTIME_SERVICE}/PodSandboxStatus", "Response"): Shape(
        "PodSandboxStatusResponse", {2: ("info", _MAP_ENTRY)}
    ),
    (f"{IMAGE_SERVICE}/ImageStatus", "Response"): Shape(
        "ImageStatusResponse", {2: ("info", _MAP_ENTRY)}
    ),
    (f"{RUNTIME_SERVICE}/Exec", "Response"): Shape("ExecResponse", _STREAM_URL),
    (f"{RUNTIME_SERVICE}/Attach", "Response"): Shape("AttachResponse", _STREAM_URL),
    (f"{RUNTIME_SERVICE}/PortForward", "Response"): Shape("PortForwardResponse", _STREAM_URL),
}

#: The methods that may be dumped in full without ``--allow-sensitive-dumps``: their
#: messages hold ids, image names and digests, sizes and the runtime's own settings,
#: no verbose ``info`` and nothing from a pod's spec or annotations.
FULL_DUMP_METHODS = frozenset(
    [f"{RUNTIME_SERVICE}/{name}" for name in (
        "Version", "StartContainer", "StopContainer", "RemoveContainer", "StopPodSandbox",
        "RemovePodSandbox", "ReopenContainerLog", "RuntimeConfig",
    )]
    + [f"{IMAGE_SERVICE}/{name}" for name in ("ListImages", "RemoveImage", "ImageFsInfo")]
)  # fmt: skip
#: Known methods whose full dump needs ``--allow-sensitive-dumps``: all the others.
SENSITIVE_METHODS = KNOWN_METHODS - FULL_DUMP_METHODS


def is_sensitive(method: Method) -> bool:
    """Whether a full dump of ``method`` needs ``--allow-sensitive-dumps`` (every method
    not on the allow-list :data:`FULL_DUMP_METHODS`, unknown ones included)."""
    return not method.known or method.short not in FULL_DUMP_METHODS


def _rewrite(data: bytes, shape: Shape) -> bytes:
    """``data`` with the fields ``shape`` redacts replaced; raises WireError."""
    out = bytearray()
    for found in fields(data):
        listed = shape.fields.get(found.number)
        action = listed[1] if listed is not None else shape.others
        if action is Action.KEEP:
            out += found.encoded
        elif isinstance(action, Shape) and isinstance(found.value, bytes):
            try:
                out += encode_len(found.number, _rewrite(found.value, action))
            except WireError:  # not the message it should be: all of it goes
                out += encode_len(found.number, _REDACTED_BYTES)
        else:  # redacted, or a number where a message should be
            out += encode_len(found.number, _REDACTED_BYTES)
    return bytes(out)


def redact(method: Method, suffix: str, data: bytes) -> bytes | None:
    """``data`` (a ``suffix`` = ``Request`` or ``Response`` of ``method``) without its
    secrets; None when the method carries secrets and ``data`` is not a message."""
    shape = RULES.get((method.short, suffix))
    if shape is None:
        return data
    try:
        return _rewrite(data, shape)
    except WireError:
        return None
