"""The list/watch loop: one collection listed page by page, then watched, for ever.

The Go port's ``inventorywatch.Watch`` runs client-go's Reflector; this is the same loop
for each collection the extender watches (Nodes, and layersched's NodeLayerInventory
objects), on a daemon thread of its own. It lists, then watches from the list's
resourceVersion; a watch that ends is resumed from the last version seen, a 410 Gone
relists, and any failure (an API error, or anything else: a bug, an object no decoder
foresaw) marks the watch disconnected, backs off and retries. The held inventory keeps
answering meanwhile, and ``/readyz`` says so (:meth:`Watch.readiness`).

**Memory is bounded by construction.** Lists are read in pages bounded in bytes, not
only in objects, and a watch event's line is cut at :data:`~._parse.MAX_OBJECT_BYTES`
as it arrives. Each object is parsed here (:class:`~layersched.extender.watch._parse.Parser`)
and posted to the event loop, where the store applies it
(:class:`~layersched.extender.watch._store.Store`): nothing of it stays on the watch thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from layersched.core.errors import KubeError, LayerschedError
from layersched.core.nodeimages import NodeInfo
from layersched.extender.watch._ignored import Ignored
from layersched.extender.watch._parse import MAX_OBJECT_BYTES, ParsedNode, object_name
from layersched.kube import Gone, KubeClient, Oversize, WatchEvent

log = logging.getLogger(__name__)

#: Back-off after a failed list or watch: 0.5 s doubling to 30 s.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
#: Objects per list page at most, and a page's bytes at most: a page is parsed and
#: dropped before the next is read, and decoding multiplies JSON by about 3.5, so a
#: 4 MiB page costs ~15 MB while it is read (100 objects of 1 MiB would be 350 MB).
LIST_PAGE_SIZE = 100
LIST_PAGE_BYTES = 4 * 1024 * 1024
#: A watch disconnected for longer than this makes /readyz answer 503.
DEFAULT_UNREADY_AFTER_S = 300.0


class WatchParser(Protocol):
    """What a watch asks of its parser (``_parse.Parser`` for Nodes and inventories,
    ``_pending.PodParser`` for pods), on the watch's thread."""

    def parse(
        self, kind: str, obj: Mapping[str, Any] | bytes, size_bytes: int, name: str = ""
    ) -> Any: ...

    def parse_raw(self, kind: str, raw: msgspec.Raw | Oversize) -> tuple[str, Any]: ...

    def oversize(self, kind: str, name: str, size_bytes: int) -> Any: ...

    def drop(self, parsed: Any) -> None: ...


class WatchStore(Protocol):
    """What a watch asks of its store (``_store.Store``, ``_pending.PendingPods``), on
    the event loop."""

    def apply(self, kind: str, name: str, parsed: Any) -> None: ...

    def replace_all(self, kind: str, items: Any) -> None: ...


@dataclass
class WatchState:
    """How one watched collection is doing (for /readyz and /metrics)."""

    synced: bool = False
    connected: bool = False
    resource_version: str = ""
    events: int = 0
    relists: int = 0
    failures: int = 0
    last_error: str = ""
    since: float = field(default_factory=time.monotonic)


