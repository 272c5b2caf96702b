"""Node agent: publishes a node's runtime images the way a kubelet would.

It turns a CRI image list into ``Node.status.images`` (names, sizes, sort
order and caps exactly as kubelet sets them) and a whole v1 Node object, so
the scheduler sees what it would see in a cluster. Ryax-style layer
annotations become the patched kubelet's ``layers`` map (layersched's
extension). ``layersched agent`` runs it against a CRI endpoint.
"""

from layersched.agent._node import (
    DEFAULT_MAX_IMAGES,
    MAX_NAMES_PER_IMAGE,
    NO_IMAGE_CAP,
    AgentImage,
    build_node,
    node_status_images,
)

__all__ = [
    "DEFAULT_MAX_IMAGES",
    "MAX_NAMES_PER_IMAGE",
    "NO_IMAGE_CAP",
    "AgentImage",
    "build_node",
    "node_status_images",
]
