#!/usr/bin/python3 -I
"""Run runc for CRI-O, first doing to the bundle what containerd's CRI does on this VM.

CRI-O's ``runtime_path`` points here. For ``create`` and ``run`` this program reads the
bundle's ``config.json`` (``--bundle``/``-b``, else the working directory), changes it as
below, writes it back atomically (a temporary file in the bundle, then a rename), and
execs runc with the very same arguments; every other verb (``start``, ``state``, ``kill``,
``delete``, ``exec``, ``features``, ``--version``, ...) execs runc at once, untouched.

* ``process.oomScoreAdj`` is raised to this process's own ``/proc/self/oom_score_adj``
  when it asks for less: a process may not lower its score without ``CAP_SYS_RESOURCE``,
  which this VM withholds, so runc fails on the kubelet's -997 for Guaranteed pods
  ("failed to update /proc/self/oom_score_adj: Permission denied"). This is exactly
  containerd's ``restrict_oom_score_adj`` rule (the preferred value, but never below the
  runtime's own); CRI-O has no such setting.
* ``linux.resources.hugepageLimits`` is dropped only when the host has no hugetlb cgroup
  for runc to write them into (cgroup v1: no mounted ``cgroup`` hierarchy with the
  ``hugetlb`` controller in ``/proc/self/mountinfo``, where runc looks for it; cgroup v2:
  ``hugetlb`` missing from the root's ``cgroup.controllers``). The kubelet asks for a 0
  limit per page size the node reports, and runc fails with "cannot set hugetlb limit"
  without the hierarchy. containerd's CRI drops them the same way
  (``tolerate_missing_hugetlb_controller``, on by default); CRI-O has no such setting.

Each change is logged, one line per container, to the file ``$LAYERSCHED_RUNC_WRAPPER_LOG``
names (the testbed sets it in CRI-O's ``monitor_env``: conmon runs ``create`` with that
environment), never through a symbolic link (``O_NOFOLLOW``), else to stderr. Never to
stdout or stderr under conmon: those are the container's own streams.

The testbed installs a root-owned copy outside the checkout and runs it as
``/usr/bin/python3 -I`` (this file's first line): CRI-O runs it as root.

Exit status: runc's, or 1 with the reason on stderr when the bundle cannot be read or
written (runc would fail on it too). Standard library only; Linux.

    runc_wrapper.py --root /run/runc create --bundle /run/b/3f2c --pid-file /run/b/pid 3f2c
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The OCI runtime this wraps: bookworm's runc (the containerd nodes run it too).
RUNC = "/usr/sbin/runc"
#: The verbs whose bundle is changed; a checkpoint ``restore`` is never asked for here.
REWRITTEN_VERBS = frozenset({"create", "run"})
#: runc's global options that take a value (``runc --help``), skipped to find the verb;
#: every other leading ``-...`` is a flag.
GLOBAL_VALUE_OPTIONS = frozenset({"--root", "--log", "--log-format", "--criu", "--rootless"})
#: The bundle option of ``create`` and ``run``, in each spelling runc's flag parser takes.
BUNDLE_OPTIONS = frozenset({"--bundle", "-bundle", "-b", "--b"})
CONFIG = "config.json"
LOG_ENV = "LAYERSCHED_RUNC_WRAPPER_LOG"
#: The log's mode when the wrapper creates it.
LOG_MODE = 0o644
OOM_SCORE_ADJ = Path("/proc/self/oom_score_adj")
MOUNTINFO = Path("/proc/self/mountinfo")
CGROUP_ROOT = "/sys/fs/cgroup"
HUGETLB = "hugetlb"
#: A config.json larger than this is refused rather than read (a real one is a few kB).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class WrapperError(Exception):
    """What went wrong with the bundle, said for CRI-O's log."""


def verb_at(argv: Sequence[str]) -> int | None:
    """Index of runc's verb in ``argv`` (its arguments, without the program), or None
    when there is none (``--version``, ``--help``)."""
    index = 0
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-"):
            return index
        if arg == "--":
            return index + 1 if index + 1 < len(argv) else None
        if arg in GLOBAL_VALUE_OPTIONS:
            index += 1
        index += 1
    return None


def bundle_dir(verb_args: Sequence[str]) -> Path:
    """The bundle ``create``/``run`` is given (their arguments after the verb): the last
    ``--bundle`` wins, as in runc; none means the working directory."""
    bundle = "."
    for index, arg in enumerate(verb_args):
        if arg == "--":
            break
        name, sep, value = arg.partition("=")
        if name not in BUNDLE_OPTIONS:
            continue
        if not sep:
            if index + 1 >= len(verb_args):
                raise WrapperError(f"{arg} without a value: give the bundle's directory")
            value = verb_args[index + 1]
        bundle = value
    return Path(bundle or ".")


def restrict_oom_score_adj(preferred: int, current: int) -> int:
    """containerd's rule: the preferred score, but never below the caller's own (lowering
    it needs CAP_SYS_RESOURCE)."""
    return max(preferred, current)


