"""Pulumi components of the cloud testbed (AWS): the network and the machines.

Each component is a ``ComponentResource`` whose children are parented to it; the
settings checks and the Ansible inventory come from :mod:`layersched_harness.testbed.cloud`.
"""

from cloudbed.machines import ClusterMachines
from cloudbed.network import ClusterNetwork
from cloudbed.settings import Settings

__all__ = ["ClusterMachines", "ClusterNetwork", "Settings"]
