"""The registry client and cached layer source against an in-process fake (httpx.MockTransport).

Real-registry behaviour is covered in tests/integration/test_registry.py; here
we drive the edge cases a real registry will not produce on demand: 429/5xx
storms, Retry-After, oversize and lying responses, Bearer challenges, expiry.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from layersched.core.errors import LayerResolutionError, ManifestError, RegistryError
from layersched.core.manifest import (
    MANIFEST_ACCEPT,
    OCI_INDEX,
    OCI_MANIFEST,
    Platform,
    sha256_digest,
)
from layersched.core.reference import ImageReference
from layersched.images.oci import build_image, build_index, layer_bytes
from layersched.registry import RegistryClient, RegistryLayerSource
from layersched.registry._auth import load_auth_files, parse_challenge

HOST = "reg.example:5000"
IMG = build_image([layer_bytes(1, 64), layer_bytes(2, 64)])
ARM = build_image([layer_bytes(3, 64)], platform=Platform.parse("linux/arm/v7"))
INDEX = build_index([ARM, IMG])

Handler = Callable[[httpx.Request], httpx.Response]


class FakeRegistry:
    """Serves IMG as app:1 and INDEX as multi:1; records every request."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.manifests: dict[str, tuple[bytes, str]] = {
            "/v2/app/manifests/1": (IMG.manifest_bytes, OCI_MANIFEST),
            f"/v2/app/manifests/{IMG.digest}": (IMG.manifest_bytes, OCI_MANIFEST),
            "/v2/multi/manifests/1": (INDEX.index_bytes, OCI_INDEX),
            f"/v2/multi/manifests/{INDEX.digest}": (INDEX.index_bytes, OCI_INDEX),
            f"/v2/multi/manifests/{IMG.digest}": (IMG.manifest_bytes, OCI_MANIFEST),
            f"/v2/multi/manifests/{ARM.digest}": (ARM.manifest_bytes, OCI_MANIFEST),
        }
        # Responses to hand out before the normal ones, in order.
        self.script: list[httpx.Response] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.script:
            return self.script.pop(0)
        found = self.manifests.get(request.url.path)
        if found is None:
            return httpx.Response(404, json={"errors": [{"message": "manifest unknown"}]})
        body, media_type = found
        headers = {"Content-Type": media_type, "Docker-Content-Digest": sha256_digest(body)}
        return httpx.Response(
            200, content=b"" if request.method == "HEAD" else body, headers=headers
        )

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


def client_for(handler: Handler, **kwargs: Any) -> RegistryClient:
    options: dict[str, Any] = {"auth_files": (), "retry_backoff_s": 0.0, "insecure_hosts": (HOST,)}
    options.update(kwargs)
    return RegistryClient(transport=httpx.MockTransport(handler), **options)


@pytest.fixture
def fake() -> FakeRegistry:
    return FakeRegistry()


# -- addressing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "insecure", "url"),
    [
        # docker.io is served by registry-1.docker.io over HTTPS; library/ is added.
        ("debian:12", (), "https://registry-1.docker.io/v2/library/debian/manifests/12"),
        # Loopback registries are plain HTTP without being listed.
        ("127.0.0.1:5000/app:1", (), "http://127.0.0.1:5000/v2/app/manifests/1"),
        ("localhost:5000/app", (), "http://localhost:5000/v2/app/manifests/latest"),
        # A listed host (with or without port) is plain HTTP; others HTTPS.
        ("reg.lan:5000/a/b:2", ("reg.lan:5000",), "http://reg.lan:5000/v2/a/b/manifests/2"),
        ("reg.lan:5000/a/b:2", ("reg.lan",), "http://reg.lan:5000/v2/a/b/manifests/2"),
        ("quay.io/x/y:3", ("reg.lan",), "https://quay.io/v2/x/y/manifests/3"),
    ],
    ids=["docker-hub", "loopback-ip", "localhost", "insecure-host-port", "insecure-host",
         "https"],
)  # fmt: skip
def test_manifest_urls(image: str, insecure: tuple[str, ...], url: str) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(
            200, content=IMG.manifest_bytes, headers={"Content-Type": OCI_MANIFEST}
        )

    with client_for(handler, insecure_hosts=insecure) as client:
        client.resolve(image)
    assert seen == [url]


