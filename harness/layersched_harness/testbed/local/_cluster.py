"""The local testbed's side of the cluster scenario driver.

The cluster is real (kube-scheduler, kubelets, containerd); what only this testbed can
see comes from its files and sockets:

* bytes per pull: the registry's access log (``registry/access.log``), from a mark;
* ``image-locality`` scores: the real ImageLocality plugin's, from the ``-v=10`` log of
  the image-locality kube-scheduler;
* ``layer-locality`` scores: the layersched extender's own answer, from its decision log;
* ``layer-locality-plugin`` scores: the real LayerLocality plugin's, from the ``-v=10`` log
  of the kube-scheduler that runs it;
* emptying a node's cache: CRI ``RemoveImage`` on the node's containerd, for every image
  of the scenario's repositories (each trial may have pulled a tag of its own).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import tenacity

from layersched.core.errors import CRIError
from layersched.core.strategies.image_locality import NAME as IMAGE_LOCALITY
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.cri import CRIClient
from layersched.deploy import IMAGE_LOCALITY_PLUGIN
from layersched.deploy import LAYER_LOCALITY_PLUGIN as LAYER_LOCALITY_PLUGIN_NAME
from layersched_harness.testbed.cluster._measure import extender_decision, plugin_scores
from layersched_harness.testbed.cluster.driver import NotYet, PodRun, listed_repository, wait_for
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.hosts import Host, LocalHost
from layersched_harness.testbed.hosts import file_end as file_end  # re-exported
from layersched_harness.testbed.hosts import lines_since as lines_since  # re-exported
from layersched_harness.testbed.local._state import TestbedState
from layersched_harness.testbed.scheduler_configs import (
    LAYER_LOCALITY_PLUGIN_SCHEDULER as LAYER_LOCALITY_PLUGIN,
)
from layersched_harness.testbed.scheduler_configs import (
    REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER,
    REPLAY_PLUGIN_NO_SPREAD_SCHEDULER,
    REPLAY_PLUGIN_SCHEDULER,
)

log = logging.getLogger(__name__)

DRIVER_NAME = "local"
#: Where each strategy's scores come from, and their scale (the report says so).
SCORE_SOURCES = {
    LAYER_LOCALITY: "layersched extender answer to kube-scheduler (0-10, weight 1: x10)",
    IMAGE_LOCALITY: "kube-scheduler ImageLocality plugin, from its -v=10 log (0-100)",
    LAYER_LOCALITY_PLUGIN: "kube-scheduler LayerLocality plugin (layersched's build), "
    "from its -v=10 log (0-100)",
    REPLAY_PLUGIN_SCHEDULER: "kube-scheduler LayerLocality plugin in the default profile "
    "with ImageLocality kept (the install's profile before issue 43), from its -v=10 log "
    "(0-100)",
    REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER: "kube-scheduler LayerLocality plugin in the "
    "default profile with ImageLocality disabled (as installed), from its -v=10 log (0-100)",
    REPLAY_PLUGIN_NO_SPREAD_SCHEDULER: "kube-scheduler LayerLocality plugin as installed but "
    "with spread off, from its -v=10 log (0-100)",
}
#: The replay's plugin profiles (``layersched testbed up --replay-arms``): profiles of the
#: plugin process, which the scenario may run too (issue 43: with and without
#: ImageLocality).
REPLAY_PLUGIN_STRATEGIES = (
    REPLAY_PLUGIN_SCHEDULER,
    REPLAY_PLUGIN_NO_IMAGE_LOCALITY_SCHEDULER,
    REPLAY_PLUGIN_NO_SPREAD_SCHEDULER,
)
#: The strategies whose scores a kube-scheduler plugin logs, and that plugin's name.
PLUGIN_OF_STRATEGY = {
    IMAGE_LOCALITY: IMAGE_LOCALITY_PLUGIN,
    LAYER_LOCALITY_PLUGIN: LAYER_LOCALITY_PLUGIN_NAME,
    **dict.fromkeys(REPLAY_PLUGIN_STRATEGIES, LAYER_LOCALITY_PLUGIN_NAME),
}
#: A registry log line is written when its response completes; wait for quiet.
LOG_SETTLE_POLL_S = 0.2
LOG_SETTLE_TIMEOUT_S = 5.0
#: The label the kubelet puts on every pod sandbox: the pod's namespace.
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
#: Removing a node's scenario sandboxes and images, retried while the kubelet races us.
REMOVE_TIMEOUT_S = 30.0
#: A CRI call on a local containerd answers in milliseconds.
CRI_TIMEOUT_S = 30.0
_ETCD_VERSION = re.compile(r"etcd Version: (\S+)")
_PRIORITIZE_OK = re.compile(
    r'^layersched_extender_requests_total\{(?=[^}]*verb="prioritize")(?=[^}]*code="200")[^}]*\} '
    r"(?P<value>\S+)$",
    re.MULTILINE,
)
#: The extender answers /metrics in milliseconds.
METRICS_TIMEOUT_S = 5.0
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
        host: Host | None = None,
    ) -> None:
        self.path = path
        self.host: Host = host or LocalHost()
        self.settle_poll_s = settle_poll_s
        self.settle_timeout_s = settle_timeout_s

    @property
    def where(self) -> str:
        """The log's path, and its host unless it is this machine (for messages)."""
        return f"{self.path}" if isinstance(self.host, LocalHost) else f"{self.host}:{self.path}"

    def mark(self) -> int:
        """The current end of the log (an offset to count from)."""
        return self.host.file_end(str(self.path))

    def _bytes_since(self, offset: int, address: str) -> tuple[int, int]:
        total = lines = 0
        for line in self.host.lines_since(str(self.path), offset):
            match = _ACCESS_LINE.match(line)
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
            assert sizes[-1] == sizes[-2], f"{self.where} grew to {sizes[-1]} B"

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
                self.where,
                self.settle_timeout_s,
            )
        return self._bytes_since(offset, address)[0]


