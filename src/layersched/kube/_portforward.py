"""``kubectl port-forward`` to one pod port, for as long as a ``with`` block lasts.

Why kubectl's port-forward and not the API server's pod proxy: the extender's debug
endpoints are for its own pod (the deployed NetworkPolicy admits only the scheduler's
metrics port, and the endpoints may listen on loopback only); a port-forward reaches
the port inside the pod's network namespace through the kubelet, needing nothing exposed
and only the ``pods/portforward`` permission, and kubectl brings every way a kubeconfig
authenticates (exec plugins included). The forward listens on 127.0.0.1, on a port the
kernel picks, and ends with the block (the process is this one's own child, stopped by
its pid).
"""

from __future__ import annotations

import contextlib
import re
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from layersched.core.errors import InputError, KubeError

#: kubectl connects and prints where it listens within a second or two; a slow API
#: server or kubelet gets this long.
FORWARD_TIMEOUT_S = 15.0
#: How long a stopped kubectl gets to exit before it is killed.
STOP_TIMEOUT_S = 5.0
#: What kubectl prints once it listens (``Forwarding from 127.0.0.1:41235 -> 8888``).
_FORWARDING = re.compile(r"^Forwarding from 127\.0\.0\.1:(?P<port>\d+) -> \d+")
#: Characters of kubectl's error output quoted in a message.
MAX_ERROR_CHARS = 400


def find_kubectl(given: str | None, alternative: str = "") -> str:
    """``given`` (a path or a name on PATH), else ``kubectl`` on PATH; InputError saying
    what to do when there is none (``alternative``: another way, e.g. a CLI option)."""
    if given is not None:
        found = shutil.which(given) if "/" not in given else given
        if found is None or not Path(found).is_file():
            raise InputError(f"--kubectl {given}: no such program: give the path of a kubectl")
        return found
    found = shutil.which("kubectl")
    if found is None:
        raise InputError(
            "no kubectl on PATH: the extender's pod is reached through kubectl port-forward; "
            "install kubectl, pass --kubectl PATH" + (f", or {alternative}" if alternative else "")
        )
    return found


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _listening_port(process: subprocess.Popen[str], what: str, timeout_s: float) -> int:
    """The local port kubectl says it forwards from; KubeError if it exits or says
    nothing in time."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                break
            line = process.stdout.readline()
            if not line:  # kubectl exited
                break
            if match := _FORWARDING.match(line):
                return int(match["port"])
    _stop(process)
    error = process.stderr.read() if process.stderr is not None else ""
    detail = " ".join(error.split())[:MAX_ERROR_CHARS] or f"no answer within {timeout_s:.0f} s"
    raise KubeError(
        f"kubectl port-forward to {what} failed: {detail} (can this identity create "
        "pods/portforward? is the pod running?)"
    )


@contextlib.contextmanager
def port_forward(
    kubectl: str,
    namespace: str,
    pod: str,
    port: int,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    timeout_s: float = FORWARD_TIMEOUT_S,
) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` forwarded to ``port`` of pod ``namespace/pod`` for the
    ``with`` block."""
    argv = [kubectl]
    if kubeconfig is not None:
        argv += ["--kubeconfig", kubeconfig]
    if context is not None:
        argv += ["--context", context]
    argv += ["--namespace", namespace, "port-forward", "--address", "127.0.0.1"]
    argv += [f"pod/{pod}", f":{port}"]
    what = f"pod {namespace}/{pod} port {port}"
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as err:
        raise KubeError(f"cannot run {kubectl} ({err.strerror}): check --kubectl") from None
    try:
        local = _listening_port(process, what, timeout_s)
        yield f"http://127.0.0.1:{local}"
    finally:
        _stop(process)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
