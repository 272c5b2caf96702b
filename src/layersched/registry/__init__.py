"""The registry adapter: resolve image references to layers over the OCI distribution API.

:class:`RegistryClient` speaks ``/v2/`` (manifests, indexes, blob and
manifest push) with anonymous, basic and Bearer-token auth (credentials from
docker config files and credential helpers), bounded retries, body caps, a
per-request deadline, and a policy for which hosts it may contact on an
image's behalf. :class:`RegistryLayerSource` is a plain fetcher over it; the
one cache of answers is :class:`LayerCache` (TTLs, revalidation by digest,
charged at its real size to a :class:`MemoryBudget` it may share), used inline
through :class:`CachedLayerSource` or by the extender's deadline resolver.
See ``docs/registry.md`` for why this is not built on oras-py.
"""

from layersched.registry._auth import DEFAULT_MAX_TOKEN_BYTES
from layersched.registry._budget import DEFAULT_BUDGET_BYTES, MemoryBudget
from layersched.registry._cache import (
    MAX_CACHED_BYTES,
    MAX_CACHED_IMAGES,
    NEGATIVE_TTL_S,
    POSITIVE_TTL_S,
    LayerCache,
)
from layersched.registry._client import (
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    MAX_LAYERS_PER_MANIFEST,
    FetchedManifest,
    RegistryClient,
    ResolvedImage,
)
from layersched.registry._entries import MAX_ERROR_CHARS, DigestSource, Entry, Fetched
from layersched.registry._hosts import BUILTIN_TOKEN_HOSTS
from layersched.registry._secrets import (
    DOCKER_CFG_TYPE,
    DOCKER_CONFIG_JSON_TYPE,
    MAX_REGISTRIES_PER_SECRET,
    MAX_SECRET_BYTES,
    SECRET_KEYS,
    CredentialSource,
    PullCredential,
    credential_id,
    pull_credentials,
    scrub,
)
from layersched.registry._source import (
    MAX_REFUSED_REGISTRIES,
    CachedLayerSource,
    RefusedRegistries,
    RegistryLayerSource,
)

__all__ = [
    "BUILTIN_TOKEN_HOSTS",
    "DEFAULT_BUDGET_BYTES",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_MANIFEST_BYTES",
    "DEFAULT_MAX_TOKEN_BYTES",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "DOCKER_CFG_TYPE",
    "DOCKER_CONFIG_JSON_TYPE",
    "MAX_CACHED_BYTES",
    "MAX_CACHED_IMAGES",
    "MAX_ERROR_CHARS",
    "MAX_LAYERS_PER_MANIFEST",
    "MAX_REFUSED_REGISTRIES",
    "MAX_REGISTRIES_PER_SECRET",
    "MAX_SECRET_BYTES",
    "NEGATIVE_TTL_S",
    "POSITIVE_TTL_S",
    "SECRET_KEYS",
    "CachedLayerSource",
    "CredentialSource",
    "DigestSource",
    "Entry",
    "Fetched",
    "FetchedManifest",
    "LayerCache",
    "MemoryBudget",
    "PullCredential",
    "RefusedRegistries",
    "RegistryClient",
    "RegistryLayerSource",
    "ResolvedImage",
    "credential_id",
    "pull_credentials",
    "scrub",
]
