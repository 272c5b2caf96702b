"""The registry client and layer source against a REAL docker-registry (distribution 2.8).

Every image is built deterministically and pushed by the test itself with our
own push code; the registry's access log is the witness of which requests
really reached it.
"""

from __future__ import annotations

import http.server
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tenacity

from layersched.core.errors import LayerResolutionError, ManifestError, RegistryError
from layersched.core.manifest import Platform
from layersched.images.oci import (
    BuiltImage,
    build_image,
    build_index,
    layer_bytes,
    push_image,
)
from layersched.images.oci_layout import write_oci_layout
from layersched.registry import CachedLayerSource, LayerCache, RegistryClient, RegistryLayerSource
from tests.fixtures import prereq
from tests.fixtures.registry import AccessLogEntry, RegistryProcess
from tests.fixtures.serving import serving

pytestmark = pytest.mark.integration

# distribution writes its access log line right after the response; give it a moment.
ACCESS_LOG_TIMEOUT_S = 5.0
ACCESS_LOG_POLL_S = 0.05
SKOPEO_TIMEOUT_S = 60.0
LAYER_BYTES = 16 * 1024

AMD = build_image([layer_bytes(1, LAYER_BYTES), layer_bytes(2, LAYER_BYTES)])
ARM = build_image(
    [layer_bytes(1, LAYER_BYTES), layer_bytes(3, LAYER_BYTES)],
    platform=Platform.parse("linux/arm/v7"),
)
ARM64 = build_image([layer_bytes(4, LAYER_BYTES)], platform=Platform.parse("linux/arm64"))
INDEX = build_index([ARM, AMD, ARM64])


def client(registry: RegistryProcess, **kwargs: Any) -> RegistryClient:
    """A client that reads no auth files from this machine (tests stay hermetic)."""
    return RegistryClient(auth_files=(), **kwargs)


def pusher(registry: RegistryProcess) -> RegistryClient:
    creds = {registry.host: (registry.username, registry.password)} if registry.username else {}
    return client(registry, credentials=creds)


def manifest_requests(registry: RegistryProcess) -> list[AccessLogEntry]:
    return [e for e in registry.access_log() if "/manifests/" in e.path]


@tenacity.retry(
    stop=tenacity.stop_after_delay(ACCESS_LOG_TIMEOUT_S),
    wait=tenacity.wait_fixed(ACCESS_LOG_POLL_S),
    reraise=True,
)
def assert_manifest_requests(
    registry: RegistryProcess, expected: list[tuple[str, str, int]]
) -> None:
    got = [(e.method, e.path, e.status) for e in manifest_requests(registry)]
    assert got == expected


@pytest.fixture
def pushed(registry: RegistryProcess) -> Iterator[RegistryProcess]:
    """The anonymous registry with app:1 (amd64 only) and multi:1 (index) pushed."""
    with pusher(registry) as c:
        assert push_image(c, f"{registry.host}/app:1", AMD) == AMD.digest
        assert push_image(c, f"{registry.host}/multi:1", INDEX) == INDEX.digest
    yield registry


# -- resolution --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "platform", "layers"),
    [
        # By tag: the pushed layers, in order, with their compressed sizes.
        ("app:1", "linux/amd64", AMD.layers),
        # By digest: the same, without any tag lookup.
        (f"app@{AMD.digest}", "linux/amd64", AMD.layers),
        # An index: amd64 is its second entry.
        ("multi:1", "linux/amd64", AMD.layers),
        # The variant picks arm/v7 (sharing layer 1 with amd64).
        ("multi:1", "linux/arm/v7", ARM.layers),
        # linux/arm64/v8 matches the entry that says only linux/arm64.
        ("multi:1", "linux/arm64/v8", ARM64.layers),
    ],
    ids=["tag", "digest", "index-amd64", "index-arm-v7", "index-arm64-v8"],
)
def test_resolve(pushed: RegistryProcess, image: str, platform: str, layers: object) -> None:
    with client(pushed, platform=Platform.parse(platform)) as c:
        resolved = c.resolve(f"{pushed.host}/{image}")
    assert resolved.layers == layers


