"""``install/kustomize/`` on the local testbed: its overlay, apply, wait, remove, and its scores.

The install is ``kubectl apply -k DIR`` and the removal ``kubectl delete -k DIR``, where
``DIR`` is an overlay of ``install/kustomize/`` naming the images by the digests just pushed
(:mod:`layersched.images.push`) and carrying the testbed's patches
(:func:`layersched_harness.testbed.local.local_testbed_overlay`, written by ``layersched testbed
overlay``). The e2e test and docs/deploy.md run exactly these commands.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from layersched.core.errors import InputError, KubeError
from layersched.core.strategies.layer_locality import NAME as LAYER_LOCALITY
from layersched.deploy import (
    ADMISSION_PRIVATE_FILES,
    EXTENDER_PORT,
    KUSTOMIZATION,
    LAYER_LOCALITY_SCHEDULER,
    NAMESPACE,
    StackSpec,
    kustomization,
    overlay_tls,
    scheduler_container,
    to_yaml_stream,
    write_tree,
)
from layersched.images.push import DEPLOY_DIR, PushedStack, relative_base
from layersched.kube import port_forward
from layersched_harness.testbed._patches import pod_template_patch
from layersched_harness.testbed.cluster._measure import plugin_scores
from layersched_harness.testbed.cluster.driver import NotYet, PodRun
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import (
    LOCAL_PATCHES,
    LocalTestbedTarget,
    TestbedState,
    local_testbed_overlay,
)
from layersched_harness.testbed.local._cluster import LocalBackend, LogMarks
from layersched_harness.testbed.scheduler_configs import LAYER_LOCALITY_PLUGIN_SCHEDULER

#: kubectl apply/delete of a dozen objects takes seconds; deleting the namespace waits
#: for its pods to stop (terminationGracePeriodSeconds 30).
KUBECTL_TIMEOUT_S = 180.0
ROLLOUT_TIMEOUT_S = 300.0


def local_target(inventory: TestbedState, images: PushedStack) -> LocalTestbedTarget:
    """The overlay's view of a local testbed (from its inventory)."""
    api = urlsplit(inventory.cluster.api_server)
    if api.hostname is None or api.port is None:
        raise InputError(
            f"testbed inventory: api_server {inventory.cluster.api_server!r} has no host:port; "
            "bring the testbed up again"
        )
    return LocalTestbedTarget(
        registry=f"{inventory.registry.address}:{inventory.registry.port}",
        api_host=api.hostname,
        api_port=api.port,
        nodes_dir=str(Path(inventory.state_dir) / "nodes"),
        layersched_image=images.layersched.ref,
        kube_scheduler_image=images.kube_scheduler.ref,
    )


def write_local_overlay(
    out: Path, inventory: TestbedState, images: PushedStack, base: Path = DEPLOY_DIR
) -> list[str]:
    """The local testbed's overlay of ``base`` (images by digest, the testbed's patches,
    the admission webhook's TLS: issued, or kept from an earlier overlay in ``out``)."""
    spec = StackSpec()
    files = local_testbed_overlay(
        local_target(inventory, images), relative_base(base, out), spec, overlay_tls(out, spec)
    )
    return write_tree(out, files, private=ADMISSION_PRIVATE_FILES)


#: The post-renderer's files: what helm rendered, the testbed's patches
#: (:data:`LOCAL_PATCHES`), and the script.
HELM_RENDERED = "helm.yaml"
POST_RENDERER = "post-render"
EXECUTABLE_MODE = 0o755


