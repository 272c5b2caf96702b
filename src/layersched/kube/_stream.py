"""What a watch or a paged list answers, read under a byte cap: a watch's lines bounded as
they arrive (an event over the cap is never parsed nor held whole: it comes as a
:class:`WatchEvent` with ``oversize`` set, named from its head), each line parsed as an
event (an ERROR event raised), a list page with its items left raw, and of a one-object
page over the cap the list's version, continue token and the object's name
(:class:`Oversize`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from layersched.core.errors import KubeError
from layersched.kube._failures import HTTP_GONE, Gone

#: Of an object skipped for its size, the bytes kept to read its name and version from:
#: the API server writes ``metadata`` first, and ``name`` and ``resourceVersion`` before
#: any label or annotation (a list's own metadata, its ``continue`` token included, comes
#: before its items).
HEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]
    #: Length of the event's JSON line (0: not known), to skip objects over a size cap.
    size_bytes: int = 0
    #: The line was over the watch's byte cap and skipped unparsed: ``object`` holds
    #: only the ``metadata.name`` and ``resourceVersion`` its head gave (either may be
    #: missing), and ``size_bytes`` is how much of it was read before it was dropped.
    oversize: bool = False

    @property
    def resource_version(self) -> str:
        meta = self.object.get("metadata") or {}
        return str(meta.get("resourceVersion") or "")


@dataclass(frozen=True, slots=True)
class Oversize:
    """A listed object over the page bound, skipped unread: its name (from its head;
    "" when the head did not say) and at least how many bytes it is."""

    name: str
    size_bytes: int


@dataclass(slots=True)
class Cut:
    """A line over the cap: its head, and how long it was."""

    head: bytes
    size_bytes: int


def bounded_lines(chunks: Iterator[bytes], max_bytes: int) -> Iterator[bytes | Cut]:
    """The non-blank lines of a byte stream; a line longer than ``max_bytes`` as a
    :class:`Cut` (its head kept, the rest dropped as it arrives: never held whole)."""
    line = bytearray()
    cut: Cut | None = None
    for chunk in chunks:
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            if cut is not None:
                cut.size_bytes += stop - start
            else:
                line += chunk[start:stop]
                if len(line) > max_bytes:
                    cut = Cut(bytes(line[:HEAD_BYTES]), len(line))
                    line = bytearray()
            if end < 0:
                break
            if cut is not None:
                yield cut
            elif line.strip():
                yield bytes(line)
            line, cut, start = bytearray(), None, end + 1
    if cut is not None:
        yield cut
    elif line.strip():
        yield bytes(line)


#: What a skipped object's head says: the watch event's type, and the first name and
#: resourceVersion of an object's metadata (Kubernetes names hold no quote).
_HEAD_TYPE = re.compile(rb'^\s*\{\s*"type"\s*:\s*"([A-Z]+)"')
_HEAD_NAME = re.compile(rb'"metadata"\s*:\s*\{\s*"name"\s*:\s*"([^"\\]{1,253})"')
_HEAD_VERSION = re.compile(rb'"resourceVersion"\s*:\s*"([0-9]{1,32})"')
_ITEMS_START = re.compile(rb'"items"\s*:\s*\[')


def _head_field(pattern: re.Pattern[bytes], head: bytes) -> str:
    found = pattern.search(head)
    return found.group(1).decode("ascii", errors="replace") if found else ""


def oversize_event(cut: Cut, what: str) -> WatchEvent:
    """The stand-in for an event skipped unparsed: its type, name and version."""
    kind = _head_field(_HEAD_TYPE, cut.head)
    if kind in ("", "ERROR"):
        raise KubeError(
            f"{what}: a watch event of {cut.size_bytes}+ bytes that is not an object's event"
        )
    meta = {
        "name": _head_field(_HEAD_NAME, cut.head),
        "resourceVersion": _head_field(_HEAD_VERSION, cut.head),
    }
    return WatchEvent(kind, {"metadata": meta}, cut.size_bytes, oversize=True)


def skipped_page(head: bytes, what: str, max_bytes: int) -> tuple[str, str, str]:
    """Of a one-object page over the bound: the list's resourceVersion and continue
    token (its metadata comes before its items), and the object's name."""
    found = _ITEMS_START.search(head)
    at = found.start() if found else -1
    try:
        if at < 0:
            raise msgspec.DecodeError("no items in the first bytes")
        meta = msgspec.json.decode(head[:at] + b'"items":[]}', type=RawList).metadata
    except msgspec.DecodeError:
        raise KubeError(
            f"{what}: one object is larger than {max_bytes} bytes and the list's metadata "
            "could not be read before it (is this a Kubernetes API server?)"
        ) from None
    return meta.resourceVersion, meta.continue_, _head_field(_HEAD_NAME, head[at:])


def parse_event(line: bytes, what: str) -> WatchEvent:
    try:
        raw = json.loads(line)
    except ValueError:
        raise KubeError(f"{what}: a watch event is not JSON: {line[:120]!r}") from None
    kind = raw.get("type") if isinstance(raw, dict) else None
    obj = raw.get("object") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise KubeError(f"{what}: a watch event lacks type or object: {line[:120]!r}")
    if kind == "ERROR":
        code = obj.get("code")
        message = f"{what}: {obj.get('message') or obj.get('reason') or 'error event'}"
        if code == HTTP_GONE:
            raise Gone(message)
        raise KubeError(message, int(code) if isinstance(code, int) else 0)
    return WatchEvent(kind, obj, len(line))


class ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class RawList(msgspec.Struct):
    """A list response with its items left undecoded."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[msgspec.Raw] | None = None
