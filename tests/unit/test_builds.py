"""The Kubernetes build's identity and paths: one source, read by everything.

``src/layersched/kubernetes-build.yml`` is the only place the build is named; the
CLI, tests and benchmarks derive its paths through :mod:`layersched.builds` (the harness's
builds through :mod:`layersched_harness.testbed.builds`), and the
playbooks through ``harness/playbooks/vars/kubernetes.yml`` (held equal to this module by
``tests/infra/test_playbooks_local.py``). A path spelled by hand is how a stale cache
hid a broken deploy e2e once: this test fails on any.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from layersched.builds import (
    BUILD_STAMP,
    CACHE_DIR_ENV,
    DEFAULT_CACHE_ROOT,
    KUBERNETES_BUILD_FILE,
    PLUGIN_HASH_CHARS,
    KubernetesBuild,
    cache_root,
    go_sources_sha256,
    module_sha256,
    parse_kubernetes_build,
    parse_minor_build,
    pinned_version,
    required_version,
    scheduler_build,
    supported_minors,
)
from layersched.core.errors import InputError
from layersched_harness.testbed.builds import (
    CONTAINERD_DOWNLOAD_FILE,
    containerd_download,
    crio_build,
    join_builds,
    kubernetes_build,
    parse_containerd_download,
    parse_go_tools,
)

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "src" / "layersched" / KUBERNETES_BUILD_FILE
CONTAINERD_SOURCE = REPO / "harness" / "layersched_harness" / "testbed" / CONTAINERD_DOWNLOAD_FILE
#: Files allowed to derive the builds' paths: the module and the playbooks' vars files.
DERIVERS = {
    REPO / "src" / "layersched" / "builds.py",
    REPO / "harness" / "layersched_harness" / "testbed" / "builds.py",
    REPO / "harness" / "playbooks" / "vars" / "kubernetes.yml",
    REPO / "harness" / "playbooks" / "vars" / "containerd.yml",
}
#: Text files worth reading (code, configuration, docs); data and binaries are not.
TEXT_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".j2", ".md", ".toml", ".cfg", ".go", ".txt"}
TEXT_NAMES = {"Makefile", "run", "Dockerfile"}
#: Generated or built trees (``build/`` and ``dist/``: setuptools' output, git-ignored)
SKIPPED_DIRS = {"__pycache__", "node_modules", "_gen", "build", "dist"}


def _files() -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [
            d
            for d in dirnames
            if (not d.startswith(".") or d == ".ci")
            and d not in SKIPPED_DIRS
            and not d.endswith(".egg-info")
        ]
        for name in filenames:
            path = Path(dirpath) / name
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                yield path


def test_the_build_id_is_the_pinned_release_and_the_modules_hash() -> None:
    build = scheduler_build()
    module = build.directory()
    go_mod = (module / "go.mod").read_text()
    # the release is go.mod's require, nowhere else
    assert required_version(go_mod) == build.version
    assert re.fullmatch(r"v1\.\d+\.\d+", build.version)
    assert build.build_id == f"{build.version}+src.{module_sha256(module)[:PLUGIN_HASH_CHARS]}"
    assert build.minor == tuple(int(p) for p in build.version[1:].split(".")[:2])
    # the product's module builds the scheduler (with the plugin) and nothing else: the
    # testbed's control plane is the harness's module
    assert build.binaries == ("kube-scheduler",)
    assert sorted(p.name for p in (module / "cmd").iterdir()) == ["kube-scheduler"]
    assert (module / "go.sum").is_file()


def test_the_testbed_build_is_one_build_over_both_modules() -> None:
    build, scheduler = kubernetes_build(), scheduler_build()
    control_plane = build.directory()
    assert build.module == "harness/control-plane"
    # the control plane's module pins the release the product's module pins
    assert required_version((control_plane / "go.mod").read_text()) == scheduler.version
    assert build.version == scheduler.version
    # one bin dir: the control plane's mains, and the scheduler taken as built
    assert build.includes == scheduler
    assert build.own_binaries == (
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kubectl",
        "kubelet",
        "pause",
    )
    assert build.binaries == tuple(sorted((*build.own_binaries, "kube-scheduler")))
    for name in build.own_binaries:
        assert (control_plane / "cmd" / name / "main.go").is_file()
        assert build.main_package(name) == f"layersched.io/control-plane/cmd/{name}"
    # the ID hashes both modules, the scheduler's first: a changed plugin is a new testbed
    both = f"{module_sha256(scheduler.directory())}\n{module_sha256(control_plane)}\n"
    digest = hashlib.sha256(both.encode()).hexdigest()
    assert build.build_id == f"{build.version}+src.{digest[:PLUGIN_HASH_CHARS]}"
    assert build.bin_dir() != scheduler.bin_dir()


def test_the_testbed_build_refuses_two_releases() -> None:
    scheduler = scheduler_build()
    other = KubernetesBuild("harness/control-plane", "v1.37.9", ("kubelet",), "0" * 64)
    with pytest.raises(
        InputError, match=r"pins Kubernetes v1\.37\.9 but .*pin_kubernetes\.py v1\.37\.2"
    ):
        join_builds(scheduler, other)


def _module(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_sources_hash_covers_what_the_binary_is_built_from(tmp_path: Path) -> None:
    base = {"go.mod": "module x\n", "cmd/a/main.go": "package main\n", "pkg/b/b.go": "package b\n"}
    before = go_sources_sha256(_module(tmp_path / "m1", base))
    # the sha256 of "cmd/a/main.go <sha256 of its bytes>\npkg/b/b.go <...>\n"
    lines = "".join(
        f"{name} {hashlib.sha256(base[name].encode()).hexdigest()}\n"
        for name in ("cmd/a/main.go", "pkg/b/b.go")
    )
    assert before == hashlib.sha256(lines.encode()).hexdigest()
    # tests, test data and the README do not go into the binary: same hash
    extra = {
        **base,
        "pkg/b/b_test.go": "package b\n",
        "pkg/b/testdata/x.go": "package x\n",
        "README.md": "# x\n",
    }
    assert go_sources_sha256(_module(tmp_path / "m2", extra)) == before
    # one byte of a source changes it, as does a new source file
    changed = {**base, "pkg/b/b.go": "package b \n"}
    assert go_sources_sha256(_module(tmp_path / "m3", changed)) != before
    added = {**base, "pkg/c/c.go": "package c\n"}
    assert go_sources_sha256(_module(tmp_path / "m4", added)) != before


def test_the_module_hash_covers_the_pin_too(tmp_path: Path) -> None:
    base = {"go.mod": "module x\n", "go.sum": "", "cmd/a/main.go": "package main\n"}
    before = module_sha256(_module(tmp_path / "m1", base))
    # "go.mod <sha>\ngo.sum <sha>\nsources <go_sources_sha256>\n", hashed
    lines = (
        "".join(
            f"{name} {hashlib.sha256(base[name].encode()).hexdigest()}\n"
            for name in ("go.mod", "go.sum")
        )
        + f"sources {go_sources_sha256(tmp_path / 'm1')}\n"
    )
    assert before == hashlib.sha256(lines.encode()).hexdigest()
    # a new pin (go.mod) or a new checksum (go.sum) is another build
    repinned = {**base, "go.mod": "module x\n\nrequire k8s.io/kubernetes v1.37.3\n"}
    assert module_sha256(_module(tmp_path / "m2", repinned)) != before
    resummed = {**base, "go.sum": "k8s.io/kubernetes v1.37.2 h1:x=\n"}
    assert module_sha256(_module(tmp_path / "m3", resummed)) != before


@pytest.mark.parametrize(
    ("go_mod", "version"),
    [
        ("module x\n\nrequire k8s.io/kubernetes v1.37.2\n", "v1.37.2"),
        (
            "module x\n\nrequire (\n\tk8s.io/api v0.37.2\n"
            "\tk8s.io/kubernetes v1.36.3 // indirect\n)\n",
            "v1.36.3",
        ),
        # a replace names it too, but only the require pins it
        ("module x\n\nreplace k8s.io/api => k8s.io/api v0.37.2\n", None),
        ("module x\n", None),
    ],
    ids=["single-require", "require-block", "replace-only", "none"],
)
def test_the_release_is_read_from_the_require(go_mod: str, version: str | None) -> None:
    assert required_version(go_mod) == version


@pytest.mark.parametrize(
    ("go_mod", "version"),
    [
        ("module x\n\nrequire k8s.io/kubernetes v1.37.2\n", "v1.37.2"),
        # a minor's module: MVS selects the newer release, the replace compiles the older
        (
            "module x\n\nrequire k8s.io/kubernetes v1.37.2 // indirect\n\n"
            "replace k8s.io/api => k8s.io/api v0.35.4\n\n"
            "replace k8s.io/kubernetes => k8s.io/kubernetes v1.35.4\n",
            "v1.35.4",
        ),
        # a replace by a directory or another module is no release
        ("module x\n\nreplace k8s.io/kubernetes => ../k\n", None),
    ],
    ids=["require", "replaced-as-released", "replaced-by-a-directory"],
)
def test_the_compiled_release_is_the_replaces(go_mod: str, version: str | None) -> None:
    assert pinned_version(go_mod) == version


RECORD = {"module": "m", "binaries": ["kubelet"], "minor_binaries": ["kube-apiserver"]}
MAIN_GO_MOD = "module example.test/m\n\nrequire k8s.io/kubernetes v1.37.2\n"
MINOR_GO_MOD = (
    "module example.test/m/minors/1.35\n\nrequire example.test/m v0.0.0\n\n"
    "replace example.test/m => ../..\n\nreplace k8s.io/kubernetes => k8s.io/kubernetes v1.35.4\n"
)


def _minors_tree(root: Path) -> Path:
    return _module(
        root,
        {
            "m/go.mod": MAIN_GO_MOD,
            "m/go.sum": "",
            "m/cmd/kubelet/main.go": "package main\n",
            "m/cmd/kube-apiserver/main.go": "package main\n",
            "m/minors/1.35/go.mod": MINOR_GO_MOD,
            "m/minors/1.35/go.sum": "",
            "m/minors/1.36/go.mod": MINOR_GO_MOD.replace("1.35", "1.36"),
            "m/minors/1.36/go.sum": "",
            "m/minors/notes/go.mod": "module y\n",
        },
    )


def test_a_minor_is_built_from_its_module_with_both_hashes(tmp_path: Path) -> None:
    repo = _minors_tree(tmp_path)
    assert supported_minors(RECORD, repo) == ("1.35", "1.36")  # not notes/
    main = parse_kubernetes_build(RECORD, repo)
    build = parse_minor_build(RECORD, "1.35", repo)
    assert (build.module, build.version, build.binaries) == (
        "m/minors/1.35",
        "v1.35.4",
        ("kube-apiserver",),
    )
    # the mains are the module's, built by import path from the minor's module
    assert build.main_package("kube-apiserver") == "example.test/m/cmd/kube-apiserver"
    assert main.main_package("kubelet") == "example.test/m/cmd/kubelet"
    both = f"{module_sha256(repo / 'm')}\n{module_sha256(repo / 'm/minors/1.35')}\n"
    assert build.build_id == f"v1.35.4+src.{hashlib.sha256(both.encode()).hexdigest()[:12]}"
    # a changed plugin source is a new build of every minor too
    (repo / "m/cmd/kubelet/main.go").write_text("package main // changed\n")
    assert parse_minor_build(RECORD, "1.35", repo).build_id != build.build_id


def test_the_main_build_id_ignores_the_minors_modules(tmp_path: Path) -> None:
    repo = _minors_tree(tmp_path)
    before = parse_kubernetes_build(RECORD, repo).build_id
    (repo / "m/minors/1.35/go.sum").write_text("k8s.io/kubernetes v1.35.4 h1:x=\n")
    assert parse_kubernetes_build(RECORD, repo).build_id == before
    assert parse_minor_build(RECORD, "1.35", repo).build_id != before


@pytest.mark.parametrize(
    ("minor", "go_mod", "message"),
    [
        ("1.34", None, r"no module at .*minors/1.34.*the minors with one: 1.35, 1.36"),
        ("1.35", "module x\n", r"pins k8s.io/kubernetes None, not a 1.35 release: run"),
        (
            "1.35",
            "module x\n\nreplace k8s.io/kubernetes => k8s.io/kubernetes v1.36.3\n",
            r"pins k8s.io/kubernetes v1.36.3, not a 1.35 release: .*--as-released",
        ),
    ],
    ids=["no-module", "no-pin", "wrong-minor"],
)
def test_a_minor_without_its_module_says_how(
    tmp_path: Path, minor: str, go_mod: str | None, message: str
) -> None:
    repo = _minors_tree(tmp_path)
    if go_mod is not None:
        (repo / f"m/minors/{minor}/go.mod").write_text(go_mod)
    with pytest.raises(InputError, match=message):
        parse_minor_build(RECORD, minor, repo)


def test_the_minors_of_this_checkout_are_the_older_supported_ones() -> None:
    main = scheduler_build()
    for minor in ("1.35", "1.36"):
        scheduler = scheduler_build(minor)
        assert scheduler.version.startswith(f"v{minor}.")
        assert scheduler.mains == main.mains == "layersched.io/kube-scheduler"
        assert scheduler.binaries == ("kube-scheduler",)
        assert scheduler.bin_dir() != main.bin_dir()
        # the live minor's control plane: that release's etcd and kube-apiserver from the
        # harness's module, beside the minor's kube-scheduler
        build = kubernetes_build(minor)
        assert (build.version, build.includes) == (scheduler.version, scheduler)
        assert build.module == f"harness/control-plane/minors/{minor}"
        assert build.mains == "layersched.io/control-plane"
        assert build.binaries == ("etcd", "kube-apiserver", "kube-scheduler")


def test_paths_follow_the_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build = kubernetes_build()
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert cache_root() == DEFAULT_CACHE_ROOT
    assert build.bin_dir() == DEFAULT_CACHE_ROOT / "kubernetes" / build.build_id / "bin"
    # Go's own caches, shared by every build, under the same root
    assert build.go_cache_dir() == DEFAULT_CACHE_ROOT / "go"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    assert build.binary("kubectl") == tmp_path / "kubernetes" / build.build_id / "bin" / "kubectl"
    # an empty variable is no setting (as the playbooks read it)
    monkeypatch.setenv(CACHE_DIR_ENV, "")
    assert cache_root() == DEFAULT_CACHE_ROOT


def test_a_missing_binary_says_how_to_build_it(tmp_path: Path) -> None:
    build = kubernetes_build()
    with pytest.raises(InputError, match=r"make kubernetes") as caught:
        build.require("kube-scheduler", root=tmp_path)
    assert str(build.binary("kube-scheduler", tmp_path)) in str(caught.value)
    (bin_dir := build.bin_dir(tmp_path)).mkdir(parents=True)
    (bin_dir / "kube-scheduler").write_bytes(b"")
    # a binary without the stamp of this build is an older build's: not taken
    with pytest.raises(InputError, match=re.escape(str(bin_dir / BUILD_STAMP))):
        build.require("kube-scheduler", root=tmp_path)
    (bin_dir / BUILD_STAMP).write_text("v1.0.0+src.000000000000\n")
    assert build.missing("kube-scheduler", root=tmp_path) == [bin_dir / BUILD_STAMP]
    (bin_dir / BUILD_STAMP).write_text(f"{build.build_id}\n")
    assert build.require("kube-scheduler", root=tmp_path) == bin_dir
    assert build.missing("kube-scheduler", "kubectl", root=tmp_path) == [bin_dir / "kubectl"]


_GOOD = {"binaries": ["kube-scheduler"], "module": "src/kube-scheduler"}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([], "expected a mapping"),
        ({"binaries": "kubectl"}, "binaries must be a list"),
        ({**_GOOD, "module": ""}, "module must be a non-empty string"),
        ({**_GOOD, "module": "nowhere"}, "no go.mod at .*nowhere"),
        ({**_GOOD, "binaries": ["kube-proxy"]}, "binary 'kube-proxy' has no main at"),
    ],
    ids=["not-a-mapping", "binaries-not-a-list", "empty-module", "module-missing", "no-main"],
)
def test_a_malformed_record_names_the_field(record: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_kubernetes_build(record)


def test_a_module_without_a_pin_says_how_to_pin(tmp_path: Path) -> None:
    _module(tmp_path / "m", {"go.mod": "module x\n", "go.sum": "", "cmd/kubelet/main.go": ""})
    with pytest.raises(InputError, match=r"requires no k8s.io/kubernetes: pin a release"):
        parse_kubernetes_build({"binaries": ["kubelet"], "module": "m"}, repo=tmp_path)


def _hand_spelled(build: KubernetesBuild) -> list[re.Pattern[str]]:
    return [
        re.compile(re.escape(build.build_id)),
        # the cache's layout: <root>/kubernetes/<build ID>/bin
        re.compile(r"/var/cache/layersched/kubernetes"),
        re.compile(r"""["']kubernetes["']\s*/\s*\w*build"""),
        re.compile(r"/kubernetes/\{\{"),
        # and the containerd download's: <root>/containerd/<version>/root/usr/bin
        re.compile(r"/var/cache/layersched/containerd"),
        re.compile(r"/containerd/\{\{"),
    ]


