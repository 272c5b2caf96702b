"""The pods bound to nodes whose containers have not started: the pulls in flight that
``in-flight`` scoring counts (``layersched.core.inflight``; docs/in-flight.md).

With ``--strategy in-flight --watch`` the extender lists and watches the pods a field
selector narrows to those bound and Pending (:data:`PENDING_PODS_SELECTOR`): a pod enters
when it is bound, and the API server sends its deletion from the watch as soon as it
leaves Pending. :class:`PodParser` reads each on the watch's thread
(:func:`~layersched.core.boundpod.pending_images`: the images it still waits for, and
since when it is bound), and :class:`PendingPods` applies it on the event loop: the
images' layers come from what the nodes agree on or the layer cache (never a registry
call there: an image not cached yet is resolved in the background and the pod's layers
filled in on a retry), into the strategy's
:class:`~layersched.core.inflight.PendingPulls`, and the node's backlog is summed there
and then, so that a request only reads it.

**Bounds.** Pods over the watch's byte cap are skipped; the pending pulls hold at most
``PendingPulls.max_pods`` pods (more are refused and counted), each with at most
:data:`~layersched.core.inflight.MAX_LAYERS_PER_PENDING_POD` layers; pods waiting for
their layers are retried at most :data:`MAX_RETRIED_PODS` at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from layersched.core.boundpod import bound_at_s, decode_bound_pod, pending_images
from layersched.core.errors import InputError
from layersched.core.inflight import PendingPull, PendingPulls
from layersched.core.layers import Layer
from layersched.core.reference import ImageName
from layersched.extender.watch._ignored import MALFORMED, TOO_LARGE, Ignored
from layersched.extender.watch._parse import MAX_OBJECT_BYTES
from layersched.kube import Oversize

log = logging.getLogger(__name__)

#: The watched collection's name (metrics' ``resource``).
PODS = "pods"
#: Bound pods that have not left Pending: the only ones whose pulls may be in flight.
PENDING_PODS_SELECTOR = "spec.nodeName!=,status.phase=Pending"
#: Pods whose images' layers were not all known when applied, retried each period.
MAX_RETRIED_PODS = 1_024
RETRY_PERIOD_S = 1.0
#: Not pending (any more): the store discards it.
NOT_PENDING = "not_pending"


@dataclass(frozen=True, slots=True)
class ParsedPod:
    """A bound pod as the pending pulls need it."""

    node: str
    uid: str
    #: When it was bound (its PodScheduled condition), or None: when first seen.
    bound_at_s: float | None
    #: The images it still waits for (never empty: a pod waiting for none is not pending).
    images: tuple[ImageName, ...]


#: What the pod watch's thread hands the loop for one pod.
ParsedOrNot = ParsedPod | Ignored


class _PodMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _PodName(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)


def pod_key(obj: object) -> str:
    """A pod's watch key: ``namespace/name`` ("" without a name)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return ""
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return ""
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


class PodParser:
    """Watched pods as :class:`ParsedPod` (or why not), on the watch's thread."""

    def parse(
        self, kind: str, obj: Mapping[str, Any] | bytes, size_bytes: int, name: str = ""
    ) -> ParsedOrNot:
        """A pod as the pending pulls need it, or :data:`NOT_PENDING`; a malformed one is
        ignored (never raised)."""
        name = name or pod_key(obj)
        try:
            pod = decode_bound_pod(obj, f"pod {name}")
            images = pending_images(pod)
            if not images or pod.spec is None:
                return Ignored(NOT_PENDING, "")
            uid = pod.metadata.uid or name
            return ParsedPod(pod.spec.nodeName, uid, bound_at_s(pod), images)
        except InputError as err:
            return Ignored(MALFORMED, f"ignoring pod {name}: {err}")
        except Exception as err:  # a hostile object must not end the watch
            log.debug("parsing pod %s", name, exc_info=True)
            return Ignored(MALFORMED, f"ignoring pod {name}: {type(err).__name__}: {err}")

    def parse_raw(self, kind: str, raw: msgspec.Raw | Oversize) -> tuple[str, ParsedOrNot]:
        """A listed pod, undecoded yet, and its key (over the cap: skipped by its length)."""
        if isinstance(raw, Oversize):
            return raw.name, self.oversize(kind, raw.name, raw.size_bytes)
        data = bytes(raw)
        try:
            meta = msgspec.json.decode(data, type=_PodName).metadata
        except msgspec.DecodeError:
            return "", Ignored(MALFORMED, "ignoring a listed pod that is not a JSON object")
        key = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
        if len(data) > MAX_OBJECT_BYTES:
            return key, self.oversize(kind, key, len(data))
        return key, self.parse(kind, data, len(data), key)

    def oversize(self, kind: str, name: str, size_bytes: int) -> ParsedOrNot:
        """A pod over the byte cap (etcd keeps none that large): ignored."""
        return Ignored(TOO_LARGE, f"ignoring pod {name}: {size_bytes} bytes, over the cap")

    def drop(self, parsed: object) -> None:
        """Nothing of a parsed pod is pooled."""


