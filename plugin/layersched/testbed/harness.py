"""The local driver's harness: it plays kube-scheduler and the kubelet over the real
protocols.

* **Filter**: a pod fits a node when its cpu/memory requests fit the node's
  free allocatable (pods in the scenario request a whole node).
* **Score**: one HTTP ``POST /prioritize`` to the real ``layersched extender``
  for the strategy under test, in full-``Nodes`` mode, each Node's
  ``status.images`` built by the node agent from the node's CRI image list.
  Equal scores are broken by a seeded random choice, as kube-scheduler picks
  among equal scores.
* **Bind and start**: a CRI ``PullImage`` on the chosen node. The pull's wall
  time is measured around the call; the bytes are those the registry really
  sent to the node's address, read from the registry's access log (not the
  manifest).
* **Delete**: frees the node's resources; the image stays in its cache.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import httpx
import tenacity

from layersched.agent import build_node
from layersched.core.errors import InputError, TestbedError
from layersched.cri import CRIClient, CRIImage
from layersched.testbed.local import NodeInfo, TestbedInventory
from layersched.testbed.quantity import parse_quantity
from layersched.testbed.scenario import Placement, Pull

log = logging.getLogger(__name__)

#: Resources the filter step compares (requests against free allocatable).
FILTERED_RESOURCES = ("cpu", "memory")
#: kube-scheduler's default extender ``httpTimeout``; the harness waits no longer.
EXTENDER_TIMEOUT_S = 30.0
#: The registry writes an access-log line just after a response completes; a pull
#: returns after unpacking, so lines settle within moments. The log counts as settled
#: once it has not grown for one poll interval; bound the wait anyway.
LOG_SETTLE_TIMEOUT_S = 5.0
LOG_SETTLE_POLL_S = 0.2
# Combined Log Format: IP - user [time] "METHOD PATH PROTO" STATUS BYTES "referer" "agent"
_ACCESS_LINE = re.compile(
    r'^(?P<ip>\S+) \S+ \S+ \[[^\]]*\] "[^"]*" (?P<status>\d{3}) (?P<bytes>\d+|-)'
)


class RegistryAccessLog:
    """Bytes the registry sent to an address, from its access log, since a mark."""

    def __init__(
        self,
        path: Path,
        settle_poll_s: float = LOG_SETTLE_POLL_S,
        settle_timeout_s: float = LOG_SETTLE_TIMEOUT_S,
    ) -> None:
        self.path = path
        self.settle_poll_s = settle_poll_s
        self.settle_timeout_s = settle_timeout_s

    def mark(self) -> int:
        """The current end of the log (an offset to count from)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _bytes_since(self, offset: int, address: str) -> tuple[int, int]:
        total = lines = 0
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return 0, 0
        with f:
            f.seek(offset)
            for raw in f:
                match = _ACCESS_LINE.match(raw.decode("utf-8", "replace"))
                if match and match["ip"] == address:
                    lines += 1
                    total += 0 if match["bytes"] == "-" else int(match["bytes"])
        return total, lines

    def wait_settled(self) -> bool:
        """Wait until the log has not grown for one poll interval; False on timeout.

        The first look only records the size: a verdict needs two looks a poll apart.
        """
        sizes: list[int] = []

        @tenacity.retry(
            stop=tenacity.stop_after_delay(self.settle_timeout_s),
            wait=tenacity.wait_fixed(self.settle_poll_s),
            retry=tenacity.retry_if_exception_type(AssertionError),
            reraise=True,
        )
        def unchanged_for_a_poll() -> None:
            sizes.append(self.mark())
            assert len(sizes) > 1, "first look: size recorded"
            assert sizes[-1] == sizes[-2], f"{self.path} grew to {sizes[-1]} B"

        try:
            unchanged_for_a_poll()
        except AssertionError:
            return False
        return True

    def bytes_since(self, offset: int, address: str) -> int:
        """Bytes served to ``address`` after ``offset``, once the log stops growing."""
        if not self.wait_settled():
            log.warning(
                "registry access log %s kept growing for %.1f s; counting what is there",
                self.path,
                self.settle_timeout_s,
            )
        return self._bytes_since(offset, address)[0]


