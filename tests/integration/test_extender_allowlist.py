"""``layersched extender --allow-registry``: a real extender process and a real registry.

An image from a registry outside the allowlist gets no registry request at all
(the registry's access log is the witness), its pod scores neutral, and the
extender logs the refusal once per registry however often it comes up.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
import tenacity

from layersched.images.oci import push_image
from tests.fixtures.extender import HTTP_TIMEOUT_S, running_extender
from tests.fixtures.registry import RegistryProcess
from tests.integration.test_extender_process import STOP_TIMEOUT_S, _node
from tests.integration.test_registry import AMD, pusher

pytestmark = pytest.mark.integration

ONCE_MARKER = "(logged once per registry)"
# Resolution runs in the background after a neutral answer; wait this long for it to land.
RESOLVED_TIMEOUT_S = 20.0


@tenacity.retry(
    stop=tenacity.stop_after_delay(RESOLVED_TIMEOUT_S), wait=tenacity.wait_fixed(0.2), reraise=True
)
def assert_scores(url: str, pod: dict[str, object], expected: list[int]) -> None:
    answer = httpx.post(
        f"{url}/prioritize",
        json={"Pod": pod, "NodeNames": ["N1", "N2"]},
        timeout=HTTP_TIMEOUT_S,
    )
    assert [entry["Score"] for entry in answer.json()] == expected


@pytest.mark.parametrize(
    ("allowed", "scores"),
    [
        # The registry is allowed: the pod's layers resolve; N1 holds all of them -> 10.
        ("self", [10, 0]),
        # Another registry only: no request to ours, neutral scores (0 for every node).
        ("other.example:5000", [0, 0]),
    ],
    ids=["allowed", "not-allowed"],
)
def test_allow_registry(
    registry: RegistryProcess, tmp_path: Path, allowed: str, scores: list[int]
) -> None:
    image = f"{registry.host}/app:1"
    with pusher(registry) as c:
        push_image(c, image, AMD)
    pushed = len(registry.access_log())
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": [_node("N1", image), _node("N2")]}))
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": image}]}}
    log_path = tmp_path / "extender.log"
    extra = (
        "--no-spread",  # N1 alone holds the layers: unscaled, 10 (issue 45: said here)
        "--nodes",
        str(nodes),
        "--allow-registry",
        registry.host if allowed == "self" else allowed,
    )
    with running_extender(log_path, *extra) as (url, proc):
        assert_scores(url, pod, scores)
        for _ in range(3):  # more pods from the same registry: no new log line
            assert_scores(url, pod, scores)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    fetched = [e for e in registry.access_log()[pushed:] if "/manifests/" in e.path]
    once = log_path.read_text().count(ONCE_MARKER)
    if allowed == "self":
        assert fetched, "the allowed registry was never asked"
        assert once == 0
    else:
        assert fetched == []
        assert once == 1, log_path.read_text()
