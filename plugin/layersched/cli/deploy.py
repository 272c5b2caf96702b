"""``layersched deploy``: write ``deploy/``, build and push its images, write an overlay.

``render`` writes (or with ``--check`` compares) the kustomization in ``deploy/``;
``images`` builds the layersched and kube-scheduler images without Docker and pushes
them; ``overlay`` does that too and writes an overlay of ``deploy/`` that pins them by
digest, so that ``kubectl apply -k DIR`` installs and ``kubectl delete -k DIR`` removes.
(The local testbed's overlay, with its patches: ``layersched testbed overlay``.)
See docs/deploy.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from layersched.builds import kubernetes_build
from layersched.core.errors import InputError
from layersched.deploy import base_tree, stale_files, write_tree
from layersched.images.push import (
    DEPLOY_DIR,
    PushedImage,
    PushedStack,
    build_and_push,
    write_overlay,
)

EXIT_OK = 0
EXIT_STALE = 1
KUBE_SCHEDULER = "kube-scheduler"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``deploy`` subcommand and its actions."""
    p = sub.add_parser(
        "deploy",
        help="the install: deploy/ (kustomize), its images (no Docker), overlays",
        description="Generate deploy/, build and push its images, write an overlay to apply.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    p_render = actions.add_parser("render", help="write deploy/ from layersched.deploy")
    p_render.add_argument("--dir", type=Path, default=DEPLOY_DIR, help="default: deploy/")
    p_render.add_argument(
        "--check", action="store_true", help="only compare; exit 1 if a file is stale"
    )
    p_render.set_defaults(handler=_render)

    for name, helptext in (
        ("images", "build the layersched and kube-scheduler images and push them"),
        ("overlay", "build and push the images, then write an overlay of deploy/ to apply"),
    ):
        q = actions.add_parser(name, help=helptext)
        q.add_argument("--registry", required=True, help="HOST:PORT to push to")
        add_image_options(q)
        if name == "overlay":
            q.add_argument("--out", type=Path, required=True, help="the overlay's directory")
        q.set_defaults(handler=_overlay if name == "overlay" else _images)


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
    q.add_argument("--json", action="store_true", help="print what was pushed as JSON")


def _render(args: argparse.Namespace) -> int:
    files = base_tree()
    if args.check:
        stale = stale_files(args.dir, files)
        for name in stale:
            print(f"{args.dir / name} is stale: run `layersched deploy render`")
        return EXIT_STALE if stale else EXIT_OK
    for name in write_tree(args.dir, files):
        print(f"wrote {args.dir / name}")
    return EXIT_OK


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


def _describe(pushed: PushedStack) -> dict[str, dict[str, object]]:
    def one(image: PushedImage) -> dict[str, object]:
        return {
            "image": f"{image.ref.name}@{image.ref.digest}",
            "size_bytes": image.size_bytes,
            "layer_sizes_bytes": list(image.layer_sizes_bytes),
            "build_s": round(image.build_s, 2),
        }

    return {"layersched": one(pushed.layersched), "kube-scheduler": one(pushed.kube_scheduler)}


def print_pushed(args: argparse.Namespace, pushed: PushedStack) -> None:
    """What was pushed: one line per image, or JSON with ``--json``."""
    described = _describe(pushed)
    if args.json:
        print(json.dumps(described, indent=2))
        return
    for name, image in described.items():
        print(f"{name}: {image['image']} ({image['size_bytes']:,} B compressed)")


def print_install(out: Path) -> None:
    """How to apply and remove the overlay written to ``out``."""
    print(f"install: kubectl apply -k {out}\nremove:  kubectl delete -k {out}")


def _images(args: argparse.Namespace) -> int:
    print_pushed(args, push_images(args, args.registry))
    return EXIT_OK


def _overlay(args: argparse.Namespace) -> int:
    pushed = push_images(args, args.registry)
    write_overlay(args.out, pushed)
    print_pushed(args, pushed)
    print_install(args.out)
    return EXIT_OK
