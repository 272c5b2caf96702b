"""The seed's scenario images, built deterministically and pushed to a testbed registry.

``harness/images/scenario/scenario.yml`` names four layers (seed, size) and two images:
Img1 = L1, L2, L3 and Img2 = L1, L2, L4. Each layer is one file of seeded
incompressible bytes (:func:`layersched.images.oci.random_layer`), so
every build of the same spec yields the same digests and a registry stores L1
and L2 once.

The images are runnable: the base layer both images share (L1) also holds
``/layersched-idle`` (:func:`layersched_harness.testbed.idle_program.idle_program`, a
232-byte static amd64 program that waits for SIGTERM or SIGINT and exits 0),
and both configs name it as ``Entrypoint`` with ``WorkingDir`` ``/``. So the
images still share exactly L1 and L2, and L3 and L4 stay one file each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from layersched.builds import REPO_ROOT
from layersched.core.errors import InputError
from layersched.images.oci import (
    EXECUTABLE_MODE,
    BuiltImage,
    LayerBlob,
    LayerFile,
    build_image,
    push_image,
    random_layer,
)
from layersched.registry import RegistryClient
from layersched_harness.testbed.idle_program import idle_program
from layersched_harness.testbed.scenario import ScenarioImages

#: The spec in the repository (``harness/images/scenario/scenario.yml``).
DEFAULT_SPEC_PATH = REPO_ROOT / "harness" / "images" / "scenario" / "scenario.yml"
#: The scenario's image labels, as the seed names them.
IMG1 = "Img1"
IMG2 = "Img2"
#: A layer of zero bytes would still be a (tiny) blob, but the scenario would be meaningless.
MIN_LAYER_BYTES = 1
#: The images' entrypoint, a file of their shared base layer.
ENTRYPOINT_PATH = "/layersched-idle"
WORKING_DIR = "/"
#: The label that tells the two images' configs apart.
TITLE_LABEL = "org.opencontainers.image.title"


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One layer: the seed of its content and its content size in bytes."""

    seed: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One image: repository and tag in the registry, and its layer labels, base first."""

    repository: str
    tag: str
    layers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ScenarioSpec:
    """Layers by label (L1..L4) and the two images (Img1, Img2)."""

    layers: Mapping[str, LayerSpec]
    images: Mapping[str, ImageSpec]

    def with_sizes(self, sizes: Mapping[str, int]) -> ScenarioSpec:
        """This spec with some layers' content sizes replaced."""
        unknown = sorted(set(sizes) - set(self.layers))
        if unknown:
            raise InputError(
                f"scenario layer sizes: unknown layer(s) {', '.join(unknown)}; "
                f"the layers are {', '.join(sorted(self.layers))}"
            )
        for label, size_bytes in sizes.items():
            _check_size(label, size_bytes, "sizes")
        layers = {
            label: replace(spec, size_bytes=sizes.get(label, spec.size_bytes))
            for label, spec in self.layers.items()
        }
        return ScenarioSpec(layers=layers, images=self.images)


def _check_size(label: str, size_bytes: object, where: str) -> None:
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool):
        raise InputError(f"{where}: layer {label} size must be an integer number of bytes")
    if size_bytes < MIN_LAYER_BYTES:
        raise InputError(f"{where}: layer {label} size must be positive, got {size_bytes}")


def parse_spec(doc: Any, where: str) -> ScenarioSpec:
    """A :class:`ScenarioSpec` from the YAML document at ``where`` (for errors)."""
    try:
        layers: dict[str, LayerSpec] = {}
        for label, entry in dict(doc["layers"]).items():
            _check_size(str(label), entry["size_bytes"], where)
            layers[str(label)] = LayerSpec(seed=int(entry["seed"]), size_bytes=entry["size_bytes"])
        images = {
            str(label): ImageSpec(
                repository=str(entry["repository"]),
                tag=str(entry["tag"]),
                layers=tuple(str(layer) for layer in entry["layers"]),
            )
            for label, entry in dict(doc["images"]).items()
        }
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(
            f"{where}: malformed scenario spec ({type(err).__name__}: {err}); "
            "see harness/images/scenario/README.md for its shape"
        ) from err
    if set(images) != {IMG1, IMG2}:
        raise InputError(f"{where}: the scenario needs exactly images {IMG1} and {IMG2}")
    for label, image in images.items():
        missing = [layer for layer in image.layers if layer not in layers]
        if missing:
            raise InputError(f"{where}: image {label} uses undefined layer(s) {missing}")
    return ScenarioSpec(layers=layers, images=images)


