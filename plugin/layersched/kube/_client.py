"""A small, synchronous Kubernetes API client: what the agent and the extender need.

Get, list, watch (with resource versions, bookmarks, and 410 Gone surfaced as
:class:`Gone` so the caller relists), create, delete and server-side apply. JSON only,
over one pooled HTTPS connection. Every failure is a :class:`KubeError` saying which
call failed and why, with the API's own message.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import msgspec

from layersched.core.errors import KubeError
from layersched.kube._config import KubeConfig

#: A request that is not a watch: the API answers in milliseconds; 30 s covers a
#: loaded API server without hiding a dead one.
DEFAULT_TIMEOUT_S = 30.0
#: The server ends a watch after timeoutSeconds; the client reads a little longer.
WATCH_TIMEOUT_S = 300
WATCH_READ_SLACK_S = 30.0
#: Objects per list page (the API server's own default limit for paged lists is 500).
DEFAULT_PAGE_SIZE = 500
#: The largest list page :meth:`KubeClient.list_raw_pages` reads by default: an object
#: may hold 1.5 MiB (etcd's default request limit), so counting objects alone does not
#: bound a page (100 objects of 1 MiB are 100 MiB of JSON). 8 MiB holds one object of
#: the largest size the API server accepts (3 MiB) with room to spare.
DEFAULT_MAX_PAGE_BYTES = 8 * 1024 * 1024
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_GONE = 410
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


class Gone(KubeError):
    """The resource version is too old (410): list again, then watch from the list's."""

    def __init__(self, message: str) -> None:
        super().__init__(message, HTTP_GONE)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]
    #: Length of the event's JSON line (0: not known), to skip objects over a size cap.
    size_bytes: int = 0

    @property
    def resource_version(self) -> str:
        meta = self.object.get("metadata") or {}
        return str(meta.get("resourceVersion") or "")


def _status_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return response.text[:200].strip() or response.reason_phrase
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return response.reason_phrase


