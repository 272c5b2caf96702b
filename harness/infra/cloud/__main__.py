"""Cloud nodes on AWS: read config, build the network and the machines, export the
addresses and the Ansible inventory ``harness/playbooks/testbed-cloud.yml`` runs against.

``harness/infra/cloud/cloud.sh`` writes the inventory output to a file and runs Ansible over SSH.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
from cloudbed import ClusterMachines, ClusterNetwork, Settings
from cloudbed.machines import CONTROL_PLANE_NAME

from layersched.core.errors import InputError
from layersched_harness.testbed.cloud import Machine, ansible_inventory

try:
    settings = Settings.from_config(pulumi.Config(), pulumi.get_stack())
except InputError as err:
    # The message names the key and the fix; a Python traceback would only bury it.
    raise pulumi.RunError(f"stack config: {err}") from err

# One explicit provider: the region from this stack, and the tags on everything it creates.
provider = aws.Provider("aws", region=settings.region, default_tags={"tags": settings.tags})
with_provider = pulumi.ResourceOptions(providers=[provider])
network = ClusterNetwork("net", settings=settings, opts=with_provider)
machines = ClusterMachines(
    "vm",
    settings=settings,
    subnet_id=network.subnet_id,
    security_group_id=network.security_group_id,
    opts=with_provider,
)


def inventory(addresses: list[str]) -> str:
    """The inventory from the resolved (public, private) pairs, control plane first."""
    names = list(machines.addresses)
    pairs = [Machine(n, addresses[2 * i], addresses[2 * i + 1]) for i, n in enumerate(names)]
    return ansible_inventory(pairs[0], pairs[1:], ssh_user=settings.ssh_user)


flat = [ip for pair in machines.addresses.values() for ip in pair]
pulumi.export("region", settings.region)
pulumi.export("ssh_user", settings.ssh_user)
pulumi.export("control_plane_public_ip", machines.addresses[CONTROL_PLANE_NAME][0])
pulumi.export("control_plane_private_ip", machines.addresses[CONTROL_PLANE_NAME][1])
pulumi.export(
    "workers",
    {
        name: {"public_ip": public, "private_ip": private}
        for name, (public, private) in machines.addresses.items()
        if name != CONTROL_PLANE_NAME
    },
)
pulumi.export("ansible_inventory", pulumi.Output.all(*flat).apply(inventory))
