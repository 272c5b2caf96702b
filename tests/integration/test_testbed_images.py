"""The testbed's images in a REAL containerd: imported by name, and run.

* The pause (sandbox) archive from ``layersched testbed pause-image`` imports
  under exactly the name asked for, and the CRI plugin finds it by that name.
* A scenario image (small layer sizes, same code path as the real ones) runs
  as a container under runc: it stays up, and SIGTERM stops it with status 0
  at once (PID 1 of a container ignores signals it has no handler for).
* Img1 and Img2 imported side by side store L1 and L2 once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import tenacity

from layersched.cli.main import main as cli_main
from layersched.core.manifest import OCI_INDEX
from layersched.images.oci_layout import write_oci_archive
from layersched_harness.testbed.idle_program import idle_program
from layersched_harness.testbed.pause_image import build_pause_image
from layersched_harness.testbed.scenario_images import (
    IMG1,
    IMG2,
    ScenarioSpec,
    build_scenario,
    load_spec,
)
from tests.fixtures import prereq
from tests.fixtures.containerd import ContainerdProcess

pytestmark = pytest.mark.integration

CTR_BINARY = "ctr"
GCC_BINARY = "gcc"
#: The namespace the CRI plugin (and so the kubelet) sees.
K8S_NAMESPACE = "k8s.io"
#: The fixture's containerd has no overlay module to rely on.
SNAPSHOTTER = "native"
PAUSE_NAME = "layersched.local/pause:3.2"
#: A few KiB per layer keep the import quick; the build code is the same as at full size.
SMALL_LAYER_BYTES = 4096
CTR_TIMEOUT_S = 60.0
#: A container of a 232-byte static program starts in well under a second.
RUNNING_TIMEOUT_S = 15.0
RUNNING_POLL_S = 0.1
#: How long the container must stay up on its own before we signal it.
STAYS_UP_S = 1.0
#: The handler exits at once; runc and ctr need a moment to report it.
EXIT_TIMEOUT_S = 10.0

# Kubernetes' build/pause/linux/pause.c, reduced to what the sandbox needs.
PAUSE_C = """\
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void sigdown(int signo) { (void)signo; exit(0); }
int main(void) {
  struct sigaction sa = {.sa_handler = sigdown};
  if (sigaction(SIGINT, &sa, NULL) < 0) return 1;
  if (sigaction(SIGTERM, &sa, NULL) < 0) return 2;
  for (;;) pause();
}
"""


def small_spec() -> ScenarioSpec:
    """The repository's scenario spec with every layer SMALL_LAYER_BYTES of content."""
    spec = load_spec()
    return spec.with_sizes(dict.fromkeys(spec.layers, SMALL_LAYER_BYTES))