class Watch:
    """One collection (``kind`` at ``path``, the objects ``field_selector`` matches when
    given): listed, then watched into the store."""

    def __init__(
        self,
        kind: str,
        path: str,
        kube_factory: Callable[[], KubeClient],
        parser: WatchParser,
        store: WatchStore,
        post: Callable[..., None],
        stop: threading.Event,
        on_node: Callable[[str, NodeInfo], None] | None = None,
        *,
        field_selector: str | None = None,
        key_of: Callable[[object], str] = object_name,
    ) -> None:
        """``post``: run a function on the event loop; ``on_node``: told each Node event
        parsed (on this watch's thread); ``key_of``: an object's key in the store (its
        name, or a namespaced object's ``namespace/name``)."""
        self.kind = kind
        self.path = path
        self.field_selector = field_selector
        self._key_of = key_of
        self.state = WatchState()
        self._kube_factory = kube_factory
        self._parser = parser
        self._store = store
        self._post = post
        self._stop = stop
        self._on_node = on_node

    def start(self, version: str) -> None:
        """Watch from ``version`` (the first list's) on a daemon thread."""
        threading.Thread(
            target=self._watch_forever, args=(version,), name=f"watch-{self.kind}", daemon=True
        ).start()

    def synced(self) -> None:
        """On the loop: a full list was applied."""
        self.state.synced = True
        self.state.connected = True

    def readiness(self, unready_after_s: float) -> tuple[bool, str]:
        """(ready, why) for /readyz: not ready before the first list, nor once
        disconnected for longer than ``unready_after_s``."""
        state = self.state
        if not state.synced:
            return True, f"[-]{self.kind}: not listed yet ({state.last_error or 'listing'})"
        if state.connected:
            return True, f"[+]{self.kind}: watching at resourceVersion {state.resource_version}"
        stale_s = time.monotonic() - state.since
        ok = stale_s <= unready_after_s
        return ok, (
            f"[{'+' if ok else '-'}]{self.kind}: serving the last inventory, re-syncing for "
            f"{stale_s:.0f} s ({state.last_error})"
        )

    def list_until_ok(self) -> tuple[dict[str, Any], str]:
        """Every object, parsed page by page, and the list's resourceVersion; retried
        (backing off) until the API answers. Raises only once stopped."""
        state = self.state
        pause_s = RETRY_FIRST_S
        while True:
            parsed: dict[str, Any] = {}
            try:
                version = self._list_pages(parsed)
                state.last_error = ""
                return parsed, version
            except Exception as err:  # an API error, or a bug: retried
                for item in parsed.values():
                    self._parser.drop(item)
                state.failures += 1
                state.last_error = _describe(err)
                _log_failure(f"listing {self.kind}", err, pause_s)
                if self._stop.wait(pause_s):
                    raise
                pause_s = min(RETRY_MAX_S, pause_s * 2)

    def _list_pages(self, parsed: dict[str, Any]) -> str:
        """Read the list into ``parsed`` (by name); its resourceVersion."""
        version = ""
        with self._kube_factory() as kube:
            for page, page_version in kube.list_raw_pages(
                self.path, LIST_PAGE_SIZE, LIST_PAGE_BYTES, field_selector=self.field_selector
            ):
                version = page_version
                for raw in page:
                    name, item = self._parser.parse_raw(self.kind, raw)
                    if name:
                        self._parser.drop(parsed.get(name))
                        parsed[name] = item
                    elif isinstance(item, Ignored):  # no name to keep it by
                        self._post(self._store.apply, self.kind, "", item)
        return version

    def _watch_forever(self, version: str) -> None:
        state = self.state
        state.resource_version = version
        pause_s = RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                with self._kube_factory() as kube:
                    if not state.connected:
                        state.since = time.monotonic()
                    state.connected = True
                    for event in kube.watch(
                        self.path,
                        state.resource_version,
                        max_event_bytes=MAX_OBJECT_BYTES,
                        field_selector=self.field_selector,
                    ):
                        self._on_event(event)
                        pause_s = RETRY_FIRST_S
                # the server ended the watch (its timeout): resume from where it was
            except Gone as err:
                self._disconnected(err)
                state.relists += 1
                log.info("%s: %s: listing again", self.kind, err)
                try:
                    items, state.resource_version = self.list_until_ok()
                except Exception:  # noqa: BLE001 - stopping: list_until_ok gave up
                    return
                self._post(self.apply_list, items)
            except Exception as err:  # noqa: BLE001 - an API error, or a bug: logged, retried
                self._disconnected(err)
                state.failures += 1
                _log_failure(f"watching {self.kind}", err, pause_s)
                self._stop.wait(pause_s)
                pause_s = min(RETRY_MAX_S, pause_s * 2)

    def apply_list(self, items: dict[str, Any]) -> None:
        """On the loop: a full list read on the watch's thread (or another), applied."""
        self._store.replace_all(self.kind, items)
        self.synced()

    def _on_event(self, event: WatchEvent) -> None:
        """One watch event: parsed here, applied on the loop (nothing of it stays on the
        watch thread once posted)."""
        kind, apply = self.kind, self._store.apply
        self.state.events += 1
        if event.resource_version:
            self.state.resource_version = event.resource_version
        if event.type == "BOOKMARK":
            return
        name = self._key_of(event.object)
        if not name:
            if event.oversize:  # nothing to apply it to: counted
                self._post(apply, kind, "", self._parser.oversize(kind, "", event.size_bytes))
            return
        if event.type == "DELETED":
            self._post(apply, kind, name, None)
            return
        if event.oversize:
            parsed = self._parser.oversize(kind, name, event.size_bytes)
        else:
            parsed = self._parser.parse(kind, event.object, event.size_bytes)
        self._post(apply, kind, name, parsed)
        if isinstance(parsed, ParsedNode) and self._on_node is not None:
            self._on_node(name, parsed.info)

    def _disconnected(self, err: BaseException) -> None:
        if self.state.connected:
            self.state.since = time.monotonic()
        self.state.connected = False
        self.state.last_error = _describe(err)


def _log_failure(what: str, err: BaseException, pause_s: float) -> None:
    if isinstance(err, KubeError):
        log.warning("%s: %s: retrying in %.1f s", what, err, pause_s)
    else:  # not the API's doing: a bug, with its traceback
        log.error(
            "%s failed unexpectedly (a bug: please report it): retrying in %.1f s",
            what,
            pause_s,
            exc_info=err,
        )


def _describe(err: BaseException) -> str:
    return str(err) if isinstance(err, LayerschedError) else f"{type(err).__name__}: {err}"
