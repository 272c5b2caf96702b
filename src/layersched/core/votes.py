"""Which layers a pod image has, by agreement between nodes: never one node's word.

A node's NodeLayerInventory is trusted for what the node says about itself (the layers it
holds). It also names, for each image it holds, the image's manifest digest and layers;
the extender uses that to resolve a *pod's* images without asking a registry. That claim
is about an image every node may run, so one node must not be able to make it alone: a
node publishing ``nginx:1.25`` as one huge layer would otherwise make every nginx pod
score that node 100 and the real holders 0 (issue 23).

The rule (docs/inventory.md, "Trust model"): a pod image is matched by its
:func:`~layersched.core.reference.lookup_key` (as kubelet normalises it: ``nginx:1.25`` is
``docker.io/library/nginx:1.25``, a digest reference its digest). Its layers come from the
agents' objects only when the nodes publishing one (digest, layers) answer under that key
are at least ``quorum`` (``--image-quorum``, default 2) AND a strict majority of the nodes
publishing anything under it (issue 30: ten honest holders outvote two liars, where a
count alone let two liars veto them); otherwise the registry is asked, as on a cluster
without agents. A **digest-pinned** pod image (``repo@sha256:…``) names content the
registry alone can confirm, so the nodes' word is taken for it only when **no publisher
dissents** (issue 44: 2 liars beat 1 honest holder whenever the registry could not
answer: private, refused, 429, not yet asked): the extender then asks the registry
(:mod:`~layersched.extender._pod_layers`, whose answer wins once it has one), and the Go
plugin, which asks none, scores the image as unknown. A node votes at most once per
key and answer, and its votes go with its object (replaced, deleted, stale, or its Node
gone). The Go plugin's ``pkg/layers``
(votes.go) holds the same rule; the differential test holds the two equal.

Memory: an answer is kept once, by the sha256 of its content, whoever gives it under
whichever key (issue 30: the Go side copied it per vote).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable

from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.reference import ImageName, is_pinned, lookup_key

#: Nodes that must publish the same layers for a pod image by default.
DEFAULT_IMAGE_QUORUM = 2
#: Lookup keys remembered: the image names of a cluster (a few thousand) fit, and the
#: cache only saves re-parsing them on every republish; kept small, as what it holds is
#: never released (a flood of fresh names only churns it).
LOOKUP_CACHE_SIZE = 8_192
#: The tally is rebuilt once this many more names were dropped than are held (a Python
#: dict never shrinks by itself).
COMPACT_SLACK = 4_096

cached_lookup_key = functools.lru_cache(maxsize=LOOKUP_CACHE_SIZE)(lookup_key)
#: Pod images whose pinning (a digest in the reference) is remembered, so a request parses
#: none it parsed before: a cluster's pod images (a few thousand) fit; bounded, as pods
#: may name any number of distinct images (a flood of fresh names only churns it).
PINNED_CACHE_SIZE = 8_192

pinned = functools.lru_cache(maxsize=PINNED_CACHE_SIZE)(is_pinned)


class Answer:
    """What a node says an image is: its manifest digest and layers, equal (and hashed)
    by the sha256 of that content, so the tally keeps one per content."""

    __slots__ = ("digest", "key", "layers")

    def __init__(self, digest: str, layers: tuple[Layer, ...]) -> None:
        self.digest = digest
        self.layers = layers
        content = hashlib.sha256()
        for text in (digest, *(f"{layer.digest}\0{layer.size_bytes}" for layer in layers)):
            content.update(f"{len(text)}:{text}".encode())
        self.key = content.digest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Answer) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


#: One vote: (platform key, lookup key, answer).
Ballot = tuple[str, str, Answer]


def lookup_keys(image: NodeImage) -> set[str]:
    """The keys a published image is voted under: each name's lookup key, and its
    manifest digest as written (a bare digest is no reference)."""
    return {*(cached_lookup_key(name) for name in image.names), image.digest}


def ballots(key: str, images: Iterable[NodeImage]) -> set[Ballot]:
    """A node's votes: for each image it holds, under each key its names and digest give,
    its (digest, layers) answer; a set, so a node votes once per key and answer."""
    votes: set[Ballot] = set()
    for image in images:
        answer = Answer(image.digest, image.known_layers)
        for lookup in lookup_keys(image):
            votes.add((key, lookup, answer))
    return votes


class ImageVotes:
    """For each (platform key, lookup key), how many nodes give each answer, and how many
    publish anything under it."""

    def __init__(self, quorum: int = DEFAULT_IMAGE_QUORUM) -> None:
        if quorum < 1:
            raise ValueError("the image quorum is at least 1")
        self.quorum = quorum
        self._tally: dict[tuple[str, str], dict[Answer, int]] = {}
        #: distinct nodes voting under each (platform key, lookup key): the majority's
        #: denominator
        self._publishers: dict[tuple[str, str], int] = {}
        self._dropped = 0
        #: Pod images some node published but without agreement: answered by the
        #: registry instead.
        self.without_quorum = 0
        #: ... and pod images answered from the votes.
        self.agreed = 0
        #: per node, the (platform key, images) it last voted with
        self._voted: dict[str, tuple[str, tuple[NodeImage, ...]]] = {}

    def __len__(self) -> int:
        """Lookup keys with at least one vote."""
        return len(self._tally)

    @property
    def voters(self) -> int:
        """Nodes whose votes are cast (:meth:`vote`)."""
        return len(self._voted)

    def vote(self, node: str, key: str, images: tuple[NodeImage, ...] | None) -> None:
        """Node ``node``'s votes follow what it publishes: ``images`` for platform
        ``key`` (the same tuple again changes nothing), or None (nothing: its votes are
        withdrawn)."""
        old = self._voted.pop(node, None)
        new = (key, images) if images is not None else None
        if old is not None and new is not None and old[0] == new[0] and old[1] is new[1]:
            self._voted[node] = old
            return
        self.change(
            ballots(*old) if old is not None else set(),
            ballots(*new) if new is not None else set(),
        )
        if new is not None:
            self._voted[node] = new

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
        was = {(key, lookup) for key, lookup, _ in old}
        now = {(key, lookup) for key, lookup, _ in new}
        for pair in was - now:
            left = self._publishers.get(pair, 0) - 1
            if left > 0:
                self._publishers[pair] = left
            else:
                self._publishers.pop(pair, None)
        for pair in now - was:
            self._publishers[pair] = self._publishers.get(pair, 0) + 1
        if self._dropped > len(self._tally) + COMPACT_SLACK:
            self._tally, self._dropped = dict(self._tally), 0
            self._publishers = dict(self._publishers)

    def layers(self, image: ImageName, key: str) -> tuple[Layer, ...] | None:
        """The layers of pod image ``image`` for platform ``key`` when ``quorum`` nodes, and
        a majority of those publishing under its lookup key (every one of them for a
        digest-pinned image), agree on one answer for it; None otherwise (ask the
        registry)."""
        pair = (key, cached_lookup_key(image))
        answers = self._tally.get(pair)
        if not answers:
            return None
        publishers = self._publishers.get(pair, 0)
        # a pinned image's content: no dissenting publisher (the registry would confirm)
        needed = publishers if pinned(image) else publishers // 2 + 1
        agreed = [
            answer for answer, count in answers.items() if count >= self.quorum and count >= needed
        ]
        if len(agreed) == 1:
            self.agreed += 1
            return agreed[0].layers
        self.without_quorum += 1
        return None
