"""Dump mode: which calls are written, how much of each, and the rotated file.

Selectors follow seed 002's ``-dump 'reset,full:.*'``: a comma-separated list
read left to right, each item ``LEVEL:REGEX`` or ``reset``. A call's level is
that of the **last** item whose regular expression matches the method's name
in full (``PullImage``, or ``ImageService/PullImage``); ``reset`` forgets
every item before it; a call no item matches is not dumped. Levels:

``off``
    nothing;
``name``
    one line per finished call: method, duration, status code;
``full``
    a ``request`` line when the call arrives and a ``response`` (or
    ``error``) line with the decoded messages when it ends.

The file holds JSON lines (one object per line, keys in a fixed order, so
``grep``/``less`` read it and ``jq`` parses it). It is rotated like
``logrotate``'s ``size`` mode: when a line would take it past ``max_bytes`` it
becomes ``FILE.1`` (``FILE.1`` becomes ``FILE.2``, …, the oldest beyond
``backups`` is deleted), so the dump never takes more than
``(backups + 1) × max_bytes``.
"""

from __future__ import annotations

import enum
import json
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layersched.core.errors import InputError
from layersched.relay._methods import Method

#: Default size of one dump file before it is rotated.
DEFAULT_DUMP_MAX_BYTES = 16 * 1024 * 1024
#: Default number of rotated files kept next to the live one.
DEFAULT_DUMP_BACKUPS = 3
#: Default cap on one decoded message in a ``full`` line: ListImages on a busy
#: node is hundreds of kilobytes, and one line should stay readable.
DEFAULT_DUMP_MESSAGE_MAX_BYTES = 64 * 1024
RESET = "reset"


class DumpLevel(enum.IntEnum):
    """How much of a call is written."""

    OFF = 0
    NAME = 1
    FULL = 2


@dataclass(frozen=True, slots=True)
class _Rule:
    level: DumpLevel
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class DumpSelector:
    """Parsed ``--dump`` selectors; :meth:`level` answers per method."""

    text: str
    rules: tuple[_Rule, ...]

    def level(self, method: Method) -> DumpLevel:
        """The level of the last rule matching the method's name (``off`` if none)."""
        for rule in reversed(self.rules):
            if rule.pattern.fullmatch(method.name) or rule.pattern.fullmatch(method.short):
                return rule.level
        return DumpLevel.OFF

    @property
    def enabled(self) -> bool:
        """Whether any rule can dump anything."""
        return any(rule.level > DumpLevel.OFF for rule in self.rules)


def parse_selectors(text: str, where: str = "--dump") -> DumpSelector:
    """Parse ``reset,full:.*``-style selectors; errors name ``where`` and the bad item."""
    rules: list[_Rule] = []
    levels = ", ".join(level.name.lower() for level in DumpLevel)
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item == RESET:
            rules.clear()
            continue
        name, sep, regex = item.partition(":")
        try:
            level = DumpLevel[name.strip().upper()]
        except KeyError:
            level = None
        if not sep or level is None:
            raise InputError(
                f"{where}: {item!r} is not LEVEL:REGEX or 'reset' (LEVEL is one of {levels}; "
                "example: 'reset,name:.*,full:PullImage')"
            )
        try:
            pattern = re.compile(regex)
        except re.error as err:
            raise InputError(f"{where}: {item!r}: bad regular expression: {err}") from err
        rules.append(_Rule(level, pattern))
    return DumpSelector(text, tuple(rules))


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="microseconds")


class DumpFile:
    """Append-only JSON-lines file with size-based rotation; thread-safe."""

    def __init__(
        self,
        path: Path,
        max_bytes: int = DEFAULT_DUMP_MAX_BYTES,
        backups: int = DEFAULT_DUMP_BACKUPS,
    ) -> None:
        if max_bytes <= 0:
            raise InputError(f"dump max bytes {max_bytes}: must be positive")
        if backups < 0:
            raise InputError(f"dump backups {backups}: must be 0 or more")
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.rotations = 0
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("ab")
        except OSError as err:
            raise InputError(
                f"opening the dump file {path}: {err.strerror}: choose a writable --dump-file"
            ) from err
        self._size = self._file.tell()

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line, rotating first if it would not fit."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._size and self._size + len(line) > self.max_bytes:
                self._rotate()
            self._file.write(line)
            self._file.flush()
            self._size += len(line)

    def _rotate(self) -> None:
        self._file.close()
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._file = self.path.open("ab")
        self._size = 0
        self.rotations += 1

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._file.close()


class Dumper:
    """Writes the selected calls to a :class:`DumpFile`."""

    def __init__(
        self,
        selector: DumpSelector,
        file: DumpFile,
        message_max_bytes: int = DEFAULT_DUMP_MESSAGE_MAX_BYTES,
    ) -> None:
        self.selector = selector
        self.file = file
        self.message_max_bytes = message_max_bytes

    def request(self, call_id: int, method: Method, message: Any) -> None:
        """A ``full`` call arrived: its request."""
        self.file.write(
            {
                "time": _now(),
                "call": call_id,
                "event": "request",
                "method": method.path,
                "request": self._bounded(message),
            }
        )

    def finished(
        self,
        call_id: int,
        level: DumpLevel,
        method: Method,
        code: str,
        duration_s: float,
        response: Any = None,
        details: str = "",
        relay_s: float | None = None,
    ) -> None:
        """A call ended; ``response`` is written at ``full`` level only; ``relay_s`` is
        the part of ``duration_s`` spent in the relay itself (unary calls)."""
        record: dict[str, Any] = {
            "time": _now(),
            "call": call_id,
            "event": "response" if code == "OK" else "error",
            "method": method.path,
            "code": code,
            "duration_s": round(duration_s, 6),
        }
        if relay_s is not None:
            record["relay_s"] = round(relay_s, 6)
        if details:
            record["details"] = details
        if level >= DumpLevel.FULL and code == "OK":
            record["response"] = self._bounded(response)
        self.file.write(record)

    def _bounded(self, message: Any) -> Any:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        if len(text) <= self.message_max_bytes:
            return message
        return {"truncated": True, "size_bytes": len(text), "head": text[: self.message_max_bytes]}
