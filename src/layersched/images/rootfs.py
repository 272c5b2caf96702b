"""A layer's files as a reproducible tar: :class:`TarTree` (files, directories and
symlinks, from a directory or a Debian package's data tar, with the Python bytecode
compiled into it), and the base files both images carry (the unprivileged user 65532,
``/tmp``).

Every tar member has mtime 0 and owner 0:0 (65532 for the home directory), members are
sorted by path, hard links become regular files, and gzip carries mtime 0: the same files
give the same layer digest.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

from layersched.core.errors import ImageBuildError
from layersched.core.manifest import sha256_digest
from layersched.images.commands import BUILD_TIMEOUT_S
from layersched.images.oci import EXECUTABLE_MODE, FILE_MODE, FIXED_MTIME, LayerBlob

#: The unprivileged user both images run as (distroless' "nonroot").
NONROOT_UID = 65532
NONROOT_HOME = "home/nonroot"
PYTHON = "python3.11"
PYTHON_VERSION = "3.11"


#: gzip level 6 (gzip's default): real files compress, unlike the scenario's random layers.
GZIP_LEVEL = 6
TMP_MODE = 0o1777
_IMAGE_PYTHON = (3, 11)
#: PEP 552 flags: hash-based, source not checked.
_PYC_HASH_BASED = 0b01
DIR_MODE = 0o755
#: Documentation the image does not need; each package's copyright file stays.
_DROPPED_PREFIXES = ("usr/share/man/", "usr/share/lintian/", "usr/share/locale/", "usr/share/info/")
_DOC_PREFIX = "usr/share/doc/"
_COPYRIGHT = "/copyright"


USER = f"{NONROOT_UID}:{NONROOT_UID}"


_PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/{NONROOT_HOME}:/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nnonroot:x:{NONROOT_UID}:\n"


#: Compiles ``{path: source}`` (pickled on stdin) to ``{path: pyc}`` (pickled on stdout),
#: in a child with PYTHONHASHSEED=0: frozenset constants are marshalled in iteration
#: order, which string hash randomisation would change from one process to the next.
_COMPILER = """
import importlib.util, marshal, pickle, sys
out = {}
for path, data in pickle.load(sys.stdin.buffer).items():
    try:
        code = compile(data, "/" + path, "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError):
        continue
    head = importlib.util.MAGIC_NUMBER + (%d).to_bytes(4, "little")
    out[path] = head + importlib.util.source_hash(data) + marshal.dumps(code)
pickle.dump(out, sys.stdout.buffer)
"""


def _compile_sources(sources: dict[str, bytes]) -> dict[str, bytes]:
    """Unchecked-hash pycs of ``sources`` (those that compile), reproducibly (see _COMPILER)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _COMPILER % _PYC_HASH_BASED],
            input=pickle.dumps(sources),
            capture_output=True,
            timeout=BUILD_TIMEOUT_S,
            env=env,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise ImageBuildError(f"compiling the image's Python bytecode: {err}") from err
    result: dict[str, bytes] = pickle.loads(done.stdout)  # noqa: S301 (our own child's output)
    return result


