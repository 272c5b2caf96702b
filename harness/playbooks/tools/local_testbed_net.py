#!/usr/bin/env python3
"""The local testbed's network: a host bridge, and per node a netns + veth + tbf.

``up`` makes sure the host bridge carries the gateway address, and that each node has
its own network namespace joined to the bridge by a veth pair: the host end is named
like the namespace, the namespace end is ``eth0`` with the node's address, and a
``tbf`` rate limit sits on the egress of the host end, i.e. the registry-to-node
direction (what an image pull crosses). Each object is checked before it is created or
changed, so a second run changes nothing.

``down`` deletes every network namespace and host link named ``PREFIX-*``, whatever
state a failed or interrupted run left them in (a link's tc qdiscs go with it).

Prints one JSON object (``changed``, ``actions``) for Ansible's ``changed_when``; on
failure prints the failing command to stderr and exits 1. Standard library only.

    local_testbed_net.py up --prefix lstb --gateway 10.250.50.1 --prefixlen 24 \\
        --node lstb-n1=10.250.50.11@20000000 --node lstb-n2=10.250.50.12@5000000
    local_testbed_net.py down --prefix lstb
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Name of the veth end inside each node's namespace.
NODE_IFNAME = "eth0"
#: Where ``ip netns`` keeps its namespace bind mounts.
NETNS_DIR = Path("/run/netns")
#: tbf bucket: 10 ms worth of bytes at the link rate, so refills never starve the link,
#: and at least 16 KiB so a full-size frame always fits.
BURST_WINDOW_S = 0.010
MIN_BURST_BYTES = 16 * 1024
#: Queueing delay tbf tolerates before dropping; TCP then settles at the rate.
TBF_LATENCY_MS = 100
#: tc reports rates rounded to its internal units; accept this relative difference.
RATE_TOLERANCE = 0.01
#: tc keeps the bucket as a time in scheduler ticks and converts back, so a burst reads
#: back a little off (16384 B at 5 Mbit/s reads 16383): accept this relative difference.
BURST_TOLERANCE = 0.01
#: Linux link names are at most 15 characters (IFNAMSIZ - 1).
MAX_IFNAME_CHARS = 15


class NetError(Exception):
    """An ip/tc command failed."""


class Net:
    """Idempotent ip/tc operations, recording what they changed."""

    def __init__(self) -> None:
        self.actions: list[str] = []

    @staticmethod
    def query(argv: list[str]) -> Any:
        """Run a read-only ``ip -j``/``tc -j`` command; None when the object is missing."""
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            return None
        return json.loads(done.stdout)

    def run(self, argv: list[str]) -> None:
        """Run a changing command, or raise with its stderr."""
        self.actions.append(" ".join(argv))
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NetError(f"{' '.join(argv)} failed (rc={done.returncode}): {done.stderr.strip()}")

    def link(self, name: str, netns: str | None = None) -> dict[str, Any] | None:
        """``ip -j addr show dev NAME`` (in ``netns``), or None when missing."""
        found = self.query([*_ip(netns), "-j", "addr", "show", "dev", name])
        return found[0] if found else None

    def ensure_up(self, info: dict[str, Any], name: str, netns: str | None = None) -> None:
        if "UP" not in info.get("flags", []):
            self.run([*_ip(netns), "link", "set", name, "up"])

    def ensure_address(
        self, info: dict[str, Any], name: str, cidr: str, netns: str | None = None
    ) -> None:
        address, prefixlen = cidr.split("/")
        for entry in info.get("addr_info", []):
            if entry.get("local") == address and str(entry.get("prefixlen")) == prefixlen:
                return
        self.run([*_ip(netns), "addr", "add", cidr, "dev", name])

    def bridge(self, name: str, gateway_cidr: str) -> None:
        if self.link(name) is None:
            self.run(["ip", "link", "add", name, "type", "bridge"])
        info = self.link(name) or {}
        self.ensure_address(info, name, gateway_cidr)
        self.ensure_up(info, name)

    def node(self, bridge: str, netns: str, address_cidr: str, rate_bits_per_s: int) -> None:
        host_veth = netns  # links and namespaces have separate name spaces
        if not (NETNS_DIR / netns).exists():
            self.run(["ip", "netns", "add", netns])
        host = self.link(host_veth)
        if host is None:
            self.run(
                [
                    "ip",
                    "link",
                    "add",
                    host_veth,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    NODE_IFNAME,
                    "netns",
                    netns,
                ]
            )
            host = self.link(host_veth) or {}
        if host.get("master") != bridge:
            self.run(["ip", "link", "set", host_veth, "master", bridge])
        self.ensure_up(host, host_veth)
        inner = self.link(NODE_IFNAME, netns) or {}
        self.ensure_address(inner, NODE_IFNAME, address_cidr, netns)
        self.ensure_up(inner, NODE_IFNAME, netns)
        self.ensure_up(self.link("lo", netns) or {}, "lo", netns)
        self.rate_limit(host_veth, rate_bits_per_s)

    def rate_limit(self, dev: str, rate_bits_per_s: int) -> None:
        burst_bytes = tbf_burst_bytes(rate_bits_per_s)
        for qdisc in self.query(["tc", "-j", "qdisc", "show", "dev", dev]) or []:
            if tbf_matches(qdisc, rate_bits_per_s, burst_bytes):
                return
        self.run(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{rate_bits_per_s}bit",
                "burst",
                str(burst_bytes),
                "latency",
                f"{TBF_LATENCY_MS}ms",
            ]
        )

    def remove(self, prefix: str) -> None:
        owned = re.compile(rf"^{re.escape(prefix)}-")
        names = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
        for name in names:
            if owned.match(name):
                self.run(["ip", "netns", "delete", name])
        for link in self.query(["ip", "-j", "link", "show"]) or []:
            name = link.get("ifname", "")
            # A veth goes away with its peer's namespace, and the kernel may take a moment
            # to drop it: look again before deleting, and again if deleting failed (a link
            # that is gone is what teardown wants, not an error).
            if owned.match(name) and self.link(name) is not None:
                try:
                    self.run(["ip", "link", "delete", name])
                except NetError:
                    if self.link(name) is not None:
                        raise
                    self.actions.append(f"{name} went away with its namespace")


def tbf_burst_bytes(rate_bits_per_s: int) -> int:
    """The bucket size the testbed gives a link of ``rate_bits_per_s``."""
    return max(MIN_BURST_BYTES, int(rate_bits_per_s / 8 * BURST_WINDOW_S))


def tbf_matches(qdisc: dict[str, Any], rate_bits_per_s: int, burst_bytes: int) -> bool:
    """True when ``qdisc`` (one entry of ``tc -j qdisc show``) is the root tbf we want.

    Rate and burst are compared within tc's rounding (tc reports rates in bytes/s).
    """
    if qdisc.get("kind") != "tbf" or not qdisc.get("root"):
        return False
    options = qdisc.get("options", {})
    try:
        have_bits_per_s = int(options.get("rate", 0)) * 8
        have_burst_bytes = int(options.get("burst", 0))
    except (TypeError, ValueError):
        return False
    return (
        abs(have_bits_per_s - rate_bits_per_s) <= RATE_TOLERANCE * rate_bits_per_s
        and abs(have_burst_bytes - burst_bytes) <= BURST_TOLERANCE * burst_bytes
    )


def _ip(netns: str | None) -> list[str]:
    return ["ip", "-n", netns] if netns else ["ip"]


def _node(text: str) -> tuple[str, str, int]:
    """``NETNS=ADDRESS@RATE_BITS_PER_S``."""
    match = re.fullmatch(r"([\w.-]+)=([\d.]+)@(\d+)", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NETNS=ADDRESS@RATE_BITS_PER_S")
    return match[1], match[2], int(match[3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--prefix", required=True, help="every netns and host link is PREFIX-*")
    parser.add_argument("--gateway", help="bridge address; the registry listens there")
    parser.add_argument("--prefixlen", type=int, default=24)
    parser.add_argument("--node", type=_node, action="append", default=[])
    args = parser.parse_args(argv)
    bridge = f"{args.prefix}-br"
    net = Net()
    try:
        if args.action == "down":
            net.remove(args.prefix)
        else:
            if args.gateway is None:
                parser.error("up needs --gateway")
            for name in [bridge] + [netns for netns, _, _ in args.node]:
                if not name.startswith(f"{args.prefix}-") or len(name) > MAX_IFNAME_CHARS:
                    parser.error(f"{name!r}: must be {args.prefix}-*, at most 15 characters")
            net.bridge(bridge, f"{args.gateway}/{args.prefixlen}")
            for netns, address, rate_bits_per_s in args.node:
                net.node(bridge, netns, f"{address}/{args.prefixlen}", rate_bits_per_s)
    except NetError as err:
        print(f"local_testbed_net {args.action}: {err}", file=sys.stderr)
        print(json.dumps({"changed": bool(net.actions), "actions": net.actions}))
        return 1
    print(json.dumps({"changed": bool(net.actions), "actions": net.actions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