def load_spec(path: Path = DEFAULT_SPEC_PATH) -> ScenarioSpec:
    """Read and check the scenario spec (default: ``harness/images/scenario/scenario.yml``)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{path}: no scenario spec; pass the path of harness/images/scenario/scenario.yml"
        ) from None
    except (OSError, yaml.YAMLError) as err:
        raise InputError(f"{path}: unreadable scenario spec ({err})") from err
    return parse_spec(doc, str(path))


@dataclass(frozen=True, slots=True)
class ScenarioBuild:
    """The built layers by label (L1..L4) and images by label (Img1, Img2)."""

    layers: Mapping[str, LayerBlob]
    images: Mapping[str, BuiltImage]


def base_layer(spec: ScenarioSpec) -> str:
    """The label of the base layer every image starts with, which carries the entrypoint."""
    bases = {image.layers[0] for image in spec.images.values() if image.layers}
    if len(bases) != 1 or any(not image.layers for image in spec.images.values()):
        raise InputError(
            f"scenario spec: the images' first layers are {sorted(bases)}, but the entrypoint "
            "program lives in one base layer every image starts with; list the shared layer "
            "(L1) first in each image"
        )
    return bases.pop()


def build_scenario(spec: ScenarioSpec, *, console: Console | None = None) -> ScenarioBuild:
    """Build every layer and both images of ``spec`` (no registry involved).

    Shows rich progress on ``console`` (default: stderr) unless it is not a terminal.
    """
    base = base_layer(spec)
    entrypoint = LayerFile(ENTRYPOINT_PATH.lstrip("/"), idle_program(), EXECUTABLE_MODE)
    console = console or Console(stderr=True)
    blobs: dict[str, LayerBlob] = {}
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("building layers", total=len(spec.layers))
        for label, layer in sorted(spec.layers.items()):
            progress.update(task, description=f"building {label} ({layer.size_bytes:,} B)")
            extra = [entrypoint] if label == base else []
            blobs[label] = random_layer(layer.seed, layer.size_bytes, extra)
            progress.advance(task)
    images = {
        label: build_image(
            [blobs[layer] for layer in image.layers],
            labels={TITLE_LABEL: label},
            entrypoint=[ENTRYPOINT_PATH],
            working_dir=WORKING_DIR,
        )
        for label, image in sorted(spec.images.items())
    }
    return ScenarioBuild(layers=blobs, images=images)


def build_and_push_scenario(
    registry_addr: str,
    sizes: Mapping[str, int] | None = None,
    *,
    spec: ScenarioSpec | None = None,
    console: Console | None = None,
    push_address: str | None = None,
    tags: Sequence[str] = (),
) -> ScenarioImages:
    """Build Img1 and Img2 and push them to the plain-HTTP registry ``registry_addr``.

    ``sizes`` overrides layer content sizes by label (``{"L1": 8 << 20}``). Each image is
    also tagged every one of ``tags`` (a manifest each: the blobs are there already).
    ``push_address`` is where this machine reaches that registry when it differs (an
    SSH tunnel's local end); the references returned still name ``registry_addr``, the
    address the nodes pull from.
    Blobs the registry already holds are skipped, so a second call is quick.
    Shows rich progress on ``console`` (default: stderr) unless it is not a terminal.
    """
    spec = (spec or load_spec()).with_sizes(sizes or {})
    built = build_scenario(spec, console=console)
    refs: dict[str, str] = {}
    via = push_address or registry_addr
    with RegistryClient(insecure_hosts=(via,)) as client:
        for label, image in sorted(spec.images.items()):
            path = f"{image.repository}:{image.tag}"
            push_image(client, f"{via}/{path}", built.images[label])
            refs[label] = f"{registry_addr}/{path}"
            for tag in tags:
                push_image(client, f"{via}/{image.repository}:{tag}", built.images[label])
    return ScenarioImages(
        img1=refs[IMG1],
        img2=refs[IMG2],
        layers={label: (blob.digest, blob.size_bytes) for label, blob in built.layers.items()},
    )