class TarTree:
    """Files, directories and symlinks of one layer, written as a reproducible tar.

    Later additions of a path replace earlier ones; parent directories are added
    (0755, root) when missing; members are written sorted by path.
    """

    def __init__(self) -> None:
        self._members: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, path: str) -> bool:
        return path.strip("/") in self._members

    def _info(self, path: str, kind: bytes, mode: int, uid: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(path)
        info.type = kind
        info.mode = mode
        info.mtime = FIXED_MTIME
        info.uid = info.gid = uid
        info.uname = info.gname = ""
        return info

    def _parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/".join(parts[:depth])
            if parent not in self._members:
                self._members[parent] = (self._info(parent, tarfile.DIRTYPE, DIR_MODE), None)

    def add_dir(self, path: str, mode: int = DIR_MODE, uid: int = 0) -> None:
        path = path.strip("/")
        self._parents(path)
        self._members[path] = (self._info(path, tarfile.DIRTYPE, mode, uid), None)

    def add_file(self, path: str, content: bytes, mode: int = FILE_MODE) -> None:
        path = path.strip("/")
        self._parents(path)
        info = self._info(path, tarfile.REGTYPE, mode)
        info.size = len(content)
        self._members[path] = (info, content)

    def add_symlink(self, path: str, target: str) -> None:
        path = path.strip("/")
        self._parents(path)
        info = self._info(path, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._members[path] = (info, None)

    def add_tree(self, root: Path, under: str) -> None:
        """Every file, directory and symlink below ``root``, placed under ``under``."""
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            base = Path(dirpath)
            for name in [*dirnames, *sorted(filenames)]:
                path = base / name
                inside = f"{under.strip('/')}/{path.relative_to(root).as_posix()}"
                if path.is_symlink():
                    self.add_symlink(inside, str(path.readlink()))
                elif path.is_dir():
                    self.add_dir(inside)
                else:
                    executable = path.stat().st_mode & 0o111
                    self.add_file(
                        inside, path.read_bytes(), EXECUTABLE_MODE if executable else FILE_MODE
                    )

    def add_deb_members(self, tar: tarfile.TarFile) -> None:
        """The members of a Debian package's data tar (``dpkg-deb --fsys-tarfile``)."""
        contents: dict[str, bytes] = {}
        for member in tar.getmembers():
            path = member.name.removeprefix("./").strip("/")
            if not path or _dropped(path):
                continue
            if member.isdir():
                self.add_dir(path, member.mode & 0o7777)
            elif member.issym():
                self.add_symlink(path, member.linkname)
            elif member.islnk():
                # A hard link's target may sort after it: store the bytes instead.
                target = member.linkname.removeprefix("./").strip("/")
                self.add_file(path, contents[target], member.mode & 0o7777)
            elif member.isfile():
                stream = tar.extractfile(member)
                data = stream.read() if stream is not None else b""
                contents[path] = data
                self.add_file(path, data, member.mode & 0o7777)

    def add_bytecode(self, under: str) -> int:
        """A ``__pycache__`` pyc for every ``.py`` below ``under``; returns how many.

        Unchecked-hash pycs (PEP 552) carry no timestamp, so they are reproducible, and
        Python uses them without comparing the source; the image is read-only, so
        without them every start would compile every module again (seconds of CPU).
        Sources that do not compile (test fixtures, Python 2 examples) are left as they are.
        """
        if sys.version_info[:2] != _IMAGE_PYTHON:
            raise ImageBuildError(
                f"compiling the image's Python {PYTHON_VERSION} bytecode needs Python "
                f"{PYTHON_VERSION}, not {sys.version.split()[0]}: run the build from the venv"
            )
        prefix = under.strip("/") + "/"
        sources = {
            path: data
            for path, (info, data) in sorted(self._members.items())
            if path.startswith(prefix) and path.endswith(".py") and info.isfile() and data
        }
        compiled = _compile_sources(sources)
        for path, pyc in sorted(compiled.items()):
            directory, name = path.rsplit("/", 1)
            cache = f"{directory}/__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"
            self.add_file(cache, pyc)
        return len(compiled)

    def tar_bytes(self) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self._members):
                info, data = self._members[path]
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return out.getvalue()

    def layer(self) -> LayerBlob:
        tar = self.tar_bytes()
        blob = gzip.compress(tar, compresslevel=GZIP_LEVEL, mtime=FIXED_MTIME)
        return LayerBlob(blob, sha256_digest(blob), sha256_digest(tar))


def _dropped(path: str) -> bool:
    if path.startswith(_DROPPED_PREFIXES):
        return True
    if path.startswith(_DOC_PREFIX):
        rest = path[len(_DOC_PREFIX) :]
        return "/" in rest and not rest.endswith(_COPYRIGHT)
    return False


def base_files(tree: TarTree) -> None:
    tree.add_file("etc/passwd", _PASSWD.encode())
    tree.add_file("etc/group", _GROUP.encode())
    tree.add_dir("tmp", TMP_MODE)
    tree.add_dir(NONROOT_HOME, 0o700, NONROOT_UID)
