"""Registry authentication: credentials, HTTP basic, and the Bearer-token challenge.

:class:`RegistryAuth` is an ``httpx.Auth`` flow. A request first goes out with
whatever is known to work for its host and scope (a cached token, or basic
credentials once the host asked for them). On ``401``, the
``WWW-Authenticate`` challenge decides:

* ``Basic``: resend once with the host's credentials;
* ``Bearer realm=…,service=…,scope=…``: ask the realm for a token (with basic
  credentials if any, anonymously otherwise), cache it per (host, scope) until
  its ``expires_in`` runs out, and resend once.

The token request goes through the same ``httpx`` client, so timeouts,
transports and event hooks apply to it too.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import threading
import time
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from layersched.core.errors import InputError

Credentials = tuple[str, str]

# The distribution token spec's default when a token response has no expires_in.
DEFAULT_TOKEN_LIFETIME_S = 60.0
# Refresh a token this long before it expires, so it never lapses in flight.
TOKEN_EXPIRY_MARGIN_S = 5.0
REGISTRY_AUTH_FILE_ENV = "REGISTRY_AUTH_FILE"
DOCKER_CONFIG_ENV = "DOCKER_CONFIG"
# Docker stores Docker Hub credentials under its v1 index URL.
_DOCKER_HUB_AUTH_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io")
_DOCKER_HUB = "docker.io"
# /v2/<name>/manifests/<ref>, /v2/<name>/blobs/<digest>, /v2/<name>/blobs/uploads/[<id>], tags.
_REPO_PATH = re.compile(
    r"^/v2/(?P<name>.+?)/(?:manifests/[^/]+|blobs/uploads/[^/]*|blobs/[^/]+|tags/list)$"
)
_CHALLENGE_PARAM = re.compile(r'([A-Za-z_][\w-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)')
_READ_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Challenge:
    """One parsed ``WWW-Authenticate`` challenge: scheme (lowercase) and parameters."""

    scheme: str
    params: Mapping[str, str]


class TokenError(Exception):
    """The token service refused or answered nonsense (turned into a RegistryError upstream)."""

    def __init__(self, realm: str, status: int, detail: str) -> None:
        super().__init__(f"token service {realm} answered {status}: {detail}")
        self.realm = realm
        self.status = status
        self.detail = detail


def parse_challenge(header: str) -> Challenge | None:
    """Parse ``Bearer realm="…",service="…",scope="…"`` (or ``Basic realm="…"``)."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params = {}
    for key, value in _CHALLENGE_PARAM.findall(rest):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[key.lower()] = value
    return Challenge(scheme.lower(), params)


def scope_for(request: httpx.Request) -> str | None:
    """The token scope a request needs: ``repository:<name>:pull`` (or ``pull,push``)."""
    match = _REPO_PATH.match(request.url.path)
    if not match:
        return None
    actions = "pull" if request.method in _READ_METHODS else "pull,push"
    return f"repository:{match['name']}:{actions}"


