"""The per-node rule's webhook (``layersched admission``), served for real over HTTPS in
the test process, judging hostile and honest writes against a stand-in API server.

Every review goes through the whole path: TLS with the CA and serving certificate an
overlay issues (verified for the Service's DNS name, as the API server does), the body
limits, the decoder, the rule, and the pod and Node lookups over HTTPS to the stand-in
API. The cluster and the cases are :mod:`tests.fixtures.admission`'s, shared with the
ValidatingAdmissionPolicy's tests.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from layersched.admission import (
    CLIENT_COMMON_NAME,
    AdmissionMetrics,
    AgentIdentities,
    ApiLookup,
    create_app,
)
from layersched.deploy import issue_webhook_tls, webhook_dns_names
from layersched.kube import KubeClient, load_kubeconfig
from layersched.serving import ReloadingTls, ServingError
from tests.fixtures.admission import (
    AGENT_ACCOUNT,
    CASES,
    NAMESPACE,
    NODES,
    PODS,
    Case,
)
from tests.fixtures.extender import LOOPBACK
from tests.fixtures.kube_api import Request, StandInApi, kube_api_server, ok, status
from tests.fixtures.serving import running_app

__all__ = ["kube_api_server"]  # the fixture, imported for pytest

AGENTS = AgentIdentities(frozenset({(NAMESPACE, AGENT_ACCOUNT)}))
SERVICE_NAME = webhook_dns_names(NAMESPACE)[-1]
HTTP_TIMEOUT_S = 10.0


def route_cluster(api: StandInApi) -> None:
    """The stand-in API serves the fixture's pods and Nodes (anything else: 404)."""
    api.reset()
    for pod, (uid, node) in PODS.items():
        api.route(
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}",
            ok({"metadata": {"name": pod, "uid": uid}, "spec": {"nodeName": node}}),
        )
    for node, uid in NODES.items():
        api.route("GET", f"/api/v1/nodes/{node}", ok({"metadata": {"name": node, "uid": uid}}))


@contextlib.contextmanager
def running_webhook(app: web.Application, tls: ReloadingTls) -> Iterator[str]:
    """``app`` served over HTTPS on a free loopback port, on its own event loop thread."""
    with running_app(app, tls.context) as port:
        yield f"https://{LOOPBACK}:{port}"


@pytest.fixture(scope="module")
def webhook_tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReloadingTls, ssl.SSLContext]:
    """The server's TLS as an overlay issues it, and a client that trusts its caBundle."""
    directory = tmp_path_factory.mktemp("webhook-tls")
    issued = issue_webhook_tls(webhook_dns_names(NAMESPACE))
    (directory / "tls.crt").write_bytes(issued.cert_pem)
    (directory / "tls.key").write_bytes(issued.key_pem)
    client = ssl.create_default_context(cadata=issued.ca_bundle_pem.decode())
    return ReloadingTls(str(directory / "tls.crt"), str(directory / "tls.key")), client


def https(
    method: str, url: str, trust: ssl.SSLContext, name: str = SERVICE_NAME, body: bytes = b""
) -> httpx.Response:
    """One request to a loopback URL whose certificate is verified for ``name`` (as the
    API server verifies the webhook's for the Service's DNS name)."""
    headers = {"Content-Type": "application/json"} if body else {}
    with httpx.Client(verify=trust, timeout=HTTP_TIMEOUT_S) as client:
        return client.request(
            method, url, content=body, headers=headers, extensions={"sni_hostname": name}
        )


class Webhook:
    """One running webhook and what it talks to."""

    def __init__(self, url: str, client: ssl.SSLContext, api: StandInApi, lookup: ApiLookup):
        self.url, self.client, self.api, self.lookup = url, client, api, lookup

    def post(self, body: bytes) -> httpx.Response:
        # connect to 127.0.0.1, verify the certificate for the Service's name
        return https("POST", f"{self.url}/validate", self.client, body=body)

    def review(self, case: Case, uid: str = "review-1") -> dict[str, Any]:
        response = self.post(json.dumps(case.review(uid)).encode())
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == uid
        return answer["response"]

    def get(self, path: str) -> httpx.Response:
        return https("GET", f"{self.url}{path}", self.client)


@contextlib.contextmanager
def webhook(
    api: StandInApi, tls: tuple[ReloadingTls, ssl.SSLContext], **limits: Any
) -> Iterator[Webhook]:
    with KubeClient(load_kubeconfig(str(api.kubeconfig)), timeout_s=2.0) as kube:
        lookup = ApiLookup(kube)
        app = create_app(AGENTS, lookup, AdmissionMetrics(lookup), **limits)
        with running_webhook(app, tls[0]) as url:
            yield Webhook(url, tls[1], api, lookup)


