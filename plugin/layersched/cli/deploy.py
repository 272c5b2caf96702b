"""``layersched deploy``: write ``deploy/`` or an install for a Kubernetes version, build and
push its images, write an install to apply.

``render`` writes (or with ``--check`` compares) ``deploy/``, the install for the
Kubernetes release the project builds (``layersched.deploy.KUBERNETES_VERSION``); with
``--kubernetes-version 1.X[.Y]|auto`` it writes the install for that minor into ``--dir``.
``images`` builds the layersched and kube-scheduler images without Docker and pushes them;
``overlay`` does that too and writes an overlay of ``deploy/`` that pins them by digest;
with ``--kubernetes-version`` it builds and pushes the layersched image only
(kube-scheduler is upstream's) and writes that minor's install, pinned, into ``--out``.
Either way ``kubectl apply -k DIR`` installs and ``kubectl delete -k DIR`` removes. (The
local testbed's overlay, with its patches: ``layersched testbed overlay``.) ``render
--scheduler plugin --dir DIR`` writes the install whose kube-scheduler (the project's own
build, 1.35 and later) runs the LayerLocality plugin instead of the extender sidecar.
With ``--kubernetes-version 1.35`` or newer, ``--scheduler plugin`` installs
the kube-scheduler the release publishes for that minor (layersched's build, with the plugin).
``render --images RECORD`` and ``chart --images RECORD`` pin the install's images by the
digests a release recorded (``make images`` writes the record; the release workflow runs
both). ``agent-guard`` prints the per-node guard (the
ValidatingAdmissionPolicy) for the agents of a namespace (the role installs it for the
testbed's host agents); ``chart`` writes the Helm chart (``charts/layersched``) from the
same generator. See docs/deploy.md.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from layersched import __version__, generated
from layersched.builds import kubernetes_build
from layersched.cli._kube import client_config
from layersched.cli._output import JSON, YAML, add_output_option, print_document
from layersched.core.errors import InputError, KubeError
from layersched.deploy import (
    AUTO,
    CHART_DIR,
    CHART_OLDEST_MINOR,
    DEFAULT_ALLOWED_REGISTRIES,
    DEFAULT_WEIGHT,
    KUBERNETES_VERSION,
    NAMESPACE,
    NEWEST_MINOR,
    OLDEST_MINOR,
    PLUGIN_RELEASES,
    PUBLISHED_IMAGE,
    SCHEDULER_EXTENDER,
    SCHEDULER_KINDS,
    SCHEDULER_PLUGIN,
    UPSTREAM_KUBE_SCHEDULER,
    EgressPeer,
    EgressSpec,
    ImageRef,
    KubernetesVersion,
    PublishedImages,
    StackSpec,
    admission_objects,
    base_tree,
    chart_files,
    default_published,
    parse_image_ref,
    parse_kubernetes_version,
    plugin_readme_block,
    read_published_images,
    stale_files,
    to_yaml_stream,
    upstream_kube_scheduler,
    uses_policy,
    write_tree,
)
from layersched.images.push import (
    DEPLOY_DIR,
    PushedImage,
    PushedStack,
    build_and_push,
    push_layersched_image,
    write_overlay,
)
from layersched.kube import (
    VERSION_PATH,
    KubeClient,
    KubeConfig,
    checked_name,
    namespace_path,
)

EXIT_OK = 0
EXIT_STALE = 1
KUBE_SCHEDULER = "kube-scheduler"
#: The ``kubernetes`` Service in ``default``: its endpoints are the API server's addresses.
API_SERVICE_NAMESPACE = "default"
API_SERVICE = "kubernetes"
HTTPS_PORT = 443
#: The generated block of the plugin's README (its ready-to-use configuration).
PLUGIN_README_BLOCK = "scheduler-config"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``deploy`` subcommand and its actions."""
    p = sub.add_parser(
        "deploy",
        help="the install: deploy/ and per-version installs (kustomize), images (no Docker)",
        description="Generate deploy/ or a Kubernetes version's install, build and push its "
        "images, write an install to apply.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    p_render = actions.add_parser(
        "render", help="write deploy/, or with --kubernetes-version that version's install"
    )
    p_render.add_argument(
        "--dir",
        type=Path,
        help="where to write (default: deploy/; required with --kubernetes-version)",
    )
    p_render.add_argument(
        "--check", action="store_true", help="only compare; exit 1 if a file is stale"
    )
    add_install_options(p_render)
    p_render.add_argument(
        "--scheduler",
        choices=SCHEDULER_KINDS,
        default=SCHEDULER_EXTENDER,
        help="how the second scheduler scores layers: the extender sidecar (default, every "
        "Kubernetes version) or the LayerLocality plugin (layersched's kube-scheduler build, "
        f"Kubernetes 1.{min(PLUGIN_RELEASES)} to 1.{max(PLUGIN_RELEASES)}, the image the "
        "release publishes for the minor; write it to a --dir of its own: deploy/ holds the "
        "extender's)",
    )
    add_images_record_option(p_render)
    p_render.set_defaults(handler=_render)

    p_chart = actions.add_parser(
        "chart",
        help=f"write the Helm chart ({CHART_DIR}): deploy/'s objects, with values",
        description="Write the Helm chart from the same generator as deploy/: every object "
        f"of Kubernetes 1.{CHART_OLDEST_MINOR} to 1.{NEWEST_MINOR}'s install, with values "
        "(docs/deploy.md).",
    )
    p_chart.add_argument(
        "--out", type=Path, help=f"the chart's directory (default: {CHART_DIR} in this checkout)"
    )
    p_chart.add_argument(
        "--check", action="store_true", help="only compare; exit 1 if a file is stale"
    )
    add_images_record_option(p_chart)
    p_chart.set_defaults(handler=_chart)

    p_guard = actions.add_parser(
        "agent-guard",
        help="print the per-node guard of the agents of a namespace (Kubernetes 1.30+: the "
        "ValidatingAdmissionPolicy deploy/ holds, named for that namespace)",
        description="The ValidatingAdmissionPolicy and binding that hold each layersched "
        "agent of a namespace to its own node's NodeLayerInventory, as deploy/ installs "
        "them for its namespace (the local testbed installs them for its host agents).",
    )
    p_guard.add_argument(
        "--namespace",
        default=NAMESPACE,
        help="the namespace of the agents' service account (default: %(default)s, deploy/'s)",
    )
    p_guard.add_argument(
        "--kubernetes-version",
        help="the cluster's release (default: the release `make kubernetes` builds)",
    )
    add_output_option(p_guard, outputs=(YAML, JSON))
    p_guard.set_defaults(handler=_agent_guard)

    for name, helptext in (
        ("images", "build the layersched and kube-scheduler images and push them"),
        ("overlay", "build and push the images, then write an install to apply"),
    ):
        q = actions.add_parser(name, help=helptext)
        q.add_argument("--registry", required=True, help="HOST:PORT to push to")
        add_image_options(q)
        if name == "overlay":
            q.add_argument("--out", type=Path, required=True, help="the install's directory")
            q.add_argument(
                "--insecure-registry",
                action="store_true",
                help="with --kubernetes-version: push over plain HTTP (a testbed's registry; "
                "default there: HTTPS, with the system's CAs)",
            )
            add_install_options(q)
        q.set_defaults(handler=_overlay if name == "overlay" else _images)


