"""The pod and Node lookups of the per-node rule, through the API, with bounded caches.

* **A pod's node** is cached by the pod's uid for as long as the entry stays among the
  :data:`DEFAULT_MAX_PODS` most recently used: a pod's ``spec.nodeName`` never changes once
  set and a uid is never reused, and the API server has already checked, when it
  authenticated the token, that the pod of that uid still exists (a deleted pod's token
  is refused: pkg/serviceaccount/claims.go). One GET per agent pod, not per write.
* **A Node's uid** is cached for :data:`DEFAULT_NODE_TTL_S`: an agent writes at most a few
  times a minute, so a deleted Node is noticed within that bound, and the object's owner
  reference lets the garbage collector remove anything written in between.

Only a 404 means "does not exist"; any other failure (403: the webhook's RBAC; 5xx; no
answer) is :class:`LookupFailed`, never a refusal for the wrong reason. Thread-safe: the
server calls it from a small pool of threads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from layersched.admission._review import LookupFailed, Missing
from layersched.core.errors import KubeError
from layersched.kube import HTTP_NOT_FOUND, node_path, pod_path

#: Agent pods remembered (one per node: 5,000 is Kubernetes' supported cluster size).
DEFAULT_MAX_PODS = 5_000
#: Nodes remembered, and for how long a Node's uid is trusted without asking again.
DEFAULT_MAX_NODES = 5_000
DEFAULT_NODE_TTL_S = 30.0


class Getter(Protocol):
    """What the lookups need of the API (``layersched.kube.KubeClient`` fits)."""

    def get(self, path: str) -> dict[str, Any]: ...


@dataclass
class LookupStats:
    """Counters read by the metrics: API calls and cache hits, by kind."""

    api_calls: dict[str, int] = field(default_factory=lambda: {"pod": 0, "node": 0})
    cache_hits: dict[str, int] = field(default_factory=lambda: {"pod": 0, "node": 0})
    failures: dict[str, int] = field(default_factory=lambda: {"pod": 0, "node": 0})


class ApiLookup:
    """:class:`layersched.admission.ClusterLookup` over the API server."""

    def __init__(
        self,
        kube: Getter,
        *,
        max_pods: int = DEFAULT_MAX_PODS,
        max_nodes: int = DEFAULT_MAX_NODES,
        node_ttl_s: float = DEFAULT_NODE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._max_pods = max_pods
        self._max_nodes = max_nodes
        self._node_ttl_s = node_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        #: pod uid -> (namespace, name, node)
        self._pods: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        #: node name -> (uid, when it expires)
        self._nodes: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.stats = LookupStats()

    def _get(self, kind: str, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None on 404; LookupFailed on any other failure."""
        with self._lock:
            self.stats.api_calls[kind] += 1
        try:
            return self._kube.get(path)
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return None
            with self._lock:
                self.stats.failures[kind] += 1
            raise LookupFailed(str(err)) from None

    def pod_node(self, namespace: str, name: str, uid: str) -> str:
        with self._lock:
            cached = self._pods.get(uid)
            if cached is not None and cached[:2] == (namespace, name):
                self._pods.move_to_end(uid)
                self.stats.cache_hits["pod"] += 1
                return cached[2]
        try:
            path = pod_path(namespace, name)
        except KubeError as err:
            raise Missing(
                f"its token names pod {namespace}/{name!r}, which is not a pod name ({err})"
            ) from None
        pod = self._get("pod", path)
        if pod is None:
            raise Missing(f"pod {namespace}/{name} (its token's pod) does not exist")
        meta = pod.get("metadata") or {}
        if meta.get("uid") != uid:
            raise Missing(
                f"pod {namespace}/{name} has uid {meta.get('uid')!r}, not {uid!r} as its token "
                "says: the token's pod is gone"
            )
        node = (pod.get("spec") or {}).get("nodeName")
        if not isinstance(node, str) or not node:
            raise Missing(f"pod {namespace}/{name} is not bound to a node")
        with self._lock:
            self._pods[uid] = (namespace, name, node)
            self._pods.move_to_end(uid)
            while len(self._pods) > self._max_pods:
                self._pods.popitem(last=False)
        return node

    def node_uid(self, name: str) -> str:
        now = self._clock()
        with self._lock:
            cached = self._nodes.get(name)
            if cached is not None and cached[1] > now:
                self._nodes.move_to_end(name)
                self.stats.cache_hits["node"] += 1
                return cached[0]
        try:
            path = node_path(name)
        except KubeError as err:
            raise Missing(f"{name!r} is not a Node name ({err})") from None
        node = self._get("node", path)
        if node is None:
            with self._lock:
                self._nodes.pop(name, None)
            raise Missing(f"Node {name!r} does not exist")
        uid = (node.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            raise LookupFailed(f"Node {name!r} as the API returned it has no uid")
        with self._lock:
            self._nodes[name] = (uid, now + self._node_ttl_s)
            self._nodes.move_to_end(name)
            while len(self._nodes) > self._max_nodes:
                self._nodes.popitem(last=False)
        return uid

    def sizes(self) -> tuple[int, int]:
        """Cached pods and Nodes (for the metrics)."""
        with self._lock:
            return len(self._pods), len(self._nodes)
