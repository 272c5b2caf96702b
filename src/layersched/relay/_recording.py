"""What the relay records of each call it forwards: its metrics (calls by code, durations)
and, with a dump configured, its request and answer at the method's level. **The dump
never fails a call**: a dump that cannot be written (a full disk, a file removed under it)
is counted in ``layersched_relay_dump_failures_total`` by errno and logged once a minute at
most, and the call goes on as if no dump were configured.
"""

from __future__ import annotations

import errno
import logging
import threading
import time

import grpc

from layersched.relay._decode import decode
from layersched.relay._dump import Dumper, DumpLevel
from layersched.relay._methods import Method
from layersched.relay._metrics import RelayMetrics

_log = logging.getLogger(__name__)

#: A full disk fails every call's dump: one log line per this long, with the count.
DUMP_FAILURE_LOG_INTERVAL_S = 60.0


def _failure_label(err: Exception) -> str:
    """A bounded metric label for a dump failure: the errno's name (``ENOSPC``) or
    ``other``."""
    if isinstance(err, OSError) and err.errno is not None:
        return errno.errorcode.get(err.errno, "other")
    return "other"


class CallRecorder:
    """A relay's record of its calls: ``metrics``, and ``dumper``'s file when given."""

    def __init__(self, metrics: RelayMetrics, dumper: Dumper | None) -> None:
        self.metrics = metrics
        self.dumper = dumper
        self._lock = threading.Lock()
        self._unlogged = 0
        self._logged_at: float | None = None

    def _dump_failed(self, method: Method, err: Exception) -> None:
        """Count a dump that could not be written; log it, at most once a minute."""
        self.metrics.dump_failures.labels(_failure_label(err)).inc()
        now = time.monotonic()
        with self._lock:
            self._unlogged += 1
            logged_at = self._logged_at
            if logged_at is not None and now - logged_at < DUMP_FAILURE_LOG_INTERVAL_S:
                return
            count, self._unlogged = self._unlogged, 0
            self._logged_at = now
        _log.warning(
            "dumping %s: %s (%d dump write(s) failed since the last such line; the calls "
            "themselves went through): free space for the dump file or choose another "
            "--dump-file",
            method.path,
            err,
            count,
        )

    def request(self, call_id: int, method: Method, request: bytes | None) -> DumpLevel:
        """Dump a call's request (at the method's level); the level its answer is dumped at."""
        dumper = self.dumper
        if dumper is None:
            return DumpLevel.OFF
        level = dumper.level(method)
        if level >= DumpLevel.FULL:
            try:
                message = decode(method, "Request", request) if request is not None else "(stream)"
                dumper.request(call_id, method, message)
            except Exception as err:  # noqa: BLE001 (a dump never fails the call it records)
                self._dump_failed(method, err)
        return level

    def finished(
        self,
        call_id: int,
        level: DumpLevel,
        method: Method,
        code: grpc.StatusCode,
        details: str,
        total_s: float,
        response: bytes | None,
        relay_s: float | None = None,
    ) -> None:
        """Count and time a finished call; dump its answer at ``level``."""
        self.metrics.calls.labels(method.version, method.label, code.name).inc()
        self.metrics.call_duration_s.labels(method.label).observe(total_s)
        dumper = self.dumper
        if dumper is None or level == DumpLevel.OFF:
            return
        try:
            decoded = None
            if level >= DumpLevel.FULL and code == grpc.StatusCode.OK:
                decoded = (
                    decode(method, "Response", response) if response is not None else "(stream)"
                )
            dumper.finished(call_id, level, method, code.name, total_s, decoded, details, relay_s)
        except Exception as err:  # noqa: BLE001 (a dump never fails the call it records)
            self._dump_failed(method, err)
