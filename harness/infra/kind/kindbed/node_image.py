"""The CRI-O kind node image: built from harness/infra/kind/node-image, or a prebuilt one pulled."""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi_command import local

from kindbed._shell import sh
from layersched.core.reference import DEFAULT_TAG, ImageReference

TYPE = "layersched:kind:CrioNodeImage"


class CrioNodeImage(pulumi.ComponentResource):
    """A kind node image with CRI-O instead of containerd.

    With ``prebuilt`` set, the image is only pulled (seed 001 used
    ``quay.io/aojea/kindnode:crio1639620432``); otherwise ``harness/infra/kind/node-image``
    is built with the pinned kind node image and CRI-O version as build args.
    """

    #: The image reference (known up front, so the kind config can name it).
    tag: str
    #: The same reference, resolved only once the build or pull has happened.
    image: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        docker_bin: str,
        context_dir: Path,
        kind_node_image: str,
        crio_version: str,
        prebuilt: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if prebuilt:
            step = local.Command(
                f"{name}-pull",
                create=sh([docker_bin, "pull", prebuilt]),
                triggers=[prebuilt],
                opts=child,
            )
            tag = prebuilt
        else:
            # kindest/node:v1.30.0[@sha256:…] -> layersched/kind-crio:v1.30.0-crio-v1.30
            base_tag = ImageReference.parse(kind_node_image).tag or DEFAULT_TAG
            tag = f"layersched/kind-crio:{base_tag}-crio-{crio_version}"
            step = local.Command(
                f"{name}-build",
                create=sh(
                    [
                        docker_bin,
                        "build",
                        "--build-arg",
                        f"KIND_NODE_IMAGE={kind_node_image}",
                        "--build-arg",
                        f"CRIO_VERSION={crio_version}",
                        "--tag",
                        tag,
                        str(context_dir),
                    ]
                ),
                delete=sh([docker_bin, "image", "rm", "--force", tag]),
                triggers=[kind_node_image, crio_version],
                opts=child,
            )
        self.tag = tag
        self.image = step.stdout.apply(lambda _: tag)
        self.register_outputs({"image": self.image})
