"""A small, synchronous Kubernetes API client: what layersched's components, testbeds
and tests need, and nothing more (what a refused call means is :mod:`._failures`';
reading a watch or a list under a byte cap, :mod:`._stream`'s).

Get, list (paged, with label and field selectors), watch (with resource versions,
bookmarks, and 410 Gone surfaced as :class:`Gone` so the caller relists), create,
delete (with a grace period), JSON merge patch, server-side apply, and a pod's log.
JSON only (a log is text), over one pooled HTTPS connection. Every failure is a
:class:`KubeError` saying which call failed, the API's own message, and what to check.
Paths come from :mod:`layersched.kube._paths`, which admits only valid object names.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

import httpx
import msgspec

from layersched.core.errors import KubeError
from layersched.kube._config import KubeConfig, redacted_url
from layersched.kube._failures import HTTP_NOT_FOUND, failure
from layersched.kube._stream import (
    HEAD_BYTES,
    Cut,
    Oversize,
    RawList,
    WatchEvent,
    bounded_lines,
    oversize_event,
    parse_event,
    skipped_page,
)

#: A request that is not a watch: the API answers in milliseconds; 30 s covers a
#: loaded API server without hiding a dead one.
DEFAULT_TIMEOUT_S = 30.0
#: The server ends a watch after timeoutSeconds; the client reads a little longer.
WATCH_TIMEOUT_S = 300
WATCH_READ_SLACK_S = 30.0
#: Objects per list page (the API server's own default limit for paged lists is 500).
DEFAULT_PAGE_SIZE = 500
#: A pod log is read up to this many bytes (the API's ``limitBytes``, and enforced here
#: too): the scenario reads seconds of a sidecar's log, never megabytes.
DEFAULT_LOG_LIMIT_BYTES = 16 * 1024 * 1024
#: The largest list page :meth:`KubeClient.list_raw_pages` reads by default: an object
#: may hold 1.5 MiB (etcd's default request limit), so counting objects alone does not
#: bound a page (100 objects of 1 MiB are 100 MiB of JSON). 8 MiB holds one object of
#: the largest size the API server accepts (3 MiB) with room to spare.
DEFAULT_MAX_PAGE_BYTES = 8 * 1024 * 1024
#: The largest watch event line :meth:`KubeClient.watch` decodes by default (the page
#: bound's reason holds here too); a longer one is skipped while it arrives, unparsed.
DEFAULT_MAX_EVENT_BYTES = DEFAULT_MAX_PAGE_BYTES
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
#: How OpenSSL says a server's certificate did not verify (a CA missing, not a dead server).
_UNTRUSTED = "CERTIFICATE_VERIFY_FAILED"
#: What a log read accepts: text, or the API's JSON Status when it refuses.
_LOG_ACCEPT = "text/plain, application/json"


class KubeClient:
    """Calls to one API server with one identity."""

    def __init__(self, config: KubeConfig, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.config = config
        self._timeout_s = timeout_s
        hooks = {"request": [self._server_name]} if config.tls_server_name else {}
        try:
            self._http = httpx.Client(
                base_url=config.server,
                verify=config.ssl_context(),
                timeout=timeout_s,
                proxy=config.proxy_url,
                event_hooks=hooks,
            )
        except (ImportError, ValueError) as err:  # a SOCKS proxy without socksio; a bad URL
            proxy = redacted_url(config.proxy_url) if config.proxy_url else None
            raise KubeError(
                f"{config.origin}: proxy-url {proxy!r}: {err} (fix the cluster's "
                "proxy-url; a socks5:// proxy needs pip install 'httpx[socks]')"
            ) from None

    def _server_name(self, request: httpx.Request) -> None:
        """``tls-server-name``: the name sent (SNI) and checked against the certificate."""
        request.extensions["sni_hostname"] = self.config.tls_server_name

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    def _unreachable(self, what: str, err: httpx.HTTPError) -> KubeError:
        if _UNTRUSTED in str(err):
            return KubeError(
                f"{what}: the API server at {self.config.server} answered with a certificate "
                f"that is not trusted ({err}): give the cluster's certificate-authority (or "
                f"-data) in {self.config.origin or 'the kubeconfig'}, or, knowing the risk, "
                "insecure-skip-tls-verify: true"
            )
        return KubeError(
            f"{what}: the API server at {self.config.server} did not answer ({err}): "
            "is it running and reachable?"
        )

    def _headers(
        self, content_type: str | None = None, accept: str = "application/json"
    ) -> dict[str, str]:
        headers = {"Accept": accept}
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
        document: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One call; ``document`` (sent as JSON, typed ``content_type``) is its body."""
        body = None if document is None else json.dumps(document).encode()
        headers = self._headers(content_type if body is not None else None)
        try:
            response = self._http.request(
                method, path, content=body, params=params, headers=headers
            )
        except httpx.HTTPError as err:
            raise self._unreachable(what, err) from None
        if response.status_code >= 400:
            raise failure(response, what)
        try:
            answer = response.json()
        except ValueError:
            raise KubeError(f"{what}: the API answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise KubeError(f"{what}: the API answered a JSON {type(answer).__name__}")
        return answer

    # ------------------------------------------------------------------ verbs
    def get(self, path: str) -> dict[str, Any]:
        """GET one object; KubeError with status 404 when it does not exist."""
        return self._request("GET", path, f"reading {path}")

    def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object of a collection (those the selectors match, when given: build
        them with :func:`selector`), following ``continue`` pages, and the list's
        resourceVersion (where a watch picks up)."""
        items: list[dict[str, Any]] = []
        version = ""
        for page, page_version in self.list_pages(
            path, label_selector=label_selector, field_selector=field_selector
        ):
            items.extend(page)
            version = page_version
        return items, version

    def list_pages(
        self,
        path: str,
        page_size: int = DEFAULT_PAGE_SIZE,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Iterator[tuple[builtins.list[dict[str, Any]], str]]:
        """A collection page by page (``limit``/``continue``), each with the list's
        resourceVersion: a caller that digests each page never holds the whole list."""
        query: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        what = f"listing {path}" + "".join(
            f" ({name} {value})"
            for name, value in (("labels", label_selector), ("fields", field_selector))
            if value
        )
        params = dict(query)
        while True:
            page = self._request("GET", path, what, params=params)
            meta = page.get("metadata") or {}
            items = [item for item in page.get("items") or [] if isinstance(item, dict)]
            yield items, str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return
            params = {**query, "continue": str(token)}

    def list_raw_pages(
        self,
        path: str,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        *,
        field_selector: str | None = None,
    ) -> Iterator[tuple[builtins.list[msgspec.Raw | Oversize], str]]:
        """A collection page by page (the objects ``field_selector`` matches, when given),
        each object as its raw JSON (undecoded: a caller may skip one by its length), with
        the list's resourceVersion.

        No page read is longer than ``max_page_bytes``: a page that would be is dropped
        while it arrives and asked for again with half as many objects (the API cannot
        limit a page by bytes), and the next page's ``limit`` aims at half the bound from
        the bytes per object seen so far. A single object over the bound is skipped: it
        comes as an :class:`Oversize` (its name, read from the page's head with the
        ``continue`` token), and the list carries on after it.
        """
        limit, token, what = page_size, "", f"listing {path}"
        selected = {"fieldSelector": field_selector} if field_selector else {}
        while True:
            params = {"limit": str(limit)} | selected | ({"continue": token} if token else {})
            body, head = self._read_capped(path, what, params, max_page_bytes)
            if body is None:
                if limit > 1:
                    limit = max(1, limit // 2)
                    continue
                version, token, name = skipped_page(head, what, max_page_bytes)
                yield [Oversize(name, max_page_bytes + 1)], version
                if not token:
                    return
                limit = page_size
                continue
            try:
                page = msgspec.json.decode(body, type=RawList)
            except msgspec.DecodeError as err:
                raise KubeError(f"{what}: the API answered a malformed list ({err})") from None
            items: builtins.list[msgspec.Raw | Oversize] = list(page.items or [])
            yield items, page.metadata.resourceVersion
            token = page.metadata.continue_
            if not token:
                return
            per_object_bytes = max(1, len(body) // max(1, len(items)))
            limit = max(1, min(page_size, max_page_bytes // (2 * per_object_bytes)))

    def _read_capped(
        self, path: str, what: str, params: Mapping[str, str], max_bytes: int
    ) -> tuple[bytes | None, bytes]:
        """GET ``path``'s body; or (None, its first HEAD_BYTES) as soon as it passes
        ``max_bytes``."""
        try:
            with self._http.stream("GET", path, params=params, headers=self._headers()) as response:
                if response.status_code >= 400:
                    response.read()
                    raise failure(response, what)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        return None, bytes(body[:HEAD_BYTES])
                return bytes(body), b""
        except httpx.HTTPError as err:
            raise self._unreachable(what, err) from None

    def create(self, path: str, document: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``document`` to the collection ``path``; KubeError 409 if it exists."""
        return self._request("POST", path, f"creating in {path}", document=document)

    def delete(self, path: str, *, grace_period_s: int | None = None) -> bool:
        """DELETE ``path``; False when it was already gone. ``grace_period_s`` is the
        ``gracePeriodSeconds`` a pod gets to stop (None: its own; 0: at once)."""
        params = None if grace_period_s is None else {"gracePeriodSeconds": str(grace_period_s)}
        try:
            self._request("DELETE", path, f"deleting {path}", params=params)
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return False
            raise
        return True

    def patch(self, path: str, document: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch (RFC 7386) ``document`` into the object at ``path``: maps
        merge, anything else (lists too) replaces, ``None`` removes; the object as patched."""
        return self._request(
            "PATCH",
            path,
            f"patching {path}",
            document=document,
            content_type=MERGE_PATCH_CONTENT_TYPE,
        )

    def read_log(
        self,
        path: str,
        *,
        container: str | None = None,
        since_s: int | None = None,
        limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES,
    ) -> str:
        """A pod's log (``path``: :func:`pod_log_path`) as text: ``container``'s (needed
        when the pod has several), the last ``since_s`` seconds of it (None: all), at most
        ``limit_bytes`` (asked of the API and enforced on what it sends)."""
        what = f"reading the log of {path.removesuffix('/log')}" + (
            f" container {container}" if container else ""
        )
        if limit_bytes < 1:
            raise KubeError(f"{what}: limit_bytes is {limit_bytes}: read at least 1 byte")
        params = {"limitBytes": str(limit_bytes)}
        if container is not None:
            params["container"] = container
        if since_s is not None:
            params["sinceSeconds"] = str(since_s)
        chunks: list[bytes] = []
        size_bytes = 0
        try:
            with self._http.stream(
                "GET", path, params=params, headers=self._headers(accept=_LOG_ACCEPT)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise failure(response, what)
                for chunk in response.iter_bytes():
                    chunks.append(chunk[: limit_bytes - size_bytes])
                    size_bytes += len(chunks[-1])
                    if size_bytes >= limit_bytes:
                        break
        except httpx.HTTPError as err:
            raise self._unreachable(what, err) from None
        return b"".join(chunks).decode("utf-8", errors="replace")

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
            document=document,
            content_type=APPLY_CONTENT_TYPE,
            params=params,
        )

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_s: int = WATCH_TIMEOUT_S,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        field_selector: str | None = None,
    ) -> Iterator[WatchEvent]:
        """Events on the collection ``path`` (those ``field_selector`` matches, when
        given) after ``resource_version`` until the server ends the watch (after
        ``timeout_s``). Raises :class:`Gone` when the version is too old, at once or as
        an ERROR event; KubeError on any other failure.

        An event line longer than ``max_event_bytes`` is never parsed nor held whole: it
        is dropped while it arrives and comes as an event with ``oversize`` set, naming
        the object if its head did (the caller skips it, and the watch carries on)."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if field_selector:
            params["fieldSelector"] = field_selector
        url = f"{path}?{urlencode(params)}"
        what = f"watching {path}" + (f" (fields {field_selector})" if field_selector else "")
        timeout = httpx.Timeout(self._timeout_s, read=timeout_s + WATCH_READ_SLACK_S)
        try:
            with self._http.stream(
                "GET", url, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise failure(response, what)
                for line in bounded_lines(response.iter_bytes(), max_event_bytes):
                    if isinstance(line, Cut):
                        yield oversize_event(line, what)
                    else:
                        yield parse_event(line, what)
        except httpx.HTTPError as err:
            raise KubeError(f"{what}: the connection failed ({err})") from None
