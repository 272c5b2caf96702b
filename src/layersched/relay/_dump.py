"""Dump mode: which calls are written, how much of each, and the rotated file.

Selectors follow seed 002's ``-dump 'reset,full:.*'``, with globs for its
regular expressions: a comma-separated list read left to right, each item
``LEVEL:GLOB`` or ``reset``. A GLOB is a method name with ``*`` (any run of
characters) and ``?`` (one character) as wildcards, made only of letters,
digits, ``_``, ``/``, ``*`` and ``?``; it matches the method's name in full
(``PullImage``, or ``ImageService/PullImage``). Anything else (``.*``,
``(Create)|(Run)``) is refused with the glob to write instead: a free regular
expression is matched on the relay's event loop for every call, and one like
``(.*)*x`` does not finish on a long name. A glob compiles to a pattern whose
wildcards never backtrack (``fnmatch``'s atomic groups), so matching is linear
in the name's length. A call's level is that of the **last** item that
matches; ``reset`` forgets every item before it; a call no item matches is not
dumped. Levels:

``off``
    nothing;
``name``
    one line per finished call: method, duration, status code;
``full``
    a ``request`` line when the call arrives and a ``response`` (or
    ``error``) line with the decoded messages when it ends. Calls that carry
    secrets (:func:`layersched.relay._redact.is_sensitive`) are dumped at
    most at ``name`` unless the :class:`Dumper` is allowed them (the relay's
    ``--allow-sensitive-dumps``); credentials are redacted even then.

The file holds JSON lines (one object per line, keys in a fixed order, so
``grep``/``less`` read it and ``jq`` parses it). It is rotated like
``logrotate``'s ``size`` mode: when a line would take it past ``max_bytes`` it
becomes ``FILE.1`` (``FILE.1`` becomes ``FILE.2``, …, the oldest beyond
``backups`` is deleted), so the dump never takes more than
``(backups + 1) × max_bytes``. Each file is created with mode 0600 whatever
the umask (an existing one is set to 0600 when opened), and a directory the
dump creates with 0700.
"""

from __future__ import annotations

import enum
import fnmatch
import json
import logging
import os
import re
import stat
import string
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from layersched.core.errors import InputError
from layersched.relay._methods import CRI_PACKAGES, Method, parse_method
from layersched.relay._redact import SENSITIVE_METHODS, is_sensitive

_log = logging.getLogger(__name__)