class ImageRuntime(Protocol):
    """The CRI image calls the harness makes on a node (:class:`CRIClient` fits)."""

    def list_images(self) -> list[CRIImage]: ...
    def pull_image(self, ref: str, annotations: Mapping[str, str] | None = None) -> str: ...
    def remove_image(self, ref: str) -> None: ...
    def close(self) -> None: ...


def fits(free: Mapping[str, Decimal], requests: Mapping[str, Decimal]) -> bool:
    """The filter step: every request fits the node's free allocatable (missing = 0)."""
    return all(amount <= free.get(resource, Decimal(0)) for resource, amount in requests.items())


def choose_node(scores: Mapping[str, int], rng: random.Random) -> str:
    """The highest-scored node; among equal best scores a seeded random pick.

    kube-scheduler's ``selectHost`` also picks at random among the nodes sharing the
    top score; sorting the names first makes the pick depend on the seed only.
    """
    if not scores:
        raise TestbedError("no node was scored: the extender answered an empty list")
    best = max(scores.values())
    return rng.choice(sorted(node for node, score in scores.items() if score == best))


def extender_args(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``ExtenderArgs`` as kube-scheduler sends it with ``nodeCacheCapable: false``.

    Full v1 Nodes (a NodeList) and no ``NodeNames``; the keys are capitalised since
    the upstream Go types have no JSON tags.
    """
    return {
        "Pod": dict(pod),
        "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": [dict(n) for n in nodes]},
        "NodeNames": None,
    }


@dataclass(slots=True)
class _NodeState:
    node: NodeInfo
    cri: ImageRuntime
    free: dict[str, Decimal] = field(default_factory=dict)
    pods: dict[str, dict[str, Decimal]] = field(default_factory=dict)


def pod_document(name: str, image: str, requests: Mapping[str, str]) -> dict[str, Any]:
    """A v1 Pod requesting ``requests`` with one container running ``image``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "resources": {"requests": dict(requests)}}
            ]
        },
    }


