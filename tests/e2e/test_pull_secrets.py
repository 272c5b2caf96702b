"""A pod's private image, scored with its pull secret, on the local testbed's real 1.37
cluster (issue 45): the testbed's extender runs with ``--pull-secrets``.

Beside the scenario's registry an auth-protected one (docker-registry behind htpasswd,
tests/fixtures/registry.py) listens on the testbed's bridge; the nodes' containerd pull
it over plain HTTP (a ``hosts.toml`` per node). It holds the scenario's Img1 (L1, L2, L3)
as ``private/app:1``, which only the secret ``regcred`` can pull. The holder (the last
node) pulled the public Img2 (L1, L2, L4), so it holds 40 of the private image's 44 MiB;
no node has published the private image itself.

* **Without the secret**, a pod of the private image scores neutrally (the extender's
  own credentials get a 401), and its kubelet cannot pull it either (``ErrImagePull``):
  only the secret can.
* **With it** (and a Role in the pod's namespace granting the extender's user ``get`` on
  its secrets, from :func:`layersched.kube.pull_secret_rbac`), the holder scores above
  every other node, the pod lands there, and its kubelet pulls it with the same secret.

The extender's log holds nothing of the secret. Needs root on Linux, else it skips with
the reason; it shares the e2e's testbed (``testbed_up(..., shared=True)``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from layersched.core.errors import KubeError
from layersched.images.oci import push_image
from layersched.kube import (
    NAMESPACES_PATH,
    KubeClient,
    load_kubeconfig,
    namespace_path,
    pod_path,
    pull_secret_rbac,
)
from layersched.registry import RegistryClient
from layersched_harness.testbed.cluster import ClusterDriver
from layersched_harness.testbed.cluster.driver import scenario_pod
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import TestbedState, require_root
from layersched_harness.testbed.local._cluster import LocalBackend
from layersched_harness.testbed.scenario_images import (
    IMG1,
    build_and_push_scenario,
    build_scenario,
    load_spec,
)
from tests.e2e._checks import LAYER_LOCALITY
from tests.e2e._live import (
    HTTP_TIMEOUT_S,
    PULL_TIMEOUT_S,
    SCORES_TIMEOUT_S,
    SMALL,
    Live,
    assert_phase,
    extender_answer,
    place,
    wait,
    warm,
)
from tests.fixtures import prereq
from tests.fixtures.registry import RegistryProcess
from tests.fixtures.testbed import testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAMESPACE = "layersched-pull-secrets"
SECRET = "regcred"
#: The testbed's extender's API user (playbooks: k8s_control_plane).
EXTENDER_USER = "layersched:extender"
PRIVATE_IMAGE = "private/app:1"


@dataclass
class Bed(Live):
    """The testbed, the private registry and its image, the public image the holder
    pulled, and what each test saw (written next to the scenario's report)."""

    registry: RegistryProcess | None = None
    image: str = ""
    public: str = ""
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def password(self) -> str:
        assert self.registry is not None and self.registry.password is not None
        return self.registry.password


@contextlib.contextmanager
def _private_registry(inventory: TestbedState, workdir: Path) -> Iterator[RegistryProcess]:
    """An htpasswd registry on the bridge, and every node's containerd told to pull it
    over plain HTTP (its hosts.toml, removed again after)."""
    credentials = ("robot", secrets.token_hex(12))
    bridge = inventory.registry.address
    with RegistryProcess(workdir, htpasswd=credentials, address=bridge) as registry:
        written = []
        for node in inventory.nodes:
            directory = Path(node.dir) / "certs.d" / registry.host
            directory.mkdir(parents=True, exist_ok=True)
            hosts = directory / "hosts.toml"
            hosts.write_text(
                f'server = "http://{registry.host}"\n\n'
                f'[host."http://{registry.host}"]\n  capabilities = ["pull", "resolve"]\n'
            )
            written.append(directory)
        try:
            yield registry
        finally:
            for directory in written:
                (directory / "hosts.toml").unlink(missing_ok=True)
                directory.rmdir()


def _secret_document(registry: RegistryProcess) -> dict[str, Any]:
    assert registry.username is not None and registry.password is not None
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    config = {"auths": {registry.host: {"auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def _create(kube: KubeClient, collection: str, document: dict[str, Any]) -> None:
    try:
        kube.create(collection, document)
    except KubeError as err:
        if err.status != 409:
            raise


@pytest.fixture(scope="module")
def bed(scenario_report_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    with testbed_up(testbed_settings(), refresh=False, shared=True) as inventory:
        backend = LocalBackend(inventory)
        metrics = httpx.get(f"{backend.extender_url}/metrics", timeout=HTTP_TIMEOUT_S).text
        if "layersched_extender_pull_secret_reads" not in metrics:
            backend.close()
            pytest.fail(
                "the testbed's extender runs without --pull-secrets (a testbed brought up "
                "before issue 45): bring it up again (layersched testbed up)"
            )
        tag = time.strftime("pullsecret-%Y%m%d%H%M%S", time.gmtime())
        images = build_and_push_scenario(inventory.registry.host, tags=[tag])
        public = images.img2.rsplit(":", 1)[0] + f":{tag}"
        workdir = tmp_path_factory.mktemp("private-registry")
        with _private_registry(inventory, workdir) as registry:
            image = f"{registry.host}/{PRIVATE_IMAGE}"
            built = build_scenario(load_spec())
            creds = {registry.host: (registry.username or "", registry.password or "")}
            with RegistryClient(
                insecure_hosts=(registry.host,), credentials=creds, auth_files=()
            ) as client:
                push_image(client, image, built.images[IMG1])
            kube = KubeClient(load_kubeconfig(inventory.cluster.kubeconfig))
            driver = ClusterDriver(
                inventory.cluster.kubeconfig,
                backend,
                (images.img1, public, image),
                namespace=NAMESPACE,
                layer_digests=[digest for digest, _size in images.layers.values()],
            )
            nodes = sorted(driver.worker_names())
            bed = Bed(inventory, driver, backend, kube, NAMESPACE, nodes, nodes[-1],
                      registry, image, public, {"holder": nodes[-1], "image": image})  # fmt: skip
            try:
                driver.reset()
                _grant(bed, registry)
                warm(bed, public, driver.scheduler_name(LAYER_LOCALITY))
                yield bed
            finally:
                (scenario_report_dir / "pull-secrets.json").write_text(
                    json.dumps(bed.results, indent=2) + "\n"
                )
                print(json.dumps(bed.results, indent=2))
                try:
                    driver.reset()
                    kube.delete(namespace_path(NAMESPACE))
                finally:
                    backend.close()
                    kube.close()


def _grant(bed: Bed, registry: RegistryProcess) -> None:
    """The namespace, the secret, and the Role letting the extender's user get it."""
    _create(bed.kube, NAMESPACES_PATH, {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": NAMESPACE}})  # fmt: skip
    _create(bed.kube, f"{namespace_path(NAMESPACE)}/secrets", _secret_document(registry))
    user = {"kind": "User", "name": EXTENDER_USER, "apiGroup": "rbac.authorization.k8s.io"}
    for obj in pull_secret_rbac("layersched-pull-secrets", NAMESPACE, [user], [SECRET]):
        plural = "roles" if obj["kind"] == "Role" else "rolebindings"
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/{plural}"
        _create(bed.kube, path, obj)


def _waiting_reason(bed: Bed, name: str) -> str:
    status = bed.kube.get(pod_path(NAMESPACE, name)).get("status") or {}
    for container in status.get("containerStatuses") or []:
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    return ""


def _pod(bed: Bed, name: str, with_secret: bool) -> dict[str, Any]:
    pod = scenario_pod(
        name, bed.image, bed.driver.scheduler_name(LAYER_LOCALITY), SMALL, NAMESPACE,
        pull_policy="IfNotPresent",
    )  # fmt: skip
    if with_secret:
        pod["spec"]["imagePullSecrets"] = [{"name": SECRET}]
    return pod


def _asked(bed: Bed, pod: dict[str, Any], expected: dict[str, int]) -> dict[str, int]:
    """The extender's answer for ``pod`` over every node, once it is ``expected``."""

    def answer() -> dict[str, int]:
        found = extender_answer(bed, pod)
        assert found == expected, found
        return found

    return wait(answer, SCORES_TIMEOUT_S)


def test_without_the_secret_the_private_image_is_unknown_and_unpullable(bed: Bed) -> None:
    pod = _pod(bed, "without", with_secret=False)
    placed = place(bed, pod, LAYER_LOCALITY)
    bed.results["without"] = {"node": placed.node, "logged_scores": placed.scores}
    assert placed.scores == {}, f"the extender scored a pod it cannot resolve: {placed}"
    bed.results["without"]["asked"] = _asked(bed, pod, dict.fromkeys(bed.nodes, 0))
    # only the secret can pull it: the kubelet cannot either
    reason = wait(lambda: _pull_refused(bed, "without"), PULL_TIMEOUT_S)
    bed.results["without"]["kubelet"] = reason


def _pull_refused(bed: Bed, name: str) -> str:
    reason = _waiting_reason(bed, name)
    assert reason in ("ErrImagePull", "ImagePullBackOff"), f"pod {name}: waiting {reason!r}"
    return reason


def test_with_the_secret_the_holder_wins_and_the_kubelet_pulls(bed: Bed) -> None:
    # spread on: the holder holds L1 + L2 (40 of 44 MiB), each on 1 of 3 nodes ->
    # floor(100 * 40 / 3 / 44) = 30 -> 3 on the extender's scale; the others 0
    expected = {n: (3 if n == bed.holder else 0) for n in bed.nodes}
    pod = _pod(bed, "with", with_secret=True)
    bed.results["with"] = {"asked_before": _asked(bed, pod, expected)}
    placed = place(bed, pod, LAYER_LOCALITY)
    scores = placed.scores or {}
    bed.results["with"].update(node=placed.node, logged_scores=scores)
    assert placed.node == bed.holder, f"{placed}"
    assert scores[bed.holder] > max(s for n, s in scores.items() if n != bed.holder), scores
    wait(lambda: assert_phase(bed, "with", "Running"), PULL_TIMEOUT_S)
    # nothing of the secret in the extender's log
    log = Path(bed.inventory.cluster.extender.log).read_text(errors="replace")
    assert bed.password not in log
    assert f"pull secret {NAMESPACE}/{SECRET}" not in log  # read, never refused