def test_no_file_spells_the_build_by_hand() -> None:
    patterns = _hand_spelled(kubernetes_build())
    found = []
    for path in _files():
        if path in (SOURCE, CONTAINERD_SOURCE, Path(__file__).resolve()) or path in DERIVERS:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in patterns):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, (
        "these lines spell the Kubernetes build's ID or path by hand; take them from "
        "layersched.builds (Python) or kubernetes_bin_dir (playbooks):\n" + "\n".join(found)
    )


def test_the_guard_sees_a_hand_spelled_path(tmp_path: Path) -> None:
    # the scan above could fail to fail: its patterns match what they must
    build = kubernetes_build()
    patterns = _hand_spelled(build)
    for line in (
        f'Path("/var/cache/layersched/kubernetes/{build.build_id}/bin/kube-scheduler")',
        'cache_root / "kubernetes" / build_id / "bin"',
        "{{ root }}/kubernetes/{{ id }}/bin",
        "/var/cache/layersched/containerd/2.1.9/root/usr/bin/containerd",
        "{{ root }}/containerd/{{ version }}/root",
    ):
        assert any(p.search(line) for p in patterns), line


# ------------------------------------------------------------------ containerd 2.x
def test_the_containerd_download_is_a_2_x_from_a_debian_suite() -> None:
    download = containerd_download()
    assert download.version.split(".")[0] == "2"
    assert download.package == "containerd" and "containerd" in download.binaries
    assert download.suite and download.archive_codename


