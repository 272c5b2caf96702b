"""Real ``layersched extender`` processes for the harness, one per strategy.

Each process's pid is recorded in ``extender-<pid>.pid`` in the testbed's state dir
while it runs, so that ``layersched testbed down`` stops it even when the
``layersched scenario`` that started it was killed (SIGKILL leaves no chance to clean up).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import tenacity

from layersched.core.errors import TestbedError

LOOPBACK = "127.0.0.1"
#: The extender answers /healthz within a second of starting; allow for a loaded box.
READY_TIMEOUT_S = 30.0
READY_POLL_S = 0.1
STOP_TIMEOUT_S = 10.0
#: What every extender's command line contains; teardown checks a pidfile's process
#: against it before signalling (a pid may have been reused).
EXTENDER_COMMAND = ("-m", "layersched.cli.main", "extender")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def extender_process(
    strategy: str,
    log_dir: Path,
    extra_args: Sequence[str] = (),
    pid_dir: Path | None = None,
) -> Iterator[str]:
    """Run ``layersched extender`` for ``strategy``; yield its base URL until exit.

    With ``pid_dir``, the process's pid is kept in ``pid_dir/extender-<pid>.pid``
    while it runs (see the module docstring).
    """
    port = _free_port()
    url = f"http://{LOOPBACK}:{port}"
    argv = [sys.executable, *EXTENDER_COMMAND, "--host", LOOPBACK]
    argv += ["--port", str(port), "--strategy", strategy, *extra_args]
    log_path = log_dir / f"extender-{strategy}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if pid_dir is not None:
        pid_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
        pidfile = None if pid_dir is None else pid_dir / f"extender-{proc.pid}.pid"
        try:
            if pidfile is not None:
                pidfile.write_text(f"{proc.pid}\n", encoding="ascii")
            _wait_ready(url, proc, log_path)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if pidfile is not None:
                pidfile.unlink(missing_ok=True)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    @tenacity.retry(
        stop=tenacity.stop_after_delay(READY_TIMEOUT_S),
        wait=tenacity.wait_fixed(READY_POLL_S),
        retry=tenacity.retry_if_exception_type(AssertionError),
        reraise=True,
    )
    def healthy() -> None:
        if proc.poll() is not None:
            raise TestbedError(
                f"extender exited with {proc.returncode} before it was ready: see {log_path}"
            )
        try:
            status = httpx.get(f"{url}/healthz", timeout=1.0).status_code
        except httpx.HTTPError as err:
            raise AssertionError(f"{url}/healthz: {err}") from err
        assert status == httpx.codes.OK, f"{url}/healthz answered {status}"

    try:
        healthy()
    except AssertionError as err:
        raise TestbedError(
            f"extender at {url} never became ready ({err}): see {log_path}"
        ) from None
