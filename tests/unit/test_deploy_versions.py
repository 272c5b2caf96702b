"""The install for every Kubernetes minor from 1.20 to 1.37, checked against that minor.

* 1.25-1.37: every object strictly against the minor's own OpenAPI schema (PyPI
  ``kubernetes-validate``: an unknown field fails);
* every minor: each object's API served by that minor (a table with its sources, below),
  since 1.20-1.24 have no schema there; 1.21-1.24 also against 1.25's strict schema
  for their fields (an upper bound: a field 1.25 added would pass);
* every minor: the ``KubeSchedulerConfiguration`` against kube-scheduler's own Go types
  of that API version and minor (tests/fixtures/kube_scheduler_config_fields.json);
* every minor: the scheduler's ClusterRole against upstream's bootstrap policy of that
  minor (tests/fixtures/kube_scheduler_rbac.json);
* the 1.20 install is also applied to a real v1.20.2 API server (server-side dry run:
  tests/e2e/test_deploy_dry_run.py).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from layersched.builds import REPO_ROOT, required_version
from layersched.core.errors import InputError
from layersched.deploy import (
    KUBE_SCHEDULER_CONFIG_V1,
    KUBE_SCHEDULER_CONFIG_V1BETA1,
    KUBE_SCHEDULER_CONFIG_V1BETA2,
    KUBE_SCHEDULER_CONFIG_V1BETA3,
    NEWEST_MINOR,
    OLDEST_MINOR,
    SUPPORTED_MINORS,
    KubernetesVersion,
    StackSpec,
    base_tree,
    parse_kubernetes_version,
    scheduler_config,
    scheduler_rules,
    stack_objects,
    upstream_kube_scheduler,
)
from tests.fixtures import prereq
from tests.fixtures.kube_scheduler_fields import config_problems, served_by
from tests.fixtures.rbac import grants

RBAC_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kube_scheduler_rbac.json"
#: The minors kubernetes-validate 1.37.0 has schemas for, among ours.
SCHEMA_MINORS = tuple(m for m in SUPPORTED_MINORS if m >= 25)
#: The minors checked by rule only, and (for their fields) against the oldest schema.
OLDEST_SCHEMA_MINOR = 25
ALL_MINORS = [f"1.{m}" for m in SUPPORTED_MINORS]

#: (apiVersion, kind) -> (first minor serving it, last minor serving it or None). From
#: Kubernetes' deprecated-API migration guide and release notes: policy/v1 PDBs from 1.21
#: and policy/v1beta1 removed in 1.25; apiextensions.k8s.io/v1 from 1.16; apps/v1 from
#: 1.9; rbac v1 from 1.8; networking.k8s.io/v1 NetworkPolicy from 1.7;
#: admissionregistration.k8s.io/v1 webhooks from 1.16 and ValidatingAdmissionPolicy
#: (with its binding) from 1.30, v1beta1 1.28-1.33 (for the admission objects to come).
SERVED: dict[tuple[str, str], tuple[int, int | None]] = {
    ("v1", "Namespace"): (0, None),
    ("v1", "ServiceAccount"): (0, None),
    ("v1", "Secret"): (0, None),
    ("v1", "ConfigMap"): (0, None),
    ("v1", "Service"): (0, None),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (16, None),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (8, None),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (8, None),
    ("rbac.authorization.k8s.io/v1", "Role"): (8, None),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (8, None),
    ("apps/v1", "Deployment"): (9, None),
    ("apps/v1", "DaemonSet"): (9, None),
    ("policy/v1", "PodDisruptionBudget"): (21, None),
    ("policy/v1beta1", "PodDisruptionBudget"): (5, 24),
    ("networking.k8s.io/v1", "NetworkPolicy"): (7, None),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (16, None),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (30, None),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (30, None),
    ("admissionregistration.k8s.io/v1beta1", "ValidatingAdmissionPolicy"): (28, 33),
    ("admissionregistration.k8s.io/v1beta1", "ValidatingAdmissionPolicyBinding"): (28, 33),
}
#: The default scheduler's own leader election, which the second scheduler does not get
#: (its Lease is its own, a Role in its namespace): upstream's rules on these resources.
LEADER_ELECTION_RESOURCES = {
    ("coordination.k8s.io", "leases"),
    ("coordination.k8s.io", "leasecandidates"),
    ("", "endpoints"),
}
#: The newest KubeSchedulerConfiguration API first.
API_PREFERENCE = ("v1", "v1beta3", "v1beta2", "v1beta1")
#: layersched's Go module: the k8s.io/kubernetes release its go.mod pins is the one
#: layersched builds and runs (layersched.builds reads it there as the build's version).
GO_MOD = REPO_ROOT / "src" / "kube-scheduler" / "go.mod"


def built_release() -> str:
    """``v1.37.2``: the Kubernetes release the Go module build pins."""
    release = required_version(GO_MOD.read_text("utf-8"))
    assert release is not None, f"{GO_MOD} pins no k8s.io/kubernetes"
    return release


@cache
def _rbac_fixture() -> dict[str, Any]:
    return dict(json.loads(RBAC_FIXTURE.read_text())["minors"])


def _spec(minor: str) -> StackSpec:
    return StackSpec().for_version(parse_kubernetes_version(minor).tag)


def _objects(minor: str) -> list[dict[str, Any]]:
    return [obj for group in stack_objects(_spec(minor)).values() for obj in group]


def _find(minor: str, kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in _objects(minor) if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a minor alone: the newest patch we know of (kube-scheduler's v0.30.14 tag)
        ("1.30", KubernetesVersion(30, 14)),
        ("1.30.4", KubernetesVersion(30, 4)),
        ("v1.20.2", KubernetesVersion(20, 2)),
        # what a managed cluster's /version says: the provider's suffix is dropped
        ("v1.31.5-eks-a737599", KubernetesVersion(31, 5)),
        ("v1.36.1+k3s1", KubernetesVersion(36, 1)),
        # the newest minor: its newest patch is the release layersched builds (v1.37.2)
        ("1.37", KubernetesVersion(37, 2)),
        # the newest release of a minor is a release
        ("1.36.3", KubernetesVersion(36, 3)),
    ],
    ids=["minor", "patch", "v-prefix", "eks-suffix", "k3s-suffix", "newest-minor", "newest-patch"],
)
def test_versions_parse(text: str, expected: KubernetesVersion) -> None:
    assert parse_kubernetes_version(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # older than the oldest config API the generator writes
        ("1.19", "1.20 to 1.37"),
        # newer than anything checked
        ("1.38.0", "1.20 to 1.37"),
        ("2.0", "1.20 to 1.37"),
        ("latest", "is not a Kubernetes version"),
        # a patch past the minor's newest release: no kube-scheduler image has that tag
        (
            "1.36.99",
            "1.36.99 is not a Kubernetes release: the newest 1.36 release we know is v1.36.3",
        ),
        ("v1.37.3", "the newest 1.37 release we know is v1.37.2; pass --kubernetes-version 1.37"),
    ],
    ids=["too-old", "too-new", "major-2", "word", "patch-past-1.36", "patch-past-1.37"],
)
def test_versions_outside_the_range_are_refused(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_kubernetes_version(text)


@pytest.mark.parametrize("minor", ALL_MINORS)
def test_every_minor_renders_a_tree(minor: str) -> None:
    spec = _spec(minor)
    version = parse_kubernetes_version(minor)
    files = base_tree(spec, kube_scheduler_image=upstream_kube_scheduler(version))
    root = yaml.safe_load(files["kustomization.yaml"])
    images = {i["name"]: i for i in root["images"]}
    # upstream's kube-scheduler of that exact release
    assert images["kube-scheduler"]["newName"] == "registry.k8s.io/kube-scheduler"
    assert images["kube-scheduler"]["newTag"] == version.tag
    # kubectl 1.20's kustomize takes a directory only under bases:
    if version.minor == OLDEST_MINOR:
        assert root["bases"] == ["stack"]
    else:
        assert "bases" not in root and "stack" in root["resources"]
    stack = yaml.safe_load(files["stack/kustomization.yaml"])
    assert {f"stack/{name}" for name in stack["resources"]} | {"crd.yaml"} == set(files) - {
        "kustomization.yaml",
        "stack/kustomization.yaml",
    }


@pytest.mark.parametrize(
    ("minor", "config_api", "pdb_api", "probes"),
    [
        # 1.20-1.21: only v1beta1; policy/v1 arrives in 1.21
        ("1.20", KUBE_SCHEDULER_CONFIG_V1BETA1, "policy/v1beta1", ("/healthz", "/healthz")),
        ("1.21", KUBE_SCHEDULER_CONFIG_V1BETA1, "policy/v1", ("/healthz", "/healthz")),
        # 1.22 adds v1beta2, 1.23 v1beta3, 1.25 v1 (the newest served is chosen)
        ("1.22", KUBE_SCHEDULER_CONFIG_V1BETA2, "policy/v1", ("/healthz", "/healthz")),
        ("1.23", KUBE_SCHEDULER_CONFIG_V1BETA3, "policy/v1", ("/healthz", "/healthz")),
        ("1.24", KUBE_SCHEDULER_CONFIG_V1BETA3, "policy/v1", ("/healthz", "/healthz")),
        ("1.25", KUBE_SCHEDULER_CONFIG_V1, "policy/v1", ("/healthz", "/healthz")),
        ("1.30", KUBE_SCHEDULER_CONFIG_V1, "policy/v1", ("/healthz", "/healthz")),
        # kube-scheduler serves /livez and /readyz from 1.31
        ("1.31", KUBE_SCHEDULER_CONFIG_V1, "policy/v1", ("/livez", "/readyz")),
        ("1.36", KUBE_SCHEDULER_CONFIG_V1, "policy/v1", ("/livez", "/readyz")),
        ("1.37", KUBE_SCHEDULER_CONFIG_V1, "policy/v1", ("/livez", "/readyz")),
    ],
    ids=["1.20", "1.21", "1.22", "1.23", "1.24", "1.25", "1.30", "1.31", "1.36", "1.37"],
)
def test_what_each_minor_renders(
    minor: str, config_api: str, pdb_api: str, probes: tuple[str, str]
) -> None:
    assert scheduler_config(_spec(minor))["apiVersion"] == config_api
    assert _find(minor, "PodDisruptionBudget", "layer-locality")["apiVersion"] == pdb_api
    pod = _find(minor, "Deployment", "layer-locality")["spec"]["template"]["spec"]
    [scheduler] = [c for c in pod["containers"] if c["name"] == "kube-scheduler"]
    live, ready = probes
    assert scheduler["livenessProbe"]["httpGet"]["path"] == live
    assert scheduler["startupProbe"]["httpGet"]["path"] == live
    assert scheduler["readinessProbe"]["httpGet"]["path"] == ready


@pytest.mark.parametrize("minor", ALL_MINORS)
def test_the_config_api_is_the_newest_the_minor_serves(minor: str) -> None:
    # the fixture lists which kube-scheduler minors read each API version
    served = served_by(minor)
    chosen = scheduler_config(_spec(minor))["apiVersion"].rpartition("/")[2]
    assert chosen in served
    assert chosen == next(v for v in API_PREFERENCE if v in served)


@pytest.mark.parametrize("minor", ALL_MINORS)
def test_scheduler_config_fits_kube_schedulers_types(minor: str) -> None:
    config = scheduler_config(_spec(minor))
    assert config_problems(config, minor) == []
    # and it is exactly what the ConfigMap carries
    configmap = _find(minor, "ConfigMap", "layer-locality-config")
    assert yaml.safe_load(configmap["data"]["scheduler-config.yaml"]) == config


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        # a misspelled field (nodeCacheCapable) is not a field of Extender
        (lambda c: c["extenders"][0].update(nodeCacheCapible=True), "not a field of Extender"),
        # an Extender without its required urlPrefix
        (lambda c: c["extenders"][0].pop("urlPrefix"), "urlPrefix: required"),
        # a duration written as a number
        (lambda c: c["extenders"][0].update(httpTimeout=1), "is not a duration"),
        # v1beta1's healthzBindAddress is gone from v1
        (lambda c: c.update(healthzBindAddress="0.0.0.0:10251"), "not a field of KubeScheduler"),
    ],
    ids=["misspelled", "required-missing", "wrong-type", "removed-field"],
)
def test_the_field_check_catches_mistakes(change: Any, problem: str) -> None:
    config = copy.deepcopy(scheduler_config(_spec("1.30")))
    change(config)
    assert any(problem in found for found in config_problems(config, "1.30"))


def test_a_config_api_the_minor_does_not_serve_is_refused() -> None:
    # v1beta1 (1.20's) went in 1.23: a 1.30 scheduler would not start
    config = scheduler_config(_spec("1.20"))
    assert config_problems(config, "1.30") == [
        "kube-scheduler 1.30 does not read v1beta1 (it reads: v1)"
    ]


@pytest.mark.parametrize("minor", ALL_MINORS)
def test_scheduler_rbac_is_upstreams_for_the_minor(minor: str) -> None:
    upstream = _rbac_fixture()[minor]
    expected = grants(upstream["system:kube-scheduler"] + upstream["system:volume-scheduler"])
    expected = {g for g in expected if (g[0], g[1]) not in LEADER_ELECTION_RESOURCES}
    role = _find(minor, "ClusterRole", "layersched:layer-locality")
    assert grants(role["rules"]) == expected
    assert role["rules"] == scheduler_rules(parse_kubernetes_version(minor).tag)


def test_the_rbac_fixture_covers_every_minor_and_names_its_sources() -> None:
    minors = _rbac_fixture()
    assert list(minors) == ALL_MINORS
    for minor, entry in minors.items():
        assert entry["source"], minor
        # the inferred ones say so, in the flag and in their source
        assert entry["inferred"] == entry["source"].startswith("INFERRED"), minor
    assert [m for m, e in minors.items() if e["inferred"]] == ["1.21", "1.22"]


def test_the_rbac_fixtures_1_20_is_what_a_live_1_20_api_server_serves() -> None:
    # test_deploy.py's UPSTREAM_1_20_RULES were read from the local testbed's v1.20.2
    from tests.unit.test_deploy import UPSTREAM_1_20_RULES

    entry = _rbac_fixture()["1.20"]
    assert grants(entry["system:kube-scheduler"] + entry["system:volume-scheduler"]) == (
        grants(UPSTREAM_1_20_RULES)
    )


@pytest.mark.parametrize("minor", ALL_MINORS)
def test_every_object_uses_an_api_the_minor_serves(minor: str) -> None:
    number = parse_kubernetes_version(minor).minor
    for obj in _objects(minor):
        key = (obj["apiVersion"], obj["kind"])
        assert key in SERVED, f"{key}: add it to SERVED with the minors that serve it"
        first, last = SERVED[key]
        assert first <= number and (last is None or number <= last), (minor, key)


@cache
def _validate() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        prereq.missing("kubernetes-validate is not installed: make venv (the dev extra has it)")
    return kubernetes_validate


def _schema_errors(obj: dict[str, Any], minor: str) -> str | None:
    validator = _validate()
    try:
        validator.validate(obj, f"{minor}.0", strict=True)
    except validator.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path)
        return f"{obj['kind']}/{obj['metadata']['name']} at {where or '(top)'}: {err.message}"
    return None


@pytest.mark.parametrize("minor", [f"1.{m}" for m in SCHEMA_MINORS])
def test_every_object_passes_the_minors_strict_schema(minor: str) -> None:
    errors = [e for obj in _objects(minor) if (e := _schema_errors(obj, minor))]
    assert errors == []


@pytest.mark.parametrize("minor", ["1.21", "1.22", "1.23", "1.24"])
def test_older_minors_fields_pass_the_oldest_schema(minor: str) -> None:
    # no schema for these minors: 1.25's bounds their fields from above
    errors = [
        e for obj in _objects(minor) if (e := _schema_errors(obj, f"1.{OLDEST_SCHEMA_MINOR}"))
    ]
    assert errors == []


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        # a misspelled container field
        (
            "Deployment",
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(livenesProbe={}),
            "'livenesProbe' was unexpected",
        ),
        # a field in the CRD's own schema that JSONSchemaProps does not have
        (
            "CustomResourceDefinition",
            lambda o: o["spec"]["versions"][0]["schema"]["openAPIV3Schema"].update(bogus=1),
            "'bogus' was unexpected",
        ),
        # a NetworkPolicy peer field that does not exist
        (
            "NetworkPolicy",
            lambda o: o["spec"]["egress"][0].update(toFQDNs=["docker.io"]),
            "'toFQDNs' was unexpected",
        ),
    ],
    ids=["deployment", "crd", "network-policy"],
)
def test_the_strict_schema_catches_unknown_fields(kind: str, change: Any, message: str) -> None:
    newest = f"1.{NEWEST_MINOR}"
    [obj] = [copy.deepcopy(o) for o in _objects(newest) if o["kind"] == kind][:1]
    change(obj)
    found = _schema_errors(obj, newest)
    assert found is not None and message in found


def test_a_removed_api_has_no_schema() -> None:
    # policy/v1beta1 went in 1.25: the 1.20 render's PDB has no 1.25 schema
    validator = _validate()
    pdb = next(o for o in _objects("1.20") if o["kind"] == "PodDisruptionBudget")
    with pytest.raises(validator.SchemaNotFoundError):
        validator.validate(pdb, "1.25.0", strict=True)


def test_the_range_ends_where_the_checks_end() -> None:
    # every minor rendered has a config fixture entry and an RBAC fixture entry, and the
    # newest (1.37, released 2026-08-26) is the newest kubernetes-validate checks here
    assert (OLDEST_MINOR, NEWEST_MINOR) == (20, 37)
    assert all(served_by(m) for m in ALL_MINORS)
    assert set(_rbac_fixture()) == set(ALL_MINORS)
    assert _validate().latest_version().split(".")[:2] == ["1", str(NEWEST_MINOR)]


def test_the_newest_minors_default_patch_is_the_release_layersched_builds() -> None:
    # `--kubernetes-version 1.37` renders for the release src/kube-scheduler/go.mod pins
    # (what `make kubernetes-modules` builds and the testbeds run): v1.37.2 both
    built = built_release()
    newest = parse_kubernetes_version(f"1.{NEWEST_MINOR}")
    assert newest.tag == built
    # and no patch past it is taken for a release
    with pytest.raises(InputError, match=f"the newest 1.{NEWEST_MINOR} release we know is"):
        parse_kubernetes_version(f"1.{NEWEST_MINOR}.{newest.patch + 1}")


def test_1_37_grants_what_its_scheduler_watches_on_top_of_1_36() -> None:
    # DRADeviceTaintRules goes GA and on in 1.37: kube-scheduler's DRA plugin watches
    # DeviceTaintRules, and a forbidden list would stall its informers' sync
    added = grants(scheduler_rules("1.37")) - grants(scheduler_rules("1.36"))
    assert added == {
        ("resource.k8s.io", "devicetaintrules", v, "*") for v in ("get", "list", "watch")
    }
    assert grants(scheduler_rules("1.36")) <= grants(scheduler_rules("1.37"))
