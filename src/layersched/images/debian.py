"""The layersched image's Debian layer: the files of the Debian bookworm packages in
``install/images/layersched/debian.lock`` (Python 3.11 and the C libraries it and the wheels
load), fetched with ``apt-get download`` (apt checks them against the signed archive
index: this machine's apt, or a private one for another architecture or a host that is no
bookworm), or from Debian's snapshot archive once the mirrors dropped the version
(:func:`snapshot_deb`), and checked against the lock's sha256; plus the base files
(:func:`layersched.images.rootfs.base_files`). No maintainer script runs: this is a root
filesystem to run one program, like a distroless base."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import httpx

from layersched.core.errors import ImageBuildError
from layersched.images.commands import BUILD_TIMEOUT_S, FETCH_TIMEOUT_S, run
from layersched.images.locks import DEBIAN_LOCK, LOCK_DEFAULT_ARCH, Pin, file_sha256
from layersched.images.oci import LayerBlob
from layersched.images.rootfs import PYTHON, TarTree, base_files

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
        return run(["dpkg", "--print-architecture"], "asking dpkg its architecture", 30).strip()
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
        run(["apt-get", "download", *names], what, FETCH_TIMEOUT_S, cwd=directory)
        return
    options = private_apt_options(directory / PRIVATE_APT_DIR, arch)
    where = f"Debian {DEBIAN_CODENAME} for {arch}"
    run(["apt-get", "-q", *options, "update"], f"apt-get update ({where})", FETCH_TIMEOUT_S)
    names = [f"{p.name}:{arch}={p.version}" for p in missing]
    what = f"apt-get download ({where}) into {directory}"
    run(["apt-get", "-q", *options, "download", *names], what, FETCH_TIMEOUT_S, cwd=directory)


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
        return [p for p in pins if p.name not in have or file_sha256(have[p.name]) != p.sha256]

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
        if path is None or file_sha256(path) != pin.sha256:
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
    base_files(tree)
    return tree.layer()