@pytest.fixture
def served(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> Iterator[Webhook]:
    route_cluster(kube_api_server)
    with webhook(kube_api_server, webhook_tls) as running:
        yield running


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_webhook_judges_each_write(served: Webhook, case: Case) -> None:
    # the worked reason of each case is its comment in tests/fixtures/admission.py
    answer = served.review(case)
    allowed, reason = case.webhook
    assert answer["allowed"] is allowed, answer
    if not allowed:
        status_ = answer["status"]
        assert status_["code"] == 403 and status_["reason"] == "Forbidden", status_
        assert case.says in status_["message"], status_["message"]
    metrics = served.get("/metrics").text
    result = "allowed" if allowed else "refused"
    assert (
        f'layersched_admission_reviews_total{{operation="{case.operation}",result="{result}"}} 1.0'
        in metrics
    )
    if not allowed:
        assert f'layersched_admission_refusals_total{{reason="{reason}"}} 1.0' in metrics


CASE = {c.id: c for c in CASES}


def test_n1s_agent_is_told_plainly_why_n2s_object_is_refused(served: Webhook) -> None:
    # the message an agent (and its operator) reads in the API's 403
    message = served.review(CASE["sa-other-node"])["status"]["message"]
    assert message == (
        "the layersched agent on node 'n1' may write only its own node's NodeLayerInventory "
        "('n1'), not 'n2'"
    )


def test_a_pods_node_is_looked_up_once(served: Webhook) -> None:
    # the pod's node is cached by its uid, the Node's uid for a while: three writes of
    # n1's agent cost one pod GET and one Node GET
    for index in range(3):
        assert served.review(CASE["sa-own-node-1.20-token"], f"r{index}")["allowed"]
    assert len(served.api.sent("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/agent-n1")) == 1
    assert len(served.api.sent("GET", "/api/v1/nodes/n1")) == 1
    assert served.lookup.stats.cache_hits == {"pod": 2, "node": 2}


def test_an_api_that_fails_refuses_the_write_as_unchecked(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> None:
    # the webhook's RBAC was removed (403) or the API failed (500): the write is refused
    # with 500 and says it could not be checked, never "the pod does not exist"
    route_cluster(kube_api_server)
    kube_api_server.route(
        "GET", "/api/v1/nodes/n1", status(403, "Forbidden", 'nodes "n1" is forbidden')
    )
    with webhook(kube_api_server, webhook_tls) as running:
        answer = running.review(CASE["cert-own-node"])
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 500
        assert "could not check" in answer["status"]["message"]
        assert "forbidden" in answer["status"]["message"]
        metrics = running.get("/metrics").text
        assert (
            'layersched_admission_reviews_total{operation="CREATE",result="error"} 1.0' in metrics
        )


def test_slow_lookups_are_cut_at_the_review_deadline(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> None:
    # the API answers after the review's deadline: the webhook refuses in time, before
    # the API server's own timeoutSeconds, instead of hanging on
    route_cluster(kube_api_server)
    release = threading.Event()

    def slow(_request: Request) -> Any:
        release.wait(5)
        return ok({"metadata": {"uid": NODES["n1"]}})

    kube_api_server.route("GET", "/api/v1/nodes/n1", slow)
    try:
        with webhook(kube_api_server, webhook_tls, review_timeout_s=0.5) as running:
            answer = running.review(CASE["cert-own-node"])
    finally:
        release.set()
    assert answer["allowed"] is False
    assert "within 0.5 s" in answer["status"]["message"]


def test_past_the_concurrency_limit_a_review_is_answered_503(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> None:
    # one review at a time: a second one while the first waits on the API gets 503 at
    # once (the API server then applies failurePolicy: Fail)
    route_cluster(kube_api_server)
    entered, release = threading.Event(), threading.Event()

    def held(_request: Request) -> Any:
        entered.set()
        release.wait(5)
        return ok({"metadata": {"uid": NODES["n1"]}})

    kube_api_server.route("GET", "/api/v1/nodes/n1", held)
    with webhook(kube_api_server, webhook_tls, max_concurrent_reviews=1) as running:
        first = threading.Thread(target=running.review, args=(CASE["cert-own-node"],))
        first.start()
        try:
            assert entered.wait(5)
            second = running.post(json.dumps(CASE["cert-other-node"].review()).encode())
        finally:
            release.set()
            first.join(10)
        assert second.status_code == 503
        assert "overloaded" in second.json()["error"]


HOSTILE_BODIES = [
    # not JSON at all
    (b"{not json", 400, "not an AdmissionReview"),
    # JSON, but not a review: another kind, another version, no request
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", '
     b'"request": {"uid": "u", "operation": "CREATE"}}', 400, "admissionReviewVersions"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', 400, "no request"),
    # a request without its uid and operation
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
     400, "uid"),
    # userInfo.extra of the wrong type (a string where a list must be)
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"uid": "u", "operation": "CREATE",
                             "userInfo": {"extra": {"x": "y"}}}}).encode(), 400, "extra"),
    # nested 100,000 deep (msgspec's recursion)
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "x": '
     + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "not an AdmissionReview"),
    # a string that is not UTF-8
    (b'{"apiVersion": "admission.k8s.io/v1\xff", "kind": "AdmissionReview"}', 400,
     "not an AdmissionReview"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "code", "says"),
    HOSTILE_BODIES,
    ids=["not-json", "v1beta1", "no-request", "no-uid", "extra-not-lists", "deep", "not-utf8"],
)
def test_malformed_bodies_are_400_with_the_reason(
    served: Webhook, body: bytes, code: int, says: str
) -> None:
    response = served.post(body)
    assert response.status_code == code, response.text
    assert says in response.json()["error"]
    assert served.api.sent() == []  # nothing was looked up for it
    assert (
        f'layersched_admission_rejected_requests_total{{code="{code}"}} 1.0'
        in served.get("/metrics").text
    )


