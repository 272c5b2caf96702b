"""`layersched testbed status` fits an 80-column terminal: one line per component, no cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched.testbed.cli import testbed as testbed_cli
from layersched.testbed.local import TestbedState, state_path
from layersched.testbed.local._status import (
    ComponentStatus,
    TestbedNodeStatus,
    TestbedStatus,
    VersionedStatus,
)
from tests.unit._testbed_docs import inventory_doc

NODES = ("n1", "n2", "n3")
#: What the probes of a running testbed say (details as long as the real ones).
CONTROL_PLANE = (
    ("etcd", "3.4.23", "https://10.250.50.1:2379 healthy"),
    ("kube-apiserver", "v1.20.2", "https://10.250.50.1:6443 /healthz ok"),
    ("kube-controller-manager", "v1.20.2", "https://127.0.0.1:10257 /healthz ok"),
    ("kube-scheduler image-locality", "v1.20.2", "/healthz ok, leader"),
    ("layersched extender", "0.1.0", "http://127.0.0.1:8888 /readyz ok (watch connected)"),
)


def _status() -> TestbedStatus:
    nodes = tuple(
        TestbedNodeStatus(
            ComponentStatus(n, 4200 + i, True, f"containerd 1.6.20 on .testbed/nodes/{n}/c.sock"),
            f"10.250.50.{11 + i}",
            20_000_000,
            20_000_000,
            46_154_105 * (i + 1),
        )
        for i, n in enumerate(NODES)
    )
    plane = tuple(
        VersionedStatus(ComponentStatus(name, 5000 + i, True, detail), version)
        for i, (name, version, detail) in enumerate(CONTROL_PLANE)
    )
    kubelets = tuple(
        VersionedStatus(ComponentStatus(f"kubelet {n}", 6000 + i, True, "Node Ready"), "v1.20.2")
        for i, n in enumerate(NODES)
    )
    agents = tuple(
        VersionedStatus(
            ComponentStatus(f"agent {n}", 7000 + i, True, "NodeLayerInventory published 3 s ago"),
            "0.1.0",
        )
        for i, n in enumerate(NODES)
    )
    registry = ComponentStatus("registry", 4100, True, "http://10.250.50.1:5000/v2/ answers")
    return TestbedStatus(registry, nodes, plane, kubelets, agents)


def test_status_fits_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a state dir with a real inventory file; the probes (which need the running daemons)
    # answer what a healthy 3-node testbed answers
    state_dir = tmp_path / "a-rather-long-state-directory-name" / ".testbed"
    path = state_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(inventory_doc(len(NODES))))
    seen: list[TestbedState] = []

    def probe(inventory: TestbedState) -> TestbedStatus:
        seen.append(inventory)
        return _status()

    monkeypatch.setattr(testbed_cli, "probe", probe)
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["testbed", "status", "--state-dir", str(state_dir)])
    out = capsys.readouterr().out
    assert code == 0 and len(seen) == 1, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    names = ["registry", *(f"containerd {n}" for n in NODES)]
    names += [name for name, _, _ in CONTROL_PLANE]
    names += [f"kubelet {n}" for n in NODES] + [f"agent {n}" for n in NODES]
    rows = [line for line in lines if line.startswith("│") and "yes" in line]
    # one line per component: nothing wrapped onto a second line
    assert len(rows) == len(names), out
    for row, name in zip(rows, names, strict=True):
        cell = row.split("│")[1].strip()
        # a long name is shortened in the middle (its start and end survive), never cut
        assert cell == name or ("…" in cell and name.endswith(cell.split("…")[1])), (row, name)
    assert lines[-1] == "healthy"
