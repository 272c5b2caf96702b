"""Registry credentials from docker config files (``dockerconfigjson``) and credential helpers.

The format is Docker's ``config.json``, which is also what a Kubernetes
``kubernetes.io/dockerconfigjson`` Secret holds under ``.dockerconfigjson``:

* ``auths``: ``{registry: {"auth": base64("user:pass")}}``, or ``username`` and
  ``password``, or ``identitytoken`` (an OAuth2 refresh token for the
  registry's token service; it wins over the other fields, as in Docker);
* ``credHelpers``: ``{registry: NAME}``: ask ``docker-credential-NAME`` for that
  registry's credentials;
* ``credsStore``: ``NAME``: ask ``docker-credential-NAME`` for every other registry.

A helper is run as ``docker-credential-NAME get`` with the registry on stdin
and answers ``{"ServerURL": …, "Username": …, "Secret": …}``; a ``Username``
of ``<token>`` means ``Secret`` is an identity token (Docker's convention).
Helpers run lazily, when a registry first asks for credentials, and their
answers are cached (:data:`HELPER_CACHE_S`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from layersched.core.errors import InputError

Credentials = tuple[str, str]

#: Docker's marker user name: the "password" is an identity (refresh) token.
IDENTITY_TOKEN_USER = "<token>"  # noqa: S105 (a marker, not a password)
REGISTRY_AUTH_FILE_ENV = "REGISTRY_AUTH_FILE"
DOCKER_CONFIG_ENV = "DOCKER_CONFIG"
HELPER_PREFIX = "docker-credential-"
#: A helper answers from a keychain or a cloud metadata call in well under a second;
#: 5 s allows a slow IAM call and still bounds a hung helper (it runs in a resolution worker).
HELPER_TIMEOUT_S = 5.0
#: Helper answers are reused this long: short-lived cloud tokens (ECR: 12 h, GCR: 1 h)
#: stay fresh, and a registry's resolutions do not fork a process each.
HELPER_CACHE_S = 300.0
#: A helper's answer is a few hundred bytes of JSON; more is not a credential.
MAX_HELPER_OUTPUT_BYTES = 64 * 1024
# Docker stores Docker Hub credentials under its v1 index URL, and asks helpers for it.
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"
_DOCKER_HUB_AUTH_KEYS = (DOCKER_HUB_SERVER, "index.docker.io", "registry-1.docker.io")
_DOCKER_HUB = "docker.io"
# what docker-credential-* print on stdout when they hold nothing for the registry
_NOT_FOUND_MARKERS = ("credentials not found", "no credentials")


class CredentialHelperError(Exception):
    """A credential helper is missing, failed or answered nonsense (a RegistryError upstream)."""


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """What docker config files say: static credentials and the helpers to ask.

    Keys are registries as written in image references (``docker.io``,
    ``127.0.0.1:5000``).
    """

    credentials: Mapping[str, Credentials] = field(default_factory=dict)
    helpers: Mapping[str, str] = field(default_factory=dict)
    store: str | None = None


def default_auth_files() -> list[Path]:
    """``$REGISTRY_AUTH_FILE``, then ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``."""
    files = []
    if os.environ.get(REGISTRY_AUTH_FILE_ENV):
        files.append(Path(os.environ[REGISTRY_AUTH_FILE_ENV]))
    docker_dir = os.environ.get(DOCKER_CONFIG_ENV)
    files.append(
        Path(docker_dir) / "config.json" if docker_dir else Path.home() / ".docker/config.json"
    )
    return files


def load_registry_config(paths: Iterable[Path]) -> RegistryConfig:
    """Merge docker config files; earlier files win, key by key.

    Missing files are skipped; a malformed one is an :class:`InputError` naming it.
    """
    credentials: dict[str, Credentials] = {}
    helpers: dict[str, str] = {}
    store: str | None = None
    for path in paths:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError(
                f"reading registry credentials from {path}: {err}; fix or remove the file"
            ) from err
        if not isinstance(doc, dict):
            raise InputError(
                f"reading registry credentials from {path}: not a JSON object; expected "
                '{"auths": {...}} (a dockerconfigjson Secret\'s .dockerconfigjson)'
            )
        auths = doc.get("auths")
        for key, entry in (auths if isinstance(auths, dict) else {}).items():
            creds = decode_auth_entry(entry)
            host = auth_key_host(key)
            if creds is not None and host not in credentials:
                credentials[host] = creds
        declared = doc.get("credHelpers")
        for key, name in (declared if isinstance(declared, dict) else {}).items():
            helpers.setdefault(auth_key_host(key), _helper_name(path, name))
        if store is None and doc.get("credsStore"):
            store = _helper_name(path, doc["credsStore"])
    return RegistryConfig(credentials, helpers, store)


def _helper_name(path: Path, name: object) -> str:
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise InputError(
            f"reading registry credentials from {path}: credential helper {name!r} is not a "
            f"name (it runs as {HELPER_PREFIX}NAME): fix credHelpers/credsStore"
        )
    return name


def decode_auth_entry(entry: object) -> Credentials | None:
    if not isinstance(entry, dict):
        return None
    if isinstance(entry.get("identitytoken"), str) and entry["identitytoken"]:
        return IDENTITY_TOKEN_USER, entry["identitytoken"]
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return entry["username"], entry["password"]
    encoded = entry.get("auth")
    if not isinstance(encoded, str):
        return None
    try:
        user, sep, password = base64.b64decode(encoded).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def auth_key_host(key: str) -> str:
    """``https://index.docker.io/v1/`` -> ``docker.io``; ``http://h:5000`` -> ``h:5000``."""
    if key in _DOCKER_HUB_AUTH_KEYS:
        return _DOCKER_HUB
    host = key.split("://", 1)[-1]
    return host.split("/", 1)[0]


