"""Node agent: publishes a node's images and layers for the scheduler.

Its main job (``layersched agent --publish``) is the node's ``NodeLayerInventory``: the
layers read from the runtime itself and merged into one read (:mod:`._readers`),
applied to the API when they change, within the CRD's limits (:mod:`._publisher`), kept
true against other writers (its own object watched, and republished when someone else
changed, staled or deleted it), with ``/livez``, ``/readyz`` and ``/metrics`` on its
health port (:mod:`._health`, :mod:`._metrics`), all run by :func:`run` (:mod:`._run`)
in the service shell (:mod:`layersched.serving`). It also still builds the v1
Node a kubelet would publish:

It turns a CRI image list into ``Node.status.images`` (names, sizes, sort
order and caps exactly as kubelet sets them) and a whole v1 Node object, so
the scheduler sees what it would see in a cluster. Ryax-style layer
annotations become the patched kubelet's ``layers`` map (layersched's
extension). ``layersched agent`` runs it against a CRI endpoint.
"""

from layersched.agent._health import AgentHealth, health_app
from layersched.agent._loop import (
    BACKOFF_MAX_S,
    DEFAULT_POLL_S,
    DEFAULT_RESYNC_S,
    Backoff,
    ChangeSignal,
    OwnObjectApi,
    publish_loop,
    watch_events,
    watch_own_object,
)
from layersched.agent._metrics import AgentMetrics
from layersched.agent._node import (
    DEFAULT_MAX_IMAGES,
    MAX_NAMES_PER_IMAGE,
    NO_IMAGE_CAP,
    AgentImage,
    build_node,
    node_status_images,
)
from layersched.agent._publisher import (
    DEFAULT_HEARTBEAT_S,
    FIELD_MANAGER,
    REPAIR_BURST,
    REPAIR_CAUSES,
    NodeLayerInventoryApi,
    Publisher,
    fingerprint,
)
from layersched.agent._readers import (
    DEFAULT_CRIO_STORAGE,
    CRIImageLister,
    CrioStorageReader,
    ImageReader,
    NodeImagesReader,
    NodeRead,
    cri_images,
)
from layersched.agent._run import DEFAULT_HEALTH_HOST, run
from layersched.serving import LIVEZ_PATH, METRICS_PATH, READYZ_PATH

__all__ = [
    "BACKOFF_MAX_S",
    "DEFAULT_CRIO_STORAGE",
    "DEFAULT_HEALTH_HOST",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_MAX_IMAGES",
    "DEFAULT_POLL_S",
    "DEFAULT_RESYNC_S",
    "FIELD_MANAGER",
    "LIVEZ_PATH",
    "MAX_NAMES_PER_IMAGE",
    "METRICS_PATH",
    "NO_IMAGE_CAP",
    "READYZ_PATH",
    "REPAIR_BURST",
    "REPAIR_CAUSES",
    "AgentHealth",
    "AgentImage",
    "AgentMetrics",
    "Backoff",
    "CRIImageLister",
    "ChangeSignal",
    "CrioStorageReader",
    "ImageReader",
    "NodeImagesReader",
    "NodeLayerInventoryApi",
    "NodeRead",
    "OwnObjectApi",
    "Publisher",
    "build_node",
    "cri_images",
    "fingerprint",
    "health_app",
    "node_status_images",
    "publish_loop",
    "run",
    "watch_events",
    "watch_own_object",
]
