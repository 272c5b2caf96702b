"""The service shell (:mod:`layersched.serving`) on its own, served for real on loopback:
probes answer their checks, the metrics page its registry, a port in use is one line
naming the flag, an idle connection is cut at the listener's deadline without starving
the probes, a renewed certificate is served without a restart, and ``main`` ends the
serve (the shell's signals and background work with it)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from layersched.deploy import issue_webhook_tls
from layersched.serving import (
    LIVEZ_PATH,
    METRICS_PATH,
    READYZ_PATH,
    Listener,
    ReloadingTls,
    Serving,
    ServingError,
    add_health_routes,
    always_ok,
    bind,
    decode_json,
    serve,
)
from tests.fixtures.serving import running_app

LOOPBACK = "127.0.0.1"
#: A loopback request takes milliseconds; a loaded CI box more.
HTTP_TIMEOUT_S = 5.0
#: The idle deadline the test listener gets (aiohttp's default is 75 s).
IDLE_S = 0.3
#: The connection cap the test listener gets.
CAP = 3


def _app(ready: list[bool]) -> web.Application:
    registry = CollectorRegistry()
    Counter("test_answers", "Answers.", registry=registry).inc(3)
    app = web.Application()
    add_health_routes(
        app,
        {
            LIVEZ_PATH: always_ok,
            READYZ_PATH: lambda: (ready[0], "ok" if ready[0] else "still listing"),
        },
        registry,
    )
    return app


def test_probes_answer_their_checks_and_metrics_their_registry() -> None:
    ready = [False]
    with running_app(_app(ready)) as port, httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        url = f"http://{LOOPBACK}:{port}"
        live = client.get(url + LIVEZ_PATH)
        assert (live.status_code, live.text) == (200, "ok\n")
        not_ready = client.get(url + READYZ_PATH)
        assert (not_ready.status_code, not_ready.text) == (503, "still listing\n")
        ready[0] = True  # read at each probe
        assert client.get(url + READYZ_PATH).text == "ok\n"
        metrics = client.get(url + METRICS_PATH)
        assert "test_answers_total 3.0" in metrics.text
        assert metrics.headers["Content-Type"].startswith("text/plain; version=")


class _Body(msgspec.Struct):
    name: str = ""


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # msgspec's RecursionError on a deep unknown field: the client's mistake
        (b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        # a string that is not UTF-8: msgspec before 0.23 raised UnicodeDecodeError (ours
        # says "not valid"), 0.23 a DecodeError of its own ("Invalid UTF-8 encoded string")
        (b'{"name":"\xff"}', "(not valid|Invalid) UTF-8"),
        # plain bad JSON
        (b"{", "truncated"),
    ],
    ids=["deep", "not-utf8", "truncated"],
)
def test_every_malformed_body_is_a_decode_error(body: bytes, says: str) -> None:
    decoder = msgspec.json.Decoder(_Body)
    with pytest.raises(msgspec.DecodeError, match=says):
        decode_json(decoder, body)


def _run(
    listeners: list[Listener],
    main: Callable[[Serving], Awaitable[None]],
    background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> list[str]:
    """Serve ``listeners`` while ``main`` runs; the addresses announced."""
    announced: list[str] = []

    async def go() -> None:
        await serve(listeners, main, on_listening=announced.append, background=background)

    asyncio.run(go())
    return announced


def test_a_port_in_use_is_one_line_naming_the_flag_and_nothing_listens() -> None:
    with socket.socket() as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        free = bind(LOOPBACK, 0, "--health-port")[0]
        free_port = free.getsockname()[1]
        free.close()
        listeners = [
            Listener(_app([True]), LOOPBACK, free_port, "--health-port"),
            Listener(_app([True]), LOOPBACK, port, "--port"),
        ]

        async def never(serving: Serving) -> None:
            raise AssertionError("main must not run")

        with pytest.raises(
            ServingError, match=f"{LOOPBACK}:{port} .*choose another one with --port"
        ):
            _run(listeners, never)
    # the first listener, bound before the second failed, was closed again
    with socket.socket() as again:
        again.bind((LOOPBACK, free_port))


def test_idle_connections_are_cut_and_never_starve_the_probes() -> None:
    [sock] = bind(LOOPBACK, 0, "--health-port")
    port = sock.getsockname()[1]
    seen: dict[str, object] = {}

    async def main(serving: Serving) -> None:
        loop = asyncio.get_running_loop()
        # fifty connections that send nothing, and one that trickles half its headers
        idle = [await asyncio.open_connection(LOOPBACK, port) for _ in range(50)]
        idle[0][1].write(b"GET /livez HTTP/1.1\r\nHo")
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
            seen["probe"] = (await client.get(f"http://{LOOPBACK}:{port}{LIVEZ_PATH}")).status_code
        started = loop.time()
        # each is closed by the server at the deadline: reading gives end-of-file
        ends = await asyncio.gather(
            *(asyncio.wait_for(reader.read(), IDLE_S * 20) for reader, _ in idle)
        )
        seen["closed_after_s"] = loop.time() - started
        seen["ends"] = set(ends)
        for _, writer in idle:
            writer.close()

    announced = _run(
        [
            Listener(
                _app([True]), LOOPBACK, port, "--health-port", inherited=[sock], keepalive_s=IDLE_S
            )
        ],
        main,
    )
    assert announced == [f"http://{LOOPBACK}:{port}"]
    assert seen["probe"] == 200
    assert seen["ends"] == {b""}
    assert seen["closed_after_s"] < IDLE_S * 20


def _write_pair(directory: Path, cert: bytes, key: bytes) -> None:
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)


def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    first, second = issue_webhook_tls(["svc.test"]), issue_webhook_tls(["svc.test"])
    _write_pair(tmp_path, first.cert_pem, first.key_pem)
    tls = ReloadingTls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), reload_period_s=0.05)
    [sock] = bind(LOOPBACK, 0, "--port")
    port = sock.getsockname()[1]
    reloads: list[int] = []
    background_cancelled: list[bool] = []

    def trusting(issued_ca: bytes) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=issued_ca.decode())

    async def get(trust: ssl.SSLContext) -> int:
        async with httpx.AsyncClient(verify=trust, timeout=HTTP_TIMEOUT_S) as client:
            response = await client.get(
                f"https://{LOOPBACK}:{port}{LIVEZ_PATH}", extensions={"sni_hostname": "svc.test"}
            )
            return response.status_code

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            background_cancelled.append(True)
            raise

    async def main(serving: Serving) -> None:
        assert await get(trusting(first.ca_bundle_pem)) == 200
        _write_pair(tmp_path, second.cert_pem, second.key_pem)
        for _ in range(100):
            if reloads:
                break
            await asyncio.sleep(0.05)
        assert await get(trusting(second.ca_bundle_pem)) == 200
        with pytest.raises(httpx.ConnectError):
            await get(trusting(first.ca_bundle_pem))

    listener = Listener(
        _app([True]),
        LOOPBACK,
        port,
        "--port",
        tls=tls,
        inherited=[sock],
        on_tls_reload=lambda: reloads.append(1),
    )
    assert _run([listener], main, [forever]) == [f"https://{LOOPBACK}:{port}"]
    assert reloads == [1]
    assert background_cancelled == [True]


def test_a_certificate_and_key_that_do_not_match_is_one_line(tmp_path: Path) -> None:
    first, second = issue_webhook_tls(["svc.test"]), issue_webhook_tls(["svc.test"])
    _write_pair(tmp_path, first.cert_pem, second.key_pem)
    with pytest.raises(ServingError, match=r"--tls-key-file \(from the Secret x\)"):
        ReloadingTls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), hint="from the Secret x")


def test_past_the_cap_a_connection_is_closed_unanswered() -> None:
    [sock] = bind(LOOPBACK, 0, "--health-port")
    port = sock.getsockname()[1]
    seen: dict[str, object] = {}

    async def probe() -> int:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client:
            return (await client.get(f"http://{LOOPBACK}:{port}{LIVEZ_PATH}")).status_code

    async def main(serving: Serving) -> None:
        held = []
        for _ in range(CAP):  # idle connections, each counted once accepted
            held.append(await asyncio.open_connection(LOOPBACK, port))
            await asyncio.sleep(0.02)
        # one more is closed at once, its request unanswered
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        seen["refused"] = await asyncio.wait_for(reader.read(), HTTP_TIMEOUT_S)
        writer.close()
        # they go: probes are answered again
        for _, idle in held:
            idle.close()
        await asyncio.sleep(0.1)
        seen["after"] = await probe()

    listener = Listener(
        _app([True]), LOOPBACK, port, "--health-port", inherited=[sock], max_connections=CAP
    )
    _run([listener], main)
    assert seen == {"refused": b"", "after": 200}
