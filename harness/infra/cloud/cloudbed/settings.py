"""The stack's configuration, read once and typed (``pulumi config set <key> <value>``).

Three keys have no default and stop the program before anything is created: ``region``,
``operatorCidr`` and ``sshPublicKey``. docs/cloud.md lists every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from layersched.core.errors import InputError
from layersched_harness.testbed.cloud import (
    check_operator_cidr,
    check_ssh_public_key,
    check_subnet,
    check_workers,
)

#: Debian's own account for its official cloud images (wiki.debian.org/Cloud/AmazonEC2Image).
DEBIAN_AMI_OWNER = "136693662452"
#: Debian 12 (bookworm, the release the testbed's packages come from), x86-64: the
#: Kubernetes binaries built on the operator's machine are linux/amd64.
DEBIAN_AMI_NAME = "debian-12-amd64-*"
#: The login user of Debian's cloud images.
DEFAULT_SSH_USER = "admin"
#: 2 vCPU, 4 GiB: etcd, kube-apiserver, two schedulers, the registry and the extender.
DEFAULT_CONTROL_PLANE_TYPE = "t3.medium"
#: 2 vCPU, 2 GiB: containerd and a kubelet running one scenario pod at a time.
DEFAULT_WORKER_TYPE = "t3.small"
REQUIRED_KEYS = ("region", "operatorCidr", "sshPublicKey")


@dataclass(frozen=True)
class Settings:
    """Typed stack configuration."""

    stack: str
    region: str
    #: The only source of SSH and Kubernetes API traffic (``203.0.113.7/32``).
    operator_cidr: str
    ssh_public_key: str
    workers: int = 3
    control_plane_instance_type: str = DEFAULT_CONTROL_PLANE_TYPE
    worker_instance_type: str = DEFAULT_WORKER_TYPE
    #: Empty: the region's first zone offering the subnet (AWS chooses).
    availability_zone: str = ""
    vpc_cidr: str = "10.61.0.0/16"
    subnet_cidr: str = "10.61.1.0/24"
    root_volume_gib: int = 20
    #: Empty: the newest Debian 12 amd64 image from Debian's account.
    ami: str = ""
    ssh_user: str = DEFAULT_SSH_USER
    #: Added to every resource's tags (with Project, Stack and ManagedBy).
    extra_tags: dict[str, str] = field(default_factory=dict)

    @property
    def tags(self) -> dict[str, str]:
        """What every resource is tagged with: find (and bill) the stack's resources."""
        return {
            "Project": "layersched",
            "Stack": self.stack,
            "ManagedBy": "pulumi",
            **self.extra_tags,
        }

    def named(self, name: str) -> dict[str, str]:
        """The tags plus a ``Name`` (what the EC2 console lists)."""
        return {**self.tags, "Name": f"layersched-{self.stack}-{name}"}

    @classmethod
    def from_config(cls, config: pulumi.Config, stack: str) -> Settings:
        """Read every key (camelCase, as Pulumi config keys are) with its default."""
        missing = [key for key in REQUIRED_KEYS if not config.get(key)]
        if missing:
            raise InputError(
                f"{', '.join(missing)} not set: pulumi config set "
                + " / ".join(f"{key} ..." for key in missing)
                + " (docs/cloud.md)"
            )
        defaults = cls(stack=stack, region="", operator_cidr="", ssh_public_key="")

        def number(key: str, default: int) -> int:
            value = config.get_int(key)
            return default if value is None else value

        vpc_cidr, subnet_cidr = check_subnet(
            config.get("vpcCidr") or defaults.vpc_cidr,
            config.get("subnetCidr") or defaults.subnet_cidr,
        )
        tags = config.get_object("tags") or {}
        if not isinstance(tags, dict):
            raise InputError('tags must be an object: pulumi config set --path "tags.Owner" me')
        volume_gib = number("rootVolumeGib", defaults.root_volume_gib)
        if volume_gib < 8:
            raise InputError(f"rootVolumeGib = {volume_gib}: Debian's image needs at least 8")
        return cls(
            stack=stack,
            region=str(config.require("region")),
            operator_cidr=check_operator_cidr(config.require("operatorCidr")),
            ssh_public_key=check_ssh_public_key(config.require("sshPublicKey")),
            workers=check_workers(number("workers", defaults.workers)),
            control_plane_instance_type=config.get("controlPlaneInstanceType")
            or defaults.control_plane_instance_type,
            worker_instance_type=config.get("workerInstanceType") or defaults.worker_instance_type,
            availability_zone=config.get("availabilityZone") or "",
            vpc_cidr=vpc_cidr,
            subnet_cidr=subnet_cidr,
            root_volume_gib=volume_gib,
            ami=config.get("ami") or "",
            ssh_user=config.get("sshUser") or defaults.ssh_user,
            extra_tags={str(k): str(v) for k, v in tags.items()},
        )