class LocalDriver:
    """Scenario driver for the local testbed (see the module docstring)."""

    name = "local"

    def __init__(
        self,
        testbed: TestbedInventory,
        extenders: Mapping[str, str],
        seed: int = 0,
        max_images: int = 50,
        *,
        runtime: Callable[[str], ImageRuntime] = CRIClient,
        http: httpx.Client | None = None,
        access_log: RegistryAccessLog | None = None,
    ) -> None:
        """``runtime`` opens a node's CRI endpoint; ``http`` calls the extenders."""
        self.testbed = testbed
        self.extenders = dict(extenders)
        self.rng = random.Random(seed)
        self.max_images = max_images
        self.access_log = access_log or RegistryAccessLog(Path(testbed.registry.access_log))
        self.http = http or httpx.Client(timeout=EXTENDER_TIMEOUT_S)
        self.state = {n.name: _NodeState(n, runtime(n.cri_endpoint)) for n in testbed.nodes}
        self._reset_resources()

    def close(self) -> None:
        """Close the HTTP and gRPC channels."""
        self.http.close()
        for st in self.state.values():
            st.cri.close()

    # ---------------------------------------------------------------- driver
    def reset(self) -> None:
        """Forget every pod and remove every image from every node (empty caches)."""
        for st in self.state.values():
            for image in st.cri.list_images():
                st.cri.remove_image(image.id)
            if st.cri.list_images():
                raise TestbedError(f"node {st.node.name}: images remain after removing them all")
        self._reset_resources()

    def schedule(self, pod: str, image: str, strategy: str) -> Placement:
        """Filter, score through the extender, bind (pull) and measure."""
        node_requests = self._whole_node_requests()
        request = {
            r: parse_quantity(q, f"pod {pod} requests.{r}") for r, q in node_requests.items()
        }
        fitting = [st for st in self.state.values() if fits(st.free, request)]
        if not fitting:
            raise TestbedError(f"pod {pod}: no node has room (every node is taken)")
        pod_doc = pod_document(pod, image, node_requests)
        scores = self._prioritize(strategy, pod_doc, fitting)
        unknown = sorted(set(scores) - {st.node.name for st in fitting})
        if unknown:
            raise TestbedError(
                f"extender for {strategy} scored node(s) {', '.join(unknown)} it was not sent"
            )
        chosen = choose_node(scores, self.rng)
        st = self.state[chosen]
        for resource, amount in request.items():
            st.free[resource] -= amount
        st.pods[pod] = request
        pull = self._pull(st, pod, image)
        log.info(
            "%s: %s -> %s (scores %s), pulled %d B in %.2f s",
            strategy,
            pod,
            chosen,
            scores,
            pull.bytes,
            pull.seconds,
        )
        return Placement(node=chosen, scores=scores, pull=pull)

    def delete(self, pod: str) -> None:
        """Free the pod's resources; its image stays cached on the node."""
        for st in self.state.values():
            request = st.pods.pop(pod, None)
            if request is not None:
                for resource, amount in request.items():
                    st.free[resource] += amount
                return
        raise TestbedError(f"pod {pod} is not running anywhere")

    # --------------------------------------------------------------- helpers
    def _reset_resources(self) -> None:
        for st in self.state.values():
            st.pods.clear()
            st.free = {
                r: parse_quantity(
                    st.node.allocatable.get(r, "0"), f"node {st.node.name} allocatable.{r}"
                )
                for r in FILTERED_RESOURCES
            }

    def _whole_node_requests(self) -> dict[str, str]:
        """The scenario's pods each request all of a node's allocatable (identical nodes)."""
        first = self.testbed.nodes[0].allocatable
        return {r: first[r] for r in FILTERED_RESOURCES if r in first}

    def node_documents(self, states: Sequence[_NodeState]) -> list[dict[str, Any]]:
        """v1 Nodes as the kubelet would publish them, from each node's CRI image list."""
        return [
            build_node(
                st.node.name,
                st.cri.list_images(),
                allocatable=dict(st.node.allocatable),
                max_images=self.max_images,
            )
            for st in states
        ]

    def _prioritize(
        self, strategy: str, pod_doc: dict[str, Any], states: Sequence[_NodeState]
    ) -> dict[str, int]:
        try:
            url = self.extenders[strategy]
        except KeyError:
            raise InputError(f"no extender runs strategy {strategy!r}") from None
        args = extender_args(pod_doc, self.node_documents(states))
        try:
            response = self.http.post(f"{url}/prioritize", json=args)
        except httpx.HTTPError as err:
            raise TestbedError(f"extender {url} ({strategy}) did not answer: {err}") from err
        if response.status_code != httpx.codes.OK:
            raise TestbedError(
                f"extender {url} ({strategy}) answered {response.status_code}: {response.text}"
            )
        try:
            return {str(entry["Host"]): int(entry["Score"]) for entry in response.json()}
        except (ValueError, TypeError, KeyError) as err:
            raise TestbedError(
                f"extender {url} ({strategy}) answered something other than "
                f"[{{Host, Score}}, ...]: {response.text[:200]!r}"
            ) from err

    def _pull(self, st: _NodeState, pod: str, image: str) -> Pull:
        mark = self.access_log.mark()
        started = time.monotonic()
        st.cri.pull_image(image)
        seconds = time.monotonic() - started
        transferred = self.access_log.bytes_since(mark, st.node.address)
        return Pull(pod=pod, node=st.node.name, bytes=transferred, seconds=round(seconds, 3))
