"""A :class:`~layersched.core.layers.LayerSource` backed by a registry: a plain fetcher; and
:class:`CachedLayerSource`, any source through the one cache, for callers that resolve
inline.

Each :meth:`RegistryLayerSource.resolve` or :meth:`~RegistryLayerSource.fetch` asks the
registry (one manifest ``GET``, two for an index); :meth:`~RegistryLayerSource.
current_digest` is one ``HEAD``. Caching is not this class's job: callers keep answers in
the one :class:`~layersched.registry.LayerCache` (directly, through the extender's
deadline resolver, or through :class:`CachedLayerSource`), which uses
the ``HEAD`` to revalidate a tag without fetching its manifest again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from layersched.core.errors import (
    InputError,
    LayerResolutionError,
    ManifestError,
    RegistryError,
    RegistryNotAllowedError,
)
from layersched.core.layers import Layer, LayerSource
from layersched.core.reference import ImageName, ImageReference
from layersched.registry._budget import MemoryBudget
from layersched.registry._cache import LayerCache
from layersched.registry._client import RegistryClient
from layersched.registry._entries import Fetched, text_bytes

log = logging.getLogger(__name__)

#: Registries refused that are remembered (each is logged once while remembered): the
#: least recently refused go first past this, or past the memory budget (issue 44:
#: 20,000 refused domains cost 7.4 MB and 20,000 warnings, without bound).
MAX_REFUSED_REGISTRIES = 1_024
#: What one remembered registry costs beyond its name's string (measured with
#: tracemalloc, tests/unit/test_layer_cache_memory.py): its slot in the ordered dict.
REFUSED_ENTRY_BYTES = 100
#: Registries refused for the first time are logged at most this many times a period; the
#: next warning after it says how many more were refused meanwhile (a stream of pods
#: naming fresh registries costs a few lines a minute).
REFUSED_WARNINGS_PER_PERIOD = 10
REFUSED_WARNING_PERIOD_S = 60.0


class RefusedRegistries:
    """The registries refused (logged once each while remembered), least recently
    refused first, charged to a :class:`~layersched.registry.MemoryBudget` (a budget
    member: the extender shares one between every cache a request can fill)."""

    def __init__(
        self,
        budget: MemoryBudget | None = None,
        max_entries: int = MAX_REFUSED_REGISTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget if budget is not None else MemoryBudget()
        self.max_entries = max_entries
        self._clock = clock
        self._domains: OrderedDict[str, None] = OrderedDict()
        self._bytes = 0
        #: When the warnings' period began, how many were logged in it, and how many
        #: registries were refused for the first time without a warning since the last.
        self._period_start = -math.inf
        self._logged = 0
        self.unlogged = 0
        self.budget.join(self)

    def __len__(self) -> int:
        return len(self._domains)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def warn(self, domain: str) -> int | None:
        """Whether to log ``domain``'s refusal: None when it was refused before (while
        remembered) or past this period's warnings, else how many first refusals went
        unlogged before it (to say so in the line)."""
        with self.budget.lock:
            if domain in self._domains:
                self._domains.move_to_end(domain)
                return None
            self._domains[domain] = None
            cost = REFUSED_ENTRY_BYTES + text_bytes(domain)
            self._bytes += cost
            self.budget.charge(cost)
            while len(self._domains) > self.max_entries:
                self.evict_oldest()
            self.budget.settle()
            now = self._clock()
            if now - self._period_start >= REFUSED_WARNING_PERIOD_S:
                self._period_start, self._logged = now, 0
            if self._logged >= REFUSED_WARNINGS_PER_PERIOD:
                self.unlogged += 1
                return None
            self._logged += 1
            unlogged, self.unlogged = self.unlogged, 0
            return unlogged

    def evict_oldest(self) -> bool:
        if not self._domains:
            return False
        domain, _ = self._domains.popitem(last=False)
        cost = REFUSED_ENTRY_BYTES + text_bytes(domain)
        self._bytes -= cost
        self.budget.charge(-cost)
        return True


class RegistryLayerSource:
    """Resolves image references to layers through a :class:`RegistryClient` (a
    :class:`~layersched.registry.DigestSource`).

    Counters (plain ints, read by the extender's metrics): ``fetches`` (manifests
    resolved), ``digest_checks`` (``HEAD`` requests), ``registry_errors`` (resolution
    failed at the registry), ``not_allowed`` (an image named a registry outside the
    client's allowlist: no request, and one log line per registry while it is
    remembered, :class:`RefusedRegistries`).

    ``budget``: the memory budget the registries refused are charged to (the extender's,
    shared with its layer caches), else one of their own.
    """

    def __init__(self, client: RegistryClient, budget: MemoryBudget | None = None) -> None:
        self.client = client
        self._lock = threading.Lock()
        self.fetches = 0
        self.digest_checks = 0
        self.registry_errors = 0
        self.not_allowed = 0
        self.refused_registries = RefusedRegistries(budget)

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self.fetch(self._parse(image)).layers

    def fetch(self, ref: ImageReference) -> Fetched:
        """The image's layers on the client's platform, and the digest its name points to."""
        with self._errors(ref):
            resolved = self.client.resolve(ref)
        with self._lock:
            self.fetches += 1
        return Fetched(resolved.layers, resolved.digest)

    def current_digest(self, ref: ImageReference) -> str | None:
        """The digest ``ref`` points to now (one ``HEAD``), None if the registry omits it."""
        if ref.digest is not None:
            return ref.digest
        with self._errors(ref):
            digest = self.client.manifest_digest(ref)
        with self._lock:
            self.digest_checks += 1
        return digest

    @staticmethod
    def _parse(image: ImageName) -> ImageReference:
        """The edge where a name becomes a reference: an error naming it if it is none."""
        try:
            return ImageReference.parse(image)
        except InputError as err:
            raise LayerResolutionError(f"resolving layers of {image!r}: {err}") from err

    @contextlib.contextmanager
    def _errors(self, ref: ImageReference) -> Iterator[None]:
        """Registry failures as LayerResolutionError, counted."""
        try:
            yield
        except RegistryNotAllowedError as err:
            with self._lock:
                self.not_allowed += 1
            unlogged = self.refused_registries.warn(ref.domain)
            if unlogged is not None:
                more = f"; {unlogged} more refused before, not logged" if unlogged else ""
                log.warning("%s (logged once per registry%s)", err, more)
            raise LayerResolutionError(str(err)) from err
        except (RegistryError, ManifestError) as err:
            with self._lock:
                self.registry_errors += 1
            raise LayerResolutionError(str(err)) from err


class CachedLayerSource:
    """A :class:`~layersched.core.layers.LayerSource` through a :class:`LayerCache`: for
    callers that resolve inline (the agent's registry fallback, ``layersched score``)."""

    def __init__(self, source: LayerSource, cache: LayerCache | None = None) -> None:
        self.source = source
        self.cache = cache if cache is not None else LayerCache()

    def resolve(self, image: ImageName) -> tuple[Layer, ...]:
        return self.cache.resolve(image, self.source)