def test_a_body_past_the_limit_is_413(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> None:
    # a 64 KiB limit and an AdmissionReview of 100 KiB (a padded object)
    route_cluster(kube_api_server)
    review = CASE["sa-other-node"].review()
    review["request"]["object"]["padding"] = "x" * 100_000
    with webhook(kube_api_server, webhook_tls, max_request_bytes=64 * 1024) as running:
        response = running.post(json.dumps(review).encode())
    assert response.status_code == 413
    assert "--max-request-bytes" in response.json()["error"]


def test_the_certificate_is_verified_for_the_services_name(served: Webhook) -> None:
    # the API server checks <service>.<namespace>.svc: another name fails the handshake
    with pytest.raises(httpx.ConnectError, match=r"certificate|hostname|match"):
        https("GET", f"{served.url}/livez", served.client, "layersched-admission.other.svc")
    assert served.get("/livez").status_code == 200


def test_readyz_waits_for_the_api_and_a_renewed_certificate_is_read(
    tmp_path: Path, kube_api_server: StandInApi
) -> None:
    # /readyz is 503 until the server's own probe of the API succeeded; the serving
    # certificate's files, replaced, are re-read without a restart
    names = webhook_dns_names(NAMESPACE)
    first, second = issue_webhook_tls(names), issue_webhook_tls(names)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)
    tls = ReloadingTls(str(cert), str(key))
    assert tls.reload() is False  # unchanged files: nothing to do
    cert.write_bytes(second.cert_pem)
    key.write_bytes(second.key_pem)
    assert tls.reload() is True
    route_cluster(kube_api_server)
    with KubeClient(load_kubeconfig(str(kube_api_server.kubeconfig))) as kube:
        lookup = ApiLookup(kube)
        app = create_app(AGENTS, lookup, AdmissionMetrics(lookup))
        with running_webhook(app, tls) as url:
            client = ssl.create_default_context(cadata=second.ca_bundle_pem.decode())
            response = https("GET", f"{url}/readyz", client)
            assert response.status_code == 503
            assert "has not answered" in response.text
            # the first CA no longer verifies the served certificate
            old = ssl.create_default_context(cadata=first.ca_bundle_pem.decode())
            with pytest.raises(httpx.ConnectError):
                https("GET", f"{url}/livez", old)


