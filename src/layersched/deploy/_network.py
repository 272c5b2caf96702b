"""The install's NetworkPolicies: who may connect to the stack's pods, and where the
scheduler pods may connect.

**Ingress.** Only kube-scheduler's secure port (10259, authenticated metrics) is open on the
scheduler pods; nothing may connect to the agent (its kubelet's probes come from its own
node, which NetworkPolicy always allows).

**Egress of the scheduler pods** (kube-scheduler and the extender): DNS, the API server,
and the registries the extender resolves images from; nothing else (no cloud metadata
service on port 80, no other pod, no node's kubelet). A NetworkPolicy names peers by
address block, pod and namespace only, never by host name, so two things cannot be
written as names:

* **the API server.** Most network plugins apply a policy after a Service's address is
  translated, so the rule must name the addresses behind the ``kubernetes`` Service
  (``default/kubernetes``' endpoints: the control plane's addresses and port, e.g. 6443),
  not its cluster IP. ``layersched deploy render|overlay --kubernetes-version auto`` reads
  them through the kubeconfig (:class:`EgressSpec` ``api_server``, the cluster IP on 443
  included for plugins that match before translation); ``--api-server CIDR:PORT`` gives
  them by hand. Without them the rule is "any address on 443 and 6443", which still
  keeps the pods off every other port;
* **the registries.** ``--allow-registry`` names them (the extender contacts no other),
  but their addresses are a CDN's and change. Public registries are reached as "any
  public address on 443" (:data:`INTERNAL_IPV4`, :data:`INTERNAL_IPV6` excepted: private
  and shared ranges, link-local, loopback, the cloud metadata addresses, and their NAT64
  forms); a registry on an internal address is given with ``--registry-address
  CIDR:PORT``.

DNS (UDP and TCP 53) is open to any address: the extender resolves registry names through
the cluster's resolver, which may be a node-local cache on a link-local address, and a
resolver forwards any name anyway, so naming it would not narrow what DNS can carry.

Pods on the node's network (``hostNetwork``, as on the local testbed) are not subject to
NetworkPolicy at all.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layersched.core.errors import InputError
from layersched.deploy._workloads import AGENT_NAME, KUBE_SCHEDULER_SECURE_PORT, labels

NETWORKING_API_VERSION = "networking.k8s.io/v1"
DNS_PORT = 53
HTTPS_PORT = 443
#: kube-apiserver's usual secure port (kubeadm's, kind's, the local testbed's).
API_SERVER_PORT = 6443
MAX_PORT = 65_535

#: Addresses no public registry has, excepted from "any public address on 443": private
#: (RFC 1918) and shared (RFC 6598, which holds Alibaba's 100.100.100.200 metadata
#: service) ranges, link-local (cloud metadata at 169.254.169.254, ECS at 169.254.170.2),
#: loopback and "this network", and Azure's WireServer (168.63.129.16, a public address).
#: The registry client refuses the metadata addresses where it connects too
#: (layersched.registry's address table; a test holds this list to cover that table).
INTERNAL_IPV4: tuple[str, ...] = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "168.63.129.16/32",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
)
#: RFC 6052's well-known NAT64 prefix: ``64:ff9b::a.b.c.d`` reaches IPv4 ``a.b.c.d``.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
#: The same for IPv6: unique-local (holds AWS's fd00:ec2::254), link-local, loopback,
#: the local-use NAT64 prefix (its layout is the operator's), and the NAT64 forms of every
#: IPv4 range above. (IPv4-mapped ``::ffff:a.b.c.d`` is no wire address: a connection to
#: one leaves as IPv4, under the IPv4 rule; the API server reads such a block as IPv4 and
#: refuses it inside ``::/0``, as the v1.20.2 dry run showed.)
INTERNAL_IPV6: tuple[str, ...] = (
    "::1/128",
    "fc00::/7",
    "fe80::/10",
    "64:ff9b:1::/48",
    *(
        str(
            ipaddress.IPv6Network(
                (
                    int(NAT64_WELL_KNOWN.network_address) + int(net.network_address),
                    96 + net.prefixlen,
                )
            )
        )
        for net in (ipaddress.IPv4Network(block) for block in INTERNAL_IPV4)
    ),
)


@dataclass(frozen=True, slots=True)
class EgressPeer:
    """An address block and a TCP port the scheduler pods may connect to."""

    cidr: str
    port: int

    @classmethod
    def parse(cls, text: str, what: str) -> EgressPeer:
        """``10.0.0.5:6443``, ``10.0.0.0/24:5000``, ``[fd00::5]:6443``: an address or block and
        a port (an IPv6 one in brackets)."""
        address, sep, port = text.strip().rpartition(":")
        address = address.strip()
        if address.startswith("[") and address.endswith("]"):
            address = address[1:-1]
        elif ":" in address:
            address = ""  # IPv6 without brackets: the port is ambiguous
        try:
            network = ipaddress.ip_network(address, strict=False)
            number = int(port)
        except ValueError:
            network, number = None, 0
        if not sep or network is None or not 0 < number <= MAX_PORT:
            raise InputError(
                f"{what} {text!r}: expected ADDRESS[/PREFIX]:PORT, e.g. 10.0.0.5:6443, "
                "10.0.0.0/24:5000 or [fd00::5]:6443"
            )
        return cls(str(network), number)

    def rule(self) -> dict[str, Any]:
        return {
            "to": [{"ipBlock": {"cidr": self.cidr}}],
            "ports": [{"protocol": "TCP", "port": self.port}],
        }


@dataclass(frozen=True, slots=True)
class EgressSpec:
    """Where the scheduler pods may connect besides DNS (module docstring)."""

    #: The API server's addresses and port (``default/kubernetes``' endpoints, and its
    #: cluster IP on 443); empty: any address on 443 and 6443.
    api_server: tuple[EgressPeer, ...] = ()
    #: Registries on internal addresses (public ones are reached on 443 anyway).
    registries: tuple[EgressPeer, ...] = ()


def _any_address(ports: Sequence[int]) -> dict[str, Any]:
    return {"ports": [{"protocol": "TCP", "port": port} for port in ports]}


def _public(port: int) -> dict[str, Any]:
    return {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(INTERNAL_IPV4)}},
            {"ipBlock": {"cidr": "::/0", "except": list(INTERNAL_IPV6)}},
        ],
        "ports": [{"protocol": "TCP", "port": port}],
    }


def scheduler_egress(egress: EgressSpec) -> list[dict[str, Any]]:
    """The egress rules of the scheduler pods (module docstring)."""
    dns = {"ports": [{"protocol": proto, "port": DNS_PORT} for proto in ("UDP", "TCP")]}
    if egress.api_server:
        api = [peer.rule() for peer in egress.api_server]
    else:
        api = [_any_address((HTTPS_PORT, API_SERVER_PORT))]
    return [dns, *api, _public(HTTPS_PORT), *(peer.rule() for peer in egress.registries)]


def _meta(name: str, component: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "labels": labels(component), "namespace": namespace}


def network_policies(
    namespace: str, scheduler_name: str, egress: EgressSpec
) -> list[dict[str, Any]]:
    """The scheduler pods' ingress (metrics only) and egress; nothing in to the agent."""
    metrics = [{"ports": [{"protocol": "TCP", "port": KUBE_SCHEDULER_SECURE_PORT}]}]
    return [
        {
            "apiVersion": NETWORKING_API_VERSION,
            "kind": "NetworkPolicy",
            "metadata": _meta(scheduler_name, scheduler_name, namespace),
            "spec": {
                "podSelector": {"matchLabels": labels(scheduler_name)},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": metrics,
                "egress": scheduler_egress(egress),
            },
        },
        {
            "apiVersion": NETWORKING_API_VERSION,
            "kind": "NetworkPolicy",
            "metadata": _meta(AGENT_NAME, AGENT_NAME, namespace),
            "spec": {
                "podSelector": {"matchLabels": labels(AGENT_NAME)},
                "policyTypes": ["Ingress"],
                "ingress": [],
            },
        },
    ]
