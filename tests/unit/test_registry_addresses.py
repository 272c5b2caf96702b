"""The registry client's address policy (which addresses it may reach on an image's behalf)
and its layer cap, in-process.

The table of internal addresses is driven through :func:`classify`; the
per-connection rules through :class:`AddressGuard` with a resolver standing in
for DNS (a name's answers are the test's input, as a hostile DNS server's
would be). The same rules against real local servers, and a DNS answer that
changes between the check and the connection, are in
tests/integration/test_registry_hostile.py.
"""

from __future__ import annotations

import ipaddress
import json

import httpx
import pytest

from layersched.core.errors import ManifestError
from layersched.core.manifest import OCI_MANIFEST, sha256_digest
from layersched.core.nodelayers import LIMITS
from layersched.registry import DEFAULT_MAX_MANIFEST_BYTES, MAX_LAYERS_PER_MANIFEST, RegistryClient
from layersched.registry._addresses import (
    MAX_REMEMBERED_ORIGINS,
    AddressGuard,
    InternalAddressError,
    IPAddress,
    classify,
    origin,
)
from tests.fixtures.hostile import largest_manifest, manifest_with
from tests.unit.test_registry_client import HOST, client_for


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        # this machine
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        # the rest of 0/8 is "this network": no host has such an address
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        # neighbours
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        # a zone does not hide a link-local address
        ("fe80::1%eth0", "link-local"),
        # cloud metadata: link-local, but named for what it is
        ("169.254.169.254", "cloud metadata"),
        ("169.254.170.2", "cloud metadata"),
        # AWS's IPv6 metadata address is unique-local (fc00::/7), in no range above
        ("fd00:ec2::254", "cloud metadata"),
        # Alibaba's is in the shared CGNAT range 100.64/10, also in no range above
        ("100.100.100.200", "cloud metadata"),
        # Azure's WireServer is a public address
        ("168.63.129.16", "cloud metadata"),
        # IPv4-mapped IPv6: the IPv4 address decides
        ("::ffff:127.0.0.1", "loopback (127.0.0.1)"),
        ("::ffff:169.254.169.254", "cloud metadata (169.254.169.254)"),
        ("::ffff:8.8.8.8", None),
        # NAT64, RFC 6052's well-known prefix: the last 32 bits are the IPv4 address
        ("64:ff9b::7f00:1", "loopback (127.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata (169.254.169.254)"),
        ("64:ff9b::6464:64c8", "cloud metadata (100.100.100.200)"),
        ("64:ff9b::808:808", None),
        # NAT64, RFC 8215's local-use prefix: the layout is the operator's, so all of it
        ("64:ff9b:1::808:808", "local-use NAT64"),
        ("64:ff9b:1:ffff::1", "local-use NAT64"),
        # ordinary addresses: public, private (registries live there: the testbed's
        # 10.250.50.1), unique-local, the rest of the CGNAT range
        ("8.8.8.8", None),
        ("10.250.50.1", None),
        ("192.168.1.10", None),
        ("fd00::1", None),
        ("fd00:ec2::253", None),
        ("100.64.0.1", None),
        ("2001:db8::1", None),
    ],
    ids=lambda value: str(value),
)
def test_classify(address: str, expected: str | None) -> None:
    found = classify(ipaddress.ip_address(address))
    assert (found.describe() if found else None) == expected


