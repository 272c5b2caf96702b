"""The install's container images, built without Docker, and pushed.

``build`` makes the two images ``install/kustomize/`` runs (``layersched``: the extender and the
agent; ``kube-scheduler``: the binary ``make kubernetes`` built) as reproducible OCI
images from pinned inputs; ``oci`` writes deterministic OCI images, layouts and archives
(also the testbed's scenario and pause images); ``push`` pushes the pair to a registry
and writes an overlay of ``install/kustomize/`` that pins them by digest (``layersched deploy
images|overlay``). See docs/deploy.md.
"""
