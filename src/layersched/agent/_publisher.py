"""Publishing a node's layers to the API: one ``NodeLayerInventory`` per node.

The agent reads the runtime, builds the object, and applies it server-side (field
manager ``layersched-agent``) only when what it says changed. It reads again promptly
after a pull or a removal (containerd's image events; a short poll where events are not
available), and at least every resync period. API failures back off exponentially with
jitter; reading goes on meanwhile and the newest state is applied when the API is back.

The object is owned by the Node (an ownerReference), so deleting a Node deletes its
layers, and a restarted agent re-applies the same object: nothing is duplicated.

**The agent keeps its own object true.** It remembers the object as the API stored its
last apply (:func:`fingerprint`: everything but metadata, ``observedAt`` included), and
watches that one object (:func:`watch_own_object`). When an event shows the object
differs from it (another writer changed what it says, set ``observedAt`` back so it
looks stale, or deleted it), the loop is woken, publishes the truth again at once, logs
the repair naming the other writer (its field manager) and counts it by cause
(:attr:`PublishStats.repairs`, the agent's ``layersched_agent_repairs_total``). A resync
checks the same way, in case the watch missed it. An object that says what the agent
would say, stamped no earlier than its own (a second agent of the node during a
DaemonSet rollout), is true: it is adopted, not repaired. A writer that keeps changing
the object is answered with one apply per write at most; past :data:`REPAIR_BURST`
repairs within :data:`REPAIR_WINDOW_S`, each next one waits 1 s, doubling to
:data:`REPAIR_HOLD_MAX_S`: two agents that disagree about a node cannot drive each other
into a busy loop, and an administrator's occasional write is still repaired at once.

The object is built within the CRD's limits
(:func:`layersched.core.nodelayersbuilder.build_inventory`): an image past them is left
out, and logged once when it first is, not on every resync.
The loop reports to :class:`~layersched.agent._health.AgentHealth` for the probes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from layersched.core.errors import KubeError
from layersched.core.nodeimages import NodeImage
from layersched.core.nodelayers import DEFAULT_MAX_OBJECT_BYTES, content_hash
from layersched.core.nodelayersbuilder import Omission, build_inventory
from layersched.kube import (
    HTTP_NOT_FOUND,
    node_layers_path,
)

log = logging.getLogger(__name__)

FIELD_MANAGER = "layersched-agent"
#: Re-apply an unchanged object this often, so observedAt shows the agent is alive.
DEFAULT_HEARTBEAT_S = 600.0
#: Why the agent republished an object it had not changed itself: another writer changed
#: what it says, set back its observedAt (the extender then counts it as stale), or
#: deleted it.
CHANGED, STALE, DELETED = "changed", "stale", "deleted"
REPAIR_CAUSES = (CHANGED, STALE, DELETED)
#: More repairs than the burst within the window are a fight with another writer: each
#: next one waits longer (the hold), from the first hold doubling to the longest.
REPAIR_BURST = 10
REPAIR_WINDOW_S = 60.0
REPAIR_HOLD_FIRST_S = 1.0
REPAIR_HOLD_MAX_S = 60.0
#: A stamp this far past the agent's clock is no other agent's (a clock skew allowed).
FUTURE_SKEW = timedelta(seconds=60)


class NodeLayerInventoryApi(Protocol):
    """What the publisher needs of the API (``layersched.kube.KubeClient`` fits)."""

    def get(self, path: str) -> dict[str, Any]: ...

    def apply(
        self, path: str, document: Mapping[str, Any], field_manager: str, *, force: bool = ...
    ) -> dict[str, Any]: ...


def fingerprint(document: Mapping[str, Any]) -> str:
    """A digest of everything an object says, ``observedAt`` included (its metadata and
    status excluded): the agent compares the object in the API with the one the API
    stored from its own last apply, so any other writer's change shows."""
    kept = {k: v for k, v in document.items() if k not in ("metadata", "status")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _other_writers(document: Mapping[str, Any]) -> str:
    """The field managers other than the agent's that last wrote ``document``."""
    entries = (document.get("metadata") or {}).get("managedFields") or []
    names = sorted(
        {
            str(entry.get("manager") or "?")
            for entry in entries
            if isinstance(entry, dict) and entry.get("manager") != FIELD_MANAGER
        }
    )
    return ", ".join(names) or "unknown"


def _observed_at(document: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(document.get("observedAt") or ""))
    except ValueError:
        return None


@dataclass
class PublishStats:
    """What the agent did (logged, and read by tests)."""

    reads: int = 0
    applies: int = 0
    unchanged: int = 0
    api_failures: int = 0
    #: Republishes of an object another writer changed, by cause (REPAIR_CAUSES).
    repairs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REPAIR_CAUSES, 0))
    last_hash: str = ""
    last_applied_at: float = 0.0
    #: Images the last built object left out (the CRD's limits, the size budget).
    omitted: tuple[Omission, ...] = field(default_factory=tuple)


