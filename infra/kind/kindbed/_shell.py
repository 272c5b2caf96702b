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
