"""Shell command strings for ``pulumi_command`` (which always runs ``/bin/sh -c``).

Every word is quoted with :func:`shlex.join`, so configuration values can never
turn into shell syntax.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def sh(*argvs: Sequence[str], tolerate_failure: bool = False) -> str:
    """Commands run in order, stopping at the first failure (or ignoring failures)."""
    joiner = " ; " if tolerate_failure else " && "
    return joiner.join(shlex.join(list(argv)) for argv in argvs)


#: Where to get a given kind release (the error says how to fix a mismatch).
KIND_INSTALL_URL = "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"


def require_kind_version(kind_bin: str, version: str) -> str:
    """A command that fails, saying how to fix it, unless ``kind version`` reports ``version``.

    ``kind version`` prints ``kind v0.23.0 go1.21.10 linux/amd64``; the release
    is the second word. What kind printed reaches the message through ``printf
    %s`` only, never as shell syntax.
    """
    fix = (
        f"this stack needs kind {version} (config kindVersion): install it from "
        f"{KIND_INSTALL_URL} and set kindBin to its absolute path, or "
        "`pulumi config set kindVersion <version>` to the release you have. Found:"
    )
    return (
        f"found=$({shlex.join([kind_bin, 'version'])} 2>&1) || true; "
        f'case "$found" in {shlex.quote(f"kind {version} ")}*) ;; '
        f"*) printf '%s %s\\n' {shlex.quote(fix)} \"${{found:-nothing}}\" >&2; exit 1 ;; esac"
    )
