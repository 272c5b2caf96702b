"""Credentials for the Kubernetes API as the client uses them (:class:`KubeConfig`: the
server, its CA, a client certificate or a token, never shown in a ``repr``), and the
pod's own service account (:func:`in_cluster_config`). A user's kubeconfig is read by
:mod:`layersched.kube._kubeconfig`.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from layersched.core.errors import KubeError

#: Where a pod's service account credentials are mounted.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The namespace of a context that names none (kubectl's too).
DEFAULT_NAMESPACE = "default"
#: What a secret is shown as in a ``repr`` or a message.
REDACTED = "<redacted>"
#: The fields of a KubeConfig a ``repr`` never shows (issue 44: it held the client key,
#: the token and the proxy's password).
_SECRET_FIELDS = frozenset({"key_data", "token"})


def redacted_url(url: str) -> str:
    """``url`` with the password of its user info replaced (a ``proxy-url`` may carry
    one): ``http://user:<redacted>@proxy:3128``."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL a client would take either: show its scheme alone
        return url.partition("://")[0] + "://" + REDACTED if "@" in url else url
    if password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{name}:{REDACTED}@{host}"))


@dataclass(frozen=True, slots=True, repr=False)
class KubeConfig:
    """How to reach and authenticate to one API server. Its ``repr`` shows no secret:
    no key, no token, no proxy password."""

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
    #: ``insecure-skip-tls-verify``: the server's certificate is not checked.
    insecure: bool = False
    #: ``tls-server-name``: the name the server's certificate is checked against.
    tls_server_name: str | None = None
    #: ``proxy-url``: an HTTP(S) or SOCKS proxy to the API server.
    proxy_url: str | None = None
    #: The context's namespace (``default`` when it names none).
    namespace: str = DEFAULT_NAMESPACE
    #: The context's name ("" in a pod).
    context: str = ""
    #: A token that may change (an exec plugin's, re-run when it expires); wins over
    #: ``token`` and ``token_file``.
    token_source: Callable[[], str | None] | None = None

    def __repr__(self) -> str:
        shown = []
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in _SECRET_FIELDS and value is not None:
                value = REDACTED
            elif field.name == "proxy_url" and value is not None:
                value = redacted_url(value)
            shown.append(f"{field.name}={value!r}")
        return f"KubeConfig({', '.join(shown)})"

    def ssl_context(self) -> ssl.SSLContext:
        """Verify the server with the CA (the system's when none is given), unless the
        kubeconfig says insecure-skip-tls-verify; present the client certificate when
        there is one."""
        try:
            context = ssl.create_default_context(
                cafile=self.ca_file,
                cadata=self.ca_data.decode("ascii") if self.ca_data is not None else None,
            )
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
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
        """The current token (re-read from its file, or asked of its plugin, each time)."""
        if self.token_source is not None:
            return self.token_source()
        if self.token_file is not None:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError as err:
                raise KubeError(
                    f"{self.origin}: cannot read the token file {self.token_file} ({err.strerror})"
                ) from None
        return self.token


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


# ---------------------------------------------------------------------- in a pod


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
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else ""
    return KubeConfig(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(token),
        origin="in-cluster service account",
        namespace=namespace or DEFAULT_NAMESPACE,
    )