class FakeDNS:
    """Answers for names, in order (the last answer repeats); counts the queries."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.queries: list[str] = []

    def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.queries.append(host)
        given = self.answers[host]
        index = min(self.queries.count(host), len(given)) - 1
        return [ipaddress.ip_address(a) for a in given[index]]


@pytest.mark.parametrize(
    ("registry", "host", "answers", "refusal"),
    [
        # The registry itself on loopback: allowed (the tests' and a local testbed's).
        ("reg.test:5000", "reg.test", {"reg.test": [["127.0.0.1"]]}, None),
        # The registry itself on a metadata address: refused, whatever its name.
        ("reg.test:5000", "reg.test", {"reg.test": [["fd00:ec2::254"]]},
         "the registry reg.test is on a cloud metadata address (fd00:ec2::254: cloud metadata)"),
        # A realm on a public and an internal address: refused whole (no fallback inside).
        ("reg.test:5000", "realm.test", {"reg.test": [["8.8.8.8"]],
                                         "realm.test": [["8.8.4.4", "127.0.0.1"]]},
         "realm.test is on an internal address (127.0.0.1: loopback) and reg.test is not"),
        # A realm on the address the registry itself resolved to: allowed.
        ("reg.test:5000", "realm.test", {"reg.test": [["127.0.0.1"]],
                                         "realm.test": [["127.0.0.1"]]}, None),
        # A realm on NAT64's form of the metadata address.
        ("reg.test:5000", "realm.test", {"reg.test": [["8.8.8.8"]],
                                         "realm.test": [["64:ff9b::a9fe:a9fe"]]},
         "(64:ff9b::a9fe:a9fe: cloud metadata (169.254.169.254)) and reg.test is not"),
    ],
    ids=["registry-loopback", "registry-metadata", "mixed-answer", "same-as-registry",
         "nat64-metadata"],
)  # fmt: skip
def test_guard(
    registry: str, host: str, answers: dict[str, list[list[str]]], refusal: str | None
) -> None:
    dns = FakeDNS(answers)
    guard = AddressGuard(dns)
    with origin(registry):
        if host != registry.split(":")[0]:
            # the client has connected to the registry first (its 401 named the realm)
            guard.addresses(registry.split(":")[0], 5000)
        if refusal is None:
            assert guard.addresses(host, 443) == [
                ipaddress.ip_address(a) for a in answers[host][-1]
            ]
        else:
            with pytest.raises(InternalAddressError) as caught:
                guard.addresses(host, 443)
            assert refusal in str(caught.value)
    # one query per connection: what was checked is what is connected to
    assert dns.queries.count(host) == 1


def test_guard_judges_a_target_by_the_registrys_connected_addresses() -> None:
    # The registry's name answers 8.8.8.8 when the client connects, then 127.0.0.1: a realm
    # on 127.0.0.1 must not pass as "on the registry's own address" by a second lookup.
    dns = FakeDNS({"reg.test": [["8.8.8.8"], ["127.0.0.1"]], "realm.test": [["127.0.0.1"]]})
    guard = AddressGuard(dns)
    with origin("reg.test:5000"):
        guard.addresses("reg.test", 5000)
        with pytest.raises(InternalAddressError, match=r"and reg\.test is not"):
            guard.addresses("realm.test", 443)
    assert dns.queries == ["reg.test", "realm.test"]


def test_guard_remembers_a_bounded_number_of_registries() -> None:
    # Each hostile image can name a new registry: the memory of their addresses is an LRU.
    guard = AddressGuard(lambda host, port: [ipaddress.ip_address("127.0.0.1")])
    for index in range(MAX_REMEMBERED_ORIGINS + 10):
        with origin(f"r{index}.test"):
            guard.addresses(f"r{index}.test", 443)
    assert guard.origin_addresses("r0.test") == frozenset()
    last = f"r{MAX_REMEMBERED_ORIGINS + 9}.test"
    assert guard.origin_addresses(last) == {ipaddress.ip_address("127.0.0.1")}
    assert len(guard._origins) == MAX_REMEMBERED_ORIGINS


def test_default_transport_checks_addresses_where_it_connects() -> None:
    # The check lives in httpcore's network backend (as the deadline does); an httpx/httpcore
    # upgrade that moves it must fail here, not silently.
    with RegistryClient(auth_files=()) as client:
        assert client.checks_addresses


# -- layers per manifest -----------------------------------------------------------------


def _serving(body: bytes) -> RegistryClient:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": sha256_digest(body)}
        return httpx.Response(200, content=body, headers=headers)

    return client_for(handler, retries=0)


@pytest.mark.parametrize(
    ("layer_count", "refused"),
    [
        # the CRD's own limit: resolved
        (MAX_LAYERS_PER_MANIFEST, False),
        # one more: refused, with the count and the cap
        (MAX_LAYERS_PER_MANIFEST + 1, True),
    ],
    ids=["at-cap", "over-cap"],
)
def test_layers_per_manifest_are_capped(layer_count: int, refused: bool) -> None:
    with _serving(manifest_with(layer_count)) as client:
        if not refused:
            assert len(client.resolve(f"{HOST}/app:1").layers) == layer_count
            return
        with pytest.raises(ManifestError) as caught:
            client.resolve(f"{HOST}/app:1")
    assert f"{HOST}/app:1: the manifest lists {layer_count} layers, more than the 1000" in str(
        caught.value
    )


def test_the_largest_manifest_a_registry_may_serve_is_refused() -> None:
    # 4 MiB (the manifest cap) of minimal layer descriptors: (4,194,304 - 246 bytes of
    # envelope) // 94 bytes per descriptor = 44,617 layers, 44 times the cap.
    body = largest_manifest(DEFAULT_MAX_MANIFEST_BYTES)
    count = len(json.loads(body)["layers"])
    assert count == 44_617
    with _serving(body) as client, pytest.raises(ManifestError) as caught:
        client.resolve(f"{HOST}/app:1")
    assert f"the manifest lists {count} layers" in str(caught.value)


def test_the_cap_is_the_crds() -> None:
    # The registry cap and the NodeLayerInventory CRD's maxItems must not drift apart.
    assert LIMITS.max_layers_per_image == MAX_LAYERS_PER_MANIFEST
