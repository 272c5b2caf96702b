"""The Docker-free local testbed: a real registry and containerd nodes on this host.

Ansible (``playbooks/testbed-local.yml``) provisions it: docker-registry on a host
bridge, and one containerd per node inside its own network namespace, behind a veth
whose host end carries a ``tbf`` rate limit (the registry-to-node direction). This
package runs the playbooks with progress (:func:`up`, :func:`down`), reads the
inventory file they write (:func:`load_inventory`), probes health (:func:`probe`)
reads the link counters pulls are measured with (:func:`link_tx_bytes`), and writes its
overlay of ``deploy/`` (:func:`local_testbed_overlay`).
See ``docs/testbed-local.md``.
"""

from layersched.testbed.local._ansible import (
    DEFAULT_NET_BASE,
    DEFAULT_NODE_COUNT,
    DEFAULT_PREFIX,
    DEFAULT_RATE_BITS_PER_S,
    NET_BASE_ENV,
    PLAYBOOKS_DIR,
    PREFIX_ENV,
    PlaybookResult,
    TestbedSettings,
    default_net_base,
    default_prefix,
    down,
    require_root,
    run_playbook,
    up,
)
from layersched.testbed.local._inventory import (
    DEFAULT_STATE_DIR,
    STATE_DIR_ENV,
    ClusterInfo,
    DaemonInfo,
    ExtenderInfo,
    NetworkInfo,
    NodeInfo,
    RegistryInfo,
    SchedulerInfo,
    TestbedInventory,
    default_state_dir,
    inventory_path,
    load_inventory,
    parse_inventory,
)
from layersched.testbed.local._overlay import (
    LOCAL_PATCHES,
    LocalTestbedTarget,
    local_testbed_overlay,
)
from layersched.testbed.local._status import (
    ComponentStatus,
    NodeStatus,
    TestbedStatus,
    link_tx_bytes,
    pid_alive,
    probe,
    tbf_rate_bits_per_s,
)

__all__ = [
    "DEFAULT_NET_BASE",
    "DEFAULT_NODE_COUNT",
    "DEFAULT_PREFIX",
    "DEFAULT_RATE_BITS_PER_S",
    "DEFAULT_STATE_DIR",
    "LOCAL_PATCHES",
    "NET_BASE_ENV",
    "PLAYBOOKS_DIR",
    "PREFIX_ENV",
    "STATE_DIR_ENV",
    "ClusterInfo",
    "ComponentStatus",
    "DaemonInfo",
    "ExtenderInfo",
    "LocalTestbedTarget",
    "NetworkInfo",
    "NodeInfo",
    "NodeStatus",
    "PlaybookResult",
    "RegistryInfo",
    "SchedulerInfo",
    "TestbedInventory",
    "TestbedSettings",
    "TestbedStatus",
    "default_net_base",
    "default_prefix",
    "default_state_dir",
    "down",
    "inventory_path",
    "link_tx_bytes",
    "load_inventory",
    "local_testbed_overlay",
    "parse_inventory",
    "pid_alive",
    "probe",
    "require_root",
    "run_playbook",
    "tbf_rate_bits_per_s",
    "up",
]
