"""The OCI distribution API client: resolve references to layers, push blobs and manifests."""

from __future__ import annotations

import contextlib
import email.utils
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import httpx
import tenacity

from layersched import __version__
from layersched.core.errors import ManifestError, RegistryError
from layersched.core.layers import Layer
from layersched.core.manifest import (
    DEFAULT_PLATFORM,
    MANIFEST_ACCEPT,
    ImageIndex,
    ImageManifest,
    Platform,
    parse_manifest,
    select_platform,
    sha256_digest,
)
from layersched.core.reference import DEFAULT_DOMAIN, ImageReference
from layersched.registry._auth import (
    Credentials,
    RegistryAuth,
    TokenError,
    default_auth_files,
    load_auth_files,
)

T = TypeVar("T")

# Docker Hub's API lives on another host than its reference domain.
DOCKER_HUB_API_HOST = "registry-1.docker.io"
# A manifest request should take well under a second; 10 s tolerates slow edge links.
DEFAULT_TIMEOUT_S = 10.0
# distribution refuses manifests above 4 MiB on push, so nothing bigger is a real image.
DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# Retries after the first attempt on 429/5xx/connection errors: 3 covers a registry restart.
DEFAULT_RETRIES = 3
# Exponential backoff between retries: 0.2 s, 0.4 s, 0.8 s… plus jitter, at most 5 s.
DEFAULT_RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 5.0
# A Retry-After longer than this is capped: the extender must never stall for minutes.
DEFAULT_MAX_RETRY_AFTER_S = 10.0
# registry.k8s.io answers with one redirect to a regional mirror and S3-backed
# registries with one to storage; a chain longer than this is a loop or a misconfiguration.
MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Error bodies are only read this far (they go into a message, not into memory).
_ERROR_BODY_BYTES = 2048
_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_STATUS_HINTS = {
    400: "the registry rejected the request",
    403: "the credentials have no access to this repository",
    404: "is the image pushed?",
    405: "the registry does not allow this operation",
    429: "the registry rate-limits requests: wait, or authenticate for a higher limit",
}
_SERVER_ERROR_HINT = "the registry is failing: try again later"
_OK_STATUSES = frozenset({200, 201, 202, 204})
_NOT_FOUND = 404


class _StatusError(Exception):
    """A registry answered with a status we did not want (turned into RegistryError)."""

    def __init__(self, response: httpx.Response, body: bytes) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.status = response.status_code
        self.headers = response.headers
        self.detail = _error_detail(body)


class _ManifestTooLarge(Exception):
    def __init__(self, size_bytes: int | None) -> None:
        super().__init__("manifest too large")
        self.size_bytes = size_bytes


class _RedirectError(Exception):
    """A redirect chain that loops, runs too long or downgrades HTTPS to HTTP."""

    def __init__(self, problem: str, chain: Sequence[httpx.URL]) -> None:
        super().__init__(problem)
        self.problem = problem
        self.chain = tuple(chain)


def _error_detail(body: bytes) -> str:
    """The ``errors[].message`` of an OCI error body, else the start of the body."""
    try:
        doc = json.loads(body)
        messages = [e.get("message", "") for e in doc.get("errors", []) if isinstance(e, dict)]
        return "; ".join(m for m in messages if m)
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace").strip()


