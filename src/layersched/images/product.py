"""The layersched image's product layer: a wheel of this repository (its git-tracked
product files, never the harness), installed into the image's dist-packages, and the
``/usr/local/bin/layersched`` command; its cache key is one hash over those files."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from layersched import __version__
from layersched.images.commands import BUILD_TIMEOUT_S, run
from layersched.images.oci import EXECUTABLE_MODE, LayerBlob
from layersched.images.rootfs import PYTHON, TarTree
from layersched.images.wheels import SITE_PACKAGES, pip_target

LAYERSCHED_BIN = "usr/local/bin/layersched"


_ENTRY_SCRIPT = (
    f"#!/usr/bin/{PYTHON}\nimport sys\n\nfrom layersched.cli.main import main\n\nsys.exit(main())\n"
)


#: What the product wheel is built from: the product's root and its distribution's files
#: (the harness has a root of its own, so the layer's hash does not move when only the
#: testbed or the simulator changes).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "src/layersched")


def tracked_files(repo_root: Path) -> list[str]:
    """The repository's git-tracked files that go into the product wheel."""
    out = run(
        ["git", "-C", str(repo_root), "ls-files", "-z", "--", *WHEEL_SOURCES],
        "listing the repository's files",
        BUILD_TIMEOUT_S,
    )
    return sorted(name for name in out.split("\0") if name and (repo_root / name).is_file())


def source_hash(repo_root: Path, files: Sequence[str]) -> str:
    """One hash over the wheel's source files (names and content)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (repo_root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def layersched_layer(repo_root: Path, files: Sequence[str]) -> LayerBlob:
    """Layer 3: a wheel of this repository, installed, and the ``layersched`` command."""
    with tempfile.TemporaryDirectory(prefix="layersched-wheel-") as tmp:
        src, wheels, target = Path(tmp) / "src", Path(tmp) / "wheels", Path(tmp) / "site"
        for name in files:
            dest = src / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repo_root / name, dest)
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
        argv += ["--no-build-isolation", "--wheel-dir", str(wheels), str(src)]
        run(["env", "SOURCE_DATE_EPOCH=0", *argv], "building the layersched wheel", BUILD_TIMEOUT_S)
        pip_target(wheels, [f"layersched=={__version__}"], target)
        tree = TarTree()
        tree.add_tree(target, SITE_PACKAGES)
    tree.add_bytecode(SITE_PACKAGES)
    tree.add_file(LAYERSCHED_BIN, _ENTRY_SCRIPT.encode(), EXECUTABLE_MODE)
    return tree.layer()
