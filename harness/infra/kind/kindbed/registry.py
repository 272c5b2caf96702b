"""The testbed registry: trusted by every node's CRI-O, on the ``kind`` network, rate-limited.

``kind load docker-image`` only reaches containerd, so on CRI-O nodes images
arrive through this registry alone.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi_command import local

from kindbed._shell import sh
from layersched_harness.testbed.kind import registries_dropin, tbf_command

TRUST_TYPE = "layersched:kind:RegistryTrust"
REGISTRY_TYPE = "layersched:kind:TestbedRegistry"
LINK_RATE_TYPE = "layersched:kind:RegistryLinkRate"
#: kind attaches every node to this Docker network; the registry joins it.
KIND_NETWORK = "kind"
REGISTRY_CONTAINER_PORT = 5000


class RegistryTrust(pulumi.ComponentResource):
    """The registries.conf.d drop-in on the host; the cluster bind-mounts it into every node."""

    path: pulumi.Output[str]
    content: str

    def __init__(
        self,
        name: str,
        *,
        path: Path,
        registry_hosts: list[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TRUST_TYPE, name, None, opts)
        self.content = registries_dropin(*registry_hosts)
        write = local.Command(
            f"{name}-dropin",
            create=sh(["mkdir", "-p", str(path.parent)], ["cp", "/dev/stdin", str(path)]),
            delete=sh(["rm", "-f", str(path)]),
            stdin=self.content,
            triggers=[self.content, str(path)],
            # Replacing writes the same path: remove the old file first, not after.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.path = write.stdout.apply(lambda _: str(path))
        self.register_outputs({"path": self.path, "content": self.content})


class TestbedRegistry(pulumi.ComponentResource):
    """A ``registry:2`` container on the ``kind`` network, published on 127.0.0.1 for pushes."""

    __test__ = False  # not a pytest class despite its name

    container: pulumi.Output[str]
    container_id: pulumi.Output[str]
    address: str
    host_address: str

    def __init__(
        self,
        name: str,
        *,
        docker_bin: str,
        container_name: str,
        image: str,
        host_port: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(REGISTRY_TYPE, name, None, opts)
        run = local.Command(
            f"{name}-container",
            create=sh(
                [
                    docker_bin,
                    "run",
                    "--detach",
                    "--restart=always",
                    "--name",
                    container_name,
                    "--network",
                    KIND_NETWORK,
                    "--publish",
                    f"127.0.0.1:{host_port}:{REGISTRY_CONTAINER_PORT}",
                    image,
                ]
            ),
            # An update (e.g. another dockerBin) must not `docker run` a second container
            # of the same name: it prints the running one's id instead, as create did.
            update=sh([docker_bin, "inspect", "--format", "{{.Id}}", container_name]),
            delete=sh([docker_bin, "rm", "--force", "--volumes", container_name]),
            triggers=[image, host_port, container_name],
            # The container name and host port are fixed: the old container must go first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.container = run.stdout.apply(lambda _: container_name)
        #: ``docker run --detach`` prints the new container's id: it changes whenever
        #: the container is recreated (and its network namespace with it).
        self.container_id = run.stdout.apply(lambda out: out.strip())
        self.address = f"{container_name}:{REGISTRY_CONTAINER_PORT}"
        self.host_address = f"localhost:{host_port}"
        self.register_outputs(
            {
                "container": self.container,
                "container_id": self.container_id,
                "address": self.address,
                "host_address": self.host_address,
                "network": KIND_NETWORK,
            }
        )


class RegistryLinkRate(pulumi.ComponentResource):
    """A tbf on the registry's ``eth0``, set from a helper container sharing its netns.

    Shaping the registry's egress slows every node's pull alike, as one
    constrained edge uplink would; pushes from the host are not slowed.

    A qdisc lives in the container's network namespace, which dies with the
    container: ``container_id`` is a trigger, so a registry that ``pulumi up``
    recreates gets its tbf again in the same run. A container Docker restarts by
    itself (daemon restart, host reboot) keeps its id but not its namespace;
    docs/kind.md says how to re-apply the tbf then.
    """

    rate_bits_per_s: int

    def __init__(
        self,
        name: str,
        *,
        docker_bin: str,
        container: pulumi.Input[str],
        container_id: pulumi.Input[str],
        rate_bits_per_s: int,
        tc_image: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(LINK_RATE_TYPE, name, None, opts)
        tc = " ".join(tbf_command(rate_bits_per_s))
        self.rate_bits_per_s = rate_bits_per_s

        def command(target: str) -> str:
            return sh(
                [
                    docker_bin,
                    "run",
                    "--rm",
                    "--network",
                    f"container:{target}",
                    "--cap-add",
                    "NET_ADMIN",
                    tc_image,
                    "sh",
                    "-c",
                    f"apk add --no-cache --quiet iproute2-tc && {tc}",
                ]
            )

        local.Command(
            f"{name}-tbf",
            create=pulumi.Output.from_input(container).apply(command),
            triggers=[rate_bits_per_s, container, container_id],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"rate_bits_per_s": rate_bits_per_s, "tc": tc})