def test_accept_header_names_manifests_and_indexes(fake: FakeRegistry) -> None:
    # All four types go out, so registries never downgrade to schema 1.
    with client_for(fake) as client:
        client.resolve(f"{HOST}/app:1")
    accept = fake.requests[0].headers["Accept"]
    assert accept == MANIFEST_ACCEPT
    for media_type in (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ):
        assert media_type in accept


# -- resolution --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "manifest_digest", "layer_count"),
    [
        # amd64 is the second index entry; its 2 layers come back.
        ("linux/amd64", IMG.digest, 2),
        # arm/v7 is the first; 1 layer.
        ("linux/arm/v7", ARM.digest, 1),
    ],
    ids=["amd64", "arm-v7"],
)
def test_index_resolves_to_platform_manifest(
    fake: FakeRegistry, platform: str, manifest_digest: str, layer_count: int
) -> None:
    with client_for(fake, platform=Platform.parse(platform)) as client:
        resolved = client.resolve(f"{HOST}/multi:1")
    assert resolved.digest == INDEX.digest
    assert resolved.manifest_digest == manifest_digest
    assert len(resolved.layers) == layer_count
    # Index by tag, then the platform manifest by digest.
    assert fake.paths() == [
        "GET /v2/multi/manifests/1",
        f"GET /v2/multi/manifests/{manifest_digest}",
    ]


def test_missing_platform_names_the_choices(fake: FakeRegistry) -> None:
    with (
        client_for(fake, platform=Platform.parse("linux/s390x")) as client,
        pytest.raises(
            ManifestError,
            match=r"no manifest for platform linux/s390x \(available: linux/arm/v7, linux/amd64\)",
        ),
    ):
        client.resolve(f"{HOST}/multi:1")


def test_404_says_push_the_image(fake: FakeRegistry) -> None:
    # The message names what, where, the status and the fix; 404 is not retried.
    with client_for(fake) as client, pytest.raises(RegistryError) as info:
        client.resolve(f"{HOST}/nope:1")
    assert str(info.value) == (
        f"resolving manifest for '{HOST}/nope:1' at {HOST}: 404 (manifest unknown) – "
        "is the image pushed?"
    )
    assert len(fake.requests) == 1


def test_digest_mismatch_is_refused(fake: FakeRegistry) -> None:
    # Asking for IMG's digest but getting ARM's bytes: content does not match its name.
    fake.manifests[f"/v2/app/manifests/{IMG.digest}"] = (ARM.manifest_bytes, OCI_MANIFEST)
    with client_for(fake) as client, pytest.raises(ManifestError, match="corrupting data"):
        client.resolve(f"{HOST}/app@{IMG.digest}")


# -- size cap ----------------------------------------------------------------------------


def _stream(total_bytes: int, chunk_bytes: int) -> Iterator[bytes]:
    sent = 0
    while sent < total_bytes:
        yield b" " * chunk_bytes
        sent += chunk_bytes


@pytest.mark.parametrize(
    ("response", "message"),
    [
        # Declared too big: refused before reading a byte.
        (httpx.Response(200, headers={"Content-Length": "5000000"}, content=b"{}"),
         "(5000000 bytes)"),
        # No Content-Length, streamed: abandoned once past the cap (1 KiB here).
        (httpx.Response(200, content=_stream(1 << 20, 256)), "larger than the 1024-byte cap"),
    ],
    ids=["declared", "streamed"],
)  # fmt: skip
def test_manifest_size_cap(response: httpx.Response, message: str) -> None:
    client = client_for(lambda _: response, max_manifest_bytes=1024)
    with client, pytest.raises(ManifestError) as info:
        client.resolve(f"{HOST}/app:1")
    assert message in str(info.value)
    assert "raise max_manifest_bytes" in str(info.value)


# -- retries -----------------------------------------------------------------------------


def _status(code: int, **headers: str) -> httpx.Response:
    return httpx.Response(code, headers=headers)


@pytest.mark.parametrize(
    ("script", "requests_made"),
    [
        # Two 503s, then the real answer: 3 requests, success.
        ([_status(503), _status(503)], 3),
        # 429 with Retry-After: 0 is honoured, then success.
        ([_status(429, **{"Retry-After": "0"})], 2),
        # An hour-long Retry-After is capped (max_retry_after_s=0.01 here), not obeyed.
        ([_status(429, **{"Retry-After": "3600"})], 2),
        # 502 and 504 are transient too.
        ([_status(502), _status(504)], 3),
    ],
    ids=["503-twice", "429-retry-after", "retry-after-capped", "502-504"],
)
def test_transient_errors_are_retried(
    fake: FakeRegistry, script: list[httpx.Response], requests_made: int
) -> None:
    fake.script = script
    with client_for(fake, max_retry_after_s=0.01) as client:
        assert client.resolve(f"{HOST}/app:1").digest == IMG.digest
    assert len(fake.requests) == requests_made