def test_resolve_missing_platform_lists_available(pushed: RegistryProcess) -> None:
    c = client(pushed, platform=Platform.parse("linux/s390x"))
    with c, pytest.raises(ManifestError) as info:
        c.resolve(f"{pushed.host}/multi:1")
    assert "(available: linux/arm/v7, linux/amd64, linux/arm64)" in str(info.value)


def test_404_message(registry: RegistryProcess) -> None:
    # distribution says "manifest unknown"; we add where and the fix.
    with client(registry) as c, pytest.raises(RegistryError) as info:
        c.resolve(f"{registry.host}/x:1")
    assert str(info.value) == (
        f"resolving manifest for '{registry.host}/x:1' at {registry.host}: "
        "404 (manifest unknown) – is the image pushed?"
    )


def test_manifest_size_cap(pushed: RegistryProcess) -> None:
    # The amd64 manifest is ~700 bytes; a 256-byte cap refuses it.
    assert len(AMD.manifest_bytes) > 256
    with client(pushed, max_manifest_bytes=256) as c, pytest.raises(ManifestError) as info:
        c.resolve(f"{pushed.host}/app:1")
    assert "larger than the 256-byte cap" in str(info.value)


def test_push_skips_blobs_the_registry_has(registry: RegistryProcess) -> None:
    # Second push of the same image: every blob HEAD answers 200, nothing is uploaded.
    with pusher(registry) as c:
        push_image(c, f"{registry.host}/app:1", AMD)
        uploads_before = sum(e.method == "PUT" for e in registry.access_log())
        push_image(c, f"{registry.host}/app:1", AMD)
    puts = [e for e in registry.access_log() if e.method == "PUT"][uploads_before:]
    # Only the manifest PUT happens again.
    assert [e.path for e in puts] == ["/v2/app/manifests/1"]


# -- htpasswd ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("password", "message"),
    [
        # Right password: resolves.
        (None, None),
        # Wrong password: 401, the credentials were rejected.
        (
            "wrong",
            "401 (authentication required) – the credentials for {host} were rejected",
        ),
        # No credentials at all: 401 and where to put them.
        (
            "",
            "401 (authentication required) – {host} needs credentials: add them to",
        ),
    ],
    ids=["right", "wrong-password", "anonymous"],
)
def test_htpasswd(
    auth_registry: RegistryProcess, password: str | None, message: str | None
) -> None:
    with pusher(auth_registry) as c:
        push_image(c, f"{auth_registry.host}/app:1", AMD)
    assert auth_registry.username and auth_registry.password
    creds = {}
    if password != "":
        creds = {auth_registry.host: (auth_registry.username, password or auth_registry.password)}
    with client(auth_registry, credentials=creds) as c:
        if message is None:
            assert c.resolve(f"{auth_registry.host}/app:1").layers == AMD.layers
        else:
            with pytest.raises(RegistryError) as info:
                c.resolve(f"{auth_registry.host}/app:1")
            assert message.format(host=auth_registry.host) in str(info.value)


# -- redirects (registry.k8s.io answers every manifest request with a 307/308) ---------