def test_containerd_paths_follow_the_cache_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    download = containerd_download()
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    # <root>/containerd/<version>/root/usr/bin/<name>: keyed by version, as the role writes
    assert download.binary("ctr") == (
        tmp_path / "containerd" / download.version / "root" / "usr" / "bin" / "ctr"
    )
    assert download.debian_version() is None


def test_a_missing_containerd_says_how_to_download_it(tmp_path: Path) -> None:
    download = containerd_download()
    with pytest.raises(InputError, match=r"make containerd") as caught:
        download.require(root=tmp_path)
    assert str(download.binary("containerd", tmp_path)) in str(caught.value)
    for name in download.binaries:
        (path := download.binary(name, tmp_path)).parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    # the binaries alone are not enough: the stamp says the unpack finished
    assert download.missing(root=tmp_path) == [download.cache_dir(tmp_path) / ".stamp"]
    (download.cache_dir(tmp_path) / ".stamp").write_text("2.1.9+ds1-5\n")
    assert download.require(root=tmp_path) == download.binary("containerd", tmp_path)
    assert download.debian_version(tmp_path) == "2.1.9+ds1-5"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ("containerd", "expected a mapping"),
        ({"binaries": ["ctr"]}, "binaries must name containerd"),
        ({"binaries": ["containerd"], "package": "containerd"}, "version must be a non-empty"),
    ],
    ids=["not-a-mapping", "no-containerd-binary", "no-version"],
)
def test_a_malformed_containerd_record_names_the_field(record: object, message: str) -> None:
    with pytest.raises(InputError, match=f"{CONTAINERD_DOWNLOAD_FILE}: {message}"):
        parse_containerd_download(record)


