"""Log configuration of every command: ``-v``, ``--log-level`` and ``--log-format text|json``.

Text lines keep the layout the testbed and operators grep
(``LEVEL logger: message``) behind an ISO-8601 timestamp. JSON lines are one
object each, ``{"time", "level", "logger", "message"}`` (plus ``"exception"``
with the traceback when there is one), for log collectors that parse JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime

#: Accepted ``--log-format`` values.
LOG_FORMATS = ("text", "json")
#: Accepted ``--log-level`` values, most verbose first.
LOG_LEVELS = ("debug", "info", "warning", "error")
#: ``-v`` counts: none = warning, ``-v`` = info, ``-vv`` = debug.
VERBOSITY_LEVELS = (logging.WARNING, logging.INFO, logging.DEBUG)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _iso8601(created_s: float) -> str:
    """``2026-11-22T22:10:16.123+00:00``: UTC, milliseconds, unambiguous in any zone."""
    return datetime.fromtimestamp(created_s, tz=UTC).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``TIME LEVEL logger: message``, TIME in ISO 8601 (UTC)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso8601(record.created)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; a multi-line message stays one line (``\\n`` escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _iso8601(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def add_log_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``--log-format`` and ``--log-level`` on ``parser``.

    The top-level parser holds the defaults; a subcommand accepts the same
    options after its name (``layersched extender --log-format json``) without
    overriding the top-level ones when absent.
    """
    default: object = "text" if top_level else argparse.SUPPRESS
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help="log line format: text (timestamped) or json (one object per line; default: text)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=None if top_level else argparse.SUPPRESS,
        help="log threshold; overrides -v (default: warning, -v info, -vv debug)",
    )


def configure_logging(verbose: int, level_name: str | None, log_format: str) -> None:
    """Send logs to stderr at ``level_name`` (else the ``-v`` count) in ``log_format``."""
    if level_name is not None:
        level = logging.getLevelNamesMapping()[level_name.upper()]
    else:
        level = VERBOSITY_LEVELS[min(verbose, len(VERBOSITY_LEVELS) - 1)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler])  # a no-op if the root has handlers
    # the HTTP client libraries log every request and socket step at info/debug: a
    # watching extender or a publishing agent would drown its own lines in theirs
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
