"""The CRI-O nodes' wrapper in front of runc (``harness/playbooks/tools/runc_wrapper.py``), on
bundles of its own: which verb and bundle it finds in runc's arguments, containerd's
oom_score_adj rule, the hugetlb check on mount tables, the rewrite of config.json, and
what it hands to runc. The live proof (pods Running on a CRI-O node) is
``tests/crio/test_crio_testbed.py``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.fixtures.crio import HELPERS, RUNC_WRAPPER, render
from tests.fixtures.playbook_tools import TOOLS, load_tool

PLAYBOOKS = TOOLS.parent


@pytest.fixture(scope="module")
def wrapper() -> ModuleType:
    return load_tool("runc_wrapper")


# What conmon and CRI-O run (conmon's runtime_args: --root from CRI-O's runtime_root).
CONMON_CREATE = [
    "--root=/n3/run/runc",
    "create",
    "--bundle",
    "/n3/b/3f2c",
    "--pid-file",
    "/n3/b/3f2c/pidfile",
    "3f2c",
]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (CONMON_CREATE, 1),
        # a global option's value is not the verb
        (["--root", "/r", "--log", "/l", "--log-format", "json", "run", "x"], 6),
        (["--systemd-cgroup", "--debug", "state", "x"], 2),
        (["--version"], None),
        ([], None),
    ],
    ids=["conmon-create", "valued-globals", "flags", "version", "nothing"],
)
def test_verb_at(wrapper: ModuleType, argv: list[str], expected: int | None) -> None:
    assert wrapper.verb_at(argv) == expected


@pytest.mark.parametrize(
    ("verb_args", "expected"),
    [
        (CONMON_CREATE[2:], "/n3/b/3f2c"),
        (["-b", "/b", "id"], "/b"),
        (["--bundle=/b", "id"], "/b"),
        (["-b=/b", "id"], "/b"),
        # Go's flag parser takes the single-dash long form too
        (["-bundle", "/b", "id"], "/b"),
        # the last one wins, as in runc
        (["-b", "/a", "--bundle", "/b", "id"], "/b"),
        # none: runc's default, the working directory
        (["--pid-file", "/p", "id"], "."),
    ],
    ids=["conmon", "short", "long-equals", "short-equals", "single-dash", "last-wins", "cwd"],
)
def test_bundle_dir(wrapper: ModuleType, verb_args: list[str], expected: str) -> None:
    assert wrapper.bundle_dir(verb_args) == Path(expected)


def test_a_bundle_option_without_its_value_is_refused(wrapper: ModuleType) -> None:
    with pytest.raises(wrapper.WrapperError, match="--bundle without a value"):
        wrapper.bundle_dir(["--bundle"])


@pytest.mark.parametrize(
    ("preferred", "current", "expected"),
    [
        # the kubelet's Guaranteed score, a runtime at 0: never below its own
        (-997, 0, 0),
        # BestEffort asks for more than the runtime's own: kept
        (1000, 0, 1000),
        # a Burstable value above the runtime's own: kept
        (500, 0, 500),
        # a runtime allowed lower (-999): -997 is above it, kept
        (-997, -999, -997),
        (0, 0, 0),
    ],
    ids=["guaranteed", "besteffort", "burstable", "lower-runtime", "equal"],
)
def test_restrict_oom_score_adj(
    wrapper: ModuleType, preferred: int, current: int, expected: int
) -> None:
    assert wrapper.restrict_oom_score_adj(preferred, current) == expected


# This VM: cgroup v1 controllers under a tmpfs, no hugetlb hierarchy, an empty cgroup2
# at /sys/fs/cgroup/unified (hybrid).
HYBRID_NO_HUGETLB = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_HUGETLB = HYBRID_NO_HUGETLB + (
    "42 31 0:39 / /sys/fs/cgroup/hugetlb rw,relatime shared:9 - cgroup cgroup rw,hugetlb\n"
)
# runc finds a controller wherever its hierarchy is mounted, co-mounted or not
V1_COMOUNTED = "50 31 0:40 / /cg/x rw - cgroup cgroup rw,cpu,hugetlb\n"
V2 = "28 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("mountinfo", "controllers", "expected"),
    [
        (HYBRID_NO_HUGETLB, None, False),
        (V1_HUGETLB, None, True),
        (V1_COMOUNTED, None, True),
        (V2, "cpuset cpu io memory hugetlb pids rdma\n", True),
        (V2, "cpuset cpu io memory pids\n", False),
        # the unified root unreadable: nothing to write limits into
        (V2, None, False),
        # a hybrid host's cgroup2 holds no controller: v1 decides
        (HYBRID_NO_HUGETLB, "hugetlb\n", False),
        ("", None, False),
    ],
    ids=[
        "this-vm",
        "v1",
        "v1-comounted",
        "v2",
        "v2-without",
        "v2-unreadable",
        "hybrid-ignores-unified",
        "no-cgroups",
    ],
)
def test_hugetlb_present(
    wrapper: ModuleType, mountinfo: str, controllers: str | None, expected: bool
) -> None:
    assert wrapper.hugetlb_present(mountinfo, controllers) is expected


def _spec(oom_score_adj: int, hugepages: bool = True) -> dict[str, Any]:
    """A config.json shaped as CRI-O writes one (the fields that matter, and others that
    must come through untouched)."""
    resources: dict[str, Any] = {
        "memory": {"limit": 33554432},
        "cpu": {"shares": 102, "quota": 10000, "period": 100000},
    }
    if hugepages:
        resources["hugepageLimits"] = [
            {"pageSize": "2MB", "limit": 0},
            {"pageSize": "1GB", "limit": 0},
        ]
    return {
        "ociVersion": "1.2.1",
        "process": {"args": ["/pause"], "oomScoreAdj": oom_score_adj, "cwd": "/"},
        "root": {"path": "/n3/storage/overlay/abc/merged"},
        "annotations": {"io.kubernetes.cri-o.ContainerName": "p1", "big": 2**62},
        "linux": {"resources": resources, "cgroupsPath": "/kubepods/pod1/3f2c"},
    }


def _bundle(tmp_path: Path, spec: dict[str, Any]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(spec, indent=2))
    (tmp_path / "config.json").chmod(0o600)
    return tmp_path


def test_a_guaranteed_bundle_is_restricted_and_written_back(
    wrapper: ModuleType, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path, _spec(-997))
    changes = wrapper.restrict_bundle(bundle, current_oom=0, hugetlb=False)
    assert [c.split(" ", 2)[:2] for c in changes] == [
        ["process.oomScoreAdj", "-997"],
        ["linux.resources.hugepageLimits", "(2MB,"],
    ]
    assert "dropped: the host has no hugetlb cgroup" in changes[1]
    written = json.loads((bundle / "config.json").read_text())
    expected = _spec(0, hugepages=False)
    # -997 -> 0, the hugepage limits gone, every other field as it was
    assert written == expected
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o600
    # the temporary file was renamed, nothing left beside config.json
    assert [p.name for p in bundle.iterdir()] == ["config.json"]


def test_hugepage_limits_stay_where_the_host_has_hugetlb(
    wrapper: ModuleType, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path, _spec(-997))
    changes = wrapper.restrict_bundle(bundle, current_oom=0, hugetlb=True)
    assert len(changes) == 1
    written = json.loads((bundle / "config.json").read_text())
    assert (
        written["linux"]["resources"]["hugepageLimits"]
        == _spec(0)["linux"]["resources"]["hugepageLimits"]
    )
    assert written["process"]["oomScoreAdj"] == 0


def test_a_bundle_needing_nothing_is_not_rewritten(wrapper: ModuleType, tmp_path: Path) -> None:
    # BestEffort (1000) on a host with hugetlb: nothing to change
    bundle = _bundle(tmp_path, _spec(1000))
    before = (bundle / "config.json").stat()
    text = (bundle / "config.json").read_text()
    assert wrapper.restrict_bundle(bundle, current_oom=0, hugetlb=True) == []
    after = (bundle / "config.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (bundle / "config.json").read_text() == text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
    ids=["not-json", "not-an-object"],
)
def test_a_bad_bundle_is_refused_with_its_path(
    wrapper: ModuleType, tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(wrapper.WrapperError, match=message) as raised:
        wrapper.restrict_bundle(tmp_path, current_oom=0, hugetlb=False)
    assert str(tmp_path / "config.json") in str(raised.value)


class _Execed(Exception):
    pass


@pytest.fixture
def execs(wrapper: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """What the wrapper would exec (recorded instead), on a runtime at oom_score_adj 0
    and a host without hugetlb, as this VM."""
    calls: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:
        calls.append([path, *argv])
        raise _Execed

    monkeypatch.setattr(wrapper.os, "execv", execv)
    monkeypatch.setattr(wrapper, "current_oom_score_adj", lambda: 0)
    monkeypatch.setattr(wrapper, "host_hugetlb_present", lambda: False)
    return calls


def test_create_rewrites_logs_and_runs_runc_with_the_same_arguments(
    wrapper: ModuleType,
    execs: list[list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "b").mkdir()
    bundle = _bundle(tmp_path / "b", _spec(-997))
    log = tmp_path / "wrapper.log"
    monkeypatch.setenv(wrapper.LOG_ENV, str(log))
    argv = ["--root=/r", "create", "--bundle", str(bundle), "--pid-file", "/p", "3f2c"]
    with pytest.raises(_Execed):
        wrapper.main(argv)
    assert execs == [[wrapper.RUNC, wrapper.RUNC, *argv]]
    assert json.loads((bundle / "config.json").read_text()) == _spec(0, hugepages=False)
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    assert f"create 3f2c ({bundle}): process.oomScoreAdj -997 raised to 0" in lines[0]
    assert "hugepageLimits (2MB, 1GB) dropped: the host has no hugetlb cgroup" in lines[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--root=/r", "start", "3f2c"],
        ["--root=/r", "exec", "--process", "/p.json", "--detach", "3f2c"],
        ["--version"],
        # the bundle is only read for create and run: this one does not exist
        ["--root=/r", "delete", "--force", "3f2c"],
    ],
    ids=["start", "exec", "version", "delete"],
)
def test_every_other_verb_runs_runc_untouched(
    wrapper: ModuleType, execs: list[list[str]], argv: list[str]
) -> None:
    with pytest.raises(_Execed):
        wrapper.main(argv)
    assert execs == [[wrapper.RUNC, wrapper.RUNC, *argv]]


def test_create_without_a_bundle_fails_before_runc(
    wrapper: ModuleType,
    execs: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "gone"
    assert wrapper.main(["create", "--bundle", str(missing), "3f2c"]) == 1
    assert execs == []
    err = capsys.readouterr().err
    assert f"runc_wrapper: create: reading {missing}/config.json" in err


def test_the_testbeds_crio_runs_the_wrapper_in_front_of_debians_runc(
    wrapper: ModuleType,
) -> None:
    # crio.conf.j2 as the role and the live tests' fixture render it
    config = tomllib.loads(
        render(
            "crio.conf.j2",
            item={
                "name": "n3",
                "netns": "lsck-n3",
                "dir": "/tb/n3",
                "cri_socket": "/tb/n3/crio.sock",
                "root_dir": "/tb/n3/storage",
                "state_dir": "/tb/n3/run",
            },
            crio_version="v1.36.3",
            crio_storage_driver="overlay",
            crio_pinns_path="/tools/pinns.py",
            crio_runtime_path=str(RUNC_WRAPPER),
            crio_conmon_path="/usr/bin/conmon",
            testbed_pause_image="layersched.local/pause:1",
            testbed_cni_bin_dir="/usr/lib/cni",
        )
    )
    runc = config["crio"]["runtime"]["runtimes"]["runc"]
    assert runc["runtime_path"] == str(RUNC_WRAPPER)
    assert f"{wrapper.LOG_ENV}=/tb/n3/runc-wrapper.log" in runc["monitor_env"]
    # the wrapper execs the runc the fixtures and the testbed install from Debian
    assert HELPERS[wrapper.RUNC] == "runc"
    assert RUNC_WRAPPER.stat().st_mode & 0o111, "CRI-O runs it: it must be executable"


def test_the_log_is_never_opened_through_a_symbolic_link(
    wrapper: ModuleType,
    execs: list[list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # issue 44: the wrapper runs as root and its log is in the node's directory, which may
    # be a user's: a symbolic link there made root append to any file (here a stand-in
    # for /etc/shadow). Now the link is refused (O_NOFOLLOW) and the line goes to stderr
    (tmp_path / "b").mkdir()
    bundle = _bundle(tmp_path / "b", _spec(-997))
    victim = tmp_path / "shadow"
    victim.write_text("root:*:\n")
    link = tmp_path / "runc-wrapper.log"
    link.symlink_to(victim)
    monkeypatch.setenv(wrapper.LOG_ENV, str(link))
    with pytest.raises(_Execed):
        wrapper.main(["create", "--bundle", str(bundle), "3f2c"])
    assert victim.read_text() == "root:*:\n"
    assert "process.oomScoreAdj -997 raised to 0" in capsys.readouterr().err


def test_the_testbed_runs_root_owned_isolated_copies_of_its_root_helpers() -> None:
    # issue 44: CRI-O ran pinns and the wrapper as root from the checkout (a user's, maybe)
    # through `#!/usr/bin/env python3` (PYTHON* variables, the script's directory and the
    # user's site on the import path). Now: /usr/bin/python3 -I, and root-owned copies in
    # a root-owned directory outside the checkout, which teardown removes
    for tool in ("pinns.py", "runc_wrapper.py"):
        assert (TOOLS / tool).read_text().splitlines()[0] == "#!/usr/bin/python3 -I"
    crio_vars = yaml.safe_load((PLAYBOOKS / "vars" / "crio.yml").read_text())
    assert crio_vars["crio_runtime_path"] == "{{ crio_helpers_dir }}/runc_wrapper.py"
    assert crio_vars["crio_pinns_path"] == "{{ crio_helpers_dir }}/pinns.py"
    assert crio_vars["crio_helpers_dir"] == "{{ crio_helpers_root }}/{{ testbed_prefix }}"
    root = Path(crio_vars["crio_helpers_root"])
    assert root.is_absolute() and not root.is_relative_to(PLAYBOOKS.parent)
    tasks = yaml.safe_load(
        (PLAYBOOKS / "roles" / "local_testbed_node" / "tasks" / "crio.yml").read_text()
    )
    [install] = [t for t in tasks if "ansible.builtin.copy" in t and "helpers" in t["name"]]
    copy = install["ansible.builtin.copy"]
    assert (copy["owner"], copy["group"], copy["mode"]) == ("root", "root", "0755")
    assert copy["dest"].startswith("{{ crio_helpers_dir }}/")
    assert sorted(install["loop"]) == ["pinns.py", "runc_wrapper.py"]
    teardown = yaml.safe_load(
        (PLAYBOOKS / "roles" / "local_testbed_teardown" / "tasks" / "main.yml").read_text()
    )
    assert any(
        t.get("ansible.builtin.file", {}).get("path", "").startswith("{{ crio_helpers_root }}/")
        and t["ansible.builtin.file"]["state"] == "absent"
        for t in teardown
    )