def add_images_record_option(q: argparse.ArgumentParser) -> None:
    """``--images RECORD``: the published images' digests."""
    q.add_argument(
        "--images",
        type=Path,
        metavar="RECORD",
        help="pin the images by the digests of a release's record (the images.json `make "
        "images` writes; default: the release's tags, which no registry has before it)",
    )


def published_images(args: argparse.Namespace) -> PublishedImages:
    """The record of ``--images`` (the minors it lists, nothing else: a minor it leaves out
    was not published there); the release's tags without it."""
    record: Path | None = getattr(args, "images", None)
    return default_published() if record is None else read_published_images(record)


def add_install_options(q: argparse.ArgumentParser) -> None:
    """The Kubernetes version an install is rendered for, and what it may reach."""
    q.add_argument(
        "--kubernetes-version",
        metavar="1.X[.Y]|auto",
        help=f"render the install for this Kubernetes version (1.{OLDEST_MINOR}-1.{NEWEST_MINOR}; "
        "without a patch, the newest we know of); 'auto' reads it from the cluster of "
        f"--kubeconfig. Without it: deploy/, the install for {KUBERNETES_VERSION}",
    )
    q.add_argument(
        "--kubeconfig",
        type=Path,
        help="the cluster --kubernetes-version auto reads (default: $KUBECONFIG's files "
        "merged, else ~/.kube/config), as kubectl reads it: exec credential plugins too",
    )
    q.add_argument(
        "--context", metavar="NAME", help="its kubeconfig context (default: its current-context)"
    )
    q.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help=f"the namespace the install goes into (default: {NAMESPACE}, deploy/'s)",
    )
    q.add_argument(
        "--weight",
        type=int,
        default=DEFAULT_WEIGHT,
        metavar="N",
        help="weight of the layer scores against the default plugins: the extender's "
        "(its 0-10 score x 10 x N) or the plugin's (default and recommended: %(default)s, "
        "docs/extender.md says why)",
    )
    q.add_argument(
        "--image",
        metavar="REPOSITORY[:TAG|@DIGEST]",
        help=f"the layersched image the nodes pull (default: {PUBLISHED_IMAGE}:{__version__}, "
        "what the release publishes and the chart's default; `deploy overlay` pins the image "
        "it pushes instead)",
    )
    q.add_argument(
        "--kube-scheduler-image",
        metavar="REPOSITORY",
        default=UPSTREAM_KUBE_SCHEDULER,
        help="where the nodes pull kube-scheduler from: upstream's or a mirror of its tags "
        "(default: %(default)s; the tag is the version's)",
    )
    q.add_argument(
        "--allow-registry",
        action="append",
        metavar="HOST[:PORT]",
        help="a registry the extender may resolve pod images from (repeatable; default: "
        f"{' '.join(DEFAULT_ALLOWED_REGISTRIES)}); images from others get neutral scores",
    )
    q.add_argument(
        "--pull-secret-namespace",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="let the extender read the pull secrets pods of NAMESPACE name (a Role granting "
        "get on its secrets; repeatable; default: none: private images resolve only through "
        "the nodes' agents)",
    )
    q.add_argument(
        "--pull-secret-name",
        action="append",
        default=[],
        metavar="SECRET",
        help="with --pull-secret-namespace: only these secrets (the Roles' resourceNames; "
        "repeatable; default: any secret a pod names)",
    )
    q.add_argument(
        "--api-server",
        action="append",
        default=[],
        metavar="ADDRESS:PORT",
        help="the API server's address as the pods reach it, for the scheduler pods' egress "
        "policy (repeatable; with --kubernetes-version auto: read from the cluster; "
        "without either: any address on 443 and 6443)",
    )
    q.add_argument(
        "--registry-address",
        action="append",
        default=[],
        metavar="ADDRESS[/PREFIX]:PORT",
        help="a registry on an internal address the extender must reach (repeatable; public "
        "addresses on 443 are open anyway)",
    )


