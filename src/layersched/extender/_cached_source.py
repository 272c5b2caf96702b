"""A request's node images through a resolver's cache, never blocking (:class:`CachedSource`:
cached layers, else a background resolution started and a failure), and the order a node
image's names are tried in: digest references first (:func:`preferred_order`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from layersched.core.errors import LayerResolutionError
from layersched.core.layers import Layer
from layersched.core.reference import ImageName, is_pinned
from layersched.registry import NEGATIVE_TTL_S, Entry


def preferred_name(names: Sequence[ImageName]) -> ImageName:
    """The name to resolve a node image by: a digest reference (immutable, and one
    manifest GET by digest) if kubelet reported one, else the first name."""
    return next((n for n in names if is_pinned(n)), names[0])


def preferred_order(names: Sequence[ImageName]) -> list[ImageName]:
    """A node image's names in the order they are tried: digest references first (kubelet
    lists them first anyway), then the others as listed."""
    pinned = [name for name in names if is_pinned(name)]
    return pinned + [name for name in names if name not in pinned] if pinned else list(names)


class CachedSource:
    """A LayerSource view of a resolver's cache for node images (a NodeImageSource):
    ``lookup`` answers from the cache (None: nothing cached), ``warm`` resolves a name in
    the background."""

    def __init__(
        self,
        lookup: Callable[[ImageName], Entry | None],
        warm: Callable[[ImageName], None],
    ) -> None:
        self._lookup = lookup
        self._warm = warm

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self.resolve_names((image,))

    def resolve_names(self, names: Sequence[ImageName]) -> tuple[Layer, ...]:
        """The cached layers of the first of ``names`` (a digest first) that has an answer
        of its own; else warm the first name not tried yet and fail. A name answers only
        for itself: another name's answer is never this one's (issue 44)."""
        if not names:
            raise LayerResolutionError("a node image without names cannot be resolved")
        lookup = self._lookup
        untried: ImageName | None = None
        ordered = preferred_order(names)
        for name in ordered:
            entry = lookup(name)
            if entry is None:
                untried = untried or name
            elif entry.layers is not None:
                return entry.layers
        if untried is None:
            raise LayerResolutionError(
                f"resolving {ordered[0]!r} failed recently; retried after {NEGATIVE_TTL_S:.0f} s"
            )
        self._warm(untried)
        raise LayerResolutionError(f"layers of {untried!r} are not cached yet (being resolved)")
