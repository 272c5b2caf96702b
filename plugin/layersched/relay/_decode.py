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
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from layersched.cri._gen import api_pb2
from layersched.relay._methods import Method

#: Nested length-delimited fields are tried as messages at most this deep.
MAX_RAW_DEPTH = 16

_WIRE_VARINT = 0
_WIRE_FIXED64 = 1
_WIRE_LEN = 2
_WIRE_FIXED32 = 5


class _RawError(ValueError):
    """The bytes are not a protobuf message."""


def message_type(method: Method, suffix: str) -> type[Message] | None:
    """The subset's ``<Method>Request``/``<Method>Response`` type, if it has one."""
    if not method.known:
        return None
    found = getattr(api_pb2, f"{method.name}{suffix}", None)
    return found if isinstance(found, type) and issubclass(found, Message) else None


def decode(method: Method, suffix: str, data: bytes) -> dict[str, Any]:
    """``data`` (a request when ``suffix`` is ``Request``) in its most readable form."""
    kind = message_type(method, suffix)
    try:
        fields = raw(data)
    except _RawError:
        return {"bytes_base64": base64.b64encode(data).decode()}
    if kind is None:
        return fields
    try:
        message = kind.FromString(data)
    except DecodeError:
        return fields
    named = json_format.MessageToDict(message, preserving_proto_field_name=True)
    declared = {f"#{field.number}" for field in kind.DESCRIPTOR.fields}
    named.update({number: value for number, value in fields.items() if number not in declared})
    return named


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _RawError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _length_delimited(chunk: bytes, depth: int) -> Any:
    with contextlib.suppress(UnicodeDecodeError):
        text = chunk.decode("utf-8")
        if text.isprintable():
            return text
    if depth < MAX_RAW_DEPTH and chunk:
        try:
            return raw(chunk, depth + 1)
        except _RawError:
            pass
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        return {"bytes_base64": base64.b64encode(chunk).decode()}


def raw(data: bytes, depth: int = 0) -> dict[str, Any]:
    """Schema-less decode; raises :class:`_RawError` if ``data`` is not a message."""
    fields: dict[str, Any] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _RawError("field number 0")
        value: Any
        if wire == _WIRE_VARINT:
            value, pos = _varint(data, pos)
        elif wire == _WIRE_FIXED64:
            if pos + 8 > len(data):
                raise _RawError("truncated fixed64")
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == _WIRE_FIXED32:
            if pos + 4 > len(data):
                raise _RawError("truncated fixed32")
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        elif wire == _WIRE_LEN:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise _RawError("truncated length-delimited field")
            value, pos = _length_delimited(data[pos : pos + length], depth), pos + length
        else:
            raise _RawError(f"wire type {wire}")
        name = f"#{number}"
        if name in fields:
            previous = fields[name]
            fields[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            fields[name] = value
    return fields
