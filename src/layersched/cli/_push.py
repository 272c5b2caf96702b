"""Building and pushing the install's images from the command line (``layersched deploy
images|overlay``, and the testbed's): the options, the kube-scheduler binary to package,
progress on stderr, and what was pushed, as lines or ``-o json|yaml``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from layersched.builds import scheduler_build
from layersched.cli._output import JSON, YAML, add_output_option, print_document
from layersched.core.errors import InputError
from layersched.images.push import PushedImage, PushedStack, build_and_push

KUBE_SCHEDULER = "kube-scheduler"


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


def _kube_scheduler_bin(args: argparse.Namespace) -> Path:
    """The binary to package, checked before any image is built."""
    given: Path | None = args.kube_scheduler_bin
    if given is None:
        return scheduler_build().require(KUBE_SCHEDULER) / KUBE_SCHEDULER
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


def describe_image(image: PushedImage) -> dict[str, object]:
    return {
        "image": f"{image.ref.name}@{image.ref.digest}",
        "size_bytes": image.size_bytes,
        "layer_sizes_bytes": list(image.layer_sizes_bytes),
        "build_s": round(image.build_s, 2),
    }


def _describe(pushed: PushedStack) -> dict[str, dict[str, object]]:
    return {
        "layersched": describe_image(pushed.layersched),
        "kube-scheduler": describe_image(pushed.kube_scheduler),
    }


def print_described(args: argparse.Namespace, described: dict[str, dict[str, object]]) -> None:
    if args.output is not None:
        print_document(described, args.output)
        return
    for name, image in described.items():
        size = image.get("size_bytes")
        pushed = f" ({size:,} B compressed)" if isinstance(size, int) else " (not built here)"
        print(f"{name}: {image['image']}{pushed}")


def print_pushed(args: argparse.Namespace, pushed: PushedStack) -> None:
    """What was pushed: one line per image, or JSON/YAML with ``-o``."""
    print_described(args, _describe(pushed))


def print_install(out: Path) -> None:
    """How to apply and remove the overlay written to ``out``."""
    print(f"install: kubectl apply -k {out}\nremove:  kubectl delete -k {out}")
