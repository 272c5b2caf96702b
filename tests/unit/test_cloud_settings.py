"""The cloud testbed's pure parts: settings checks and the Ansible inventory."""

from __future__ import annotations

import pytest
import yaml

from layersched.core.errors import InputError
from layersched_harness.testbed.cloud import (
    Machine,
    ansible_inventory,
    check_operator_cidr,
    check_ssh_public_key,
    check_subnet,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # A bare address is that one address.
        ("203.0.113.7", "203.0.113.7/32"),
        ("203.0.113.0/24", "203.0.113.0/24"),
        # /16 is the widest accepted: 65,536 addresses.
        ("198.51.0.0/16", "198.51.0.0/16"),
    ],
    ids=["bare", "office-24", "widest"],
)
def test_operator_cidr_accepted(value: str, expected: str) -> None:
    assert check_operator_cidr(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.0.0.0/0", "opens SSH and the Kubernetes API to 4294967296 addresses"),
        ("10.0.0.0/8", "opens SSH and the Kubernetes API to 16777216 addresses"),
        ("2001:db8::1/128", "opens SSH"),
        ("laptop", "is not an IPv4 address"),
        # host bits set: ip_network is strict, and a typo should not silently widen.
        ("203.0.113.7/24", "is not an IPv4 address"),
    ],
    ids=["world", "slash-8", "ipv6", "name", "host-bits"],
)
def test_operator_cidr_refused(value: str, message: str) -> None:
    with pytest.raises(InputError, match="operatorCidr") as raised:
        check_operator_cidr(value)
    assert message in str(raised.value)


def test_ssh_key_must_be_one_key_line() -> None:
    key = "ssh-ed25519 AAAAC3Nza me@host"
    assert check_ssh_public_key(f"  {key}\n") == key
    for bad in ["~/.ssh/id_ed25519.pub", "-----BEGIN OPENSSH PRIVATE KEY-----", f"{key}\n{key}"]:
        with pytest.raises(InputError, match="sshPublicKey"):
            check_ssh_public_key(bad)


def test_subnet_inside_private_vpc() -> None:
    assert check_subnet("10.61.0.0/16", "10.61.1.0/24") == ("10.61.0.0/16", "10.61.1.0/24")
    with pytest.raises(InputError, match="inside vpcCidr"):
        check_subnet("10.61.0.0/16", "10.62.1.0/24")
    with pytest.raises(InputError, match="inside vpcCidr"):
        check_subnet("8.8.0.0/16", "8.8.1.0/24")  # public space


def test_inventory_groups_and_addresses() -> None:
    text = ansible_inventory(
        Machine("cp", "198.51.100.1", "10.61.1.11"),
        [Machine("n1", "198.51.100.2", "10.61.1.12"), Machine("n2", "198.51.100.3", "10.61.1.13")],
        ssh_user="admin",
    )
    inventory = yaml.safe_load(text)["all"]
    assert inventory["vars"]["ansible_user"] == "admin"
    assert inventory["children"]["control_plane"]["hosts"]["cp"] == {
        "ansible_host": "198.51.100.1", "testbed_node_address": "10.61.1.11"
    }  # fmt: skip
    # Order is kept: n1 is the first worker in the scenario's tables.
    assert list(inventory["children"]["nodes"]["hosts"]) == ["n1", "n2"]
