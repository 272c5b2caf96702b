"""Pulumi components of the kind + CRI-O testbed.

Each component is a ``ComponentResource`` whose children are parented to it;
the file contents come from :mod:`layersched_harness.testbed.kind`, and layersched itself is
installed from ``install/kustomize/`` through the kind overlay
(:func:`layersched_harness.testbed.kind.kind_overlay`), so the tests can check them
without Pulumi, and the mock tests check the graph.
"""

from kindbed.cluster import KindCluster
from kindbed.install import LayerschedInstall
from kindbed.node_image import CrioNodeImage
from kindbed.registry import RegistryLinkRate, RegistryTrust, TestbedRegistry
from kindbed.scheduler import SecondScheduler
from kindbed.settings import Settings

__all__ = [
    "CrioNodeImage",
    "KindCluster",
    "LayerschedInstall",
    "RegistryLinkRate",
    "RegistryTrust",
    "SecondScheduler",
    "Settings",
    "TestbedRegistry",
]
