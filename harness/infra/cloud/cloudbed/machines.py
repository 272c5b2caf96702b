"""The VMs: one control plane and N workers, Debian 12, reachable by the operator's key."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from cloudbed.settings import DEBIAN_AMI_NAME, DEBIAN_AMI_OWNER, Settings

TYPE = "layersched:cloud:Machines"
CONTROL_PLANE_NAME = "cp"


def debian_ami(settings: Settings, opts: pulumi.InvokeOptions) -> pulumi.Output[str]:
    """The configured AMI, or the newest Debian 12 amd64 image Debian published."""
    if settings.ami:
        return pulumi.Output.from_input(settings.ami)
    found = aws.ec2.get_ami_output(
        owners=[DEBIAN_AMI_OWNER],
        most_recent=True,
        filters=[
            {"name": "name", "values": [DEBIAN_AMI_NAME]},
            {"name": "architecture", "values": ["x86_64"]},
        ],
        opts=opts,
    )
    return found.id


class ClusterMachines(pulumi.ComponentResource):
    """The key pair and the instances, in the cluster network's subnet and group."""

    #: name -> (public IP, private IP), control plane first.
    addresses: dict[str, tuple[pulumi.Output[str], pulumi.Output[str]]]

    def __init__(
        self,
        name: str,
        *,
        settings: Settings,
        subnet_id: pulumi.Input[str],
        security_group_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.ec2.KeyPair(
            f"{name}-key",
            public_key=settings.ssh_public_key,
            tags=settings.named("key"),
            opts=child,
        )
        ami = debian_ami(settings, pulumi.InvokeOptions(parent=self))
        machines = [(CONTROL_PLANE_NAME, settings.control_plane_instance_type)] + [
            (f"n{k}", settings.worker_instance_type) for k in range(1, settings.workers + 1)
        ]
        self.addresses = {}
        for machine, instance_type in machines:
            instance = aws.ec2.Instance(
                f"{name}-{machine}",
                ami=ami,
                instance_type=instance_type,
                subnet_id=subnet_id,
                vpc_security_group_ids=[security_group_id],
                associate_public_ip_address=True,
                key_name=key.key_name,
                # IMDSv2 only: a pod cannot read the instance's credentials with one GET.
                metadata_options={"http_tokens": "required", "http_endpoint": "enabled"},
                root_block_device={
                    "volume_size": settings.root_volume_gib,
                    "volume_type": "gp3",
                    "encrypted": True,
                    "delete_on_termination": True,
                    "tags": settings.named(f"{machine}-root"),
                },
                tags=settings.named(machine),
                opts=child,
            )
            self.addresses[machine] = (instance.public_ip, instance.private_ip)
        self.register_outputs(
            {
                "key_name": key.key_name,
                "public_ips": {m: ips[0] for m, ips in self.addresses.items()},
                "private_ips": {m: ips[1] for m, ips in self.addresses.items()},
            }
        )
