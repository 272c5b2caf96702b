"""The protobuf wire format, read and written without a schema (what the dump and the
redaction of secrets work on)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

WIRE_VARINT = 0
_WIRE_FIXED64 = 1
WIRE_LEN = 2
_WIRE_FIXED32 = 5


class WireError(ValueError):
    """The bytes are not a protobuf message."""


@dataclass(frozen=True, slots=True)
class WireField:
    """One field as it is on the wire."""

    number: int
    wire: int
    #: The number (varint, fixed32, fixed64) or the bytes (length-delimited).
    value: int | bytes
    #: The field's own bytes, key included: what re-encodes it unchanged.
    encoded: bytes


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> Iterator[WireField]:
    """The fields of ``data`` in wire order; raises :class:`WireError` if it is not a
    message (read lazily: a caller that stops early has checked only what it read)."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == WIRE_VARINT:
            value, pos = read_varint(data, pos)
        elif wire == _WIRE_FIXED64:
            if pos + 8 > len(data):
                raise WireError("truncated fixed64")
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == _WIRE_FIXED32:
            if pos + 4 > len(data):
                raise WireError("truncated fixed32")
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        elif wire == WIRE_LEN:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise WireError("truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        else:
            raise WireError(f"wire type {wire}")
        yield WireField(number, wire, value, data[start:pos])


def encode_varint(value: int) -> bytes:
    """``value`` (0 or more) as a protobuf varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_len(number: int, payload: bytes) -> bytes:
    """Field ``number`` as a length-delimited field holding ``payload``."""
    return encode_varint(number << 3 | WIRE_LEN) + encode_varint(len(payload)) + payload