def add_image_options(q: argparse.ArgumentParser) -> None:
    """How the images are built and pushed, and how the result is printed."""
    q.add_argument(
        "--kube-scheduler-bin",
        type=Path,
        help="the kube-scheduler binary to package (default: the one `make kubernetes` "
        "built, in the build cache)",
    )
    q.add_argument(
        "--secure-registry",
        action="store_true",
        help="push over HTTPS (default: plain HTTP, as testbed registries serve)",
    )
    add_output_option(q, outputs=(JSON, YAML), old="--json")


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What ``--kubernetes-version auto`` reads from the cluster."""

    version: KubernetesVersion
    #: The API server's endpoints and the ``kubernetes`` Service's cluster IP on 443.
    api_server: tuple[EgressPeer, ...]


def _peer(address: str, port: int) -> EgressPeer:
    network = ipaddress.ip_network(address)
    return EgressPeer(str(network), port)


def api_server_peers(endpoints: dict[str, Any], service: dict[str, Any]) -> tuple[EgressPeer, ...]:
    """The addresses a pod reaches the API server at: ``default/kubernetes``' endpoints (its
    ``https`` port) and, for network plugins that match before the Service is translated,
    its cluster IP on 443."""
    peers: list[EgressPeer] = []
    try:
        for subset in endpoints.get("subsets") or []:
            ports = [p["port"] for p in subset.get("ports") or [] if p.get("name") == "https"]
            for address in subset.get("addresses") or []:
                peers += [_peer(address["ip"], int(port)) for port in ports]
        cluster_ip = (service.get("spec") or {}).get("clusterIP")
        if cluster_ip:
            peers.append(_peer(cluster_ip, HTTPS_PORT))
    except (KeyError, TypeError, ValueError) as err:
        raise KubeError(
            f"reading the API server's addresses from {API_SERVICE_NAMESPACE}/{API_SERVICE}: "
            f"unexpected answer ({err}); pass --api-server ADDRESS:PORT instead"
        ) from None
    return tuple(dict.fromkeys(peers))


def read_cluster(config: KubeConfig) -> ClusterFacts:
    """The server's version (``/version``) and addresses, through ``config``."""
    base = f"{namespace_path(API_SERVICE_NAMESPACE)}"
    with KubeClient(config) as kube:
        version = str(kube.get(VERSION_PATH).get("gitVersion", ""))
        endpoints = kube.get(f"{base}/endpoints/{API_SERVICE}")
        service = kube.get(f"{base}/services/{API_SERVICE}")
    return ClusterFacts(
        parse_kubernetes_version(version, f"the cluster's version ({config.origin})"),
        api_server_peers(endpoints, service),
    )


