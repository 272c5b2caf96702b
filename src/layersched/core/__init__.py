"""The pure scoring core: references, manifests, node layer inventory and strategies.

Nothing in here performs I/O or imports an HTTP, gRPC or Kubernetes library;
adapters feed it parsed data and a :class:`~layersched.core.layers.LayerSource`.
"""
