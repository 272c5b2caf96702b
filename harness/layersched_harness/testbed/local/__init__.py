"""The Docker-free local testbed: a real registry and containerd nodes on this host.

Ansible (``harness/playbooks/testbed-local.yml``) provisions it: docker-registry on a host
bridge, and one containerd per node inside its own network namespace, behind a veth
whose host end carries a ``tbf`` rate limit (the registry-to-node direction). This
package runs the playbooks with progress (:func:`up`, :func:`down`), reads the
inventory file they write (:func:`load_state`), probes health (:func:`probe`)
reads the link counters pulls are measured with (:func:`link_tx_bytes`), and writes its
overlay of ``install/kustomize/`` (:func:`local_testbed_overlay`).
See ``docs/testbed-local.md``.
"""

from layersched_harness.testbed.local._ansible import (
    DEFAULT_NET_BASE,
    DEFAULT_NODE_COUNT,
    DEFAULT_PREFIX,
    DEFAULT_RATE_BITS_PER_S,
    NET_BASE_ENV,
    PARALLEL_IMAGE_PULLS,
    PLAYBOOKS_DIR,
    PREFIX_ENV,
    RUNTIMES,
    RUNTIMES_ENV,
    PlaybookResult,
    TestbedSettings,
    default_net_base,
    default_prefix,
    default_runtimes,
    down,
    parse_runtimes,
    require_root,
    run_playbook,
    up,
)
from layersched_harness.testbed.local._overlay import (
    LOCAL_PATCHES,
    LocalTestbedTarget,
    local_testbed_overlay,
)
from layersched_harness.testbed.local._state import (
    DEFAULT_STATE_DIR,
    STATE_DIR_ENV,
    ClusterInfo,
    DaemonInfo,
    ExtenderInfo,
    NetworkInfo,
    RegistryInfo,
    SchedulerInfo,
    TestbedNode,
    TestbedState,
    default_state_dir,
    load_state,
    parse_state,
    state_path,
)
from layersched_harness.testbed.local._status import (
    ComponentStatus,
    TestbedNodeStatus,
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
    "PARALLEL_IMAGE_PULLS",
    "PLAYBOOKS_DIR",
    "PREFIX_ENV",
    "RUNTIMES",
    "RUNTIMES_ENV",
    "STATE_DIR_ENV",
    "ClusterInfo",
    "ComponentStatus",
    "DaemonInfo",
    "ExtenderInfo",
    "LocalTestbedTarget",
    "NetworkInfo",
    "PlaybookResult",
    "RegistryInfo",
    "SchedulerInfo",
    "TestbedNode",
    "TestbedNodeStatus",
    "TestbedSettings",
    "TestbedState",
    "TestbedStatus",
    "default_net_base",
    "default_prefix",
    "default_runtimes",
    "default_state_dir",
    "down",
    "link_tx_bytes",
    "load_state",
    "local_testbed_overlay",
    "parse_runtimes",
    "parse_state",
    "pid_alive",
    "probe",
    "require_root",
    "run_playbook",
    "state_path",
    "tbf_rate_bits_per_s",
    "up",
]
