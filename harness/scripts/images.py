"""make images: the release's images, every supported minor and architecture, built
without Docker: layersched's (amd64 and arm64 Debian packages and wheels) and layersched's
kube-scheduler for 1.35, 1.36 and 1.37 (each compiled from its Go module with
``CGO_ENABLED=0`` and ``GOARCH`` per architecture, cached outside the repository by build
ID and architecture: ``harness/scripts/kubernetes_build.py --arch``), each one multi-arch OCI
index.

Writes an OCI image layout per repository under ``--out`` (default
``$LAYERSCHED_CACHE_DIR/images/release/VERSION``; ``skopeo copy --all --preserve-digests
oci:OUT/kube-scheduler:TAG docker://…`` pushes one, as the release workflow does), the
record of what was built (``--record``, default ``OUT/images.json``: repository, tag and
index digest of each image, each platform's manifest digest and size; ``layersched deploy
chart|render --images`` pins the install to it), and prints a table. ``--push`` pushes
them to the ``--prefix`` registry with layersched's own client (a testbed's: with
``--insecure``, plain HTTP). ``--minor`` and ``--arch`` narrow the matrix (the cold build
of one kube-scheduler takes minutes on two cores; cached, seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kubernetes_build import build_platform

from layersched import __version__
from layersched.builds import IMAGE_ARCHES, cache_root, scheduler_build, scheduler_minor_builds
from layersched.core.errors import LayerschedError
from layersched.deploy import PLUGIN_RELEASES, write_published_images
from layersched.images.release import (
    DEFAULT_PREFIX,
    KUBE_SCHEDULER,
    ReleaseImage,
    published_record,
    push_release,
    release_images,
    write_layouts,
)

RECORD = "images.json"
MIB = 1024 * 1024


def _table(images: list[ReleaseImage]) -> str:
    lines = [f"{'image':<62} {'platform':<12} {'digest':<20} {'MiB':>6}"]
    for image in images:
        ref = f"{image.repository}:{image.tag}"
        lines.append(f"{ref:<62} {'index':<12} {image.index.digest[:19]:<20}")
        for platform, facts in image.platforms().items():
            size = int(str(facts["size_bytes"])) / MIB
            lines.append(f"{'':<62} {platform:<12} {str(facts['digest'])[:19]:<20} {size:6.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minor",
        action="append",
        type=int,
        choices=sorted(PLUGIN_RELEASES),
        help="a kube-scheduler minor (37 for 1.37; repeatable; default: every supported one)",
    )
    parser.add_argument(
        "--arch",
        action="append",
        choices=IMAGE_ARCHES,
        help=f"an architecture (repeatable; default: {' '.join(IMAGE_ARCHES)})",
    )
    parser.add_argument(
        "--no-layersched", action="store_true", help="only the kube-scheduler images"
    )
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help="the repositories' prefix (default: %(default)s, where the release publishes)",
    )
    parser.add_argument("--out", type=Path, help="where the OCI layouts go")
    parser.add_argument("--record", type=Path, help=f"the record (default: OUT/{RECORD})")
    parser.add_argument("--push", action="store_true", help="push to --prefix's registry")
    parser.add_argument("--insecure", action="store_true", help="push over plain HTTP")
    args = parser.parse_args(argv)
    arches = args.arch or list(IMAGE_ARCHES)
    wanted = set(args.minor or PLUGIN_RELEASES)
    out: Path = args.out or cache_root() / "images" / "release" / __version__
    started = time.monotonic()
    try:
        builds = [b for b in (*scheduler_minor_builds(), scheduler_build()) if b.minor[1] in wanted]
        for build in builds:
            for arch in arches:
                if build_platform(build, KUBE_SCHEDULER, arch) != 0:
                    return 1
        binaries_s = time.monotonic() - started
        images = release_images(
            builds,
            arches,
            args.prefix,
            progress=lambda message: print(f"building {message}", flush=True),
            layersched=not args.no_layersched,
        )
        for ref, directory in write_layouts(out, images).items():
            print(f"layout: oci:{directory}:{ref.rsplit(':', 1)[1]}")
        if args.push:
            for ref, digest in push_release(images, insecure=args.insecure).items():
                print(f"pushed {ref}@{digest}")
        if not args.no_layersched:
            record = args.record or out / RECORD
            write_published_images(record, published_record(images))
            print(f"record: {record}")
        print(_table(images))
        print(
            f"binaries {binaries_s:.0f} s, images {time.monotonic() - started - binaries_s:.0f} s"
        )
        return 0
    except LayerschedError as err:
        print(f"make images: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
