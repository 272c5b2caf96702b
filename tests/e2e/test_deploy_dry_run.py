"""``install/kustomize/`` (exactly as committed, rendered for the release ``make kubernetes``
builds)
applied to the local testbed's real API server of that release as a server-side dry run:
every object is decoded, defaulted, validated and admitted, and nothing is stored.

The other minors' renders are checked by schema and fixtures only
(tests/unit/test_deploy_versions.py).

Uses the testbed at ``$LAYERSCHED_TESTBED_DIR`` (default ``.testbed/``), bringing it up
(and down again) when it is not up. The one thing stored for real is the ``layersched``
Namespace (a namespaced object cannot be admitted, even in a dry run, into a namespace
that does not exist); it is removed afterwards unless it was there before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from layersched.deploy import KUBERNETES_VERSION, NAMESPACE, base_tree, stack_objects
from layersched_harness.testbed.deploy_stack import Kubectl
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.local import require_root
from tests.fixtures import prereq
from tests.fixtures.testbed import testbed_settings, testbed_up

pytestmark = [pytest.mark.e2e]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "install" / "kustomize"
DRY_RUN = ("--server-side", "--dry-run=server", "--field-manager=layersched-dry-run")


@pytest.fixture(scope="module")
def kubectl() -> Iterator[Kubectl]:
    try:
        require_root()
    except TestbedError as err:
        prereq.missing(f"local testbed unavailable: {err}")
    # the e2e's testbed, or the one LAYERSCHED_TESTBED_{DIR,PREFIX,NET_BASE} name
    settings = testbed_settings()
    with testbed_up(settings, refresh=False, shared=True) as inventory:
        yield Kubectl(inventory.cluster.kubectl, inventory.cluster.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    existing = kubectl.run("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name")
    if existing.strip():
        pytest.fail(f"namespace {NAMESPACE} exists: an install is on this testbed; remove it")
    kubectl.run("create", "namespace", NAMESPACE)
    try:
        yield NAMESPACE
    finally:
        # waits until it is gone: the next test creates it again
        kubectl.run("delete", "namespace", NAMESPACE, "--timeout=120s")


def test_deploy_is_what_the_generator_writes() -> None:
    # the dry run below applies the committed files: they are the generator's
    on_disk = {
        p.relative_to(DEPLOY_DIR).as_posix(): p.read_text() for p in DEPLOY_DIR.rglob("*.yaml")
    }
    assert on_disk == base_tree()


def test_deploys_render_passes_a_server_side_dry_run(kubectl: Kubectl, namespace: str) -> None:
    version = json.loads(kubectl.run("version", "-o", "json"))["serverVersion"]["gitVersion"]
    # install/kustomize/ is rendered for the testbed's own release
    assert version == KUBERNETES_VERSION, version
    out = kubectl.run("apply", "-k", str(DEPLOY_DIR), *DRY_RUN, "-o", "json")
    applied = json.loads(out)
    items = applied["items"] if applied.get("kind") == "List" else [applied]
    got = {(o["kind"], o["metadata"]["name"]) for o in items}
    expected = {
        (o["kind"], o["metadata"]["name"]) for group in stack_objects().values() for o in group
    }
    # every object of the install came back admitted (the CRD included)
    assert got == expected
    # nothing was stored: the dry run's Deployment does not exist
    left = kubectl.run("-n", namespace, "get", "deployments", "-o", "name")
    assert left.strip() == ""


def test_the_dry_run_refuses_what_the_server_refuses(kubectl: Kubectl, namespace: str) -> None:
    # the control: the same kind of dry run fails on what the API server refuses (client
    # validation off, so the refusal is the server's)
    bad = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dry-run-control", "namespace": namespace},
        "data": {"a": 1},  # data values must be strings
    }
    with pytest.raises(TestbedError, match="apply -f -"):
        kubectl.run("apply", "-f", "-", "--validate=false", *DRY_RUN, stdin=json.dumps(bad))