def extender_requests(url: str) -> int:
    """How many ``/prioritize`` requests the extender at ``url`` has answered with 200."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=METRICS_TIMEOUT_S).text
    except httpx.HTTPError as err:
        raise TestbedError(
            f"reading {url}/metrics: {err}: is the testbed's extender running? "
            "(layersched testbed status)"
        ) from err
    return sum(int(float(m["value"])) for m in _PRIORITIZE_OK.finditer(text))


@dataclass(frozen=True, slots=True)
class LogMarks:
    """Where each log ended just before a pod was created."""

    registry: int
    logs: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class NodeAccess:
    """Where a node's containerd socket is, and the host it is on."""

    host: Host
    cri_socket: str


class FileBackend:
    """:class:`layersched_harness.testbed.cluster.driver.Backend` of a testbed this project built:
    its registry's access log, the schedulers' and the extender's logs, and each node's
    containerd, read and called through :class:`layersched_harness.testbed.hosts.Host` (this
    machine for the local testbed, SSH for cloud nodes)."""

    def __init__(
        self,
        name: str,
        *,
        schedulers: Mapping[str, str],
        control_plane: Host,
        access_log: str,
        score_logs: Mapping[str, str],
        extender_url: str,
        nodes: Mapping[str, NodeAccess],
        etcd: str = "etcd",
    ) -> None:
        self.name = name
        #: The control plane's etcd program (the Kubernetes build's), asked its version.
        self.etcd = etcd
        self.schedulers = dict(schedulers)
        self.control_plane = control_plane
        self._registry = RegistryAccessLog(Path(access_log), host=control_plane)
        # Score logs by strategy: the extender answers for layer-locality, the
        # image-locality scheduler logs its plugin's scores itself.
        self._score_logs = dict(score_logs)
        self._extender_url = extender_url
        self._nodes = dict(nodes)

    @property
    def extender_url(self) -> str:
        """The extender's URL as this machine reaches it (through a tunnel if remote)."""
        if isinstance(self.control_plane, LocalHost):
            return self._extender_url
        address, _, port = self._extender_url.removeprefix("http://").rpartition(":")
        return f"http://{self.control_plane.tcp(address, int(port))}"

    def mark(self) -> LogMarks:
        return LogMarks(
            registry=self._registry.mark(),
            logs={
                strategy: self.control_plane.file_end(path)
                for strategy, path in self._score_logs.items()
            },
        )

    def registry_bytes(self, mark: LogMarks, address: str) -> int:
        size_bytes = self._registry.bytes_since(mark.registry, address)
        if size_bytes == 0:
            raise NotYet(f"registry {self._registry.where} logged no pull from {address}")
        return size_bytes

    def scores(self, run: PodRun) -> dict[str, int]:
        mark: LogMarks = run.mark
        path = self._score_logs.get(run.strategy)
        if path is None:
            raise TestbedError(
                f"strategy {run.strategy!r}: the {self.name} testbed runs "
                f"{', '.join(self._score_logs)}"
            )
        lines = self.control_plane.lines_since(path, mark.logs[run.strategy])
        plugin = PLUGIN_OF_STRATEGY.get(run.strategy)
        if plugin is not None:
            found = plugin_scores(lines, plugin, run.key)
        else:
            found = extender_decision(lines, run.key)
        if found is None:
            raise NotYet(f"{path} has no scores for pod {run.key} yet")
        return found

    def inventory_holds(self, node: str, image: str) -> bool:
        """Whether the extender's live inventory lists ``image`` on ``node`` now (what it
        scores with: the agents' NodeLayerInventory, watched)."""
        return image in self.inventory_images(node)

    def inventory_images(self, node: str) -> list[str]:
        """The images the extender's live inventory lists on ``node`` now (none when it
        has no inventory of that node)."""
        url = f"{self.extender_url}/debug/inventory"
        try:
            response = httpx.get(url, params={"node": node}, timeout=METRICS_TIMEOUT_S)
        except httpx.HTTPError as err:
            raise NotYet(f"asking the extender for node {node}'s inventory: {err}") from err
        if response.status_code != httpx.codes.OK:
            return []
        return [str(image) for image in response.json().get("images") or []]

    def remove_images(self, node: str, images: Sequence[str], namespace: str) -> None:
        try:
            access = self._nodes[node]
        except KeyError:
            raise TestbedError(
                f"the {self.name} testbed has no node {node!r} (nodes: {', '.join(self._nodes)})"
            ) from None
        endpoint = f"unix://{access.host.unix_socket(access.cri_socket)}"
        with CRIClient(endpoint, timeout_s=CRI_TIMEOUT_S) as cri:
            repositories = {listed_repository(image) for image in images}

            def empty() -> None:
                # The kubelet may be stopping the same sandbox right now: try again.
                try:
                    for sandbox in cri.list_pod_sandboxes({POD_NAMESPACE_LABEL: namespace}):
                        cri.remove_pod_sandbox(sandbox)
                    held = [
                        held.id
                        for held in cri.list_images()
                        if any(
                            listed_repository(name) in repositories
                            for name in (*held.repo_tags, *held.repo_digests)
                        )
                    ]
                    for image in (*images, *held):
                        cri.remove_image(image)
                except CRIError as err:
                    raise NotYet(f"emptying node {node}'s image cache: {err}") from err

            wait_for(empty, REMOVE_TIMEOUT_S)

    def components(self) -> dict[str, str]:
        output = self.control_plane.run([self.etcd, "--version"], "asking etcd for its version")
        match = _ETCD_VERSION.search(output)
        return {"etcd": match[1]} if match else {}

    def close(self) -> None:
        """End the tunnels and connections to the testbed's hosts."""
        hosts = {id(self.control_plane): self.control_plane}
        hosts.update({id(a.host): a.host for a in self._nodes.values()})
        for host in hosts.values():
            host.close()


class LocalBackend(FileBackend):
    """The local testbed's backend: its files and sockets, on this machine."""

    def __init__(self, inventory: TestbedState) -> None:
        self.inventory = inventory
        cluster = inventory.cluster
        here = LocalHost()
        score_logs = {
            LAYER_LOCALITY: cluster.extender.log,
            IMAGE_LOCALITY: cluster.schedulers[IMAGE_LOCALITY].log,
        }
        # testbeds brought up before the plugin have none; the replay's profiles only
        # with --replay-arms
        for strategy in (LAYER_LOCALITY_PLUGIN, *REPLAY_PLUGIN_STRATEGIES):
            if (plugin_scheduler := cluster.schedulers.get(strategy)) is not None:
                score_logs[strategy] = plugin_scheduler.log
        super().__init__(
            DRIVER_NAME,
            schedulers={strategy: s.name for strategy, s in cluster.schedulers.items()},
            control_plane=here,
            access_log=inventory.registry.access_log,
            score_logs=score_logs,
            extender_url=cluster.extender.url,
            nodes={n.name: NodeAccess(here, n.cri_socket) for n in inventory.nodes},
            etcd=f"{cluster.bin_dir}/etcd",
        )