class PendingPods:
    """The watched pending pods applied to the strategy's pending pulls, on the loop.

    ``layers_of(node, images)`` gives the images' distinct layers on ``node`` and whether
    all of them were known; ``changed(node)`` sums the node's backlog again;
    ``clock`` is epoch seconds (bind times are)."""

    def __init__(
        self,
        pending: PendingPulls,
        layers_of: Callable[[str, Sequence[ImageName]], tuple[tuple[Layer, ...], bool]],
        changed: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pending = pending
        self._layers_of = layers_of
        self._changed = changed
        self._clock = clock
        #: watch key -> (uid, node) of the pods held
        self._held: dict[str, tuple[str, str]] = {}
        #: watch key -> the parsed pod, for pods whose layers were not all known
        self._incomplete: dict[str, ParsedPod] = {}
        #: uid -> when first seen, for pods that do not say when they were bound
        self._first_seen: dict[str, float] = {}
        #: Pods ignored as malformed or too large.
        self.ignored = 0

    def __len__(self) -> int:
        return len(self._held)

    @property
    def incomplete(self) -> int:
        """Pods held whose images' layers are not all known yet."""
        return len(self._incomplete)

    def apply(self, kind: str, key: str, parsed: ParsedOrNot | None) -> None:
        """One pod added or changed (``parsed``), or deleted (None)."""
        if isinstance(parsed, Ignored) and parsed.reason != NOT_PENDING:
            self.ignored += 1
            log.debug("%s", parsed.message)
        if not key:
            return
        if isinstance(parsed, ParsedPod):
            self._put(key, parsed)
        else:
            self._drop(key)

    def replace_all(self, kind: str, items: Mapping[str, ParsedOrNot]) -> None:
        """A full list: apply each, drop what is gone."""
        for key, parsed in items.items():
            self.apply(kind, key, parsed)
        for gone in set(self._held) - set(items):
            self._drop(gone)

    def retry(self) -> None:
        """Apply again the pods whose layers were not all known (the layer cache may have
        them now)."""
        for key, parsed in list(self._incomplete.items())[:MAX_RETRIED_PODS]:
            self._put(key, parsed)

    def node_changed(self, node: str) -> None:
        """``node``'s held layers changed: its backlog is summed again."""
        self.pending.node_changed(node)
        self._changed(node)

    def _put(self, key: str, parsed: ParsedPod) -> None:
        was = self._held.get(key)
        if was is not None and was[0] != parsed.uid:
            self._drop(key)  # another pod of the same name
        bound_s = parsed.bound_at_s
        if bound_s is None:
            bound_s = self._first_seen.setdefault(parsed.uid, self._clock())
        layers, complete = self._layers_of(parsed.node, parsed.images)
        if not self.pending.put(parsed.node, PendingPull(parsed.uid, bound_s, layers)):
            self._incomplete.pop(key, None)
            self._first_seen.pop(parsed.uid, None)
            return  # refused for the bound: counted there
        self._held[key] = (parsed.uid, parsed.node)
        if complete:
            self._incomplete.pop(key, None)
        elif key in self._incomplete or len(self._incomplete) < MAX_RETRIED_PODS:
            self._incomplete[key] = parsed
        if was is not None and was[1] != parsed.node:
            self._changed(was[1])
        self._changed(parsed.node)

    def _drop(self, key: str) -> None:
        self._incomplete.pop(key, None)
        held = self._held.pop(key, None)
        if held is None:
            return
        uid, node = held
        self._first_seen.pop(uid, None)
        self.pending.discard(uid)
        self._changed(node)

    def collect(self) -> Iterator[Metric]:
        """``layersched_extender_pending_*`` at each scrape."""
        held = GaugeMetricFamily(
            "layersched_extender_pending_pods",
            "Pods bound to a node whose containers have not started, counted as pulls in "
            "flight (in-flight scoring).",
        )
        held.add_metric([], float(len(self.pending)))
        waiting = GaugeMetricFamily(
            "layersched_extender_pending_pods_unresolved",
            "Pending pods some of whose images' layers are not known yet (resolved in the "
            "background, applied again every second).",
        )
        waiting.add_metric([], float(len(self._incomplete)))
        refused = CounterMetricFamily(
            "layersched_extender_pending_pods_refused",
            "Pending pods not counted because the bound on pending pods was reached.",
        )
        refused.add_metric([], float(self.pending.refused))
        ignored = CounterMetricFamily(
            "layersched_extender_pending_pods_ignored",
            "Watched pods ignored as malformed or over the byte cap.",
        )
        ignored.add_metric([], float(self.ignored))
        yield from (held, waiting, refused, ignored)
