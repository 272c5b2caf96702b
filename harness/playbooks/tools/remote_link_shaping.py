#!/usr/bin/env python3
"""Shape a registry host's egress to each node: the cloud counterpart of the local
testbed's per-veth ``tbf`` (``local_testbed_net.py``).

On cloud VMs there is no veth per node to shape, so the registry's own interface gets an
``htb`` root with one class per node, at the link rate, selected by the node's address
(``u32`` on the destination); everything else (the API server, SSH, etcd) goes through an
unshaped default class. Only registry-to-node traffic is slowed, exactly as locally.

    remote_link_shaping.py --state FILE --rate-bits-per-s N --dst IP [--dst IP ...]
                           [--device DEV]

Prints ``{"changed": bool, "device": DEV}``. A second run with the same settings changes
nothing (the applied settings are kept in ``--state``, and the root ``htb`` must still be
there). ``--rate-bits-per-s 0`` removes the shaping.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import subprocess
import sys
from pathlib import Path

#: The root qdisc's handle, and the default (unshaped) class's minor number.
ROOT_HANDLE = "1:"
DEFAULT_MINOR = 0xFFFF
#: The default class: far above any NIC, so unshaped traffic is not slowed. tc gives a
#: class this fast a burst of 0 bytes unless told; a quantum within htb's range keeps
#: it quiet.
DEFAULT_CLASS = ["rate", "10gbit", "burst", "1mb", "cburst", "1mb", "quantum", "60000"]
TC_TIMEOUT_S = 30


class ShapingError(Exception):
    """A tc/ip command failed; the message names it and what it printed."""


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=TC_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ShapingError(f"{' '.join(argv)}: {err}") from err
    if done.returncode != 0:
        raise ShapingError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def device_towards(address: str) -> str:
    """The interface this host reaches ``address`` through (``ip route get``)."""
    routes = json.loads(_run(["ip", "-j", "route", "get", address]) or "[]")
    if not routes or "dev" not in routes[0]:
        raise ShapingError(f"no route to {address}: give --device")
    return str(routes[0]["dev"])


def plan(device: str, rate_bits_per_s: int, destinations: list[str]) -> list[list[str]]:
    """The tc commands that build the shaping from scratch (after the root is deleted)."""
    commands = [
        ["tc", "qdisc", "add", "dev", device, "root", "handle", ROOT_HANDLE, "htb",
         "default", f"{DEFAULT_MINOR:x}"],
        ["tc", "class", "add", "dev", device, "parent", ROOT_HANDLE, "classid",
         f"1:{DEFAULT_MINOR:x}", "htb", *DEFAULT_CLASS],
    ]  # fmt: skip
    for minor, address in enumerate(destinations, start=1):
        classid = f"1:{minor:x}"
        rate = f"{rate_bits_per_s}bit"
        commands.append(
            ["tc", "class", "add", "dev", device, "parent", ROOT_HANDLE, "classid", classid,
             "htb", "rate", rate, "ceil", rate]
        )  # fmt: skip
        commands.append(
            ["tc", "filter", "add", "dev", device, "parent", ROOT_HANDLE, "protocol", "ip",
             "prio", "1", "u32", "match", "ip", "dst", f"{address}/32", "flowid", classid]
        )  # fmt: skip
    return commands


def _root_is_ours(device: str) -> bool:
    qdiscs = json.loads(_run(["tc", "-j", "qdisc", "show", "dev", device]) or "[]")
    return any(
        q.get("root") and q.get("kind") == "htb" and q.get("handle") == ROOT_HANDLE for q in qdiscs
    )


def _check(rate_bits_per_s: int, destinations: list[str]) -> list[str]:
    if rate_bits_per_s < 0:
        raise ShapingError(f"--rate-bits-per-s {rate_bits_per_s}: must be >= 0 (0: unshaped)")
    checked = []
    for address in destinations:
        try:
            checked.append(str(ipaddress.IPv4Address(address)))
        except ValueError as err:
            raise ShapingError(f"--dst {address!r}: not an IPv4 address ({err})") from None
    if len(set(checked)) != len(checked):
        raise ShapingError(f"--dst lists an address twice: {checked}")
    return sorted(checked)


def apply(state: Path, device: str, rate_bits_per_s: int, destinations: list[str]) -> bool:
    """Make ``device``'s shaping match; True if anything changed."""
    wanted = {"device": device, "rate_bits_per_s": rate_bits_per_s, "destinations": destinations}
    try:
        applied = json.loads(state.read_text())
    except (OSError, ValueError):
        applied = None
    shaped = _root_is_ours(device)
    if applied == wanted and shaped == (rate_bits_per_s > 0):
        return False
    if shaped:
        _run(["tc", "qdisc", "del", "dev", device, "root"])
    if rate_bits_per_s > 0:
        for command in plan(device, rate_bits_per_s, destinations):
            _run(command)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(wanted) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--rate-bits-per-s", type=int, required=True)
    parser.add_argument("--dst", action="append", default=[], help="a node's address")
    parser.add_argument("--device", help="default: the interface towards the first --dst")
    args = parser.parse_args(argv)
    try:
        destinations = _check(args.rate_bits_per_s, args.dst)
        if not destinations:
            raise ShapingError("no --dst: give each node's address")
        device = args.device or device_towards(destinations[0])
        changed = apply(args.state, device, args.rate_bits_per_s, destinations)
    except ShapingError as err:
        print(f"remote_link_shaping: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"changed": changed, "device": device}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
