"""Credentials for the Kubernetes API: a kubeconfig file, or the pod's service account.

Only what layersched's components need is read: the current context's server, its CA,
and a client certificate or a bearer token (inline ``-data`` or as files). Exec and
auth-provider plugins are not supported; the error says so and what to use instead.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import KubeError

#: Where a pod's service account credentials are mounted.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """How to reach and authenticate to one API server."""

    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    #: Inline ``*-data`` of the kubeconfig, held in memory (no file is left behind).
    ca_data: bytes | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    #: A bearer token, or the file it is read from (a projected token rotates: re-read).
    token: str | None = None
    token_file: str | None = None
    #: Where the settings came from, for error messages.
    origin: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """Verify the server with the CA (the system's when none is given); present the
        client certificate when there is one."""
        try:
            context = ssl.create_default_context(
                cafile=self.ca_file,
                cadata=self.ca_data.decode("ascii") if self.ca_data is not None else None,
            )
            if self.cert_data is not None or self.key_data is not None:
                _load_cert_chain_data(context, self)
            elif self.cert_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError, UnicodeDecodeError, ValueError) as err:
            raise KubeError(
                f"{self.origin}: cannot load the TLS files ({err}): check the certificate "
                "and key paths or data in the kubeconfig"
            ) from None
        return context

    def bearer(self) -> str | None:
        """The current token (re-read from its file each time)."""
        if self.token_file is not None:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError as err:
                raise KubeError(
                    f"{self.origin}: cannot read the token file {self.token_file} ({err.strerror})"
                ) from None
        return self.token


def _named(entries: object, name: str, what: str, origin: str) -> Mapping[str, Any]:
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(what)
                if isinstance(body, dict):
                    return body
    raise KubeError(f"{origin}: no {what} named {name!r}: check the kubeconfig's {what}s")


def _load_cert_chain_data(context: ssl.SSLContext, config: KubeConfig) -> None:
    """Load a client certificate given as data (or half data, half file).

    ``ssl`` loads a certificate chain from files only: the data are written to a private
    directory for the call and removed with it, so no credential outlives the load.
    """
    # mkdtemp makes the directory private (0700) to this user
    with tempfile.TemporaryDirectory(prefix="layersched-kube-") as directory:

        def file_of(data: bytes | None, path: str | None, name: str) -> str | None:
            if data is None:
                return path
            target = Path(directory) / name
            target.touch(mode=0o600)
            target.write_bytes(data)
            return str(target)

        cert = file_of(config.cert_data, config.cert_file, "cert.pem")
        key = file_of(config.key_data, config.key_file, "key.pem")
        if cert is None:
            raise ValueError("a client key without a client certificate")
        context.load_cert_chain(cert, key)


def _decoded(data: str, field: str, origin: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        raise KubeError(f"{origin}: {field} is not base64") from None


def _file_or_data(
    body: Mapping[str, Any], key: str, base: Path, origin: str
) -> tuple[str | None, bytes | None]:
    """``key``'s file (relative to the kubeconfig) or its decoded ``key-data``."""
    data = body.get(f"{key}-data")
    if isinstance(data, str) and data:
        return None, _decoded(data, f"{key}-data", origin)
    path = body.get(key)
    if isinstance(path, str) and path:
        return (str(base / path) if not Path(path).is_absolute() else path), None
    return None, None


def load_kubeconfig(path: str, context: str | None = None) -> KubeConfig:
    """The credentials of ``context`` (default: the current context) in ``path``."""
    origin = path
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise KubeError(f"{path}: cannot read the kubeconfig ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise KubeError(f"{path}: not YAML ({err})") from None
    if not isinstance(document, dict):
        raise KubeError(f"{path}: not a kubeconfig (expected a map with clusters, users)")
    name = context or document.get("current-context")
    if not isinstance(name, str) or not name:
        raise KubeError(f"{path}: no current-context: set one or pass the context name")
    ctx = _named(document.get("contexts"), name, "context", origin)
    cluster = _named(document.get("clusters"), str(ctx.get("cluster")), "cluster", origin)
    user = _named(document.get("users"), str(ctx.get("user")), "user", origin)
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeError(f"{path}: cluster server {server!r} must be an https:// URL")
    if "exec" in user or "auth-provider" in user:
        raise KubeError(
            f"{path}: user {ctx.get('user')!r} authenticates with an exec/auth-provider plugin, "
            "which layersched does not run: use a client certificate or a token"
        )
    base = Path(path).resolve().parent
    token = user.get("token")
    ca_file, ca_data = _file_or_data(cluster, "certificate-authority", base, origin)
    cert_file, cert_data = _file_or_data(user, "client-certificate", base, origin)
    key_file, key_data = _file_or_data(user, "client-key", base, origin)
    return KubeConfig(
        server=server.rstrip("/"),
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        ca_data=ca_data,
        cert_data=cert_data,
        key_data=key_data,
        token=token if isinstance(token, str) and token else None,
        token_file=user.get("tokenFile") if isinstance(user.get("tokenFile"), str) else None,
        origin=origin,
    )


def in_cluster_config(environ: Mapping[str, str] | None = None) -> KubeConfig:
    """The pod's service account (KUBERNETES_SERVICE_HOST/PORT and the mounted token)."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token = SERVICE_ACCOUNT_DIR / "token"
    if not host or not port or not token.exists():
        raise KubeError(
            "no Kubernetes credentials: not running in a pod (no KUBERNETES_SERVICE_HOST or "
            f"{token}); pass --kubeconfig FILE"
        )
    if ":" in host:
        host = f"[{host}]"
    return KubeConfig(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(token),
        origin="in-cluster service account",
    )


def load_config(kubeconfig: str | None) -> KubeConfig:
    """``kubeconfig`` when given, else the in-cluster service account."""
    return load_kubeconfig(kubeconfig) if kubeconfig else in_cluster_config()
