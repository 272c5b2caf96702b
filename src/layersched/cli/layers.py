"""``layersched layers``: a LAYERS.json for a list of images, read from their registries.

Where the registries are reachable (a workstation logged in to them, a CI job with pull
credentials), this writes the offline layer source that ``estimate``, ``score`` and the
extender read with ``--layers`` where they are not (an air-gapped cluster, a private
registry). Images come as arguments or one per line from ``--from FILE`` (``-``: standard
input), for example ``kubectl get pods -A -o jsonpath='{..image}' | tr ' ' '\\n'``. Every
image is resolved; the file is written (atomically) only when all were, unless
``--partial``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from layersched.cli._sources import add_layer_source_options, open_layer_source
from layersched.core.errors import InputError, LayerResolutionError
from layersched.core.reference import ImageName
from layersched.registry import DEFAULT_DEADLINE_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

log = logging.getLogger(__name__)
#: An images list longer than this is refused (a mistaken file, not a cluster's images).
MAX_IMAGES = 10_000
#: The exit status when some images could not be resolved (nothing written without --partial).
EXIT_UNRESOLVED = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``layers`` subcommand."""
    p = sub.add_parser(
        "layers",
        help="write a LAYERS.json (for --layers) for images, read from their registries",
        description="Resolve each image's layers (digest and compressed size) through its "
        "registry and write them as the offline layer source that --layers reads, for a "
        "cluster whose registries this machine reaches and the command that reads them "
        "does not.",
    )
    p.add_argument("images", nargs="*", metavar="IMAGE", help="image references")
    p.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="more images, one per line ('-': standard input; blank lines and # comments skipped)",
    )
    p.add_argument(
        "--out",
        metavar="LAYERS.json",
        help="write here (default: standard output)",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help=f"write the images that resolved even when some did not (exit 0; default: "
        f"write nothing and exit {EXIT_UNRESOLVED})",
    )
    add_layer_source_options(
        p,
        registry_timeout_s=DEFAULT_TIMEOUT_S,
        registry_retries=DEFAULT_RETRIES,
        registry_deadline_s=DEFAULT_DEADLINE_S,
    )
    p.set_defaults(handler=run)


def image_list(args: argparse.Namespace) -> list[ImageName]:
    """The images of the arguments and ``--from``, each once, in order."""
    images = [ImageName(image) for image in args.images]
    if args.from_file:
        try:
            text = (
                sys.stdin.read()
                if args.from_file == "-"
                else Path(args.from_file).read_text(encoding="utf-8")
            )
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"--from {args.from_file}: cannot read it ({err})") from None
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                images.append(ImageName(line))
    images = list(dict.fromkeys(images))
    if not images:
        raise InputError("no image given: name images as arguments or pass --from FILE")
    if len(images) > MAX_IMAGES:
        raise InputError(f"{len(images)} images: at most {MAX_IMAGES} at once; split the list")
    return images


def run(args: argparse.Namespace) -> int:
    """Resolve and write."""
    if args.layers:
        raise InputError("--layers reads a LAYERS.json; this command writes one: drop --layers")
    images = image_list(args)
    source = open_layer_source(args)
    document: dict[str, list[dict[str, object]]] = {}
    failed: list[str] = []
    for image in images:
        try:
            layers = source.resolve(image)
        except LayerResolutionError as err:
            log.warning("%s: %s", image, err)
            failed.append(image)
            continue
        document[image] = [{"digest": layer.digest, "size": layer.size_bytes} for layer in layers]
    print(f"resolved {len(document)} of {len(images)} images", file=sys.stderr)
    if failed and not args.partial:
        print(
            f"not written: {len(failed)} image(s) did not resolve (named above): give "
            "--registry-config FILE for private registries, --insecure-registry for plain "
            "HTTP ones, or --partial to write the others",
            file=sys.stderr,
        )
        return EXIT_UNRESOLVED
    text = json.dumps(document, indent=2) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        _write_atomically(Path(args.out), text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _write_atomically(path: Path, text: str) -> None:
    directory = path.parent if str(path.parent) else Path()
    try:
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        Path(temporary).replace(path)
    except OSError as err:
        raise InputError(f"--out {path}: cannot write it ({err.strerror})") from None
