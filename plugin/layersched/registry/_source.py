"""A :class:`~layersched.core.layers.LayerSource` backed by a registry: a plain fetcher.

Each :meth:`RegistryLayerSource.resolve` or :meth:`~RegistryLayerSource.fetch` asks the
registry (one manifest ``GET``, two for an index); :meth:`~RegistryLayerSource.
current_digest` is one ``HEAD``. Caching is not this class's job: callers keep answers in
the one :class:`~layersched.registry.LayerCache` (directly, through the extender's
deadline resolver, or through :class:`~layersched.registry.CachedLayerSource`), which uses
the ``HEAD`` to revalidate a tag without fetching its manifest again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from layersched.core.errors import (
    InputError,
    LayerResolutionError,
    ManifestError,
    RegistryError,
    RegistryNotAllowedError,
)
from layersched.core.layers import Layer
from layersched.core.reference import ImageName, ImageReference
from layersched.registry._cache import Fetched
from layersched.registry._client import RegistryClient

log = logging.getLogger(__name__)


class RegistryLayerSource:
    """Resolves image references to layers through a :class:`RegistryClient` (a
    :class:`~layersched.registry.DigestSource`).

    Counters (plain ints, read by the extender's metrics): ``fetches`` (manifests
    resolved), ``digest_checks`` (``HEAD`` requests), ``registry_errors`` (resolution
    failed at the registry), ``not_allowed`` (an image named a registry outside the
    client's allowlist: no request, and one log line per registry).
    """

    def __init__(self, client: RegistryClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self.fetches = 0
        self.digest_checks = 0
        self.registry_errors = 0
        self.not_allowed = 0
        self._refused_registries: set[str] = set()

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
                first = ref.domain not in self._refused_registries
                self._refused_registries.add(ref.domain)
            if first:
                log.warning("%s (logged once per registry)", err)
            raise LayerResolutionError(str(err)) from err
        except (RegistryError, ManifestError) as err:
            with self._lock:
                self.registry_errors += 1
            raise LayerResolutionError(str(err)) from err
