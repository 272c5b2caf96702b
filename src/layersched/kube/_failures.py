"""What a refused Kubernetes API call means: the call, the API's status and message, and
what to check (by status); a too-old resource version (410) as :class:`Gone`, so that the
caller lists again.
"""

from __future__ import annotations

import httpx

from layersched.core.errors import KubeError

HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_GONE = 410
HTTP_UNPROCESSABLE = 422
HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVER_ERROR = 500
#: What to check, by the API's answer (appended to the API's own message).
FIXES = {
    HTTP_UNAUTHORIZED: "the credentials were refused: check the kubeconfig's certificate or token",
    HTTP_FORBIDDEN: "this identity may not do that: grant it in RBAC (kubectl auth can-i)",
    HTTP_NOT_FOUND: "no such object or resource: check its name, namespace and API version",
    HTTP_CONFLICT: "it exists already, or changed since it was read: read it again",
    HTTP_UNPROCESSABLE: "the API rejected the object: fix the field it names",
    HTTP_TOO_MANY_REQUESTS: "the API server is throttling: retry later",
}


class Gone(KubeError):
    """The resource version is too old (410): list again, then watch from the list's."""

    def __init__(self, message: str) -> None:
        super().__init__(message, HTTP_GONE)


def status_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return response.text[:200].strip() or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return response.reason_phrase


def failure(response: httpx.Response, what: str) -> KubeError:
    """The error for a refused call (its body already read): the call, the API's status
    and message, and what to check."""
    status = response.status_code
    fix = FIXES.get(status)
    if fix is None and status >= HTTP_SERVER_ERROR:
        fix = "the API server failed: check its log, then retry"
    message = f"{what}: {status} {status_message(response)}" + (f" ({fix})" if fix else "")
    if status == HTTP_GONE:
        return Gone(message)
    return KubeError(message, status)
