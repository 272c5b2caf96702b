"""Stand-ins for ``docker``, ``kind`` and ``kubectl`` against a simulated kind cluster.

``sideload.yml`` only talks to the cluster through these three CLIs, so the role's
real control flow (checksums, copies, restart order, waits, idempotence) can run
here, where no kind node can. The simulated cluster lives in one JSON file
(``$FAKE_KIND_STATE``) and models exactly what the waits must see through:

* after ``systemctl restart kubelet`` the API keeps serving the *old* Ready
  condition (an old heartbeat) for ``stale_reads`` reads, as the real API does
  until the new kubelet posts its first status;
* after a static pod manifest is rewritten, the mirror pod keeps the old image
  for ``stale_reads`` reads, as it does until the kubelet picks the file up;
* ``crictl`` fails without ``--runtime-endpoint``, as on a node image without
  ``/etc/crictl.yaml``.

Every call advances a fake clock by one second and is appended to ``calls``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CRIO_ENDPOINT = "unix:///var/run/crio/crio.sock"
#: Heartbeat of the Ready condition before any restart (long before the fake clock).
OLD_HEARTBEAT = "2000-01-01T00:00:00Z"
_STATE = Path(os.environ.get("FAKE_KIND_STATE", "/nonexistent"))


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _time(clock: int) -> str:
    return datetime.fromtimestamp(clock, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_exec(state: dict[str, Any], node: str, argv: list[str]) -> int:
    files: dict[str, str] = state["files"][node]
    if argv[0] == "sha256sum":
        if argv[1] not in files:
            print(f"sha256sum: {argv[1]}: No such file or directory", file=sys.stderr)
            return 1
        print(f"{files[argv[1]]}  {argv[1]}")
    elif argv[:2] == ["systemctl", "restart"]:
        if argv[2] == "kubelet":
            state["restarted_at"][node] = state["clock"]
            state["stale_ready"][node] = state["stale_reads"]
    elif argv[:2] == ["systemctl", "is-active"]:
        print("active")
    elif argv[0] == "date":
        print(_time(state["clock"]))
    elif argv[0] == "crictl":
        if argv[1:3] != ["--runtime-endpoint", CRIO_ENDPOINT]:
            print("crictl: no runtime endpoint (no /etc/crictl.yaml)", file=sys.stderr)
            return 1
        if argv[3] == "images":
            patched = files.get("/usr/bin/crio") == state["patched_crio"]
            annotations = {"imageLayer.sha256:" + "0c" * 32: "54917164"} if patched else {}
            print(json.dumps({"images": [{"id": "p", "spec": {"annotations": annotations}}]}))
    elif argv[0] == "grep":
        component = Path(argv[-1]).stem
        print("image: " + state["manifests"][f"{node}/{component}"])
    elif argv[0] == "sed":
        component = Path(argv[-1]).stem
        old = state["manifests"][f"{node}/{component}"]
        state["manifests"][f"{node}/{component}"] = argv[2].split("#")[2].removeprefix("image: ")
        state["mirror"][f"{node}/{component}"] = {"image": old, "stale": state["stale_reads"]}
    else:
        print(f"fake docker exec: unexpected {argv}", file=sys.stderr)
        return 2
    return 0


def _docker(state: dict[str, Any], argv: list[str]) -> int:
    if argv[0] == "exec":
        return _node_exec(state, argv[1], argv[2:])
    if argv[0] == "cp":
        node, path = argv[2].split(":", 1)
        state["files"][node][path] = _sha256(argv[1])
        return 0
    if argv[0] == "tag":
        return 0
    if argv[0] == "push":
        if argv[1] not in state["pushed"]:
            state["pushed"].append(argv[1])
            print("5f70bf18a086: Pushed")
        else:
            print("5f70bf18a086: Layer already exists")
        return 0
    print(f"fake docker: unexpected {argv}", file=sys.stderr)
    return 2


def _kubectl(state: dict[str, Any], argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--namespace=")]
    output = next((a.split("=", 1)[1] for a in args if a.startswith("--output=")), "")
    if args[:2] == ["get", "nodes"]:
        print(" ".join(n for n in state["nodes"] if n.endswith("control-plane")))
    elif args[0] == "get" and args[1].startswith("node/"):
        node = args[1].removeprefix("node/")
        state["ready_reads"][node] = state["ready_reads"].get(node, 0) + 1
        stale = state["stale_ready"].get(node, 0)
        if state["restarted_at"].get(node) is None or stale > 0:
            state["stale_ready"][node] = max(stale - 1, 0)
            print(f"True {OLD_HEARTBEAT}")
        else:
            print(f"True {_time(state['clock'])}")  # the new kubelet posts "now"
    elif args[:3] == ["get", "--raw", "/readyz"]:
        print("ok")
    elif args[0] == "get" and args[1].startswith("pod/"):
        # Mirror pods are <component>-<node>; the state keys them <node>/<component>.
        name = args[1].removeprefix("pod/")
        [key] = [k for k in state["manifests"] if name == "{1}-{0}".format(*k.split("/"))]
        state["mirror_reads"][key] = state["mirror_reads"].get(key, 0) + 1
        mirror = state["mirror"].get(key)
        if mirror and mirror["stale"] > 0:
            mirror["stale"] -= 1
            print(f"{mirror['image']} true")
        else:
            print(f"{state['manifests'][key]} true")
    elif args[0] == "get" and args[1].startswith("deployment/"):
        if state["intree"] and output == "name":
            print("deployment.apps/" + args[1].split("/", 1)[1])
    elif args[:2] == ["rollout", "restart"]:
        state["rollout_restarts"] += 1
    elif args[:2] == ["rollout", "status"]:
        print("successfully rolled out")
    else:
        print(f"fake kubectl: unexpected {argv}", file=sys.stderr)
        return 2
    return 0


def _kind(state: dict[str, Any], argv: list[str]) -> int:
    if argv[:2] == ["get", "nodes"]:
        print("\n".join(state["nodes"]))
        return 0
    print(f"fake kind: unexpected {argv}", file=sys.stderr)
    return 2


def main() -> int:
    state: dict[str, Any] = json.loads(_STATE.read_text())
    # Called as: python _fake_kind_cli.py <path of the wrapper: docker|kind|kubectl> ARGS...
    tool, argv = Path(sys.argv[1]).name, sys.argv[2:]
    state["clock"] += 1
    state["calls"].append([tool, *argv])
    # kubectl's flags with a separate value (--kubeconfig K, --namespace N): drop both.
    if tool == "kubectl":
        cleaned: list[str] = []
        skip = False
        for arg in argv:
            if skip:
                skip = False
                continue
            if arg in ("--kubeconfig", "--namespace"):
                skip = True
                continue
            cleaned.append(arg)
        argv = cleaned
    handler = {"docker": _docker, "kubectl": _kubectl, "kind": _kind}[tool]
    code = handler(state, argv)
    _STATE.write_text(json.dumps(state))
    return code


if __name__ == "__main__":
    sys.exit(main())
