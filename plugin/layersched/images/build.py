"""The deployed stack's images, built without Docker: reproducible OCI images from pinned inputs.

Two images, each a stack of gzipped tar layers assembled in Python
(:mod:`layersched.images.oci`), then pushed with the registry client:

* ``layersched`` (the extender and the agent), three layers:

  1. **debian**: the files of the Debian bookworm packages in
     ``images/layersched/debian.lock`` (Python 3.11 and the C libraries it and the
     wheels load), fetched with ``apt-get download`` (apt checks them against the
     signed archive index), or from Debian's snapshot archive once the mirrors dropped
     the version (:func:`snapshot_deb`), and checked against the lock's sha256; plus
     ``/etc/passwd`` and ``/etc/group`` naming the unprivileged user 65532, and
     ``/tmp``. No maintainer script runs: this is a root filesystem to run one
     program, like a distroless base.
  2. **python**: the wheels of ``images/layersched/requirements.lock`` (pinned,
     hash-checked by ``pip download --require-hashes``), installed with
     ``pip install --target`` into ``/usr/local/lib/python3.11/dist-packages``,
     a directory Debian's Python searches.
  3. **layersched**: a wheel of this repository (its git-tracked files) installed
     the same way, and ``/usr/local/bin/layersched``.

  The config matches ``images/layersched/Containerfile``: entrypoint ``layersched``,
  command ``extender --port 8888``, user ``65532:65532``, ``PYTHONDONTWRITEBYTECODE``
  and ``PYTHONUNBUFFERED``.

* ``kube-scheduler``: one layer with the kube-scheduler binary the cluster was built
  with (``/usr/local/bin/kube-scheduler``, static), ``/etc/passwd``/``/etc/group``
  and ``/tmp``; user 65532.

**Reproducible.** Every tar member has mtime 0 and owner 0:0 (65532 for the home
directory), members are sorted by path, hard links become regular files, gzip carries
mtime 0, and JSON is canonical: the same inputs give the same digests. Layers are cached
outside the repository under ``$LAYERSCHED_CACHE_DIR/images`` (default
``/var/cache/layersched/images``), keyed by a hash of their inputs, so a rebuild with
nothing changed takes seconds.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from layersched import __version__
from layersched.builds import (
    IMAGE_ARCHES,
    REPO_ROOT,
    cache_root,
    check_arch,
    host_arch,
)
from layersched.core.errors import ImageBuildError, InputError
from layersched.core.manifest import Platform, sha256_digest
from layersched.images.binary import GoBuildInfo, elf_facts, go_build_info
from layersched.images.buildcache import BuiltLayers, build_lock
from layersched.images.oci import (
    EXECUTABLE_MODE,
    FILE_MODE,
    FIXED_MTIME,
    BuiltImage,
    BuiltIndex,
    LayerBlob,
    build_image,
    build_index,
)

IMAGES_DIR = REPO_ROOT / "images" / "layersched"
DEBIAN_LOCK = IMAGES_DIR / "debian.lock"
REQUIREMENTS_LOCK = IMAGES_DIR / "requirements.lock"

#: The unprivileged user both images run as (distroless' "nonroot").
NONROOT_UID = 65532
NONROOT_HOME = "home/nonroot"
PYTHON = "python3.11"
PYTHON_VERSION = "3.11"
SITE_PACKAGES = f"usr/local/lib/{PYTHON}/dist-packages"
LAYERSCHED_BIN = "usr/local/bin/layersched"
KUBE_SCHEDULER_BIN = "usr/local/bin/kube-scheduler"
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
#: ``package[:arch]=version sha256:HEX``: apt's own ``name:arch=version``; a line without an
#: architecture is amd64's (the lock's first architecture).
_DEB_LINE = re.compile(
    r"^(?P<package>[a-z0-9][a-z0-9.+-]*)(?::(?P<arch>[a-z0-9]+))?=(?P<version>\S+)"
    r" sha256:(?P<sha>[0-9a-f]{64})$"
)
#: The architecture of a debian.lock line that names none.
LOCK_DEFAULT_ARCH = "amd64"
#: The first hash is the x86_64 wheel's (this builder's); more may follow (other
#: platforms' wheels, for the Containerfile's multi-arch build).
_WHEEL_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})"
    r"(?: --hash=sha256:[0-9a-f]{64})*$"
)
#: apt-get download and pip download each take seconds; a stuck mirror, minutes.
FETCH_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 300.0

LAYERSCHED_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
KUBE_SCHEDULER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
LAYERSCHED_ENTRYPOINT = ("layersched",)
LAYERSCHED_CMD = ("extender", "--port", "8888")
USER = f"{NONROOT_UID}:{NONROOT_UID}"
TITLE_LABEL = "org.opencontainers.image.title"
VERSION_LABEL = "org.opencontainers.image.version"
#: Labels recording the layersched image's inputs (``...debian-lock`` and so on).
INPUTS_LABEL_PREFIX = "io.layersched.inputs."

_PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/{NONROOT_HOME}:/sbin/nologin\n"
)
_GROUP = f"root:x:0:\nnonroot:x:{NONROOT_UID}:\n"
_ENTRY_SCRIPT = (
    f"#!/usr/bin/{PYTHON}\nimport sys\n\nfrom layersched.cli.main import main\n\nsys.exit(main())\n"
)


@dataclass(frozen=True, slots=True)
class Pin:
    """One pinned input: a Debian package (``name[:arch]=version``) or a wheel
    (``name==version``)."""

    name: str
    version: str
    sha256: str
    #: A Debian package's architecture (:data:`LOCK_DEFAULT_ARCH` when the line names
    #: none); empty for a wheel (its lock lists every platform's hashes on one line).
    arch: str = ""


def _parse_lock(text: str, where: str, line_re: re.Pattern[str], example: str) -> list[Pin]:
    pins: list[Pin] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = line_re.match(line)
        if match is None:
            raise InputError(f"{where}:{number}: {line!r} is not a pin: write it like {example}")
        if "package" in line_re.groupindex:
            arch = match["arch"] or LOCK_DEFAULT_ARCH
            pins.append(Pin(match["package"], match["version"], match["sha"], arch))
        else:
            pins.append(Pin(match["name"], match["version"], match["sha"]))
    if not pins:
        raise InputError(f"{where}: no pins; it lists one input a line, like {example}")
    return pins


def parse_debian_lock(text: str, where: str) -> list[Pin]:
    """``package[:arch]=version sha256:HEX`` lines (``#`` comments), every architecture's."""
    return _parse_lock(text, where, _DEB_LINE, "'libc6:arm64=2.36-9+deb12u14 sha256:<64 hex>'")


def debian_pins(pins: Sequence[Pin], arch: str, where: str) -> list[Pin]:
    """The pins of ``arch``, in the lock's order; an InputError when it has none."""
    chosen = [pin for pin in pins if pin.arch == arch]
    if not chosen:
        have = ", ".join(sorted({pin.arch for pin in pins}))
        raise InputError(
            f"{where}: no package pinned for {arch} (it pins {have}): add "
            f"'NAME:{arch}=VERSION sha256:HEX' lines (the file's header says how)"
        )
    return chosen


def parse_requirements_lock(text: str, where: str) -> list[Pin]:
    """``name==version --hash=sha256:HEX`` lines (``#`` comments), as pip reads them."""
    return _parse_lock(text, where, _WHEEL_LINE, "'httpx==0.28.1 --hash=sha256:<64 hex>'")


def _read_lock(path: Path, parse: Callable[[str, str], list[Pin]]) -> list[Pin]:
    try:
        return parse(path.read_text(encoding="utf-8"), str(path))
    except OSError as err:
        raise InputError(f"reading the lock file {path}: {err}") from err


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(argv: Sequence[str], what: str, timeout_s: float, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, cwd=cwd, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ImageBuildError(f"{what}: {err}") from err
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise ImageBuildError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


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


def _base_files(tree: TarTree) -> None:
    tree.add_file("etc/passwd", _PASSWD.encode())
    tree.add_file("etc/group", _GROUP.encode())
    tree.add_dir("tmp", TMP_MODE)
    tree.add_dir(NONROOT_HOME, 0o700, NONROOT_UID)


#: Debian's archive of every package version it ever published. When the mirrors have
#: moved past a pin (a point release replaced it), the exact file comes from here, by its
#: machine-readable API (``/mr/binary/NAME/VERSION/binfiles``, then ``/file/SHA1``), and is
#: checked against the lock's sha256 like any other.
SNAPSHOT_ENV = "LAYERSCHED_DEBIAN_SNAPSHOT"
DEFAULT_SNAPSHOT = "https://snapshot.debian.org"
#: Architecture-independent packages (one file for every architecture).
ARCH_ALL = "all"
#: The largest package of the lock is ~5 MB (libpython3.11-stdlib); a body past this is no
#: package of ours, and is not read further.
MAX_DEB_BYTES = 64 * 1024 * 1024
SNAPSHOT_TIMEOUT_S = 120.0


def snapshot_base() -> str:
    """``$LAYERSCHED_DEBIAN_SNAPSHOT``, else snapshot.debian.org."""
    return (os.environ.get(SNAPSHOT_ENV) or DEFAULT_SNAPSHOT).rstrip("/")


def snapshot_deb(pin: Pin, directory: Path, base: str) -> Path:
    """``pin``'s ``.deb`` from Debian's snapshot archive at ``base``, checked against its
    sha256, written into ``directory`` under the archive's file name."""
    arches = (pin.arch or LOCK_DEFAULT_ARCH, ARCH_ALL)
    where = f"{pin.name}:{arches[0]}={pin.version} from {base}"
    name, version = quote(pin.name, safe=""), quote(pin.version, safe="")
    try:
        with httpx.Client(timeout=SNAPSHOT_TIMEOUT_S, follow_redirects=True) as client:
            answer = client.get(f"{base}/mr/binary/{name}/{version}/binfiles?fileinfo=1")
            answer.raise_for_status()
            doc = answer.json()
            found = [r["hash"] for r in doc["result"] if r["architecture"] in arches]
            if not found:
                raise ImageBuildError(f"{where}: no {'/'.join(arches)} file listed")
            sha1 = found[0]
            filename = Path(doc["fileinfo"][sha1][0]["name"]).name
            digest = hashlib.sha256()
            chunks: list[bytes] = []
            size = 0
            with client.stream("GET", f"{base}/file/{sha1}") as body:
                body.raise_for_status()
                for chunk in body.iter_bytes():
                    size += len(chunk)
                    if size > MAX_DEB_BYTES:
                        raise ImageBuildError(
                            f"{where}: more than {MAX_DEB_BYTES} bytes: no package"
                        )
                    digest.update(chunk)
                    chunks.append(chunk)
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
        raise ImageBuildError(f"fetching {where}: {err}") from err
    if digest.hexdigest() != pin.sha256:
        raise ImageBuildError(
            f"{where}: the file's sha256 is not the one in {DEBIAN_LOCK.name}; the lock or "
            "the archive is wrong: nothing was written"
        )
    if not filename.endswith(".deb") or "/" in filename:
        raise ImageBuildError(f"{where}: {filename!r} is no package file name")
    path = directory / filename
    path.write_bytes(b"".join(chunks))
    return path


#: The archive the image's packages come from when this machine's own apt cannot serve
#: them (another architecture, or a host that is no Debian bookworm: the release's
#: runner): bookworm with its updates and security suites, checked against Debian's
#: archive keyring (package debian-archive-keyring, on Ubuntu too).
DEBIAN_CODENAME = "bookworm"
DEBIAN_MIRROR_ENV = "LAYERSCHED_DEBIAN_MIRROR"
DEBIAN_SECURITY_MIRROR_ENV = "LAYERSCHED_DEBIAN_SECURITY_MIRROR"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEFAULT_DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
OS_RELEASE = Path("/etc/os-release")
#: Inside a download directory: the private apt state (sources, lists, cache, status).
PRIVATE_APT_DIR = ".apt"


def _dpkg_arch() -> str | None:
    try:
        return _run(["dpkg", "--print-architecture"], "asking dpkg its architecture", 30).strip()
    except ImageBuildError:
        return None


def _host_codename() -> str:
    try:
        text = OS_RELEASE.read_text(encoding="utf-8")
    except OSError:
        return ""
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
    return match[1] if match else ""


def uses_host_apt(arch: str) -> bool:
    """Whether this machine's own apt serves the image's packages of ``arch``: a Debian
    bookworm host of that architecture. Else a private apt (:func:`private_apt_options`)."""
    return _host_codename() == DEBIAN_CODENAME and _dpkg_arch() == arch


def debian_sources() -> str:
    """The private apt's sources list: bookworm, its updates and its security suite."""
    mirror = (os.environ.get(DEBIAN_MIRROR_ENV) or DEFAULT_DEBIAN_MIRROR).rstrip("/")
    security = os.environ.get(DEBIAN_SECURITY_MIRROR_ENV) or DEFAULT_DEBIAN_SECURITY_MIRROR
    signed = f"[signed-by={DEBIAN_KEYRING}]"
    lines = [
        f"deb {signed} {mirror} {DEBIAN_CODENAME} main",
        f"deb {signed} {mirror} {DEBIAN_CODENAME}-updates main",
        f"deb {signed} {security.rstrip('/')} {DEBIAN_CODENAME}-security main",
    ]
    return "\n".join(lines) + "\n"


def private_apt_options(state: Path, arch: str) -> list[str]:
    """apt options that read ``arch``'s index of :func:`debian_sources` into ``state``
    (lists, cache, an empty dpkg status): this machine's apt configuration and dpkg
    database are never read or changed."""
    if not DEBIAN_KEYRING.is_file():
        raise ImageBuildError(
            f"{DEBIAN_KEYRING} is missing: the image's Debian packages for {arch} are checked "
            "against Debian's archive keyring: install the package debian-archive-keyring"
        )
    try:
        for sub in ("lists/partial", "cache/archives/partial"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        (state / "sources.list").write_text(debian_sources(), encoding="utf-8")
        (state / "status").touch()
    except OSError as err:
        raise ImageBuildError(f"preparing a private apt state in {state}: {err}") from err
    options = {
        "Dir::Etc::SourceList": state / "sources.list",
        "Dir::Etc::SourceParts": "/dev/null",
        "Dir::State::Lists": state / "lists",
        "Dir::Cache": state / "cache",
        "Dir::State::status": state / "status",
        "APT::Architecture": arch,
        "APT::Architectures::": arch,
    }
    return [word for key, value in options.items() for word in ("-o", f"{key}={value}")]


def _apt_download(missing: Sequence[Pin], directory: Path, arch: str | None) -> None:
    """apt-get download of ``missing`` into ``directory``: the host's apt for its own
    architecture (``arch`` None, or a bookworm host's own), else a private apt of ``arch``."""
    if arch is None or uses_host_apt(arch):
        names = [f"{p.name}={p.version}" for p in missing]
        what = f"apt-get download into {directory}"
        _run(["apt-get", "download", *names], what, FETCH_TIMEOUT_S, cwd=directory)
        return
    options = private_apt_options(directory / PRIVATE_APT_DIR, arch)
    where = f"Debian {DEBIAN_CODENAME} for {arch}"
    _run(["apt-get", "-q", *options, "update"], f"apt-get update ({where})", FETCH_TIMEOUT_S)
    names = [f"{p.name}:{arch}={p.version}" for p in missing]
    what = f"apt-get download ({where}) into {directory}"
    _run(["apt-get", "-q", *options, "download", *names], what, FETCH_TIMEOUT_S, cwd=directory)


def fetch_debs(
    pins: Sequence[Pin], directory: Path, snapshot: str | None = None, arch: str | None = None
) -> list[Path]:
    """The ``.deb`` of every pin in ``directory``: downloaded with apt-get when missing (the
    mirrors: apt checks them against the signed index; ``arch`` None: this machine's apt,
    else the private apt of :func:`_apt_download`), else, for versions the mirrors no
    longer carry, from Debian's snapshot archive (``snapshot``, default
    :func:`snapshot_base`); either way checked against the lock's sha256."""
    directory.mkdir(parents=True, exist_ok=True)

    def present() -> dict[str, Path]:
        found: dict[str, Path] = {}
        for path in directory.glob("*.deb"):
            found[path.name.split("_", 1)[0]] = path
        return found

    def stale(have: dict[str, Path]) -> list[Pin]:
        return [p for p in pins if p.name not in have or _file_sha256(have[p.name]) != p.sha256]

    missing = stale(present())
    if missing:
        try:
            _apt_download(missing, directory, arch)
        except ImageBuildError as mirrors:
            base = snapshot or snapshot_base()
            for pin in stale(present()):
                try:
                    snapshot_deb(pin, directory, base)
                except ImageBuildError as err:
                    raise ImageBuildError(
                        f"{mirrors}\nthen, from Debian's snapshot archive: {err}"
                    ) from err
    have = present()
    paths: list[Path] = []
    for pin in pins:
        path = have.get(pin.name)
        if path is None or _file_sha256(path) != pin.sha256:
            raise ImageBuildError(
                f"{pin.name}={pin.version}: the downloaded package does not match the sha256 in "
                f"{DEBIAN_LOCK.name}; the archive may have replaced it: update the lock file"
            )
        paths.append(path)
    return paths


def _deb_data(path: Path) -> tarfile.TarFile:
    try:
        data = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(path)],
            capture_output=True,
            timeout=BUILD_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise ImageBuildError(f"reading {path} with dpkg-deb: {err}") from err
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:")


def debian_layer(pins: Sequence[Pin], debs: Sequence[Path]) -> LayerBlob:
    """Layer 1: the packages' files (in lock order) and the base files."""
    del pins  # the order of ``debs`` is the lock's
    tree = TarTree()
    for path in debs:
        with _deb_data(path) as tar:
            tree.add_deb_members(tar)
    tree.add_symlink("usr/bin/python3", PYTHON)
    tree.add_bytecode(f"usr/lib/{PYTHON}")
    _base_files(tree)
    return tree.layer()


#: The manylinux tags pip may take a wheel of, per architecture (newest first): the image's
#: glibc is bookworm's 2.36.
WHEEL_PLATFORMS = {
    arch: tuple(f"{tag}_{machine}" for tag in ("manylinux_2_36", "manylinux_2_28", "manylinux2014"))
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64"))
}


def _wheel_platform_args(arch: str) -> list[str]:
    argv = ["--only-binary", ":all:", "--python-version", PYTHON_VERSION]
    argv += ["--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"]
    for tag in WHEEL_PLATFORMS[arch]:
        argv += ["--platform", tag]
    return argv


def fetch_wheels(lock: Path, directory: Path, arch: str = LOCK_DEFAULT_ARCH) -> None:
    """Every wheel of ``lock`` for ``arch`` in ``directory`` (pip download, hashes
    required: the lock lists each platform's wheel's)."""
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    argv += [*_wheel_platform_args(arch), "--dest", str(directory), "-r", str(lock)]
    _run(argv, f"pip download of {lock.name} for {arch}", FETCH_TIMEOUT_S)


def _pip_target(
    wheel_dir: Path, names: Sequence[str], target: Path, arch: str | None = None
) -> None:
    """``pip install --target``; with ``arch``, that architecture's wheels (pip installs
    another platform's wheels only when told its tags)."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    argv += ["--no-compile", "--no-warn-script-location", "--disable-pip-version-check"]
    if arch is not None:
        argv += _wheel_platform_args(arch)
    argv += ["--find-links", str(wheel_dir), "--target", str(target), *names]
    # A constraint file of the machine's (pip.conf) must not override our pins.
    env_argv = ["env", "PIP_CONSTRAINT=", "PIP_CONFIG_FILE=/dev/null", *argv]
    _run(env_argv, f"pip install --target {target}", BUILD_TIMEOUT_S)
    shutil.rmtree(target / "bin", ignore_errors=True)


def python_layer(pins: Sequence[Pin], wheel_dir: Path, arch: str | None = None) -> LayerBlob:
    """Layer 2: the pinned wheels (``arch``'s) installed into Debian Python's dist-packages."""
    with tempfile.TemporaryDirectory(prefix="layersched-image-") as tmp:
        target = Path(tmp) / "site"
        _pip_target(wheel_dir, [f"{p.name}=={p.version}" for p in pins], target, arch)
        tree = TarTree()
        tree.add_tree(target, SITE_PACKAGES)
    tree.add_bytecode(SITE_PACKAGES)
    return tree.layer()


#: What the product wheel is built from, and what it leaves out: the harness packages
#: (pyproject's packages.find excludes them too), so that the layer's hash does not move
#: when only the testbed or the simulator changes.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "plugin/layersched")
HARNESS_DIRS = ("plugin/layersched/testbed/", "plugin/layersched/sim/")


def tracked_files(repo_root: Path) -> list[str]:
    """The repository's git-tracked files that go into the product wheel."""
    out = _run(
        ["git", "-C", str(repo_root), "ls-files", "-z", "--", *WHEEL_SOURCES],
        "listing the repository's files",
        BUILD_TIMEOUT_S,
    )
    return sorted(
        name
        for name in out.split("\0")
        if name and not name.startswith(HARNESS_DIRS) and (repo_root / name).is_file()
    )


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
        _run(
            ["env", "SOURCE_DATE_EPOCH=0", *argv], "building the layersched wheel", BUILD_TIMEOUT_S
        )
        _pip_target(wheels, [f"layersched=={__version__}"], target)
        tree = TarTree()
        tree.add_tree(target, SITE_PACKAGES)
    tree.add_bytecode(SITE_PACKAGES)
    tree.add_file(LAYERSCHED_BIN, _ENTRY_SCRIPT.encode(), EXECUTABLE_MODE)
    return tree.layer()


@dataclass(frozen=True, slots=True)
class StackImages:
    """The two built images."""

    layersched: BuiltImage
    kube_scheduler: BuiltImage


def _arch_suffix(arch: str) -> str:
    """What names ``arch``'s cache entries and download directories: nothing for amd64
    (the builder's first architecture, whose entries predate the others), ``-arm64``."""
    return "" if arch == LOCK_DEFAULT_ARCH else f"-{arch}"


def build_layersched_image(
    repo_root: Path = REPO_ROOT,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
    arch: str = LOCK_DEFAULT_ARCH,
) -> BuiltImage:
    """The layersched image for ``linux/<arch>`` (see the module docstring): ``arch``'s
    Debian packages and wheels, the same product layer; layers come from the cache when
    they can."""
    say = progress or (lambda _message: None)
    with build_lock(root or cache_root(), say):
        return _build_layersched_image(repo_root, root or cache_root(), say, arch)


def _build_layersched_image(
    repo_root: Path, root: Path, say: Callable[[str], None], arch: str
) -> BuiltImage:
    cache = BuiltLayers(root)
    downloads = root / "images"
    suffix = _arch_suffix(check_arch(arch, "the image's architecture"))
    deb_pins = debian_pins(_read_lock(DEBIAN_LOCK, parse_debian_lock), arch, str(DEBIAN_LOCK))
    wheel_pins = _read_lock(REQUIREMENTS_LOCK, parse_requirements_lock)
    # another architecture's wheels are installed by their tags; the host's as before
    foreign = None if arch == host_arch() else arch

    def debian() -> LayerBlob:
        say(f"fetching and unpacking the Debian packages ({arch})")
        debs = downloads / f"debs{suffix}"
        return debian_layer(deb_pins, fetch_debs(deb_pins, debs, arch=arch))

    def python() -> LayerBlob:
        say(f"fetching and installing the pinned wheels ({arch})")
        wheels = downloads / f"wheels{suffix}"
        fetch_wheels(REQUIREMENTS_LOCK, wheels, arch)
        return python_layer(wheel_pins, wheels, foreign)

    files = tracked_files(repo_root)
    say(f"layer 1/3: debian ({arch})")
    base = cache.layer(
        cache.key(f"debian{suffix}", (f"{p.name}={p.sha256}" for p in deb_pins)), debian
    )
    say(f"layer 2/3: python ({arch})")
    deps = cache.layer(
        cache.key(f"python{suffix}", (f"{p.name}={p.sha256}" for p in wheel_pins)), python
    )
    say("layer 3/3: layersched")
    app = cache.layer(
        cache.key("layersched", [source_hash(repo_root, files), sys.version.split()[0]]),
        lambda: layersched_layer(repo_root, files),
    )
    return build_image(
        [base, deps, app],
        platform=Platform("linux", arch),
        labels={
            TITLE_LABEL: "layersched",
            VERSION_LABEL: __version__,
            # what went in: the locks (each pin's version and sha256) and the wheel's sources
            INPUTS_LABEL_PREFIX + "debian-lock": f"sha256:{_file_sha256(DEBIAN_LOCK)}",
            INPUTS_LABEL_PREFIX + "requirements-lock": f"sha256:{_file_sha256(REQUIREMENTS_LOCK)}",
            INPUTS_LABEL_PREFIX + "sources": f"sha256:{source_hash(repo_root, files)}",
        },
        entrypoint=LAYERSCHED_ENTRYPOINT,
        cmd=LAYERSCHED_CMD,
        env=LAYERSCHED_ENV,
        user=USER,
        working_dir="/",
    )


def build_layersched_index(
    arches: Sequence[str] = IMAGE_ARCHES,
    repo_root: Path = REPO_ROOT,
    root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuiltIndex:
    """The layersched image of each architecture, in one OCI index (the product layer is
    the same blob in each)."""
    images = [build_layersched_image(repo_root, root, progress, arch) for arch in arches]
    return build_index(images, annotations=_index_annotations("layersched", __version__))


def _index_annotations(title: str, version: str) -> dict[str, str]:
    return {TITLE_LABEL: title, VERSION_LABEL: version}


#: Labels of the kube-scheduler image: what the binary's Go build info says went in.
GO_VERSION_LABEL = INPUTS_LABEL_PREFIX + "go-version"
GO_BUILD_LABEL = INPUTS_LABEL_PREFIX + "go-build"
GO_MODULES_LABEL = INPUTS_LABEL_PREFIX + "go-modules"
KUBERNETES_MODULE_LABEL = INPUTS_LABEL_PREFIX + "kubernetes-module"
KUBERNETES_GO_MODULE = "k8s.io/kubernetes"


def kube_scheduler_labels(info: GoBuildInfo) -> dict[str, str]:
    """The image's record of its inputs, read from its binary: the Go version, the build
    settings (``CGO_ENABLED``, ``GOARCH``, ``-trimpath``...), the Kubernetes release
    compiled with its go.sum checksum, and one digest over every linked module's path,
    version and checksum (:attr:`GoBuildInfo.deps_sha256`; ``go version -m`` on the
    binary lists them)."""
    kubernetes = info.dep(KUBERNETES_GO_MODULE)
    labels = {
        GO_VERSION_LABEL: info.go_version,
        GO_BUILD_LABEL: " ".join(f"{key}={value}" for key, value in info.settings),
        GO_MODULES_LABEL: info.deps_sha256,
    }
    if kubernetes is not None:
        labels[KUBERNETES_MODULE_LABEL] = kubernetes.line()
    return labels


def build_kube_scheduler_image(
    binary: Path,
    kubernetes_version: str,
    arch: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> BuiltImage:
    """The kube-scheduler image for ``linux/<arch>`` (default: the binary's own
    architecture): ``binary``, which must be a static ELF of that architecture, run as
    user 65532, its inputs recorded in labels (:func:`kube_scheduler_labels`, and
    ``labels``)."""
    what = f"the kube-scheduler binary {binary}"
    try:
        content = binary.read_bytes()
    except OSError as err:
        raise InputError(f"reading {what}: {err}; build it with `make kubernetes`") from err
    facts = elf_facts(content, what)
    arch = arch or facts.machine
    if facts.machine != check_arch(arch, "the image's architecture"):
        raise InputError(
            f"{what} is built for {facts.machine}, not {arch}: build it with GOARCH={arch} "
            f"(.venv/bin/python scripts/kubernetes_build.py --arch {arch})"
        )
    if not facts.static:
        raise InputError(
            f"{what} needs a dynamic loader, which the image has not: build it with "
            "CGO_ENABLED=0 (as make kubernetes does)"
        )
    tree = TarTree()
    tree.add_file(KUBE_SCHEDULER_BIN, content, EXECUTABLE_MODE)
    _base_files(tree)
    return build_image(
        [tree.layer()],
        platform=Platform("linux", arch),
        labels={
            TITLE_LABEL: "kube-scheduler",
            VERSION_LABEL: kubernetes_version,
            **kube_scheduler_labels(go_build_info(content, what)),
            **(labels or {}),
        },
        entrypoint=(f"/{KUBE_SCHEDULER_BIN}",),
        env=KUBE_SCHEDULER_ENV,
        user=USER,
        working_dir="/",
    )


def build_kube_scheduler_index(images: Sequence[BuiltImage], kubernetes_version: str) -> BuiltIndex:
    """One kube-scheduler image per architecture (:func:`build_kube_scheduler_image`), in
    one OCI index."""
    return build_index(images, annotations=_index_annotations("kube-scheduler", kubernetes_version))


def image_size_bytes(image: BuiltImage) -> int:
    """Compressed size: the layers, the config and the manifest, as a registry stores them."""
    return (
        sum(layer.size_bytes for layer in image.layers)
        + len(image.config_bytes)
        + len(image.manifest_bytes)
    )


def unpack(image: BuiltImage, directory: Path) -> Iterator[str]:
    """Unpack ``image``'s layers (base first) into ``directory``; yields each layer digest."""
    for layer in image.layers:
        blob = image.blobs[layer.digest]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as tar:
            tar.extractall(directory, filter="tar")
        yield layer.digest
