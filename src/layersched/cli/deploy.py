"""``layersched deploy``: write ``install/kustomize/`` or an install for a Kubernetes version,
build and
push its images, write an install to apply.

``render`` writes (or with ``--check`` compares) ``install/kustomize/``, the install for the
Kubernetes release the project builds (``layersched.deploy.KUBERNETES_VERSION``); with
``--kubernetes-version 1.X[.Y]|auto`` it writes the install for that minor into ``--dir``.
``images`` builds the layersched and kube-scheduler images without Docker and pushes them;
``overlay`` does that too and writes an overlay of ``install/kustomize/`` that pins them by digest;
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
testbed's host agents); ``chart`` writes the Helm chart (``install/charts/layersched``) from the
same generator. See docs/deploy.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from layersched import generated
from layersched.builds import REPO_ROOT, scheduler_build
from layersched.cli._install import (
    add_images_record_option,
    add_install_options,
    install_for,
    install_summary,
    published_images,
)
from layersched.cli._output import JSON, YAML, add_output_option, print_document
from layersched.cli._push import (
    add_image_options,
    describe_image,
    print_described,
    print_install,
    print_pushed,
    push_images,
)
from layersched.core.errors import InputError
from layersched.deploy import (
    CHART_DIR,
    CHART_OLDEST_MINOR,
    NAMESPACE,
    NEWEST_MINOR,
    PLUGIN_RELEASES,
    SCHEDULER_EXTENDER,
    SCHEDULER_KINDS,
    SCHEDULER_PLUGIN,
    StackSpec,
    admission_objects,
    base_tree,
    chart_files,
    parse_kubernetes_version,
    plugin_readme_block,
    stale_files,
    to_yaml_stream,
    uses_policy,
    write_tree,
)
from layersched.images.push import DEPLOY_DIR, push_layersched_image, write_overlay
from layersched.kube import checked_name

EXIT_OK = 0
EXIT_STALE = 1
#: The generated block of the plugin's README (its ready-to-use configuration).
PLUGIN_README_BLOCK = "scheduler-config"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``deploy`` subcommand and its actions."""
    p = sub.add_parser(
        "deploy",
        help="the install: install/kustomize/ and per-version installs (kustomize), images "
        "(no Docker)",
        description="Generate install/kustomize/ or a Kubernetes version's install, build and "
        "push its images, write an install to apply.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    p_render = actions.add_parser(
        "render",
        help="write install/kustomize/, or with --kubernetes-version that version's install",
    )
    p_render.add_argument(
        "--dir",
        type=Path,
        help="where to write (default: install/kustomize/; required with --kubernetes-version)",
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
        "release publishes for the minor; write it to a --dir of its own: install/kustomize/ holds "
        "the "
        "extender's)",
    )
    add_images_record_option(p_render)
    p_render.set_defaults(handler=_render)

    p_chart = actions.add_parser(
        "chart",
        help=f"write the Helm chart ({CHART_DIR}): install/kustomize/'s objects, with values",
        description="Write the Helm chart from the same generator as install/kustomize/: "
        "every object "
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
        "ValidatingAdmissionPolicy install/kustomize/ holds, named for that namespace)",
        description="The ValidatingAdmissionPolicy and binding that hold each layersched "
        "agent of a namespace to its own node's NodeLayerInventory, as install/kustomize/ installs "
        "them for its namespace (the local testbed installs them for its host agents).",
    )
    p_guard.add_argument(
        "--namespace",
        default=NAMESPACE,
        help="the namespace of the agents' service account (default: %(default)s, "
        "install/kustomize/'s)",
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


def _render(args: argparse.Namespace) -> int:
    plugin = args.scheduler == SCHEDULER_PLUGIN
    install = install_for(args)
    if plugin and install is None:
        return _render_plugin(args)
    if install is None:
        directory: Path = args.dir or DEPLOY_DIR
        if args.images is None:
            files = base_tree()
        else:  # install/kustomize/, its images by the digests a release recorded
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
                "with --dir (install/kustomize/ is the local testbed's)"
            )
        directory = args.dir
        files = base_tree(
            install.spec,
            layersched_image=install.layersched,
            kube_scheduler_image=install.kube_scheduler,
        )
        print(f"Kubernetes {install.spec.kubernetes_version}: {install_summary(install)}")
    # install/kustomize/ and the plugin's README are rendered (and checked) together
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
    directory: Path = args.out or REPO_ROOT / CHART_DIR
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
    """``--scheduler plugin`` without ``--kubernetes-version``: install/kustomize/'s install (the
    local
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
    return scheduler_build().directory() / "README.md"


def _agent_guard(args: argparse.Namespace) -> int:
    version = args.kubernetes_version or scheduler_build().version
    parse_kubernetes_version(version, "--kubernetes-version")
    namespace = checked_name(args.namespace, "--namespace")
    if not uses_policy(version):
        raise InputError(
            f"Kubernetes {version}: before 1.30 the per-node guard is the admission webhook, "
            "a Deployment with its TLS, not a policy to print: install it with install/kustomize/ "
            f"(layersched deploy render --kubernetes-version {version} --dir DIR)"
        )
    spec = StackSpec(namespace=namespace).for_version(version)
    objects = admission_objects(spec)
    if args.output == JSON:
        print_document({"apiVersion": "v1", "kind": "List", "items": objects}, JSON)
    else:
        print(to_yaml_stream(objects), end="")
    return EXIT_OK


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
    print_described(
        args,
        {
            "layersched": describe_image(layersched),
            "kube-scheduler": {"image": f"{ref.name}:{ref.tag}"},
        },
    )
    print(f"Kubernetes {install.spec.kubernetes_version}: {install_summary(install)}")
    print_install(args.out)
    return EXIT_OK
