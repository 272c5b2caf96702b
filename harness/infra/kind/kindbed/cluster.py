"""The kind cluster (1 control plane + N workers, CRI-O everywhere), and a Kubernetes
provider for it. ``pulumi destroy`` exports the cluster's logs, then deletes it.

Creation first checks ``kind version`` against the stack's ``kindVersion``: a
node image is only supported with the kind release it shipped with. A changed
config replaces the cluster delete-first, as kind cluster names are unique.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import local

from kindbed._shell import require_kind_version, sh
from layersched_harness.testbed.kind import ClusterSpec, kind_cluster_config, node_names, to_yaml

TYPE = "layersched:kind:Cluster"
#: kind waits this long for the control plane to be Ready before giving up.
KIND_WAIT = "5m"


class KindCluster(pulumi.ComponentResource):
    """``kind create cluster`` with the generated config (fed on stdin)."""

    name: str
    config_yaml: str
    kubeconfig_path: pulumi.Output[str]
    node_names: tuple[str, ...]
    provider: k8s.Provider

    def __init__(
        self,
        name: str,
        *,
        spec: ClusterSpec,
        kind_bin: str,
        kind_version: str,
        kubeconfig_path: Path,
        logs_dir: Path,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        self.name = spec.name
        self.config_yaml = to_yaml(kind_cluster_config(spec))
        self.node_names = node_names(spec.name, spec.workers)
        kubeconfig = str(kubeconfig_path)
        create = local.Command(
            f"{name}-kind",
            create=require_kind_version(kind_bin, kind_version)
            + " && "
            + sh(
                ["mkdir", "-p", str(kubeconfig_path.parent)],
                [
                    kind_bin,
                    "create",
                    "cluster",
                    "--name",
                    spec.name,
                    "--config",
                    "/dev/stdin",
                    "--kubeconfig",
                    kubeconfig,
                    "--wait",
                    KIND_WAIT,
                ],
            ),
            # Logs first: a failed run must leave evidence before the nodes vanish.
            delete=sh(
                [kind_bin, "export", "logs", str(logs_dir), "--name", spec.name],
                [kind_bin, "delete", "cluster", "--name", spec.name, "--kubeconfig", kubeconfig],
                tolerate_failure=True,
            ),
            # pulumi_command re-runs `create` on an update unless `update` is set, and a
            # second `kind create cluster` fails on the existing one. What needs a new
            # cluster is a trigger (replace); anything else (kindBin, kindVersion) only
            # re-checks the kind release.
            update=require_kind_version(kind_bin, kind_version),
            stdin=self.config_yaml,
            triggers=[self.config_yaml, kubeconfig],
            # The new cluster has the old one's name: delete it first, not after.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.kubeconfig_path = create.stdout.apply(lambda _: kubeconfig)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig_path,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {
                "kubeconfig_path": self.kubeconfig_path,
                "node_names": list(self.node_names),
                "config": self.config_yaml,
                "kind_version": kind_version,
            }
        )
