"""Credentials for the Kubernetes API: the kubeconfig kubectl would use, or the pod's
service account.

A kubeconfig is read by the official Kubernetes Python client's loader
(``kubernetes.config``, imported only here and only when a kubeconfig is read, so the
components that run in a pod never load it): the files of ``$KUBECONFIG`` merged,
``--context``, exec credential plugins (``client.authentication.k8s.io`` v1 and v1beta1,
re-run when their token expires), token files, ``insecure-skip-tls-verify``,
``tls-server-name`` and ``proxy-url``, as kubectl reads them. What it decodes stays in
memory: the CA, client certificate and key it writes to files are read back and the
files removed before :func:`load_kubeconfig` returns.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import KubeError

#: Where a pod's service account credentials are mounted.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: kubectl's kubeconfig when neither --kubeconfig nor $KUBECONFIG says otherwise.
DEFAULT_KUBECONFIG = "~/.kube/config"
#: The namespace of a context that names none (kubectl's too).
DEFAULT_NAMESPACE = "default"
_BEARER = "Bearer "
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


# ---------------------------------------------------------------------- kubeconfig


def kubeconfig_paths(kubeconfig: str | None = None) -> list[str]:
    """The files kubectl reads: ``kubeconfig`` alone when given, else ``$KUBECONFIG``'s
    (``:``-separated, merged: the first file to set a value wins), else ~/.kube/config."""
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p]
    return paths or [str(Path(DEFAULT_KUBECONFIG).expanduser())]


class _Captured:
    """The errors the official loader logs instead of raising (a failed exec plugin)."""

    def __init__(self) -> None:
        self.messages: list[str] = []


class _LoaderRecords(logging.Filter):
    """On the root logger, where the official loader logs (``logging.error``): a record
    logged there by a thread inside :func:`_captured_errors` is kept for that block (its
    errors) and not emitted; every other record passes untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        captured: _Captured | None = getattr(self.local, "captured", None)
        if captured is None:
            return True
        if record.levelno >= logging.ERROR:
            captured.messages.append(record.getMessage())
        return False


_LOADER_RECORDS = _LoaderRecords()
_INSTALLING = threading.Lock()


@contextmanager
def _captured_errors() -> Iterator[_Captured]:
    """What this thread logs on the root logger during the block is kept, not emitted:
    the loader's errors are said once, in the KubeError that explains them. Thread-safe,
    and no handler is ever swapped: before issue 44 the block replaced the root logger's
    handlers, and two token renewals overlapping left the capturing one installed (every
    later line lost), while other threads' lines logged meanwhile were taken for the
    loader's."""
    root = logging.getLogger()
    with _INSTALLING:
        if _LOADER_RECORDS not in root.filters:
            root.addFilter(_LOADER_RECORDS)
    outer = getattr(_LOADER_RECORDS.local, "captured", None)
    captured = _LOADER_RECORDS.local.captured = _Captured()
    try:
        yield captured
    finally:
        _LOADER_RECORDS.local.captured = outer


def _documents(files: Sequence[str]) -> list[Mapping[str, Any]]:
    """The files' YAML maps, each with its ``_file`` (what is not a map, the loader
    reports in its own words)."""
    found: list[Mapping[str, Any]] = []
    for path in files:
        try:
            document = yaml.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(document, Mapping):
            found.append({**document, "_file": path})
    return found


def _first(documents: Sequence[Mapping[str, Any]], section: str, name: object) -> Mapping[str, Any]:
    """kubectl's merge: the first file to define ``name`` in ``section`` wins."""
    key = section.removesuffix("s")
    for document in documents:
        entries = document.get(section)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                body = entry.get(key)
                return {**body, "_file": document["_file"]} if isinstance(body, Mapping) else {}
    return {}


def _current_context(documents: Sequence[Mapping[str, Any]]) -> str | None:
    """kubectl's current-context of merged files: the first file's that sets one."""
    for document in documents:
        name = document.get("current-context")
        if isinstance(name, str) and name:
            return name
    return None


def _read_back(path: object) -> bytes | None:
    return Path(path).read_bytes() if isinstance(path, str) and path else None


