"""layersched.kube's client against a stand-in API server over HTTPS: what each call
sends (paths, selectors, grace periods, patch and log parameters), how answers and
refusals come back, and that a name which is not a Kubernetes name never reaches a URL."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from layersched.core.errors import KubeError
from layersched.kube import (
    ALL_PODS_PATH,
    NODE_LAYERS_PATH,
    NODES_PATH,
    Gone,
    KubeClient,
    events_path,
    load_kubeconfig,
    node_layers_path,
    node_path,
    pod_log_path,
    pod_path,
    pods_path,
    selector,
)
from tests.fixtures.kube_api import JSON, Answer, Request, StandInApi, items, ok, status


@pytest.fixture
def kube(kube_api: StandInApi) -> Iterator[KubeClient]:
    with KubeClient(load_kubeconfig(str(kube_api.kubeconfig))) as client:
        yield client


# ------------------------------------------------------------------ paths
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (node_path("n1"), "/api/v1/nodes/n1"),
        (pods_path("layersched-scenario"), "/api/v1/namespaces/layersched-scenario/pods"),
        (pod_path("default", "p1-again"), "/api/v1/namespaces/default/pods/p1-again"),
        (pod_log_path("ns", "sched-0.a"), "/api/v1/namespaces/ns/pods/sched-0.a/log"),
        (events_path("ns"), "/api/v1/namespaces/ns/events"),
        (node_layers_path("w1"), f"{NODE_LAYERS_PATH}/w1"),
    ],
    ids=["node", "pods", "pod", "log", "events", "node-layers"],
)
def test_paths(path: str, expected: str) -> None:
    assert path == expected


@pytest.mark.parametrize(
    "name",
    [
        "../secrets",  # would climb out of the collection
        "a?b=c",  # would start a query string
        "a/b",  # another segment
        "P1",  # uppercase: not a Kubernetes name (pod_name() lowercases)
        "",
        "-a",  # must start and end alphanumeric
        "a" * 254,  # one over the 253-character limit
    ],
    ids=["dotdot", "query", "slash", "uppercase", "empty", "leading-dash", "too-long"],
)
def test_a_bad_name_never_reaches_a_url(name: str, kube_api: StandInApi, kube: KubeClient) -> None:
    with pytest.raises(KubeError, match=r"pod name .* is not a Kubernetes object name"):
        kube.get(pod_path("default", name))
    assert kube_api.sent() == []


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        # labels as install/kustomize/ sets them, in order
        (
            {"app.kubernetes.io/name": "x", "app.kubernetes.io/part-of": "y"},
            "app.kubernetes.io/name=x,app.kubernetes.io/part-of=y",
        ),
        # a field value with the selector's own separators is escaped (fields.EscapeValue)
        ({"involvedObject.name": "a,b=c\\d"}, "involvedObject.name=a\\,b\\=c\\\\d"),
    ],
    ids=["labels", "escaped-field"],
)
def test_selector(terms: dict[str, str], expected: str) -> None:
    assert selector(terms) == expected


# ------------------------------------------------------------------ verbs
def test_list_sends_selectors_on_every_page(kube_api: StandInApi, kube: KubeClient) -> None:
    def pages(request: Request) -> Answer:
        if "continue" not in request.query:
            return ok({"metadata": {"continue": "t1", "resourceVersion": "7"}, "items": [{"a": 1}]})
        return ok({"metadata": {"resourceVersion": "8"}, "items": [{"b": 2}]})

    path = pods_path("ns")
    kube_api.route("GET", path, pages)
    found, version = kube.list(path, label_selector="app=x", field_selector="spec.nodeName=n1")
    assert found == [{"a": 1}, {"b": 2}]
    assert version == "8"
    first, second = kube_api.sent("GET", path)
    assert first.query == {
        "limit": "500",
        "labelSelector": "app=x",
        "fieldSelector": "spec.nodeName=n1",
    }
    # the second page keeps the selectors (the API refuses a continue token without them)
    assert second.query == {**first.query, "continue": "t1"}


def test_list_without_selectors_sends_none(kube_api: StandInApi, kube: KubeClient) -> None:
    kube_api.route("GET", ALL_PODS_PATH, items([]))
    assert kube.list(ALL_PODS_PATH) == ([], "1")
    assert kube_api.sent()[0].query == {"limit": "500"}


@pytest.mark.parametrize(
    ("grace_period_s", "query"),
    [(None, {}), (1, {"gracePeriodSeconds": "1"}), (0, {"gracePeriodSeconds": "0"})],
    ids=["pods-own", "one-second", "at-once"],
)
def test_delete_grace_period(
    grace_period_s: int | None, query: dict[str, str], kube_api: StandInApi, kube: KubeClient
) -> None:
    path = pod_path("ns", "p1")
    kube_api.route("DELETE", path, ok({"kind": "Pod"}))
    assert kube.delete(path, grace_period_s=grace_period_s) is True
    assert kube_api.sent("DELETE", path)[0].query == query


def test_delete_of_a_missing_object_is_false(kube: KubeClient) -> None:
    # unrouted: 404 NotFound, as the API answers for a pod that is gone
    assert kube.delete(pod_path("ns", "gone"), grace_period_s=0) is False


def test_patch_is_a_json_merge_patch(kube_api: StandInApi, kube: KubeClient) -> None:
    path = node_path("f0-00")
    kube_api.route("PATCH", path, ok({"metadata": {"name": "f0-00", "annotations": {"a": "1"}}}))
    patched = kube.patch(path, {"metadata": {"annotations": {"a": "1"}}})
    assert patched["metadata"]["annotations"] == {"a": "1"}
    [sent] = kube_api.sent("PATCH", path)
    assert sent.headers["content-type"] == "application/merge-patch+json"
    assert sent.json() == {"metadata": {"annotations": {"a": "1"}}}


def test_read_log_parameters_and_text(kube_api: StandInApi, kube: KubeClient) -> None:
    path = pod_log_path("layersched", "sched-a")
    text = "line one\nline two ü\n"
    kube_api.route("GET", path, Answer(200, text.encode(), "text/plain"))
    assert kube.read_log(path, container="extender", since_s=6) == text
    [sent] = kube_api.sent("GET", path)
    assert sent.query == {"container": "extender", "sinceSeconds": "6", "limitBytes": str(16 << 20)}
    assert sent.headers["accept"].startswith("text/plain")


def test_read_log_is_bounded_even_if_the_server_ignores_the_limit(
    kube_api: StandInApi, kube: KubeClient
) -> None:
    path = pod_log_path("ns", "chatty")
    kube_api.route("GET", path, Answer(200, b"x" * 10_000 + b"\xff", "text/plain"))
    assert kube.read_log(path, limit_bytes=100) == "x" * 100
    # an invalid byte in a log is replaced, not an exception
    assert kube.read_log(path).endswith("x\ufffd")


def test_read_log_of_a_starting_container(kube_api: StandInApi, kube: KubeClient) -> None:
    path = pod_log_path("ns", "b")
    message = 'container "extender" in pod "b" is waiting to start: ContainerCreating'
    kube_api.route("GET", path, status(400, "BadRequest", message))
    with pytest.raises(KubeError) as caught:
        kube.read_log(path, container="extender")
    assert caught.value.status == 400
    assert str(caught.value) == (
        f"reading the log of /api/v1/namespaces/ns/pods/b container extender: 400 {message}"
    )


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (401, "check the kubeconfig's certificate or token"),
        (403, "grant it in RBAC"),
        (404, "check its name, namespace and API version"),
        (409, "it exists already"),
        (422, "fix the field it names"),
        (429, "retry later"),
        (503, "check its log, then retry"),
    ],
    ids=["unauthorized", "forbidden", "not-found", "conflict", "invalid", "throttled", "down"],
)
def test_a_refusal_names_the_call_the_api_message_and_the_fix(
    code: int, fix: str, kube_api: StandInApi, kube: KubeClient
) -> None:
    kube_api.route("POST", pods_path("ns"), status(code, "Reason", "the API's own words"))
    with pytest.raises(KubeError) as caught:
        kube.create(pods_path("ns"), {"kind": "Pod"})
    assert caught.value.status == code
    message = str(caught.value)
    assert message.startswith(f"creating in /api/v1/namespaces/ns/pods: {code} the API's own words")
    assert fix in message


def test_gone_is_its_own_error(kube_api: StandInApi, kube: KubeClient) -> None:
    kube_api.route("GET", NODES_PATH, status(410, "Expired", "too old resource version"))
    with pytest.raises(Gone, match="410 too old resource version"):
        kube.list(NODES_PATH)


def test_the_token_is_sent(kube_api: StandInApi, kube: KubeClient) -> None:
    kube_api.route("GET", "/version", ok({"gitVersion": "v1.20.2"}))
    assert kube.get("/version")["gitVersion"] == "v1.20.2"
    assert kube_api.sent()[0].headers["accept"] == JSON


def test_no_server_says_so(kube_api: StandInApi) -> None:
    # the stand-in's credentials, but a port nothing listens on
    dead = dataclasses.replace(
        load_kubeconfig(str(kube_api.kubeconfig)), server="https://127.0.0.1:1"
    )
    with KubeClient(dead) as kube, pytest.raises(KubeError, match="did not answer") as caught:
        kube.read_log(pod_log_path("ns", "p"))
    assert caught.value.status == 0
