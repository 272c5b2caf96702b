"""Credentials for the Kubernetes API (layersched.kube's config), found as kubectl finds
them: a kubeconfig with inline data, $KUBECONFIG's files merged, --context, an exec
credential plugin (run, its failure named), a token file, insecure-skip-tls-verify and
proxy-url; the in-cluster service account; client certificates loaded without leaving a
file behind."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import os
import select
import socket
import ssl
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import tenacity

from layersched.core.errors import KubeError
from layersched.kube import (
    KubeClient,
    KubeConfig,
    in_cluster_config,
    load_client_config,
    load_kubeconfig,
)
from tests.fixtures.extender import make_pki
from tests.fixtures.kube_api import StandInApi, ok
from tests.fixtures.kubeconfig import write_kubeconfig
from tests.fixtures.serving import serving


def test_kubeconfig_with_inline_data(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    cluster = {
        "server": "https://10.0.0.1:6443",
        "certificate-authority-data": base64.b64encode(pem).decode(),
    }
    path = write_kubeconfig(tmp_path / "kubeconfig", cluster, {"token": "secret"})
    loaded = load_kubeconfig(str(path))
    assert loaded.server == "https://10.0.0.1:6443"
    assert loaded.bearer() == "secret"
    # inline data stay in memory: no credential file is written
    assert loaded.ca_file is None and loaded.ca_data == pem


def _plugin(tmp_path: Path, output: dict[str, Any] | None, exit_code: int = 0) -> str:
    """A credential plugin: a script printing ``output`` (an ExecCredential) and
    exiting ``exit_code``; it records the KUBERNETES_EXEC_INFO it was given."""
    script = tmp_path / "plugin"
    info = tmp_path / "exec-info.json"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s" "$KUBERNETES_EXEC_INFO" > {info}\n'
        f"echo '{json.dumps(output)}'\n"
        "echo 'token endpoint unreachable' >&2\n"
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def _credential(token: str, api: str = "client.authentication.k8s.io/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": "ExecCredential", "status": {"token": token}}


@pytest.mark.parametrize(
    "api",
    ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"],
    ids=["v1", "v1beta1"],
)
def test_exec_plugin_token(tmp_path: Path, api: str) -> None:
    # the plugin runs, is told its API version, and its token is the bearer
    command = _plugin(tmp_path, _credential("from-plugin", api))
    user = {"exec": {"apiVersion": api, "command": command}}
    path = write_kubeconfig(tmp_path / "kubeconfig", {"server": "https://x:6443"}, user)
    loaded = load_kubeconfig(str(path))
    assert loaded.bearer() == "from-plugin"
    assert json.loads((tmp_path / "exec-info.json").read_text())["apiVersion"] == api


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "installHint": "install it",
                }
            },
            "plugin 'PLUGIN' gave no credential .*process returned 1.*install it",
        ),
        ({"username": "a", "password": "b"}, "removed in Kubernetes 1.19"),
    ],
    ids=["exec-plugin-fails", "basic-auth"],
)
def test_kubeconfig_refusals_say_what_to_use(
    tmp_path: Path, user: dict[str, Any], message: str
) -> None:
    command = _plugin(tmp_path, None, exit_code=1)
    if "exec" in user:
        user["exec"]["command"] = command
    path = write_kubeconfig(tmp_path / "kubeconfig", {"server": "https://x:6443"}, user)
    with pytest.raises(KubeError, match=message.replace("PLUGIN", command)):
        load_kubeconfig(str(path))


def _two_contexts(tmp_path: Path) -> tuple[Path, Path]:
    """Two files, as $KUBECONFIG merges them: the first sets the current context and
    the cluster 'k' (insecure, through a proxy); the second adds a context 'other' whose
    user reads a token file (relative to the kubeconfig) in namespace 'team'."""
    (tmp_path / "token").write_text("from-file\n")
    first = {
        "current-context": "main",
        "contexts": [{"name": "main", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": "https://first:6443",
                    "insecure-skip-tls-verify": True,
                    "proxy-url": "http://127.0.0.1:3128",
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "main-token"}}],
    }
    second = {
        "current-context": "other",
        "contexts": [
            {"name": "other", "context": {"cluster": "k2", "user": "u2", "namespace": "team"}},
            {"name": "main", "context": {"cluster": "k2", "user": "u2"}},
        ],
        "clusters": [{"name": "k2", "cluster": {"server": "https://second:6443"}}],
        "users": [{"name": "u2", "user": {"tokenFile": "token"}}],
    }
    (tmp_path / "a").write_text(json.dumps(first))
    (tmp_path / "b").write_text(json.dumps(second))
    return tmp_path / "a", tmp_path / "b"


def test_kubeconfig_env_merges_files_as_kubectl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _two_contexts(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{tmp_path / 'missing'}{os.pathsep}{b}")
    # the first file's current-context and its 'main' win; a missing file is skipped
    main = load_client_config()
    assert (main.context, main.server, main.bearer()) == (
        "main",
        "https://first:6443",
        "main-token",
    )
    assert main.insecure and main.proxy_url == "http://127.0.0.1:3128"
    assert main.namespace == "default"
    assert main.ssl_context().verify_mode == ssl.CERT_NONE
    # --context switches to the second file's context, its namespace and its token file
    other = load_client_config(context="other")
    assert (other.server, other.namespace, other.bearer()) == (
        "https://second:6443",
        "team",
        "from-file",
    )
    assert not other.insecure and other.proxy_url is None
    with KubeClient(main) as client:  # the proxy and the insecure context are accepted
        assert client.config.proxy_url == "http://127.0.0.1:3128"


@pytest.mark.parametrize(
    ("kubeconfig", "context", "message"),
    [
        ("missing", None, "missing: no kubeconfig there: check the path"),
        ("a", "nope", "context 'nope'.*pass another --context"),
        ("garbage", None, "no current-context.*--context"),
    ],
    ids=["no-file", "unknown-context", "not-a-kubeconfig"],
)
def test_kubeconfig_errors_name_the_file_and_fix(
    tmp_path: Path, kubeconfig: str, context: str | None, message: str
) -> None:
    _two_contexts(tmp_path)
    (tmp_path / "garbage").write_text("- just\n- a list\n")
    with pytest.raises(KubeError, match=message):
        load_client_config(str(tmp_path / kubeconfig), context)


def test_no_kubeconfig_anywhere_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeError, match=r"\.kube/config: no kubeconfig there: pass --kubeconfig"):
        load_client_config()


def test_outside_a_pod_without_kubeconfig() -> None:
    with pytest.raises(KubeError, match="pass --kubeconfig FILE"):
        in_cluster_config({})


def test_inline_client_credentials_load_without_leaving_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    def kubeconfig(key: Path) -> str:
        user = {"client-certificate-data": data(pki.client_cert), "client-key-data": data(key)}
        cluster = {
            "server": "https://127.0.0.1:6443",
            "certificate-authority-data": data(pki.ca_cert),
        }
        return str(write_kubeconfig(tmp_path / f"kubeconfig-{key.stem}", cluster, user))

    loaded = load_kubeconfig(kubeconfig(pki.client_key))
    context = loaded.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    # the CA and the client's certificate and key were loaded; nothing is left on disk
    assert loaded.cert_file is None and loaded.cert_data is not None
    assert list(scratch.iterdir()) == []
    # a key that is not the certificate's: one line naming the kubeconfig, still no file
    mismatched = load_kubeconfig(kubeconfig(pki.other_client_key))
    with pytest.raises(KubeError, match="kubeconfig-stranger: cannot load the TLS files"):
        mismatched.ssl_context()
    assert list(scratch.iterdir()) == []


class _ConnectProxy(http.server.BaseHTTPRequestHandler):
    """An HTTP CONNECT proxy: records each tunnel's target, then relays bytes both ways."""

    server: _ProxyServer

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        self.server.tunnels.append(self.path)
        upstream = socket.create_connection((host, int(port)), timeout=10)
        self.send_response(200, "Connection established")
        self.end_headers()
        sockets = [self.connection, upstream]
        while True:
            readable, _, _ = select.select(sockets, [], [], 10)
            if not readable:
                break
            for source in readable:
                data = source.recv(65536)
                if not data:
                    upstream.close()
                    return
                (upstream if source is self.connection else self.connection).sendall(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ConnectProxy)
        self.tunnels: list[str] = []


