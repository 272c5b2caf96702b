"""The namespace the testbed's own components live in."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

TYPE = "layersched:kind:Namespace"


class TestbedNamespace(pulumi.ComponentResource):
    """One namespace (``layersched``), labelled as the testbed's."""

    __test__ = False  # not a pytest class despite its name

    name: pulumi.Output[str]

    def __init__(
        self, name: str, *, namespace: str, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        created = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": namespace, "labels": {"app.kubernetes.io/part-of": "layersched"}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.name = created.metadata.apply(
            lambda m: str(m["name"] if isinstance(m, dict) else m.name)
        )
        self.register_outputs({"name": self.name})
