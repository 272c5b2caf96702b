"""``layersched layers``: a LAYERS.json for a list of images, read from a registry on
loopback (a stand-in serving one manifest), that ``--layers`` then reads back; and what
it does when an image does not resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layersched.cli.main import main
from layersched.core.layers import StaticLayerSource
from tests.fixtures.extender import LOOPBACK, slow_registry

L1 = {"digest": "sha256:" + "1" * 64, "size": 24 * 1024 * 1024}
L2 = {"digest": "sha256:" + "2" * 64, "size": 16 * 1024 * 1024}


def test_writes_what_layers_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with slow_registry(0.0, [L1, L2]) as registry:
        host = f"{LOOPBACK}:{registry.server_port}"
        listed = tmp_path / "images.txt"
        # a list as kubectl prints it: duplicates once, comments and blank lines skipped
        listed.write_text(f"{host}/app:v1\n\n# a comment\n{host}/app:v1\n")
        out = tmp_path / "layers.json"
        argv = ["layers", f"{host}/base:v2", "--from", str(listed), "--out", str(out)]
        code = main(argv)
    _, err = capsys.readouterr()
    assert code == 0 and "resolved 2 of 2 images" in err
    document = json.loads(out.read_text())
    assert list(document) == [f"{host}/base:v2", f"{host}/app:v1"]
    assert document[f"{host}/app:v1"] == [L1, L2]
    # the file is the offline source --layers reads: same digests and sizes
    layers = StaticLayerSource.from_json(document, str(out)).resolve(f"{host}/app:v1")
    assert [(layer.digest, layer.size_bytes) for layer in layers] == [
        (L1["digest"], L1["size"]),
        (L2["digest"], L2["size"]),
    ]


def test_an_unresolved_image_writes_nothing_unless_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "layers.json"
    with slow_registry(0.0, [L1]) as registry:
        good = f"{LOOPBACK}:{registry.server_port}/app:v1"
        # nothing listens on port 9 of loopback: that registry is unreachable
        bad = f"{LOOPBACK}:9/gone:v1"
        common = ["--registry-retries", "0", "--registry-timeout-s", "2", "--out", str(out)]
        code = main(["layers", good, bad, *common])
        _, err = capsys.readouterr()
        assert code == 3 and not out.exists()
        assert "resolved 1 of 2 images" in err and "--registry-config FILE" in err
        code = main(["layers", good, bad, *common, "--partial"])
    _, err = capsys.readouterr()
    assert code == 0 and list(json.loads(out.read_text())) == [good]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no image given"),
        (["x:1", "--layers", "l.json"], "drop --layers"),
        (["--from", "/nonexistent/images.txt"], "--from /nonexistent/images.txt: cannot read"),
    ],
    ids=["nothing", "layers-flag", "missing-list"],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["layers", *argv])
    _, err = capsys.readouterr()
    assert code == 2 and message in err and "Traceback" not in err
