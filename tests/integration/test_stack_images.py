"""The Docker-free images, really built: reproducible, and what the Dockerfile makes.

Builds with the real apt-get, pip and dpkg-deb (the first run downloads the pinned
packages and wheels into the cache, later runs reuse it), unpacks the layers and runs
the image's own Python as the image's user (chroot: needs root, else that part skips
with the reason). The Dockerfile is read for what it declares, so the two builds cannot
drift apart: entrypoint, command, user and Python version.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from layersched import __version__
from layersched.builds import REPO_ROOT, scheduler_build
from layersched.core.errors import InputError
from layersched.images.build import (
    build_kube_scheduler_image,
    build_kube_scheduler_index,
    build_layersched_image,
    unpack,
)
from layersched.images.product import LAYERSCHED_BIN
from layersched.images.wheels import SITE_PACKAGES
from layersched_harness.testbed.builds import find_go
from tests.fixtures import prereq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCKERFILE = REPO_ROOT / "install" / "images" / "layersched" / "Containerfile"
#: A build from a warm cache takes seconds; a cold one downloads ~45 MB.
RUN_TIMEOUT_S = 60


def _dockerfile() -> dict[str, Any]:
    """ENTRYPOINT, CMD (JSON form), USER and the Python minor of the Dockerfile."""
    text = DOCKERFILE.read_text()
    found: dict[str, Any] = {}
    for key in ("ENTRYPOINT", "CMD"):
        match = re.search(rf"^{key} (\[.*\])$", text, re.M)
        assert match, f"{DOCKERFILE}: no {key} in JSON form"
        found[key] = json.loads(match[1])
    user = re.search(r"^USER (\S+)$", text, re.M)
    # a named base pinned by digest
    python = re.search(
        r"^ARG BASE=docker.io/library/python:(\d+\.\d+)-\S+@sha256:[0-9a-f]{64}$", text, re.M
    )
    assert user and python
    found["USER"], found["python"] = user[1], python[1]
    return found


@pytest.fixture(scope="module")
def layersched_image() -> Any:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        prereq.missing("apt-get and dpkg-deb are needed to build the image from Debian packages")
    return build_layersched_image()


def test_layersched_image_is_reproducible(layersched_image: Any) -> None:
    # the same inputs, built again from the cache's layers, give the same digest
    again = build_layersched_image()
    assert again.digest == layersched_image.digest
    # and the layers are what a rebuild from scratch makes (the cache only saves time)
    assert [layer.digest for layer in again.layers] == [
        layer.digest for layer in layersched_image.layers
    ]


def test_config_matches_the_dockerfile(layersched_image: Any) -> None:
    declared = _dockerfile()
    config = json.loads(layersched_image.config_bytes)["config"]
    assert config["Entrypoint"] == declared["ENTRYPOINT"]
    assert config["Cmd"] == declared["CMD"]
    assert config["User"] == declared["USER"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert "/usr/local/bin" in env["PATH"].split(":")
    # what went in is recorded: each lock's and the wheel sources' sha256
    labels = config["Labels"]
    for name in ("debian-lock", "requirements-lock", "sources"):
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", labels[f"io.layersched.inputs.{name}"]), name


def test_contents_run_as_the_images_user(layersched_image: Any, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        prereq.missing("running the image's programs needs chroot, which needs root")
    root = tmp_path / "rootfs"
    list(unpack(layersched_image, root))
    config = json.loads(layersched_image.config_bytes)["config"]
    user = config["User"]
    entry = shutil.which(config["Entrypoint"][0], path=str(root / "usr/local/bin"))
    assert entry and Path(entry) == root / LAYERSCHED_BIN

    chroot = shutil.which("chroot")
    if chroot is None:
        prereq.missing("chroot (coreutils) is not installed")

    def run(*argv: str) -> str:
        done = subprocess.run(
            [chroot, f"--userspec={user}", str(root), *argv],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run("layersched", "--version") == f"layersched {__version__}"
    declared = _dockerfile()["python"]
    assert run("python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])") == declared
    # the C extensions load against the image's own libraries
    assert (
        run("python3", "-c", "import numpy, grpc, aiohttp, msgspec, yaml, ssl; print('ok')") == "ok"
    )


def test_kube_scheduler_image(tmp_path: Path) -> None:
    # CI's kube-scheduler image: 1.37's, for amd64, from the binary make kubernetes built
    build = scheduler_build()
    try:
        kube_scheduler = build.require("kube-scheduler") / "kube-scheduler"
    except InputError as err:
        prereq.missing(str(err))
    image = build_kube_scheduler_image(kube_scheduler, build.version, "amd64")
    assert build_kube_scheduler_image(kube_scheduler, build.version).digest == image.digest
    config = json.loads(image.config_bytes)
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/kube-scheduler"]
    assert config["config"]["User"] == "65532:65532"
    # what went in, read from the binary's own build info (go version -m prints the same)
    labels = config["config"]["Labels"]
    go_version = subprocess.run(
        [find_go(build.go_version_needed())[0], "version", str(kube_scheduler)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True,
    ).stdout.split()[-1]  # fmt: skip
    assert labels["io.layersched.inputs.go-version"] == go_version
    settings = labels["io.layersched.inputs.go-build"].split()
    assert {"CGO_ENABLED=0", "GOARCH=amd64", "GOOS=linux", "-trimpath=true"} <= set(settings)
    assert labels["io.layersched.inputs.kubernetes-module"].startswith(
        f"k8s.io/kubernetes {build.version} h1:"
    )
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", labels["io.layersched.inputs.go-modules"])
    root = tmp_path / "rootfs"
    list(unpack(image, root))
    assert (root / "usr/local/bin/kube-scheduler").read_bytes() == kube_scheduler.read_bytes()
    # an index of it: the chart's plugin mode installs by the index's digest
    index = build_kube_scheduler_index([image], build.version)
    [entry] = json.loads(index.index_bytes)["manifests"]
    assert entry["digest"] == image.digest
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}


def test_the_image_carries_the_product_and_not_the_harness(
    layersched_image: Any, tmp_path: Path
) -> None:
    # the testbeds and the simulator stay out of the production wheel (pyproject's
    # packages.find) and so out of the image; the product's packages are all there
    root = tmp_path / "rootfs"
    list(unpack(layersched_image, root))
    package = root / SITE_PACKAGES / "layersched"
    present = {p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {"testbed", "sim"}.isdisjoint(present), present
    product = {"core", "registry", "kube", "cri", "containerd"}
    product |= {"extender", "agent", "relay", "admission"}
    assert product | {"deploy", "images", "cli"} <= present, present


def test_the_images_cli_lists_the_products_commands(layersched_image: Any, tmp_path: Path) -> None:
    # running the image's own entry point needs chroot, hence root
    if os.geteuid() != 0:
        prereq.missing("running the image's programs needs chroot, which needs root")
    if shutil.which("chroot") is None:
        prereq.missing("chroot (coreutils) is not installed")
    root = tmp_path / "rootfs"
    list(unpack(layersched_image, root))
    done = subprocess.run(
        [str(shutil.which("chroot")), "--userspec=65532:65532", str(root), "layersched", "--help"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    # argparse lists each subcommand on a line of its own, indented four spaces
    commands = re.findall(r"^    ([a-z-]+)(?:\s|$)", done.stdout, re.M)
    assert commands == [
        "score", "layers", "estimate", "explain", "extender", "agent", "relay", "admission",
        "inventory", "deploy",
    ]  # fmt: skip
