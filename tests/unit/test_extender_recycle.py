"""When the extender re-executes itself to give back kept memory (extender/_memory.py).

The decision is arithmetic on measurements, tested here with numbers; the hand-over of
the listening sockets is tested with real sockets. The re-execution itself, in a real
process, is tests/integration/test_extender_recycle.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from layersched.extender._memory import (
    RECYCLED_ENV,
    SOCKETS_ENV,
    Recycler,
    inherited_sockets,
    recycled_before,
    rss_bytes,
)

MIB = 1024 * 1024
NOW = 1_800_000_000.0


def _recycler(**kw: object) -> Recycler:
    settings: dict[str, object] = {"min_excess_bytes": 32 * MIB, "ratio": 0.2}
    settings.update(kw)
    return Recycler(**settings)  # type: ignore[arg-type]


def test_the_first_check_is_the_reference_and_never_recycles() -> None:
    recycler = _recycler()
    assert not recycler.check(170 * MIB, 140 * MIB, NOW)
    assert recycler.reference == (170 * MIB, 140 * MIB)
    # the bound: the larger of the minimum and a fifth of the reference's RSS
    assert recycler.bound_bytes() == 34 * MIB


def test_memory_kept_after_a_burst_recycles_after_two_checks_in_a_row() -> None:
    recycler = _recycler()
    recycler.check(170 * MIB, 140 * MIB, NOW)
    # the flood is held: its bytes are held, so its memory is no excess
    assert not recycler.check(300 * MIB, 268 * MIB, NOW + 5)
    assert recycler.excess_bytes == 2 * MIB
    # released, the memory stays: 77 MiB over, once ...
    assert not recycler.check(247 * MIB, 126 * MIB, NOW + 10)
    assert recycler.excess_bytes == 77 * MIB and recycler.over == 1
    # ... and again: due, once
    assert recycler.check(247 * MIB, 126 * MIB, NOW + 15)
    assert recycler.wanted.is_set()
    assert not recycler.check(247 * MIB, 126 * MIB, NOW + 20)


def test_one_check_under_the_bound_starts_the_count_again() -> None:
    recycler = _recycler()
    recycler.check(170 * MIB, 140 * MIB, NOW)
    assert not recycler.check(247 * MIB, 140 * MIB, NOW + 5)
    assert not recycler.check(190 * MIB, 140 * MIB, NOW + 10)  # 20 MiB over: under 34
    assert not recycler.check(247 * MIB, 140 * MIB, NOW + 15)
    assert recycler.check(247 * MIB, 140 * MIB, NOW + 20)


def test_growth_that_is_held_is_never_excess() -> None:
    # a cluster growing from 1,000 to 5,000 nodes: RSS follows what is held (the charge
    # is above the memory really gained)
    recycler = _recycler()
    recycler.check(90 * MIB, 30 * MIB, NOW)
    for step in range(1, 20):
        held = (30 + 6 * step) * MIB
        rss = 90 * MIB + int(0.9 * (held - 30 * MIB))
        assert not recycler.check(rss, held, NOW + 5 * step)
    assert recycler.excess_bytes < 0


def test_a_recycle_waits_for_the_interval_since_the_last_one() -> None:
    recycler = _recycler(count=1, last_at_s=NOW - 300.0, min_interval_s=600.0)
    recycler.check(170 * MIB, 140 * MIB, NOW)
    assert not recycler.check(247 * MIB, 126 * MIB, NOW + 5)
    assert not recycler.check(247 * MIB, 126 * MIB, NOW + 10)  # 310 s after the last
    assert recycler.check(247 * MIB, 126 * MIB, NOW + 301)  # 601 s after it


def test_zero_never_recycles() -> None:
    recycler = _recycler(min_excess_bytes=0)
    assert not recycler.enabled
    for step in range(5):
        assert not recycler.check(1024 * MIB, 0, NOW + step)
    assert recycler.reference is None


def test_how_long_the_new_process_was_neutral() -> None:
    recycler = _recycler(count=2, last_at_s=NOW)
    recycler.loaded(NOW + 9.5)
    assert recycler.ready_after_s == 9.5
    fresh = _recycler()
    fresh.loaded(NOW)
    assert fresh.ready_after_s is None


def test_the_recycle_count_comes_from_the_environment() -> None:
    assert recycled_before({}) == (0, 0.0)
    assert recycled_before({RECYCLED_ENV: "2,1800000000.5"}) == (2, 1_800_000_000.5)
    assert recycled_before({RECYCLED_ENV: "two,yesterday"}) == (0, 0.0)
    assert recycled_before({RECYCLED_ENV: "-3,5"}) == (0, 5.0)


def test_resident_memory_is_read_from_proc() -> None:
    before = rss_bytes()
    ballast = bytearray(b"\x01") * (32 * MIB)
    assert rss_bytes() >= before + 24 * MIB
    del ballast


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def test_handed_over_sockets_are_taken_by_listener_name(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    found = inherited_sockets({SOCKETS_ENV: f"verb={listening.fileno()}"})
    assert list(found) == ["verb"]
    (adopted,) = found["verb"]
    try:
        assert adopted.getsockname()[1] == port
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the adopted socket is the listening one: the kernel queues the connection
    finally:
        adopted.detach()  # the fixture closes the descriptor
    assert inherited_sockets({}) == {}


def test_a_descriptor_that_is_not_a_listening_socket_is_refused(
    listening: socket.socket,
) -> None:
    with socket.create_connection(listening.getsockname(), timeout=5) as connected:
        with pytest.raises(ValueError, match=f"{SOCKETS_ENV}=.*not a listening TCP socket"):
            inherited_sockets({SOCKETS_ENV: f"verb={connected.fileno()}"})
        # refused without closing what the descriptor is
        assert connected.fileno() >= 0 and connected.getpeername()
    with pytest.raises(ValueError, match="unset it"):
        inherited_sockets({SOCKETS_ENV: "verb=not-a-number"})
