"""Which layers a pod image has, by agreement between nodes: never one node's word.

A node's NodeLayerInventory is trusted for what the node says about itself (the layers it
holds). It also names, for each image it holds, the image's manifest digest and layers;
the extender uses that to resolve a *pod's* images without asking a registry. That claim
is about an image every node may run, so one node must not be able to make it alone: a
node publishing ``nginx:1.25`` as one huge layer would otherwise make every nginx pod
score that node 100 and the real holders 0 (issue 23).

The rule (docs/inventory.md, "Trust model"): a pod image's layers come from the agents'
objects only when at least ``quorum`` distinct nodes (``--image-quorum``, default 2)
publish the same layer list for the same manifest digest under that image's name, and no
other (digest, layers) for that name reaches the quorum too; otherwise the registry is
asked, as on a cluster without agents. A node votes at most once per name and answer, and
its votes go with its object (replaced, deleted, stale, or its Node gone).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from layersched.core.errors import LayerschedError
from layersched.core.layers import Layer
from layersched.core.nodelayers import HeldImage
from layersched.core.reference import normalized_image_name

#: Nodes that must publish the same layers for a pod image by default.
DEFAULT_IMAGE_QUORUM = 2
#: Lookup names remembered: the image names of a cluster (a few thousand) fit, and the
#: cache only saves re-normalising them on every republish; kept small, as what it
#: holds is never released (a flood of fresh names only churns it).
LOOKUP_CACHE_SIZE = 8_192
#: The tally is rebuilt once this many more names were dropped than are held (a Python
#: dict never shrinks by itself).
COMPACT_SLACK = 4_096

#: What a node says an image is: its manifest digest and its layers.
Answer = tuple[str, tuple[Layer, ...]]
#: One vote: (platform key, lookup name, answer).
Ballot = tuple[str, str, Answer]


@functools.lru_cache(maxsize=LOOKUP_CACHE_SIZE)
def lookup_names(image: str) -> tuple[str, ...]:
    """``image`` as written and normalised (``busybox`` -> ``docker.io/library/busybox:
    latest``), and its digest alone for a digest reference."""
    names = [image]
    try:
        normalized = normalized_image_name(image)
    except LayerschedError:
        normalized = image
    if normalized != image:
        names.append(normalized)
    if "@" in image:
        names.append(image.rpartition("@")[2])
    return tuple(names)


def ballots(key: str, images: Iterable[HeldImage]) -> set[Ballot]:
    """A node's votes: for each image it holds, under each name it gives it (and its
    digest), its (digest, layers) answer; a set, so a node votes once per name and answer."""
    votes: set[Ballot] = set()
    for image in images:
        answer = (image.digest, image.layers)
        for name in (*image.names, image.digest):
            for lookup in lookup_names(name):
                votes.add((key, lookup, answer))
    return votes


class ImageVotes:
    """For each (platform key, lookup name), how many nodes give each answer."""

    def __init__(self, quorum: int = DEFAULT_IMAGE_QUORUM) -> None:
        if quorum < 1:
            raise ValueError("the image quorum is at least 1")
        self.quorum = quorum
        self._tally: dict[tuple[str, str], dict[Answer, int]] = {}
        self._dropped = 0
        #: Pod images some node published but without a quorum (or with two answers at
        #: it): answered by the registry instead.
        self.without_quorum = 0
        #: ... and pod images answered from the votes.
        self.agreed = 0

    def __len__(self) -> int:
        """Lookup names with at least one vote."""
        return len(self._tally)

    def change(self, old: set[Ballot], new: set[Ballot]) -> None:
        """One node's votes go from ``old`` to ``new``."""
        for key, lookup, answer in old - new:
            answers = self._tally.get((key, lookup))
            if answers is None:  # pragma: no cover - a bug: every vote withdrawn was cast
                continue
            left = answers.get(answer, 0) - 1
            if left > 0:
                answers[answer] = left
            else:
                answers.pop(answer, None)
                if not answers:
                    del self._tally[(key, lookup)]
                    self._dropped += 1
        for key, lookup, answer in new - old:
            answers = self._tally.setdefault((key, lookup), {})
            answers[answer] = answers.get(answer, 0) + 1
        if self._dropped > len(self._tally) + COMPACT_SLACK:
            self._tally, self._dropped = dict(self._tally), 0

    def layers(self, image: str, key: str) -> tuple[Layer, ...] | None:
        """The layers of pod image ``image`` for platform ``key`` when ``quorum`` nodes
        agree on one answer for it; None otherwise (ask the registry)."""
        agreed: set[Answer] = set()
        published = False
        for lookup in lookup_names(image):
            answers = self._tally.get((key, lookup))
            if answers:
                published = True
                agreed.update(answer for answer, count in answers.items() if count >= self.quorum)
        if len(agreed) == 1:
            self.agreed += 1
            return next(iter(agreed))[1]
        if published:
            self.without_quorum += 1
        return None