#: Default size of one dump file before it is rotated.
DEFAULT_DUMP_MAX_BYTES = 16 * 1024 * 1024
#: Default number of rotated files kept next to the live one.
DEFAULT_DUMP_BACKUPS = 3
#: Default cap on one decoded message in a ``full`` line: ListImages on a busy
#: node is hundreds of kilobytes, and one line should stay readable.
DEFAULT_DUMP_MESSAGE_MAX_BYTES = 64 * 1024
RESET = "reset"
#: What a glob may be made of: method names are letters and digits (``_`` and ``/``
#: between service and method), and the wildcards are ``*`` and ``?``.
GLOB_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_/*?")
#: A selector list is a handful of items; these bound what a ConfigMap can make the relay
#: compile and match on every call.
MAX_SELECTOR_ITEMS = 64
MAX_GLOB_CHARS = 128
#: A dump file holds call records, credentials redacted but arguments and outputs not:
#: owner only, whatever the umask.
DUMP_FILE_MODE = 0o600
DUMP_DIR_MODE = 0o700


class DumpLevel(enum.IntEnum):
    """How much of a call is written."""

    OFF = 0
    NAME = 1
    FULL = 2


@dataclass(frozen=True, slots=True)
class _Rule:
    level: DumpLevel
    glob: str
    #: ``fnmatch.translate``'s pattern: its wildcards are atomic groups, which never backtrack.
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

    def held_back(self) -> list[str]:
        """The known sensitive methods these selectors ask to dump in full (what needs
        ``--allow-sensitive-dumps``), as ``Service/Method``."""
        return sorted(
            short
            for short in SENSITIVE_METHODS
            if self.level(parse_method(f"/{CRI_PACKAGES[-1]}.{short}")) >= DumpLevel.FULL
        )


def _glob_for(pattern: str) -> str:
    """The glob a regular expression most likely meant (``.*`` -> ``*``)."""
    guess = pattern.replace(".*", "*").replace(".+", "?*").replace(".", "?")
    return guess.strip("^$")


def _quoted(item: str) -> str:
    """``item`` for a message: a ConfigMap value may be a megabyte long."""
    return repr(item) if len(item) <= MAX_GLOB_CHARS else f"{item[:MAX_GLOB_CHARS]!r}…"


def _compile_glob(item: str, glob: str, where: str) -> re.Pattern[str]:
    if len(glob) > MAX_GLOB_CHARS:
        raise InputError(
            f"{where}: {_quoted(item)}: a glob has at most {MAX_GLOB_CHARS} characters"
        )
    bad = sorted(set(glob) - GLOB_CHARACTERS)
    if bad:
        guess = _glob_for(glob)
        fix = (
            f"write {item.partition(':')[0]}:{guess}"
            if set(guess) <= GLOB_CHARACTERS
            else "write one item per alternative, e.g. 'full:Create*,full:Remove*'"
        )
        raise InputError(
            f"{where}: {_quoted(item)} looks like a regular expression ({''.join(bad)!r} is not "
            "allowed): selectors are method names or globs (letters, digits, _, /, and the "
            f"wildcards * and ?), not regular expressions: {fix}"
        )
    return re.compile(fnmatch.translate(glob))


def parse_selectors(text: str, where: str = "--dump") -> DumpSelector:
    """Parse ``reset,name:*,full:PullImage``-style selectors; errors name ``where`` (the
    flag, or the ConfigMap and its key) and the bad item, and say what to write instead."""
    rules: list[_Rule] = []
    levels = ", ".join(level.name.lower() for level in DumpLevel)
    items = [raw.strip() for raw in text.split(",") if raw.strip()]
    if len(items) > MAX_SELECTOR_ITEMS:
        raise InputError(
            f"{where}: {len(items)} items; at most {MAX_SELECTOR_ITEMS} (use 'reset' and globs)"
        )
    for item in items:
        if item == RESET:
            rules.clear()
            continue
        name, sep, glob = item.partition(":")
        try:
            level = DumpLevel[name.strip().upper()]
        except KeyError:
            level = None
        if not sep or level is None:
            raise InputError(
                f"{where}: {_quoted(item)} is not LEVEL:GLOB or 'reset' (LEVEL is one of {levels}; "
                "example: 'reset,name:*,full:PullImage')"
            )
        glob = glob.strip()
        rules.append(_Rule(level, glob, _compile_glob(item, glob, where)))
    return DumpSelector(text, tuple(rules))


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="microseconds")


def _private_directory(directory: Path) -> None:
    """Create ``directory`` and its missing parents with mode 0700 (whatever the umask)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(mode=DUMP_DIR_MODE)
        created.chmod(DUMP_DIR_MODE)  # mkdir's mode is cut by the umask
    mode = stat.S_IMODE(directory.stat().st_mode) if not missing else DUMP_DIR_MODE
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        _log.warning(
            "the dump directory %s has mode %04o: every user can list it%s; the dump files "
            "are 0600, but give them a directory of their own (chmod 700 %s)",
            directory,
            mode,
            " and replace files in it" if mode & stat.S_IWOTH and not mode & stat.S_ISVTX else "",
            directory,
        )


def _open_private(path: Path) -> int:
    """Open ``path`` to append, created with mode 0600 (an existing file is set to 0600);
    a symbolic link or anything but a regular file is refused."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(path, flags, DUMP_FILE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        os.fchmod(fd, DUMP_FILE_MODE)  # os.open's mode is cut by the umask, and not applied
    except OSError:  # to a file that exists
        os.close(fd)
        raise
    return fd


class DumpFile:
    """Append-only JSON-lines file with size-based rotation, mode 0600; thread-safe.

    A write that fails (a full disk) raises OSError and leaves the file usable: a
    line cut short by it is ended before the next one, and a file that could
    not be reopened after a rotation is opened again by the next write.
    """

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
        #: A write stopped inside a line: the next write ends that line first.
        self._cut_short = False
        try:
            _private_directory(path.parent)
            self._fd = _open_private(path)
        except OSError as err:
            raise InputError(
                f"opening the dump file {path}: {err.strerror or err}: choose a writable "
                "--dump-file (a regular file, not a symbolic link)"
            ) from err
        self._size = os.fstat(self._fd).st_size

    def write(self, record: dict[str, Any]) -> None:
        """Append one record as one line, rotating first if it would not fit; OSError if
        the disk refuses it."""
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                self._fd = _open_private(self.path)
                self._size = os.fstat(self._fd).st_size
            ending = b"\n" if self._cut_short else b""  # of a line a failed write cut short
            if self._size and self._size + len(ending) + len(line) > self.max_bytes:
                self._rotate()
                ending = b""
            self._write_all(ending + line)
            self._cut_short = False

    def _write_all(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            try:
                written = os.write(self._fd, view)
            except OSError:
                self._cut_short = len(view) < len(line)
                raise
            self._size += written
            view = view[written:]

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        if self.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._fd = _open_private(self.path)
        self._size = 0
        self._cut_short = False
        self.rotations += 1

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class Dumper:
    """Writes the selected calls to a :class:`DumpFile`.

    ``allow_sensitive`` (the relay's ``--allow-sensitive-dumps``) lets calls that
    carry secrets be dumped in full; without it they get at most ``name``,
    whatever the selectors say.
    """

    def __init__(
        self,
        selector: DumpSelector,
        file: DumpFile,
        message_max_bytes: int = DEFAULT_DUMP_MESSAGE_MAX_BYTES,
        *,
        allow_sensitive: bool = False,
    ) -> None:
        self.selector = selector
        self.file = file
        self.message_max_bytes = message_max_bytes
        self.allow_sensitive = allow_sensitive

    def level(self, method: Method) -> DumpLevel:
        """How much of a call of ``method`` is written."""
        level = self.selector.level(method)
        if level > DumpLevel.NAME and not self.allow_sensitive and is_sensitive(method):
            return DumpLevel.NAME
        return level

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