def test_proxy_url_carries_the_requests(kube_api: StandInApi, tmp_path: Path) -> None:
    # the cluster's proxy-url: every request tunnels through it (CONNECT to the server)
    kube_api.route("GET", "/version", ok({"gitVersion": "v1.37.2"}))
    config = json.loads(kube_api.kubeconfig.read_text())
    with serving(_ProxyServer(), "connect-proxy") as proxy:
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        config["clusters"][0]["cluster"]["proxy-url"] = proxy_url
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(config))
        with KubeClient(load_client_config(str(path))) as client:
            assert client.get("/version")["gitVersion"] == "v1.37.2"
        server = config["clusters"][0]["cluster"]["server"].removeprefix("https://")
        assert proxy.tunnels == [server]


def test_no_secret_in_a_repr_or_a_proxy_error(tmp_path: Path) -> None:
    # issue 44: repr(KubeConfig) held the client key, the token and the proxy's password,
    # and a proxy-url refused by the client was printed raw in the error (httpx itself
    # masks it in its own)
    proxy = "ftp://admin:hunter3@proxy.example:21"  # no proxy scheme httpx takes
    config = KubeConfig(
        server="https://10.0.0.1:6443",
        key_data=b"-----BEGIN PRIVATE KEY-----hunter1",
        token="hunter2",
        proxy_url=proxy,
    )
    shown = repr(config)
    assert "hunter" not in shown
    assert "admin:<redacted>@proxy.example:21" in shown
    with pytest.raises(KubeError, match="proxy-url") as refused:
        KubeClient(KubeConfig(server="https://10.0.0.1:6443", token="hunter2", proxy_url=proxy))
    assert "hunter" not in str(refused.value)
    assert "admin:<redacted>@proxy.example:21" in str(refused.value)