def load_kubeconfig(path: str | None = None, context: str | None = None) -> KubeConfig:
    """The credentials of ``context`` (default: the current context) in ``path``, or in
    the files kubectl would read when ``path`` is None (:func:`kubeconfig_paths`)."""
    files = kubeconfig_paths(path)
    where = os.pathsep.join(files)
    existing = [f for f in files if Path(f).expanduser().is_file()]
    if not existing:
        hint = (
            "check the path"
            if path
            else "pass --kubeconfig FILE, set KUBECONFIG, or write ~/.kube/config"
        )
        raise KubeError(f"{where}: no kubeconfig there: {hint}")
    try:
        from kubernetes.client import Configuration
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger
    except ImportError as err:
        raise KubeError(
            f"{where}: reading a kubeconfig needs the kubernetes package ({err}): "
            "pip install kubernetes (in a pod, drop --kubeconfig: the service account is used)"
        ) from None
    origin = ", ".join(existing)
    documents = _documents(existing)
    name = context or _current_context(documents)
    if not name:
        raise KubeError(
            f"{origin}: no current-context: run kubectl config use-context NAME, or pass --context"
        )
    loaded = Configuration()
    with tempfile.TemporaryDirectory(prefix="layersched-kube-") as scratch:
        try:
            with _captured_errors() as errors:
                merged = KubeConfigMerger(os.pathsep.join(existing))  # type: ignore[no-untyped-call]
                if merged.config is None:
                    raise ConfigException("no configuration found")
                loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
                    config_dict=merged.config,
                    active_context=name,
                    config_base_path=None,  # relative paths: from the file that names them
                    temp_file_path=scratch,
                )
                loader.load_and_set(loaded)  # type: ignore[no-untyped-call]
            ca_data, cert_data, key_data = (
                _read_back(loaded.ssl_ca_cert),
                _read_back(loaded.cert_file),
                _read_back(loaded.key_file),
            )
        except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
            raise KubeError(
                f"{origin}: context {name!r}: {err}: fix the kubeconfig "
                "(kubectl config view shows what it holds), or pass another --context"
            ) from None
        except AttributeError:
            raise KubeError(
                f"{origin}: not a kubeconfig (expected a map with clusters, contexts, users)"
            ) from None
    ctx = _first(documents, "contexts", name)
    user = _first(documents, "users", ctx.get("user"))
    server = str(loaded.host or "").rstrip("/")
    if not server.startswith("https://"):
        raise KubeError(
            f"{origin}: context {name!r}: cluster server {server!r} must be an https:// URL "
            "(fix clusters[].cluster.server)"
        )
    token = _token(loaded, user, errors.messages, origin, name)
    namespace = ctx.get("namespace")
    token_file = user.get("tokenFile")
    exec_user = "exec" in user
    return KubeConfig(
        server=server,
        ca_data=ca_data,
        cert_data=cert_data,
        key_data=key_data,
        # a token file is re-read on each call (a rotated token); an inline token wins
        token=None if exec_user or (token_file and "token" not in user) else token,
        token_file=_resolved(token_file, str(user.get("_file"))) if "token" not in user else None,
        origin=origin,
        insecure=not loaded.verify_ssl,
        tls_server_name=loaded.tls_server_name or None,
        proxy_url=loaded.proxy or None,
        namespace=namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE,
        context=name,
        token_source=_exec_token_source(loaded, origin) if exec_user else None,
    )


def _resolved(token_file: object, first: str) -> str | None:
    if not isinstance(token_file, str) or not token_file:
        return None
    return token_file if Path(token_file).is_absolute() else str(Path(first).parent / token_file)


def _token(
    loaded: Any, user: Mapping[str, Any], errors: Sequence[str], origin: str, context: str
) -> str | None:
    """The bearer token the loader found (prefix removed); KubeError when the user's
    plugin failed, or the user authenticates in a way layersched does not speak."""
    header = loaded.api_key.get("BearerToken")
    if isinstance(header, str) and header.startswith(_BEARER):
        return header[len(_BEARER) :].strip()
    if "exec" in user and loaded.cert_file is None:
        command = user["exec"].get("command") if isinstance(user["exec"], Mapping) else None
        hint = user["exec"].get("installHint") if isinstance(user["exec"], Mapping) else None
        raise KubeError(
            f"{origin}: context {context!r}: the exec credential plugin {command!r} gave no "
            f"credential ({'; '.join(errors) or 'no token or client certificate'}): "
            + (hint.strip() if isinstance(hint, str) and hint.strip() else "run it by hand")
            + " (users[].user.exec)"
        )
    if isinstance(header, str) and header:
        raise KubeError(
            f"{origin}: context {context!r}: user name and password authentication was "
            "removed in Kubernetes 1.19: use a client certificate, a token or an exec plugin"
        )
    return None


def _exec_token_source(loaded: Any, origin: str) -> Callable[[], str | None]:
    """The exec plugin's token, re-run by the loader once it expires."""

    def token() -> str | None:
        with _captured_errors() as errors:
            header = loaded.get_api_key_with_prefix("BearerToken")
        if isinstance(header, str) and header.startswith(_BEARER):
            return header[len(_BEARER) :]
        if errors.messages:
            raise KubeError(
                f"{origin}: renewing the exec plugin's token: {'; '.join(errors.messages)}"
            )
        return None

    return token


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


def load_config(kubeconfig: str | None) -> KubeConfig:
    """A component's credentials: ``kubeconfig`` when given, else the pod's service account."""
    return load_kubeconfig(kubeconfig) if kubeconfig else in_cluster_config()


def load_client_config(kubeconfig: str | None = None, context: str | None = None) -> KubeConfig:
    """A user's credentials, found as kubectl finds them: ``kubeconfig``, else the files
    of ``$KUBECONFIG``, else ~/.kube/config; in a pod without any, its service account."""
    if kubeconfig is None and context is None:
        files = kubeconfig_paths()
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        if in_pod and not any(Path(f).is_file() for f in files):
            return in_cluster_config()
    return load_kubeconfig(kubeconfig, context)