def write_helm_post_renderer(
    out: Path,
    inventory: TestbedState,
    images: PushedStack,
    spec: StackSpec | None = None,
    scheduler_verbosity: int | None = None,
) -> Path:
    """A ``helm --post-renderer`` that adapts the chart to the local testbed: the same
    patches as the testbed's overlay of ``install/kustomize/`` (:func:`local_testbed_overlay`: the
    node's network, the API server's address, each node's own containerd socket), applied
    with the cluster's own ``kubectl kustomize`` to what helm rendered; with
    ``scheduler_verbosity``, kube-scheduler's ``--v`` too (10: it logs each plugin's scores,
    which is how the plugin's scores are read). Returns the script. Harness only: a real
    cluster installs the chart as it is."""
    spec = spec or StackSpec()
    overlay = local_testbed_overlay(local_target(inventory, images), ".", spec)
    patches = overlay[LOCAL_PATCHES]
    if scheduler_verbosity is not None:
        verbose = replace(spec, scheduler_verbosity=scheduler_verbosity)
        command = {"name": "kube-scheduler", "command": scheduler_container(verbose)["command"]}
        patches += "---\n" + to_yaml_stream(
            [
                pod_template_patch(
                    "Deployment", spec.scheduler_name, spec.namespace, {"containers": [command]}
                )
            ]
        )
    files = {
        LOCAL_PATCHES: patches,
        KUSTOMIZATION: kustomization(
            {"resources": [HELM_RENDERED], "patchesStrategicMerge": [LOCAL_PATCHES]}
        ),
        POST_RENDERER: (
            "#!/bin/sh\n# helm --post-renderer: the local testbed's patches over stdin\n"
            "set -o errexit -o nounset\n"
            f'cat > "{out}/{HELM_RENDERED}"\n'
            f'exec "{inventory.cluster.kubectl}" kustomize "{out}"\n'
        ),
    }
    write_tree(out, files)
    script = out / POST_RENDERER
    script.chmod(EXECUTABLE_MODE)
    return script


