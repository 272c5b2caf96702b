"""The Pulumi program of the cloud testbed (``harness/infra/cloud``), run against Pulumi's mocks.

No CLI, no engine, no AWS account: the mocks answer every registration (instances get
addresses from TEST-NET and the subnet) and the AMI lookup, and the tests read back the
resource graph ``pulumi up`` would create, above all the security rules.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from tests.infra._pulumi_mocks import Graph, program_on_path, run_program

pytestmark = pytest.mark.infra

PROGRAM_DIR = Path(__file__).resolve().parents[2] / "harness" / "infra" / "cloud"
PROJECT = "layersched-cloud"
STACK = "test"
OPERATOR = "203.0.113.7/32"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx7 operator@laptop"
REQUIRED = {"region": "eu-west-1", "operatorCidr": OPERATOR, "sshPublicKey": KEY}
#: What the AMI lookup answers under the mocks.
DEBIAN_AMI = "ami-0debian12"
TAG_KEYS = {"Project", "Stack", "ManagedBy"}


class _Answer(pulumi.runtime.Mocks):
    """Inputs come back as state; instances get a public and a private address."""

    def __init__(self) -> None:
        self.instances = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "aws:ec2/instance:Instance":
            self.instances += 1
            state |= {
                "publicIp": f"198.51.100.{self.instances}",
                "privateIp": f"10.61.1.{10 + self.instances}",
            }
        if args.typ == "aws:ec2/keyPair:KeyPair":
            state["keyName"] = f"{args.name}-generated"
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append((args.token, dict(args.args)))
        if args.token == "aws:ec2/getAmi:getAmi":
            return {"id": DEBIAN_AMI, "architecture": "x86_64"}, []
        return {}, []


@pytest.fixture(autouse=True)
def _program_on_path() -> Iterator[None]:
    with program_on_path(PROGRAM_DIR, "cloudbed"):
        yield


def _run(config: dict[str, str], answer: _Answer | None = None) -> Graph:
    return run_program(PROGRAM_DIR, PROJECT, STACK, answer or _Answer(), REQUIRED | config)


@pytest.fixture
def graph() -> Graph:
    return _run({})


def _ingress(graph: Graph) -> dict[str, dict[str, Any]]:
    return graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")


def test_ingress_is_ssh_and_api_from_operator_and_members_only(graph: Graph) -> None:
    [group_id] = [f"{n}-id" for n in graph.of_type("aws:ec2/securityGroup:SecurityGroup")]
    rules = _ingress(graph)
    # Every rule is on the cluster group.
    assert {r["securityGroupId"] for r in rules.values()} == {group_id}
    seen = sorted(
        (
            r["ipProtocol"], r.get("fromPort"), r.get("toPort"),
            r.get("cidrIpv4") or f"group:{r.get('referencedSecurityGroupId')}",
        )
        for r in rules.values()
    )  # fmt: skip
    assert seen == [
        # Node to node: any protocol, but only from members of the same group.
        ("-1", None, None, f"group:{group_id}"),
        # SSH from the operator's /32, nowhere else.
        ("tcp", 22, 22, OPERATOR),
        # The Kubernetes API from the operator (the nodes reach it through the member rule).
        ("tcp", 6443, 6443, OPERATOR),
    ]
    # No rule opens anything to the world or to IPv6.
    assert not any(r.get("cidrIpv6") or r.get("prefixListId") for r in rules.values())
    # The group itself has no inline rules that would add to those.
    [group] = graph.of_type("aws:ec2/securityGroup:SecurityGroup").values()
    assert not group.get("ingress")


def test_default_group_is_emptied_and_egress_only_out(graph: Graph) -> None:
    [default] = graph.of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup").values()
    assert default["ingress"] == [] and default["egress"] == []
    [egress] = graph.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule").values()
    assert egress["cidrIpv4"] == "0.0.0.0/0" and egress["ipProtocol"] == "-1"


def test_machines_sit_in_the_cluster_network(graph: Graph) -> None:
    instances = graph.of_type("aws:ec2/instance:Instance")
    # A control plane and the default three workers.
    assert sorted(instances) == ["vm-cp", "vm-n1", "vm-n2", "vm-n3"]
    for instance in instances.values():
        assert instance["subnetId"] == "net-subnet-id"
        assert instance["vpcSecurityGroupIds"] == ["net-sg-id"]
        assert instance["keyName"] == "vm-key-generated"
        assert instance["ami"] == DEBIAN_AMI
        assert instance["associatePublicIpAddress"] is True
        assert instance["metadataOptions"]["httpTokens"] == "required"
        assert instance["rootBlockDevice"]["encrypted"] is True
    assert instances["vm-cp"]["instanceType"] == "t3.medium"
    assert {instances[f"vm-n{k}"]["instanceType"] for k in (1, 2, 3)} == {"t3.small"}
    [key] = graph.of_type("aws:ec2/keyPair:KeyPair").values()
    assert key["publicKey"] == KEY
    [subnet] = graph.of_type("aws:ec2/subnet:Subnet").values()
    assert ipaddress.ip_network(subnet["cidrBlock"]).subnet_of(ipaddress.ip_network("10.61.0.0/16"))
    assert subnet["mapPublicIpOnLaunch"] is False


def test_ami_is_debian_12_from_debians_account() -> None:
    answer = _Answer()
    _run({}, answer)
    [(token, args)] = answer.calls
    assert token == "aws:ec2/getAmi:getAmi"
    assert args["owners"] == ["136693662452"]
    assert {"name": "name", "values": ["debian-12-amd64-*"]} in args["filters"]
    assert args["mostRecent"] is True


def test_configured_ami_skips_the_lookup() -> None:
    answer = _Answer()
    graph = _run({"ami": "ami-0123456789abcdef0"}, answer)
    assert answer.calls == []
    assert {i["ami"] for i in graph.of_type("aws:ec2/instance:Instance").values()} == {
        "ami-0123456789abcdef0"
    }


@pytest.mark.parametrize(
    ("config", "workers", "cp_type", "worker_type"),
    [
        # Sized and counted by config.
        ({"workers": "5", "workerInstanceType": "t3.medium"}, 5, "t3.medium", "t3.medium"),
        ({"workers": "1", "controlPlaneInstanceType": "m6i.large"}, 1, "m6i.large", "t3.small"),
    ],
    ids=["five-medium-workers", "one-worker-large-cp"],
)
def test_machines_follow_config(
    config: dict[str, str], workers: int, cp_type: str, worker_type: str
) -> None:
    instances = _run(config).of_type("aws:ec2/instance:Instance")
    assert len(instances) == 1 + workers
    assert instances["vm-cp"]["instanceType"] == cp_type
    assert {i["instanceType"] for n, i in instances.items() if n != "vm-cp"} == {worker_type}


def test_availability_zone_places_the_subnet() -> None:
    [subnet] = _run({"availabilityZone": "eu-west-1b"}).of_type("aws:ec2/subnet:Subnet").values()
    assert subnet["availabilityZone"] == "eu-west-1b"


def test_every_taggable_resource_is_tagged(graph: Graph) -> None:
    untaggable = {"RouteTableAssociation", "Provider", "Stack"}
    checked = 0
    for urn, state in graph.resources.items():
        typ = urn.split("::")[2].split("$")[-1]
        if typ.startswith(("layersched:", "pulumi:")) or typ.split(":")[-1] in untaggable:
            continue
        assert set(state.get("tags") or {}) >= TAG_KEYS, urn
        assert state["tags"]["Stack"] == STACK
        checked += 1
    assert checked >= 12  # vpc, default sg, igw, subnet, routes, sg, 4 rules, key, 4 VMs
    # The provider tags whatever else it creates (root volumes, ENIs) by default.
    [provider] = graph.of_type("pulumi:providers:aws").values()
    assert set(yaml.safe_load(provider["defaultTags"])["tags"]) >= TAG_KEYS
    assert provider["region"] == "eu-west-1"
    # Every AWS resource goes through that provider, none through an ambient default one.
    for urn, ref in graph.providers.items():
        if urn.split("::")[2].split("$")[-1].startswith("aws:"):
            assert "pulumi:providers:aws::aws::" in ref, urn


def test_extra_tags_are_added(tmp_path: Path) -> None:
    graph = _run({"tags": '{"Owner": "ops", "CostCenter": "42"}'})
    [vpc] = graph.of_type("aws:ec2/vpc:Vpc").values()
    assert vpc["tags"]["Owner"] == "ops" and vpc["tags"]["Project"] == "layersched"


def test_components_parent_their_children(graph: Graph) -> None:
    for urn in graph.resources:
        chain = urn.split("::")[2].split("$")
        if chain[-1].startswith("aws:ec2") or chain[-1].startswith("aws:vpc"):
            assert chain[0] in {"layersched:cloud:Network", "layersched:cloud:Machines"}, urn
    assert graph.outputs_of("net")["security_group_id"] == "net-sg-id"
    assert graph.outputs_of("vm")["public_ips"]["cp"] == "198.51.100.1"


def test_inventory_output_lists_the_machines(graph: Graph) -> None:
    stack = graph.exports
    inventory = yaml.safe_load(stack["ansible_inventory"])
    groups = inventory["all"]["children"]
    assert groups["control_plane"]["hosts"] == {
        "cp": {"ansible_host": "198.51.100.1", "testbed_node_address": "10.61.1.11"}
    }
    assert list(groups["nodes"]["hosts"]) == ["n1", "n2", "n3"]
    assert groups["nodes"]["hosts"]["n3"]["ansible_host"] == "198.51.100.4"
    assert inventory["all"]["vars"]["ansible_user"] == "admin"
    assert stack["workers"]["n1"] == {"public_ip": "198.51.100.2", "private_ip": "10.61.1.12"}
    assert stack["control_plane_public_ip"] == "198.51.100.1"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # Nothing set but the region: the two other required keys are named, with the fix.
        ({"operatorCidr": "", "sshPublicKey": ""}, "operatorCidr, sshPublicKey not set"),
        # The world may not reach SSH.
        ({"operatorCidr": "0.0.0.0/0"}, "opens SSH and the Kubernetes API"),
        ({"operatorCidr": "my-laptop"}, "operatorCidr 'my-laptop' is not an IPv4"),
        ({"sshPublicKey": "/home/me/.ssh/id_ed25519.pub"}, "sshPublicKey is not one OpenSSH"),
        ({"workers": "0"}, "workers = 0: set 1-20"),
        ({"subnetCidr": "10.99.0.0/24"}, "must lie inside vpcCidr"),
    ],
    ids=["missing", "world-open", "not-an-address", "key-path", "no-workers", "subnet-outside"],
)
def test_bad_config_stops_with_the_key_and_fix(config: dict[str, str], message: str) -> None:
    with pytest.raises(pulumi.RunError, match="stack config: ") as raised:
        _run(config)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
