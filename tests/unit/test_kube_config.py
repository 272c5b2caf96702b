"""Credentials for the Kubernetes API (layersched.kube's config): a kubeconfig with inline
data, the refusals that say what to use instead, the in-cluster service account, and
client certificates loaded without leaving a file behind."""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import KubeError
from layersched.kube import in_cluster_config, load_kubeconfig
from tests.fixtures.extender import make_pki
from tests.fixtures.kubeconfig import write_kubeconfig


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


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "exec/auth-provider plugin"),
    ],
    ids=["exec-plugin"],
)
def test_kubeconfig_refusals_say_what_to_use(
    tmp_path: Path, user: dict[str, Any], message: str
) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", {"server": "https://x:6443"}, user)
    with pytest.raises(KubeError, match=message):
        load_kubeconfig(str(path))


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
