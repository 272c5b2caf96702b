"""The Kubernetes build's identity and paths: one source, read by everything.

``plugin/layersched/kubernetes-build.yml`` is the only place the build is named; the
CLI, tests and benchmarks derive its paths through :mod:`layersched.builds`, and the
playbooks through ``playbooks/vars/kubernetes.yml`` (held equal to this module by
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
    CACHE_DIR_ENV,
    CONTAINERD_DOWNLOAD_FILE,
    DEFAULT_CACHE_ROOT,
    KUBERNETES_BUILD_FILE,
    PLUGIN_HASH_CHARS,
    KubernetesBuild,
    cache_root,
    containerd_download,
    kubernetes_build,
    parse_containerd_download,
    parse_kubernetes_build,
    plugin_sources_sha256,
)
from layersched.core.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "plugin" / "layersched" / KUBERNETES_BUILD_FILE
CONTAINERD_SOURCE = REPO / "plugin" / "layersched" / CONTAINERD_DOWNLOAD_FILE
#: Files allowed to derive the builds' paths: the module and the playbooks' vars files.
DERIVERS = {
    REPO / "plugin" / "layersched" / "builds.py",
    REPO / "playbooks" / "vars" / "kubernetes.yml",
    REPO / "playbooks" / "vars" / "containerd.yml",
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


def test_the_build_id_is_the_tree_and_the_plugins_sources() -> None:
    build = kubernetes_build()
    assert build.tree_id == f"{build.source_version}+{build.revision}"
    plugin_hash = plugin_sources_sha256(build.scheduler_plugin.directory())
    assert build.build_id == f"{build.tree_id}+plugin.{plugin_hash[:PLUGIN_HASH_CHARS]}"
    # the tree the source package carries is what the binaries print
    assert f"really{build.version.lstrip('v')}" in build.source_version
    assert "kube-scheduler" in build.binaries and "kubectl" in build.binaries
    # kube-scheduler is the plugin module's command, built at vendor/<module> in the tree
    plugin = build.scheduler_plugin
    assert plugin.binary == "kube-scheduler"
    assert (plugin.directory() / "go.mod").read_text().count(f"module {plugin.import_path}\n") == 1
    assert (plugin.directory() / plugin.main / "main.go").is_file()
    assert plugin.target == f"vendor/{plugin.import_path}/{plugin.main}"


def _module(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_plugin_hash_covers_what_the_binary_is_built_from(tmp_path: Path) -> None:
    base = {"go.mod": "module x\n", "cmd/a/main.go": "package main\n", "pkg/b/b.go": "package b\n"}
    before = plugin_sources_sha256(_module(tmp_path / "m1", base))
    # the sha256 of "cmd/a/main.go <sha256 of its bytes>\npkg/b/b.go <...>\n"
    lines = "".join(
        f"{name} {hashlib.sha256(base[name].encode()).hexdigest()}\n"
        for name in ("cmd/a/main.go", "pkg/b/b.go")
    )
    assert before == hashlib.sha256(lines.encode()).hexdigest()
    # tests, test data, the README and go.mod do not go into the binary: same hash
    extra = {
        **base,
        "pkg/b/b_test.go": "package b\n",
        "pkg/b/testdata/x.go": "package x\n",
        "README.md": "# x\n",
        "go.mod": "module x\n\ngo 1.19\n",
    }
    assert plugin_sources_sha256(_module(tmp_path / "m2", extra)) == before
    # one byte of a source changes it, as does a new source file
    changed = {**base, "pkg/b/b.go": "package b \n"}
    assert plugin_sources_sha256(_module(tmp_path / "m3", changed)) != before
    added = {**base, "pkg/c/c.go": "package c\n"}
    assert plugin_sources_sha256(_module(tmp_path / "m4", added)) != before


def test_paths_follow_the_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    build = kubernetes_build()
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    assert cache_root() == DEFAULT_CACHE_ROOT
    assert build.bin_dir() == DEFAULT_CACHE_ROOT / "kubernetes" / build.build_id / "bin"
    # one tree per source version and overrides, whatever the plugin
    assert build.tree_dir() == DEFAULT_CACHE_ROOT / "kubernetes" / build.tree_id
    upstream = build.source_version.rpartition("-")[0]
    assert build.source_tree() == build.tree_dir() / "src" / f"kubernetes-{upstream}"
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
    assert build.require("kube-scheduler", root=tmp_path) == bin_dir
    assert build.missing("kube-scheduler", "kubectl", root=tmp_path) == [bin_dir / "kubectl"]


_GOOD = {
    "binaries": ["kube-scheduler"],
    "source_package": "kubernetes",
    "source_version": "1",
    "version": "v1",
    "source_codename": "x",
    "pause_version": "1",
    "revision": "r",
    "scheduler_plugin": {
        "binary": "kube-scheduler",
        "source": "plugin/kube-scheduler",
        "import_path": "layersched.io/kube-scheduler",
        "main": "cmd/kube-scheduler",
    },
}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([], "expected a mapping"),
        ({"binaries": "kubectl"}, "binaries must be a list"),
        ({**_GOOD, "source_version": ""}, "source_version must be a non-empty string"),
        ({**_GOOD, "scheduler_plugin": "x"}, "scheduler_plugin must be a mapping"),
        ({**_GOOD, "binaries": ["kubectl"]}, "'kube-scheduler' is not one of the binaries"),
        (
            {**_GOOD, "scheduler_plugin": {**_GOOD["scheduler_plugin"], "source": "nowhere"}},  # type: ignore[dict-item]
            "no Go module at .*nowhere: the build's identity hashes",
        ),
    ],
    ids=[
        "not-a-mapping",
        "binaries-not-a-list",
        "empty-version",
        "plugin-not-a-mapping",
        "plugin-binary-not-built",
        "plugin-module-missing",
    ],
)
def test_a_malformed_record_names_the_field(record: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_kubernetes_build(record)


def _hand_spelled(build: KubernetesBuild) -> list[re.Pattern[str]]:
    return [
        re.compile(re.escape(build.source_version)),
        re.compile(re.escape(build.revision)),
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