def test_retries_are_bounded(fake: FakeRegistry) -> None:
    # retries=2: 1 + 2 attempts, then a message that says so.
    fake.script = [_status(503) for _ in range(10)]
    with client_for(fake, retries=2) as client, pytest.raises(RegistryError) as info:
        client.resolve(f"{HOST}/app:1")
    assert len(fake.requests) == 3
    assert "503 – gave up after 3 attempts; the registry is failing" in str(info.value)


def test_connection_errors_are_retried_then_explained() -> None:
    calls: list[int] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("connection refused", request=request)

    client = client_for(refuse, retries=1, insecure_hosts=())
    with client, pytest.raises(RegistryError) as info:
        client.resolve("quay.io/x/y:1")
    assert len(calls) == 2
    assert "cannot connect (ConnectError: connection refused) after 2 attempts" in str(info.value)
    # HTTPS failed: the hint mentions plain-HTTP registries.
    assert "--insecure-registry" in str(info.value)


# -- redirects ---------------------------------------------------------------------------

FRONT = "front.example:5000"


class Redirector:
    """FRONT answers every request with ``status`` to the same path on ``target``;
    other hosts are served by ``backend``. Records every request by host."""

    def __init__(self, backend: Handler, status: int = 308, target: str = f"http://{HOST}") -> None:
        self.backend = backend
        self.status = status
        self.target = target
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.netloc.decode() != FRONT:
            return self.backend(request)
        if request.headers.get("Authorization") != _basic("front", "secret"):
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="front"'})
        location = f"{self.target}{request.url.path}"
        return httpx.Response(self.status, headers={"Location": location}, text="moved")

    def authorization_by_host(self) -> dict[str, set[str | None]]:
        found: dict[str, set[str | None]] = {}
        for request in self.seen:
            host = request.url.netloc.decode()
            found.setdefault(host, set()).add(request.headers.get("Authorization"))
        return found


