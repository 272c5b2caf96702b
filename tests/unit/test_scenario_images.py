"""The scenario images as built (no registry): runnable, two images sharing exactly L1 and L2."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

from layersched.core.errors import InputError
from layersched_harness.testbed.idle_program import idle_program
from layersched_harness.testbed.scenario_images import (
    ENTRYPOINT_PATH,
    IMG1,
    IMG2,
    ImageSpec,
    ScenarioBuild,
    ScenarioSpec,
    base_layer,
    build_scenario,
    load_spec,
)

#: Small layers: the same code path as the real sizes, in milliseconds.
SMALL_LAYER_BYTES = 2048


def small_spec() -> ScenarioSpec:
    spec = load_spec()
    return spec.with_sizes(dict.fromkeys(spec.layers, SMALL_LAYER_BYTES))


@pytest.fixture(scope="module")
def built() -> ScenarioBuild:
    return build_scenario(small_spec())


def _members(build: ScenarioBuild, label: str) -> list[tuple[str, int]]:
    blob = build.layers[label].blob
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return [(m.name, m.mode) for m in tar.getmembers()]


def test_configs_carry_the_entrypoint(built: ScenarioBuild) -> None:
    for label in (IMG1, IMG2):
        config = json.loads(built.images[label].config_bytes)["config"]
        assert config["Entrypoint"] == [ENTRYPOINT_PATH] == ["/layersched-idle"]
        assert config["WorkingDir"] == "/"
        assert config["Labels"] == {"org.opencontainers.image.title": label}


def test_images_share_exactly_l1_and_l2(built: ScenarioBuild) -> None:
    # Img1 = L1 L2 L3, Img2 = L1 L2 L4: two common layer digests, one unique each.
    img1 = [layer.digest for layer in built.images[IMG1].layers]
    img2 = [layer.digest for layer in built.images[IMG2].layers]
    assert set(img1) & set(img2) == {built.layers["L1"].digest, built.layers["L2"].digest}
    assert img1 == [built.layers[label].digest for label in ("L1", "L2", "L3")]
    assert img2 == [built.layers[label].digest for label in ("L1", "L2", "L4")]
    assert len({blob.digest for blob in built.layers.values()}) == 4


def test_only_l1_holds_the_program(built: ScenarioBuild) -> None:
    # L1: the program (0755) first, then its content file; L2..L4: one content file each.
    (program, content), *_ = [_members(built, "L1")]
    assert program == ("layersched-idle", 0o755)
    assert content[0].startswith("layer-") and content[1] == 0o644
    for label in ("L2", "L3", "L4"):
        ((name, mode),) = _members(built, label)
        assert name.startswith("layer-") and mode == 0o644
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(built.layers["L1"].blob))) as tar:
        extracted = tar.extractfile("layersched-idle")
        assert extracted is not None
        assert extracted.read() == idle_program()


def test_building_twice_gives_identical_digests(built: ScenarioBuild) -> None:
    again = build_scenario(small_spec())
    assert {k: v.digest for k, v in again.layers.items()} == {
        k: v.digest for k, v in built.layers.items()
    }
    assert {k: v.digest for k, v in again.images.items()} == {
        k: v.digest for k, v in built.images.items()
    }


def test_entrypoint_needs_a_shared_base_layer() -> None:
    # Img2 starting with L2: no base layer both images start with, so no home for the program.
    spec = small_spec()
    images = dict(spec.images)
    images[IMG2] = ImageSpec("scenario/img2", "v1", ("L2", "L1", "L4"))
    with pytest.raises(InputError, match="list the shared layer"):
        base_layer(ScenarioSpec(layers=spec.layers, images=images))
    assert base_layer(spec) == "L1"
