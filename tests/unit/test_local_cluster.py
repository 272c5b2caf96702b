"""The local testbed's cluster backend: what it reads from the testbed's own files.

The registry access log (bytes per pull, counted once the log is quiet), and the score
lines the real kube-scheduler and the extender write.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from layersched.testbed.cluster import extender_decision, plugin_scores
from layersched.testbed.local._cluster import RegistryAccessLog, extender_requests, lines_since


# ------------------------------------------------------------------- access log
class _LateLog(RegistryAccessLog):
    """A log the registry appends to a little after the pull returned, a line per look.

    Lines appear only at looks at least ``delay_s`` after creation, as when the
    registry finishes writing after the client saw the response; then ``lines`` of
    them, one per look.
    """

    def __init__(self, path: Path, delay_s: float, lines: list[str], **kwargs: float) -> None:
        super().__init__(path, **kwargs)
        self.start = time.monotonic()
        self.delay_s = delay_s
        self.pending = list(lines)

    def mark(self) -> int:
        if self.pending and time.monotonic() - self.start >= self.delay_s:
            with self.path.open("a") as f:
                f.write(self.pending.pop(0))
        return super().mark()


def test_bytes_since_waits_for_lines_written_after_the_pull(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    lines = [
        f'10.0.0.2 - - [t] "GET /v2/a/blobs/sha256:{i} HTTP/1.1" 200 1000 "" "c"\n'
        for i in range(3)
    ]
    log = _LateLog(path, delay_s=0.05, lines=lines, settle_poll_s=0.1, settle_timeout_s=5.0)
    mark = log.mark()  # t=0: nothing yet
    # Two looks microseconds apart would agree on an empty log and count 0 B. Waiting
    # until the log stays put for a whole poll counts all three lines: 3 x 1000 B.
    assert log.bytes_since(mark, "10.0.0.2") == 3000


def test_bytes_since_gives_up_on_a_log_that_keeps_growing(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    line = '10.0.0.2 - - [t] "GET /v2/ HTTP/1.1" 200 10 "" "c"\n'
    log = _LateLog(path, delay_s=0, lines=[line] * 10_000, settle_poll_s=0.01, settle_timeout_s=0.2)
    started = time.monotonic()
    assert not log.wait_settled()
    # Bounded by the named timeout (plus one poll and scheduling slack), then it counts.
    assert time.monotonic() - started < 0.2 + 1.0
    assert log.bytes_since(0, "10.0.0.2") > 0


def test_bytes_since_with_no_log_yet_is_zero(tmp_path: Path) -> None:
    log = RegistryAccessLog(tmp_path / "missing.log", settle_poll_s=0.001)
    assert log.mark() == 0
    assert log.bytes_since(0, "10.0.0.2") == 0