def test_crio_is_built_without_c() -> None:
    crio = crio_build()
    assert crio.package == "github.com/cri-o/cri-o/cmd/crio"
    # CRI-O's minor follows Kubernetes': 1.37 is not served by the module proxy (see
    # crio-build.yml), so the testbed runs the newest 1.36 it serves
    assert re.fullmatch(r"v1\.3[67]\.\d+", crio.version)
    # what CRI-O's Makefile would take from the host's C libraries, fixed to pure Go
    assert {
        "containers_image_openpgp",
        "exclude_graphdriver_btrfs",
        "exclude_graphdriver_devicemapper",
    } <= set(crio.tags)
    assert not {"seccomp", "selinux", "apparmor", "libsubid"} & set(crio.tags)
    # and the build never turns cgo on: no C fetched through the proxy is compiled
    assert kubernetes_build().go_env()["CGO_ENABLED"] == "0"
    # built in our module harness/crio, whose go.mod requires that very release
    assert crio.module == "harness/crio"
    go_mod = (REPO / crio.module / "go.mod").read_text()
    assert required_version(go_mod, "github.com/cri-o/cri-o") == crio.version
    assert "\ntool github.com/cri-o/cri-o/cmd/crio\n" in go_mod
    assert crio.bin_dir(Path("/c")) == Path(f"/c/tools/crio-{crio.version}/bin")


def test_a_missing_crio_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"crio v\S+ is not built .* run `make crio`"):
        crio_build().require(tmp_path)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        # tags are a list of words, as go's -tags takes them
        ({"crio": {"package": "p", "version": "v1", "tags": "a,b"}}, "crio: tags must be a list"),
        (
            {"crio": {"package": "p", "version": "v1", "ldflags": [1]}},
            "crio: ldflags must be a list",
        ),
        ({"crio": "v1"}, "crio: expected package and version"),
    ],
    ids=["tags-string", "ldflags-int", "not-a-mapping"],
)
def test_a_malformed_tool_names_the_file_and_field(record: object, message: str) -> None:
    with pytest.raises(InputError, match=f"crio-build.yml: {message}"):
        parse_go_tools(record, "crio-build.yml", "make crio")
