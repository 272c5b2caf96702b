"""The registry adapter: resolve image references to layers over the OCI distribution API.

:class:`RegistryClient` speaks ``/v2/`` (manifests, indexes, blob and
manifest push) with anonymous, basic and Bearer-token auth (credentials from
docker config files and credential helpers), bounded retries, body caps, a
per-request deadline, and a policy for which hosts it may contact on an
image's behalf. :class:`RegistryLayerSource` puts caches in front of
it and implements :class:`layersched.core.layers.LayerSource`. See
``docs/registry.md`` for why this is not built on oras-py.
"""

from layersched.registry._auth import DEFAULT_MAX_TOKEN_BYTES
from layersched.registry._client import (
    BUILTIN_TOKEN_HOSTS,
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_LAYERS_PER_MANIFEST,
    FetchedManifest,
    RegistryClient,
    ResolvedImage,
)
from layersched.registry._source import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_TAG_TTL_S,
    RegistryLayerSource,
)

__all__ = [
    "BUILTIN_TOKEN_HOSTS",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_MANIFEST_BYTES",
    "DEFAULT_MAX_TOKEN_BYTES",
    "DEFAULT_RETRIES",
    "DEFAULT_TAG_TTL_S",
    "DEFAULT_TIMEOUT_S",
    "MAX_LAYERS_PER_MANIFEST",
    "FetchedManifest",
    "RegistryClient",
    "RegistryLayerSource",
    "ResolvedImage",
]