@pytest.mark.parametrize(
    ("status", "backend"),
    [
        # registry.k8s.io style: 308 to another host that serves anonymously
        (308, "anonymous"),
        # 307 works the same
        (307, "anonymous"),
        # the target asks for a Bearer token: it is fetched for the target, not for FRONT
        (308, "bearer"),
    ],
    ids=["308", "307", "308-to-bearer"],
)
def test_redirect_to_another_host_is_followed_without_leaking_credentials(
    status: int, backend: str
) -> None:
    registry = FakeRegistry() if backend == "anonymous" else BearerRegistry()
    router = Redirector(registry, status)
    credentials = {FRONT: ("front", "secret")}
    with client_for(router, credentials=credentials, insecure_hosts=(HOST, FRONT)) as client:
        # an index: FRONT redirects the tag GET and the platform manifest GET
        assert client.resolve(f"{FRONT}/multi:1").manifest_digest == IMG.digest
        assert client.manifest_digest(ImageReference.parse(f"{FRONT}/app:1")) == IMG.digest
    seen = router.authorization_by_host()
    # FRONT got its Basic credentials; HOST never saw them (only nothing, or its own token)
    assert _basic("front", "secret") in seen[FRONT]
    assert _basic("front", "secret") not in seen[HOST]
    assert all(a is None or a.startswith("Bearer tok") for a in seen[HOST])
    if backend == "bearer":
        assert isinstance(registry, BearerRegistry)
        assert registry.token_requests, "the target's Bearer challenge was not answered"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        # FRONT redirects to itself: a loop, named with its hops
        (f"http://{FRONT}", "redirect loop (http://front.example:5000/v2/app/manifests/1 -> "),
        # HTTPS must not be downgraded (quay.io is HTTPS here; it redirects to plain HTTP)
        ("http://plain.example", "redirect from HTTPS to plain HTTP refused"),
    ],
    ids=["loop", "https-to-http"],
)
def test_bad_redirects_are_clear_errors(target: str, message: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(308, headers={"Location": f"{target}{request.url.path}"})

    insecure = (FRONT,) if target.endswith(FRONT) else ()
    image = f"{FRONT}/app:1" if insecure else "quay.io/app:1"
    with client_for(handler, insecure_hosts=insecure) as client, pytest.raises(RegistryError) as e:
        client.resolve(image)
    assert message in str(e.value)
    assert "misconfigured" in str(e.value)


def test_redirect_chains_are_bounded() -> None:
    # every hop goes to a new URL: after MAX_REDIRECTS (5) hops the client gives up
    hops: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hops.append(str(request.url))
        return httpx.Response(307, headers={"Location": f"/v2/app/manifests/hop{len(hops)}"})

    with client_for(handler, insecure_hosts=(FRONT,)) as client, pytest.raises(RegistryError) as e:
        client.resolve(f"{FRONT}/app:1")
    assert "more than 5 redirects" in str(e.value)
    assert len(hops) == 6  # the request and 5 followed redirects, nothing retried


def test_size_cap_applies_after_a_redirect() -> None:
    # the redirect target streams 1 MiB: abandoned past the 1 KiB cap as without a redirect
    def backend(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_stream(1 << 20, 256))

    router = Redirector(backend)
    credentials = {FRONT: ("front", "secret")}
    client = client_for(
        router, credentials=credentials, insecure_hosts=(HOST, FRONT), max_manifest_bytes=1024
    )
    with client, pytest.raises(ManifestError, match="larger than the 1024-byte cap"):
        client.resolve(f"{FRONT}/app:1")


# -- auth --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "scheme", "params"),
    [
        ('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
         'scope="repository:library/debian:pull"', "bearer",
         {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
          "scope": "repository:library/debian:pull"}),
        ('Basic realm="Registry Realm"', "basic", {"realm": "Registry Realm"}),
        # Escaped quotes and spaces after commas are fine.
        ('Bearer realm="http://a/t", error="insufficient_scope", x="say \\"hi\\""', "bearer",
         {"realm": "http://a/t", "error": "insufficient_scope", "x": 'say "hi"'}),
    ],
    ids=["docker-hub", "basic", "escapes"],
)  # fmt: skip
def test_parse_challenge(header: str, scheme: str, params: dict[str, str]) -> None:
    challenge = parse_challenge(header)
    assert challenge is not None
    assert challenge.scheme == scheme
    assert dict(challenge.params) == params


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class BasicRegistry(FakeRegistry):
    """Demands Basic auth with user/secret."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != _basic("user", "secret"):
            self.requests.append(request)
            return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})
        return super().__call__(request)


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        (None, f"{HOST} needs credentials: add them to $REGISTRY_AUTH_FILE"),
        ({HOST: ("user", "wrong")}, f"the credentials for {HOST} were rejected"),
    ],
    ids=["none", "wrong"],
)
def test_basic_auth_failures(credentials: dict[str, tuple[str, str]] | None, message: str) -> None:
    client = client_for(BasicRegistry(), credentials=credentials)
    with client, pytest.raises(RegistryError, match="401") as info:
        client.resolve(f"{HOST}/app:1")
    assert message in str(info.value)


def test_basic_auth_is_sent_up_front_once_asked_for() -> None:
    # 1st resolve: 401 then 200 (2 requests). 2nd: credentials sent at once (1 request).
    registry = BasicRegistry()
    with client_for(registry, credentials={HOST: ("user", "secret")}) as client:
        client.resolve(f"{HOST}/app:1")
        assert len(registry.requests) == 2
        client.resolve(f"{HOST}/app:1")
    assert len(registry.requests) == 3


class BearerRegistry(FakeRegistry):
    """Docker Hub's flow: 401 with a Bearer challenge; tokens from /token per scope."""

    def __init__(self, expires_in: int = 300, users: dict[str, str] | None = None) -> None:
        super().__init__()
        self.expires_in = expires_in
        self.users = users
        self.token_requests: list[httpx.Request] = []
        self.issued = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            self.token_requests.append(request)
            if self.users is not None and request.headers.get("Authorization") not in {
                _basic(u, p) for u, p in self.users.items()
            }:
                return httpx.Response(401, json={"details": "incorrect username or password"})
            self.issued += 1
            scope = request.url.params["scope"]
            token = f"tok{self.issued}|{scope}"
            return httpx.Response(200, json={"token": token, "expires_in": self.expires_in})
        auth = request.headers.get("Authorization", "")
        repo = request.url.path.split("/")[2]
        if not (auth.startswith("Bearer tok") and auth.endswith(f"|repository:{repo}:pull")):
            self.requests.append(request)
            challenge = (
                f'Bearer realm="http://{HOST}/token",service="fake-registry",'
                f'scope="repository:{repo}:pull"'
            )
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        return super().__call__(request)


