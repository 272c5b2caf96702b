"""The Docker-free image builder's pure parts: reproducible tars, bytecode, lock files."""

from __future__ import annotations

import gzip
import importlib.util
import io
import marshal
import sys
import tarfile
from pathlib import Path

import pytest

from layersched.builds import IMAGE_ARCHES
from layersched.core.errors import InputError
from layersched.core.manifest import sha256_digest
from layersched.images.debian import DEBIAN_KEYRING, private_apt_options
from layersched.images.locks import (
    DEBIAN_LOCK,
    REQUIREMENTS_LOCK,
    debian_pins,
    parse_debian_lock,
    parse_requirements_lock,
)
from layersched.images.rootfs import TarTree
from layersched.images.wheels import WHEEL_PLATFORMS
from tests.fixtures import prereq


def _members(tree: TarTree) -> list[tarfile.TarInfo]:
    blob = tree.layer().blob
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return tar.getmembers()


def _tree(order: list[str]) -> TarTree:
    tree = TarTree()
    for name in order:
        tree.add_file(f"usr/lib/{name}", name.encode())
    tree.add_symlink("usr/bin/python3", "python3.11")
    return tree


def test_same_content_in_any_order_is_the_same_layer() -> None:
    # members are sorted, owners and times fixed: the insertion order is no input
    first, second = _tree(["a", "b", "c"]).layer(), _tree(["c", "a", "b"]).layer()
    assert first.digest == second.digest
    assert first.diff_id == second.diff_id
    # and the digest is the blob's, the diff_id the tar's
    assert first.digest == sha256_digest(first.blob)
    assert first.diff_id == sha256_digest(gzip.decompress(first.blob))


