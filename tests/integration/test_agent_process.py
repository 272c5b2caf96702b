"""The real ``layersched agent --publish`` process with its health endpoint, as the
DaemonSet runs it (``--health-host``/``--health-port``): it reads a node's CRI-O storage
(written by the test, one hostile image among honest ones), publishes to an API double
over HTTP that validates with the CRD's own schema, turns ready after its first publish,
follows a pull, repairs its object when another writer wipes it (counted on /metrics,
logged), and stops on SIGTERM. The real API server is in tests/e2e."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tenacity

from layersched.agent import LIVEZ_PATH, METRICS_PATH, READYZ_PATH
from layersched.core.nodelayers import LIMITS
from tests.fixtures.extender import free_port, make_pki
from tests.fixtures.inventory_api import InventoryApi
from tests.fixtures.kubeconfig import write_kubeconfig
from tests.fixtures.serving import http_get

pytestmark = pytest.mark.integration

#: Start-up imports numpy and grpc: allow a loaded 2-core box.
READY_TIMEOUT_S = 30.0
#: A pull is seen within a poll (0.2 s here) and a debounce; allow a loaded box.
FOLLOW_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class Exited(Exception):
    """The process ended: no use waiting for it."""


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def write_storage(root: Path, images: list[tuple[str, int, int]]) -> None:
    """CRI-O's storage metadata, each image (name, first layer, layer count) a chain."""
    layers: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for n, (name, first, count) in enumerate(images):
        parent = None
        for m in range(count):
            layer_id = f"i{n}l{m}"
            layers.append(
                {
                    "id": layer_id,
                    "parent": parent,
                    "compressed-diff-digest": digest(first + m),
                    "compressed-size": 1_000 * (m + 1),
                }
            )
            parent = layer_id
        records.append({"id": f"{n:064x}", "names": [name], "layer": parent, "digest": digest(n)})
    for sub, data in (
        ("overlay-layers/layers.json", layers),
        ("overlay-images/images.json", records),
    ):
        path = root / sub
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)  # as containers/storage does: a reader never sees half a file


def test_the_agent_process_publishes_and_answers_its_probes(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    deep = LIMITS.max_layers_per_image + 1
    write_storage(storage, [("reg/app:1", 1, 2), ("reg/deep:1", 10_000, deep)])
    port = free_port()
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    with InventoryApi(pki=pki, token="agent-token") as api:
        cluster = {"server": api.url, "certificate-authority": str(pki.ca_cert)}
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", cluster, {"token": "agent-token"})
        argv = [
            sys.executable, "-m", "layersched.cli.main", "agent", "--publish",
            "--node-name", "n1", "--kubeconfig", str(kubeconfig),
            "--crio-storage", str(storage), "--poll-s", "0.2",
            "--health-host", "127.0.0.1", "--health-port", str(port),
        ]  # fmt: skip
        log_path = tmp_path / "agent.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:

            @tenacity.retry(
                stop=tenacity.stop_after_delay(READY_TIMEOUT_S),
                wait=tenacity.wait_fixed(0.1),
                retry=tenacity.retry_if_exception_type(AssertionError),
                reraise=True,
            )
            def ready() -> None:
                if proc.poll() is not None:
                    raise Exited(f"the agent exited with {proc.returncode}")
                try:
                    status, body = http_get(port, READYZ_PATH)
                except OSError as err:
                    raise AssertionError(f"not listening yet: {err}") from err
                assert status == 200, body

            ready()
            assert http_get(port, LIVEZ_PATH)[0] == 200
            stored = api.objects["n1"]
            # the API took the object at once; the image past the CRD's limits is counted
            assert api.refused == []
            assert [i["names"] for i in stored["images"]] == [["reg/app:1"]]
            assert stored["omittedByReason"] == {"layerCount": 1}

            # a pull: the next poll publishes it
            write_storage(
                storage,
                [("reg/app:1", 1, 2), ("reg/deep:1", 10_000, deep), ("reg/new:1", 50, 3)],
            )

            @tenacity.retry(
                stop=tenacity.stop_after_delay(FOLLOW_TIMEOUT_S),
                wait=tenacity.wait_fixed(0.1),
                reraise=True,
            )
            def followed() -> None:
                names = [i["names"][0] for i in api.objects["n1"]["images"]]
                assert names == ["reg/new:1", "reg/app:1"], names

            followed()

            # an admin wipes the object: the agent's watch sees it, and it republishes
            def wipe(obj: dict[str, Any]) -> None:
                obj["images"], obj["layers"] = [], []

            api.tamper("n1", wipe)
            followed()
            _, metrics = http_get(port, METRICS_PATH)
            assert 'layersched_agent_repairs_total{cause="changed"} 1.0' in metrics
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(STOP_TIMEOUT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            print(log_path.read_text())  # shown by pytest when a test fails
    text = log_path.read_text()
    # the image left out is logged once although the node was read many times
    assert text.count("reg/deep:1") == 1, text
    assert "NodeLayerInventory was changed by kubectl-edit behind the agent's back" in text
    assert "Traceback" not in text