def test_bearer_flow_fetches_and_caches_tokens_per_scope() -> None:
    registry = BearerRegistry()
    with client_for(registry) as client:
        client.resolve(f"{HOST}/app:1")
        client.resolve(f"{HOST}/app:1")
        client.resolve(f"{HOST}/multi:1")
    # One token per repository scope: app, then multi. The second app resolve reused its token.
    assert [r.url.params["scope"] for r in registry.token_requests] == [
        "repository:app:pull",
        "repository:multi:pull",
    ]
    assert {r.url.params["service"] for r in registry.token_requests} == {"fake-registry"}
    # Anonymous: no Authorization on the token request.
    assert all("Authorization" not in r.headers for r in registry.token_requests)
    # Requests that reached the registry: app:1 (401, then 200), app:1 (200 with cached
    # token), multi:1 (401, then 200) and multi's amd64 manifest (200, same scope's token).
    assert registry.paths() == [
        "GET /v2/app/manifests/1",
        "GET /v2/app/manifests/1",
        "GET /v2/app/manifests/1",
        "GET /v2/multi/manifests/1",
        "GET /v2/multi/manifests/1",
        f"GET /v2/multi/manifests/{IMG.digest}",
    ]


def test_bearer_tokens_expire() -> None:
    # expires_in=1 s is inside the 5 s safety margin: every request fetches a fresh token.
    registry = BearerRegistry(expires_in=1)
    with client_for(registry) as client:
        client.resolve(f"{HOST}/app:1")
        client.resolve(f"{HOST}/app:1")
    assert len(registry.token_requests) == 2


@pytest.mark.parametrize(
    ("password", "outcome"),
    [
        # Right password: basic credentials go to the token service, never to the registry.
        ("secret", None),
        # Wrong password: the token service's 401 is reported with the fix.
        ("wrong", "token service http://reg.example:5000/token answered 401"),
    ],
    ids=["right", "wrong"],
)
def test_bearer_flow_with_credentials(password: str, outcome: str | None) -> None:
    registry = BearerRegistry(users={"user": "secret"})
    with client_for(registry, credentials={HOST: ("user", password)}) as client:
        if outcome is None:
            client.resolve(f"{HOST}/app:1")
            assert registry.token_requests[0].headers["Authorization"] == _basic("user", "secret")
            assert registry.token_requests[0].url.params["account"] == "user"
        else:
            with pytest.raises(RegistryError) as info:
                client.resolve(f"{HOST}/app:1")
            assert outcome in str(info.value)
            assert "check the user name and password" in str(info.value)


def test_auth_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Docker Hub's v1 key maps to docker.io; "auth" is base64(user:pass); first file wins.
    first = tmp_path / "auth.json"
    first.write_text(json.dumps({"auths": {"reg.lan:5000": {"auth": "YTpi"}}}))  # a:b
    second = tmp_path / "config.json"
    second.write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"username": "hub", "password": "pw"},
                    "http://reg.lan:5000/v2/": {"auth": "eDp5"},  # x:y, shadowed by first
                    "broken": {"auth": "!!notbase64"},
                }
            }
        )
    )
    assert load_auth_files([first, second, tmp_path / "missing.json"]) == {
        "reg.lan:5000": ("a", "b"),
        "docker.io": ("hub", "pw"),
    }
    # $REGISTRY_AUTH_FILE is read by default; Docker Hub credentials apply to its API host.
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(second))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nowhere"))
    client = RegistryClient()
    assert client.auth.credentials_for("registry-1.docker.io") == ("hub", "pw")
    client.close()


# -- the layer source (a plain fetcher; the cache's tests: test_layer_cache.py) -----------


@pytest.mark.parametrize(
    ("image", "message", "errors"),
    [
        # Registry refusal: counted, and the message names image, host and fix.
        (f"{HOST}/nope:1", "404 (manifest unknown) – is the image pushed?", 1),
        # A malformed reference never reaches the registry: not a registry error.
        ("Bad Name", "resolving layers of 'Bad Name'", 0),
    ],
    ids=["404", "bad-reference"],
)
def test_layer_source_errors(fake: FakeRegistry, image: str, message: str, errors: int) -> None:
    with client_for(fake) as client:
        source = RegistryLayerSource(client)
        with pytest.raises(LayerResolutionError) as info:
            source.resolve(image)
    assert message in str(info.value)
    assert source.registry_errors == errors