#: How long an exec plugin may take to start on a loaded machine.
PLUGIN_START_TIMEOUT_S = 10.0


def test_overlapping_token_renewals_leave_the_logging_as_it_was(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 44: a renewal of the exec plugin's token swapped the root logger's handlers
    # for a capturing one, without a lock; two renewals overlapping (A starts, B starts,
    # A ends, B ends) put A's capturing handler back for good, and every later log line
    # was lost. The plugin's credential has expired already, so each call runs it again;
    # it sleeps so that the two overlap in that order
    script = tmp_path / "plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "renewed", "expirationTimestamp": "2000-01-01T00:00:00Z"},
    }
    started = tmp_path / "started"
    script.write_text(f"#!/bin/sh\ntouch {started}\nsleep 0.6\necho '{json.dumps(credential)}'\n")
    script.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}
    path = write_kubeconfig(tmp_path / "kubeconfig", {"server": "https://x:6443"}, user)
    loaded = load_kubeconfig(str(path))
    root = logging.getLogger()
    handlers = list(root.handlers)
    tokens: list[str | None] = []
    first = threading.Thread(target=lambda: tokens.append(loaded.bearer()))
    second = threading.Thread(target=lambda: tokens.append(loaded.bearer()))
    started.unlink()  # the load ran the plugin once
    first.start()

    @tenacity.retry(
        stop=tenacity.stop_after_delay(PLUGIN_START_TIMEOUT_S),
        wait=tenacity.wait_fixed(0.01),
        reraise=True,
    )
    def first_plugin_running() -> None:
        assert started.exists()

    first_plugin_running()  # the second renewal starts while the first runs
    second.start()
    first.join(timeout=30)
    second.join(timeout=30)
    assert tokens == ["renewed", "renewed"]
    assert root.handlers == handlers
    with caplog.at_level(logging.WARNING):
        logging.getLogger("layersched.test").warning("a line after the renewals")
    assert "a line after the renewals" in caplog.text
