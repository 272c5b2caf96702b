"""A reader that stops early (``layersched ... | head``) ends the CLI quietly: no traceback,
the shell's SIGPIPE status."""

from __future__ import annotations

import os
import subprocess
import sys

from layersched.cli.main import EXIT_BROKEN_PIPE

#: The CLI printing the CRD and RBAC, its stdout flushed at every line as a terminal's is,
#: so the first write meets the closed pipe inside the CLI, not at the interpreter's exit.
_CLI_WRITING_AT_ONCE = (
    "import sys; sys.stdout.reconfigure(line_buffering=True); "
    "from layersched.cli.main import main; sys.exit(main(['inventory', 'manifests']))"
)


def test_a_closed_stdout_ends_the_cli_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CLI_WRITING_AT_ONCE],
            stdout=write_end,
            stderr=subprocess.PIPE,
            check=False,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.stderr.decode() == ""
    assert done.returncode == EXIT_BROKEN_PIPE
