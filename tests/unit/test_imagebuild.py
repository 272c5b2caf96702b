"""The Docker-free image builder's pure parts: reproducible tars, bytecode, lock files."""

from __future__ import annotations

import gzip
import importlib.util
import io
import marshal
import sys
import tarfile

import pytest

from layersched.core.errors import InputError
from layersched.core.manifest import sha256_digest
from layersched.images.build import (
    DEBIAN_LOCK,
    REQUIREMENTS_LOCK,
    LayerCache,
    TarTree,
    parse_debian_lock,
    parse_requirements_lock,
)
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


def test_layer_cache_round_trip_and_corruption(tmp_path: object) -> None:
    from pathlib import Path

    cache = LayerCache(Path(str(tmp_path)))
    key = cache.key("python", ["a=1"])
    # the key depends on the inputs
    assert key != cache.key("python", ["a=2"])
    built = _tree(["x"]).layer()
    assert cache.layer(key, lambda: built) == built
    # served from the cache now: the builder is not called
    assert cache.layer(key, lambda: pytest.fail("rebuilt a cached layer")) == built
    # a corrupted blob is rebuilt, never served
    (cache.root / f"{key}.tar.gz").write_bytes(b"garbage")
    assert cache.get(key) is None
