"""The layersched image's lock files: ``install/images/layersched/debian.lock`` (every Debian
package, per architecture, by sha256) and ``requirements.lock`` (every wheel, by its
hashes), parsed into :class:`Pin`s with errors that name the file and line."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from layersched.builds import REPO_ROOT
from layersched.core.errors import InputError

IMAGES_DIR = REPO_ROOT / "install" / "images" / "layersched"
DEBIAN_LOCK = IMAGES_DIR / "debian.lock"
REQUIREMENTS_LOCK = IMAGES_DIR / "requirements.lock"


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


def read_lock(path: Path, parse: Callable[[str, str], list[Pin]]) -> list[Pin]:
    try:
        return parse(path.read_text(encoding="utf-8"), str(path))
    except OSError as err:
        raise InputError(f"reading the lock file {path}: {err}") from err


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