def test_a_key_that_does_not_match_is_a_clear_error(tmp_path: Path) -> None:
    names = webhook_dns_names(NAMESPACE)
    first, second = issue_webhook_tls(names), issue_webhook_tls(names)
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(second.key_pem)
    with pytest.raises(ServingError, match="--tls-key-file"):
        ReloadingTls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # no agent identity at all: every write would be allowed, so it is refused
        (["--agent-group", ""], "no agent identities"),
        (["--agent-service-account", "layersched-agent"], "write NAMESPACE/NAME"),
        (["--agent-service-account", "a/b/c"], "write NAMESPACE/NAME"),
        (["--port", "0"], "--port 0"),
        (["--max-request-bytes", "100"], "at least 16384"),
        (["--review-timeout-s", "0.5"], "more than 1.0"),
    ],
    ids=["no-agents", "account-without-namespace", "account-with-two-slashes", "port",
         "tiny-body", "timeout-below-a-lookup"],
)  # fmt: skip
def test_the_command_refuses_settings_that_cannot_work(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from layersched.cli.main import EXIT_USAGE, main

    code = main(["admission", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem", *args])
    assert code == EXIT_USAGE
    assert says in capsys.readouterr().err


# -- issue 30: slow callers hold no slot, and only the API server may call -------------


def _slow_posts(url: str, trust: ssl.SSLContext, count: int) -> list[ssl.SSLSocket]:
    """``count`` connections that send a review's headers and 10 of its 10,000 bytes,
    then nothing (a slow caller)."""
    host, port = url.removeprefix("https://").split(":")
    held = []
    for _ in range(count):
        raw = socket.create_connection((host, int(port)), timeout=HTTP_TIMEOUT_S)
        tls = trust.wrap_socket(raw, server_hostname=SERVICE_NAME)
        tls.sendall(
            b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000\r\n\r\n" + b'{"apiVersi'
        )
        held.append(tls)
    return held


def test_slow_callers_hold_no_review_slot(
    kube_api_server: StandInApi, webhook_tls: tuple[ReloadingTls, ssl.SSLContext]
) -> None:
    # two slots, and six callers sending their bodies slowly: before, each took a slot
    # before its body was read, and an honest review got 503; now a slot is taken only
    # once a body has arrived, and the review is answered
    route_cluster(kube_api_server)
    with webhook(
        kube_api_server, webhook_tls, max_concurrent_reviews=2, body_timeout_s=8.0
    ) as running:
        slow = _slow_posts(running.url, webhook_tls[1], 6)
        try:
            answer = running.review(CASE["cert-own-node"])
        finally:
            for connection in slow:
                connection.close()
    assert answer["allowed"] is True


@pytest.fixture(scope="module")
def client_tls(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ReloadingTls, ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
    """The server's TLS asking for client certificates from the overlay's CA, and three
    clients: the API server's (its client certificate), one with none, and one presenting
    the webhook's own serving certificate (the CA's, but not the API server's name)."""
    directory = tmp_path_factory.mktemp("webhook-client-tls")
    issued = issue_webhook_tls(webhook_dns_names(NAMESPACE))
    for name, data in (
        ("tls.crt", issued.cert_pem),
        ("tls.key", issued.key_pem),
        ("ca.crt", issued.ca_bundle_pem),
        ("client.crt", issued.client_cert_pem),
        ("client.key", issued.client_key_pem),
    ):
        (directory / name).write_bytes(data)
    server = ReloadingTls(
        str(directory / "tls.crt"),
        str(directory / "tls.key"),
        str(directory / "ca.crt"),
        require_client_cert=False,  # as `layersched admission` serves: 401 without one
    )
    clients = []
    for cert, key in (("client.crt", "client.key"), (None, None), ("tls.crt", "tls.key")):
        context = ssl.create_default_context(cadata=issued.ca_bundle_pem.decode())
        if cert is not None and key is not None:
            context.load_cert_chain(directory / cert, directory / key)
        clients.append(context)
    return server, clients[0], clients[1], clients[2]


@pytest.mark.parametrize(
    ("caller", "code"),
    [
        (1, 200),
        (2, 401),
        # a certificate for serving only (its extended key usage): the handshake fails
        (3, 0),
    ],
    ids=["api-server", "no-certificate", "a-serving-certificate"],
)
def test_only_the_api_server_may_call(
    kube_api_server: StandInApi,
    client_tls: tuple[ReloadingTls, ssl.SSLContext, ssl.SSLContext, ssl.SSLContext],
    caller: int,
    code: int,
) -> None:
    # before: any pod could post reviews (each forged one cost an API GET); now only a
    # client with the API server's certificate from the overlay's CA; the probes need none
    route_cluster(kube_api_server)
    server, trust = client_tls[0], client_tls[caller]
    with KubeClient(load_kubeconfig(str(kube_api_server.kubeconfig)), timeout_s=2.0) as kube:
        lookup = ApiLookup(kube)
        app = create_app(AGENTS, lookup, AdmissionMetrics(lookup), client_name=CLIENT_COMMON_NAME)
        with running_webhook(app, server) as url:
            body = json.dumps(CASE["cert-own-node"].review()).encode()
            if code == 0:
                with pytest.raises(httpx.TransportError):
                    https("POST", f"{url}/validate", trust, body=body)
            else:
                response = https("POST", f"{url}/validate", trust, body=body)
            assert https("GET", f"{url}/livez", client_tls[2]).status_code == 200
    if code == 0:
        assert kube_api_server.sent() == []
        return
    assert response.status_code == code, response.text
    if code != 200:
        assert "certificate" in response.json()["error"]
        assert kube_api_server.sent() == []  # nothing looked up for it
