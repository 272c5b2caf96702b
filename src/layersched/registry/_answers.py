"""What a registry's answer means to the client: the statuses it accepts, retries, and gives
up on (each with a hint), an OCI error body's message, ``Retry-After``, and what an attempt
ends in before it becomes a :class:`~layersched.core.errors.RegistryError`.
"""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime

import httpx

# Error bodies are only read this far (they go into a message, not into memory).
ERROR_BODY_BYTES = 2048
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})

STATUS_HINTS = {
    400: "the registry rejected the request",
    403: "the credentials have no access to this repository",
    404: "is the image pushed?",
    405: "the registry does not allow this operation",
    429: "the registry rate-limits requests: wait, or authenticate for a higher limit",
}
SERVER_ERROR_HINT = "the registry is failing: try again later"
OK_STATUSES = frozenset({200, 201, 202, 204})
NOT_FOUND = 404


class StatusError(Exception):
    """A registry answered with a status we did not want (turned into RegistryError)."""

    def __init__(self, response: httpx.Response, body: bytes) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.status = response.status_code
        self.headers = response.headers
        self.detail = error_detail(body)


class DeadlineExceededError(Exception):
    """An attempt ran past its whole-request deadline (not retried: a trickle would recur)."""


def error_detail(body: bytes) -> str:
    """The ``errors[].message`` of an OCI error body, else the start of the body."""
    try:
        doc = json.loads(body)
        messages = [e.get("message", "") for e in doc.get("errors", []) if isinstance(e, dict)]
        return "; ".join(m for m in messages if m)
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace").strip()


def retry_after_s(headers: httpx.Headers) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), if present."""
    value = headers.get("Retry-After")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def is_transient(err: BaseException) -> bool:
    """Whether an attempt's failure is worth another attempt (429, 5xx, a broken connection)."""
    if isinstance(err, StatusError):
        return err.status in TRANSIENT_STATUSES
    return isinstance(err, httpx.TransportError)


def check_status(response: httpx.Response, ok: frozenset[int] = OK_STATUSES) -> None:
    """Raise :class:`StatusError` (its body read up to :data:`ERROR_BODY_BYTES`) unless the
    answer's status is one of ``ok``."""
    if response.status_code not in ok:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                break
        raise StatusError(response, body[:ERROR_BODY_BYTES])