def _basic_header(credentials: Credentials) -> str:
    user, password = credentials
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class RegistryAuth(httpx.Auth):
    """Anonymous, basic and Bearer-token auth for every registry host; thread-safe.

    ``credentials_for(host)`` maps an API host (``127.0.0.1:5000``,
    ``registry-1.docker.io``) to ``(username, password)`` or ``None``.
    """

    def __init__(self, credentials: Mapping[str, Credentials]) -> None:
        self._credentials = dict(credentials)
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self._basic_hosts: set[str] = set()
        self.tokens_fetched = 0

    def credentials_for(self, host: str) -> Credentials | None:
        return self._credentials.get(host)

    def _cached_token(self, host: str, scope: str | None) -> str | None:
        with self._lock:
            entry = self._tokens.get((host, scope or ""))
            if entry is None:
                return None
            token, expires_at = entry
            if time.monotonic() >= expires_at:
                del self._tokens[(host, scope or "")]
                return None
            return token

    def _store_token(self, host: str, scope: str | None, token: str, lifetime_s: float) -> None:
        expires_at = time.monotonic() + max(lifetime_s - TOKEN_EXPIRY_MARGIN_S, 0.0)
        with self._lock:
            self._tokens[(host, scope or "")] = (token, expires_at)
            self.tokens_fetched += 1

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        host = request.url.netloc.decode()
        scope = scope_for(request)
        credentials = self.credentials_for(host)
        token = self._cached_token(host, scope)
        with self._lock:
            basic_first = host in self._basic_hosts
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        elif basic_first and credentials is not None:
            request.headers["Authorization"] = _basic_header(credentials)
        response = yield request
        if response.status_code != httpx.codes.UNAUTHORIZED:
            return
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None:
            return
        if challenge.scheme == "basic":
            if credentials is None or (basic_first and token is None):
                return  # nothing (new) to offer: the 401 stands
            with self._lock:
                self._basic_hosts.add(host)
            request.headers["Authorization"] = _basic_header(credentials)
            yield request
        elif challenge.scheme == "bearer" and "realm" in challenge.params:
            token_response = yield self._token_request(challenge, scope, credentials)
            token_response.read()
            fresh, lifetime_s = _parse_token_response(challenge.params["realm"], token_response)
            self._store_token(host, scope, fresh, lifetime_s)
            request.headers["Authorization"] = f"Bearer {fresh}"
            yield request

    @staticmethod
    def _token_request(
        challenge: Challenge, scope: str | None, credentials: Credentials | None
    ) -> httpx.Request:
        params = {}
        if "service" in challenge.params:
            params["service"] = challenge.params["service"]
        wanted_scope = challenge.params.get("scope") or scope
        if wanted_scope:
            params["scope"] = wanted_scope
        headers = {"Accept": "application/json"}
        if credentials is not None:
            headers["Authorization"] = _basic_header(credentials)
            params["account"] = credentials[0]
        return httpx.Request("GET", challenge.params["realm"], params=params, headers=headers)


def _parse_token_response(realm: str, response: httpx.Response) -> tuple[str, float]:
    """``(token, lifetime_s)`` from a token service answer (``token`` or ``access_token``)."""
    if response.status_code != httpx.codes.OK:
        raise TokenError(realm, response.status_code, response.text[:200].strip() or "no body")
    try:
        doc = json.loads(response.content)
    except json.JSONDecodeError as err:
        raise TokenError(realm, response.status_code, f"not JSON ({err})") from err
    token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
    if not isinstance(token, str) or not token:
        raise TokenError(realm, response.status_code, "no 'token' or 'access_token' field")
    lifetime = doc.get("expires_in", DEFAULT_TOKEN_LIFETIME_S)
    if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
        lifetime = DEFAULT_TOKEN_LIFETIME_S
    return token, float(lifetime)


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


def load_auth_files(paths: Iterable[Path]) -> dict[str, Credentials]:
    """Credentials from docker/containers auth files (``{"auths": {host: {"auth": b64}}}``).

    Earlier files win. Missing files are skipped; a malformed one is an
    :class:`InputError` naming it. Credential helpers (``credsStore``) are not run.
    """
    found: dict[str, Credentials] = {}
    for path in paths:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError(
                f"reading registry credentials from {path}: {err}; fix or remove the file"
            ) from err
        auths = doc.get("auths") if isinstance(doc, dict) else None
        if not isinstance(auths, dict):
            continue
        for key, entry in auths.items():
            creds = _decode_auth_entry(entry)
            host = _auth_key_host(key)
            if creds is not None and host not in found:
                found[host] = creds
    return found


def _decode_auth_entry(entry: object) -> Credentials | None:
    if not isinstance(entry, dict):
        return None
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


def _auth_key_host(key: str) -> str:
    """``https://index.docker.io/v1/`` -> ``docker.io``; ``http://h:5000`` -> ``h:5000``."""
    if key in _DOCKER_HUB_AUTH_KEYS:
        return _DOCKER_HUB
    host = key.split("://", 1)[-1]
    return host.split("/", 1)[0]