@dataclass(frozen=True, slots=True)
class Install:
    """An install for one Kubernetes version: its objects' spec and kube-scheduler's image."""

    spec: StackSpec
    kube_scheduler: ImageRef
    layersched: ImageRef


def install_for(args: argparse.Namespace) -> Install | None:
    """The install the options ask for; None without ``--kubernetes-version`` (deploy/)."""
    if args.kubernetes_version is None:
        given = [
            flag
            for flag, value in (
                ("--allow-registry", args.allow_registry),
                ("--api-server", args.api_server),
                ("--registry-address", args.registry_address),
                ("--pull-secret-namespace", args.pull_secret_namespace),
                ("--pull-secret-name", args.pull_secret_name),
                ("--kubeconfig", args.kubeconfig),
                ("--context", args.context),
                ("--namespace", args.namespace),
            )
            if value
        ]
        if args.weight != DEFAULT_WEIGHT:
            given.append("--weight")
        if args.kube_scheduler_image != UPSTREAM_KUBE_SCHEDULER:
            given.append("--kube-scheduler-image")
        if getattr(args, "image", None):
            given.append("--image")
        if given:
            raise InputError(
                f"{', '.join(given)} shape an install for a Kubernetes version: pass "
                "--kubernetes-version 1.X[.Y] or auto too (without it, deploy/ is rendered, "
                "the local testbed's)"
            )
        return None
    api_server = tuple(EgressPeer.parse(a, "--api-server") for a in args.api_server)
    registries = tuple(EgressPeer.parse(a, "--registry-address") for a in args.registry_address)
    if args.kubernetes_version == AUTO:
        facts = read_cluster(client_config(args))
        version = facts.version
        api_server = api_server or facts.api_server
    else:
        version = parse_kubernetes_version(args.kubernetes_version)
    allowed = tuple(args.allow_registry or DEFAULT_ALLOWED_REGISTRIES)
    scheduler = getattr(args, "scheduler", SCHEDULER_EXTENDER)
    spec = StackSpec(
        allowed_registries=allowed,
        egress=EgressSpec(api_server, registries),
        weight=args.weight,
        namespace=checked_name(args.namespace or NAMESPACE, "--namespace"),
        scheduler=scheduler,
        kubernetes_version=version.tag,
        pull_secret_namespaces=tuple(dict.fromkeys(args.pull_secret_namespace)),
        pull_secret_names=tuple(dict.fromkeys(args.pull_secret_name)),
    ).for_version(version.tag)
    published = published_images(args)
    if scheduler == SCHEDULER_PLUGIN:
        plugin = published.plugin_image(version.minor)
        kube_scheduler = plugin.ref
        if args.kube_scheduler_image != UPSTREAM_KUBE_SCHEDULER:  # a mirror of ours
            kube_scheduler = ImageRef(args.kube_scheduler_image, tag=plugin.tag)
    else:
        kube_scheduler = upstream_kube_scheduler(version, args.kube_scheduler_image)
    layersched = published.layersched.ref
    if args.image:
        layersched = parse_image_ref(args.image, "--image")
    return Install(spec, kube_scheduler, layersched)