def _retry_after_s(headers: httpx.Headers) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), if present."""
    value = headers.get("Retry-After")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _is_transient(err: BaseException) -> bool:
    if isinstance(err, _StatusError):
        return err.status in _TRANSIENT_STATUSES
    return isinstance(err, httpx.TransportError)


@dataclass(frozen=True, slots=True)
class FetchedManifest:
    """A manifest or index as the registry served it, with its verified digest."""

    digest: str
    media_type: str
    body: bytes
    parsed: ImageManifest | ImageIndex


@dataclass(frozen=True, slots=True)
class ResolvedImage:
    """What a reference resolves to on one platform.

    ``digest`` is what the reference names (an index for multi-platform images);
    ``manifest_digest`` is the platform's image manifest, whose ``layers`` these are.
    """

    reference: ImageReference
    digest: str
    manifest_digest: str
    layers: tuple[Layer, ...]


class RegistryClient:
    """A synchronous, thread-safe OCI distribution API client.

    ``insecure_hosts`` (``host`` or ``host:port``) and loopback registries are
    reached over plain HTTP; everything else over HTTPS. ``credentials`` maps a
    registry (as written in image references, e.g. ``docker.io`` or
    ``127.0.0.1:5000``) to ``(username, password)``; ``auth_files`` are read
    for more (default: ``$REGISTRY_AUTH_FILE`` and the docker config; pass
    ``()`` to read none).
    """

    def __init__(
        self,
        platform: Platform = DEFAULT_PLATFORM,
        insecure_hosts: tuple[str, ...] = (),
        credentials: Mapping[str, Credentials] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
        retries: int = DEFAULT_RETRIES,
        *,
        auth_files: Sequence[Path] | None = None,
        retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        transport: httpx.BaseTransport | None = None,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
    ) -> None:
        self.platform = platform
        self.insecure_hosts = tuple(insecure_hosts)
        self.timeout_s = timeout_s
        self.max_manifest_bytes = max_manifest_bytes
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.max_retry_after_s = max_retry_after_s
        known = load_auth_files(default_auth_files() if auth_files is None else auth_files)
        known.update(credentials or {})
        self.auth = RegistryAuth({self.api_host(domain): c for domain, c in known.items()})
        self._http = httpx.Client(
            auth=self.auth,
            timeout=timeout_s,
            transport=transport,
            event_hooks=dict(event_hooks or {}),
            headers={"User-Agent": f"layersched/{__version__}"},
            # redirects are followed hop by hop in _following, where the auth flow
            # sees each hop's host and the chain is bounded and checked
            follow_redirects=False,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- addressing ----------------------------------------------------------------------

    @staticmethod
    def api_host(domain: str) -> str:
        """The host serving ``/v2/`` for a reference domain (``docker.io`` is special)."""
        return DOCKER_HUB_API_HOST if domain == DEFAULT_DOMAIN else domain

    def scheme(self, domain: str) -> str:
        """``http`` for insecure and loopback registries, else ``https``."""
        hostname = domain.rsplit(":", 1)[0] if not domain.endswith("]") else domain
        if domain in self.insecure_hosts or hostname in self.insecure_hosts:
            return "http"
        return "http" if hostname in _LOOPBACK_HOSTS else "https"

    def _url(self, ref: ImageReference, kind: str, name: str) -> str:
        return (
            f"{self.scheme(ref.domain)}://{self.api_host(ref.domain)}/v2/{ref.path}/{kind}/{name}"
        )

    # -- the retry/error envelope --------------------------------------------------------

    def _wait_s(self, state: tenacity.RetryCallState) -> float:
        err = state.outcome.exception() if state.outcome else None
        if isinstance(err, _StatusError):
            after = _retry_after_s(err.headers)
            if after is not None:
                return min(after, self.max_retry_after_s)
        backoff = self.retry_backoff_s * 2 ** (state.attempt_number - 1)
        jitter = random.uniform(0, self.retry_backoff_s)
        return float(min(backoff + jitter, MAX_RETRY_BACKOFF_S))

    def _call(self, doing: str, ref: ImageReference, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` with bounded retries; any failure becomes one RegistryError.

        ``doing`` reads like "resolving manifest for 'app:1'"; the message
        continues with the registry host, what went wrong and how to fix it.
        """
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=self._wait_s,
            retry=tenacity.retry_if_exception(_is_transient),
            reraise=True,
        )
        where = f"{doing} at {self.api_host(ref.domain)}"
        try:
            return retrying(attempt)
        except _StatusError as err:
            self._raise_status(where, ref, err)
        except _RedirectError as err:
            hops = " -> ".join(str(url) for url in err.chain)
            raise RegistryError(
                f"{where}: {err.problem} ({hops}) – the registry or a proxy in front of it "
                "is misconfigured"
            ) from err
        except _ManifestTooLarge as err:
            size = f" ({err.size_bytes} bytes)" if err.size_bytes is not None else ""
            raise ManifestError(
                f"{where}: the manifest is larger than the {self.max_manifest_bytes}-byte cap"
                f"{size}; raise max_manifest_bytes if this image is genuine"
            ) from err
        except TokenError as err:
            hint = (
                "check the user name and password"
                if err.status in (401, 403)
                else "is the token service up?"
            )
            raise RegistryError(f"{where}: {err} – {hint}") from err
        except httpx.TimeoutException as err:
            raise RegistryError(
                f"{where}: timed out after {self.timeout_s} s ({type(err).__name__}) "
                f"after {self.retries + 1} attempts – is the registry overloaded or unreachable?"
            ) from err
        except httpx.TransportError as err:
            hint = "is the registry running and the address right?"
            if self.scheme(ref.domain) == "https":
                hint += " A plain-HTTP registry needs --insecure-registry"
            raise RegistryError(
                f"{where}: cannot connect ({type(err).__name__}: {err}) "
                f"after {self.retries + 1} attempts – {hint}"
            ) from err

    def _raise_status(self, where: str, ref: ImageReference, err: _StatusError) -> NoReturn:
        detail = f" ({err.detail})" if err.detail else ""
        if err.status == httpx.codes.UNAUTHORIZED:
            if self.auth.credentials_for(self.api_host(ref.domain)) is not None:
                hint = (
                    f"the credentials for {ref.domain} were rejected: "
                    "check the user name and password"
                )
            else:
                hint = (
                    f"{ref.domain} needs credentials: add them to $REGISTRY_AUTH_FILE "
                    "or ~/.docker/config.json (docker login)"
                )
        elif err.status in _TRANSIENT_STATUSES:
            hint = _STATUS_HINTS.get(err.status, _SERVER_ERROR_HINT)
            hint = f"gave up after {self.retries + 1} attempts; {hint}"
        else:
            hint = _STATUS_HINTS.get(err.status, "unexpected answer")
        raise RegistryError(f"{where}: {err.status}{detail} – {hint}") from err

    @staticmethod
    def _check(response: httpx.Response, ok: frozenset[int] = _OK_STATUSES) -> None:
        if response.status_code not in ok:
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) >= _ERROR_BODY_BYTES:
                    break
            raise _StatusError(response, body[:_ERROR_BODY_BYTES])

    @contextlib.contextmanager
    def _following(
        self, method: str, url: str, headers: Mapping[str, str] | None = None
    ) -> Iterator[httpx.Response]:
        """Send a GET or HEAD, following at most MAX_REDIRECTS redirects; yield the last answer.

        Each hop is a request of its own, so the auth flow sees the hop's host:
        another host never gets this host's credentials or tokens, and a Bearer
        challenge from the redirect target is answered with a token for it.
        The response is streamed; the caller decides how much of it to read.
        """
        chain = [httpx.URL(url)]
        while True:
            with self._http.stream(method, chain[-1], headers=headers) as response:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECT_STATUSES or not location:
                    yield response
                    return
            target = response.url.join(location)
            if target in chain:
                raise _RedirectError("redirect loop", [*chain, target])
            if len(chain) > MAX_REDIRECTS:
                raise _RedirectError(f"more than {MAX_REDIRECTS} redirects", [*chain, target])
            if chain[-1].scheme == "https" and target.scheme != "https":
                raise _RedirectError("redirect from HTTPS to plain HTTP refused", [*chain, target])
            chain.append(target)

    # -- manifests -----------------------------------------------------------------------

    def fetch_manifest(
        self, ref: ImageReference, reference: str | None = None, *, image: str | None = None
    ) -> FetchedManifest:
        """GET a manifest or index by tag or digest (default: ``ref.reference``).

        The body is streamed and abandoned past ``max_manifest_bytes``; a
        digest reference is verified against the body.
        """
        name = reference or ref.reference
        url = self._url(ref, "manifests", name)
        source = (
            f"{ref.domain}/{ref.path}:{name}"
            if ":" not in name
            else f"{ref.domain}/{ref.path}@{name}"
        )

        def attempt() -> tuple[bytes, str]:
            with self._following("GET", url, {"Accept": MANIFEST_ACCEPT}) as response:
                self._check(response)
                declared = response.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > self.max_manifest_bytes:
                    raise _ManifestTooLarge(int(declared))
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > self.max_manifest_bytes:
                        raise _ManifestTooLarge(None)
                return bytes(body), response.headers.get("Content-Type", "")

        doing = f"resolving manifest for {image or ref.canonical()!r}"
        body, content_type = self._call(doing, ref, attempt)
        digest = sha256_digest(body)
        if name.startswith("sha256:") and name != digest:
            raise ManifestError(
                f"{doing} at {self.api_host(ref.domain)}: the registry served content with "
                f"digest {digest} for {name} – the registry or a proxy is corrupting data"
            )
        parsed = parse_manifest(body, content_type, source=source)
        return FetchedManifest(digest, parsed.media_type, body, parsed)

    def manifest_digest(self, ref: ImageReference, *, image: str | None = None) -> str | None:
        """HEAD the reference: its ``Docker-Content-Digest``, or None if the registry omits it.

        HEAD is cheap and, on Docker Hub, does not count against pull limits.
        """
        url = self._url(ref, "manifests", ref.reference)

        def attempt() -> str | None:
            with self._following("HEAD", url, {"Accept": MANIFEST_ACCEPT}) as response:
                self._check(response)
                digest = response.headers.get("Docker-Content-Digest")
                return digest if digest and digest.startswith("sha256:") else None

        return self._call(f"resolving manifest for {image or ref.canonical()!r}", ref, attempt)

    def resolve(self, image: str | ImageReference) -> ResolvedImage:
        """The layers of ``image`` on this client's platform (an index is followed once)."""
        ref = image if isinstance(image, ImageReference) else ImageReference.parse(image)
        text = image if isinstance(image, str) else ref.canonical()
        top = self.fetch_manifest(ref, image=text)
        if isinstance(top.parsed, ImageManifest):
            return ResolvedImage(ref, top.digest, top.digest, top.parsed.layers)
        source = f"{text!r} at {self.api_host(ref.domain)}"
        chosen = select_platform(top.parsed, self.platform, source=source)
        platform_manifest = self.fetch_manifest(ref, chosen.digest, image=text)
        if not isinstance(platform_manifest.parsed, ImageManifest):
            raise ManifestError(
                f"{source}: the index entry for {self.platform} is itself an index "
                f"({chosen.digest}); nested indexes are not supported"
            )
        return ResolvedImage(
            ref, top.digest, platform_manifest.digest, platform_manifest.parsed.layers
        )

    # -- push ----------------------------------------------------------------------------

    def blob_exists(self, ref: ImageReference, digest: str) -> bool:
        """HEAD the blob in ``ref``'s repository."""
        url = self._url(ref, "blobs", digest)

        def attempt() -> bool:
            with self._following("HEAD", url) as response:
                if response.status_code == _NOT_FOUND:
                    return False
                self._check(response)
                return True

        return self._call(f"checking blob {digest} in {ref.path!r}", ref, attempt)

    def push_blob(self, ref: ImageReference, data: bytes, digest: str | None = None) -> bool:
        """Upload a blob monolithically (POST, then PUT ?digest=) unless it exists.

        Returns True if it was uploaded, False if the registry already had it.
        """
        digest = digest or sha256_digest(data)
        if self.blob_exists(ref, digest):
            return False
        start = (
            f"{self.scheme(ref.domain)}://{self.api_host(ref.domain)}/v2/{ref.path}/blobs/uploads/"
        )

        def attempt() -> None:
            response = self._http.post(start, headers={"Content-Length": "0"})
            self._check(response)
            location = response.headers.get("Location")
            if not location:
                raise RegistryError(
                    f"pushing blob {digest} to {ref.path!r} at {self.api_host(ref.domain)}: "
                    "the upload was accepted without a Location header – not an OCI registry?"
                )
            url = response.url.join(location).copy_merge_params({"digest": digest})
            done = self._http.put(
                url, content=data, headers={"Content-Type": "application/octet-stream"}
            )
            self._check(done)

        self._call(f"pushing blob {digest} to {ref.path!r}", ref, attempt)
        return True

    def push_manifest(
        self, ref: ImageReference, body: bytes, media_type: str, reference: str | None = None
    ) -> str:
        """PUT a manifest or index under a tag or its digest; returns its digest."""
        name = reference or ref.tag or sha256_digest(body)
        url = self._url(ref, "manifests", name)

        def attempt() -> None:
            response = self._http.put(url, content=body, headers={"Content-Type": media_type})
            self._check(response)

        self._call(f"pushing manifest {ref.path}:{name}", ref, attempt)
        return sha256_digest(body)
