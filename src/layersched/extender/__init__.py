"""The kube-scheduler extender: an HTTP server scoring nodes by the pod's layers they hold.

kube-scheduler calls it with ``ExtenderArgs`` (full ``Nodes`` or, when
``nodeCacheCapable``, ``NodeNames`` resolved against the inventory an
:class:`LayerIndexProvider` supplies: a ``--nodes`` file, or the live watch of Nodes and
NodeLayerInventory objects, :class:`WatchLayerIndexProvider`) and adds its 0–10 scores
to its own. Verbs: ``POST /prioritize``, ``POST /filter`` (passes every node),
``GET /livez``, ``GET /readyz`` (200 once the inventory is loaded; ``/healthz`` is the
same), ``GET /metrics`` (also on ``--health-port``), ``GET /debug/inventory?node=NAME``
and ``/debug/decisions`` (to local clients only, unless ``--debug-endpoints``).
See ``docs/extender.md``.
"""

from layersched.core.budget import DEFAULT_MAX_INVENTORY_BYTES
from layersched.core.votes import DEFAULT_IMAGE_QUORUM
from layersched.extender._memory import (
    ALLOCATORS,
    DEFAULT_RECYCLE_EXCESS_BYTES,
    GLIBC,
    PYMALLOC,
    Recycler,
    exec_with_glibc_malloc,
    limit_malloc_arenas,
    recycled_before,
)
from layersched.extender._metrics import LATENCY_BUCKETS_S
from layersched.extender._platforms import Platforms
from layersched.extender._pod_layers import registry_of
from layersched.extender._prioritize import SCORE_DIVISOR, Extender
from layersched.extender._providers import LayerIndexProvider, StaticLayerIndexProvider
from layersched.extender._pull_secrets import (
    CREDENTIAL_WORKERS,
    MAX_CREDENTIALS,
    MAX_PULL_SECRETS_PER_POD,
    PullSecrets,
    pull_secret_names,
)
from layersched.extender._resolver import DeadlineResolver
from layersched.extender._secret_cache import (
    MAX_CACHED_SECRETS,
    MAX_SECRETS_PER_NAMESPACE,
    SecretCache,
)
from layersched.extender._server import (
    DEFAULT_RESOLVE_TIMEOUT_S,
    MAX_REQUEST_BYTES,
    SHUTDOWN_GRACE_S,
    ExtenderError,
    HealthListener,
    create_app,
    create_health_app,
    make_extender,
    serve,
)
from layersched.extender._verbs import MAX_CONCURRENT_REQUESTS, REQUEST_READ_TIMEOUT_S
from layersched.extender._wire import MAX_EXTENDER_PRIORITY
from layersched.extender.watch._parse import DEFAULT_INVENTORY_MAX_AGE_S
from layersched.extender.watch._provider import WatchLayerIndexProvider
from layersched.extender.watch._warmup import DEFAULT_AGENT_GRACE_S

__all__ = [
    "ALLOCATORS",
    "CREDENTIAL_WORKERS",
    "DEFAULT_AGENT_GRACE_S",
    "DEFAULT_IMAGE_QUORUM",
    "DEFAULT_INVENTORY_MAX_AGE_S",
    "DEFAULT_MAX_INVENTORY_BYTES",
    "DEFAULT_RECYCLE_EXCESS_BYTES",
    "DEFAULT_RESOLVE_TIMEOUT_S",
    "GLIBC",
    "LATENCY_BUCKETS_S",
    "MAX_CACHED_SECRETS",
    "MAX_CONCURRENT_REQUESTS",
    "MAX_CREDENTIALS",
    "MAX_EXTENDER_PRIORITY",
    "MAX_PULL_SECRETS_PER_POD",
    "MAX_REQUEST_BYTES",
    "MAX_SECRETS_PER_NAMESPACE",
    "PYMALLOC",
    "REQUEST_READ_TIMEOUT_S",
    "SCORE_DIVISOR",
    "SHUTDOWN_GRACE_S",
    "DeadlineResolver",
    "Extender",
    "ExtenderError",
    "HealthListener",
    "LayerIndexProvider",
    "Platforms",
    "PullSecrets",
    "Recycler",
    "SecretCache",
    "StaticLayerIndexProvider",
    "WatchLayerIndexProvider",
    "create_app",
    "create_health_app",
    "exec_with_glibc_malloc",
    "limit_malloc_arenas",
    "make_extender",
    "pull_secret_names",
    "recycled_before",
    "registry_of",
    "serve",
]
