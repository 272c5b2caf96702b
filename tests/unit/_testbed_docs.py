"""Documents the local testbed's playbook writes, for unit tests (no testbed needed)."""

from __future__ import annotations

from typing import Any


def inventory_doc(node_count: int = 1) -> dict[str, Any]:
    """An ``inventory.json`` as testbed-local.yml writes it, nodes n1..nN on 20 Mbit/s."""
    nodes = [
        {
            "name": f"n{i}",
            "netns": f"lstb-n{i}",
            "host_veth": f"lstb-n{i}",
            "address": f"10.250.50.{10 + i}",
            "link_rate_bits_per_s": 20_000_000,
            "cri_socket": f"/s/nodes/n{i}/containerd.sock",
            "cri_endpoint": f"unix:///s/nodes/n{i}/containerd.sock",
            "dir": f"/s/nodes/n{i}",
            "config": f"/s/nodes/n{i}/config.toml",
            "root_dir": f"/s/nodes/n{i}/root",
            "state_dir": f"/s/nodes/n{i}/state",
            "pidfile": f"/s/nodes/n{i}/containerd.pid",
            "log": f"/s/nodes/n{i}/containerd.log",
            "kubelet_pidfile": f"/s/nodes/n{i}/kubelet.pid",
            "kubelet_log": f"/s/nodes/n{i}/kubelet.log",
            "kubelet_root_dir": f"/s/nodes/n{i}/kubelet/root",
        }
        for i in range(1, node_count + 1)
    ]
    return {
        "version": 2,
        "driver": "local",
        "state_dir": "/s",
        "prefix": "lstb",
        "network": {"bridge": "lstb-br", "gateway": "10.250.50.1", "cidr": "10.250.50.0/24"},
        "registry": {
            "address": "10.250.50.1",
            "port": 5000,
            "url": "http://10.250.50.1:5000",
            "config": "/s/registry/config.yml",
            "storage_dir": "/s/registry/storage",
            "pidfile": "/s/registry/registry.pid",
            "log": "/s/registry/registry.log",
            "access_log": "/s/registry/access.log",
        },
        "nodes": nodes,
        "cluster": {
            "kubernetes_version": "v1.20.2",
            "kubeconfig": "/s/kubeconfig",
            "api_server": "https://10.250.50.1:6443",
            "ca_file": "/s/pki/ca.crt",
            "admin_cert": "/s/pki/admin.crt",
            "admin_key": "/s/pki/admin.key",
            "bin_dir": "/cache/kubernetes/bin",
            "control_plane": [
                {
                    "name": name,
                    "pidfile": f"/s/control-plane/{name}.pid",
                    "log": f"/s/control-plane/{name}.log",
                    "health_url": f"https://10.250.50.1:{port}/healthz",
                }
                for name, port in (
                    ("etcd", 2379),
                    ("kube-apiserver", 6443),
                    ("kube-controller-manager", 10257),
                    ("scheduler-image-locality", 10259),
                    ("scheduler-layer-locality", 10260),
                )
            ],
            "schedulers": {
                strategy: {"name": strategy, "log": f"/s/control-plane/scheduler-{strategy}.log"}
                for strategy in ("image-locality", "layer-locality")
            },
            "extender": {
                "url": "http://10.250.50.1:8888",
                "strategy": "layer-locality",
                "pidfile": "/s/extender-layer-locality.pid",
                "log": "/s/logs/extender-layer-locality.log",
            },
        },
    }
