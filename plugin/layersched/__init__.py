"""layersched: container-layer-aware scheduling for Kubernetes.

The package is layered one way (checked by import-linter):

1. ``layersched.core``: pure scoring core (image references, manifests, node
   layer inventory, strategies). No I/O.
2. adapters: ``registry`` (OCI distribution client), ``extender``
   (kube-scheduler extender HTTP server), ``cri`` (CRI gRPC client),
   ``agent`` (node agent building ``status.images``).
3. ``testbed``, ``sim`` and ``cli``: testbeds, the simulator and the command line.
"""

__version__ = "0.1.0"
