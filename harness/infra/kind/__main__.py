"""The kind + CRI-O testbed: read config, build the components, export what the rest needs.

Order: node image and registry trust -> cluster -> registry container (on the
network kind created) and its link rate -> layersched, installed from install/kustomize/ through
the kind overlay (+ the patched in-tree scheduler, which is no part of install/kustomize/).
"""

from __future__ import annotations

import pulumi
from kindbed import (
    CrioNodeImage,
    KindCluster,
    LayerschedInstall,
    RegistryLinkRate,
    RegistryTrust,
    SecondScheduler,
    Settings,
    TestbedRegistry,
)

from layersched.builds import REPO_ROOT
from layersched.core.errors import InputError
from layersched.deploy import DEFAULT_SCHEDULER
from layersched_harness.testbed.kind import ClusterSpec, intree_scheduler_config

try:
    settings = Settings.from_config(pulumi.Config(), pulumi.get_stack(), REPO_ROOT)
except InputError as err:
    # The message names the key and the fix; a Python traceback would only bury it.
    raise pulumi.RunError(f"stack config: {err}") from err
dropin = settings.state_dir / "registries.conf.d" / "50-layersched-registry.conf"

node_image = CrioNodeImage(
    "node-image",
    docker_bin=settings.docker_bin,
    context_dir=REPO_ROOT / "harness" / "infra" / "kind" / "node-image",
    kind_node_image=settings.kind_node_image,
    crio_version=settings.crio_version,
    prebuilt=settings.prebuilt_node_image if settings.use_prebuilt_node_image else None,
)
trust = RegistryTrust(
    "registry-trust",
    path=dropin,
    registry_hosts=[settings.registry_address, *settings.extra_registry_hosts],
)
cluster = KindCluster(
    "cluster",
    spec=ClusterSpec(
        name=settings.cluster_name,
        node_image=node_image.tag,
        registries_dropin_host_path=str(dropin),
        workers=settings.workers,
    ),
    kind_bin=settings.kind_bin,
    kind_version=settings.kind_version,
    kubeconfig_path=settings.state_dir / "kubeconfig",
    logs_dir=settings.state_dir / "logs",
    opts=pulumi.ResourceOptions(depends_on=[node_image, trust]),
)
registry = TestbedRegistry(
    "registry",
    docker_bin=settings.docker_bin,
    container_name=settings.registry_name,
    image=settings.registry_image,
    host_port=settings.registry_host_port,
    opts=pulumi.ResourceOptions(depends_on=[cluster]),  # joins the network kind creates
)
if settings.link_rate_bits_per_s > 0:
    RegistryLinkRate(
        "registry-link",
        docker_bin=settings.docker_bin,
        container=registry.container,
        container_id=registry.container_id,
        rate_bits_per_s=settings.link_rate_bits_per_s,
        tc_image=settings.tc_image,
    )

in_cluster = pulumi.ResourceOptions(providers=[cluster.provider])
install = LayerschedInstall(
    "layersched",
    target=settings.kind_target,
    deploy_dir=REPO_ROOT / "install" / "kustomize",
    overlay_dir=settings.state_dir / "deploy-overlay",
    opts=in_cluster,
)
scheduler_names = [DEFAULT_SCHEDULER, install.scheduler_name]
if settings.patched_scheduler:
    intree = SecondScheduler(
        "layer-locality-intree",
        namespace=install.namespace,
        image=settings.intree_scheduler_image,
        config=intree_scheduler_config(
            weight=settings.intree_plugin_weight,
            api_version=settings.patched_scheduler_api_version,
        ),
        # Its image only exists once sideload.yml pushed it, after `pulumi up`.
        skip_await=True,
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[install]),
    )
    scheduler_names.append(intree.scheduler_name)

pulumi.export("kubeconfig_path", cluster.kubeconfig_path)
pulumi.export("cluster_name", cluster.name)
pulumi.export("node_names", list(cluster.node_names))
pulumi.export("node_image", node_image.image)
pulumi.export("registry_address", registry.address)
pulumi.export("registry_host_address", registry.host_address)
pulumi.export("registry_container", registry.container)
pulumi.export("link_rate_bits_per_s", settings.link_rate_bits_per_s)
pulumi.export("layersched_image", settings.layersched_image)
pulumi.export("kubernetes_version", settings.kubernetes_version)
pulumi.export("deploy_overlay", str(install.overlay_dir))
pulumi.export("scheduler_names", scheduler_names)
