"""The store: parsed objects applied to the inventory on the event loop, under the budget.

The Go port's ``store`` (inventorywatch/watch.go) applies what the list/watch loop reads
to its ``layers.Index``; this applies what :mod:`~layersched.extender.watch._watch` parsed
(:mod:`~layersched.extender.watch._parse`) to one
:class:`~layersched.core.layerindex.LayerIndex`, node by node
(:meth:`~LayerIndex.upsert_node`, :meth:`~LayerIndex.remove_node`), never by
a rebuild, and always on the event loop's thread, so a scoring pass never sees a
half-applied change.

A node's entry is its Node's facts with, when its agent's NodeLayerInventory is held and
fresh, the layers it publishes; otherwise its status images, resolved through the layer
source by the warm-up worker (:mod:`~layersched.extender.watch._warmup`). It also holds:

* **expiry**: a held object whose ``observedAt`` passes the maximum age goes stale (one
  timer per node on the shared :class:`~layersched.extender.watch._timers.TimerHeap`); its node
  falls back;
* **orphans**: the names of objects whose Node did not exist, so that the object is read
  again (one GET) if the Node appears, the least recent forgotten first;
* **the budget's evictions**: an object condemned to make room for a smaller one is
  dropped here, where it is applied;
* **the votes** (:class:`~layersched.core.votes.ImageVotes`), which follow each
  node's held object.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from layersched.core.budget import NOTHING, Held, IndexPools
from layersched.core.layerindex import LayerIndex
from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage, NodeInfo
from layersched.core.reference import ImageName
from layersched.core.votes import ImageVotes
from layersched.extender._platforms import Platforms
from layersched.extender.watch._ignored import (
    IGNORED_REASONS,
    OVER_BUDGET,
    STALE,
    UNKNOWN_NODE,
    Ignored,
    IgnoredLog,
)
from layersched.extender.watch._parse import (
    LAYERS,
    NODES,
    HeldLayers,
    Parsed,
    ParsedNode,
    over_budget,
    stale_message,
)
from layersched.extender.watch._timers import TimerHeap
from layersched.extender.watch._warmup import FETCH, WARM

log = logging.getLogger(__name__)

#: Names of objects whose Node did not exist, remembered so that the object is read
#: again (one GET) if the Node appears; the least recent go first.
MAX_ORPHANS = 10_000


class Worker(Protocol):
    """What the store asks of the warm-up worker (:class:`._warmup.Warmup`)."""

    def want(self, job: str, name: str) -> None: ...

    def forget(self, name: str, gone: NodeInfo | None) -> None: ...

    def resolved(
        self, node: str, key: str, names: Sequence[ImageName]
    ) -> tuple[Layer, ...] | None: ...


class Store:
    """What the watches last saw, per node, and the inventory built from it (loop only,
    but :attr:`nodes`, :attr:`layers` and :meth:`is_node`, which the parser reads)."""

    def __init__(
        self,
        pools: IndexPools,
        votes: ImageVotes,
        worker: Worker,
        timers: TimerHeap,
        post: Callable[..., None],
        ignored_log: IgnoredLog,
        platforms: Platforms | None,
        max_age_s: float,
    ) -> None:
        self._pools = pools
        self._votes = votes
        self._worker = worker
        self._timers = timers
        self._post = post
        self._ignored_log = ignored_log
        self._platforms = platforms
        #: How long an object may go without a new ``observedAt`` (for the warning).
        self.max_age_s = max_age_s
        self.index: LayerIndex | None = None
        #: Per node index, its platform key (None: every node is the default platform).
        self.platform_keys: list[str] | None = None
        self.nodes: dict[str, ParsedNode] = {}
        self.layers: dict[str, HeldLayers] = {}
        self._keys: dict[str, str] = {}
        #: nodes whose object is stale (scored as without an agent until it is refreshed)
        self.stale: set[str] = set()
        #: names of objects whose Node did not exist (read again if it appears)
        self.orphans: OrderedDict[str, None] = OrderedDict()
        #: the names of the first Node list, before the inventory is installed
        self.listed_nodes: set[str] = set()
        #: objects ignored, by (resource, reason)
        self.ignored = {(kind, reason): 0 for kind in (NODES, LAYERS) for reason in IGNORED_REASONS}
        #: Objects that went stale while held (their node fell back).
        self.expired = 0
        #: Called on the loop after a node's entry changed (tests and metrics hook in).
        self.on_change: Callable[[str], None] | None = None
        #: A platform got or lost its source: every node's key is read again.
        self._rekey = False

    def tracked(self) -> dict[str, int]:
        """How many entries each piece of per-node state holds."""
        return {
            "nodes": len(self.nodes),
            "layers": len(self.layers),
            "keys": len(self._keys),
            "stale": len(self.stale),
            "orphans": len(self.orphans),
        }

    def is_node(self, name: str) -> bool:
        """Whether Node ``name`` exists (as the first list, or the loop, last saw)."""
        return name in (self.nodes if self.index is not None else self.listed_nodes)

    def install(self, nodes: dict[str, Parsed], layers: dict[str, Parsed]) -> None:
        """On the loop: the first inventory, from both collections' first lists."""
        self.index = LayerIndex()
        self.replace_all(NODES, nodes)
        self.replace_all(LAYERS, layers)

    def replace_all(self, kind: str, items: dict[str, Parsed]) -> None:
        """A full list: apply what differs from what is held, drop what is gone."""
        for name, parsed in items.items():
            self.apply(kind, name, parsed)
        if kind == NODES:
            held = set(self.nodes)
        else:  # the objects held, and those ignored whose names are remembered
            held = set(self.layers) | self.stale | set(self.orphans)
        for gone in held - set(items):
            self.apply(kind, gone, None)

    def apply(self, kind: str, name: str, parsed: Parsed | None) -> None:
        """One object added or changed (``parsed``) or deleted (None), then the node."""
        if parsed is not None:
            condemned = self._condemned(parsed)
            if condemned is not parsed and isinstance(parsed, ParsedNode | HeldLayers):
                self._pools.release(parsed.held)  # never applied
            parsed = condemned
        if isinstance(parsed, ParsedNode) and parsed.reason:
            self.ignored[(kind, parsed.reason)] += 1
            self._ignored_log.warn(parsed.reason, parsed.message)
        if isinstance(parsed, Ignored):
            if parsed.reason == UNKNOWN_NODE and name in self.nodes:
                # its Node arrived between the parse and now: read the object again
                self._worker.want(FETCH, name)
                return
            self._count_ignored(kind, name, parsed)
        if not name:  # an object whose name could not be read: counted only
            return
        if kind == NODES:
            self._apply_node(name, parsed if isinstance(parsed, ParsedNode) else None)
        else:
            self._apply_layers(name, parsed)

    def apply_fetched(self, name: str, parsed: Parsed) -> None:
        """An object read again because its Node appeared: applied unless the watch
        brought a newer one meanwhile, or the node went again."""
        if name in self.layers or name not in self.nodes:
            if isinstance(parsed, ParsedNode | HeldLayers):
                self._pools.release(parsed.held)
            return
        self.apply(LAYERS, name, parsed)

    def evict(self, victim: Held) -> None:
        """On the loop: drop ``victim`` if it is still applied (a smaller object took its
        room): a NodeLayerInventory's node falls back, a Node keeps no images. One not
        applied yet is dropped when it is (:meth:`_condemned`)."""
        kind, _, name = victim.holder.partition("/")
        if kind == LAYERS:
            held = self.layers.get(name)
            if held is not None and held.held is victim:
                self.apply(LAYERS, name, over_budget(self._pools, _dropping(name)))
        elif kind == NODES:
            node = self.nodes.get(name)
            if node is not None and node.held is victim:
                self.apply(NODES, name, self._condemned(node))

    def refresh(self, name: str) -> None:
        """On the loop: node ``name``'s entry (and votes) from what is held for it now."""
        inventory = self.index
        if inventory is None:
            return
        node = self.nodes.get(name)
        published = self.layers.get(name) if node is not None else None
        self._votes.vote(
            name,
            node.key if node is not None else "",
            published.held.images if published is not None else None,
        )
        if node is None:  # no Node (yet, or any more): not a candidate
            if inventory.remove_node(name):
                self._keys.pop(name, None)
                self._reindex_keys()
            return
        info, key = node.info, node.key
        if published is not None:
            images = published.held.node_images
        else:
            images = tuple(self._resolved_image(name, image, key) for image in info.images)
        was = inventory.index_of(name)
        inventory.upsert_node(dataclasses.replace(info, images=images))
        if was is None or self._keys.get(name) != key:
            self._keys[name] = key
            self._reindex_keys()
        if self.on_change is not None:
            self.on_change(name)

    def _count_ignored(self, kind: str, name: str, ignored: Ignored) -> None:
        self.ignored[(kind, ignored.reason)] += 1
        if ignored.reason == UNKNOWN_NODE:
            self._remember_orphan(name)
            log.debug("%s", ignored.message)
        else:
            self._ignored_log.warn(ignored.reason, ignored.message)

    def _condemned(self, parsed: Parsed) -> Parsed:
        """``parsed`` as applied: itself, or if its charge was condemned to make room
        for a smaller object, a Node without images (an inventory: ignored). Releases
        nothing: the caller does."""
        if isinstance(parsed, ParsedNode | HeldLayers) and self._pools.condemned(parsed.held):
            if isinstance(parsed, HeldLayers):
                what = f"ignoring the layers published for node {parsed.node}"
                return over_budget(self._pools, what)
            message = (
                f"node {parsed.info.name}: its status images give their room to smaller objects"
            )
            bare = dataclasses.replace(parsed.info, images=())
            return ParsedNode(bare, parsed.key, NOTHING, OVER_BUDGET, message)
        return parsed

    def _apply_node(self, name: str, parsed: ParsedNode | None) -> None:
        old = self.nodes.pop(name, None)
        dropped: HeldLayers | None = None
        platforms = self._platforms
        if platforms is not None and platforms.note(
            old.key if old is not None else None, parsed.key if parsed is not None else None
        ):
            self._rekey = True  # a platform got or lost its source: every node's key
        if parsed is not None:
            self.nodes[name] = parsed
            if old is None and name in self.orphans:
                del self.orphans[name]
                self._worker.want(FETCH, name)  # its object came before it: read it again
        else:  # deleted (or unreadable): not a candidate, and nothing of it is kept
            dropped = self.layers.pop(name, None)
            if dropped is not None:
                self._remember_orphan(name)  # its object may outlive it a moment
            self.stale.discard(name)
            self._worker.forget(name, old.info if old is not None else None)
            self._timers.cancel(("expire", name))
        self._pools.expected_nodes = max(1, len(self.nodes))
        self.refresh(name)
        if self._rekey:
            self._rekey = False
            self._reindex_keys()
        if old is not None:
            self._pools.release(old.held)
        if dropped is not None:
            self._pools.release(dropped.held)

    def _apply_layers(self, name: str, parsed: Parsed | None) -> None:
        old = self.layers.pop(name, None)
        self.stale.discard(name)
        if isinstance(parsed, HeldLayers) and name not in self.nodes:
            # its Node went between the parse and now
            self.ignored[(LAYERS, UNKNOWN_NODE)] += 1
            self._remember_orphan(name)
            self._pools.release(parsed.held)
            parsed = None
        if isinstance(parsed, HeldLayers):
            self.orphans.pop(name, None)
            self.layers[name] = parsed
            due_s = time.monotonic() + (parsed.fresh_until_s - time.time())
            self._timers.schedule(
                ("expire", name), due_s, functools.partial(self._post, self._expire, name, parsed)
            )
        else:
            self._timers.cancel(("expire", name))
            if isinstance(parsed, Ignored) and parsed.reason == STALE and name in self.nodes:
                self.stale.add(name)
            elif parsed is None:
                self.orphans.pop(name, None)
        self.refresh(name)
        if old is not None:
            self._pools.release(old.held)
        if name not in self.layers and name in self.nodes:
            self._worker.want(WARM, name)  # it falls back to its status images

    def _expire(self, name: str, held: HeldLayers) -> None:
        """``held``'s maximum age passed: unless its agent published since, its node
        falls back as if it had no agent."""
        if self.layers.get(name) is not held:
            return
        del self.layers[name]
        self.stale.add(name)
        self.expired += 1
        self.ignored[(LAYERS, STALE)] += 1
        self._ignored_log.warn(STALE, stale_message(name, held.observed_at, self.max_age_s))
        self.refresh(name)
        self._pools.release(held.held)
        self._worker.want(WARM, name)

    def _remember_orphan(self, name: str) -> None:
        self.orphans[name] = None
        self.orphans.move_to_end(name)
        while len(self.orphans) > MAX_ORPHANS:
            self.orphans.popitem(last=False)

    def _reindex_keys(self) -> None:
        inventory = self.index
        if self._platforms is None or inventory is None:
            self.platform_keys = None
            return
        default = self._platforms.default_key
        effective = self._platforms.effective  # a node reported alone: the default's
        # a new list object: the extender's memo of platform groups keys on identity
        self.platform_keys = [effective(self._keys.get(n.name, default)) for n in inventory.nodes]

    def _resolved_image(self, node: str, image: NodeImage, key: str) -> NodeImage:
        """On the loop: node ``node``'s status image with the layers its own names resolved
        to in platform ``key`` (names only until then: no registry call ever blocks the
        loop)."""
        if image.layers is not None or not image.names:
            return image
        layers = self._worker.resolved(node, key, image.names)
        return image if layers is None else self._pools.resolved_status(image, layers)


def _dropping(name: str) -> str:
    return f"dropping the layers of node {name}"
