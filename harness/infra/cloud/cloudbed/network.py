"""The cluster's own network: VPC, public subnet, and the one security group.

Ingress, and nothing else:

- SSH (22/tcp) from the operator's CIDR;
- the Kubernetes API (6443/tcp) from the operator's CIDR;
- anything from a member of the same security group (node-to-node: the API from the
  kubelets, the registry, kubelet ports, pod traffic), which stays inside the VPC.

Egress is open: the VMs fetch Debian packages. The VPC's default security group is
emptied, so nothing that lands in it by mistake is reachable.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from cloudbed.settings import Settings
from layersched_harness.testbed.cloud import API_SERVER_PORT, SSH_PORT

TYPE = "layersched:cloud:Network"
#: Every protocol, in the security-group API's spelling.
ALL_PROTOCOLS = "-1"
ANYWHERE = "0.0.0.0/0"


class ClusterNetwork(pulumi.ComponentResource):
    """VPC + internet gateway + subnet + route table + the cluster security group."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    security_group_id: pulumi.Output[str]

    def __init__(
        self, name: str, *, settings: Settings, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=settings.vpc_cidr,
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags=settings.named("vpc"),
            opts=child,
        )
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg",
            vpc_id=vpc.id,
            ingress=[],
            egress=[],
            tags=settings.named("default-sg-emptied"),
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags=settings.named("igw"), opts=child
        )
        subnet = aws.ec2.Subnet(
            f"{name}-subnet",
            vpc_id=vpc.id,
            cidr_block=settings.subnet_cidr,
            availability_zone=settings.availability_zone or None,
            # Only the VMs get public addresses (each instance asks for one).
            map_public_ip_on_launch=False,
            tags=settings.named("subnet"),
            opts=child,
        )
        routes = aws.ec2.RouteTable(
            f"{name}-routes",
            vpc_id=vpc.id,
            routes=[{"cidr_block": ANYWHERE, "gateway_id": gateway.id}],
            tags=settings.named("routes"),
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-routes-subnet", subnet_id=subnet.id, route_table_id=routes.id, opts=child
        )
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=vpc.id,
            description="layersched cluster: SSH and API from the operator, all from members",
            tags=settings.named("sg"),
            opts=child,
        )
        rule_tags = settings.tags

        def ingress(rule: str, description: str, **match: pulumi.Input[str] | int) -> None:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-{rule}",
                security_group_id=group.id,
                description=description,
                tags=rule_tags,
                opts=child,
                **match,  # type: ignore[arg-type]
            )

        ingress(
            "ssh-from-operator", "SSH from the operator", ip_protocol="tcp",
            from_port=SSH_PORT, to_port=SSH_PORT, cidr_ipv4=settings.operator_cidr,
        )  # fmt: skip
        ingress(
            "api-from-operator", "Kubernetes API from the operator", ip_protocol="tcp",
            from_port=API_SERVER_PORT, to_port=API_SERVER_PORT, cidr_ipv4=settings.operator_cidr,
        )  # fmt: skip
        ingress(
            "from-members", "Node to node (API, registry, kubelets) inside the VPC",
            ip_protocol=ALL_PROTOCOLS, referenced_security_group_id=group.id,
        )  # fmt: skip
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-egress",
            security_group_id=group.id,
            description="Out to anywhere (Debian packages)",
            ip_protocol=ALL_PROTOCOLS,
            cidr_ipv4=ANYWHERE,
            tags=rule_tags,
            opts=child,
        )
        self.vpc_id = vpc.id
        self.subnet_id = subnet.id
        self.security_group_id = group.id
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "subnet_id": self.subnet_id,
                "security_group_id": self.security_group_id,
            }
        )
