"""The OCI distribution API client: resolve references to layers, push blobs and manifests."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import httpx
import tenacity

from layersched import __version__
from layersched.core.errors import (
    InputError,
    ManifestError,
    RegistryError,
    RegistryNotAllowedError,
)
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
from layersched.core.nodelayers import LIMITS
from layersched.core.reference import DEFAULT_DOMAIN, ImageReference
from layersched.registry._addresses import (
    AddressGuard,
    InternalAddressError,
    internal_target_refusal,
    origin,
)
from layersched.registry._answers import (
    NOT_FOUND,
    SERVER_ERROR_HINT,
    STATUS_HINTS,
    TRANSIENT_STATUSES,
    DeadlineExceededError,
    StatusError,
    check_status,
    is_transient,
    retry_after_s,
)
from layersched.registry._auth import (
    DEFAULT_MAX_TOKEN_BYTES,
    AuthRefusedError,
    Credentials,
    RegistryAuth,
    TokenError,
)
from layersched.registry._config import (
    HELPER_PREFIX,
    CredentialHelperError,
    CredentialSource,
    default_auth_files,
    helper_server,
    load_registry_config,
)
from layersched.registry._hosts import (
    BUILTIN_TOKEN_HOSTS,
    DOCKER_HUB_API_HOST,
    LOOPBACK_HOSTS,
    allowlisted,
    hostname,
    listed,
)
from layersched.registry._redirects import RedirectError, following
from layersched.registry._transport import (
    BodyTooLargeError,
    CappedTransport,
    DeadlineHTTPTransport,
    deadline,
    proxy_mounts,
)

T = TypeVar("T")

# A manifest request should take well under a second; 10 s tolerates slow edge links.
DEFAULT_TIMEOUT_S = 10.0
# One attempt (a token request, up to MAX_REDIRECTS hops, a manifest of a few KB) takes well
# under a second on a healthy registry. timeout_s bounds each socket read only, so a server
# dribbling a byte per read could hold a caller for hours; 30 s (three read timeouts) still
# tolerates a slow edge link.
DEFAULT_DEADLINE_S = 30.0
# The OCI distribution spec asks registries to accept manifests of at least 4 MiB, and
# distribution refuses bigger ones on push, so nothing bigger is a real image.
DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024
# Layers one image manifest may list: what a NodeLayerInventory may hold per image (the
# CRD's bound, core.nodelayers.LIMITS). The layers of a resolved image are cached: without
# a cap a 4 MiB manifest could list 44,617 layers and cost the caches as much as 44
# ordinary images. Real images stop near 127 (overlayfs' stacking limit), so 1,000
# refuses no image a runtime can pull.
MAX_LAYERS_PER_MANIFEST = LIMITS.max_layers_per_image
# Retries after the first attempt on 429/5xx/connection errors: 3 covers a registry restart.
DEFAULT_RETRIES = 3
# Exponential backoff between retries: 0.2 s, 0.4 s, 0.8 s… plus jitter, at most 5 s.
DEFAULT_RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 5.0
# A Retry-After longer than this is capped: the extender must never stall for minutes.
DEFAULT_MAX_RETRY_AFTER_S = 10.0


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
    ``127.0.0.1:5000``) to ``(username, password)``; ``auth_files`` (docker
    config files: ``auths``, ``credHelpers``, ``credsStore``) are read for more
    (default: ``$REGISTRY_AUTH_FILE`` and the docker config; pass ``()`` to read
    none).

    The trust model (see docs/registry.md):

    * ``allowed_registries``: if given, only these registries (``host`` or
      ``host:port``) are contacted at all; others fail with
      :class:`RegistryNotAllowedError` and no request.
    * ``token_hosts`` maps a registry to the other hosts its token realm may be
      on (added to :data:`BUILTIN_TOKEN_HOSTS`); a realm on any other host, over
      plain HTTP for a registry reached over HTTPS, or on an internal address
      the registry is not on, is refused before any request.
    * Every connection is checked where it is made, and made to the addresses
      checked (:mod:`layersched.registry._addresses`): a token realm or
      redirect target on an internal address (loopback, link-local, cloud
      metadata, their IPv6 forms) the registry is not on, and a registry on a
      cloud metadata address, are refused; a name is resolved once.
    * ``deadline_s`` bounds each attempt as a whole (token request, redirects,
      body); ``timeout_s`` bounds each socket operation.
    * Bodies are capped: manifests at ``max_manifest_bytes``, token answers at
      ``max_token_bytes``, error bodies at 2 KiB; an image manifest lists at
      most ``max_layers`` layers.
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
        max_layers: int = MAX_LAYERS_PER_MANIFEST,
        auth_files: Sequence[Path] | None = None,
        retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_S,
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        deadline_s: float = DEFAULT_DEADLINE_S,
        max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES,
        token_hosts: Mapping[str, Sequence[str]] | None = None,
        allowed_registries: Sequence[str] | None = None,
        transport: httpx.BaseTransport | None = None,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
    ) -> None:
        self.platform = platform
        self.insecure_hosts = tuple(insecure_hosts)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.max_manifest_bytes = max_manifest_bytes
        self.max_layers = max_layers
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.allowed_registries = None if allowed_registries is None else tuple(allowed_registries)
        self.token_hosts: dict[str, frozenset[str]] = {}
        for table in (BUILTIN_TOKEN_HOSTS, token_hosts or {}):
            for registry, hosts in table.items():
                key = self.api_host(registry)
                known = self.token_hosts.get(key, frozenset())
                self.token_hosts[key] = known | {hostname(h) for h in hosts}
        config = load_registry_config(default_auth_files() if auth_files is None else auth_files)
        static = {**config.credentials, **(credentials or {})}
        source = CredentialSource(
            {self.api_host(domain): c for domain, c in static.items()},
            {
                self.api_host(domain): (name, helper_server(domain))
                for domain, name in config.helpers.items()
            },
            config.store,
        )
        missing = source.missing_helpers()
        if missing:
            names = ", ".join(f"{HELPER_PREFIX}{name}" for name in missing)
            raise InputError(
                f"the registry config names credential helpers that are not on PATH ({names}) "
                "in credHelpers/credsStore – install them, or remove them from the config "
                "(--registry-config, $REGISTRY_AUTH_FILE or ~/.docker/config.json)"
            )
        self.auth = RegistryAuth(
            source, check_realm=self._check_realm, max_token_bytes=max_token_bytes
        )
        mounts: dict[str, httpx.BaseTransport | None] = {}
        if transport is None:
            own = DeadlineHTTPTransport(guard=AddressGuard())
            #: whether socket operations obey deadline_s (False with a caller's transport)
            self.enforces_deadline = own.enforces_deadline
            #: whether each connection goes to an address the policy checked (False with a
            #: caller's transport, and through a proxy, which resolves names itself)
            self.checks_addresses = own.checks_addresses
            transport = own
            mounts = proxy_mounts(max_manifest_bytes)
        else:
            self.enforces_deadline = False
            self.checks_addresses = False
        self._http = httpx.Client(
            auth=self.auth,
            timeout=timeout_s,
            transport=CappedTransport(transport, max_manifest_bytes),
            mounts=mounts,
            event_hooks=dict(event_hooks or {}),
            headers={"User-Agent": f"layersched/{__version__}", "Accept-Encoding": "identity"},
            # redirects are followed hop by hop in _redirects.following, where the auth flow
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
        plain = listed(domain, self.insecure_hosts) or listed(domain, tuple(LOOPBACK_HOSTS))
        return "http" if plain else "https"

    def allows(self, domain: str) -> bool:
        """Whether ``allowed_registries`` (if any) lets the client contact ``domain``."""
        return self.allowed_registries is None or allowlisted(domain, self.allowed_registries)

    def _check_realm(self, host: str, realm: httpx.URL) -> None:
        """Refuse a token realm that is not the registry's own token service (see the class)."""
        if realm.scheme != "https" and not (realm.scheme == "http" and self.scheme(host) == "http"):
            raise AuthRefusedError(
                f"{host} names the token realm {realm} over {realm.scheme or 'no scheme'}: token "
                "services are only asked over HTTPS (plain HTTP only for a registry that is "
                "itself plain HTTP: --insecure-registry or loopback)"
            )
        allowed = self.token_hosts.get(host, frozenset()) | self.token_hosts.get(
            hostname(host), frozenset()
        )
        # both sides normalised: an IPv6 realm may spell its address another way (::ffff:…)
        realm_host = hostname(realm.host)
        if realm_host != hostname(host) and realm_host not in allowed:
            raise AuthRefusedError(
                f"{host} names the token realm {realm}, on another host, and no request was "
                f"sent there – if {realm.host} is {host}'s token service, allow it with "
                f"--registry-token-host {host}={realm.host}"
            )
        refusal = internal_target_refusal(host, realm.host)
        if refusal is not None:
            raise AuthRefusedError(
                f"{host} names the token realm {realm}: {refusal}, so no request was sent "
                "(a realm there would reach this machine's or the cloud's internal services)"
            )

    def _url(self, ref: ImageReference, kind: str, name: str) -> str:
        return (
            f"{self.scheme(ref.domain)}://{self.api_host(ref.domain)}/v2/{ref.path}/{kind}/{name}"
        )

    # -- the retry/error envelope --------------------------------------------------------

    def _wait_s(self, state: tenacity.RetryCallState) -> float:
        err = state.outcome.exception() if state.outcome else None
        if isinstance(err, StatusError):
            after = retry_after_s(err.headers)
            if after is not None:
                return min(after, self.max_retry_after_s)
        backoff = self.retry_backoff_s * 2 ** (state.attempt_number - 1)
        jitter = random.uniform(0, self.retry_backoff_s)
        return float(min(backoff + jitter, MAX_RETRY_BACKOFF_S))

    def _call(
        self, doing: str, ref: ImageReference, attempt: Callable[[], T], *, bounded: bool = True
    ) -> T:
        """Run ``attempt`` with bounded retries; any failure becomes one RegistryError.

        ``doing`` reads like "resolving manifest for 'app:1'"; the message
        continues with the registry host, what went wrong and how to fix it.
        Each attempt must finish within ``deadline_s`` unless ``bounded`` is
        False (blob uploads, whose length is the blob's).
        """
        where = f"{doing} at {self.api_host(ref.domain)}"
        if not self.allows(ref.domain):
            allowed = " ".join(f"--allow-registry {r}" for r in self.allowed_registries or ())
            raise RegistryNotAllowedError(
                f"{where}: {ref.domain} is not an allowed registry ({allowed}), so no request "
                f"was sent – add --allow-registry {ref.domain} if its images should be resolved"
            )
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=self._wait_s,
            retry=tenacity.retry_if_exception(is_transient),
            reraise=True,
        )

        def timed() -> T:
            with origin(self.api_host(ref.domain)):
                if not bounded:
                    return attempt()
                with deadline(self.deadline_s) as ends_at:
                    try:
                        return attempt()
                    except httpx.TimeoutException as err:
                        if time.monotonic() >= ends_at:
                            raise DeadlineExceededError(str(err)) from err
                        raise

        try:
            return retrying(timed)
        except StatusError as err:
            self._raise_status(where, ref, err)
        except RedirectError as err:
            hops = " -> ".join(str(url) for url in err.chain)
            hint = (
                "the registry tried to send the client to an internal address: treat it as hostile"
                if err.internal
                else "the registry or a proxy in front of it is misconfigured"
            )
            raise RegistryError(f"{where}: {err.problem} ({hops}) – {hint}") from err
        except BodyTooLargeError as err:
            if "/manifests/" in err.url.path:
                raise ManifestError(
                    f"{where}: {err} – no real image has one; raise max_manifest_bytes if this "
                    "one is genuine"
                ) from err
            raise RegistryError(
                f"{where}: {err}, so it was abandoned – a real token answer is a few KB; "
                "the token service is broken or hostile"
            ) from err
        except DeadlineExceededError as err:
            raise RegistryError(
                f"{where}: no complete answer within the {self.deadline_s} s request deadline "
                f"({err}) – the registry is overloaded, or trickles bytes on purpose"
            ) from err
        except AuthRefusedError as err:
            raise RegistryError(f"{where}: refused: {err}") from err
        except InternalAddressError as err:
            raise RegistryError(
                f"{where}: connection refused: {err}, so nothing was sent there – the "
                "registry or its DNS tried to make the client reach an internal address: "
                "treat it as hostile"
            ) from err
        except CredentialHelperError as err:
            raise RegistryError(f"{where}: {err}") from err
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

    def _raise_status(self, where: str, ref: ImageReference, err: StatusError) -> NoReturn:
        detail = f" ({err.detail})" if err.detail else ""
        if err.status == httpx.codes.UNAUTHORIZED:
            if self.auth.has_credentials(self.api_host(ref.domain)):
                hint = (
                    f"the credentials for {ref.domain} were rejected: "
                    "check the user name and password"
                )
            else:
                hint = (
                    f"{ref.domain} needs credentials: add them to $REGISTRY_AUTH_FILE "
                    "or ~/.docker/config.json (docker login), or pass --registry-config"
                )
        elif err.status in TRANSIENT_STATUSES:
            hint = STATUS_HINTS.get(err.status, SERVER_ERROR_HINT)
            hint = f"gave up after {self.retries + 1} attempts; {hint}"
        else:
            hint = STATUS_HINTS.get(err.status, "unexpected answer")
        raise RegistryError(f"{where}: {err.status}{detail} – {hint}") from err

    # -- manifests -----------------------------------------------------------------------

    def fetch_manifest(
        self, ref: ImageReference, reference: str | None = None, *, image: str | None = None
    ) -> FetchedManifest:
        """GET a manifest or index by tag or digest (default: ``ref.reference``).

        The body is streamed and abandoned past ``max_manifest_bytes`` (by the
        transport); a digest reference is verified against the body.
        """
        name = reference or ref.reference
        url = self._url(ref, "manifests", name)
        source = (
            f"{ref.domain}/{ref.path}:{name}"
            if ":" not in name
            else f"{ref.domain}/{ref.path}@{name}"
        )

        def attempt() -> tuple[bytes, str]:
            with following(self._http, "GET", url, {"Accept": MANIFEST_ACCEPT}) as response:
                check_status(response)
                return response.read(), response.headers.get("Content-Type", "")

        doing = f"resolving manifest for {image or ref.canonical()!r}"
        body, content_type = self._call(doing, ref, attempt)
        digest = sha256_digest(body)
        if name.startswith("sha256:") and name != digest:
            raise ManifestError(
                f"{doing} at {self.api_host(ref.domain)}: the registry served content with "
                f"digest {digest} for {name} – the registry or a proxy is corrupting data"
            )
        parsed = parse_manifest(body, content_type, source=source, max_layers=self.max_layers)
        return FetchedManifest(digest, parsed.media_type, body, parsed)

    def manifest_digest(self, ref: ImageReference, *, image: str | None = None) -> str | None:
        """HEAD the reference: its ``Docker-Content-Digest``, or None if the registry omits it.

        HEAD is cheap and, on Docker Hub, does not count against pull limits.
        """
        url = self._url(ref, "manifests", ref.reference)

        def attempt() -> str | None:
            with following(self._http, "HEAD", url, {"Accept": MANIFEST_ACCEPT}) as response:
                check_status(response)
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
            with following(self._http, "HEAD", url) as response:
                if response.status_code == NOT_FOUND:
                    return False
                check_status(response)
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
            check_status(response)
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
            check_status(done)

        # an upload takes as long as the blob is big: per-operation timeouts only
        self._call(f"pushing blob {digest} to {ref.path!r}", ref, attempt, bounded=False)
        return True

    def push_manifest(
        self, ref: ImageReference, body: bytes, media_type: str, reference: str | None = None
    ) -> str:
        """PUT a manifest or index under a tag or its digest; returns its digest."""
        name = reference or ref.tag or sha256_digest(body)
        url = self._url(ref, "manifests", name)

        def attempt() -> None:
            response = self._http.put(url, content=body, headers={"Content-Type": media_type})
            check_status(response)

        self._call(f"pushing manifest {ref.path}:{name}", ref, attempt)
        return sha256_digest(body)
