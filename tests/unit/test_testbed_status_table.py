"""`layersched testbed status` fits an 80-column terminal: one line per component, no cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched import __version__
from layersched.cli.main import main
from layersched_harness.testbed.cli import testbed as testbed_cli
from layersched_harness.testbed.local import TestbedState, state_path
from layersched_harness.testbed.local._state import ClusterInfo, DaemonInfo, ExtenderInfo
from layersched_harness.testbed.local._status import (
    ComponentStatus,
    TestbedNodeStatus,
    TestbedStatus,
    VersionedStatus,
    _control_plane_status,
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


def test_the_pull_time_scheduler_and_its_extender_are_probed(tmp_path: Path) -> None:
    # a testbed brought up with --pull-time: a fourth scheduler process (the one
    # kube-scheduler binary) and a second extender; nothing answers here (port 1), so each
    # is probed and reported down, by name, and none is left out or raises
    scheduler = tmp_path / "kube-scheduler"
    scheduler.write_text("#!/bin/sh\necho Kubernetes v1.37.2\n", encoding="utf-8")
    scheduler.chmod(0o755)

    def extender(strategy: str) -> ExtenderInfo:
        return ExtenderInfo(
            url="http://127.0.0.1:1",
            strategy=strategy,
            pidfile=str(tmp_path / f"extender-{strategy}.pid"),
            log=str(tmp_path / f"extender-{strategy}.log"),
        )

    names = ("scheduler-layer-locality", "scheduler-pull-time")
    cluster = ClusterInfo(
        kubernetes_version="v1.37.2",
        kubeconfig=str(tmp_path / "kubeconfig"),
        api_server="https://127.0.0.1:1",
        ca_file=str(tmp_path / "ca.crt"),
        admin_cert=str(tmp_path / "admin.crt"),
        admin_key=str(tmp_path / "admin.key"),
        bin_dir=str(tmp_path),
        control_plane=tuple(
            DaemonInfo(
                name=name,
                pidfile=str(tmp_path / f"{name}.pid"),
                log=str(tmp_path / f"{name}.log"),
                health_url="https://127.0.0.1:1/healthz",
            )
            for name in names
        ),
        schedulers={},
        extender=extender("layer-locality"),
        pull_time_extender=extender("pull-time"),
    )
    found = _control_plane_status(cluster)
    assert [(s.status.name, s.version) for s in found] == [
        ("scheduler-layer-locality", "v1.37.2"),
        ("scheduler-pull-time", "v1.37.2"),
        ("layersched extender (layer-locality)", __version__),
        ("layersched extender (pull-time)", __version__),
    ]
    assert not any(s.status.answers for s in found)
