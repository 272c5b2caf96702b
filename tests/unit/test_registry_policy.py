"""What the registry client refuses to do on an image's behalf (in-process fakes).

The same hostile behaviours are run against real local servers in
tests/integration/test_registry_hostile.py; here the table of realm, redirect
and cap rules is driven through ``httpx.MockTransport``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from layersched.core.errors import LayerResolutionError, RegistryError, RegistryNotAllowedError
from layersched.core.manifest import OCI_MANIFEST
from layersched.core.reference import ImageReference
from layersched.registry import RegistryClient, RegistryLayerSource
from layersched.registry._hosts import allowlisted
from layersched.registry._transport import MAX_ERROR_BODY_BYTES
from tests.unit.test_registry_client import HOST, IMG, FakeRegistry, client_for

REALM_SERVICE = 'service="fake",scope="repository:app:pull"'


class ChallengingRegistry(FakeRegistry):
    """Answers every manifest request with a Bearer challenge naming ``realm``; records the
    requests that reach any other host (the token service, wherever it is)."""

    def __init__(self, realm: str, token_body: Any = None) -> None:
        super().__init__()
        self.realm = realm
        self.token_body = token_body
        self.elsewhere: list[httpx.Request] = []
        # Docker Hub adds library/ to single-name repositories
        self.manifests["/v2/library/app/manifests/1"] = self.manifests["/v2/app/manifests/1"]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/v2/"):
            if request.headers.get("Authorization") == "Bearer good":
                return super().__call__(request)
            self.requests.append(request)
            challenge = f'Bearer realm="{self.realm}",{REALM_SERVICE}'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        self.elsewhere.append(request)
        if self.token_body is not None:
            return httpx.Response(200, content=self.token_body)
        return httpx.Response(200, json={"token": "good"})


@pytest.mark.parametrize(
    ("registry", "realm", "token_hosts", "refusal"),
    [
        # The registry's own host (any port): asked, over plain HTTP since the registry is.
        (HOST, "http://reg.example:9000/token", {}, None),
        # Another host, not allowed: refused, and the fix names the flag.
        (HOST, "http://evil.example/token", {},
         "on another host, and no request was sent there – if evil.example is "
         f"{HOST}'s token service, allow it with --registry-token-host {HOST}=evil.example"),
        # The same host, allowed by the operator: asked.
        (HOST, "http://auth.example/token", {HOST: ["auth.example"]}, None),
        # An HTTPS registry naming a plain-HTTP realm on its own host: a downgrade, refused.
        ("quay.io", "http://quay.io/v2/auth", {}, "over http: token services are only asked "
         "over HTTPS"),
        # ... and a realm with another scheme altogether.
        ("quay.io", "file:///etc/passwd", {}, "over file: token services"),
        # Cloud metadata (169.254.169.254), even when the operator allowed it by mistake.
        (HOST, "http://169.254.169.254/latest/meta-data", {HOST: ["169.254.169.254"]},
         "169.254.169.254 is on an internal address (169.254.169.254: cloud metadata) and "
         f"{HOST} is not"),
        # AWS's metadata service over IPv6: a unique-local address, in no range but its own.
        (HOST, "http://[fd00:ec2::254]/latest/meta-data", {HOST: ["fd00:ec2::254"]},
         "(fd00:ec2::254: cloud metadata)"),
        # Alibaba Cloud's metadata service, in the shared (CGNAT) range 100.64/10.
        (HOST, "http://100.100.100.200/latest/meta-data", {HOST: ["100.100.100.200"]},
         "(100.100.100.200: cloud metadata)"),
        # NAT64 (RFC 6052): 64:ff9b::7f00:1 is 127.0.0.1 through a NAT64 gateway.
        (HOST, "http://[64:ff9b::7f00:1]/token", {HOST: ["64:ff9b::7f00:1"]},
         "(64:ff9b::7f00:1: loopback (127.0.0.1))"),
        # ... and 64:ff9b::a9fe:a9fe is the metadata service.
        (HOST, "http://[64:ff9b::a9fe:a9fe]/token", {HOST: ["64:ff9b::a9fe:a9fe"]},
         "(64:ff9b::a9fe:a9fe: cloud metadata (169.254.169.254))"),
        # The local-use NAT64 prefix (RFC 8215): its layout is the operator's, so all of it.
        (HOST, "http://[64:ff9b:1::a9fe:a9fe]/token", {HOST: ["64:ff9b:1::a9fe:a9fe"]},
         "(64:ff9b:1::a9fe:a9fe: local-use NAT64)"),
        # IPv4-mapped IPv6: ::ffff:127.0.0.1 is 127.0.0.1 on a dual-stack socket.
        (HOST, "http://[::ffff:127.0.0.1]/token", {HOST: ["::ffff:7f00:1"]},
         "(::ffff:7f00:1: loopback (127.0.0.1))"),
        # IPv6 link-local, likewise.
        (HOST, "http://[fe80::1]/token", {HOST: ["fe80::1"]}, "(fe80::1: link-local)"),
        # A name that resolves to loopback (localhost), allowed by name: still refused.
        (HOST, "http://localhost:8080/token", {HOST: ["localhost"]}, "(127.0.0.1: loopback"),
        # 0.0.0.0 reaches this machine on Linux: refused like loopback.
        (HOST, "http://0.0.0.0:8080/token", {HOST: ["0.0.0.0"]}, "(0.0.0.0: unspecified)"),
        # A loopback registry may name a loopback token service on another port (the tests' own).
        ("127.0.0.1:5000", "http://127.0.0.1:5001/token", {}, None),
        # localhost registry, realm on 127.0.0.1 (allowed): the registry is on that address.
        ("localhost:5000", "http://127.0.0.1:5001/token", {"localhost:5000": ["127.0.0.1"]},
         None),
        # Docker Hub's real realm is built in.
        ("docker.io", "https://auth.docker.io/token", {}, None),
        # A NAT64 address of a public IPv4 address (8.8.8.8) is an ordinary address.
        (HOST, "http://[64:ff9b::808:808]/token", {HOST: ["64:ff9b::808:808"]}, None),
    ],
    ids=["own-host", "other-host", "allowed-host", "https-to-http", "file-scheme",
         "metadata-ip", "aws-metadata-ipv6", "alibaba-metadata", "nat64-loopback",
         "nat64-metadata", "nat64-local-use", "ipv4-mapped-loopback", "ipv6-link-local",
         "localhost-name", "unspecified", "loopback-registry", "localhost-registry",
         "docker-hub-builtin", "nat64-public"],
)  # fmt: skip
def test_token_realm_policy(
    registry: str, realm: str, token_hosts: dict[str, list[str]], refusal: str | None
) -> None:
    fake = ChallengingRegistry(realm)
    client = client_for(fake, insecure_hosts=(HOST,), token_hosts=token_hosts, retries=0)
    image = f"{registry}/app:1" if registry != "docker.io" else "docker.io/app:1"
    with client:
        if refusal is None:
            assert client.resolve(image).digest == IMG.digest
            assert [str(r.url.copy_with(query=None)) for r in fake.elsewhere] == [realm]
        else:
            with pytest.raises(RegistryError) as info:
                client.resolve(image)
            assert refusal in str(info.value)
            assert "refused" in str(info.value)
            # nothing was sent to the realm
            assert fake.elsewhere == []


def test_credentials_go_only_to_the_registry_and_its_token_service() -> None:
    # The token service on the registry's host gets the registry's Basic credentials;
    # a realm elsewhere gets nothing (it is refused before a request).
    fake = ChallengingRegistry(f"http://{HOST}/token")
    with client_for(fake, credentials={HOST: ("user", "secret")}) as client:
        client.resolve(f"{HOST}/app:1")
    assert [r.url.netloc.decode() for r in fake.elsewhere] == [HOST]
    assert fake.elsewhere[0].headers["Authorization"].startswith("Basic ")
    hostile = ChallengingRegistry("http://evil.example/token")
    client = client_for(hostile, credentials={HOST: ("user", "secret")}, retries=0)
    with client, pytest.raises(RegistryError, match="on another host"):
        client.resolve(f"{HOST}/app:1")
    assert hostile.elsewhere == []


@pytest.mark.parametrize(
    ("origin", "target", "refusal"),
    [
        # A hostile registry sends the client to the cloud metadata service: refused.
        (HOST, "http://169.254.169.254/latest", "redirect refused: 169.254.169.254 is on an "
         "internal address (169.254.169.254: cloud metadata)"),
        # ... to AWS's, over IPv6 ...
        (HOST, "http://[fd00:ec2::254]/latest", "redirect refused: fd00:ec2::254 is on an "
         "internal address (fd00:ec2::254: cloud metadata)"),
        # ... or to a service on the extender's own loopback.
        (HOST, "http://127.0.0.1:10250/pods", "redirect refused: 127.0.0.1 is on an internal "
         "address (127.0.0.1: loopback)"),
        # A loopback registry redirecting to another loopback port is on that address: fine.
        ("127.0.0.1:5000", "http://127.0.0.1:5001", None),
    ],
    ids=["to-metadata", "to-aws-metadata-ipv6", "to-loopback", "loopback-to-loopback"],
)  # fmt: skip
def test_redirects_to_internal_addresses(origin: str, target: str, refusal: str | None) -> None:
    served: list[str] = []
    registry = FakeRegistry()

    def handler(request: httpx.Request) -> httpx.Response:
        served.append(request.url.netloc.decode())
        if request.url.netloc.decode() == origin:
            return httpx.Response(307, headers={"Location": f"{target}{request.url.path}"})
        return registry(request)

    client = client_for(handler, insecure_hosts=(HOST,), retries=0)
    with client:
        if refusal is None:
            assert client.resolve(f"{origin}/app:1").digest == IMG.digest
        else:
            with pytest.raises(RegistryError) as info:
                client.resolve(f"{origin}/app:1")
            assert refusal in str(info.value)
            assert "treat it as hostile" in str(info.value)
            assert served == [origin]  # the target got no request


def _endless(chunk_bytes: int, pulled: list[int]) -> Iterator[bytes]:
    """An endless body; ``pulled[0]`` counts the bytes the client asked for."""
    while True:
        pulled[0] += chunk_bytes
        yield b"x" * chunk_bytes


def test_token_body_is_capped() -> None:
    # The token service streams forever: abandoned past max_token_bytes (4 KiB here).
    pulled = [0]
    fake = ChallengingRegistry(f"http://{HOST}/token", token_body=_endless(1024, pulled))
    client = client_for(fake, max_token_bytes=4096, retries=0)
    with client, pytest.raises(RegistryError) as info:
        client.resolve(f"{HOST}/app:1")
    assert f"the answer of http://{HOST}/token?" in str(info.value)
    assert "is larger than the 4096-byte cap" in str(info.value)
    assert "the token service is broken or hostile" in str(info.value)
    assert pulled[0] <= 4096 + 1024


def test_declared_huge_token_body_is_refused_unread() -> None:
    fake = ChallengingRegistry(f"http://{HOST}/token")
    fake.token_body = b"{}"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            return httpx.Response(200, headers={"Content-Length": str(1 << 30)}, content=b"{}")
        return fake(request)

    with client_for(handler, retries=0) as client, pytest.raises(RegistryError) as info:
        client.resolve(f"{HOST}/app:1")
    assert f"larger than the 65536-byte cap ({1 << 30} bytes)" in str(info.value)


def test_error_bodies_are_cut_short() -> None:
    # A 401 (read by httpx inside the auth flow) and a 404 with endless bodies: the client
    # pulls at most MAX_ERROR_BODY_BYTES (plus one chunk) of each.
    pulled = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            return httpx.Response(200, json={"token": "t"})
        if request.headers.get("Authorization") != "Bearer t":
            challenge = f'Bearer realm="http://{HOST}/token",{REALM_SERVICE}'
            return httpx.Response(
                401, headers={"WWW-Authenticate": challenge}, content=_endless(512, pulled)
            )
        return httpx.Response(404, content=_endless(512, pulled))

    with client_for(handler, retries=0) as client, pytest.raises(RegistryError, match="404"):
        client.resolve(f"{HOST}/app:1")
    assert pulled[0] <= 2 * (MAX_ERROR_BODY_BYTES + 512)


def test_bodies_are_never_decompressed() -> None:
    # identity is asked for; a gzip body sent anyway stays as counted (no decompression bomb):
    # here it is simply not a manifest.
    import gzip

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Accept-Encoding"])
        body = gzip.compress(IMG.manifest_bytes)
        headers = {"Content-Type": OCI_MANIFEST, "Content-Encoding": "gzip"}
        return httpx.Response(200, content=body, headers=headers)

    with client_for(handler, retries=0) as client, pytest.raises(Exception, match="JSON"):
        client.resolve(f"{HOST}/app:1")
    assert seen == ["identity"]


def test_allowlist_blocks_other_registries_without_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeRegistry()
    with client_for(fake, allowed_registries=("reg.lan",)) as client:
        with pytest.raises(RegistryNotAllowedError) as info:
            client.resolve(f"{HOST}/app:1")
        assert (
            f"{HOST} is not an allowed registry (--allow-registry reg.lan), so no request was "
            f"sent – add --allow-registry {HOST}"
        ) in str(info.value)
        with pytest.raises(RegistryNotAllowedError):
            client.manifest_digest(ImageReference.parse(f"{HOST}/app:1"))
        source = RegistryLayerSource(client)
        with caplog.at_level(logging.WARNING, logger="layersched.registry._source"):
            for _ in range(3):
                with pytest.raises(LayerResolutionError, match="not an allowed registry"):
                    source.resolve(f"{HOST}/app:{_}")
    assert fake.requests == []
    # one log line for the registry, however many images
    assert len([r for r in caplog.records if "not an allowed registry" in r.message]) == 1
    assert (source.not_allowed, source.registry_errors) == (3, 0)


@pytest.mark.parametrize(
    ("allowed", "image", "ok"),
    [
        # host:port must match exactly…
        (("reg.example:5000",), f"{HOST}/app:1", True),
        (("reg.example:5001",), f"{HOST}/app:1", False),
        # …a bare host allows the default port only (issue 30: ``ghcr.io`` allowed
        # ``ghcr.io:22``): not reg.example:5000
        (("reg.example",), f"{HOST}/app:1", False),
        # An empty list allows nothing.
        ((), f"{HOST}/app:1", False),
    ],
    ids=["host-port", "other-port", "bare-host-other-port", "empty"],
)
def test_allowlist_matching(allowed: tuple[str, ...], image: str, ok: bool) -> None:
    with client_for(FakeRegistry(), allowed_registries=allowed) as client:
        if ok:
            client.resolve(image)
        else:
            with pytest.raises(RegistryNotAllowedError):
                client.resolve(image)


def test_default_transport_enforces_the_deadline() -> None:
    # The deadline lives in httpcore's network backend, reached through private attributes;
    # an httpx/httpcore upgrade that moves them must fail here, not silently.
    with RegistryClient(auth_files=()) as client:
        assert client.enforces_deadline


def test_environment_proxies_keep_the_deadline_and_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    # HTTPS_PROXY and NO_PROXY are read as httpx reads them; the proxy transport is ours.
    from layersched.registry._transport import CappedTransport, DeadlineHTTPTransport, proxy_mounts

    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.lan:3128")
    monkeypatch.setenv("NO_PROXY", "reg.lan")
    mounts = proxy_mounts(1024)
    assert set(mounts) == {"https://", "all://*reg.lan"}
    proxied = mounts["https://"]
    assert isinstance(proxied, CappedTransport)
    assert isinstance(proxied.inner, DeadlineHTTPTransport)
    assert proxied.inner.enforces_deadline
    assert mounts["all://*reg.lan"] is None  # NO_PROXY: the direct transport


def test_blob_uploads_are_not_bound_by_the_deadline() -> None:
    # Reads run under the per-attempt deadline; a blob upload takes as long as the blob is
    # big, so it only has the per-operation timeouts (the testbed pushes large layers).
    from layersched.registry._transport import _DEADLINE

    under_deadline: dict[str, bool] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        under_deadline[request.method] = _DEADLINE.get() is not None
        if request.method == "HEAD":
            return httpx.Response(404)
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/app/blobs/uploads/1?x=1"})
        return httpx.Response(201)

    with client_for(handler) as client:
        assert client.push_blob(ImageReference.parse(f"{HOST}/app:1"), b"blob")
    assert under_deadline == {"HEAD": True, "POST": False, "PUT": False}


def test_a_head_answer_declaring_a_large_blob_is_not_a_large_body() -> None:
    # Pushing checks each blob with HEAD; a registry that has a 24 MiB layer answers
    # 200 with Content-Length 25,173,895 and no body. That is the blob's size, not an
    # answer to cap (4 MiB): the check must say "present", not "too large".
    digest = "sha256:" + "4" * 64
    size_bytes = 25_173_895

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "HEAD"
        assert request.url.path == f"/v2/app/blobs/{digest}"
        return httpx.Response(200, headers={"Content-Length": str(size_bytes)})

    with client_for(handler, retries=0) as client:
        assert client.blob_exists(ImageReference.parse(f"{HOST}/app:1"), digest)


@pytest.mark.parametrize(
    ("domain", "ok"),
    [
        ("ghcr.io", True),  # the default port
        ("ghcr.io:443", True),
        ("ghcr.io:22", False),  # before issue 30: allowed
        ("ghcr.io:5000", False),
        ("reg.lan:5000", True),  # listed with its port
        ("reg.lan", False),
    ],
)
def test_a_bare_host_allows_its_default_port_only(domain: str, ok: bool) -> None:
    assert allowlisted(domain, ("ghcr.io", "reg.lan:5000")) is ok
