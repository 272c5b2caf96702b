"""Readable forms of CRI messages for the dump.

A message whose type is in layersched's CRI subset (``cri/api.proto``) is shown
with its field names, as ``protobuf``'s JSON mapping writes it; its top-level
fields the subset does not declare (kubelet's ``PullImageRequest.sandbox_config``,
field 3) are added schema-less under ``#<number>``. A message of a method
outside the subset is shown schema-less throughout, like ``protoc
--decode_raw``: ``{"#1": ..., "#2": [...]}`` keyed by field number, a
length-delimited field shown as text when it is printable UTF-8, else as a
nested message when it parses as one, else as base64. (Without a schema this
is a guess: a nested message whose bytes are all printable shows as text.)

Secrets are taken out before either form is made (:mod:`._redact`): the bytes
of a message of a method that carries them are rewritten first, so both forms
show ``[redacted]`` where a credential was.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from layersched.cri._gen import api_pb2
from layersched.relay._methods import Method
from layersched.relay._redact import UNREADABLE, redact
from layersched.relay._wire import WireError, fields

#: Nested length-delimited fields are tried as messages at most this deep.
MAX_RAW_DEPTH = 16


def message_type(method: Method, suffix: str) -> type[Message] | None:
    """The subset's ``<Method>Request``/``<Method>Response`` type, if it has one."""
    if not method.known:
        return None
    found = getattr(api_pb2, f"{method.name}{suffix}", None)
    return found if isinstance(found, type) and issubclass(found, Message) else None


def decode(method: Method, suffix: str, data: bytes) -> dict[str, Any]:
    """``data`` (a request when ``suffix`` is ``Request``) in its most readable form, with
    its secrets redacted."""
    redacted = redact(method, suffix, data)
    if redacted is None:
        return dict(UNREADABLE)
    data = redacted
    kind = message_type(method, suffix)
    try:
        shown = raw(data)
    except WireError:
        return {"bytes_base64": base64.b64encode(data).decode()}
    if kind is None:
        return shown
    try:
        message = kind.FromString(data)
    except DecodeError:
        return shown
    named = json_format.MessageToDict(message, preserving_proto_field_name=True)
    declared = {f"#{field.number}" for field in kind.DESCRIPTOR.fields}
    named.update({number: value for number, value in shown.items() if number not in declared})
    return named


def _length_delimited(chunk: bytes, depth: int) -> Any:
    with contextlib.suppress(UnicodeDecodeError):
        text = chunk.decode("utf-8")
        if text.isprintable():
            return text
    if depth < MAX_RAW_DEPTH and chunk:
        try:
            return raw(chunk, depth + 1)
        except WireError:
            pass
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        return {"bytes_base64": base64.b64encode(chunk).decode()}


def raw(data: bytes, depth: int = 0) -> dict[str, Any]:
    """Schema-less decode; raises :class:`WireError` if ``data`` is not a message."""
    shown: dict[str, Any] = {}
    for field in fields(data):
        value: Any = field.value
        if isinstance(value, bytes):
            value = _length_delimited(value, depth)
        name = f"#{field.number}"
        if name in shown:
            previous = shown[name]
            shown[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            shown[name] = value
    return shown