def ctr(containerd: ContainerdProcess, *args: str, namespace: str = K8S_NAMESPACE) -> str:
    """Run ``ctr`` against the test's containerd; its stdout, or a failed assertion."""
    command = [CTR_BINARY, "--address", str(containerd.socket), "--namespace", namespace, *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=CTR_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def ctr_containerd(containerd: ContainerdProcess) -> ContainerdProcess:
    if shutil.which(CTR_BINARY) is None:
        prereq.missing(f"{CTR_BINARY} not found on PATH (apt install containerd)")
    return containerd


def gcc_static_pause(directory: Path) -> Path:
    """``pause.c`` built with ``gcc -static``; skips when gcc or a static libc is missing."""
    if shutil.which(GCC_BINARY) is None:
        prereq.missing(f"{GCC_BINARY} not found on PATH (apt install gcc libc6-dev)")
    source, binary = directory / "pause.c", directory / "pause"
    source.write_text(PAUSE_C)
    result = subprocess.run(
        [GCC_BINARY, "-static", "-O2", "-o", str(binary), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        prereq.missing(
            f"gcc -static failed (no static libc? apt install libc6-dev): {result.stderr}"
        )
    return binary


def idle_elf(directory: Path) -> Path:
    """The scenario images' 232-byte idle program: a static stand-in for pause."""
    binary = directory / "idle"
    binary.write_bytes(idle_program())
    return binary


@pytest.mark.parametrize(
    "make_binary", [gcc_static_pause, idle_elf], ids=["gcc-static", "idle-elf"]
)
def test_pause_archive_imports_under_its_name(
    ctr_containerd: ContainerdProcess, tmp_path: Path, make_binary: Callable[[Path], Path]
) -> None:
    # The CLI writes the archive; the import names the image exactly PAUSE_NAME, and
    # the CRI plugin (through which kubelet looks its sandbox image up) finds it so.
    binary = make_binary(tmp_path)
    archive = tmp_path / "pause.tar"
    argv = ["testbed", "pause-image", "--binary", str(binary), "--name", PAUSE_NAME]
    assert cli_main([*argv, "--output", str(archive)]) == 0
    ctr(ctr_containerd, "images", "import", "--snapshotter", SNAPSHOTTER, str(archive))
    image_id = build_pause_image(binary.read_bytes()).config_digest
    assert_cri_lists(ctr_containerd, PAUSE_NAME, image_id)


@tenacity.retry(
    stop=tenacity.stop_after_delay(RUNNING_TIMEOUT_S),
    wait=tenacity.wait_fixed(RUNNING_POLL_S),
    reraise=True,
)
def assert_cri_lists(containerd: ContainerdProcess, name: str, image_id: str) -> None:
    # The CRI plugin learns of imported images from containerd's events, a moment
    # later, and then records each under its image ID (the config digest) as well:
    # `ctr images ls -q` lists the name and that ID record, no "import-<date>" name.
    assert sorted(ctr(containerd, "images", "ls", "-q").split()) == sorted([name, image_id])
    with containerd.client() as client:
        status = client.image_status(name)
    assert status.image is not None
    assert status.image.id == image_id
    assert status.image.repo_tags == (name,)


@tenacity.retry(
    stop=tenacity.stop_after_delay(RUNNING_TIMEOUT_S),
    wait=tenacity.wait_fixed(RUNNING_POLL_S),
    reraise=True,
)
def assert_task_running(containerd: ContainerdProcess, task: str) -> None:
    # `ctr task ls`: TASK PID STATUS
    rows = [line.split() for line in ctr(containerd, "task", "ls").splitlines()[1:]]
    assert [task, "RUNNING"] in [[row[0], row[-1]] for row in rows]


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"], ids=["sigterm", "sigint"])
def test_scenario_image_runs_until_signalled(
    ctr_containerd: ContainerdProcess, tmp_path: Path, signal_name: str
) -> None:
    # Img1 runs its entrypoint as PID 1, stays up, and exits 0 on the signal:
    # `ctr run` (foreground) exits with the container's status.
    image = build_scenario(small_spec()).images[IMG1]
    name = "layersched.local/scenario/img1:v1"
    archive = tmp_path / "img1.tar"
    write_oci_archive(archive, image, name)
    ctr(ctr_containerd, "images", "import", "--snapshotter", SNAPSHOTTER, str(archive))
    task = "idle"
    command = [
        CTR_BINARY,
        "--address",
        str(ctr_containerd.socket),
        "--namespace",
        K8S_NAMESPACE,
        "run",
        "--rm",
        "--snapshotter",
        SNAPSHOTTER,
        name,
        task,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert_task_running(ctr_containerd, task)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=STAYS_UP_S)
        ctr(ctr_containerd, "task", "kill", "--signal", signal_name, task)
        stdout, stderr = proc.communicate(timeout=EXIT_TIMEOUT_S)
        assert proc.returncode == 0, f"ctr run: {stdout}{stderr}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_img1_and_img2_share_l1_and_l2_in_the_content_store(
    ctr_containerd: ContainerdProcess, tmp_path: Path
) -> None:
    # 4 distinct layers (L1 and L2 once), 2 configs, 2 manifests: 8 blobs, plus the
    # archives' own index.json documents, which ctr stores too until containerd's
    # garbage collector removes them (unreferenced), so they may or may not be there.
    built = build_scenario(small_spec())
    for label in (IMG1, IMG2):
        archive = tmp_path / f"{label}.tar"
        write_oci_archive(
            archive, built.images[label], f"layersched.local/scenario/{label.lower()}:v1"
        )
        ctr(ctr_containerd, "images", "import", "--snapshotter", SNAPSHOTTER, str(archive))
    layers = {layer.digest for image in built.images.values() for layer in image.layers}
    assert layers == {blob.digest for blob in built.layers.values()}
    expected = layers | {
        d for image in built.images.values() for d in (image.digest, image.config_digest)
    }
    assert len(expected) == 8
    stored = ctr_containerd.content_digests()
    assert expected <= stored
    for digest in stored - expected:
        blob = ctr_containerd.content_dir / "sha256" / digest.removeprefix("sha256:")
        assert json.loads(blob.read_bytes())["mediaType"] == OCI_INDEX
