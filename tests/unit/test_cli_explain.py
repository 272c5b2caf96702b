"""``layersched explain pod`` in process: a stand-in API server (the pod, its Scheduled
event, the install's scheduler pods), a stand-in extender answering ``/debug/decisions``,
and a stand-in kubectl whose ``port-forward`` points at it (a real child process)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layersched.cli import _explain_extender
from layersched.cli.main import main
from tests.fixtures.kube_api import StandInApi, items, ok, status
from tests.fixtures.serving import serving

MB = 1024 * 1024
POD_PATH = "/api/v1/namespaces/scenario/pods/p1-again"
EVENTS_PATH = "/api/v1/namespaces/scenario/events"
INSTALL_PODS = "/api/v1/namespaces/layersched/pods"
#: The scored answer of the seed scenario: n2 held L1+L2 (40 MiB) of Img1's 44 MiB.
HELD = {
    "n2": {"present_bytes": 40 * MB, "total_bytes": 44 * MB},
    "n3": {"present_bytes": 0, "total_bytes": 44 * MB},
}


def _decision(uid: str = "uid-1", **change: Any) -> dict[str, Any]:
    return {
        "pod": "scenario/p1-again",
        "uid": uid,
        "at_s": 1795482000.0,
        "mode": "NodeNames",
        "neutral": "",
        "scores": {"n2": 9, "n3": 0},
        "strategy": "layer-locality",
        "bytes": HELD,
        **change,
    }


class _Extender(http.server.ThreadingHTTPServer):
    """Answers every GET with ``status`` and ``body``; records the paths asked."""

    daemon_threads = True
    status = 200
    body = b""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.paths: list[str] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Extender

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def extender() -> Iterator[_Extender]:
    with serving(_Extender(), "stand-in-extender") as server:
        yield server


def _answer(server: _Extender, document: Any, status: int = 200) -> None:
    server.status = status
    server.body = document if isinstance(document, bytes) else json.dumps(document).encode()


def _cluster(api: StandInApi, scheduler: str = "layer-locality", node: str = "n2") -> None:
    pod = {
        "metadata": {"name": "p1-again", "namespace": "scenario", "uid": "uid-1"},
        "spec": {"schedulerName": scheduler, "nodeName": node, "containers": []},
    }
    api.route("GET", POD_PATH, ok(pod))
    scheduled = {
        "involvedObject": {"uid": "uid-1"},
        "reason": "Scheduled",
        "reportingComponent": scheduler,
        "message": f"Successfully assigned scenario/p1-again to {node}",
        "firstTimestamp": "2026-11-24T01:00:00Z",
    }
    api.route("GET", EVENTS_PATH, items([scheduled]))


def _explain(
    capsys: pytest.CaptureFixture[str], api: StandInApi, *extra: str
) -> tuple[int, str, str]:
    argv = ["explain", "pod", "scenario/p1-again", "--kubeconfig", str(api.kubeconfig), *extra]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_bare_name_is_in_the_namespace_of_n_or_the_context(
    kube_api: StandInApi, extender: _Extender, capsys: pytest.CaptureFixture[str]
) -> None:
    # kubectl's rule: NAME alone is in -n's namespace, else the context's ("default" here)
    _cluster(kube_api)
    _answer(extender, _decision())
    argv = ["explain", "pod", "p1-again", "--kubeconfig", str(kube_api.kubeconfig)]
    code = main([*argv, "-n", "scenario", "-o", "yaml", "--extender-url", _url(extender)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "verdict: scored" in out and "pod: scenario/p1-again" in out
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 1 and "pod default/p1-again does not exist" in err


def _url(server: _Extender) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _json(capsys: pytest.CaptureFixture[str], api: StandInApi, *extra: str) -> dict[str, Any]:
    code, out, err = _explain(capsys, api, "-o", "json", *extra)
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def test_a_scored_pod_shows_each_nodes_held_and_missing_bytes(
    kube_api: StandInApi,
    extender: _Extender,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cluster(kube_api)
    _answer(extender, _decision())
    explained = _json(capsys, kube_api, "--extender-url", _url(extender))
    assert explained["verdict"] == "scored" and explained["node"] == "n2"
    assert explained["scheduled_by"] == "layer-locality"
    assert explained["nodes"][0] == {
        "node": "n2",
        "score": 9,
        "present_bytes": 40 * MB,
        "total_bytes": 44 * MB,
        "missing_bytes": 4 * MB,
        "chosen": True,
    }
    assert extender.paths == ["/debug/decisions?pod=scenario%2Fp1-again"]
    # and for a terminal of 80 columns
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = _explain(capsys, kube_api, "--extender-url", _url(extender))
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80, out
    row = next(line for line in out.splitlines() if line.startswith("│ n2"))
    assert "40.0 MiB" in row and "4.0 MiB" in row and "chosen" in row


@pytest.mark.parametrize(
    ("scheduler", "answer", "status", "verdict", "said"),
    [
        # another scheduler: no extender was asked, whatever it remembers
        ("default-scheduler", _decision(), 200, "not_ours", "'default-scheduler'"),
        # neutral, with the reason in words
        (
            "layer-locality",
            _decision(neutral="pod_unresolved", scores={"n2": 0}, bytes={}),
            200,
            "neutral",
            "could not be resolved",
        ),
        # only an earlier pod of that name was scored
        ("layer-locality", _decision(uid="uid-0"), 200, "no_answer", "earlier pod"),
        # nothing remembered
        ("layer-locality", {"Error": "decisions: no answer"}, 404, "no_answer", "no answer"),
        # not a decision at all (a hostile or broken server)
        ("layer-locality", b"<html>", 200, "no_answer", "not a decision"),
        ("layer-locality", {"pod": 1}, 200, "no_answer", "not a decision"),
    ],
    ids=["not-ours", "neutral", "stale-uid", "forgotten", "not-json", "wrong-shape"],
)
def test_placed_without_us_says_why(
    kube_api: StandInApi,
    extender: _Extender,
    capsys: pytest.CaptureFixture[str],
    scheduler: str,
    answer: Any,
    status: int,
    verdict: str,
    said: str,
) -> None:
    _cluster(kube_api, scheduler=scheduler)
    _answer(extender, answer, status)
    explained = _json(capsys, kube_api, "--extender-url", _url(extender))
    assert explained["verdict"] == verdict
    assert said in explained["why"] + " ".join(explained["notes"])
    assert explained["nodes"] == []


def test_an_unreachable_extender(
    kube_api: StandInApi, extender: _Extender, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(kube_api)
    url = _url(extender)
    extender.shutdown()
    extender.server_close()  # the port is closed: connection refused
    explained = _json(capsys, kube_api, "--extender-url", url)
    assert explained["verdict"] == "unreachable"
    assert "ignorable" in explained["why"] and "unreachable" in explained["notes"][0]


def test_an_older_extender_without_bytes_shows_scores_only(
    kube_api: StandInApi, extender: _Extender, capsys: pytest.CaptureFixture[str]
) -> None:
    _cluster(kube_api)
    old = {k: v for k, v in _decision().items() if k not in ("strategy", "bytes")}
    _answer(extender, old)
    code, out, _ = _explain(capsys, kube_api, "--extender-url", _url(extender))
    assert code == 0 and "reports scores only" in out
    assert next(line for line in out.splitlines() if line.startswith("│ n2")).count("?") == 2


def test_hostile_answers_print_as_text_and_are_bounded(
    kube_api: StandInApi,
    extender: _Extender,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cluster(kube_api)
    # rich markup in a node name prints as it is, not as style
    _answer(extender, _decision(scores={"[red]n9[/red]": 1, "n2": 9}))
    code, out, _ = _explain(capsys, kube_api, "--extender-url", _url(extender))
    assert code == 0 and "[red]n9[/red]" in out
    # an answer past the cap is not read to its end
    monkeypatch.setattr(_explain_extender, "MAX_ANSWER_BYTES", 1024)
    _answer(extender, _decision(scores={f"n{i}": 0 for i in range(1000)}))
    explained = _json(capsys, kube_api, "--extender-url", _url(extender))
    assert explained["verdict"] == "no_answer"
    assert "an answer larger than 1024 bytes, not read" in explained["notes"][0]


# ------------------------------------------------------- through kubectl port-forward


def _kubectl(tmp_path: Path, script: str) -> Path:
    path = tmp_path / "kubectl"
    path.write_text(f"#!{sys.executable}\n{script}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _forwarding_kubectl(tmp_path: Path, port: int) -> Path:
    # prints what kubectl prints once it listens, then waits to be stopped (SIGTERM)
    return _kubectl(
        tmp_path,
        "import json, signal, sys\n"
        f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print('Forwarding from 127.0.0.1:{port} -> 8888', flush=True)\n"
        f"print('Forwarding from [::1]:{port} -> 8888', flush=True)\n"
        "signal.pause()\n",
    )


def _install(api: StandInApi, *names: str) -> None:
    api.route(
        "GET",
        INSTALL_PODS,
        items(
            [
                {"metadata": {"name": name, "namespace": "layersched"}, "status": {"phase": phase}}
                for name, phase in ((n, "Running") for n in names)
            ]
        ),
    )


def test_the_install_is_asked_through_kubectl_port_forward(
    kube_api: StandInApi,
    extender: _Extender,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    _cluster(kube_api)
    _install(kube_api, "layer-locality-7d9f-abcde")
    _answer(extender, _decision())
    kubectl = _forwarding_kubectl(tmp_path, extender.server_address[1])
    explained = _json(capsys, kube_api, "--kubectl", str(kubectl))
    assert explained["verdict"] == "scored"
    assert explained["extender"] == "layersched/layer-locality-7d9f-abcde"
    # the scheduler pods by the install's labels; a forward on loopback to the extender port
    selector = kube_api.sent("GET", INSTALL_PODS)[0].query["labelSelector"]
    assert selector == "app.kubernetes.io/name=layer-locality,app.kubernetes.io/part-of=layersched"
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--namespace",
        "layersched",
        "port-forward",
        "--address",
        "127.0.0.1",
        "pod/layer-locality-7d9f-abcde",
        ":8888",
    ]


def test_a_refused_port_forward_is_unreachable_with_kubectls_words(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _cluster(kube_api)
    _install(kube_api, "layer-locality-a")
    kubectl = _kubectl(
        tmp_path,
        'import sys\nsys.stderr.write(\'error: pods "x" is forbidden: cannot create '
        "pods/portforward\\n')\nsys.exit(1)\n",
    )
    explained = _json(capsys, kube_api, "--kubectl", str(kubectl))
    assert explained["verdict"] == "unreachable"
    assert "cannot create pods/portforward" in explained["notes"][0]


def test_no_install_and_no_kubectl(
    kube_api: StandInApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cluster(kube_api)
    _install(kube_api)
    explained = _json(capsys, kube_api)
    assert (
        explained["verdict"] == "unreachable" and "is layersched installed" in explained["notes"][0]
    )
    _install(kube_api, "layer-locality-a")
    monkeypatch.setenv("PATH", os.devnull)
    code, _, err = _explain(capsys, kube_api)
    assert code == 2 and "no kubectl on PATH" in err and "--extender-url" in err


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("scenario/../secrets", "is not a Kubernetes object name"),
        ("/p1", "give it as NAMESPACE/NAME"),
        ("scenario/p1-again -n other", "names its namespace: drop -n other"),
    ],
    ids=["traversal", "empty-namespace", "two-namespaces"],
)
def test_bad_pod_keys_are_refused_before_any_call(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str], key: str, message: str
) -> None:
    code = main(["explain", "pod", *key.split(), "--kubeconfig", str(kube_api.kubeconfig)])
    _, err = capsys.readouterr()
    assert code == 2 and message in err
    assert kube_api.sent() == []


def test_a_missing_pod_is_one_line(
    kube_api: StandInApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _explain(capsys, kube_api, "--extender-url", "http://127.0.0.1:9")
    assert code == 1 and "pod scenario/p1-again does not exist" in err
    assert len(err.strip().splitlines()) == 1


def test_the_pods_pull_secrets_as_the_users_credentials_read_them(
    kube_api: StandInApi, extender: _Extender, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 45: regcred (readable) names the pod's private registry; gone is forbidden to
    # the user. explain says which images a secret covers, and never what it holds.
    _cluster(kube_api)
    password = "hunter2-secret-password"
    auth = base64.b64encode(f"robot:{password}".encode()).decode()
    config = {"auths": {"private.example:5000": {"auth": auth}}}
    secret = {
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }
    pod = {
        "metadata": {"name": "p1-again", "namespace": "scenario", "uid": "uid-1"},
        "spec": {
            "schedulerName": "layer-locality",
            "nodeName": "n2",
            "containers": [
                {"name": "app", "image": "private.example:5000/team/app:1"},
                {"name": "side", "image": "docker.io/library/busybox:1"},
            ],
            "imagePullSecrets": [{"name": "regcred"}, {"name": "gone"}],
        },
    }
    kube_api.route("GET", POD_PATH, ok(pod))
    kube_api.route("GET", "/api/v1/namespaces/scenario/secrets/regcred", ok(secret))
    kube_api.route(
        "GET",
        "/api/v1/namespaces/scenario/secrets/gone",
        status(403, "Forbidden", 'secrets "gone" is forbidden'),
    )
    _answer(extender, _decision())
    code, out, err = _explain(capsys, kube_api, "-o", "json", "--extender-url", _url(extender))
    assert code == 0, err
    explained = json.loads(out)
    assert explained["pull_secrets"] == [
        {
            "secret": "scenario/regcred",
            "readable": True,
            "outcome": "read",
            "registries": ["private.example:5000"],
            "images": ["private.example:5000/team/app:1"],
        },
        {
            "secret": "scenario/gone",
            "readable": False,
            "outcome": "forbidden",
            "registries": [],
            "images": [],
        },
    ]
    notes = " ".join(explained["notes"])
    assert "pull secret scenario/gone: forbidden with your credentials" in notes
    assert "--pull-secret-namespace" in notes
    assert password not in out + err and auth not in out + err