@dataclass(frozen=True, slots=True)
class Kubectl:
    """The cluster's own kubectl with a kubeconfig."""

    binary: str
    kubeconfig: str

    def run(
        self,
        *args: str,
        timeout_s: float = KUBECTL_TIMEOUT_S,
        check: bool = True,
        stdin: str | None = None,
    ) -> str:
        argv = [self.binary, "--kubeconfig", self.kubeconfig, *args]
        try:
            done = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise TestbedError(f"kubectl {' '.join(args)}: {err}") from err
        if check and done.returncode != 0:
            raise TestbedError(
                f"kubectl {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        return done.stdout

    def create(self, document: Mapping[str, Any]) -> str:
        """``kubectl create -f -`` of one object."""
        return self.run("create", "-f", "-", stdin=json.dumps(document))


def install(kubectl: Kubectl, overlay: Path) -> float:
    """``kubectl apply -k OVERLAY``; returns the seconds it took."""
    started = time.monotonic()
    kubectl.run("apply", "-k", str(overlay))
    return time.monotonic() - started


def wait_rollout(kubectl: Kubectl, namespace: str, workloads: Sequence[str]) -> float:
    """``kubectl rollout status`` of each workload (``deployment/NAME``); seconds taken."""
    started = time.monotonic()
    for workload in workloads:
        kubectl.run(
            "-n",
            namespace,
            "rollout",
            "status",
            workload,
            f"--timeout={int(ROLLOUT_TIMEOUT_S)}s",
            timeout_s=ROLLOUT_TIMEOUT_S + 30,
        )
    return time.monotonic() - started


def uninstall(kubectl: Kubectl, overlay: Path) -> float:
    """``kubectl delete -k OVERLAY`` (waits for the objects to be gone); seconds taken."""
    started = time.monotonic()
    kubectl.run("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true")
    return time.monotonic() - started


#: Where the deployed stack's scores come from on the local testbed, and their scale.
DEPLOYED_SCORE_SOURCE = (
    "deployed layersched extender (sidecar): its answer to kube-scheduler for the pod, "
    "from its /debug/decisions (0-10, before kube-scheduler's x10 and the install's weight)"
)
#: The extender answers /debug/decisions from memory.
DECISIONS_TIMEOUT_S = 5.0


class DeployedBackend(LocalBackend):
    """The local testbed with ``install/kustomize/`` installed: ``layer-locality`` is the deployed
    scheduler, and its scores are what the deployed extender answered kube-scheduler.

    The extender's ``/debug/decisions`` keeps its latest answer per pod, with the pod's
    uid: what it answered for a pod, whichever replica it is (before each node's kubelet
    had a pod log directory of its own, ``kubectl logs`` lost them here). Bytes, cache
    emptying and versions are the local testbed's.
    """

    def __init__(
        self, inventory: TestbedState, scheduler_pods: Callable[[], Sequence[str]]
    ) -> None:
        super().__init__(inventory)
        self.schedulers = {LAYER_LOCALITY: LAYER_LOCALITY_SCHEDULER}
        self._scheduler_pods = scheduler_pods

    def scores(self, run: PodRun) -> dict[str, int]:
        if run.strategy != LAYER_LOCALITY:
            raise TestbedError(
                f"strategy {run.strategy!r}: the deployed stack runs {LAYER_LOCALITY}"
            )
        notes = []
        cluster = self.inventory.cluster
        # Only the leader's extender is asked; which one that is, the answers tell. Its
        # verbs and /debug answer on the pod's loopback only: a port-forward, as explain.
        for pod in self._scheduler_pods():
            url = f"{NAMESPACE}/{pod}"
            try:
                with port_forward(
                    cluster.kubectl, NAMESPACE, pod, EXTENDER_PORT, kubeconfig=cluster.kubeconfig
                ) as local:
                    response = httpx.get(
                        f"{local}/debug/decisions",
                        params={"pod": run.key},
                        timeout=DECISIONS_TIMEOUT_S,
                    )
                if response.status_code == httpx.codes.NOT_FOUND:
                    notes.append(f"{url}: no answer for it")
                    continue
                response.raise_for_status()
                decision = response.json()
                if decision.get("uid") != run.uid:
                    notes.append(f"{url}: only an earlier pod of that name")
                    continue
                return {str(node): int(score) for node, score in decision["scores"].items()}
            except (
                KubeError,
                httpx.HTTPError,
                ValueError,
                KeyError,
                TypeError,
                AttributeError,
            ) as err:
                notes.append(f"{url}: {err}")
        seen = "; ".join(notes) or "none running"
        raise NotYet(f"no deployed extender has answered for pod {run.key} (uid {run.uid}): {seen}")


#: Where the chart's plugin-mode scores come from on the local testbed, and their scale.
DEPLOYED_PLUGIN_SCORE_SOURCE = (
    "deployed layersched kube-scheduler (the chart's plugin mode): the LayerLocality scores "
    "its pod logs at --v=10, read with kubectl logs (0-100, before the weight)"
)
#: The plugin's name, as kube-scheduler logs its scores.
LAYER_LOCALITY_PLUGIN_NAME = "LayerLocality"
#: The log lines of a pod's scheduling are read from this long before its creation (the
#: host's clock is the cluster's: the local testbed runs on it).
LOG_SINCE_SLACK_S = 2


class DeployedPluginBackend(LocalBackend):
    """The local testbed with the chart's plugin mode installed: the strategy
    ``layer-locality-plugin`` is served by the installed kube-scheduler (``layer-locality``)
    and its scores are the ``LayerLocality`` lines its pods log at ``--v=10``
    (:func:`write_helm_post_renderer` ``scheduler_verbosity``), read with ``kubectl logs``
    since just before the pod was created. Bytes, cache emptying and versions are the
    local testbed's."""

    def __init__(
        self, inventory: TestbedState, kubectl: Kubectl, scheduler_pods: Callable[[], Sequence[str]]
    ) -> None:
        super().__init__(inventory)
        self.schedulers = {LAYER_LOCALITY_PLUGIN_SCHEDULER: LAYER_LOCALITY_SCHEDULER}
        self._kubectl = kubectl
        self._scheduler_pods = scheduler_pods

    def mark(self) -> LogMarks:
        # the time the pod's scheduling may start, in place of a log offset
        since = int(time.time()) - LOG_SINCE_SLACK_S
        return LogMarks(
            registry=super().mark().registry, logs={LAYER_LOCALITY_PLUGIN_SCHEDULER: since}
        )

    def scores(self, run: PodRun) -> dict[str, int]:
        if run.strategy != LAYER_LOCALITY_PLUGIN_SCHEDULER:
            raise TestbedError(
                f"strategy {run.strategy!r}: the deployed plugin serves "
                f"{LAYER_LOCALITY_PLUGIN_SCHEDULER}"
            )
        since = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.mark.logs[LAYER_LOCALITY_PLUGIN_SCHEDULER])
        )
        notes = []
        for pod in self._scheduler_pods():
            try:
                logs = self._kubectl.run(
                    "-n", NAMESPACE, "logs", pod, "-c", "kube-scheduler", f"--since-time={since}"
                )
            except TestbedError as err:
                notes.append(f"{pod}: {err}")
                continue
            found = plugin_scores(logs.splitlines(), LAYER_LOCALITY_PLUGIN_NAME, run.key)
            if found is not None:
                return found
            notes.append(f"{pod}: no {LAYER_LOCALITY_PLUGIN_NAME} scores for it")
        seen = "; ".join(notes) or "none running"
        raise NotYet(f"no deployed kube-scheduler has logged scores for pod {run.key}: {seen}")