class Publisher:
    """Applies one node's object when its content changed (or the heartbeat is due)."""

    def __init__(
        self,
        kube: NodeLayerInventoryApi,
        node: str,
        *,
        runtime: str,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self._clock = clock
        self.node = node
        self.runtime = runtime
        self.heartbeat_s = heartbeat_s
        self.max_object_bytes = max_object_bytes
        self.stats = PublishStats()
        self._owner: dict[str, Any] | None = None
        self._reported: set[tuple[str, str]] = set()
        #: The object as the API stored the agent's last apply (or held it at start):
        #: its fingerprint and content hash; "" while the agent knows of no object.
        self._held = ""
        self._held_content = ""
        self._held_observed: datetime | None = None
        #: Set when an event showed the object differs from it (the watch's thread).
        self._repair_due = threading.Event()
        #: The last repair, the hold the next one waits (0: none), and until when.
        self._recent_repairs: deque[float] = deque(maxlen=REPAIR_BURST)
        self._repair_hold_s = 0.0
        self._repair_hold_until = 0.0
        #: Held while applying and recording, so the watch never compares an event of
        #: the agent's own apply with what it held before.
        self._lock = threading.Lock()

    def _owner_reference(self) -> dict[str, Any] | None:
        if self._owner is None:
            try:
                node = self.kube.get(f"/api/v1/nodes/{self.node}")
            except KubeError as err:
                if err.status != HTTP_NOT_FOUND:
                    raise
                log.warning("node %s is not registered yet: publishing without an owner", self.node)
                return None
            uid = (node.get("metadata") or {}).get("uid")
            self._owner = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}
        return self._owner

    def _read_published(self) -> dict[str, Any] | None:
        try:
            return self.kube.get(node_layers_path(self.node))
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return None
            raise

    def adopt_published(self) -> None:
        """Remember what the API already holds (after a restart nothing is re-applied
        unless it changed, or its observedAt is older than a heartbeat)."""
        current = self._read_published()
        if current is None:
            return
        with self._lock:
            self._hold(current)
            self.stats.last_hash = self._held_content
        observed = _observed_at(current)
        age_s = (datetime.now(UTC) - observed).total_seconds() if observed else self.heartbeat_s
        # the heartbeat counts from when the object was observed (a stale one is due now)
        self.stats.last_applied_at = self._clock() - max(0.0, age_s)

    def _hold(self, stored: Mapping[str, Any]) -> None:
        self._held = fingerprint(stored)
        self._held_content = content_hash(stored)
        self._held_observed = _observed_at(stored)

    def _is_true(self, current: Mapping[str, Any]) -> bool:
        """Whether ``current`` is what the agent holds, or says the same stamped no
        earlier (then it is held from now on). The lock is held."""
        if fingerprint(current) == self._held:
            return True
        if content_hash(current) != self._held_content or not self._stamped_since(current):
            return False
        self._hold(current)
        return True

    def _stamped_since(self, current: Mapping[str, Any]) -> bool:
        """Whether ``current`` is stamped no earlier than the held object, and not from
        the future."""
        observed = _observed_at(current)
        return (
            observed is not None
            and self._held_observed is not None
            and self._held_observed <= observed <= datetime.now(UTC) + FUTURE_SKEW
        )

    def notice(self, current: Mapping[str, Any] | None) -> bool:
        """An event's object (None: deleted); True when it differs from the object the
        agent last published, and a repair is then due (the watch's thread calls this)."""
        with self._lock:
            if not self._held:
                return False  # nothing published yet: the loop publishes anyway
            if current is not None and self._is_true(current):
                return False
            self._repair_due.set()
            return True

    def repair_wait_s(self) -> float | None:
        """Seconds until a due repair may be made (0: now); None when none is due."""
        if not self._repair_due.is_set():
            return None
        return max(0.0, self._repair_hold_until - self._clock())

    def _check_drift(self) -> tuple[str, str, dict[str, Any] | None] | None:
        """Read the object; (cause, other writers, the object) when it differs from what
        the agent last published, None when it is as published (or nothing was)."""
        current = self._read_published()
        with self._lock:
            if not self._held:
                if current is not None:  # published before this agent knew: adopt it
                    self._hold(current)
                    self.stats.last_hash = self._held_content
                return None
            if current is not None and self._is_true(current):
                return None
            if current is None:
                return DELETED, "", None
            cause = CHANGED if content_hash(current) != self._held_content else STALE
            return cause, _other_writers(current), current

    def _repaired(self, cause: str, by: str) -> None:
        self.stats.repairs[cause] += 1
        now = self._clock()
        fighting = (
            len(self._recent_repairs) == REPAIR_BURST
            and now - self._recent_repairs[0] < REPAIR_WINDOW_S
        )
        self._repair_hold_s = (
            min(REPAIR_HOLD_MAX_S, self._repair_hold_s * 2 or REPAIR_HOLD_FIRST_S)
            if fighting
            else 0.0
        )
        self._recent_repairs.append(now)
        self._repair_hold_until = now + self._repair_hold_s
        log.warning(
            "node %s: its NodeLayerInventory was %s%s behind the agent's back: republished "
            "what the node holds (repairs so far: %d)%s",
            self.node,
            {CHANGED: "changed", STALE: "set stale", DELETED: "deleted"}[cause],
            f" by {by}" if by else "",
            sum(self.stats.repairs.values()),
            f"; another writer keeps changing it: the next repair waits {self._repair_hold_s:.0f} s"
            if fighting
            else "",
        )

    def publish(self, images: Sequence[NodeImage], source: str, *, verify: bool = False) -> bool:
        """Apply the object for ``images`` if it changed; True when applied.

        ``verify`` (every resync), or an event of the own-object watch, first reads what
        the API holds: an object another writer changed, set stale or deleted is
        published again (a repair, counted and logged)."""
        repair: tuple[str, str, dict[str, Any] | None] | None = None
        held_back = self._clock() < self._repair_hold_until and not verify
        if verify or (self._repair_due.is_set() and not held_back):
            self._repair_due.clear()
            repair = self._check_drift()
        built = build_inventory(
            self.node,
            images,
            runtime=self.runtime,
            source=source,
            max_object_bytes=self.max_object_bytes,
        )
        self._report(built.omitted)
        document = built.document
        digest = content_hash(document)
        if repair is not None and repair[2] is not None:
            # another agent of the node got there first: it says what this one would
            current = repair[2]
            with self._lock:
                if content_hash(current) == digest and self._stamped_since(current):
                    self._hold(current)
                    self.stats.last_hash = digest
                    repair = None
        due = self._clock() - self.stats.last_applied_at >= self.heartbeat_s
        if digest == self.stats.last_hash and not due and repair is None:
            self.stats.unchanged += 1
            return False
        owner = self._owner_reference()
        if owner is not None:
            document["metadata"]["ownerReferences"] = [owner]
        with self._lock:
            try:
                stored = self.kube.apply(node_layers_path(self.node), document, FIELD_MANAGER)
            except KubeError:
                # read the Node again next time: the admission rule holds the object to
                # its Node's current uid, which a re-registered Node has changed
                self._owner = None
                if repair is not None:
                    self._repair_due.set()  # still to repair
                raise
            self._hold(stored)
        self.stats.applies += 1
        if repair is not None:
            self._repaired(repair[0], repair[1])
        self.stats.last_hash = digest
        self.stats.last_applied_at = self._clock()
        log.info(
            "node %s: applied %d images, %d distinct layers (%s)%s",
            self.node,
            len(document["images"]),
            len(document["layers"]),
            source,
            f", {document['omittedImages']} left out" if document["truncated"] else "",
        )
        return True

    def _report(self, omitted: tuple[Omission, ...]) -> None:
        """Log each image left out once, when it first is (not on every resync)."""
        self.stats.omitted = omitted
        current = {(o.digest, o.reason) for o in omitted}
        for omission in omitted:
            if (omission.digest, omission.reason) not in self._reported:
                log.warning(
                    "node %s: image %s (%s) left out of the NodeLayerInventory (%s): %s",
                    self.node,
                    omission.image,
                    omission.digest,
                    omission.reason,
                    omission.detail,
                )
        self._reported = current  # one that goes away and comes back is logged again