def _render(args: argparse.Namespace) -> int:
    plugin = args.scheduler == SCHEDULER_PLUGIN
    install = install_for(args)
    if plugin and install is None:
        return _render_plugin(args)
    if install is None:
        directory: Path = args.dir or DEPLOY_DIR
        if args.images is None:
            files = base_tree()
        else:  # deploy/, its images by the digests a release recorded
            published = published_images(args)
            files = base_tree(
                StackSpec(),
                layersched_image=published.layersched.ref,
                kube_scheduler_image=published.plugin_image(NEWEST_MINOR).ref,
            )
    else:
        if args.dir is None or (plugin and args.dir.resolve() == DEPLOY_DIR.resolve()):
            raise InputError(
                "--kubernetes-version renders an install of your own: give its directory "
                "with --dir (deploy/ is the local testbed's)"
            )
        directory = args.dir
        files = base_tree(
            install.spec,
            layersched_image=install.layersched,
            kube_scheduler_image=install.kube_scheduler,
        )
        print(f"Kubernetes {install.spec.kubernetes_version}: {_summary(install)}")
    # deploy/ and the plugin's README are rendered (and checked) together
    readme = plugin_readme() if install is None and args.images is None else None
    if args.check:
        stale = [str(directory / name) for name in stale_files(directory, files)]
        if readme is not None and generated.read_block(readme, PLUGIN_README_BLOCK) != (
            plugin_readme_block()
        ):
            stale.append(str(readme))
        for name in stale:
            print(f"{name} is stale: run `layersched deploy render`")
        return EXIT_STALE if stale else EXIT_OK
    for name in write_tree(directory, files):
        print(f"wrote {directory / name}")
    if readme is not None:
        before = readme.read_text(encoding="utf-8")
        generated.write_block(readme, PLUGIN_README_BLOCK, plugin_readme_block())
        if readme.read_text(encoding="utf-8") != before:
            print(f"wrote {readme}")
    return EXIT_OK


def _chart(args: argparse.Namespace) -> int:
    directory: Path = args.out or DEPLOY_DIR.parent / CHART_DIR
    files = chart_files(published_images(args) if args.images is not None else None)
    if args.check:
        stale = stale_files(directory, files)
        for name in stale:
            print(f"{directory / name} is stale: run `layersched deploy chart`")
        return EXIT_STALE if stale else EXIT_OK
    for name in write_tree(directory, files):
        print(f"wrote {directory / name}")
    return EXIT_OK


def _render_plugin(args: argparse.Namespace) -> int:
    """``--scheduler plugin`` without ``--kubernetes-version``: deploy/'s install (the local
    testbed's images) with LayerLocality in its kube-scheduler, into a ``--dir`` of its own."""
    if args.dir is None or args.dir.resolve() == DEPLOY_DIR.resolve():
        raise InputError(
            f"--scheduler {SCHEDULER_PLUGIN}: give a --dir of its own: {DEPLOY_DIR} holds the "
            "extender's install"
        )
    files = base_tree(StackSpec(scheduler=SCHEDULER_PLUGIN))
    if args.check:
        stale = stale_files(args.dir, files)
        for name in stale:
            print(f"{args.dir / name} is stale: run `layersched deploy render`")
        return EXIT_STALE if stale else EXIT_OK
    for name in write_tree(args.dir, files):
        print(f"wrote {args.dir / name}")
    return EXIT_OK


def plugin_readme() -> Path:
    """The LayerLocality plugin's README (beside its Go module)."""
    return kubernetes_build().directory() / "README.md"


def _agent_guard(args: argparse.Namespace) -> int:
    version = args.kubernetes_version or kubernetes_build().version
    parse_kubernetes_version(version, "--kubernetes-version")
    namespace = checked_name(args.namespace, "--namespace")
    if not uses_policy(version):
        raise InputError(
            f"Kubernetes {version}: before 1.30 the per-node guard is the admission webhook, "
            "a Deployment with its TLS, not a policy to print: install it with deploy/ "
            f"(layersched deploy render --kubernetes-version {version} --dir DIR)"
        )
    spec = StackSpec(namespace=namespace).for_version(version)
    objects = admission_objects(spec)
    if args.output == JSON:
        print_document({"apiVersion": "v1", "kind": "List", "items": objects}, JSON)
    else:
        print(to_yaml_stream(objects), end="")
    return EXIT_OK


