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
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.extender import LOOPBACK, READY_TIMEOUT_S, free_port
from tests.integration.test_extender_process import POD, files

pytestmark = pytest.mark.integration
__all__ = ["files"]  # a fixture

DRIVER = Path(__file__).with_name("_recycling_extender.py")
#: Two checks 5 s apart after the reference, plus the re-execution and the load.
RECYCLE_TIMEOUT_S = 40.0
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


def test_a_recycle_keeps_the_pid_and_the_port_and_refuses_no_request(
    files: dict[str, Path], tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    log_path = tmp_path / "extender.log"
    argv = [sys.executable, str(DRIVER), str(port), str(files["layers"]), str(files["nodes"])]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    answers: list[object] = []
    failures: list[str] = []
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:  # listening (ready or not)
            try:
                httpx.get(f"{url}/livez", timeout=HTTP_TIMEOUT_S)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        deadline = time.monotonic() + RECYCLE_TIMEOUT_S
        recycled = None
        while recycled is None:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, f"no recycle:\n{log_path.read_text()}"
            body = {"Pod": POD, "NodeNames": ["N1", "N2", "N3"]}
            try:  # a new connection each time: one may arrive during the re-execution
                with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
                    answer = client.post(f"{url}/prioritize", json=body)
                answers.append(answer.json() if answer.status_code == 200 else answer.status_code)
            except httpx.TransportError as err:
                failures.append(repr(err))
            try:
                recycled = _metric(url, "layersched_extender_memory_recycle_neutral_seconds")
            except httpx.TransportError as err:
                failures.append(repr(err))
            time.sleep(0.05)
        text = log_path.read_text()
        # the same process (PID) went through it: the recycle, then the re-executed program
        assert proc.poll() is None
        assert "recycling extender: count 0" in text and "recycling extender: count 1" in text
        assert "recycling: resident memory is" in text
        assert _metric(url, "layersched_extender_memory_recycles_total") == 1.0
        assert 0.0 <= recycled < RECYCLE_TIMEOUT_S
        # no connection was refused or cut, and every answer was a whole one
        assert failures == []
        assert all(a in (SEED_SCORES, NEUTRAL) for a in answers), answers
        assert answers[0] == SEED_SCORES
        # the re-executed process answers as the first did
        after = httpx.post(
            f"{url}/prioritize",
            json={"Pod": POD, "NodeNames": ["N1", "N2", "N3"]},
            timeout=HTTP_TIMEOUT_S,
        )
        assert after.json() == SEED_SCORES
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(log_path.read_text())
