"""Registry authentication: HTTP basic, and the Bearer-token challenge, under a realm policy.

:class:`RegistryAuth` is an ``httpx.Auth`` flow. A request first goes out with
whatever is known to work for its host and scope (a cached token, or basic
credentials once the host asked for them). On ``401``, the
``WWW-Authenticate`` challenge decides:

* ``Basic``: resend once with the host's credentials;
* ``Bearer realm=…,service=…,scope=…``: check the realm against the client's
  policy (``check_realm``: scheme, host, address), ask it for a token (with
  basic credentials if any, an identity token as an OAuth2 refresh grant,
  anonymously otherwise), cache it per (host, scope) until its
  ``expires_in`` runs out, and resend once.

The token request goes through the same ``httpx`` client, so timeouts, the
request deadline, body caps, transports and event hooks apply to it too.
Credentials come from a :class:`~layersched.registry._config.CredentialSource`;
a credential helper only runs once a host has answered ``401``.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from layersched.registry._config import (
    IDENTITY_TOKEN_USER,
    Credentials,
    CredentialSource,
    default_auth_files,
    load_registry_config,
)
from layersched.registry._transport import MAX_BODY_EXTENSION

__all__ = [
    "AuthRefusedError",
    "Challenge",
    "Credentials",
    "RegistryAuth",
    "TokenError",
    "default_auth_files",
    "load_auth_files",
    "parse_challenge",
    "scope_for",
]

# The distribution token spec's default when a token response has no expires_in.
DEFAULT_TOKEN_LIFETIME_S = 60.0
# Refresh a token this long before it expires, so it never lapses in flight.
TOKEN_EXPIRY_MARGIN_S = 5.0
# A token answer is a JWT of 1-4 KB (Docker Hub, GHCR, distribution's x5c-signed ones with a
# certificate chain stay under 10 KB); 64 KiB is 6x that, and small enough that a hostile
# realm cannot make a worker buffer anything worth having.
DEFAULT_MAX_TOKEN_BYTES = 64 * 1024
# The client id sent with an identity-token (OAuth2 refresh) grant, as Docker sends "docker".
OAUTH_CLIENT_ID = "layersched"
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


class AuthRefusedError(Exception):
    """The client's policy refused to follow a challenge (a RegistryError upstream)."""


RealmCheck = Callable[[str, httpx.URL], None]


class RegistryAuth(httpx.Auth):
    """Anonymous, basic and Bearer-token auth for every registry host; thread-safe.

    ``credentials`` maps an API host (``127.0.0.1:5000``, ``registry-1.docker.io``)
    to ``(username, password)``, or is a :class:`CredentialSource` that may also
    run credential helpers. ``check_realm(host, realm)`` raises
    :class:`AuthRefusedError` for a realm the client must not contact; no token
    request is sent then.
    """

    def __init__(
        self,
        credentials: Mapping[str, Credentials] | CredentialSource,
        *,
        check_realm: RealmCheck | None = None,
        max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES,
    ) -> None:
        self.source = (
            credentials
            if isinstance(credentials, CredentialSource)
            else CredentialSource(credentials)
        )
        self.check_realm = check_realm
        self.max_token_bytes = max_token_bytes
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}
        self._basic_hosts: set[str] = set()
        self.tokens_fetched = 0

    def credentials_for(self, host: str) -> Credentials | None:
        """The host's credentials; runs its credential helper if it has one and no fresh answer."""
        return self.source.get(host)

    def has_credentials(self, host: str) -> bool:
        """Whether credentials for the host are known: static, or a helper's fresh answer."""
        return self.source.known(host) is not None

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
        token = self._cached_token(host, scope)
        with self._lock:
            basic_first = host in self._basic_hosts
        known = self.source.known(host)
        sent_basic = token is None and basic_first and _basic_usable(known)
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        elif sent_basic and known is not None:
            request.headers["Authorization"] = _basic_header(known)
        response = yield request
        if response.status_code != httpx.codes.UNAUTHORIZED:
            return
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None:
            return
        if challenge.scheme == "basic":
            credentials = None if sent_basic else self.credentials_for(host)
            if credentials is None or not _basic_usable(credentials):
                return  # nothing (new) to offer: the 401 stands
            with self._lock:
                self._basic_hosts.add(host)
            request.headers["Authorization"] = _basic_header(credentials)
            yield request
        elif challenge.scheme == "bearer" and "realm" in challenge.params:
            realm = challenge.params["realm"]
            try:
                realm_url = httpx.URL(realm)
            except httpx.InvalidURL as err:
                raise AuthRefusedError(f"{host} names a malformed token realm {realm!r}") from err
            if self.check_realm is not None:
                self.check_realm(host, realm_url)
            credentials = self.credentials_for(host)
            token_response = yield self._token_request(challenge, realm_url, scope, credentials)
            token_response.read()  # capped by the transport (MAX_BODY_EXTENSION)
            fresh, lifetime_s = _parse_token_response(realm, token_response)
            self._store_token(host, scope, fresh, lifetime_s)
            request.headers["Authorization"] = f"Bearer {fresh}"
            yield request

    def _token_request(
        self,
        challenge: Challenge,
        realm: httpx.URL,
        scope: str | None,
        credentials: Credentials | None,
    ) -> httpx.Request:
        params = {}
        if "service" in challenge.params:
            params["service"] = challenge.params["service"]
        wanted_scope = challenge.params.get("scope") or scope
        if wanted_scope:
            params["scope"] = wanted_scope
        headers = {"Accept": "application/json"}
        extensions = {MAX_BODY_EXTENSION: self.max_token_bytes}
        if credentials is not None and credentials[0] == IDENTITY_TOKEN_USER:
            # an identity token is an OAuth2 refresh token: POST it (distribution's token spec)
            form = {
                **params,
                "grant_type": "refresh_token",
                "refresh_token": credentials[1],
                "client_id": OAUTH_CLIENT_ID,
            }
            return httpx.Request("POST", realm, data=form, headers=headers, extensions=extensions)
        if credentials is not None:
            headers["Authorization"] = _basic_header(credentials)
            params["account"] = credentials[0]
        return httpx.Request("GET", realm, params=params, headers=headers, extensions=extensions)


def _basic_usable(credentials: Credentials | None) -> bool:
    """An identity token only works with a token service, never as HTTP basic."""
    return credentials is not None and credentials[0] != IDENTITY_TOKEN_USER


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


def load_auth_files(paths: Iterable[Path]) -> dict[str, Credentials]:
    """The static credentials of docker config files (see :func:`load_registry_config`)."""
    return dict(load_registry_config(paths).credentials)
