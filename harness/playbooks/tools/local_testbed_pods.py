#!/usr/bin/env python3
"""Remove what the testbed's pods leave behind once their kubelets are stopped.

``kill-tasks --socket S [--socket S ...] [--runc-root R ...]``
    Every container task (pod sandboxes and containers) of each node's containerd is
    killed with SIGKILL and deleted. Stopping containerd and its shims alone would leave
    the containers' processes running: they are the shims' children, in namespaces of
    their own. A socket that does not exist (a node that never came up) is skipped. A
    CRI-O node's containers are runc's under its ``runtime_root`` R (conmon, their
    monitor, does not take them along either): each is killed and deleted with runc.

``clean-logs --kubelet-root R [--kubelet-root R ...] [--pod-logs /var/log/pods]``
    kubelet 1.20 writes container logs under ``/var/log/pods/NS_NAME_UID`` (a fixed path,
    not under its root dir) and links them from ``/var/log/containers``. The pods whose
    uids have a directory under a kubelet root ``R/pods/UID`` are the testbed's: their log
    directories and the links to them are removed, nothing else.

``clean-cgroups --id-file F [--cgroup-root /sys/fs/cgroup]``
    Remove the (empty) cgroups runc made for the container ids listed in F, one per line
    (``CONTROLLER/k8s.io/ID``), and their parent once it is empty. An empty
    ``CONTROLLER/k8s.io`` (what runc leaves once containerd removed its containers) goes
    too; one that still holds containers belongs to another runtime and stays.

Prints one JSON object (``changed``, and what was done) for Ansible's ``changed_when``;
on failure prints why and exits 1. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

#: The CRI plugin's containerd namespace.
K8S_NAMESPACE = "k8s.io"
CTR_TIMEOUT_S = 30
DEFAULT_POD_LOGS = Path("/var/log/pods")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")


class PodsError(Exception):
    """A cleanup step failed."""


def _ctr(socket: str, *args: str) -> str:
    return _run(["ctr", "--address", socket, "--namespace", K8S_NAMESPACE, *args])


def _runc(root: str, *args: str) -> str:
    return _run(["runc", "--root", root, *args])


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=CTR_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PodsError(f"{' '.join(argv)}: {err}") from err
    if done.returncode != 0:
        raise PodsError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def kill_tasks(args: argparse.Namespace) -> dict[str, object]:
    killed: list[str] = []
    for socket in args.socket:
        if not Path(socket).is_socket():
            continue
        for task in _ctr(socket, "tasks", "ls", "--quiet").split():
            # A task may exit between ls and kill, or between kill and delete: either
            # way it is gone, which is what teardown needs.
            with contextlib.suppress(PodsError):
                _ctr(socket, "tasks", "kill", "--signal", "SIGKILL", task)
            with contextlib.suppress(PodsError):
                _ctr(socket, "tasks", "delete", "--force", task)
            killed.append(task)
        if args.id_file is not None:
            with args.id_file.open("a") as out:
                for container in _ctr(socket, "containers", "ls", "--quiet").split():
                    out.write(container + "\n")
    for root in args.runc_root:
        if not Path(root).is_dir():
            continue
        containers = _runc(root, "list", "--quiet").split()
        for container in containers:
            with contextlib.suppress(PodsError):
                _runc(root, "kill", container, "KILL")
            with contextlib.suppress(PodsError):
                _runc(root, "delete", "--force", container)
            killed.append(container)
        if args.id_file is not None:
            with args.id_file.open("a") as out:
                out.writelines(f"crio-{container}\n" for container in containers)
    return {"changed": bool(killed), "killed": killed}


def clean_logs(args: argparse.Namespace) -> dict[str, object]:
    uids: set[str] = set()
    for root in args.kubelet_root:
        pods = Path(root) / "pods"
        if pods.is_dir():
            uids.update(entry.name for entry in pods.iterdir())
    removed: list[str] = []
    pod_logs: Path = args.pod_logs
    if uids and pod_logs.is_dir():
        for entry in pod_logs.iterdir():
            # NAMESPACE_NAME_UID: the uid is the last field.
            if entry.name.rsplit("_", 1)[-1] in uids:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(str(entry))
    links = pod_logs.parent / "containers"
    if removed and links.is_dir():
        gone = tuple(removed)
        for link in links.iterdir():
            if link.is_symlink() and str(link.readlink()).startswith(gone):
                link.unlink()
    return {"changed": bool(removed), "removed": removed}


def clean_cgroups(args: argparse.Namespace) -> dict[str, object]:
    try:
        ids = {line.strip() for line in args.id_file.read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        ids = set()
    removed: list[str] = []
    root: Path = args.cgroup_root
    if not root.is_dir():
        return {"changed": False, "removed": []}
    for controller in root.iterdir():
        # The containerd namespace's cgroup, once every container in it is gone. One that
        # still holds containers (another runtime's) is not empty and stays.
        parent = controller / K8S_NAMESPACE
        if parent.is_dir() and not any(p.is_dir() for p in parent.iterdir()):
            try:
                parent.rmdir()
                removed.append(str(parent))
            except OSError:
                pass
    if not ids:
        return {"changed": bool(removed), "removed": removed}
    for controller in root.iterdir():
        if not controller.is_dir():
            continue
        # Deepest first: rmdir removes only empty cgroups, children before parents.
        for path in sorted(controller.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.name in ids and path.is_dir():
                try:
                    path.rmdir()
                    removed.append(str(path))
                except OSError:
                    continue
                # runc's parent (the containerd namespace, e.g. k8s.io) goes once empty.
                try:
                    path.parent.rmdir()
                    removed.append(str(path.parent))
                except OSError:
                    pass
    return {"changed": bool(removed), "removed": removed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_kill = sub.add_parser("kill-tasks")
    p_kill.add_argument("--socket", action="append", default=[])
    p_kill.add_argument("--runc-root", action="append", default=[])
    p_kill.add_argument("--id-file", type=Path, help="append the container ids here")
    p_logs = sub.add_parser("clean-logs")
    p_logs.add_argument("--kubelet-root", action="append", default=[])
    p_logs.add_argument("--pod-logs", type=Path, default=DEFAULT_POD_LOGS)
    p_cg = sub.add_parser("clean-cgroups")
    p_cg.add_argument("--id-file", type=Path, required=True)
    p_cg.add_argument("--cgroup-root", type=Path, default=DEFAULT_CGROUP_ROOT)
    args = parser.parse_args(argv)
    steps = {"kill-tasks": kill_tasks, "clean-logs": clean_logs, "clean-cgroups": clean_cgroups}
    try:
        result = steps[args.command](args)
    except (PodsError, OSError) as err:
        print(f"local_testbed_pods {args.command}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
