"""The image builder's external commands (apt-get, dpkg-deb, pip, git, a Python child):
each run with a timeout, its failure one :class:`ImageBuildError` that ends with the
command's last lines of output."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from layersched.core.errors import ImageBuildError

#: apt-get download and pip download each take seconds; a stuck mirror, minutes.
FETCH_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 300.0


def run(argv: Sequence[str], what: str, timeout_s: float, cwd: Path | None = None) -> str:
    """``argv``'s standard output; an ImageBuildError naming ``what`` when it fails or
    outlasts ``timeout_s``."""
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