class KubeClient:
    """Calls to one API server with one identity."""

    def __init__(self, config: KubeConfig, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.config = config
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=config.server, verify=config.ssl_context(), timeout=timeout_s
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        try:
            response = self._http.request(
                method, path, content=body, params=params, headers=self._headers(content_type)
            )
        except httpx.HTTPError as err:
            raise KubeError(
                f"{what}: the API server at {self.config.server} did not answer ({err}): "
                "is it running and reachable?"
            ) from None
        if response.status_code >= 400:
            message = f"{what}: {response.status_code} {_status_message(response)}"
            if response.status_code == HTTP_GONE:
                raise Gone(message)
            raise KubeError(message, response.status_code)
        try:
            document = response.json()
        except ValueError:
            raise KubeError(f"{what}: the API answered something that is not JSON") from None
        if not isinstance(document, dict):
            raise KubeError(f"{what}: the API answered a JSON {type(document).__name__}")
        return document

    # ------------------------------------------------------------------ verbs
    def get(self, path: str) -> dict[str, Any]:
        """GET one object; KubeError with status 404 when it does not exist."""
        return self._request("GET", path, f"reading {path}")

    def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        """Every object of a collection, following ``continue`` pages, and the list's
        resourceVersion (where a watch picks up)."""
        items: list[dict[str, Any]] = []
        version = ""
        for page, page_version in self.list_pages(path):
            items.extend(page)
            version = page_version
        return items, version

    def list_pages(
        self, path: str, page_size: int = DEFAULT_PAGE_SIZE
    ) -> Iterator[tuple[builtins.list[dict[str, Any]], str]]:
        """A collection page by page (``limit``/``continue``), each with the list's
        resourceVersion: a caller that digests each page never holds the whole list."""
        params: dict[str, str] = {"limit": str(page_size)}
        while True:
            page = self._request("GET", path, f"listing {path}", params=params)
            meta = page.get("metadata") or {}
            items = [item for item in page.get("items") or [] if isinstance(item, dict)]
            yield items, str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return
            params = {"limit": str(page_size), "continue": str(token)}

    def list_raw_pages(
        self,
        path: str,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    ) -> Iterator[tuple[builtins.list[msgspec.Raw], str]]:
        """A collection page by page, each object as its raw JSON (undecoded: a caller may
        skip one by its length), with the list's resourceVersion.

        No page read is longer than ``max_page_bytes``: a page that would be is dropped
        while it arrives and asked for again with half as many objects (the API cannot
        limit a page by bytes), and the next page's ``limit`` aims at half the bound from
        the bytes per object seen so far. KubeError when a single object is over it.
        """
        limit, token, what = page_size, "", f"listing {path}"
        while True:
            params = {"limit": str(limit)} | ({"continue": token} if token else {})
            body = self._read_capped(path, what, params, max_page_bytes)
            if body is None:
                if limit == 1:
                    raise KubeError(
                        f"{what}: one object is larger than {max_page_bytes} bytes, more than "
                        "the API server stores by default: delete it, or raise the page bound"
                    )
                limit = max(1, limit // 2)
                continue
            try:
                page = msgspec.json.decode(body, type=_RawList)
            except msgspec.DecodeError as err:
                raise KubeError(f"{what}: the API answered a malformed list ({err})") from None
            items = page.items or []
            yield items, page.metadata.resourceVersion
            token = page.metadata.continue_
            if not token:
                return
            per_object_bytes = max(1, len(body) // max(1, len(items)))
            limit = max(1, min(page_size, max_page_bytes // (2 * per_object_bytes)))

    def _read_capped(
        self, path: str, what: str, params: Mapping[str, str], max_bytes: int
    ) -> bytes | None:
        """GET ``path``'s body, or None as soon as it passes ``max_bytes``."""
        try:
            with self._http.stream("GET", path, params=params, headers=self._headers()) as response:
                if response.status_code >= 400:
                    response.read()
                    message = f"{what}: {response.status_code} {_status_message(response)}"
                    if response.status_code == HTTP_GONE:
                        raise Gone(message)
                    raise KubeError(message, response.status_code)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        return None
                return bytes(body)
        except httpx.HTTPError as err:
            raise KubeError(
                f"{what}: the API server at {self.config.server} did not answer ({err}): "
                "is it running and reachable?"
            ) from None

    def create(self, path: str, document: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``document`` to the collection ``path``; KubeError 409 if it exists."""
        return self._request(
            "POST",
            path,
            f"creating in {path}",
            body=json.dumps(document).encode(),
            content_type="application/json",
        )

    def delete(self, path: str) -> bool:
        """DELETE ``path``; False when it was already gone."""
        try:
            self._request("DELETE", path, f"deleting {path}")
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return False
            raise
        return True

    def apply(
        self, path: str, document: Mapping[str, Any], field_manager: str, *, force: bool = True
    ) -> dict[str, Any]:
        """Server-side apply ``document`` at ``path`` (the object's own URL) as
        ``field_manager``; ``force`` takes over fields another manager set."""
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return self._request(
            "PATCH",
            path,
            f"applying {path}",
            body=json.dumps(document).encode(),
            content_type=APPLY_CONTENT_TYPE,
            params=params,
        )

    def watch(
        self, path: str, resource_version: str, *, timeout_s: int = WATCH_TIMEOUT_S
    ) -> Iterator[WatchEvent]:
        """Events on the collection ``path`` after ``resource_version`` until the server
        ends the watch (after ``timeout_s``). Raises :class:`Gone` when the version is
        too old, at once or as an ERROR event; KubeError on any other failure."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        url = f"{path}?{urlencode(params)}"
        what = f"watching {path}"
        timeout = httpx.Timeout(self._timeout_s, read=timeout_s + WATCH_READ_SLACK_S)
        try:
            with self._http.stream(
                "GET", url, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    message = f"{what}: {response.status_code} {_status_message(response)}"
                    if response.status_code == HTTP_GONE:
                        raise Gone(message)
                    raise KubeError(message, response.status_code)
                for line in response.iter_lines():
                    if line.strip():
                        yield _event(line, what)
        except httpx.HTTPError as err:
            raise KubeError(f"{what}: the connection failed ({err})") from None


def _event(line: str, what: str) -> WatchEvent:
    try:
        raw = json.loads(line)
    except ValueError:
        raise KubeError(f"{what}: a watch event is not JSON: {line[:120]!r}") from None
    kind = raw.get("type") if isinstance(raw, dict) else None
    obj = raw.get("object") if isinstance(raw, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise KubeError(f"{what}: a watch event lacks type or object: {line[:120]!r}")
    if kind == "ERROR":
        code = obj.get("code")
        message = f"{what}: {obj.get('message') or obj.get('reason') or 'error event'}"
        if code == HTTP_GONE:
            raise Gone(message)
        raise KubeError(message, int(code) if isinstance(code, int) else 0)
    return WatchEvent(kind, obj, len(line))


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _RawList(msgspec.Struct):
    """A list response with its items left undecoded."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] | None = None