def helper_server(registry: str) -> str:
    """What a helper is asked for: Docker Hub under its v1 URL, others by host."""
    return DOCKER_HUB_SERVER if registry == _DOCKER_HUB else registry


def _run_bounded(
    argv: list[str], stdin: bytes, timeout_s: float
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` in its own process group; on timeout, kill the whole group.

    ``subprocess.run`` kills only the direct child, and then waits for the
    pipes that a grandchild (a helper that forks) still holds open.
    """
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_helper(name: str, server: str, timeout_s: float = HELPER_TIMEOUT_S) -> Credentials | None:
    """``docker-credential-NAME get`` for ``server``: its credentials, or None if it has none."""
    binary = shutil.which(HELPER_PREFIX + name)
    doing = f"asking credential helper {HELPER_PREFIX}{name} for {server}"
    if binary is None:
        raise CredentialHelperError(
            f"{doing}: {HELPER_PREFIX}{name} not found on PATH – install it in the image, "
            "or remove it from credHelpers/credsStore"
        )
    try:
        done = _run_bounded([binary, "get"], server.encode(), timeout_s)
    except subprocess.TimeoutExpired as err:
        raise CredentialHelperError(
            f"{doing}: no answer within {timeout_s} s – is it waiting for a keychain or a "
            "login prompt?"
        ) from err
    except OSError as err:
        raise CredentialHelperError(f"{doing}: cannot run it ({err})") from err
    out = done.stdout[:MAX_HELPER_OUTPUT_BYTES]
    if done.returncode != 0:
        said = (out or done.stderr[:MAX_HELPER_OUTPUT_BYTES]).decode(errors="replace").strip()
        if any(marker in said.lower() for marker in _NOT_FOUND_MARKERS):
            return None
        raise CredentialHelperError(
            f"{doing}: exit status {done.returncode} ({said[:200] or 'no output'})"
        )
    try:
        doc = json.loads(out)
        user, secret = doc["Username"], doc["Secret"]
    except (ValueError, TypeError, KeyError) as err:
        raise CredentialHelperError(
            f'{doing}: expected {{"Username": …, "Secret": …}} on stdout, got '
            f"{out[:80].decode(errors='replace')!r}"
        ) from err
    if not isinstance(user, str) or not isinstance(secret, str):
        raise CredentialHelperError(f"{doing}: Username and Secret must be strings")
    return None if not secret else (user, secret)


class CredentialSource:
    """Static credentials first, then a helper (cached); keyed by API host. Thread-safe.

    ``helpers`` maps an API host to ``(helper name, server to ask for)``;
    ``store`` is asked for every other host, by host.
    """

    def __init__(
        self,
        static: Mapping[str, Credentials],
        helpers: Mapping[str, tuple[str, str]] | None = None,
        store: str | None = None,
        *,
        timeout_s: float = HELPER_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.static = dict(static)
        self.helpers = dict(helpers or {})
        self.store = store
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Credentials | None, float]] = {}
        self.helper_runs = 0

    def known(self, host: str) -> Credentials | None:
        """Credentials for ``host`` without running anything (static, or a cached answer)."""
        if host in self.static:
            return self.static[host]
        with self._lock:
            cached = self._cache.get(host)
        return cached[0] if cached and self._clock() < cached[1] else None

    def missing_helpers(self) -> list[str]:
        """The configured helpers whose ``docker-credential-NAME`` is not on PATH."""
        names = {name for name, _ in self.helpers.values()} | {self.store or ""}
        return sorted(n for n in names if n and shutil.which(HELPER_PREFIX + n) is None)

    def get(self, host: str) -> Credentials | None:
        """Credentials for ``host``, running its helper if it has one and no fresh answer."""
        if host in self.static:
            return self.static[host]
        name, server = self.helpers.get(host, (self.store or "", host))
        if not name:
            return None
        with self._lock:
            cached = self._cache.get(host)
        if cached is not None and self._clock() < cached[1]:
            return cached[0]
        found = run_helper(name, server, self.timeout_s)
        with self._lock:
            self._cache[host] = (found, self._clock() + HELPER_CACHE_S)
            self.helper_runs += 1
        return found
