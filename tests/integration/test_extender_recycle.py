"""The extender re-executes itself to give back memory the allocator kept, without
refusing kube-scheduler a connection (extender/_memory.py, Recycler).

A real process: the real server and recycler, measuring its real resident memory; only
the residue is staged (tests/integration/_recycling_extender.py keeps 24 MiB once the
recycler's reference is taken). Clients open a new connection for every request all the
while, and each one is answered.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import tenacity

from tests.fixtures.extender import LOOPBACK, free_port, spawned_extender
from tests.integration.test_extender_process import POD, files

pytestmark = pytest.mark.integration
__all__ = ["files"]  # a fixture

DRIVER = Path(__file__).with_name("_recycling_extender.py")
#: Two checks 5 s apart after the reference, plus the re-execution and the load.
RECYCLE_TIMEOUT_S = 40.0
#: Clients ask this often meanwhile, each on a new connection.
REQUEST_PERIOD_S = 0.05
HTTP_TIMEOUT_S = 5.0
SEED_SCORES = [{"Host": "N1", "Score": 10}, {"Host": "N2", "Score": 5}, {"Host": "N3", "Score": 0}]
#: What the re-executed process answers until it has loaded its inventory.
NEUTRAL = [{"Host": name, "Score": 0} for name in ("N1", "N2", "N3")]


def _metric(url: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rpartition(" ")[2])
    return None


@dataclass
class _Traffic:
    """What clients saw while waiting for the recycle."""

    answers: list[object] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@tenacity.retry(
    stop=tenacity.stop_after_delay(RECYCLE_TIMEOUT_S),
    wait=tenacity.wait_fixed(REQUEST_PERIOD_S),
    reraise=True,
)
def _request_until_recycled(url: str, proc: subprocess.Popen[bytes], seen: _Traffic) -> float:
    """One request on a new connection (one may arrive during the re-execution), then the
    recycle's neutral seconds once the re-executed process reports them."""
    assert proc.poll() is None, f"the extender exited with {proc.returncode}"
    body = {"Pod": POD, "NodeNames": ["N1", "N2", "N3"]}
    try:
        with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
            answer = client.post(f"{url}/prioritize", json=body)
        seen.answers.append(answer.json() if answer.status_code == 200 else answer.status_code)
        recycled = _metric(url, "layersched_extender_memory_recycle_neutral_seconds")
    except httpx.TransportError as err:
        seen.failures.append(repr(err))
        recycled = None
    assert recycled is not None, "no recycle yet"
    return recycled


def test_a_recycle_keeps_the_pid_and_the_port_and_refuses_no_request(
    files: dict[str, Path], tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    log_path = tmp_path / "extender.log"
    argv = [sys.executable, str(DRIVER), str(port), str(files["layers"]), str(files["nodes"])]
    with spawned_extender(log_path, argv, url) as proc:
        seen = _Traffic()
        recycled = _request_until_recycled(url, proc, seen)
        text = log_path.read_text()
        # the same process (PID) went through it: the recycle, then the re-executed program
        assert proc.poll() is None
        assert "recycling extender: count 0" in text and "recycling extender: count 1" in text
        assert "recycling: resident memory is" in text
        assert _metric(url, "layersched_extender_memory_recycles_total") == 1.0
        assert 0.0 <= recycled < RECYCLE_TIMEOUT_S
        # no connection was refused or cut, and every answer was a whole one
        assert seen.failures == []
        assert all(a in (SEED_SCORES, NEUTRAL) for a in seen.answers), seen.answers
        assert seen.answers[0] == SEED_SCORES
        # the re-executed process answers as the first did
        after = httpx.post(
            f"{url}/prioritize",
            json={"Pod": POD, "NodeNames": ["N1", "N2", "N3"]},
            timeout=HTTP_TIMEOUT_S,
        )
        assert after.json() == SEED_SCORES
