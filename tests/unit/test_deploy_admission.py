"""install/kustomize/'s per-node write authority: the objects per Kubernetes version, the agent's
bound token, least privilege of the webhook (before 1.30: install/kustomize/'s 1.37 holds the rule
as a policy), and the TLS an overlay issues for it (kept while good, renewed with the old
CA still trusted, its key written 0600)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from layersched.admission import CLIENT_COMMON_NAME
from layersched.cli.main import main as cli_main
from layersched.deploy import (
    ADMISSION_PRIVATE_FILES,
    AGENT_NAME,
    KUBERNETES_VERSION,
    NAMESPACE,
    WEBHOOK_SERVICE,
    EgressPeer,
    EgressSpec,
    ImageRef,
    StackSpec,
    admission_objects,
    admission_overlay_files,
    agent_daemonset,
    issue_webhook_tls,
    overlay_tls,
    stack_objects,
    stack_spec_for,
    still_usable,
    webhook_dns_names,
    write_tree,
)
from layersched.images.push import PushedImage, PushedStack, write_overlay

NAMES = webhook_dns_names(NAMESPACE)
NOW = datetime.datetime(2026, 11, 24, tzinfo=datetime.UTC)
#: The install for the newest minor that runs the admission webhook (1.30+ has the policy).
WEBHOOK_SPEC = stack_spec_for("1.29")


def _by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for obj in objects:
        found.setdefault(obj["kind"], []).append(obj)
    return found


@pytest.mark.parametrize(
    ("version", "kinds"),
    [
        # 1.20 to 1.29: the webhook and what it needs
        ("v1.20.2", {"ValidatingWebhookConfiguration", "Deployment", "Service"}),
        ("1.29", {"ValidatingWebhookConfiguration", "Deployment", "Service"}),
        # 1.30+ (install/kustomize/'s 1.37 too): the policy alone, nothing runs
        ("1.30", {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}),
        ("1.36", {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}),
        (KUBERNETES_VERSION, {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}),
    ],
    ids=["1.20", "1.29", "1.30", "1.36", "deploy"],
)
def test_the_rule_is_held_by_what_each_version_can_run(version: str, kinds: set[str]) -> None:
    objects = stack_objects(stack_spec_for(version))["admission.yaml"]
    assert kinds <= {o["kind"] for o in objects}
    if "ValidatingAdmissionPolicy" in kinds:
        assert {o["kind"] for o in objects} == kinds


def test_the_webhook_fails_closed_on_creates_and_updates_only() -> None:
    [config] = _by_kind(admission_objects(WEBHOOK_SPEC))["ValidatingWebhookConfiguration"]
    [hook] = config["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["timeoutSeconds"] == 5
    # DELETE is never sent: the garbage collector never waits on the webhook
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    # and every subresource it may gain (issue 30: a status subresource would not be checked)
    assert hook["rules"][0]["resources"] == ["nodelayerinventories", "nodelayerinventories/*"]
    assert hook["clientConfig"]["service"] == {
        "name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": "/validate", "port": 443,
    }  # fmt: skip
    # the install carries no caBundle: the overlay issues it
    assert "caBundle" not in hook["clientConfig"]


def test_the_webhook_may_get_pods_of_its_namespace_and_nodes_nothing_else() -> None:
    kinds = _by_kind(admission_objects(WEBHOOK_SPEC))
    [cluster_role] = kinds["ClusterRole"]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    [role] = kinds["Role"]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    [deployment] = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == WEBHOOK_SERVICE
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["args"][container["args"].index("--agent-service-account") + 1] == (
        f"{NAMESPACE}/{AGENT_NAME}"
    )


def test_the_agent_mounts_a_token_bound_to_its_pod() -> None:
    # 1.20 mounts a legacy Secret token by default, which names no pod: the DaemonSet
    # turns that off and mounts a projected (bound) token where clients look for it
    pod = agent_daemonset(StackSpec())["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    [volume] = [v for v in pod["volumes"] if "projected" in v]
    sources = volume["projected"]["sources"]
    # the lifetime the kubelet gives its own default token (an hour and 7 s)
    assert sources[0]["serviceAccountToken"] == {"path": "token", "expirationSeconds": 3607}
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"


def test_an_issued_certificate_names_the_service_and_its_ca_key_is_gone() -> None:
    tls = issue_webhook_tls(NAMES, now=NOW)
    [cert] = x509.load_pem_x509_certificates(tls.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "layersched-admission", "layersched-admission.layersched",
        "layersched-admission.layersched.svc",
    ]  # fmt: skip
    [ca] = x509.load_pem_x509_certificates(tls.ca_bundle_pem)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    # only the serving key exists anywhere: nothing else this bundle trusts can be issued
    assert b"PRIVATE KEY" not in tls.ca_bundle_pem + tls.cert_pem
    assert still_usable(tls, NAMES, now=NOW)
    # another Service name, a month before expiry, a key of another certificate: renew
    assert not still_usable(tls, webhook_dns_names("other"), now=NOW)
    assert not still_usable(tls, NAMES, now=NOW + datetime.timedelta(days=340))
    other = issue_webhook_tls(NAMES, now=NOW)
    assert not still_usable(
        type(tls)(tls.ca_bundle_pem, tls.cert_pem, other.key_pem), NAMES, now=NOW
    )


def _pushed() -> PushedStack:
    def image(name: str) -> PushedImage:
        return PushedImage(ImageRef(name, digest="sha256:" + "c" * 64), 1, (1,), 0.0)

    return PushedStack(image("r:5000/layersched/layersched"), image("r:5000/layersched/ks"))


def test_an_overlay_issues_tls_once_and_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "overlay"
    write_overlay(out, _pushed(), base=tmp_path / "deploy", spec=WEBHOOK_SPEC)
    secret_file = out / "admission-tls.yaml"
    # the private key's file is the owner's alone
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["admission-tls.yaml"]
    [patch] = kustomization["patchesJson6902"]
    assert patch["target"] == {
        "group": "admissionregistration.k8s.io", "version": "v1",
        "kind": "ValidatingWebhookConfiguration", "name": "layersched-agent-node",
    }  # fmt: skip
    first = secret_file.read_text()
    # written again: the same certificate (no rotation, no window of distrust)
    assert write_overlay(out, _pushed(), base=tmp_path / "deploy", spec=WEBHOOK_SPEC) == []
    assert secret_file.read_text() == first


def test_a_renewal_keeps_the_old_ca_in_the_bundle(tmp_path: Path) -> None:
    spec = WEBHOOK_SPEC
    files, _ = admission_overlay_files(spec, issue_webhook_tls(NAMES, now=NOW))
    write_tree(tmp_path, files, private=ADMISSION_PRIVATE_FILES)
    old = overlay_tls(tmp_path, spec, now=NOW)
    assert old is not None
    # 340 days on, 25 left: renewed; the bundle trusts the old certificate and the new one
    later = NOW + datetime.timedelta(days=340)
    renewed = overlay_tls(tmp_path, spec, now=later)
    assert renewed is not None and renewed.key_pem != old.key_pem
    bundle = x509.load_pem_x509_certificates(renewed.ca_bundle_pem)
    assert len(bundle) == 2
    for tls in (old, renewed):
        [cert] = x509.load_pem_x509_certificates(tls.cert_pem)
        assert any(_issued_by(cert, ca) for ca in bundle)


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # noqa: BLE001 (any failure means "not this CA")
        return False
    return True


def test_deploys_overlay_names_the_pushed_images_and_carries_no_tls(tmp_path: Path) -> None:
    # install/kustomize/'s version holds the rule as a policy: the overlay is its kustomization
    # alone
    out = tmp_path / "overlay"
    assert write_overlay(out, _pushed(), base=tmp_path / "deploy") == ["kustomization.yaml"]
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert "resources" not in kustomization and "patchesJson6902" not in kustomization
    assert [i["digest"] for i in kustomization["images"]] == ["sha256:" + "c" * 64] * 2


def test_from_1_30_an_overlay_carries_no_tls(tmp_path: Path) -> None:
    spec = stack_spec_for("1.31")
    assert overlay_tls(tmp_path, spec) is None
    assert admission_overlay_files(spec, None) == ({}, {})
    assert not list(tmp_path.iterdir())


def test_the_secret_in_the_overlay_is_the_issued_tls(tmp_path: Path) -> None:
    tls = issue_webhook_tls(NAMES, now=NOW)
    files, _ = admission_overlay_files(WEBHOOK_SPEC, tls)
    secret = yaml.safe_load(files["admission-tls.yaml"])
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "layersched-admission-tls",
        "labels": {"app.kubernetes.io/name": WEBHOOK_SERVICE,
                   "app.kubernetes.io/part-of": "layersched"},
        "namespace": NAMESPACE,
    }  # fmt: skip
    assert base64.b64decode(secret["data"]["tls.crt"]) == tls.cert_pem


# --------------------------------------------------------------------- agent-guard
def test_each_namespaces_agents_have_a_policy_of_their_own() -> None:
    # install/kustomize/'s install and the local testbed's host agents side by side: two policies,
    # each naming its own namespace's account, neither overwriting (or uninstalling) the
    # other; install/kustomize/'s keeps the name it always had
    names = {}
    for namespace in (NAMESPACE, "layersched-testbed"):
        [policy, binding] = admission_objects(StackSpec(namespace=namespace))
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        account = f"system:serviceaccount:{namespace}:{AGENT_NAME}"
        assert f"request.userInfo.username == '{account}'" in str(policy["spec"])
        names[namespace] = policy["metadata"]["name"]
    assert names == {
        NAMESPACE: "layersched-agent-node",
        "layersched-testbed": "layersched-testbed-agent-node",
    }


def test_agent_guard_prints_the_policy_for_a_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["deploy", "agent-guard", "--namespace", "layersched-testbed"])
    assert code == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    expected = admission_objects(StackSpec(namespace="layersched-testbed"))
    assert documents == expected  # the generator's objects, not a copy
    # before 1.30 there is no policy: one clear line saying how to install the webhook
    assert cli_main(["deploy", "agent-guard", "--kubernetes-version", "1.29.3"]) != 0
    err = capsys.readouterr().err
    assert "admission webhook" in err and "deploy render" in err and "Traceback" not in err


def test_the_api_server_gets_a_client_certificate_and_only_it_may_call(tmp_path: Path) -> None:
    # issue 30: the webhook authenticated no caller and its port was open to every pod.
    # The overlay now gives the API server an admission configuration whose kubeconfig
    # holds a client certificate from the webhook's CA (written 0600, for the control
    # plane's disk), the webhook asks for it, and with the API server's addresses known
    # its NetworkPolicy admits those only.
    out = tmp_path / "overlay"
    write_overlay(out, _pushed(), base=tmp_path / "deploy", spec=WEBHOOK_SPEC)
    config = yaml.safe_load((out / "apiserver-admission-config.yaml").read_text())
    [plugin] = config["plugins"]
    assert plugin["name"] == "ValidatingAdmissionWebhook"
    kubeconfig_path = plugin["configuration"]["kubeConfigFile"]
    assert kubeconfig_path.endswith("/apiserver-admission-kubeconfig.yaml")
    kubeconfig_file = out / "apiserver-admission-kubeconfig.yaml"
    assert stat.S_IMODE(kubeconfig_file.stat().st_mode) == 0o600
    assert {"apiserver-admission-kubeconfig.yaml"} <= ADMISSION_PRIVATE_FILES
    [user] = yaml.safe_load(kubeconfig_file.read_text())["users"]
    assert user["name"] == f"{NAMES[-1]}:443"  # the Service, as the API server looks it up
    client = x509.load_pem_x509_certificate(
        base64.b64decode(user["user"]["client-certificate-data"])
    )
    secret = yaml.safe_load((out / "admission-tls.yaml").read_text())
    [ca] = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["ca.crt"]))
    client.verify_directly_issued_by(ca)  # the CA the webhook trusts for its callers
    usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
    # the webhook asks for it
    [deployment] = [o for o in admission_objects(WEBHOOK_SPEC) if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--client-ca-file") + 1].endswith("/ca.crt")
    assert args[args.index("--client-name") + 1] == CLIENT_COMMON_NAME
    # written again: kept, the client certificate too
    first = kubeconfig_file.read_text()
    assert write_overlay(out, _pushed(), base=tmp_path / "deploy", spec=WEBHOOK_SPEC) == []
    assert kubeconfig_file.read_text() == first


@pytest.mark.parametrize(
    ("api_server", "sources"),
    [
        # unknown: any source (the client certificate keeps other callers out)
        ((), None),
        # the control plane's addresses behind default/kubernetes (the cluster IP on 443
        # is not where the API server calls from)
        (("10.0.0.5:6443", "10.0.0.6:6443", "10.96.0.1:443"), ["10.0.0.5/32", "10.0.0.6/32"]),
    ],
    ids=["unknown", "control-plane"],
)
def test_the_webhooks_ingress_is_the_control_plane(
    api_server: tuple[str, ...], sources: list[str] | None
) -> None:
    peers = tuple(EgressPeer.parse(text, "--api-server") for text in api_server)
    spec = dataclasses.replace(WEBHOOK_SPEC, egress=EgressSpec(api_server=peers))
    [policy] = [o for o in admission_objects(spec) if o["kind"] == "NetworkPolicy"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    if sources is None:
        assert "from" not in rule
    else:
        assert rule["from"] == [{"ipBlock": {"cidr": cidr}} for cidr in sources]