class _Redirector(http.server.ThreadingHTTPServer):
    """A real HTTP server answering every GET/HEAD with 307 to the same path on ``target``."""

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _RedirectHandler)
        self.target = target
        #: (method, path, Authorization header) of every request received
        self.seen: list[tuple[str, str, str | None]] = []

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _RedirectHandler(http.server.BaseHTTPRequestHandler):
    server: _Redirector

    def _redirect(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        self.send_response(307)
        self.send_header("Location", f"{self.server.target}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = _redirect
    do_HEAD = _redirect

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test reads ``seen``


@pytest.fixture
def redirector(auth_registry: RegistryProcess) -> Iterator[_Redirector]:
    """A front host redirecting to the htpasswd registry, which holds app:1 and multi:1."""
    with pusher(auth_registry) as c:
        push_image(c, f"{auth_registry.host}/app:1", AMD)
        push_image(c, f"{auth_registry.host}/multi:1", INDEX)
    with serving(_Redirector(auth_registry.url), "redirector") as server:
        yield server


def test_redirect_to_another_host_authenticates_per_host(
    auth_registry: RegistryProcess, redirector: _Redirector
) -> None:
    # The front host redirects; the real registry behind it demands htpasswd. Only the
    # registry's host has credentials: they are sent to it (after its own 401) and never
    # to the front host, as a cross-host redirect must not leak them.
    assert auth_registry.username and auth_registry.password
    creds = {auth_registry.host: (auth_registry.username, auth_registry.password)}
    with client(auth_registry, credentials=creds) as c:
        assert c.resolve(f"{redirector.host}/app:1").layers == AMD.layers
        assert c.resolve(f"{redirector.host}/multi:1").layers == AMD.layers
    assert [(method, path) for method, path, _ in redirector.seen] == [
        ("GET", "/v2/app/manifests/1"),
        ("GET", "/v2/multi/manifests/1"),
        ("GET", f"/v2/multi/manifests/{AMD.digest}"),
    ]
    assert {auth for _, _, auth in redirector.seen} == {None}
    assert_fetched_from(
        auth_registry,
        ["/v2/app/manifests/1", "/v2/multi/manifests/1", f"/v2/multi/manifests/{AMD.digest}"],
    )


@tenacity.retry(
    stop=tenacity.stop_after_delay(ACCESS_LOG_TIMEOUT_S),
    wait=tenacity.wait_fixed(ACCESS_LOG_POLL_S),
    reraise=True,
)
def assert_fetched_from(registry: RegistryProcess, paths: list[str]) -> None:
    """The registry's access log shows these manifest GETs answered 200, in order."""
    got = [e.path for e in manifest_requests(registry) if (e.method, e.status) == ("GET", 200)]
    assert got == paths


# -- Bearer tokens (a real token service, verified by distribution) ---------------------


def test_bearer_flow(token_registry: RegistryProcess) -> None:
    tokens = token_registry.token_server
    # Push needs push scope, so credentials; the token service sees account=<user>.
    with pusher(token_registry) as c:
        push_image(c, f"{token_registry.host}/app:1", AMD)
    assert {r["user"] for r in tokens.requests} == {token_registry.username}
    tokens.requests.clear()
    # Anonymous pull: one anonymous token for repository:app:pull, then reused.
    with client(token_registry) as c:
        assert c.resolve(f"{token_registry.host}/app:1").layers == AMD.layers
        assert c.resolve(f"{token_registry.host}/app@{AMD.digest}").layers == AMD.layers
    assert tokens.requests == [
        {
            "path": "/token",
            "query": {"service": "layersched-test-registry", "scope": "repository:app:pull"},
            "user": "",
        }
    ]


def test_bearer_wrong_password(token_registry: RegistryProcess) -> None:
    creds = {token_registry.host: (token_registry.username, "wrong")}
    with client(token_registry, credentials=creds) as c, pytest.raises(RegistryError) as info:
        c.resolve(f"{token_registry.host}/app:1")
    assert f"token service {token_registry.token_server.realm} answered 401" in str(info.value)
    assert "check the user name and password" in str(info.value)


def test_bearer_anonymous_push_is_refused(token_registry: RegistryProcess) -> None:
    # The token service grants anonymous callers pull only; distribution then says 401.
    with client(token_registry) as c, pytest.raises(RegistryError, match="401"):
        push_image(c, f"{token_registry.host}/app:1", AMD)


# -- the cached layer source -------------------------------------------------------------


class Clock:
    """A hand-driven monotonic clock for TTL tests."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_layer_source_cache_hits_make_no_requests(pushed: RegistryProcess) -> None:
    sent: list[str] = []

    def count(request: httpx.Request) -> None:
        sent.append(f"{request.method} {request.url.path}")

    before = len(manifest_requests(pushed))
    cache = LayerCache()
    with client(pushed, event_hooks={"request": [count]}) as c:
        source = CachedLayerSource(RegistryLayerSource(c), cache)
        for _ in range(3):
            assert source.resolve(f"{pushed.host}/multi:1") == AMD.layers
    # Cold: index + amd64 manifest. Then two hits: no request at all.
    assert sent == ["GET /v2/multi/manifests/1", f"GET /v2/multi/manifests/{AMD.digest}"]
    assert (cache.hits, cache.misses) == (2, 1)
    assert_manifest_requests(
        pushed,
        [(e.method, e.path, e.status) for e in manifest_requests(pushed)[:before]]
        + [
            ("GET", "/v2/multi/manifests/1", 200),
            ("GET", f"/v2/multi/manifests/{AMD.digest}", 200),
        ],
    )


def test_layer_source_tag_ttl(pushed: RegistryProcess) -> None:
    clock = Clock()
    image = f"{pushed.host}/app:1"
    cache = LayerCache(positive_ttl_s=30.0, clock=clock)
    with client(pushed) as c, pusher(pushed) as p:
        source = CachedLayerSource(RegistryLayerSource(c), cache)
        assert source.resolve(image) == AMD.layers
        start = len(manifest_requests(pushed))
        # Within the TTL: no request.
        clock.now = 29.0
        assert source.resolve(image) == AMD.layers
        # Past it: one HEAD; the digest has not moved, so the layers are a cache hit.
        clock.now = 31.0
        assert source.resolve(image) == AMD.layers
        # Retag app:1 to another image; within the new TTL we still answer the old layers…
        moved: BuiltImage = build_image([layer_bytes(9, LAYER_BYTES)])
        push_image(p, image, moved)
        assert source.resolve(image) == AMD.layers
        # …and after it: HEAD sees the new digest, GET fetches the new manifest.
        clock.now = 62.0
        assert source.resolve(image) == moved.layers
    assert_manifest_requests(
        pushed,
        [(e.method, e.path, e.status) for e in manifest_requests(pushed)[:start]]
        + [
            ("HEAD", "/v2/app/manifests/1", 200),
            ("PUT", "/v2/app/manifests/1", 201),
            ("HEAD", "/v2/app/manifests/1", 200),
            ("GET", "/v2/app/manifests/1", 200),
        ],
    )
    # hits: within the TTL, and the two stale reads; a miss: the cold one
    assert (cache.hits, cache.misses, cache.revalidations, cache.unchanged) == (4, 1, 2, 1)


def test_layer_source_wraps_errors(registry: RegistryProcess) -> None:
    with client(registry) as c:
        source = RegistryLayerSource(c)
        with pytest.raises(LayerResolutionError, match="is the image pushed"):
            source.resolve(f"{registry.host}/missing:1")
    assert source.registry_errors == 1


def test_stopped_registry_is_a_clear_error(registry: RegistryProcess) -> None:
    # Nothing listens any more: bounded retries, then "cannot connect".
    registry.stop()
    with (
        client(registry, retries=1, retry_backoff_s=0.0) as c,
        pytest.raises(RegistryError) as info,
    ):
        c.resolve(f"{registry.host}/app:1")
    assert "cannot connect" in str(info.value)
    assert "after 2 attempts" in str(info.value)


# -- interoperability with skopeo --------------------------------------------------------


def test_oci_layout_is_readable_by_skopeo(registry: RegistryProcess, tmp_path: Path) -> None:
    # Our OCI layout, copied by skopeo into the registry, keeps every digest we computed.
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        prereq.missing("skopeo not found on PATH (apt install skopeo)")
    write_oci_layout(tmp_path / "layout", AMD, "v1")
    subprocess.run(
        [
            skopeo, "copy", "--quiet", "--dest-tls-verify=false", "--preserve-digests",
            f"oci:{tmp_path / 'layout'}:v1", f"docker://{registry.host}/copied:v1",
        ],
        check=True,
        capture_output=True,
        timeout=SKOPEO_TIMEOUT_S,
    )  # fmt: skip
    with client(registry) as c:
        resolved = c.resolve(f"{registry.host}/copied:v1")
    assert resolved.digest == AMD.digest
    assert resolved.layers == AMD.layers
