"""The cloud testbed's pure parts: checks of the stack's settings and the Ansible inventory.

``harness/infra/cloud`` (the Pulumi program) and ``harness/infra/cloud/cloud.sh`` use these;
nothing here
talks to a cloud. See docs/cloud.md.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from layersched.core.errors import InputError

#: The shortest operator prefix accepted: SSH and the API are opened to it alone, so a
#: whole /8 or the Internet (0.0.0.0/0) is refused.
MIN_OPERATOR_PREFIXLEN = 16
#: The key types ``ssh-keygen`` writes that EC2 key pairs accept.
SSH_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                 "ecdsa-sha2-nistp521")  # fmt: skip
#: The Kubernetes API port on the control-plane VM (as on the local testbed).
API_SERVER_PORT = 6443
SSH_PORT = 22
#: Inventory groups the cloud playbook targets.
CONTROL_PLANE_GROUP = "control_plane"
NODES_GROUP = "nodes"


def check_operator_cidr(value: str) -> str:
    """The operator's address as a network (``203.0.113.7/32``; a bare address means /32)."""
    try:
        network = ipaddress.ip_network(value.strip() if "/" in value else f"{value.strip()}/32")
    except ValueError as err:
        raise InputError(
            f"operatorCidr {value!r} is not an IPv4 address or network: set your public "
            "address, e.g. pulumi config set operatorCidr $(curl -s https://checkip.amazonaws.com)/32"
        ) from err
    if network.version != 4 or network.prefixlen < MIN_OPERATOR_PREFIXLEN:
        raise InputError(
            f"operatorCidr {value!r} opens SSH and the Kubernetes API to "
            f"{network.num_addresses} addresses: give your own IPv4 address "
            f"(a /32, at most a /{MIN_OPERATOR_PREFIXLEN})"
        )
    return str(network)


def check_ssh_public_key(value: str) -> str:
    """One OpenSSH public key line (``ssh-ed25519 AAAA... comment``)."""
    key = value.strip()
    fields = key.split()
    if len(fields) < 2 or fields[0] not in SSH_KEY_TYPES or "\n" in key:
        raise InputError(
            "sshPublicKey is not one OpenSSH public key line: "
            'pulumi config set sshPublicKey "$(cat ~/.ssh/id_ed25519.pub)"'
        )
    return key


def check_subnet(vpc_cidr: str, subnet_cidr: str) -> tuple[str, str]:
    """The VPC and subnet CIDRs, the subnet inside the VPC (both private ranges)."""
    try:
        vpc = ipaddress.ip_network(vpc_cidr)
        subnet = ipaddress.ip_network(subnet_cidr)
    except ValueError as err:
        raise InputError(f"vpcCidr/subnetCidr: {err}") from err
    if not (vpc.is_private and isinstance(subnet, type(vpc)) and subnet.subnet_of(vpc)):  # type: ignore[arg-type]
        raise InputError(
            f"subnetCidr {subnet_cidr} must lie inside vpcCidr {vpc_cidr} (a private range)"
        )
    return str(vpc), str(subnet)


def check_workers(count: int) -> int:
    """The number of worker VMs: the seed scenario needs three."""
    if not 1 <= count <= 20:
        raise InputError(f"workers = {count}: set 1-20 (pulumi config set workers 3)")
    return count


@dataclass(frozen=True)
class Machine:
    """One VM as Ansible reaches it (public address) and the cluster sees it (private)."""

    name: str
    public_ip: str
    private_ip: str


def ansible_inventory(
    control_plane: Machine,
    workers: Sequence[Machine],
    *,
    ssh_user: str,
    extra_vars: Mapping[str, str] | None = None,
) -> str:
    """The YAML inventory ``harness/playbooks/testbed-cloud.yml`` runs against.

    Ansible connects to ``ansible_host`` (the public address, which only the operator
    may reach on port 22); ``testbed_node_address`` is the private address the
    cluster's own traffic uses.
    """

    def host(machine: Machine) -> dict[str, str]:
        return {"ansible_host": machine.public_ip, "testbed_node_address": machine.private_ip}

    inventory = {
        "all": {
            "vars": {
                "ansible_user": ssh_user,
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_become": True,
                **(extra_vars or {}),
            },
            "children": {
                CONTROL_PLANE_GROUP: {"hosts": {control_plane.name: host(control_plane)}},
                NODES_GROUP: {"hosts": {w.name: host(w) for w in workers}},
            },
        }
    }
    return "---\n" + yaml.safe_dump(inventory, sort_keys=False)