def hugetlb_present(mountinfo: str, root_controllers: str | None) -> bool:
    """Whether runc finds a hugetlb cgroup: on cgroup v2 (``/sys/fs/cgroup`` is a
    ``cgroup2`` mount) the root's ``cgroup.controllers`` (``root_controllers``) lists it;
    on v1 (or hybrid) some ``cgroup`` mount has it among its super options."""
    unified = False
    v1_controllers: set[str] = set()
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 5 or len(fields) < dash + 4:
            continue
        mount_point, fstype, super_options = fields[4], fields[dash + 1], fields[dash + 3]
        if fstype == "cgroup2" and mount_point == CGROUP_ROOT:
            unified = True
        elif fstype == "cgroup":
            v1_controllers.update(super_options.split(","))
    if unified:
        return HUGETLB in (root_controllers or "").split()
    return HUGETLB in v1_controllers


def host_hugetlb_present() -> bool:
    """:func:`hugetlb_present` for this process's mount namespace (runc's)."""
    try:
        controllers: str | None = (Path(CGROUP_ROOT) / "cgroup.controllers").read_text()
    except OSError:
        controllers = None
    return hugetlb_present(MOUNTINFO.read_text(), controllers)


def current_oom_score_adj() -> int:
    return int(OOM_SCORE_ADJ.read_text().strip())


def restrict_spec(spec: dict[str, Any], current_oom: int, hugetlb: bool) -> list[str]:
    """Change ``spec`` (a parsed config.json) in place; one sentence per change made."""
    changes = []
    process = spec.get("process")
    if isinstance(process, dict):
        preferred = process.get("oomScoreAdj")
        if isinstance(preferred, int) and not isinstance(preferred, bool):
            restricted = restrict_oom_score_adj(preferred, current_oom)
            if restricted != preferred:
                process["oomScoreAdj"] = restricted
                changes.append(
                    f"process.oomScoreAdj {preferred} raised to {restricted}, this runtime's "
                    "own (lowering it needs CAP_SYS_RESOURCE; containerd's "
                    "restrict_oom_score_adj)"
                )
    linux = spec.get("linux")
    resources = linux.get("resources") if isinstance(linux, dict) else None
    if not hugetlb and isinstance(resources, dict) and "hugepageLimits" in resources:
        limits = resources.pop("hugepageLimits")
        sizes = (
            ", ".join(
                str(limit.get("pageSize", "?")) for limit in limits if isinstance(limit, dict)
            )
            if isinstance(limits, list)
            else repr(limits)
        )
        changes.append(
            f"linux.resources.hugepageLimits ({sizes or 'none'}) dropped: the host has no "
            "hugetlb cgroup (containerd's tolerate_missing_hugetlb_controller)"
        )
    return changes


def _read_spec(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise WrapperError(f"reading {path}: {err.strerror}") from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise WrapperError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes; refused")
    try:
        spec = json.loads(raw)
    except ValueError as err:
        raise WrapperError(f"{path}: not JSON ({err})") from err
    if not isinstance(spec, dict):
        raise WrapperError(f"{path}: expected a JSON object (an OCI runtime spec)")
    return spec


def _write_atomically(path: Path, spec: dict[str, Any]) -> None:
    """Write ``spec`` to ``path`` through a temporary file in the same directory and a
    rename: runc never reads half a file, and the file keeps its mode."""
    mode = path.stat().st_mode & 0o7777
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(spec, file, separators=(",", ":"))
            file.flush()
            os.fsync(file.fileno())
        Path(temporary).chmod(mode)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def restrict_bundle(bundle: Path, current_oom: int, hugetlb: bool) -> list[str]:
    """Apply :func:`restrict_spec` to the bundle's config.json, written back only when
    something changed; the changes made."""
    path = bundle / CONFIG
    spec = _read_spec(path)
    changes = restrict_spec(spec, current_oom, hugetlb)
    if changes:
        try:
            _write_atomically(path, spec)
        except OSError as err:
            raise WrapperError(f"writing {path}: {err.strerror}") from err
    return changes


def _log(line: str) -> None:
    """Append ``line`` to the log ``$LAYERSCHED_RUNC_WRAPPER_LOG`` names (else stderr). The
    file is opened without following a symbolic link (``O_NOFOLLOW``): the wrapper runs as
    root, and the node's directory may be a user's, who could otherwise point the log at
    any file root may write (issue 44)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = f"{stamp} runc_wrapper: {line}\n"
    target = os.environ.get(LOG_ENV)
    if target:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(target, flags, LOG_MODE)
        except OSError:
            pass
        else:
            with os.fdopen(fd, "a") as file:
                file.write(text)
            return
    sys.stderr.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    at = verb_at(args)
    if at is not None and args[at] in REWRITTEN_VERBS:
        try:
            bundle = bundle_dir(args[at + 1 :])
            changes = restrict_bundle(bundle, current_oom_score_adj(), host_hugetlb_present())
        except (WrapperError, OSError, ValueError) as err:
            print(f"runc_wrapper: {args[at]}: {err}", file=sys.stderr)
            return 1
        # runc takes the container's ID last
        container = args[-1] if len(args) > at + 1 else "?"
        for change in changes:
            _log(f"{args[at]} {container} ({bundle}): {change}")
    try:
        os.execv(RUNC, [RUNC, *args])  # noqa: S606 (argv as given, no shell)
    except OSError as err:
        print(
            f"runc_wrapper: running {RUNC}: {err.strerror} (apt-get install runc)", file=sys.stderr
        )
    return 127


if __name__ == "__main__":
    sys.exit(main())