def test_members_are_sorted_with_parents_fixed_owner_and_time() -> None:
    members = _members(_tree(["b", "a"]))
    names = [m.name for m in members]
    # parents first (sorted order puts a directory before what it holds)
    assert names == ["usr", "usr/bin", "usr/bin/python3", "usr/lib", "usr/lib/a", "usr/lib/b"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert members[2].issym() and members[2].linkname == "python3.11"


def test_deb_hard_links_become_files() -> None:
    # a hard link may sort before its target: the layer stores the bytes instead
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        target = tarfile.TarInfo("./usr/bin/z-python")
        target.size = 3
        tar.addfile(target, io.BytesIO(b"elf"))
        link = tarfile.TarInfo("./usr/bin/a-python")
        link.type, link.linkname = tarfile.LNKTYPE, "./usr/bin/z-python"
        tar.addfile(link)
    data.seek(0)
    tree = TarTree()
    with tarfile.open(fileobj=data) as tar:
        tree.add_deb_members(tar)
    [link_member] = [m for m in _members(tree) if m.name == "usr/bin/a-python"]
    assert link_member.isfile() and link_member.size == 3


def test_docs_are_dropped_but_copyright_kept() -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for path in (
            "./usr/share/doc/libc6/copyright",
            "./usr/share/doc/libc6/NEWS.gz",
            "./usr/share/man/man1/x.1",
        ):
            info = tarfile.TarInfo(path)
            tar.addfile(info, io.BytesIO(b""))
    data.seek(0)
    tree = TarTree()
    with tarfile.open(fileobj=data) as tar:
        tree.add_deb_members(tar)
    assert "usr/share/doc/libc6/copyright" in tree
    assert "usr/share/doc/libc6/NEWS.gz" not in tree
    assert "usr/share/man/man1/x.1" not in tree


def test_bytecode_is_unchecked_hash_and_loads() -> None:
    if sys.version_info[:2] != (3, 11):
        prereq.unavailable("the image's bytecode is Python 3.11's, and this Python is another")
    tree = TarTree()
    # a frozenset constant: marshalled in iteration order, which hash randomisation changes
    source = b"ANSWER = 6 * 7 if 'q' not in {'a', 'b', 'c', 'd', 'e'} else 0\n"
    tree.add_file("usr/lib/python3.11/m.py", source)
    tree.add_file("usr/lib/python3.11/broken.py", b"def (:\n")
    # one module compiles, the broken one is left as source only
    assert tree.add_bytecode("usr/lib/python3.11") == 1
    pyc_path = f"usr/lib/python3.11/__pycache__/m.{sys.implementation.cache_tag}.pyc"
    [pyc] = [m for m in _members(tree) if m.name == pyc_path]
    blob = tree.layer().blob
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        stream = tar.extractfile(pyc)
        assert stream is not None
        data = stream.read()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    # PEP 552: flags 0b01 = hash-based, unchecked; then the source's hash
    assert int.from_bytes(data[4:8], "little") == 0b01
    assert data[8:16] == importlib.util.source_hash(source)
    namespace: dict[str, object] = {}
    exec(marshal.loads(data[16:]), namespace)
    assert namespace["ANSWER"] == 42
    # compiling again changes nothing: no timestamp in the pyc
    again = TarTree()
    again.add_file("usr/lib/python3.11/m.py", source)
    again.add_file("usr/lib/python3.11/broken.py", b"def (:\n")
    again.add_bytecode("usr/lib/python3.11")
    assert again.layer().digest == tree.layer().digest


def test_committed_lock_files_parse() -> None:
    debs = parse_debian_lock(DEBIAN_LOCK.read_text(), str(DEBIAN_LOCK))
    wheels = parse_requirements_lock(REQUIREMENTS_LOCK.read_text(), str(REQUIREMENTS_LOCK))
    assert "python3.11-minimal" in {p.name for p in debs}
    assert {"httpx", "numpy", "grpcio"} <= {p.name for p in wheels}
    # every architecture of the images pins the same packages at the same versions
    by_arch = {
        arch: {(p.name, p.version) for p in debian_pins(debs, arch, "lock")}
        for arch in IMAGE_ARCHES
    }
    assert by_arch["amd64"] == by_arch["arm64"]
    # architecture-independent packages are one file: the same sha256 on both lines
    amd64, arm64 = ({p.name: p.sha256 for p in debs if p.arch == a} for a in IMAGE_ARCHES)
    assert amd64["tzdata"] == arm64["tzdata"]
    assert amd64["libc6"] != arm64["libc6"]


def test_a_lock_line_names_its_architecture() -> None:
    # apt's own name:arch=version; a line without one is amd64's
    [amd64, arm64] = parse_debian_lock(
        f"libc6=2.36-9 sha256:{'a' * 64}\nlibc6:arm64=2.36-9 sha256:{'b' * 64}\n", "lock"
    )
    assert (amd64.arch, arm64.arch) == ("amd64", "arm64")
    assert debian_pins([amd64, arm64], "arm64", "lock") == [arm64]
    with pytest.raises(InputError, match=r"lock: no package pinned for riscv64 \(it pins amd64"):
        debian_pins([amd64, arm64], "riscv64", "lock")


def test_the_private_apt_reads_one_architecture_of_bookworm(tmp_path: Path) -> None:
    if not DEBIAN_KEYRING.is_file():
        prereq.unavailable(f"{DEBIAN_KEYRING} (package debian-archive-keyring) is not installed")
    options = private_apt_options(tmp_path / "apt", "arm64")
    assert set(options[::2]) == {"-o"}
    settings = options[1::2]
    assert "APT::Architecture=arm64" in settings and "APT::Architectures::=arm64" in settings
    # nothing of this machine's apt or dpkg: its own sources, lists, cache and status
    assert f"Dir::State::status={tmp_path / 'apt' / 'status'}" in settings
    assert "Dir::Etc::SourceParts=/dev/null" in settings
    sources = (tmp_path / "apt" / "sources.list").read_text().splitlines()
    assert [line.split()[-2] for line in sources] == [
        "bookworm", "bookworm-updates", "bookworm-security"
    ]  # fmt: skip
    assert all(f"[signed-by={DEBIAN_KEYRING}]" in line for line in sources)


def test_each_architecture_downloads_its_own_wheels() -> None:
    # manylinux tags of the image's glibc and older, for that machine only
    assert WHEEL_PLATFORMS["arm64"] == (
        "manylinux_2_36_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"
    )  # fmt: skip
    assert all(tag.endswith("_x86_64") for tag in WHEEL_PLATFORMS["amd64"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a version without its hash
        ("libc6=2.36\n", "lock:1: 'libc6=2.36' is not a pin"),
        # only comments
        ("# nothing\n", "no pins"),
    ],
    ids=["no-hash", "empty"],
)
def test_debian_lock_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_debian_lock(text, "lock")


def test_requirements_lock_errors_name_the_line() -> None:
    with pytest.raises(InputError, match=r"req:2: 'numpy>=2' is not a pin"):
        parse_requirements_lock("# c\nnumpy>=2\n", "req")
