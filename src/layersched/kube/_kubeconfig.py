"""A kubeconfig, read as kubectl reads it, and the choice between it and the pod's service
account (:func:`load_config`, :func:`load_client_config`).

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
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import KubeError
from layersched.kube._config import (
    DEFAULT_NAMESPACE,
    KubeConfig,
    in_cluster_config,
)

_BEARER = "Bearer "
#: kubectl's kubeconfig when neither --kubeconfig nor $KUBECONFIG says otherwise.
DEFAULT_KUBECONFIG = "~/.kube/config"


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
