"""What the layer cache holds, and what each piece of it costs: an answer (:class:`Entry`:
layers, or a failure kept as text, its expiry and digest), one digest's layer tuple shared
by its tags (:class:`SharedLayers`), what a fetch finds (:class:`Fetched`) from a source
that can also tell a tag's digest (:class:`DigestSource`), and the bytes each costs,
measured with tracemalloc (tests/unit/test_layer_cache_memory.py holds the charges to
them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from layersched.core.layers import Layer
from layersched.core.reference import ImageName, ImageReference

#: A failure's reason is kept to this many characters (a registry's error body, a long
#: name: the rest says nothing the first 300 characters did not).
MAX_ERROR_CHARS = 300
#: What an entry costs beyond its strings, measured with tracemalloc on CPython 3.11
#: (tests/unit/test_layer_cache_memory.py holds the charge to it): the Entry, its expiry,
#: its slot in the cache's LRU dict. Measured at 180-200; charged with a margin, as the
#: dicts grow in steps and a test suite's other allocations move the measure by ~2%.
ENTRY_BYTES = 224
#: ... while it waits in an expiry order (a tag, a failure): its slot there.
EXPIRY_BYTES = 100
#: ... for a layer tuple (its header), and per layer (the Layer, its size, its tuple slot)
#: beyond its digest string.
LAYERS_BYTES = 60
LAYER_BYTES = 90
#: ... for one digest's shared record (the dict slot and its list), beyond the tuple.
SHARED_BYTES = 110


def text_bytes(text: str) -> int:
    """What ``text`` costs as a Python string (its object, every character included)."""
    return sys.getsizeof(text)


def layers_cost_bytes(layers: tuple[Layer, ...]) -> int:
    """What a layer tuple costs, its Layers and their digests included."""
    return LAYERS_BYTES + sum(LAYER_BYTES + text_bytes(layer.digest) for layer in layers)


def error_text(error: BaseException | str | None) -> str:
    """A failure as the cache keeps it: its message, cut to :data:`MAX_ERROR_CHARS` (never
    the exception, which holds its cause, traceback and frames)."""
    text = error if isinstance(error, str) else str(error) if error is not None else "failed"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a fetch found: the image's layers, and the manifest digest when known."""

    layers: tuple[Layer, ...]
    digest: str | None = None


@runtime_checkable
class DigestSource(Protocol):
    """A layer source that also tells the digest a name points to, cheaply (a registry:
    ``HEAD``), so that a tag is revalidated without fetching its manifest again."""

    def fetch(self, ref: ImageReference) -> Fetched:
        """The image's layers and manifest digest; LayschedError subclasses on failure."""
        ...

    def current_digest(self, ref: ImageReference) -> str | None:
        """The digest ``ref`` points to now, or None if the registry does not say."""
        ...


class SharedLayers:
    """One digest's layer tuple, shared by the entries of its tags (and its digest
    reference), and how many share it."""

    __slots__ = ("count", "digest", "layers")

    def __init__(self, digest: str, layers: tuple[Layer, ...]) -> None:
        self.digest = digest
        self.layers = layers
        self.count = 0

    @property
    def cost_bytes(self) -> int:
        return SHARED_BYTES + text_bytes(self.digest) + layers_cost_bytes(self.layers)


class Entry:
    """One cached answer: layers (None: the last attempt failed), when it expires, why it
    failed (text), the manifest digest when known, and whether its layers are the tuple
    its digest's tags share (charged once, with that record)."""

    __slots__ = ("digest", "error", "expires_at", "layers", "shared")

    def __init__(
        self,
        layers: tuple[Layer, ...] | None,
        expires_at: float,
        error: str | None,
        digest: str | None,
        shared: bool = False,
    ) -> None:
        self.layers = layers
        self.expires_at = expires_at
        self.error = error
        self.digest = digest
        self.shared = shared


def entry_cost_bytes(image: ImageName, entry: Entry) -> int:
    """What ``entry`` costs under ``image`` (its shared layers are charged with their
    digest's record, once for every tag of it)."""
    cost = ENTRY_BYTES + text_bytes(image)
    if entry.error is not None:
        cost += text_bytes(entry.error)
    if not entry.shared:
        if entry.layers is not None:
            cost += layers_cost_bytes(entry.layers)
        if entry.digest is not None:
            cost += text_bytes(entry.digest)
    return cost
