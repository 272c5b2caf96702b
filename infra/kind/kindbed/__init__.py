"""Pulumi components of the kind + CRI-O testbed.

Each component is a ``ComponentResource`` whose children are parented to it;
the file contents come from :mod:`layersched.testbed.kind` and the in-cluster objects from
:mod:`layersched.deploy` (the same source as ``deploy/``), so the
tests can check them without Pulumi, and the mock tests check the graph.
"""

from kindbed.cluster import KindCluster
from kindbed.extender import LayerschedAgent, LayerschedExtender
from kindbed.namespace import TestbedNamespace
from kindbed.node_image import CrioNodeImage
from kindbed.registry import RegistryLinkRate, RegistryTrust, TestbedRegistry
from kindbed.scheduler import SecondScheduler
from kindbed.settings import Settings

__all__ = [
    "CrioNodeImage",
    "KindCluster",
    "LayerschedAgent",
    "LayerschedExtender",
    "RegistryLinkRate",
    "RegistryTrust",
    "SecondScheduler",
    "Settings",
    "TestbedNamespace",
    "TestbedRegistry",
]