def _summary(install: Install) -> str:
    spec = install.spec
    ref = install.kube_scheduler
    api = ", ".join(f"{p.cidr}:{p.port}" for p in spec.egress.api_server) or "any address"
    return (
        f"{spec.scheduler_api_version}, kube-scheduler {ref.name}:{ref.tag}, layersched "
        f"{install.layersched.reference}, extender allowed "
        f"{', '.join(spec.allowed_registries)}, API server egress to {api}"
    )


def _kube_scheduler_bin(args: argparse.Namespace) -> Path:
    """The binary to package, checked before any image is built."""
    given: Path | None = args.kube_scheduler_bin
    if given is None:
        return kubernetes_build().require(KUBE_SCHEDULER) / KUBE_SCHEDULER
    if not given.is_file():
        raise InputError(
            f"--kube-scheduler-bin {given}: no such file: give the path of a kube-scheduler "
            "binary, or drop the flag to package the one `make kubernetes` built"
        )
    return given


def push_images(args: argparse.Namespace, registry: str) -> PushedStack:
    """Build both images (progress on stderr) and push them to ``registry``."""
    binary = _kube_scheduler_bin(args)
    console = Console(stderr=True)
    with console.status("building images") as status:
        return build_and_push(
            registry,
            binary,
            insecure=not args.secure_registry,
            progress=lambda message: status.update(message),
        )


def _one(image: PushedImage) -> dict[str, object]:
    return {
        "image": f"{image.ref.name}@{image.ref.digest}",
        "size_bytes": image.size_bytes,
        "layer_sizes_bytes": list(image.layer_sizes_bytes),
        "build_s": round(image.build_s, 2),
    }


def _describe(pushed: PushedStack) -> dict[str, dict[str, object]]:
    return {"layersched": _one(pushed.layersched), "kube-scheduler": _one(pushed.kube_scheduler)}


def _print_described(args: argparse.Namespace, described: dict[str, dict[str, object]]) -> None:
    if args.output is not None:
        print_document(described, args.output)
        return
    for name, image in described.items():
        size = image.get("size_bytes")
        pushed = f" ({size:,} B compressed)" if isinstance(size, int) else " (not built here)"
        print(f"{name}: {image['image']}{pushed}")


def print_pushed(args: argparse.Namespace, pushed: PushedStack) -> None:
    """What was pushed: one line per image, or JSON/YAML with ``-o``."""
    _print_described(args, _describe(pushed))


def print_install(out: Path) -> None:
    """How to apply and remove the overlay written to ``out``."""
    print(f"install: kubectl apply -k {out}\nremove:  kubectl delete -k {out}")


def _images(args: argparse.Namespace) -> int:
    print_pushed(args, push_images(args, args.registry))
    return EXIT_OK


def _overlay(args: argparse.Namespace) -> int:
    install = install_for(args)  # a bad version or address fails before any build
    if install is None:
        pushed = push_images(args, args.registry)
        write_overlay(args.out, pushed)
        print_pushed(args, pushed)
        print_install(args.out)
        return EXIT_OK
    if args.image is not None:
        raise InputError(
            "--image names an image to pull; `deploy overlay` builds, pushes and pins its own: "
            "drop --image (or use `deploy render --image`)"
        )
    if args.kube_scheduler_bin is not None:
        raise InputError(
            "--kube-scheduler-bin packages the local testbed's kube-scheduler: with "
            "--kubernetes-version the install runs upstream's image (--kube-scheduler-image "
            "names a mirror)"
        )
    console = Console(stderr=True)
    with console.status("building the layersched image") as status:
        layersched = push_layersched_image(
            args.registry,
            # a cluster of one's own: TLS unless plain HTTP is asked for by name
            insecure=args.insecure_registry,
            progress=lambda message: status.update(message),
        )
    write_tree(
        args.out,
        base_tree(
            install.spec,
            layersched_image=layersched.ref,
            kube_scheduler_image=install.kube_scheduler,
        ),
    )
    ref = install.kube_scheduler
    _print_described(
        args,
        {"layersched": _one(layersched), "kube-scheduler": {"image": f"{ref.name}:{ref.tag}"}},
    )
    print(f"Kubernetes {install.spec.kubernetes_version}: {_summary(install)}")
    print_install(args.out)
    return EXIT_OK
