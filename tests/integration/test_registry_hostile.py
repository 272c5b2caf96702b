"""The registry client against hostile registries: real local servers misbehaving on purpose.

Every test here failed before the hardening of issue 10: the client fetched
whatever realm a registry named (another host, loopback, plain HTTP), read a
token answer of any size, followed redirects into loopback, and let a server
that trickles bytes hold it for as long as it liked (each read beat the read
timeout). The DNS-rebinding and layer-count tests failed before issue 23: the
address check resolved a name, and the connection resolved it again. The
servers are in tests/fixtures/hostile.py; each records what reached it, which
is how "no request was sent" is proven.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from layersched.core.errors import ManifestError, RegistryError
from layersched.registry import DEFAULT_MAX_MANIFEST_BYTES, RegistryClient
from tests.fixtures import prereq
from tests.fixtures.hostile import (
    ENDLESS_TOKEN_BYTES,
    TRICKLE_LIMIT_S,
    HostileServer,
    challenge,
    endless_token,
    largest_manifest,
    non_loopback_address,
    redirect,
    serve,
    token,
    trickle_body,
    trickle_headers,
)
from tests.integration.test_registry import AMD

pytestmark = pytest.mark.integration

# The trickle tests: per-read timeout, whole-request deadline, and how long the test waits
# for the client before calling it hung (a trickle lasts TRICKLE_LIMIT_S).
READ_TIMEOUT_S = 1.0
DEADLINE_S = 2.0
HUNG_AFTER_S = 15.0


def hermetic(**kwargs: Any) -> RegistryClient:
    """No auth files from this machine, no retries (one attempt shows the behaviour)."""
    return RegistryClient(auth_files=(), retries=0, **kwargs)


@pytest.fixture
def address() -> str:
    """A non-loopback address of this machine: a registry that is *not* on loopback."""
    found = non_loopback_address()
    if found is None:
        prereq.unavailable("this machine has no non-loopback IPv4 address to serve a registry on")
    return found


@pytest.fixture
def sink() -> Iterator[HostileServer]:
    """A token service on 127.0.0.1 that answers properly: it must never be reached."""
    with HostileServer(token) as server:
        yield server


# -- token realms ------------------------------------------------------------------------


def test_realm_on_another_host_is_not_contacted(address: str) -> None:
    # A loopback registry names a token service on another host (the machine's other
    # address, standing in for an in-cluster service). No request goes there.
    with (
        HostileServer(token, address) as elsewhere,
        HostileServer(challenge(f"{elsewhere.url}/token", AMD.manifest_bytes)) as registry,
        hermetic() as client,
        pytest.raises(RegistryError) as info,
    ):
        client.resolve(f"{registry.host}/app:1")
    assert "on another host, and no request was sent there" in str(info.value)
    assert f"--registry-token-host {registry.host}={address}" in str(info.value)
    assert elsewhere.seen == []


def test_realm_on_loopback_is_refused_for_a_registry_elsewhere(
    address: str, sink: HostileServer
) -> None:
    # A registry on a non-loopback address names a realm on "localhost" (127.0.0.1), and the
    # operator even allowed that name: it resolves to loopback, where the registry is not.
    realm = f"http://localhost:{sink.server_address[1]}/token"
    with HostileServer(challenge(realm, AMD.manifest_bytes), address) as registry:
        client = hermetic(
            insecure_hosts=(registry.host,), token_hosts={registry.host: ["localhost"]}
        )
        with client, pytest.raises(RegistryError) as info:
            client.resolve(f"{registry.host}/app:1")
    assert "localhost is on an internal address (127.0.0.1: loopback" in str(info.value)
    assert sink.seen == []


def test_realm_on_the_registrys_own_loopback_host_is_used(sink: HostileServer) -> None:
    # The control: a registry on 127.0.0.1 may name a token service on 127.0.0.1 (another
    # port), as the test token registries do.
    realm = f"http://127.0.0.1:{sink.server_address[1]}/token"
    with (
        HostileServer(challenge(realm, AMD.manifest_bytes)) as registry,
        hermetic() as client,
    ):
        assert client.resolve(f"{registry.host}/app:1").layers == AMD.layers
    assert [path.split("?")[0] for _, path, _ in sink.seen] == ["/token"]


def test_https_registry_naming_a_plain_http_realm_is_refused(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An HTTPS registry (trusted certificate) names a plain-HTTP token service on its own
    # host: credentials and tokens would cross the network in clear. Refused.
    try:
        import cryptography  # noqa: F401
    except ImportError as err:
        prereq.missing(f"cryptography is needed for the TLS registry ({err}): make venv")
    with HostileServer(token, address) as plain_token:
        realm = f"http://{plain_token.host}/token"
        registry = HostileServer(
            challenge(realm, AMD.manifest_bytes), address, tls_dir=tmp_path / "tls"
        )
        assert registry.cafile is not None
        monkeypatch.setenv("SSL_CERT_FILE", str(registry.cafile))
        with (
            registry,
            hermetic(credentials={registry.host: ("user", "secret")}) as client,
            pytest.raises(RegistryError) as info,
        ):
            client.resolve(f"{registry.host}/app:1")
    assert f"names the token realm {realm} over http" in str(info.value)
    # the registry was reached over HTTPS; the plain-HTTP realm never was
    assert [method for method, _, _ in registry.seen] == ["GET"]
    assert plain_token.seen == []


def test_endless_token_answer_is_abandoned_at_the_cap() -> None:
    # The token service on the registry's own host answers with a JSON string that never
    # ends. The client stops at 64 KiB and says where and why.
    with HostileServer(endless_token) as tokens:
        realm = f"{tokens.url}/token"
        with (
            HostileServer(challenge(realm, AMD.manifest_bytes)) as registry,
            hermetic() as client,
            pytest.raises(RegistryError) as info,
        ):
            client.resolve(f"{registry.host}/app:1")
        assert f"the answer of {realm}?" in str(info.value)
        assert "is larger than the 65536-byte cap" in str(info.value)
    # it hung up long before a greedy reader would have: kernel buffers hold a few MiB at most
    assert tokens.bytes_sent < ENDLESS_TOKEN_BYTES // 4


# -- redirects ---------------------------------------------------------------------------


def test_redirect_into_loopback_is_refused(address: str, sink: HostileServer) -> None:
    # A registry elsewhere sends the client to a service on this machine's loopback.
    with HostileServer(redirect(sink.url), address) as registry:
        client = hermetic(insecure_hosts=(registry.host,))
        with client, pytest.raises(RegistryError) as info:
            client.resolve(f"{registry.host}/app:1")
    assert "redirect refused: 127.0.0.1 is on an internal address (127.0.0.1: loopback)" in str(
        info.value
    )
    assert sink.seen == []


def test_redirect_keeps_credentials_on_their_host(address: str) -> None:
    # The registry (with credentials) redirects to another host, which challenges for Basic:
    # the registry's credentials never reach it. (A guard on a property the client already
    # had: redirects are followed hop by hop, with each hop's own credentials.)
    with (
        HostileServer(_basic_challenge, address) as other,
        HostileServer(redirect(other.url)) as registry,
    ):
        client = hermetic(
            insecure_hosts=(other.host,), credentials={registry.host: ("user", "secret")}
        )
        with client, pytest.raises(RegistryError, match="401"):
            client.resolve(f"{registry.host}/app:1")
    assert [auth for _, _, auth in other.seen] == [None]


def _basic_challenge(handler: Any) -> None:
    handler.reply(401, {"WWW-Authenticate": 'Basic realm="other"'})


# -- DNS rebinding -----------------------------------------------------------------------

#: A name only the rebinding resolver below answers for (.test is reserved, RFC 2606).
REBINDING_NAME = "rebind.layersched.test"


class RebindingDNS:
    """``socket.getaddrinfo`` for a hostile DNS server with a zero TTL: the first
    ``first_answers`` queries for REBINDING_NAME get ``first``, every later one ``then``.
    Other names are resolved for real. The queries for the name are counted."""

    def __init__(
        self, real: Callable[..., Any], first: str, then: str, first_answers: int = 1
    ) -> None:
        self.real = real
        self.first = first
        self.then = then
        self.first_answers = first_answers
        self.queries = 0

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != REBINDING_NAME:
            return self.real(host, port, *args, **kwargs)
        self.queries += 1
        answer = self.first if self.queries <= self.first_answers else self.then
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (answer, port or 0))]


@pytest.fixture
def rebinding(address: str, monkeypatch: pytest.MonkeyPatch) -> RebindingDNS:
    """REBINDING_NAME resolves to this machine's other address first, then to loopback."""
    dns = RebindingDNS(socket.getaddrinfo, first=address, then="127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    return dns


@pytest.mark.parametrize(
    "harmless_answers",
    [
        # The attack: the name answers the early check with a harmless address, then points
        # at this machine's loopback, where another service listens on the same port. A
        # client that resolves again to connect asks that service for a token; ours
        # connects where its check at the connection says, and refuses loopback.
        1,
        # The control: harmless for two queries (the early check's and the connection's),
        # loopback after. The connection goes to the harmless address its check saw, and
        # no third query is made.
        2,
    ],
    ids=["rebinds-after-the-check", "rebinds-after-the-connection"],
)
def test_realm_rebinding_to_loopback(
    address: str, rebinding: RebindingDNS, harmless_answers: int
) -> None:
    # The operator allowed the registry's token service by name.
    rebinding.first_answers = harmless_answers
    with HostileServer(token) as loopback_service:
        port = loopback_service.server_address[1]
        realm = f"http://{REBINDING_NAME}:{port}/token"
        with (
            HostileServer(token, address, port=port) as honest_service,
            HostileServer(challenge(realm, AMD.manifest_bytes), address) as registry,
        ):
            client = hermetic(
                insecure_hosts=(registry.host,), token_hosts={registry.host: [REBINDING_NAME]}
            )
            with client:
                if harmless_answers == 2:
                    assert client.resolve(f"{registry.host}/app:1").layers == AMD.layers
                else:
                    with pytest.raises(RegistryError) as info:
                        client.resolve(f"{registry.host}/app:1")
    assert loopback_service.seen == []
    assert rebinding.queries == 2  # the early check's and the connection's, none after
    if harmless_answers == 2:
        assert [path.split("?")[0] for _, path, _ in honest_service.seen] == ["/token"]
        return
    assert honest_service.seen == []
    assert (
        f"connection refused: {REBINDING_NAME} is on an internal address (127.0.0.1: loopback) "
        f"and {address} is not"
    ) in str(info.value)
    assert "treat it as hostile" in str(info.value)


def test_redirect_rebinding_to_loopback_is_refused_where_it_connects(
    address: str, rebinding: RebindingDNS
) -> None:
    # The same attack through a redirect: the registry sends the client to a name whose
    # first answer is harmless and whose second is loopback.
    with HostileServer(serve(AMD.manifest_bytes)) as loopback_service:
        port = loopback_service.server_address[1]
        with (
            HostileServer(serve(AMD.manifest_bytes), address, port=port) as honest_service,
            HostileServer(redirect(f"http://{REBINDING_NAME}:{port}"), address) as registry,
        ):
            client = hermetic(insecure_hosts=(registry.host, f"{REBINDING_NAME}:{port}"))
            with client, pytest.raises(RegistryError) as info:
                client.resolve(f"{registry.host}/app:1")
    assert loopback_service.seen == []
    assert honest_service.seen == []
    assert f"{REBINDING_NAME} is on an internal address (127.0.0.1: loopback)" in str(info.value)


def test_ipv4_mapped_realm_is_refused(address: str, sink: HostileServer) -> None:
    # ::ffff:127.0.0.1 reaches the loopback sink through a dual-stack socket.
    realm = f"http://[::ffff:127.0.0.1]:{sink.server_address[1]}/token"
    with HostileServer(challenge(realm, AMD.manifest_bytes), address) as registry:
        client = hermetic(
            insecure_hosts=(registry.host,), token_hosts={registry.host: ["::ffff:127.0.0.1"]}
        )
        with client, pytest.raises(RegistryError) as info:
            client.resolve(f"{registry.host}/app:1")
    assert "(::ffff:7f00:1: loopback (127.0.0.1))" in str(info.value)
    assert sink.seen == []


# -- layers per manifest -----------------------------------------------------------------


def test_a_manifest_of_44617_layers_is_refused() -> None:
    # The most layers a 4 MiB manifest can list: read whole (it is under the byte cap),
    # then refused by count before any layer is parsed.
    body = largest_manifest(DEFAULT_MAX_MANIFEST_BYTES)
    with (
        HostileServer(serve(body)) as registry,
        hermetic() as client,
        pytest.raises(ManifestError) as info,
    ):
        client.resolve(f"{registry.host}/app:1")
    assert "the manifest lists 44617 layers, more than the 1000" in str(info.value)


# -- slow loris --------------------------------------------------------------------------


def _resolve_in_thread(client: RegistryClient, image: str) -> tuple[float, BaseException | None]:
    """Resolve ``image`` on a worker thread; (seconds taken, what it raised)."""
    outcome: list[BaseException | None] = []
    started = time.monotonic()

    def work() -> None:
        try:
            client.resolve(image)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 (handed back to the test)
            outcome.append(err)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(HUNG_AFTER_S)
    if worker.is_alive():
        pytest.fail(f"the client was still reading a trickle after {HUNG_AFTER_S} s")
    return time.monotonic() - started, outcome[0]


@pytest.mark.parametrize(
    "behaviour",
    [
        # status line and headers one byte at a time: each read beats the 1 s read timeout
        trickle_headers,
        # headers at once, then the body one byte at a time
        trickle_body,
    ],
    ids=["headers", "body"],
)
def test_trickling_registry_hits_the_deadline(behaviour: Any) -> None:
    assert HUNG_AFTER_S < TRICKLE_LIMIT_S
    with HostileServer(behaviour) as registry:
        client = hermetic(timeout_s=READ_TIMEOUT_S, deadline_s=DEADLINE_S)
        with client:
            elapsed_s, error = _resolve_in_thread(client, f"{registry.host}/app:1")
    assert isinstance(error, RegistryError)
    assert f"no complete answer within the {DEADLINE_S} s request deadline" in str(error)
    # the deadline, give or take a read, and not the trickle's length
    assert DEADLINE_S - 0.1 <= elapsed_s < DEADLINE_S + READ_TIMEOUT_S + 1.0
